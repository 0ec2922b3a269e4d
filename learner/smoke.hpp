// SMOKE-CHECK HARNESS, not the real reward. Single-turn episodes sampled from a token_policy on
// the training tasks and scored WITHOUT the device pool by how closely the program's structure
// (fusion groups and their templates; knobs ignored) matches the expert heuristic's program:
//   reward = 2 * matched_groups / max(|expert groups|, |sampled groups|) - 1, pass = exact match.
// It only shows that the learner's machinery (sampling, trajectories, masks, GAE, PPO, weight
// swaps) improves a policy on a signal; real pass rates and speedups come from the pool once the
// rollout engine feeds the learner (kiln run).
//   tasks --policy.step under grammar masks--> programs --proxy_reward--> trajectories
#pragma once

#include "data/task_spec.hpp"
#include "rollout/token_policy.hpp"
#include "rollout/trajectory.hpp"
#include "skills/program.hpp"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace kiln {

struct proxy_result {
  double reward = -1;
  bool pass = false;
};
proxy_result proxy_reward(const program& expert, const std::vector<int32_t>& program_tokens);

struct proxy_stats {
  size_t episodes = 0, passes = 0, tokens = 0, model_tokens = 0;
  double reward_sum = 0, seconds = 0;
  double mean_reward() const { return episodes ? reward_sum / static_cast<double>(episodes) : 0; }
  double pass_rate() const {
    return episodes ? static_cast<double>(passes) / static_cast<double>(episodes) : 0;
  }
  void add(const proxy_stats& o);
};

struct proxy_task {
  const task* spec = nullptr;
  program expert;
};
std::vector<proxy_task> proxy_tasks(const std::vector<task>& tasks);

// One episode per entry of `which` (indices into tasks), all decoded as one continuous batch.
// Trajectory ids are id_prefix + a running number.
std::vector<trajectory> generate_proxy_episodes(token_policy& policy,
                                                const std::vector<proxy_task>& tasks,
                                                const std::vector<size_t>& which,
                                                std::mt19937_64& rng, const std::string& id_prefix,
                                                proxy_stats* stats);

} // namespace kiln
