// What each turn of multi-turn episodes earns, and whether a revision beats the turn before it:
// the measure of whether the outcome the policy observed (speedup bucket, error kind) steers its
// next program.
//   an episode's turn rewards --add--> per-turn counts and sums --to_json--> summary "by_turn"
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kiln {

class turn_stats {
public:
  // rewards[t] and correct[t] of turn t (0-based); a length mismatch counts the common prefix.
  void add(const std::vector<double>& rewards, const std::vector<int32_t>& correct);

  // One object per turn reached: {"turn" (1-based), "episodes", "pass", "mean_reward"}; from the
  // second turn on also "better" / "worse" (share of those episodes whose reward rose / fell
  // against their previous turn) and "mean_gain" (mean reward change). Empty when nothing ran.
  nlohmann::json to_json() const;

private:
  struct row {
    int64_t episodes = 0, correct = 0, better = 0, worse = 0;
    double reward_sum = 0, gain_sum = 0;
  };
  std::vector<row> rows_;
};

// One line per turn of to_json()'s array, for a person; empty below two turns (nothing to compare).
std::vector<std::string> describe_turns(const nlohmann::json& by_turn);

} // namespace kiln
