#include "executor/device_clocks.hpp"
#include "executor/timing.hpp"

#include <doctest/doctest.h>
#include <thread>

using namespace kiln;

TEST_CASE("median and cv") {
  CHECK(median_of({3, 1, 2}) == 2);
  CHECK(median_of({4, 1, 3, 2}) == 2.5);
  CHECK(median_of({}) == 0);
  CHECK(cv_of({5}) == 0);
  CHECK(cv_of({2, 2, 2}) == 0);
  CHECK(cv_of({1, 3}) == doctest::Approx(0.7071).epsilon(1e-3));
}

TEST_CASE("drain count: over-slack trials are counted, not runs of them") {
  drain_count hiccup; // three in a row among twenty: a hiccup, not a kernel
  for (int i = 0; i < 20; ++i) hiccup.add(i >= 5 && i < 8);
  CHECK_FALSE(hiccup.refuses());
  drain_count two_of_three; // never three in a row, but two trials of three hide work
  for (int i = 0; i < 9; ++i) two_of_three.add(i % 3 != 2);
  CHECK(two_of_three.refuses());
  drain_count few; // a quarter of the trials, but only two of them
  for (int i = 0; i < 8; ++i) few.add(i < 2);
  CHECK_FALSE(few.refuses());
  drain_count always;
  for (int i = 0; i < 3; ++i) always.add(true);
  CHECK(always.refuses());
}

TEST_CASE("measure: warm-up, prepare before every trial, stop at max_trials or cv target") {
  timing_options o;
  o.warmup = 2;
  o.min_trials = 3;
  o.max_trials = 7;
  o.cv_target = 0; // never reached with real noise: runs to max_trials or the cap
  o.time_cap_ms = 10000;
  o.flush_bytes = 1 << 20;
  cache_flusher f;
  int prepared = 0, ran = 0;
  auto s = measure(
      o, f,
      [&] {
        ++prepared;
        return ok();
      },
      [&]() -> expected<double> {
        ++ran;
        return 1.0 + (ran % 2) * 0.5;
      });
  REQUIRE(s.has_value());
  CHECK(ran == 2 + 7);
  CHECK(prepared == ran);
  CHECK(s->t.trials == 7);

  o.cv_target = 0.01;
  ran = 0;
  auto steady = measure(o, f, nullptr, [&]() -> expected<double> {
    ++ran;
    return 2.0;
  });
  REQUIRE(steady.has_value());
  CHECK(steady->t.trials == 3); // cv 0 after min_trials
  CHECK(steady->t.median_ms == 2.0);
}

TEST_CASE("measure: the time cap bounds the loop, errors propagate") {
  timing_options o;
  o.warmup = 0;
  o.min_trials = 1;
  o.max_trials = 100000;
  o.cv_target = 0;
  o.time_cap_ms = 50;
  o.flush_bytes = 0;
  cache_flusher f;
  auto s = measure(o, f, nullptr, wall_timed([] {
                     std::this_thread::sleep_for(std::chrono::milliseconds(5));
                     return ok();
                   }));
  REQUIRE(s.has_value());
  CHECK(s->t.trials < 20);
  CHECK(s->t.median_ms >= 5);

  auto e = measure(o, f, nullptr, []() -> expected<double> { return error{"kernel failed"}; });
  REQUIRE_FALSE(e.has_value());
  CHECK(e.message() == "kernel failed");
}

TEST_CASE("throttle reasons: names, and which of them slow a busy device") {
  bool slow = true;
  CHECK(throttle_reason_names(0, &slow).empty());
  CHECK_FALSE(slow);
  CHECK(throttle_reason_names(0x1, &slow) == "gpu_idle");
  CHECK_FALSE(slow); // idle is not a slowdown of a busy GPU
  CHECK(throttle_reason_names(0x4 | 0x40, &slow) == "sw_power_cap|hw_thermal_slowdown");
  CHECK(slow);
  CHECK(throttle_reason_names(0x2 | 0x100, &slow) == "applications_clocks|display_clock");
  CHECK_FALSE(slow);
}
