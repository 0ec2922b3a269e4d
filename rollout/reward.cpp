#include "rollout/reward.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln {

const char* to_string(reward_shaping s) {
  switch (s) {
  case reward_shaping::tiers: return "tiers";
  case reward_shaping::speedup: return "speedup";
  case reward_shaping::log_speedup: return "log_speedup";
  }
  return "?";
}

const char* to_string(reward_aggregate a) { return a == reward_aggregate::best ? "best" : "last"; }

expected<reward_shaping> parse_reward_shaping(const std::string& s) {
  for (auto v : {reward_shaping::tiers, reward_shaping::speedup, reward_shaping::log_speedup})
    if (s == to_string(v)) return v;
  return error{"reward shaping '" + s + "': expected tiers, speedup or log_speedup"};
}

expected<reward_aggregate> parse_reward_aggregate(const std::string& s) {
  for (auto v : {reward_aggregate::best, reward_aggregate::last})
    if (s == to_string(v)) return v;
  return error{"episode reward '" + s + "': expected best or last"};
}

double turn_reward(const reward_config& cfg, bool correct, double speedup_eager,
                   std::optional<double> speedup_compile) {
  if (!correct) return cfg.fail_reward;
  // A NaN speedup (no baseline) counts as no speedup, never as a win.
  double se = std::isfinite(speedup_eager) ? speedup_eager : 0;
  switch (cfg.shaping) {
  case reward_shaping::tiers: {
    double bar = 1 + cfg.faster_margin;
    if (se <= bar) return 1;
    if (speedup_compile && std::isfinite(*speedup_compile) && *speedup_compile > bar) return 3;
    return 2;
  }
  case reward_shaping::speedup: return std::clamp(se, 0.0, cfg.speedup_cap);
  case reward_shaping::log_speedup:
    return 1 + std::clamp(se > 0 ? std::log2(se) : -1.0, -1.0, std::log2(cfg.speedup_cap));
  }
  return cfg.fail_reward;
}

double episode_reward(const reward_config& cfg, const std::vector<double>& r) {
  if (r.empty()) return cfg.no_turn_reward;
  if (cfg.aggregate == reward_aggregate::last) return r.back();
  return *std::max_element(r.begin(), r.end());
}

double max_turn_reward(const reward_config& cfg, bool has_compile_baseline) {
  if (cfg.shaping == reward_shaping::tiers) return has_compile_baseline ? 3 : 2;
  return std::numeric_limits<double>::infinity();
}

} // namespace kiln
