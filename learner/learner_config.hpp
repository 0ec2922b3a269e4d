// Everything the learner reads from config ([learner] in a run config, or `kiln learner`'s file).
// Torch-free so the config reader and the CLI can include it.
#pragma once

#include "channels/curve_config.hpp"
#include "learner/model.hpp"

#include <cstdint>
#include <string>

namespace kiln {

struct ppo_config {
  double gamma = 1.0, lambda = 0.95;
  double eps_low = 0.2, eps_high = 0.28; // clip-higher: ratio in [1 - eps_low, 1 + eps_high]
  double vf_coef = 0.5, ent_coef = 0.0;
  double behav_cap = 5.0;  // decoupled PPO: cap on pi_prox / pi_behav
  bool behav_mask = false; // false: clamp the weight at the cap; true: drop tokens above it (AReaL)
  bool normalize_adv = true; // batch-level mean / std of advantages (gae)
  // gae: per-token GAE with the critic. group: one advantage per trajectory, its reward against
  // the others of its task group in the batch ((R - mean) / std, GRPO); a trajectory alone in
  // the batch is measured against its task's running mean reward. The critic still trains.
  std::string advantage = "gae";
  double policy_coef = 1.0; // 0 during value pretraining
};

struct learner_config {
  model_config model;
  ppo_config ppo;
  // Optimizer: Adam; lr warm-up then constant, linear or cosine decay to lr * lr_min_ratio over
  // total_updates optimizer steps (0: constant after warm-up).
  double lr = 3e-4;
  std::string lr_schedule = "constant"; // constant | linear | cosine
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;
  double lr_min_ratio = 0.1;
  double grad_clip = 1.0;
  double weight_decay = 0.0;
  // Batching: trajectories per update; epochs x minibatches optimizer steps per update.
  int batch_size = 32;
  int epochs = 1;
  int minibatches = 1;
  // Every kl_every-th PPO update also measures update_kl, KL(before || after) over the batch: one
  // more forward pass. approx_kl is taken before each optimizer step, so with one epoch and one
  // minibatch it is 0 by construction; update_kl shows how far an update moved the policy.
  int kl_every = 10; // 0: never
  // Forward chunks: trajectories sorted by length, at most this many padded tokens per chunk.
  int64_t chunk_tokens = 16384;
  // Staleness bound: trajectories whose oldest model token is more than eta versions behind the
  // learner are dropped (0 = synchronous PPO).
  int eta = 1;
  std::string reward_placement = "episode"; // episode | turn
  double temperature = 1.0;                 // the policy servers' sampling temperature
  // Stages: sft (rejection fine-tuning on expert programs), value (critic only), ppo, or all three.
  std::string stage = "ppo"; // sft | value | ppo | all
  int64_t sft_steps = 300;
  // The sft programs: expert (the heuristic's, one per task) or best_of_k (kiln run samples
  // sft_candidates random masked programs per task through the pool and keeps the fastest that
  // verified, the expert's where none beats it: rejection sampling for speed, as CUDA Agent's RFT).
  std::string sft_source = "expert";
  int sft_candidates = 8;
  int sft_batch = 32;
  int64_t value_updates = 10;
  int64_t max_updates = 0; // PPO updates before the learner stops itself (0 = until stopped)
  // Checkpoints and metrics.
  std::string checkpoint_dir;    // empty: no checkpoints
  int64_t checkpoint_every = 50; // in updates (and on shutdown)
  int keep_checkpoints = 3;
  std::string resume;       // "" | "latest" | a checkpoint file
  std::string metrics_path; // JSONL, one row per update; empty: none
  // Streams.
  std::string pull_endpoint; // empty: in-process queue only
  std::string pub_endpoint;  // empty: in-process weight slot only
  curve_config curve;        // both are CURVE servers when it has keys ([curve])
  int queue_capacity = 4096;
  std::string backend = "cpu"; // whose expert programs feed the sft stage
  std::string device = "cpu";  // where the learner trains: cpu | cuda | cuda:N
  uint64_t seed = 1;
  int threads = 0; // LibTorch intra-op threads (0: leave as is)
};

} // namespace kiln
