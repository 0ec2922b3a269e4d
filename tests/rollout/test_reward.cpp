// Rewards: CUDA Agent's tiers at their edges, the speedup shapings, episode aggregation.
#include "rollout/reward.hpp"

#include <cmath>
#include <doctest/doctest.h>

using namespace kiln;

TEST_CASE("reward: tiers") {
  reward_config c;
  CHECK(turn_reward(c, false, 9.0, 9.0) == -1);         // failures ignore speedups
  CHECK(turn_reward(c, true, 0.5, std::nullopt) == 1);  // correct but slower
  CHECK(turn_reward(c, true, 1.05, std::nullopt) == 1); // 5% is not "more than 5%"
  CHECK(turn_reward(c, true, 1.06, std::nullopt) == 2); // > 5% faster than eager
  CHECK(turn_reward(c, true, 1.06, 1.01) == 2);         // not > 5% faster than compile
  CHECK(turn_reward(c, true, 1.06, 1.06) == 3);         // both
  CHECK(turn_reward(c, true, 1.0, 2.0) == 1);           // compile alone is not enough
  CHECK(turn_reward(c, true, NAN, std::nullopt) == 1);  // no baseline: no speedup credit
  CHECK(turn_reward(c, true, 2.0, NAN) == 2);
  CHECK(max_turn_reward(c, false) == 2);
  CHECK(max_turn_reward(c, true) == 3);
}

TEST_CASE("reward: speedup shapings") {
  reward_config c;
  c.shaping = reward_shaping::speedup;
  CHECK(turn_reward(c, false, 3, std::nullopt) == -1);
  CHECK(turn_reward(c, true, 3, std::nullopt) == 3);
  CHECK(turn_reward(c, true, 1e6, std::nullopt) == c.speedup_cap);
  c.shaping = reward_shaping::log_speedup;
  CHECK(turn_reward(c, true, 4, std::nullopt) == doctest::Approx(3));
  CHECK(turn_reward(c, true, 0.01, std::nullopt) == doctest::Approx(0)); // floor: 1 - 1
  CHECK(std::isinf(max_turn_reward(c, true)));
}

TEST_CASE("reward: episode = best turn by default, or the last") {
  reward_config c;
  CHECK(episode_reward(c, {-1, 2, 1}) == 2);
  c.aggregate = reward_aggregate::last;
  CHECK(episode_reward(c, {-1, 2, 1}) == 1);
  CHECK(episode_reward(c, {}) == c.no_turn_reward);
}

TEST_CASE("reward: names parse, others are errors naming the value") {
  CHECK(*parse_reward_shaping("log_speedup") == reward_shaping::log_speedup);
  CHECK(*parse_reward_aggregate("last") == reward_aggregate::last);
  auto bad = parse_reward_shaping("tier");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.message().find("'tier'") != std::string::npos);
  CHECK_FALSE(parse_reward_aggregate("mean").has_value());
}
