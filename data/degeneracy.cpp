#include "data/degeneracy.hpp"

#include "data/reference.hpp"

#include <ATen/ATen.h>
#include <algorithm>

namespace kiln {

namespace {

// Elementwise |got - want| <= atol + rtol * |want|, the check verification applies.
at::Tensor within(const at::Tensor& got, const at::Tensor& want, double atol, double rtol) {
  return (got - want).abs() <= (want.abs() * rtol + atol);
}

} // namespace

expected<degeneracy_report> check_degeneracy(const task& t, c10::Device device, int seeds) {
  seeds = std::max(seeds, 2);
  auto params = make_params(t, default_param_seed(t), device);
  std::vector<std::vector<at::Tensor>> runs;
  for (int s = 0; s < seeds; ++s) {
    auto out = run_reference(t, make_inputs(t, 1000 + s, device), params);
    if (!out) return out.err();
    for (auto& y : *out) y = y.to(at::kDouble);
    runs.push_back(std::move(*out));
  }
  degeneracy_report r;
  double atol = t.tol.atol, rtol = t.tol.rtol;
  int64_t zero_ok = 0, total = 0;
  for (std::size_t o = 0; o < t.outputs.size(); ++o) {
    const std::string& name = t.outputs[o];
    bool is_index = t.ops[find_value(t, name).index].is_index;
    bool all_zero_pass = true, same_across_seeds = true, single_constant = !is_index;
    // The one constant a constant-fill kernel would best return, whatever the seed.
    double mean = 0;
    if (!is_index) {
      for (int s = 0; s < seeds; ++s) mean += runs[s][o].mean().item<double>();
      mean /= seeds;
    }
    for (int s = 0; s < seeds; ++s) {
      const at::Tensor& y = runs[s][o];
      if (!is_index && !at::isfinite(y).all().item<bool>()) {
        r.degenerate = true;
        r.reason = "output '" + name + "' has NaN or Inf (seed " + std::to_string(1000 + s) + ")";
        return r;
      }
      r.max_abs = std::max(r.max_abs, y.abs().max().item<double>());
      if (is_index) {
        if (s > 0 && !at::equal(y, runs[0][o])) same_across_seeds = false;
        continue;
      }
      auto zero_hits = within(at::zeros_like(y), y, atol, rtol);
      int64_t hits = zero_hits.sum().item<int64_t>();
      zero_ok += hits;
      total += y.numel();
      if (hits != y.numel()) all_zero_pass = false;
      if (s > 0 && !within(runs[0][o], y, atol, rtol).all().item<bool>()) same_across_seeds = false;
      if (!within(at::full_like(y, mean), y, atol, rtol).all().item<bool>())
        single_constant = false;
    }
    if (!is_index && all_zero_pass) {
      r.degenerate = true;
      r.reason = "output '" + name +
                 "' is within tolerance of zero on every seed: an all-zeros kernel passes";
    } else if (same_across_seeds) {
      r.degenerate = true;
      r.reason = "output '" + name +
                 "' does not change with the inputs: a kernel can return a memorized constant";
    } else if (single_constant) {
      r.degenerate = true;
      r.reason = "output '" + name +
                 "' is one value on every seed (within tolerance): a constant-fill kernel passes";
    }
    if (r.degenerate) break;
  }
  r.zero_pass_share = total ? static_cast<double>(zero_ok) / static_cast<double>(total) : 0.0;
  if (!r.degenerate && r.zero_pass_share > 0.5) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "%.0f%% of output elements are within tolerance of zero",
                  100.0 * r.zero_pass_share);
    r.warning = buf;
  }
  return r;
}

} // namespace kiln
