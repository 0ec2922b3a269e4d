#include "rollout/turn_stats.hpp"

#include <doctest/doctest.h>

using namespace kiln;

TEST_CASE(
    "turn stats: per turn pass and reward, and how a revision compares with the turn before") {
  turn_stats s;
  s.add({0.0, 2.0}, {0, 1});         // fixed on turn 2
  s.add({2.0, 1.5}, {1, 1});         // slower revision
  s.add({1.0, 1.0}, {1, 1});         // the same
  s.add({1.0}, {1});                 // one turn only
  s.add({0.5, 1.0, 3.0}, {1, 1, 1}); // three turns
  auto j = s.to_json();
  REQUIRE(j.size() == 3);
  CHECK(j[0]["turn"] == 1);
  CHECK(j[0]["episodes"] == 5);
  CHECK(j[0]["pass"].get<double>() == doctest::Approx(0.8));
  CHECK(j[0]["mean_reward"].get<double>() == doctest::Approx(4.5 / 5));
  CHECK_FALSE(j[0].contains("better"));
  CHECK(j[1]["episodes"] == 4);
  CHECK(j[1]["pass"].get<double>() == doctest::Approx(1.0));
  CHECK(j[1]["better"].get<double>() == doctest::Approx(0.5)); // +2.0 and +0.5
  CHECK(j[1]["worse"].get<double>() == doctest::Approx(0.25)); // -0.5
  CHECK(j[1]["mean_gain"].get<double>() == doctest::Approx((2.0 - 0.5 + 0 + 0.5) / 4));
  CHECK(j[2]["episodes"] == 1);
  CHECK(j[2]["mean_gain"].get<double>() == doctest::Approx(2.0));

  auto lines = describe_turns(j);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == "turn 1: 5 episodes, pass 80.0%, mean reward +0.900");
  CHECK(lines[1] == "turn 2: 4 episodes, pass 100.0%, mean reward +1.375 | vs the turn before: "
                    "better 50%, worse 25%, mean gain +0.500");
}

TEST_CASE("turn stats: nothing to compare below two turns, mismatched lengths count the prefix") {
  turn_stats s;
  CHECK(s.to_json().empty());
  s.add({1.0, 2.0}, {1});
  auto j = s.to_json();
  CHECK(j.size() == 1);
  CHECK(describe_turns(j).empty());
  CHECK(describe_turns(nlohmann::json::object()).empty());
}
