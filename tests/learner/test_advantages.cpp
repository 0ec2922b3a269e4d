// Group-relative advantages: within a group, across tasks, alone in a batch.
#include "learner/advantages.hpp"

#include <doctest/doctest.h>

using namespace kiln;

namespace {
sample make(const std::string& task, const std::string& group, double reward) {
  sample s;
  s.task = task;
  s.group = group;
  s.reward = reward;
  return s;
}
std::vector<const sample*> ptrs(const std::vector<sample>& v) {
  std::vector<const sample*> out;
  for (const auto& s : v) out.push_back(&s);
  return out;
}
} // namespace

TEST_CASE("group advantages: each episode against its own group, scaled by the group's spread") {
  // Task a pays 10x what task b pays; within each group the better episode gets the same +1.
  std::vector<sample> b{make("a", "g1", 10), make("a", "g1", 20), make("b", "g2", 1),
                        make("b", "g2", 2)};
  std::map<std::string, double> mean;
  auto adv = group_advantages(ptrs(b), mean);
  REQUIRE(adv.size() == 4);
  CHECK(adv[0] == doctest::Approx(-1).epsilon(1e-4));
  CHECK(adv[1] == doctest::Approx(1).epsilon(1e-4));
  CHECK(adv[2] == doctest::Approx(-1).epsilon(1e-4));
  CHECK(adv[3] == doctest::Approx(1).epsilon(1e-4));
}

TEST_CASE("group advantages: equal rewards teach nothing, a lone episode meets its task's mean") {
  std::map<std::string, double> mean;
  std::vector<sample> same{make("a", "g1", 3), make("a", "g1", 3), make("a", "g1", 3)};
  for (float a : group_advantages(ptrs(same), mean)) CHECK(a == 0.0f);
  CHECK(mean.at("a") == doctest::Approx(3));
  // Alone in the batch: reward minus the running mean of its task (0 for a task not seen yet).
  std::vector<sample> lone{make("a", "g7", 5), make("c", "g8", 9)};
  auto adv = group_advantages(ptrs(lone), mean, 0.5);
  CHECK(adv[0] == doctest::Approx(2));
  CHECK(adv[1] == doctest::Approx(0));
  CHECK(mean.at("a") == doctest::Approx(4)); // moved halfway to 5
  CHECK(mean.at("c") == doctest::Approx(9));
}
