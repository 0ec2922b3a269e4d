#include "pool/device_pool.hpp"

#include "data/task_check.hpp"
#include "data/task_hash.hpp"
#include "submission/submission_kind.hpp"

#include <algorithm>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <tuple>

namespace kiln {

namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

// Compiles are blocking (a compiler subprocess, or NVRTC): each worker is a detached actor. The
// request's kind builds it (submission/submission_kind.hpp).
caf::behavior compile_worker(caf::event_based_actor*, build_options opts) {
  return {[=](compile_atom, int kind, int backend, const std::string& source,
              const std::string& plan_json, bool fast_math) {
    compile_request r{static_cast<submission_kind>(kind), static_cast<backend_kind>(backend),
                      source, plan_json, fast_math};
    auto a = build_submission(r, opts);
    if (!a) return std::make_tuple(false, a.message(), std::string(), false, 0.0);
    return std::make_tuple(true, a->path, a->key, a->cache_hit, a->compile_ms);
  }};
}

// One job at a time in a disposable executor: the actor's mailbox is the device's queue.
caf::behavior device_actor(caf::event_based_actor*, executor_options opts) {
  auto client = std::make_shared<executor_client>(opts);
  auto announced = std::make_shared<bool>(false);
  return {[=](run_job_atom, const std::string& bytes) {
    auto j = decode_job(bytes);
    if (!j) {
      outcome o;
      o.kind = outcome_kind::runtime_error;
      o.message = "device: malformed job: " + j.message();
      return encode(o);
    }
    auto o = client->run(*j);
    if (!*announced && client->hello()) { // once: what the sandbox and the clock reader got
      *announced = true;
      const auto& h = *client->hello();
      spdlog::info("device {}: executor pid {} (network {}, landlock abi {}); {}{}",
                   opts.cuda_device >= 0 ? "cuda:" + std::to_string(opts.cuda_device) : "cpu",
                   h.pid, h.net_isolated ? "isolated" : "shared", h.landlock_abi, h.clocks,
                   h.drain_slack_ms > 0 ? fmt::format("; drain slack {:.3f} ms", h.drain_slack_ms)
                                        : std::string());
    }
    return encode(o);
  }};
}

struct device_slot {
  caf::actor actor;
  int in_flight = 0;
  clock_type::time_point busy_since;
  double busy_ms = 0;
  int64_t jobs = 0;
};

struct pool_state {
  pool_config cfg;
  std::vector<caf::actor> workers;
  std::size_t next_worker = 0;
  std::vector<device_slot> devices;
  std::map<uint64_t, artifact_ref> compiled; // generated source hash -> artifact
  std::map<uint64_t,
           std::vector<std::function<void(bool, const artifact_ref&, const std::string&)>>>
      pending;
  clock_type::time_point start = clock_type::now();
  int64_t requests = 0, cache_hits = 0, cache_misses = 0, compile_errors = 0;
  std::vector<double> compile_ms;
  std::map<std::string, int64_t> outcomes;
  static inline const char* name = "kiln.device_pool";
};

using pool_actor = caf::stateful_actor<pool_state>;

outcome failed(const job& j, outcome_kind k, const std::string& msg) {
  return make_outcome(j, k, msg);
}

void dispatch(pool_actor* self, job j, caf::response_promise rp, clock_type::time_point t0) {
  auto& devs = self->state.devices;
  std::size_t d = 0;
  for (std::size_t i = 1; i < devs.size(); ++i)
    if (devs[i].in_flight < devs[d].in_flight) d = i;
  if (devs[d].in_flight++ == 0) devs[d].busy_since = clock_type::now();
  auto wait = std::chrono::milliseconds(static_cast<int64_t>((j.timeout_s + 120) * 1000));
  double compile_ms = j.artifact.compile_ms;
  auto finish = [=](outcome o) mutable {
    auto& dev = self->state.devices[d];
    if (--dev.in_flight == 0) dev.busy_ms += ms_since(dev.busy_since);
    ++dev.jobs;
    o.compile_ms = compile_ms;
    o.queue_ms = std::max(0.0, ms_since(t0) - o.compile_ms - o.device_ms);
    ++self->state.outcomes[to_string(o.kind)];
    rp.deliver(encode(o));
  };
  self->request(devs[d].actor, wait, run_job_atom::value, encode(j))
      .then(
          [=](std::string& reply) mutable {
            auto o = decode_outcome(reply);
            finish(o ? *o : failed(j, outcome_kind::runtime_error, "device: " + o.message()));
          },
          [=](caf::error& err) mutable {
            finish(failed(j, outcome_kind::timeout,
                          "device did not answer: " + self->system().render(err)));
          });
}

caf::behavior device_pool(pool_actor* self, pool_config cfg) {
  self->state.cfg = cfg;
  for (int i = 0; i < std::max(1, cfg.compile_workers); ++i) {
    auto w = self->system().spawn<caf::detached>(compile_worker,
                                                 build_options{cfg.compile, cfg.cuda_arch});
    self->link_to(w);
    self->state.workers.push_back(w);
  }
  for (int i = 0; i < std::max(1, cfg.devices); ++i) {
    executor_options eo = cfg.executor;
    if (cfg.backend == backend_kind::cuda) eo.cuda_device = cfg.first_device + i;
    auto d = self->system().spawn<caf::detached>(device_actor, eo);
    self->link_to(d);
    device_slot slot;
    slot.actor = d;
    self->state.devices.push_back(slot);
  }
  return {
      [=](evaluate_atom, const std::string& job_bytes, const std::string& program_text) {
        auto rp = self->make_response_promise();
        auto t0 = clock_type::now();
        ++self->state.requests;
        auto decoded = decode_job(job_bytes);
        if (!decoded) {
          outcome o;
          o.kind = outcome_kind::runtime_error;
          o.message = "pool: malformed job: " + decoded.message();
          rp.deliver(encode(o));
          return;
        }
        job j = std::move(*decoded);
        // The wire form carries the spec, not inferred shapes: the generator needs them.
        if (auto st = check_task(j.spec); !st) {
          rp.deliver(
              encode(failed(j, outcome_kind::runtime_error, "pool: bad task: " + st.message())));
          return;
        }
        if (j.kind == job_kind::baseline) {
          dispatch(self, std::move(j), rp, t0);
          return;
        }
        auto reject = [&](const std::string& msg) {
          ++self->state.compile_errors;
          ++self->state.outcomes["compile_error"];
          rp.deliver(encode(failed(j, outcome_kind::compile_error, msg)));
        };
        auto request = prepare_submission(program_text, j.spec, cfg.backend);
        if (!request) return reject(request.message());
        const compile_request& r = *request;
        artifact_loader loader = loader_of(info(r.kind), cfg.backend);
        uint64_t h = fnv1a64(std::string(to_string(r.kind)) + '\0' + r.source + r.plan_json);
        auto run = [=](bool ok, const artifact_ref& a, const std::string& log) mutable {
          if (!ok) {
            ++self->state.compile_errors;
            ++self->state.outcomes["compile_error"];
            rp.deliver(encode(failed(j, outcome_kind::compile_error, log)));
            return;
          }
          j.artifact = a;
          dispatch(self, j, rp, t0);
        };
        auto& st = self->state;
        if (auto it = st.compiled.find(h); it != st.compiled.end()) {
          ++st.cache_hits;
          artifact_ref a = it->second;
          a.compile_ms = 0;
          run(true, a, {});
          return;
        }
        auto& waiting = st.pending[h];
        waiting.push_back(run);
        if (waiting.size() > 1) { // the same program is compiling already
          ++st.cache_hits;
          return;
        }
        auto worker = st.workers[st.next_worker++ % st.workers.size()];
        auto wait = std::chrono::seconds(static_cast<int64_t>(cfg.compile.timeout_s + 60));
        auto done = [=](bool ok, const artifact_ref& a, const std::string& log) {
          auto conts = std::move(self->state.pending[h]);
          self->state.pending.erase(h);
          for (auto& c : conts) c(ok, a, log);
        };
        self->request(worker, wait, compile_atom::value, static_cast<int>(r.kind),
                      static_cast<int>(r.backend), r.source, r.plan_json, r.fast_math)
            .then(
                [=](bool ok, std::string& path_or_log, std::string& key, bool hit, double ms) {
                  artifact_ref a;
                  a.loader = loader;
                  if (ok) {
                    a.path = path_or_log;
                    a.key = key;
                    a.compile_ms = ms;
                    self->state.compiled[h] = a;
                    if (hit)
                      ++self->state.cache_hits;
                    else {
                      ++self->state.cache_misses;
                      self->state.compile_ms.push_back(ms);
                    }
                  }
                  done(ok, a, ok ? std::string() : path_or_log);
                },
                [=](caf::error& err) {
                  done(false, {}, "compiler did not answer: " + self->system().render(err));
                });
      },
      [=](stats_atom) {
        auto& st = self->state;
        nlohmann::json j;
        double wall = ms_since(st.start);
        j["backend"] = to_string(st.cfg.backend);
        j["device_name"] = st.cfg.device_name;
        j["requests"] = st.requests;
        j["outcomes"] = st.outcomes;
        j["cache_hits"] = st.cache_hits;
        j["cache_misses"] = st.cache_misses;
        j["cache_hit_rate"] = st.cache_hits + st.cache_misses
                                  ? static_cast<double>(st.cache_hits) /
                                        static_cast<double>(st.cache_hits + st.cache_misses)
                                  : 0.0;
        auto ms = st.compile_ms;
        std::sort(ms.begin(), ms.end());
        j["compile_ms_p50"] = ms.empty() ? 0.0 : ms[ms.size() / 2];
        j["wall_ms"] = wall;
        auto devs = nlohmann::json::array();
        for (const auto& d : st.devices) {
          double busy = d.busy_ms + (d.in_flight > 0 ? ms_since(d.busy_since) : 0.0);
          devs.push_back({{"jobs", d.jobs}, {"busy_share", wall > 0 ? busy / wall : 0.0}});
        }
        j["devices"] = devs;
        return j.dump();
      },
  };
}

} // namespace

