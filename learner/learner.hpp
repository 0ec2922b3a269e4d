// The PPO learner: trajectories in, better weights out.
//   trajectory_queue (ZeroMQ PULL intake or in-process) --offer--> pending --update (GAE, decoupled
//   PPO, Adam)--> version++ --publish--> weight_slot / ZeroMQ PUB; checkpoints on the side.
// The same object runs synchronously (offer/update, for tests and in-process hosts that drive it)
// or on its own thread (start/stop); not both at once. LibTorch stays behind the pimpl.
// Hosting it in-process (kiln run): set checkpoint_dir / metrics_path under the run directory,
// create(cfg, tasks), give each policy server a model_policy with slot = weights(), start(), and
// push finished trajectories into queue() (trajectory_queue::push blocks when full: backpressure).
// stop() checkpoints. Trajectories still pending at stop are not in the checkpoint's seen set:
// re-sent after a resume they count once; trained ones are never counted twice.
#pragma once

#include "data/expected.hpp"
#include "data/task_spec.hpp"
#include "learner/intake.hpp"
#include "learner/learner_config.hpp"
#include "learner/samples.hpp"
#include "learner/weights.hpp"
#include "rollout/trajectory.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

struct update_metrics {
  std::string stage; // sft | value | ppo
  int64_t version = 0, step = 0;
  size_t trajectories = 0, tokens = 0, model_tokens = 0;
  double loss = 0, pg_loss = 0, vf_loss = 0, entropy = 0, clip_frac = 0, approx_kl = 0;
  double update_kl = -1; // KL(before || after) over the batch (k3), every kl_every; -1: not taken
  double behav_kl = 0, behav_w_mean = 0, behav_capped = 0;
  double lag_mean = 0, lag_max = 0; // learner version minus the token's behaviour version
  double reward_mean = 0, lr = 0, grad_norm = 0, seconds = 0;
  double accuracy = 0; // sft: share of model tokens the argmax predicts
  uint64_t dropped_stale = 0, duplicates = 0, rejected = 0; // totals so far
};
std::string to_json(const update_metrics& m);

enum class offer_result { accepted, duplicate, stale, rejected };

class learner {
public:
  // `tasks` lets the learner replay the grammar mask of each trajectory's task (by name); tasks
  // not listed are rejected unless the list is empty (then masks fall back to all program tokens).
  static expected<std::unique_ptr<learner>> create(const learner_config& cfg,
                                                   std::vector<task> tasks);
  ~learner();
  learner(const learner&) = delete;
  learner& operator=(const learner&) = delete;

  // --- synchronous core ---
  offer_result offer(const trajectory& t, std::string* why = nullptr);
  size_t pending() const;
  // One PPO update (value-only during the value stage) from the oldest batch_size pending
  // trajectories; error when fewer are pending.
  expected<update_metrics> update();
  // Rejection fine-tuning data: by default the expert programs of every task that check; a host
  // that verified them in the pool passes expert_samples(tasks, backend, verified) here instead.
  void set_sft_samples(std::vector<sample> samples);
  // Supervised steps over expert samples (stage sft); publishes once at the end.
  expected<update_metrics> run_sft(int64_t steps);
  // "" writes <checkpoint_dir>/ckpt-v<version>.pt and points <checkpoint_dir>/latest at it.
  expected<std::string> save_checkpoint(const std::string& path = "");
  status load_checkpoint(const std::string& path); // a file, or "latest" in checkpoint_dir
  void publish();

  int64_t version() const;
  int64_t steps() const;
  uint64_t trajectories_trained() const;
  // Trajectories taken in that made no policy version: dropped as stale, duplicates, refused by
  // the learner or its intake, or spent on critic-only updates (running total; the coordinator's
  // admission bound gives their places back, or eta = 0 would wait forever during value
  // pretraining).
  uint64_t discarded() const;
  const learner_config& config() const;
  std::shared_ptr<weight_slot> weights() const;
  std::shared_ptr<trajectory_queue> queue() const;
  intake_stats intake_counters() const;
  // Log-prob of every model token of `t` under the current weights (masked as in training).
  expected<std::vector<float>> score(const trajectory& t);

  // --- threaded host ---
  void on_metrics(std::function<void(const update_metrics&)> cb);
  // Intake thread (when pull_endpoint is set), PUB socket (pub_endpoint), training thread running
  // the configured stages. Resumes first when cfg.resume is set.
  status start();
  // Stops the threads and writes a final checkpoint (when checkpoint_dir is set).
  void stop();
  // True once the configured stages finished (sft/value only, or max_updates reached).
  bool finished() const;

private:
  struct impl;
  explicit learner(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

} // namespace kiln
