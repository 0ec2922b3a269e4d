#include "rollout/turn_stats.hpp"

#include <algorithm>
#include <cstdio>

namespace kiln {

void turn_stats::add(const std::vector<double>& rewards, const std::vector<int32_t>& correct) {
  std::size_t n = std::min(rewards.size(), correct.size());
  if (rows_.size() < n) rows_.resize(n);
  for (std::size_t t = 0; t < n; ++t) {
    auto& r = rows_[t];
    ++r.episodes;
    r.correct += correct[t] != 0 ? 1 : 0;
    r.reward_sum += rewards[t];
    if (t == 0) continue;
    double gain = rewards[t] - rewards[t - 1];
    r.gain_sum += gain;
    r.better += gain > 0 ? 1 : 0;
    r.worse += gain < 0 ? 1 : 0;
  }
}

nlohmann::json turn_stats::to_json() const {
  auto out = nlohmann::json::array();
  for (std::size_t t = 0; t < rows_.size(); ++t) {
    const auto& r = rows_[t];
    double n = r.episodes > 0 ? static_cast<double>(r.episodes) : 1.0;
    nlohmann::json j = {{"turn", t + 1},
                        {"episodes", r.episodes},
                        {"pass", r.correct / n},
                        {"mean_reward", r.reward_sum / n}};
    if (t > 0) {
      j["better"] = r.better / n;
      j["worse"] = r.worse / n;
      j["mean_gain"] = r.gain_sum / n;
    }
    out.push_back(std::move(j));
  }
  return out;
}

std::vector<std::string> describe_turns(const nlohmann::json& by_turn) {
  std::vector<std::string> lines;
  if (!by_turn.is_array() || by_turn.size() < 2) return lines;
  for (const auto& r : by_turn) {
    char b[256];
    int n = std::snprintf(b, sizeof b, "turn %d: %lld episodes, pass %.1f%%, mean reward %+.3f",
                          r.value("turn", 0), static_cast<long long>(r.value("episodes", 0)),
                          100 * r.value("pass", 0.0), r.value("mean_reward", 0.0));
    if (r.contains("mean_gain") && n > 0 && n < static_cast<int>(sizeof b))
      std::snprintf(b + n, sizeof b - static_cast<std::size_t>(n),
                    " | vs the turn before: better %.0f%%, worse %.0f%%, mean gain %+.3f",
                    100 * r.value("better", 0.0), 100 * r.value("worse", 0.0),
                    r.value("mean_gain", 0.0));
    lines.emplace_back(b);
  }
  return lines;
}

} // namespace kiln