caf::actor spawn_device_pool(caf::actor_system& sys, const pool_config& cfg) {
  return sys.spawn(device_pool, cfg);
}

pool_handle::pool_handle(caf::actor_system& sys, const pool_config& cfg)
    : sys_(sys), pool_(spawn_device_pool(sys, cfg)), backend_(cfg.backend) {}

pool_handle::pool_handle(caf::actor_system& sys, caf::actor pool, backend_kind backend)
    : sys_(sys), pool_(std::move(pool)), backend_(backend) {}

pool_handle::~pool_handle() { caf::anon_send_exit(pool_, caf::exit_reason::user_shutdown); }

outcome pool_handle::run(const job& j, const std::string& program) {
  caf::scoped_actor self{sys_};
  outcome result = make_outcome(j, outcome_kind::timeout, "pool did not answer");
  auto wait = std::chrono::milliseconds(static_cast<int64_t>((j.timeout_s + 300) * 1000));
  self->request(pool_, wait, evaluate_atom::value, encode(j), program)
      .receive(
          [&](std::string& reply) {
            auto o = decode_outcome(reply);
            if (o)
              result = std::move(*o);
            else
              result.message =
                  "pool: " + o.message() + " (" + std::to_string(reply.size()) + " bytes)";
          },
          [&](caf::error& err) { result.message = "pool did not answer: " + sys_.render(err); });
  return result;
}

std::string pool_handle::stats() {
  caf::scoped_actor self{sys_};
  std::string out = "{}";
  self->request(pool_, std::chrono::seconds(10), stats_atom::value)
      .receive([&](std::string& s) { out = std::move(s); }, [&](caf::error&) {});
  return out;
}

} // namespace kiln
