#include "data/degeneracy.hpp"

#include "data/reference.hpp"

#include <ATen/ATen.h>
#include <algorithm>

namespace kiln {

namespace {

// Zeros (or one constant) within tolerance on more of an output's elements than this, on any
// seed: the check barely tells such a kernel from the answer (the importer's limit too).
constexpr double max_trivial_pass_share = 0.99;

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
    bool same_across_seeds = true;
    // The one constant a constant-fill kernel would best return, whatever the seed.
    double mean = 0;
    if (!is_index) {
      for (int s = 0; s < seeds; ++s) mean += runs[s][o].mean().item<double>();
      mean /= seeds;
    }
    // Zeros: the seed on which they come closest to passing. The constant: its share on the seed
    // where it does worst, since a constant-fill kernel must pass every seed.
    double worst_zero = 0, const_every_seed = 1;
    int worst_zero_seed = 0;
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
      int64_t hits = within(at::zeros_like(y), y, atol, rtol).sum().item<int64_t>();
      zero_ok += hits;
      total += y.numel();
      double n = static_cast<double>(std::max<int64_t>(y.numel(), 1));
      if (hits / n > worst_zero) {
        worst_zero = hits / n;
        worst_zero_seed = s;
      }
      double const_hits =
          static_cast<double>(within(at::full_like(y, mean), y, atol, rtol).sum().item<int64_t>());
      const_every_seed = std::min(const_every_seed, const_hits / n);
      if (s > 0 && !within(runs[0][o], y, atol, rtol).all().item<bool>()) same_across_seeds = false;
    }
    char buf[320];
    if (!is_index && worst_zero > max_trivial_pass_share) {
      // Zeros fail an element only where |y| > atol + rtol |y|: an atol under this quantile of
      // |y| makes zeros miss on at least a tenth of the elements.
      auto mag = runs[worst_zero_seed][o].abs().flatten();
      int64_t k =
          std::max<int64_t>(1, static_cast<int64_t>(0.9 * static_cast<double>(mag.numel())));
      double q = std::get<0>(at::kthvalue(mag, k)).item<double>();
      std::snprintf(buf, sizeof buf,
                    "output '%s': an all-zeros output is within tolerance on %.2f%% of its "
                    "elements (seed %d): the check cannot tell zeros from the answer; atol %.3g "
                    "and rtol %.3g would need atol below %.3g (90%% of |y| is below it), if "
                    "float32 rounding allows",
                    name.c_str(), 100.0 * worst_zero, 1000 + worst_zero_seed, atol, rtol,
                    q * (1 - rtol));
      r.degenerate = true;
      r.reason = buf;
    } else if (same_across_seeds) {
      r.degenerate = true;
      r.reason = "output '" + name +
                 "' does not change with the inputs: a kernel can return a memorized constant";
    } else if (!is_index && const_every_seed > max_trivial_pass_share) {
      std::snprintf(buf, sizeof buf,
                    "output '%s': the constant %.6g is within tolerance on %.2f%% of its "
                    "elements on every seed: a constant-fill kernel all but passes",
                    name.c_str(), mean, 100.0 * const_every_seed);
      r.degenerate = true;
      r.reason = buf;
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
