#include "learner/intake.hpp"

#include "rollout/token_space.hpp"

#include <spdlog/spdlog.h>
#include <zmq.hpp>

namespace kiln {

struct zmq_context_holder {
  zmq::context_t ctx{1};
  std::unique_ptr<channel_guard> guard; // destroyed before the context
};

bool trajectory_queue::push(trajectory t) {
  std::unique_lock<std::mutex> lock(mu_);
  not_full_.wait(lock, [&] { return closed_ || q_.size() < capacity_; });
  if (closed_) return false;
  q_.push_back(std::move(t));
  not_empty_.notify_one();
  return true;
}

bool trajectory_queue::try_push(trajectory t) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ || q_.size() >= capacity_) return false;
  q_.push_back(std::move(t));
  not_empty_.notify_one();
  return true;
}

std::optional<trajectory> trajectory_queue::pop(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!not_empty_.wait_for(lock, wait, [&] { return closed_ || !q_.empty(); })) return {};
  if (q_.empty()) return {};
  auto t = std::move(q_.front());
  q_.pop_front();
  not_full_.notify_one();
  return t;
}

void trajectory_queue::close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  not_empty_.notify_all();
  not_full_.notify_all();
}

bool trajectory_queue::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

size_t trajectory_queue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return q_.size();
}

status check_consistency(const trajectory& t) {
  if (t.id.empty()) return error{"id: empty"};
  if (t.policy_version < 0) return error{"policy_version: negative"};
  size_t model = 0;
  for (size_t i = 0; i < t.tokens.size(); ++i) {
    if (!t.loss_mask[i]) continue;
    ++model;
    if (i == 0) return error{"loss_mask: the first token cannot be a model token (no context)"};
    if (!is_program_token(t.tokens[i]))
      return error{"tokens: model token " + std::to_string(i) + " is not a program token"};
    if (t.versions[i] < t.policy_version)
      return error{"versions: token " + std::to_string(i) + " older than policy_version"};
  }
  if (model == 0) return error{"loss_mask: no model tokens"};
  if (!t.turns.empty()) {
    for (size_t i = 0; i < t.tokens.size(); ++i) {
      if (!t.loss_mask[i]) continue;
      bool inside = false;
      for (const auto& turn : t.turns)
        if (static_cast<int64_t>(i) >= turn.start && static_cast<int64_t>(i) < turn.end) {
          inside = true;
          break;
        }
      if (!inside) return error{"turns: model token " + std::to_string(i) + " outside every turn"};
    }
  }
  return ok();
}

intake::intake(trajectory_limits limits, std::shared_ptr<trajectory_queue> queue)
    : limits_(limits), queue_(std::move(queue)) {}

intake::~intake() { stop(); }

void intake::reject(const std::string& why) {
  // The reason's field name (text before the first ':') keys the counter; capped in length so a
  // hostile frame cannot grow the map without bound.
  auto key = why.substr(0, std::min<size_t>(why.find(':'), 40));
  bool log = false;
  uint64_t suppressed = 0;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.rejected;
    if (stats_.reasons.size() < 64 || stats_.reasons.count(key))
      ++stats_.reasons[key];
    else
      ++stats_.reasons["other"];
    auto now = std::chrono::steady_clock::now();
    if (now - last_log_ >= std::chrono::seconds(1)) {
      log = true;
      suppressed = suppressed_;
      suppressed_ = 0;
      last_log_ = now;
    } else {
      ++suppressed_;
    }
  }
  if (log)
    spdlog::warn("learner intake: rejected a trajectory frame: {} ({} more rejected since the last "
                 "message)",
                 why.substr(0, 200), suppressed);
}

std::optional<trajectory> intake::accept_frame(const char* data, size_t size) {
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.frames;
  }
  auto t = decode_trajectory(data, size, limits_);
  if (!t) {
    reject(t.message());
    return {};
  }
  if (auto st = check_consistency(*t); !st) {
    reject(st.message());
    return {};
  }
  std::lock_guard<std::mutex> lock(stats_mu_);
  ++stats_.accepted;
  return std::move(*t);
}

status intake::start(const std::string& endpoint, int rcvhwm, const curve_config& curve) {
  if (thread_.joinable()) return error{"intake already started"};
  zmq_ = std::make_unique<zmq_context_holder>();
  auto g = channel_guard::create(zmq_->ctx, curve, "learner PULL");
  if (!g) return error{"learner intake: " + g.message()};
  zmq_->guard = std::move(*g);
  try {
    auto sock = std::make_unique<zmq::socket_t>(zmq_->ctx, zmq::socket_type::pull);
    sock->set(zmq::sockopt::rcvhwm, rcvhwm);
    sock->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(limits_.max_bytes));
    sock->set(zmq::sockopt::linger, 0);
    if (auto st = zmq_->guard->secure(*sock, endpoint, true); !st)
      return error{"learner intake: PULL: " + st.message()};
    sock->bind(endpoint);
    stop_ = false;
    thread_ = std::thread([this, s = sock.release()] {
      run(s);
      delete static_cast<zmq::socket_t*>(s);
    });
  } catch (const zmq::error_t& e) {
    return error{"learner intake: cannot bind PULL at '" + endpoint + "': " + e.what()};
  }
  return ok();
}

void intake::run(void* socket) {
  auto& sock = *static_cast<zmq::socket_t*>(socket);
  while (!stop_) {
    zmq_pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
    try {
      if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) <= 0) continue;
      zmq::message_t msg;
      while (!stop_ && sock.recv(msg, zmq::recv_flags::dontwait)) {
        auto t = accept_frame(static_cast<const char*>(msg.data()), msg.size());
        // Blocking push: a full queue stops reading, and the PULL high-water mark pushes back.
        if (t) queue_->push(std::move(*t));
      }
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) break;
      spdlog::warn("learner intake: socket error: {}", e.what());
    }
  }
}

void intake::stop() {
  stop_ = true;
  if (thread_.joinable()) {
    queue_->close(); // unblocks a push waiting on a full queue
    thread_.join();
  }
  if (zmq_ && zmq_->guard) { // the counters outlive the socket
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.channel = zmq_->guard->counters();
    stats_.curve = zmq_->guard->curve();
    final_channel_ = zmq_->guard->summary();
  }
  zmq_.reset();
}

intake_stats intake::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  auto s = stats_;
  if (zmq_ && zmq_->guard) {
    s.channel = zmq_->guard->counters();
    s.curve = zmq_->guard->curve();
  }
  return s;
}

std::string intake::channel_summary() const {
  if (zmq_ && zmq_->guard) return zmq_->guard->summary();
  return final_channel_.empty() ? "not started" : final_channel_;
}

} // namespace kiln
