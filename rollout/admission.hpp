// Admission control: how many more episodes may start now. AReaL's staleness bound keeps
// trajectories at most `eta` policy versions behind the learner:
//   admit while min(max_concurrent - running,
//                   (eta + version + 1) * batch - (accepted - discarded + running)) > 0
// eta = 0 is synchronous RL (one batch per version); eta < 0 turns the bound off. Episodes come
// in groups of `group_size` consecutive episodes on one task (group baselines, GRPO-style).
//   coordinator: on start / episode done / new version --capacity()--> spawn that many
// Pure logic without actors, so tests can drive it step by step.
#pragma once

#include <cstdint>
#include <string>

namespace kiln {

struct admission_config {
  int64_t max_concurrent = 10000;
  int64_t eta = -1;   // staleness bound in versions; < 0: off
  int64_t batch = 64; // trajectories per learner step
  int64_t group_size = 1;
  int64_t total = 0; // episodes to run; 0 = unbounded
};

class admission_control {
public:
  explicit admission_control(admission_config cfg) : cfg_(cfg) {}

  // Episodes that may start now (>= 0).
  int64_t capacity() const;
  // Book one started episode; returns its index (group = index / group_size).
  int64_t admit() {
    ++running_;
    return started_++;
  }
  // An episode ended; `accepted`: the sink handed its trajectory on.
  void finished(bool accepted) {
    --running_;
    if (accepted) ++accepted_;
  }
  void set_version(int64_t v) { version_ = v > version_ ? v : version_; }
  // The learner's running total of accepted trajectories it threw away (too stale by the time a
  // batch formed, malformed, duplicates): they free their places under the bound, or a learner
  // that dropped a batch's worth would wait for trajectories that are never admitted.
  void set_discarded(int64_t total) { discarded_ = total > discarded_ ? total : discarded_; }
  int64_t discarded() const { return discarded_; }

  bool all_done() const { return cfg_.total > 0 && started_ >= cfg_.total && running_ == 0; }
  int64_t running() const { return running_; }
  int64_t accepted() const { return accepted_; }
  int64_t started() const { return started_; }
  int64_t version() const { return version_; }
  const admission_config& config() const { return cfg_; }

private:
  admission_config cfg_;
  int64_t running_ = 0, accepted_ = 0, started_ = 0, version_ = 0, discarded_ = 0;
};

} // namespace kiln
