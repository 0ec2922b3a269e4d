#include "pool/pool_router.hpp"

#include "jobs/job.hpp"
#include "pool/device_pool.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>

namespace kiln {

namespace {

// A job the router owes an answer: settled once, by the member's reply or, when the member went
// down first, by the retry on another member (the late reply or error is then ignored).
struct pending_job {
  std::string job, program;
  caf::typed_response_promise<std::string> rp;
  bool settled = false;
};
using pending_ptr = std::shared_ptr<pending_job>;

struct member_state {
  pool_member m;
  std::vector<pending_ptr> in_flight;
  int64_t routed = 0;
  bool up = true;
  int64_t lost = 0, rejoined = 0; // times it went down / came back
  bool refused_logged = false;    // came back with another backend (logged once)
  std::chrono::steady_clock::time_point down_since;
};

struct router_state {
  std::vector<member_state> members;
  int64_t retries = 0, failed = 0;
  static inline const char* name = "kiln.pool_router";
};

// Router-internal messages (never cross a process): a lost remote member's reconnect attempts.
using rejoin_atom = caf::atom_constant<caf::atom("rejoin")>;
using rejoined_atom = caf::atom_constant<caf::atom("rejoined")>;
constexpr auto rejoin_every = std::chrono::seconds(2);
constexpr auto rejoin_connect_timeout = std::chrono::seconds(3);
using router_actor = caf::stateful_actor<router_state>;

// A job's whole life in a member pool (queue included) is bounded by the episode's own deadline;
// this only keeps a lost reply from pinning a promise forever (CAF 0.17 durations: no hours).
constexpr auto member_timeout = std::chrono::seconds(3600);

// The up member with the fewest jobs in flight per device.
int pick(const router_state& st) {
  int best = -1;
  double best_load = 0;
  for (size_t i = 0; i < st.members.size(); ++i) {
    const auto& m = st.members[i];
    if (!m.up) continue;
    double load = (static_cast<double>(m.in_flight.size()) + 1.0) / std::max(1, m.m.devices);
    if (best < 0 || load < best_load) {
      best = static_cast<int>(i);
      best_load = load;
    }
  }
  return best;
}

std::string failure(const std::string& job_bytes, const std::string& why) {
  auto j = decode_job(job_bytes);
  outcome o = j ? make_outcome(*j, outcome_kind::runtime_error, why) : outcome{};
  o.kind = outcome_kind::runtime_error;
  o.message = why;
  return encode(o);
}

// False when the member no longer held the job (it was re-sent when the member was lost).
bool drop(member_state& m, const pending_ptr& p) {
  auto it = std::find(m.in_flight.begin(), m.in_flight.end(), p);
  if (it == m.in_flight.end()) return false;
  m.in_flight.erase(it);
  return true;
}

void forward(router_actor* self, pending_ptr p);

// The member is gone (its node died, the connection broke): its jobs are idempotent, so each one
// still owed an answer goes to another member.
void member_lost(router_actor* self, size_t i, const std::string& why) {
  auto& m = self->state.members[i];
  if (!m.up) return;
  m.up = false;
  ++m.lost;
  m.down_since = std::chrono::steady_clock::now();
  spdlog::warn("pool router: pool {} lost ({}); {} jobs in flight go to the others", m.m.name, why,
               m.in_flight.size());
  auto owed = std::move(m.in_flight);
  m.in_flight.clear();
  if (!m.m.local) self->delayed_send(self, rejoin_every, rejoin_atom::value, i);
  for (auto& p : owed)
    if (!p->settled) {
      ++self->state.retries;
      forward(self, p);
    }
}

// One reconnect attempt to a lost remote member, off the router (connecting blocks): the answer
// is (rejoined, i, pool, backend, devices), or (rejoin, i, why) and the router tries again later.
void try_rejoin(router_actor* self, size_t i) {
  auto& m = self->state.members[i];
  if (m.up) return;
  caf::actor router = caf::actor_cast<caf::actor>(self);
  std::string name = m.m.name;
  self->system().spawn<caf::detached>([router, name, i](caf::blocking_actor* b) {
    auto r = connect_pool(b->system(), name, rejoin_connect_timeout);
    if (r)
      b->send(router, rejoined_atom::value, i, r->pool, r->backend, r->devices);
    else
      b->send(router, rejoin_atom::value, i, r.message());
  });
}

void rejoined(router_actor* self, size_t i, caf::actor pool, const std::string& backend,
              int devices) {
  auto& m = self->state.members[i];
  if (m.up) return;
  if (backend != m.m.backend) { // the address serves something else now: refused, tried later
    if (!m.refused_logged)
      spdlog::error("pool router: pool {} came back serving the {} backend, not {}: refused "
                    "(asked again every {} s)",
                    m.m.name, backend, m.m.backend, rejoin_every.count());
    m.refused_logged = true;
    self->delayed_send(self, rejoin_every, rejoin_atom::value, i);
    return;
  }
  m.refused_logged = false;
  double down_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - m.down_since).count();
  m.m.pool = std::move(pool);
  m.m.devices = devices;
  m.up = true;
  ++m.rejoined;
  self->monitor(m.m.pool);
  spdlog::info("pool router: pool {} rejoined after {:.1f} s down", m.m.name, down_s);
}

void forward(router_actor* self, pending_ptr p) {
  auto& st = self->state;
  int i = pick(st);
  if (i < 0) {
    ++st.failed;
    p->settled = true;
    p->rp.deliver(failure(p->job, "pool router: no pool is up"));
    return;
  }
  auto& m = st.members[static_cast<size_t>(i)];
  m.in_flight.push_back(p);
  ++m.routed;
  self->request(m.m.pool, member_timeout, evaluate_atom::value, p->job, p->program)
      .then(
          [=](std::string& reply) {
            drop(self->state.members[static_cast<size_t>(i)], p);
            if (p->settled) return;
            p->settled = true;
            p->rp.deliver(std::move(reply));
          },
          [=](caf::error& err) {
            auto& me = self->state.members[static_cast<size_t>(i)];
            // not held any more: member_lost already re-sent it (and a member that rejoined
            // since is not to blame for its old connection's errors)
            if (!drop(me, p) || p->settled) return;
            if (err == caf::sec::request_timeout) {
              ++self->state.failed;
              p->settled = true;
              p->rp.deliver(
                  failure(p->job, "pool " + me.m.name + " did not answer within an hour"));
              return;
            }
            if (me.up) {
              me.in_flight.push_back(p); // member_lost retries everything it still holds
              member_lost(self, static_cast<size_t>(i), self->system().render(err));
            } else {
              ++self->state.retries;
              forward(self, p);
            }
          });
}

// Sums counters, concatenates device rows (each tagged with its node), keeps the largest wall.
void merge_stats(nlohmann::json& into, const nlohmann::json& part, const std::string& node) {
  for (const char* k : {"requests", "cache_hits", "cache_misses"})
    into[k] = into.value(k, int64_t{0}) + part.value(k, int64_t{0});
  if (part.contains("outcomes") && part["outcomes"].is_object())
    for (auto& [k, v] : part["outcomes"].items())
      if (v.is_number())
        into["outcomes"][k] = into["outcomes"].value(k, int64_t{0}) + v.get<int64_t>();
  into["wall_ms"] = std::max(into.value("wall_ms", 0.0), part.value("wall_ms", 0.0));
  into["compile_ms_p50"] =
      std::max(into.value("compile_ms_p50", 0.0), part.value("compile_ms_p50", 0.0));
  if (part.contains("devices") && part["devices"].is_array())
    for (auto d : part["devices"]) {
      d["node"] = node;
      into["devices"].push_back(d);
    }
}

caf::behavior pool_router(router_actor* self, std::vector<pool_member> members) {
  for (auto& m : members) {
    if (m.local)
      self->link_to(m.pool);
    else
      self->monitor(m.pool);
    member_state ms;
    ms.m = std::move(m);
    self->state.members.push_back(std::move(ms));
  }
  self->set_down_handler([=](caf::down_msg& dm) {
    for (size_t i = 0; i < self->state.members.size(); ++i)
      if (self->state.members[i].up && self->state.members[i].m.pool.address() == dm.source)
        member_lost(self, i, self->system().render(dm.reason));
  });
  return {
      [=](rejoin_atom, size_t i) {
        if (i < self->state.members.size()) try_rejoin(self, i);
      },
      [=](rejoin_atom, size_t i, const std::string& why) { // an attempt failed: later, again
        if (i >= self->state.members.size() || self->state.members[i].up) return;
        spdlog::debug("pool router: pool {} still down: {}", self->state.members[i].m.name, why);
        self->delayed_send(self, rejoin_every, rejoin_atom::value, i);
      },
      [=](rejoined_atom, size_t i, caf::actor& pool, std::string& backend, int devices) {
        if (i < self->state.members.size()) rejoined(self, i, std::move(pool), backend, devices);
      },
      [=](evaluate_atom, std::string& job, std::string& program) {
        auto p = std::make_shared<pending_job>();
        p->job = std::move(job);
        p->program = std::move(program);
        p->rp = self->make_response_promise<std::string>();
        forward(self, p);
        return p->rp;
      },
      [=](stats_atom) {
        auto rp = self->make_response_promise<std::string>();
        struct gather {
          int left = 0;
          nlohmann::json merged;
        };
        auto g = std::make_shared<gather>();
        g->merged = {{"devices", nlohmann::json::array()}, {"outcomes", nlohmann::json::object()}};
        auto nodes = nlohmann::json::array();
        for (const auto& m : self->state.members)
          nodes.push_back({{"name", m.m.name},
                           {"backend", m.m.backend},
                           {"device_name", m.m.device_name},
                           {"devices", m.m.devices},
                           {"routed", m.routed},
                           {"in_flight", m.in_flight.size()},
                           {"up", m.up},
                           {"lost", m.lost},
                           {"rejoined", m.rejoined}});
        g->merged["nodes"] = nodes;
        g->merged["retries"] = self->state.retries;
        g->merged["failed"] = self->state.failed;
        auto finish = [=]() mutable {
          auto& j = g->merged;
          int64_t hits = j.value("cache_hits", int64_t{0}),
                  misses = j.value("cache_misses", int64_t{0});
          j["cache_hit_rate"] = hits + misses ? double(hits) / double(hits + misses) : 0.0;
          rp.deliver(j.dump());
        };
        for (const auto& m : self->state.members) g->left += m.up;
        if (g->left == 0) {
          finish();
          return rp;
        }
        for (const auto& m : self->state.members) {
          if (!m.up) continue;
          std::string name = m.m.name;
          self->request(m.m.pool, std::chrono::seconds(10), stats_atom::value)
              .then(
                  [=](std::string& s) mutable {
                    auto part = nlohmann::json::parse(s, nullptr, false);
                    if (part.is_object()) merge_stats(g->merged, part, name);
                    if (--g->left == 0) finish();
                  },
                  [=](caf::error&) mutable {
                    if (--g->left == 0) finish();
                  });
        }
        return rp;
      },
  };
}

} // namespace

caf::actor spawn_pool_router(caf::actor_system& sys, std::vector<pool_member> members) {
  return sys.spawn(pool_router, std::move(members));
}

} // namespace kiln
