#include "data/task_validate.hpp"

#include "data/reference.hpp"
#include "data/task_hash.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace kiln {

validation validate_task(const task& t, const validate_options& opts) {
  validation v;
  v.name = t.name;
  v.content_hash = hash_hex(content_hash(t));
  v.origin = t.origin;
  v.level = t.level;
  v.ops = t.ops.size();
  for (const auto& o : t.outputs) {
    auto r = find_value(t, o);
    v.output_shape += (v.output_shape.empty() ? "" : " ") + to_string(value_shape(t, r));
  }
  try {
    auto params = make_params(t, default_param_seed(t), opts.device);
    auto inputs = make_inputs(t, digest_input_seed, opts.device);
    auto warm = run_reference(t, inputs, params);
    if (!warm) {
      v.verdict = warm.message();
      return v;
    }
    if (opts.digest_samples > 0) {
      // Inputs and params only need enough samples to show they were drawn alike; taken after
      // the reference ran, so a reference that writes into its params or inputs (a module's
      // forward that updates its own state) shows as a redraw that differs from Kiln's.
      const int64_t few = std::min<int64_t>(opts.digest_samples, 32);
      for (size_t i = 0; i < params.size(); ++i)
        v.digest_params.push_back(digest_of(t.params[i].name, params[i], few));
      for (size_t i = 0; i < inputs.size(); ++i)
        v.digest_inputs.push_back(digest_of(t.inputs[i].name, inputs[i], few));
      for (size_t i = 0; i < warm->size(); ++i)
        v.digest_outputs.push_back(digest_of(t.outputs[i], (*warm)[i], opts.digest_samples));
    }
    warm->clear(); // free the outputs (gigabytes on gpu-profile tasks) before timing
    synchronize(opts.device);
    std::vector<double> ms;
    for (int i = 0; i < std::max(1, opts.timing_runs); ++i) {
      auto t0 = std::chrono::steady_clock::now();
      auto out = run_reference(t, inputs, params);
      synchronize(opts.device);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    v.eager_ms = ms[ms.size() / 2];
    inputs.clear();
    params.clear(); // check_degeneracy draws its own: never two copies of a task's weights
    auto deg = check_degeneracy(t, opts.device, opts.degeneracy_seeds);
    if (!deg) {
      v.verdict = deg.message();
      return v;
    }
    v.warning = deg->warning;
    if (deg->degenerate) {
      v.verdict = "degenerate: " + deg->reason;
      return v;
    }
    char buf[160];
    if (opts.min_eager_ms > 0 && v.eager_ms < opts.min_eager_ms) {
      std::snprintf(buf, sizeof buf, "eager %.3f ms is below the window's %.3f ms", v.eager_ms,
                    opts.min_eager_ms);
      v.verdict = buf;
      return v;
    }
    if (opts.max_eager_ms > 0 && v.eager_ms > opts.max_eager_ms) {
      std::snprintf(buf, sizeof buf, "eager %.3f ms is above the window's %.3f ms", v.eager_ms,
                    opts.max_eager_ms);
      v.verdict = buf;
      return v;
    }
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    v.verdict = "reference failed: " + what;
    return v;
  }
  v.ok = true;
  v.verdict = "ok";
  return v;
}

} // namespace kiln
