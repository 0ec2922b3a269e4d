#include "executor/verify.hpp"

#include <ATen/ATen.h>
#include <doctest/doctest.h>
#include <limits>

using namespace kiln;

namespace {

tolerance tol_1e3() {
  tolerance t;
  t.atol = 1e-3;
  t.rtol = 1e-3;
  return t;
}

} // namespace

TEST_CASE("compare_output: within atol + rtol |ref| passes, past it fails") {
  auto ref = at::linspace(-4, 4, 1001, at::kFloat);
  auto near = ref + 0.5e-3 * (1 + ref.abs()); // half the allowance everywhere
  CHECK_FALSE(compare_output(near, ref, tol_1e3()).has_value());
  CHECK_FALSE(compare_output(ref.clone(), ref, tol_1e3()).has_value());
  auto off = near.clone();
  off[700] = off[700] + 0.1f;
  off[900] = off[900] - 0.5f;
  auto mm = compare_output(off, ref, tol_1e3());
  REQUIRE(mm.has_value());
  CHECK(mm->bad_count == 2);
  CHECK(mm->first_bad_index == 700);
  CHECK(mm->max_abs_err ==
        doctest::Approx(0.5 - 0.5e-3 * (1 + ref[900].item<double>())).epsilon(1e-4));
  CHECK(mm->max_rel_err ==
        doctest::Approx(mm->max_abs_err / ref[900].item<double>()).epsilon(1e-3));
}

TEST_CASE("compare_output: outputs of millions of elements, bad ones in later chunks") {
  const int64_t n = 3 * (int64_t{1} << 20) + 17; // past several of the host path's chunks
  auto ref = at::ones({n}, at::kFloat);
  auto out = ref.clone();
  out[n - 1] = 3.0f;
  out[(int64_t{1} << 20) + 5] = 1.5f;
  auto mm = compare_output(out, ref, tol_1e3());
  REQUIRE(mm.has_value());
  CHECK(mm->bad_count == 2);
  CHECK(mm->first_bad_index == (int64_t{1} << 20) + 5);
  CHECK(mm->max_abs_err == doctest::Approx(2.0));
  CHECK(mm->max_rel_err == doctest::Approx(2.0));
}

TEST_CASE("compare_output: the sliced path sums counts and keeps the first bad index and maxima") {
  // The path device and integer outputs take: slices of 7 elements over 40.
  auto ref = at::arange(40, at::kLong);
  auto out = ref.clone();
  out[9] = 100; // slice 1
  out[30] = -5; // slice 4
  auto mm = compare_output(out, ref, tol_1e3(), 7);
  REQUIRE(mm.has_value());
  CHECK(mm->bad_count == 2);
  CHECK(mm->first_bad_index == 9);
  CHECK(mm->max_abs_err == doctest::Approx(91.0));
  CHECK(mm->max_rel_err == doctest::Approx(91.0 / 9.0));
  CHECK_FALSE(compare_output(ref.clone(), ref, tol_1e3(), 7).has_value());
}

TEST_CASE("compare_output: NaN and infinities") {
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  auto ref = at::tensor({nan, inf, -inf, 1.0f, 2.0f});
  CHECK_FALSE(compare_output(ref.clone(), ref, tol_1e3()).has_value()); // NaN = NaN, inf = inf
  auto out = ref.clone();
  out[3] = nan; // a NaN where a number belongs
  auto mm = compare_output(out, ref, tol_1e3());
  REQUIRE(mm.has_value());
  CHECK(mm->bad_count == 1);
  CHECK(mm->first_bad_index == 3);
  CHECK(mm->max_abs_err == std::numeric_limits<double>::infinity());
  auto wrong_inf = ref.clone();
  wrong_inf[1] = -inf; // +inf expected
  auto mi = compare_output(wrong_inf, ref, tol_1e3());
  REQUIRE(mi.has_value());
  CHECK(mi->first_bad_index == 1);
  auto finite = ref.clone();
  finite[2] = -1e30f; // close to -inf in no sense: rtol * |inf| must not admit it
  auto mf = compare_output(finite, ref, tol_1e3());
  REQUIRE(mf.has_value());
  CHECK(mf->first_bad_index == 2);
}

TEST_CASE(
    "compare_output: relative error only where |ref| > atol, with float64 and int64 references") {
  auto ref = at::tensor({0.0, 1e-5, 10.0}, at::kDouble);
  auto out = at::tensor({0.5f, 1e-5f, 10.0f});
  auto mm = compare_output(out, ref, tol_1e3());
  REQUIRE(mm.has_value());
  CHECK(mm->bad_count == 1);
  CHECK(mm->max_abs_err == doctest::Approx(0.5));
  CHECK(mm->max_rel_err == doctest::Approx(0.0)); // the 0.5 sits where |ref| <= atol
  auto idx_ref = at::tensor({3, 1, 2}, at::kLong);
  CHECK_FALSE(compare_output(idx_ref.clone(), idx_ref, tol_1e3()).has_value());
  auto idx = compare_output(at::tensor({3, 2, 2}, at::kLong), idx_ref, tol_1e3());
  REQUIRE(idx.has_value());
  CHECK(idx->bad_count == 1);
  CHECK(idx->first_bad_index == 1);
  CHECK(compare_output(at::zeros({4}), at::zeros({5}), tol_1e3())->bad_count == 5);
}
