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

// Elements [i, i + n) of a flattened output, as float64 (index outputs keep their dtype).
at::Tensor piece(const at::Tensor& flat, int64_t i, int64_t n, bool is_index) {
  auto p = flat.slice(0, i, std::min(i + n, flat.numel()));
  return is_index ? p : p.to(at::kDouble);
}

// The 0.9-quantile of |y|: exact up to degeneracy_slice_elems elements, past that over an evenly
// spaced sample of them (it only names an atol that would work).
double abs_q90(const at::Tensor& y) {
  auto flat = y.flatten();
  constexpr int64_t cap = degeneracy_slice_elems;
  int64_t step = std::max<int64_t>(1, (flat.numel() + cap - 1) / cap);
  auto mag = flat.slice(0, 0, flat.numel(), step).to(at::kDouble).abs();
  int64_t k = std::max<int64_t>(1, static_cast<int64_t>(0.9 * static_cast<double>(mag.numel())));
  return std::get<0>(at::kthvalue(mag, k)).item<double>();
}

} // namespace

expected<degeneracy_report> check_degeneracy(const task& t, c10::Device device, int seeds,
                                             int64_t slice) {
  seeds = std::max(seeds, 2);
  slice = std::max<int64_t>(slice, 1);
  auto params = make_params(t, default_param_seed(t), device);
  std::vector<std::vector<at::Tensor>> runs; // as the reference makes them, flattened
  for (int s = 0; s < seeds; ++s) {
    auto out = run_reference(t, make_inputs(t, 1000 + s, device), params);
    if (!out) return out.err();
    for (auto& y : *out) y = y.flatten();
    runs.push_back(std::move(*out));
  }
  degeneracy_report r;
  double atol = t.tol.atol, rtol = t.tol.rtol;
  int64_t zero_ok = 0, total = 0;
  for (std::size_t o = 0; o < t.outputs.size(); ++o) {
    const std::string& name = t.outputs[o];
    bool is_index = t.ops[find_value(t, name).index].is_index;
    int64_t n = runs[0][o].numel();
    bool same_across_seeds = true;
    // The one constant a constant-fill kernel would best return, whatever the seed.
    double mean = 0;
    if (!is_index && n > 0) {
      for (int s = 0; s < seeds; ++s)
        for (int64_t i = 0; i < n; i += slice)
          mean += piece(runs[s][o], i, slice, false).sum().item<double>();
      mean /= static_cast<double>(seeds) * static_cast<double>(n);
    }
    // Zeros: the seed on which they come closest to passing. The constant: its share on the seed
    // where it does worst, since a constant-fill kernel must pass every seed.
    double worst_zero = 0, const_every_seed = 1;
    int worst_zero_seed = 0;
    for (int s = 0; s < seeds; ++s) {
      int64_t hits = 0, const_hits = 0;
      for (int64_t i = 0; i < n; i += slice) {
        auto y = piece(runs[s][o], i, slice, is_index);
        if (!is_index && !at::isfinite(y).all().item<bool>()) {
          r.degenerate = true;
          r.reason = "output '" + name + "' has NaN or Inf (seed " + std::to_string(1000 + s) + ")";
          return r;
        }
        r.max_abs =
            std::max(r.max_abs, (is_index ? y.to(at::kDouble) : y).abs().max().item<double>());
        if (is_index) {
          if (s > 0 && !at::equal(y, piece(runs[0][o], i, slice, true))) same_across_seeds = false;
          continue;
        }
        hits += within(at::zeros_like(y), y, atol, rtol).sum().item<int64_t>();
        const_hits += within(at::full_like(y, mean), y, atol, rtol).sum().item<int64_t>();
        if (s > 0 && !within(piece(runs[0][o], i, slice, false), y, atol, rtol).all().item<bool>())
          same_across_seeds = false;
      }
      if (is_index) continue;
      zero_ok += hits;
      total += n;
      double count = static_cast<double>(std::max<int64_t>(n, 1));
      if (hits / count > worst_zero) {
        worst_zero = hits / count;
        worst_zero_seed = s;
      }
      const_every_seed = std::min(const_every_seed, static_cast<double>(const_hits) / count);
    }
    char buf[320];
    if (!is_index && worst_zero > max_trivial_pass_share) {
      // Zeros fail an element only where |y| > atol + rtol |y|: an atol under this quantile of
      // |y| makes zeros miss on at least a tenth of the elements.
      double q = abs_q90(runs[worst_zero_seed][o]);
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
