#include "data/synth_filter.hpp"

#include "data/degeneracy.hpp"
#include "data/reference.hpp"

#include <ATen/ATen.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace kiln {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

filter_verdict reject(reject_reason r, std::string detail, double ms = 0) {
  filter_verdict v;
  v.reason = r;
  v.detail = std::move(detail);
  v.eager_ms = ms;
  return v;
}

std::string ms_text(const char* fmt, double a, double b) {
  char buf[128];
  std::snprintf(buf, sizeof buf, fmt, a, b);
  return buf;
}

} // namespace

filter_verdict filter_task(const task& t, const filter_options& opts) {
  try {
    // The params the task will really have: default_param_seed is a function of the name (or
    // the task's param_seed).
    auto params = make_params(t, default_param_seed(t), opts.device);
    auto inputs = make_inputs(t, 7, opts.device);
    auto t0 = std::chrono::steady_clock::now();
    auto warm = run_reference(t, inputs, params);
    synchronize(opts.device);
    double warm_ms = ms_since(t0);
    if (!warm) return reject(reject_reason::reference_error, warm.message());
    for (std::size_t o = 0; o < warm->size(); ++o)
      if ((*warm)[o].is_floating_point() && !at::isfinite((*warm)[o]).all().item<bool>())
        return reject(reject_reason::non_finite, "output '" + t.outputs[o] + "' has NaN or Inf");
    warm->clear();
    // A warm-up far above the window needs no timed runs to be called too slow.
    if (opts.max_ms > 0 && warm_ms > 4 * opts.max_ms)
      return reject(reject_reason::too_slow,
                    ms_text("eager %.3f ms (warm-up) above %.3f ms", warm_ms, opts.max_ms),
                    warm_ms);
    std::vector<double> ms;
    for (int i = 0; i < std::max(1, opts.timing_runs); ++i) {
      auto t1 = std::chrono::steady_clock::now();
      auto out = run_reference(t, inputs, params);
      synchronize(opts.device);
      ms.push_back(ms_since(t1));
    }
    std::sort(ms.begin(), ms.end());
    double median = ms[ms.size() / 2];
    if (median < opts.min_ms)
      return reject(reject_reason::too_fast,
                    ms_text("eager %.4f ms below %.4f ms", median, opts.min_ms), median);
    if (opts.max_ms > 0 && median > opts.max_ms)
      return reject(reject_reason::too_slow,
                    ms_text("eager %.3f ms above %.3f ms", median, opts.max_ms), median);
    inputs.clear();
    params.clear();
    auto deg = check_degeneracy(t, opts.device, opts.degeneracy_seeds);
    if (!deg) return reject(reject_reason::reference_error, deg.message(), median);
    if (deg->degenerate) {
      bool nan = deg->reason.find("NaN or Inf") != std::string::npos;
      return reject(nan ? reject_reason::non_finite : reject_reason::degenerate, deg->reason,
                    median);
    }
    filter_verdict v;
    v.ok = true;
    v.eager_ms = median;
    return v;
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    return reject(reject_reason::reference_error, "reference failed: " + what);
  }
}

} // namespace kiln
