#include "rollout/trajectory_sink.hpp"

#include "actors/messages.hpp"

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
  std::string bytes;
  caf::typed_response_promise<bool> promise;
};

struct sink_state {
  std::unique_ptr<zmq::context_t> ctx;
  std::unique_ptr<zmq::socket_t> sock;
  sink_config cfg;
  std::deque<pending> queue;
  bool retry_scheduled = false;
  int64_t sent = 0, bytes = 0, retries = 0, errors = 0;
  size_t max_queued = 0;
  ~sink_state() {
    if (!queue.empty())
      spdlog::warn("trajectory sink: {} trajectories not handed to ZeroMQ at shutdown",
                   queue.size());
    sock.reset(); // linger applies here
    ctx.reset();
  }
  static inline const char* name = "kiln.trajectory_sink";
};
using sink_actor = caf::stateful_actor<sink_state>;

// Hands queued messages to ZeroMQ in order until it would block.
void flush(sink_actor* self) {
  auto& st = self->state;
  while (!st.queue.empty()) {
    auto& p = st.queue.front();
    // Zero copy: ZeroMQ frees the string once sent.
    auto* owned = new std::string(std::move(p.bytes));
    auto size = static_cast<int64_t>(owned->size()); // a sent message_t reads as empty
    zmq::message_t msg(
        owned->data(), owned->size(),
        [](void*, void* hint) { delete static_cast<std::string*>(hint); }, owned);
    zmq::send_result_t r;
    try {
      r = st.sock->send(msg, zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      // Kept and retried like a full queue (nothing is dropped); logged once per streak.
      if (st.errors++ == 0) spdlog::error("trajectory sink: send failed: {}", e.what());
      r = {};
    }
    if (!r) { // EAGAIN: the message was not taken; get the bytes back
      p.bytes = std::move(*owned);
      break;
    }
    st.errors = 0;
    ++st.sent;
    st.bytes += size;
    p.promise.deliver(true);
    st.queue.pop_front();
  }
  if (!st.queue.empty() && !st.retry_scheduled) {
    st.retry_scheduled = true;
    ++st.retries;
    self->delayed_send(self, std::chrono::milliseconds(st.cfg.retry_ms), flush_atom::value);
  }
}

struct zmq_parts {
  std::unique_ptr<zmq::context_t> ctx;
  std::unique_ptr<zmq::socket_t> sock;
};

// The socket is made by the spawner (so a bad endpoint is reported at once) and moved here; the
// actor's start is a full memory barrier, which is what ZeroMQ asks for to migrate a socket.
caf::behavior trajectory_sink(sink_actor* self, std::shared_ptr<zmq_parts> parts, sink_config cfg) {
  auto& st = self->state;
  st.cfg = cfg;
  st.ctx = std::move(parts->ctx);
  st.sock = std::move(parts->sock);
  return {
      [=](push_atom, std::string& bytes) -> caf::result<bool> {
        auto& st = self->state;
        auto rp = self->make_response_promise<bool>();
        st.queue.push_back({std::move(bytes), rp});
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
        nlohmann::json j = {{"sent", st.sent},
                            {"bytes", st.bytes},
                            {"queued", st.queue.size()},
                            {"max_queued", st.max_queued},
                            {"retries", st.retries}};
        return j.dump();
      },
  };
}

} // namespace

spawned_sink spawn_trajectory_sink(caf::actor_system& sys, const sink_config& cfg) {
  spawned_sink out;
  auto parts = std::make_shared<zmq_parts>();
  try {
    parts->ctx = std::make_unique<zmq::context_t>(1);
    parts->sock = std::make_unique<zmq::socket_t>(*parts->ctx, zmq::socket_type::push);
    parts->sock->set(zmq::sockopt::sndhwm, std::max(1, cfg.sndhwm));
    parts->sock->set(zmq::sockopt::linger, cfg.linger_ms);
    if (cfg.bind)
      parts->sock->bind(cfg.endpoint);
    else
      parts->sock->connect(cfg.endpoint);
  } catch (const zmq::error_t& e) {
    out.error = std::string("trajectory sink: cannot ") + (cfg.bind ? "bind " : "connect ") +
                cfg.endpoint + ": " + e.what();
    return out;
  }
  out.actor = sys.spawn<caf::detached>(trajectory_sink, parts, cfg);
  return out;
}

} // namespace kiln
