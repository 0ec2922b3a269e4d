#include "learner/weight_publisher.hpp"

#include "channels/channel_guard.hpp"

#include <spdlog/spdlog.h>
#include <zmq.hpp>

namespace kiln {

struct weight_publisher::impl {
  // Destroyed bottom-up: the socket, then the guard, then the context (which waits for both).
  zmq::context_t ctx{1};
  std::unique_ptr<channel_guard> guard;
  std::unique_ptr<zmq::socket_t> pub;
  std::string last; // the newest weight message
  std::chrono::steady_clock::time_point last_sent{};
};

weight_publisher::weight_publisher(std::unique_ptr<impl> p) : p_(std::move(p)) {}
weight_publisher::~weight_publisher() = default;

expected<std::unique_ptr<weight_publisher>> weight_publisher::bind(const std::string& endpoint,
                                                                   const curve_config& curve) {
  auto p = std::make_unique<impl>();
  auto g = channel_guard::create(p->ctx, curve, "learner PUB");
  if (!g) return error{"learner: " + g.message()};
  p->guard = std::move(*g);
  try {
    p->pub = std::make_unique<zmq::socket_t>(p->ctx, zmq::socket_type::pub);
    p->pub->set(zmq::sockopt::linger, 0);
    p->pub->set(zmq::sockopt::sndhwm, 4);
    if (auto st = p->guard->secure(*p->pub, endpoint, true); !st)
      return error{"learner: PUB: " + st.message()};
    p->pub->bind(endpoint);
  } catch (const zmq::error_t& e) {
    return error{"learner: cannot bind PUB at '" + endpoint + "': " + e.what()};
  }
  return std::unique_ptr<weight_publisher>(new weight_publisher(std::move(p)));
}

void weight_publisher::publish(std::string message) {
  p_->last = std::move(message);
  send_last();
}

void weight_publisher::resend_if_idle(std::chrono::milliseconds idle) {
  if (std::chrono::steady_clock::now() - p_->last_sent > idle) send_last();
}

void weight_publisher::send_last() {
  if (p_->last.empty()) return;
  try {
    p_->pub->send(zmq::buffer(p_->last), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    spdlog::warn("learner: weight publish failed: {}", e.what());
  }
  p_->last_sent = std::chrono::steady_clock::now();
}

std::string weight_publisher::channel_summary() const { return p_->guard->summary(); }

} // namespace kiln
