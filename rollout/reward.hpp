// Rewards of a turn and of an episode. Default: CUDA Agent's tiers (docs/DESIGN.md)
//   -1 the kernel fails (compile, run or correctness); 1 correct; 2 correct and more than 5%
//   faster than eager; 3 more than 5% faster than eager and than torch.compile.
// Without a compile baseline tier 3 is unreachable (the turn gets at most 2).
//   outcome kind + speedups --turn_reward--> r_t --episode_reward (best | last)--> R
#pragma once

#include "data/expected.hpp"

#include <optional>
#include <string>
#include <vector>

namespace kiln {

enum class reward_shaping {
  tiers,       // -1 / 1 / 2 / 3 as above
  speedup,     // correct: min(speedup_eager, cap); fail: -1
  log_speedup, // correct: 1 + clamp(log2(speedup_eager), -1, log2(cap)); fail: -1
};
enum class reward_aggregate { best, last };

struct reward_config {
  reward_shaping shaping = reward_shaping::tiers;
  reward_aggregate aggregate = reward_aggregate::best;
  double faster_margin = 0.05; // "more than 5% faster": speedup > 1 + margin
  double speedup_cap = 10;     // speedup shapings: bounds what one lucky timing can earn
  double fail_reward = -1;
  double no_turn_reward = 0; // an episode that ended before any outcome (aborted early)
};

expected<reward_shaping> parse_reward_shaping(const std::string& s);
expected<reward_aggregate> parse_reward_aggregate(const std::string& s);
const char* to_string(reward_shaping s);
const char* to_string(reward_aggregate a);

// speedup_* = baseline time / kernel time (> 1 is faster); ignored when !correct.
double turn_reward(const reward_config& cfg, bool correct, double speedup_eager,
                   std::optional<double> speedup_compile);
double episode_reward(const reward_config& cfg, const std::vector<double>& turn_rewards);

// The highest turn reward reachable (the episode may stop early once a turn reaches it):
// tiers: 3 with a compile baseline, else 2; speedup shapings: none (infinity).
double max_turn_reward(const reward_config& cfg, bool has_compile_baseline);

} // namespace kiln
