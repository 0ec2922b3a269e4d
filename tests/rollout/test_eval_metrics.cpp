#include "rollout/eval_metrics.hpp"

#include <cmath>
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

using namespace kiln;

namespace {

eval_row row(bool correct, double kernel_ms, double eager_ms, std::optional<double> compiled = {}) {
  eval_row r;
  r.correct = correct;
  r.kernel_ms = correct ? kernel_ms : 0;
  r.eager_ms = eager_ms;
  r.compiled_ms = compiled;
  return r;
}

} // namespace

TEST_CASE("fast_p counts correct and faster over ALL tasks") {
  // speedups vs eager: 2.0, 1.0 (not > 1), 0.5; one failure
  std::vector<eval_row> rows = {row(true, 1, 2), row(true, 2, 2), row(true, 4, 2),
                                row(false, 0, 2)};
  auto s = summarize(rows);
  CHECK(s.tasks == 4);
  CHECK(s.pass_rate == doctest::Approx(0.75));
  CHECK(s.fast_eager.at(0.0) == doctest::Approx(0.75));
  CHECK(s.fast_eager.at(0.5) == doctest::Approx(0.5)); // 2.0 and 1.0; 0.5 is not > 0.5
  CHECK(s.fast_eager.at(1.0) == doctest::Approx(0.25));
  CHECK(s.fast_eager.at(2.0) == doctest::Approx(0.0)); // 2.0 is not > 2
  CHECK(s.geomean_eager == doctest::Approx(std::cbrt(2.0 * 1.0 * 0.5)));
  CHECK_FALSE(s.fast_compile.has_value());
  auto j = to_json(s);
  CHECK(j["fast_1_compile"] == "n/a");
  CHECK(j["geomean_compile"] == "n/a");
  CHECK(j["fast_1_eager"].get<double>() == doctest::Approx(0.25));
  CHECK(j["fast_1_5_eager"].get<double>() == doctest::Approx(0.25));
}

TEST_CASE("compile metrics cover the tasks that have a baseline, and say how many") {
  std::vector<eval_row> rows = {row(true, 1, 2, 3.0), row(true, 2, 2, 1.0), row(false, 0, 2, 1.0)};
  auto s = summarize(rows);
  CHECK(s.compile_tasks == 3);
  REQUIRE(s.fast_compile.has_value());
  CHECK(s.fast_compile->at(1.0) == doctest::Approx(1.0 / 3)); // 3x faster; 0.5x is not
  CHECK(*s.share_faster_than_compile == doctest::Approx(1.0 / 3));
  CHECK(*s.geomean_compile == doctest::Approx(std::sqrt(3.0 * 0.5)));
  // A task without a baseline counts for eager metrics only: compile ones keep their 3 tasks.
  rows.push_back(row(true, 1, 1));
  auto t = summarize(rows);
  CHECK(t.tasks == 4);
  CHECK(t.compile_tasks == 3);
  CHECK(t.fast_compile->at(1.0) == doctest::Approx(1.0 / 3));
  CHECK(*t.geomean_compile == doctest::Approx(std::sqrt(3.0 * 0.5)));
  CHECK(to_json(t)["compile_tasks"] == 3);
  // None with a baseline: "n/a", never a guess.
  CHECK_FALSE(summarize({row(true, 1, 1), row(true, 1, 2)}).fast_compile.has_value());
}

TEST_CASE("honesty signals: roofline flags, throttled timings and the clock range are counted") {
  auto a = row(true, 1, 2);
  a.beyond_roofline = true;
  a.sm_mhz = 1980;
  auto b = row(true, 1, 2);
  b.throttled = true;
  b.sm_mhz = 1755;
  auto c = row(false, 0, 2);
  c.beyond_roofline = true; // a failed task's timing flags are not counted
  auto s = summarize({a, b, c});
  CHECK(s.beyond_roofline == 1);
  CHECK(s.throttled == 1);
  CHECK(s.sm_mhz_min == 1755);
  CHECK(s.sm_mhz_max == 1980);
  auto j = to_json(a);
  CHECK(j["beyond_roofline"] == true);
  CHECK(j["sm_mhz"] == 1980);
}

TEST_CASE("a flagged timing counts as no faster than the baselines, and is counted") {
  auto honest = row(true, 1, 2, 2.0);
  auto flagged = row(true, 1, 4, 4.0);
  flagged.beyond_roofline = true;
  auto s = summarize({honest, flagged});
  CHECK(s.suspect == 1);
  CHECK(s.fast_eager.at(1.0) == doctest::Approx(0.5)); // only the honest one is faster
  CHECK(s.geomean_eager == doctest::Approx(std::sqrt(2.0 * 1.0)));
  CHECK(s.fast_compile->at(1.0) == doctest::Approx(0.5));
  CHECK(to_json(s)["suspect_timings"] == 1);
}

TEST_CASE("k samples of a task: correct if any is, the fastest correct one's time and turns") {
  eval_row base;
  base.task = "t";
  base.eager_ms = 4;
  sample_result wrong{false, 0, -1, 3, "truncated", "3 turns, none correct", ""};
  sample_result slow{true, 2.0, 0, 1, "completed", "", "kernel slow end"};
  sample_result fast{true, 1.0, 2, 3, "truncated", "", "kernel fast end"};
  auto r = best_of_samples(base, {wrong, slow, fast});
  CHECK(r.correct);
  CHECK(r.samples == 3);
  CHECK(r.kernel_ms == 1.0);             // the fastest correct sample ...
  CHECK(r.turns == 3);                   // ... found on its third turn
  CHECK(r.program == "kernel fast end"); // and its program (rejection sampling keeps it)
  CHECK(r.eager_ms == 4);
  auto none = best_of_samples(base, {wrong, wrong});
  CHECK_FALSE(none.correct);
  CHECK(none.kernel_ms == 0);
  CHECK(none.turns == 3);
  CHECK(none.outcome == "truncated");
  CHECK(summarize({r, none}).pass_rate == doctest::Approx(0.5));
  CHECK(summarize({r, none}).mean_turns == doctest::Approx(3.0));
  CHECK(to_json(r)["samples"] == 3);
}

TEST_CASE("no correct tasks: zeros, not NaN") {
  auto s = summarize({row(false, 0, 1), row(false, 0, 1)});
  CHECK(s.pass_rate == 0);
  CHECK(s.geomean_eager == 0);
  CHECK(summarize({}).tasks == 0);
}
