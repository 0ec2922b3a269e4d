// The experiment config of `kiln run`: every section and key, with defaults. Read through
// config_reader so that a wrong type or an unknown key is an error naming file, line and key.
#pragma once

#include "app/config_reader.hpp"
#include "data/expected.hpp"
#include "learner/learner_config.hpp"
#include "llm/llm_config.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

struct run_config {
  std::string origin; // config file, or "<embedded quickstart.toml>"
  std::string name = "quickstart";
  std::string out_dir = "runs";
  uint64_t seed = 1;
  std::string backend = "cpu";
  std::vector<std::string> suites;
  int64_t max_tasks = 0;
  // > 0: the loaded tasks (and the held-out suites') in an order shuffled by this seed, so the
  // first ones (training) and the rest (held out) are drawn from one mix, not split by name.
  uint64_t shuffle_seed = 0;
  int64_t memory_budget_mib = 4096;
  int max_ops = 4096;
  int threads = 0;
  int timing_runs = 3;
  int degeneracy_seeds = 3;
  // [eval]: policies evaluated through the pool after validation (empty: none).
  std::vector<std::string> eval_policies;
  std::vector<std::string> eval_suites; // default: tasks.suites
  int64_t eval_max_tasks = 0;
  uint64_t eval_seed = 1;
  // [pool]
  std::string cache_dir; // empty: default_cache_dir()
  int devices = 1;
  int first_device = 0; // cuda: the pool's GPUs start here (the learner / policy may use others)
  int compile_workers = 2;
  std::string baselines; // torch.compile baselines file: reward tier 3 and compile metrics
  std::vector<std::string>
      remote;                   // pools of `kiln node`s (HOST:PORT) used beside / instead of ours
  bool local_pool = true;       // false (with remote): no pool in this process
  std::string tls_dir;          // with remote: connect over mutual TLS (cert.pem, key.pem, ca.pem)
  int peer_heartbeat_ms = 1000; // with remote: the middleman's heartbeat (actor_settings)
  int peer_timeout_ms = 5000;   // with remote: a node silent this long is down (0 = off)
  // [learner], [learner.model], [learner.ppo] (learner/learner_config.hpp)
  learner_config learner;
  // [rollout]: training episodes after validation (0: none). policy "model" hosts the learner
  // in-process and samples from its newest weights; "expert" / "random" / "llm" (an LLM behind
  // HTTP endpoints, [llm]) only stream trajectories, to rollout.sink when set.
  int64_t rollout_episodes = 0;
  std::string rollout_policy = "model";
  std::string rollout_policy_device; // the hosted model's device; empty: learner.device
  int64_t rollout_max_concurrent = 64;
  int64_t rollout_group_size = 4;
  int rollout_max_turns = 2;
  int64_t rollout_max_tasks = 0; // training tasks taken from [tasks] (0 = all that validated)
  double rollout_progress_s = 5; // seconds between progress lines and metrics rows
  // [metrics] tensorboard: the rollout's and learner's rows also as TensorBoard event files in
  // <run>/tensorboard (`tensorboard --logdir runs`).
  bool metrics_tensorboard = false;
  int rollout_verify_checks = 5; // fresh-input checks per evaluated program
  double rollout_timing_cap_ms = 1000;
  std::string rollout_reward = "tiers"; // tiers | speedup | log_speedup (rollout/reward.hpp)
  double rollout_reward_cap = 10;       // speedup shapings: the largest speedup that pays
  // Where trajectories also go (trajectory stream v1, ZeroMQ PUSH), for an external trainer that
  // PULLs them: tcp://HOST:PORT or ipc://PATH; bound here, or connected to the trainer's bound
  // PULL; empty: only to the hosted learner, if any.
  std::string rollout_sink;
  // [curve]: CurveZMQ keys of the ZeroMQ channels (rollout.sink, llm.version_endpoint, the
  // learner's PULL and PUB): channels/curve_config.hpp. Without keys, loopback only.
  curve_config curve;
  bool rollout_sink_bind = true;
  int rollout_sink_hwm = 1000;
  // [llm]: the LLM policy of rollout.policy = "llm" (llm/llm_policy_server.hpp); the bearer token
  // comes from the environment variable llm.api_key_env, never from the file. eta bounds the
  // staleness of admitted episodes in the versions a trainer announces on llm.version_endpoint
  // (< 0: no bound).
  llm_policy_config llm;
  std::string llm_key_env = "OPENAI_API_KEY";
  int llm_eta = -1;
  // [eval] after_training: the final checkpoint, the untrained model and the expert, greedily,
  // on the training tasks and on held_out_suites (disjoint tasks); eval.json and summary.json.
  bool eval_after_training = false;
  std::vector<std::string> eval_held_out;
  int64_t eval_after_max_tasks = 0; // per set (0 = all)
  // Tasks in flight at once (0: compile workers + devices). 1 keeps compiles from running beside
  // timings, which on a 2-core machine moves small tasks' times.
  int eval_parallel = 0;
};

// Reads the [learner] keys into `out` (defaults: learner_config's); problems go to the reader.
void read_learner_config(config_reader& r, learner_config& out);

expected<run_config> read_run_config(config_reader& r);

// The reader for `path`, or for the quickstart config embedded in the binary when `path` is empty.
expected<config_reader> open_config(const std::string& path);

// open_config, then each `KEY=VALUE` override, then read_run_config: the config of `kiln run` and
// `kiln learner`. The error names the file, line and key.
expected<run_config> load_run_config(const std::string& path,
                                     const std::vector<std::string>& overrides);

} // namespace kiln
