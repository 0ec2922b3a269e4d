#include "rollout/trajectory_sink.hpp"

#include "actors/messages.hpp"
#include "channels/channel_guard.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

namespace kiln {

namespace {

struct pending {
  zmq::message_t msg; // shared by reference count between the outputs' sends
  int64_t size = 0;   // a sent message_t reads as empty
  size_t next = 0;    // the first output that has not taken it yet
  caf::typed_response_promise<bool> promise;
};

struct zmq_parts {
  std::unique_ptr<zmq::context_t> ctx;
  std::unique_ptr<channel_guard> guard;
  std::vector<std::unique_ptr<zmq::socket_t>> socks;
};

struct sink_state {
  zmq_parts z;
  sink_config cfg;
  std::deque<pending> queue;
  bool retry_scheduled = false;
  int64_t sent = 0, bytes = 0, retries = 0, errors = 0, failed = 0;
  bool refused = false; // a server refused our CURVE key: pushes fail from then on
  size_t max_queued = 0;
  ~sink_state() {
    if (!queue.empty())
      spdlog::warn("trajectory sink: {} trajectories not handed to ZeroMQ at shutdown",
                   queue.size());
    queue.clear();
    z.socks.clear(); // linger applies here
    if (z.guard && z.guard->curve())
      spdlog::info("trajectory sink: channel {}", z.guard->summary());
    z.guard.reset();
    z.ctx.reset();
  }
  static inline const char* name = "kiln.trajectory_sink";
};
using sink_actor = caf::stateful_actor<sink_state>;

const char* refused_text = "trajectory sink: a server refused this process's CURVE key (see the "
                           "error above): trajectories cannot be delivered";

// A server that refused our key will not take a message on that connection: waiting (the
// backpressure answer to a slow consumer) would hold every episode for the sink timeout, so the
// queued and later pushes fail at once.
bool refused(sink_actor* self) {
  auto& st = self->state;
  if (!st.refused && st.z.guard && st.z.guard->counters().refused_by_server > 0) {
    st.refused = true;
    for (auto& p : st.queue)
      p.promise.deliver(caf::make_error(caf::sec::runtime_error, refused_text));
    st.failed += static_cast<int64_t>(st.queue.size());
    st.queue.clear();
  }
  return st.refused;
}

// Hands queued messages to every output in order until one would block.
void flush(sink_actor* self) {
  auto& st = self->state;
  if (refused(self)) return;
  while (!st.queue.empty()) {
    auto& p = st.queue.front();
    for (; p.next < st.z.socks.size(); ++p.next) {
      zmq::message_t part;
      part.copy(p.msg);
      zmq::send_result_t r;
      try {
        r = st.z.socks[p.next]->send(part, zmq::send_flags::dontwait);
      } catch (const zmq::error_t& e) {
        // Kept and retried like a full queue (nothing is dropped); logged once per streak.
        if (st.errors++ == 0)
          spdlog::error("trajectory sink: send to {} failed: {}", st.cfg.outputs[p.next].endpoint,
                        e.what());
        r = {};
      }
      if (!r) break; // EAGAIN: this output did not take it; retry from here
      st.errors = 0;
    }
    if (p.next < st.z.socks.size()) break;
    ++st.sent;
    st.bytes += p.size;
    p.promise.deliver(true);
    st.queue.pop_front();
  }
  if (!st.queue.empty() && !st.retry_scheduled) {
    st.retry_scheduled = true;
    ++st.retries;
    self->delayed_send(self, std::chrono::milliseconds(st.cfg.retry_ms), flush_atom::value);
  }
}

// The sockets are made by the spawner (so a bad endpoint is reported at once) and moved here; the
// actor's start is a full memory barrier, which is what ZeroMQ asks for to migrate a socket.
caf::behavior trajectory_sink(sink_actor* self, std::shared_ptr<zmq_parts> parts, sink_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.z = std::move(*parts);
  return {
      [=](push_atom, std::string& bytes) -> caf::result<bool> {
        auto& st = self->state;
        if (refused(self)) {
          ++st.failed;
          return caf::make_error(caf::sec::runtime_error, refused_text);
        }
        auto rp = self->make_response_promise<bool>();
        // Zero copy: ZeroMQ frees the string once every output sent it.
        auto* owned = new std::string(std::move(bytes));
        pending p;
        p.size = static_cast<int64_t>(owned->size());
        p.msg = zmq::message_t(
            owned->data(), owned->size(),
            [](void*, void* hint) { delete static_cast<std::string*>(hint); }, owned);
        p.promise = rp;
        st.queue.push_back(std::move(p));
        st.max_queued = std::max(st.max_queued, st.queue.size());
        flush(self);
        return rp;
      },
      [=](flush_atom) {
        self->state.retry_scheduled = false;
        flush(self);
      },
      [=](server_stats_atom) {
        auto& st = self->state;
        nlohmann::json outs = nlohmann::json::array();
        for (const auto& o : st.cfg.outputs)
          outs.push_back({{"endpoint", o.endpoint}, {"bind", o.bind}});
        nlohmann::json j = {{"sent", st.sent},           {"bytes", st.bytes},
                            {"queued", st.queue.size()}, {"max_queued", st.max_queued},
                            {"retries", st.retries},     {"outputs", outs},
                            {"failed", st.failed}};
        auto c = st.z.guard->counters();
        j["channel"] = {{"curve", st.z.guard->curve()},
                        {"accepted", c.accepted},
                        {"refused_key", c.refused_key},
                        {"failed_handshakes", c.failed_handshakes},
                        {"refused_by_server", c.refused_by_server}};
        return j.dump();
      },
  };
}

} // namespace

spawned_sink spawn_trajectory_sink(caf::actor_system& sys, const sink_config& cfg) {
  spawned_sink out;
  if (cfg.outputs.empty()) {
    out.error = "trajectory sink: no output endpoint";
    return out;
  }
  auto parts = std::make_shared<zmq_parts>();
  parts->ctx = std::make_unique<zmq::context_t>(1);
  auto g = channel_guard::create(*parts->ctx, cfg.curve, "trajectory sink");
  if (!g) {
    out.error = "trajectory sink: " + g.message();
    return out;
  }
  parts->guard = std::move(*g);
  for (const auto& o : cfg.outputs) {
    try {
      auto sock = std::make_unique<zmq::socket_t>(*parts->ctx, zmq::socket_type::push);
      sock->set(zmq::sockopt::sndhwm, std::max(1, o.sndhwm));
      sock->set(zmq::sockopt::linger, cfg.linger_ms);
      if (!o.internal)
        if (auto st = parts->guard->secure(*sock, o.endpoint, o.bind); !st) {
          out.error = "trajectory sink: " + st.message();
          parts->socks.clear();
          return out;
        }
      if (o.bind)
        sock->bind(o.endpoint);
      else
        sock->connect(o.endpoint);
      parts->socks.push_back(std::move(sock));
    } catch (const zmq::error_t& e) {
      out.error = std::string("trajectory sink: cannot ") + (o.bind ? "bind " : "connect ") +
                  o.endpoint + ": " + e.what();
      parts->socks.clear();
      return out;
    }
  }
  out.actor = sys.spawn<caf::detached>(trajectory_sink, parts, cfg);
  return out;
}

} // namespace kiln
