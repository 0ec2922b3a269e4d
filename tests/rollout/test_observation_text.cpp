#include "rollout/observation_text.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

using namespace kiln;

TEST_CASE("observation text: compile logs trimmed at both ends, mismatches located, times given") {
  outcome ce;
  ce.kind = outcome_kind::compile_error;
  ce.message =
      "kernel.cpp:3: error: expected ';'\n" + std::string(10000, 'x') + "\n1 error generated";
  auto t = observation_text(ce, 0, std::nullopt, 1000);
  CHECK(t.find("Outcome: compile_error.") == 0);
  CHECK(t.find("expected ';'") != std::string::npos);      // the first error stays
  CHECK(t.find("1 error generated") != std::string::npos); // and the summary
  CHECK(t.find("characters cut") != std::string::npos);
  CHECK(t.size() < 1300);

  outcome w;
  w.kind = outcome_kind::wrong;
  w.error = mismatch{"y0", 0, 17, 5, 0.5, 2.0};
  auto tw = observation_text(w, 0, std::nullopt);
  CHECK(tw.find("Output 'y0': 5 elements outside the tolerance, the first at flat index 17") !=
        std::string::npos);
  CHECK(tw.find("max abs error 0.5") != std::string::npos);

  outcome c;
  c.kind = outcome_kind::correct;
  c.time = timings{};
  c.time->median_ms = 1.25;
  c.time->trials = 9;
  auto tc = observation_text(c, 1.5, 0.75);
  CHECK(tc.find("1.25 ms (median of 9 timed calls)") != std::string::npos);
  CHECK(tc.find("eager: 1.500x") != std::string::npos);
  CHECK(tc.find("torch.compile: 0.750x") != std::string::npos);
  CHECK(observation_text(c, 1.5, std::nullopt).find("torch.compile") == std::string::npos);
}

TEST_CASE("observation text: a log with invalid UTF-8, cut mid code point, is still valid text") {
  // A compiler echoes the kernel's line: bytes the policy wrote, any bytes at all. The cut
  // points of a 40-byte budget fall inside the euro signs on both sides.
  outcome ce;
  ce.kind = outcome_kind::compile_error;
  std::string euros;
  for (int i = 0; i < 40; ++i) euros += "\xE2\x82\xAC";
  ce.message = "error: \"\xFF\xFE\" " + euros + " end";
  auto t = observation_text(ce, 0, std::nullopt, 41);
  CHECK(t.find("\xEF\xBF\xBD") != std::string::npos); // the bad bytes, replaced
  CHECK_NOTHROW(nlohmann::json(t).dump());
  CHECK(t.find(" end") != std::string::npos);
}
