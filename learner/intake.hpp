// Trajectory intake: one thread owns a ZeroMQ PULL socket, decodes each frame strictly, checks it
// for consistency and queues it; bad frames are counted and logged (rate-limited), never fatal.
//   rollouts --PUSH==> PULL --decode_trajectory + check_consistency--> trajectory_queue --> learner
// In-process hosts (kiln run) push trajectories straight into the queue instead.
#pragma once

#include "channels/channel_guard.hpp"
#include "data/expected.hpp"
#include "rollout/trajectory.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace kiln {

// Bounded, blocking, closable; many producers, one consumer.
class trajectory_queue {
public:
  explicit trajectory_queue(size_t capacity = 4096) : capacity_(capacity) {}
  // Blocks while full; false once closed.
  bool push(trajectory t);
  bool try_push(trajectory t);
  // Waits up to `wait` for one item.
  std::optional<trajectory> pop(std::chrono::milliseconds wait);
  void close();
  bool closed() const;
  size_t size() const;

private:
  mutable std::mutex mu_;
  std::condition_variable not_empty_, not_full_;
  std::deque<trajectory> q_;
  size_t capacity_;
  bool closed_ = false;
};

// What decode_trajectory does not check: that the frame makes sense as training data.
// At least one model token; model tokens are program tokens with version >= policy_version >= 0;
// every model token inside a turn when turns are given.
status check_consistency(const trajectory& t);

struct intake_stats {
  uint64_t frames = 0, accepted = 0, rejected = 0;
  std::map<std::string, uint64_t> reasons; // first words of the error -> count
  channel_counters channel;                // handshakes on the PULL socket
  bool curve = false;
};

class intake {
public:
  intake(trajectory_limits limits, std::shared_ptr<trajectory_queue> queue);
  ~intake();
  intake(const intake&) = delete;
  intake& operator=(const intake&) = delete;

  // The whole decode path of one frame (what the socket thread runs): decode, check, count, log.
  std::optional<trajectory> accept_frame(const char* data, size_t size);

  // Binds PULL at `endpoint` (a CURVE server when `curve` has keys) and starts the owner thread.
  status start(const std::string& endpoint, int rcvhwm = 1000, const curve_config& curve = {});
  void stop();
  intake_stats stats() const;
  std::string channel_summary() const;

private:
  void reject(const std::string& why);
  void run(void* socket);

  trajectory_limits limits_;
  std::shared_ptr<trajectory_queue> queue_;
  mutable std::mutex stats_mu_;
  intake_stats stats_;
  std::chrono::steady_clock::time_point last_log_{};
  uint64_t suppressed_ = 0;
  std::string final_channel_; // the guard's summary once stopped
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::unique_ptr<struct zmq_context_holder> zmq_;
};

} // namespace kiln
