// Verification, calibration and the eager baseline. The reference runs here, after the kernel's
// call, on tensors the kernel host never sees; outputs are read from the shared buffers once the
// host is idle.
#include "executor/verify.hpp"

#include "data/reference.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln {

namespace {

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

// One pass over float32 / float64 host tensors, the same rule as the tensor-op path below. That
// path materialises a few float64 copies of the output (1 GiB each at 128M elements) and took a
// minute a check on this VM's cpu, so big-output tasks ran out of job time while the kernel itself
// was seconds (issue #15: kb_l1_87).
template <class O, class R>
std::optional<mismatch> compare_host(const O* o, const R* r, int64_t n, const tolerance& tol) {
  struct part {
    int64_t bad = 0, first = -1;
    double max_abs = 0, max_rel = 0;
    bool any_rel = false;
  };
  constexpr int64_t chunk = int64_t{1} << 20;
  std::vector<part> parts(static_cast<size_t>((n + chunk - 1) / chunk));
  at::parallel_for(0, static_cast<int64_t>(parts.size()), 1, [&](int64_t pb, int64_t pe) {
    for (int64_t p = pb; p < pe; ++p) {
      part& q = parts[static_cast<size_t>(p)];
      for (int64_t i = p * chunk, e = std::min(n, i + chunk); i < e; ++i) {
        const double od = static_cast<double>(o[i]), rd = static_cast<double>(r[i]);
        const bool both_nan = std::isnan(od) && std::isnan(rd);
        double diff = std::abs(od - rd);
        // An infinite reference must be matched exactly: rtol * inf would admit any value.
        const bool good = od == rd || both_nan ||
                          (std::isfinite(rd) && diff <= tol.atol + tol.rtol * std::abs(rd));
        if (!good && q.bad++ == 0) q.first = i;
        // As masked_fill(both_nan, 0).nan_to_num(inf): NaN -> inf, inf -> the largest double.
        if (both_nan)
          diff = 0;
        else if (std::isnan(diff))
          diff = std::numeric_limits<double>::infinity();
        else if (std::isinf(diff))
          diff = std::numeric_limits<double>::max();
        q.max_abs = std::max(q.max_abs, diff);
        if (std::abs(rd) > tol.atol) {
          const double rel = diff / std::abs(rd);
          q.max_rel = q.any_rel ? std::max(q.max_rel, rel) : rel;
          q.any_rel = true;
        }
      }
    }
  });
  mismatch mm;
  bool any_rel = false;
  for (const part& q : parts) {
    if (q.bad > 0 && mm.bad_count == 0) mm.first_bad_index = q.first;
    mm.bad_count += q.bad;
    mm.max_abs_err = std::max(mm.max_abs_err, q.max_abs);
    if (q.any_rel) mm.max_rel_err = any_rel ? std::max(mm.max_rel_err, q.max_rel) : q.max_rel;
    any_rel = any_rel || q.any_rel;
  }
  if (mm.bad_count == 0) return std::nullopt;
  return mm;
}

template <class O>
std::optional<mismatch> compare_host_ref(const O* o, const at::Tensor& r, int64_t n,
                                         const tolerance& tol) {
  if (r.scalar_type() == at::kFloat) return compare_host(o, r.data_ptr<float>(), n, tol);
  return compare_host(o, r.data_ptr<double>(), n, tol);
}

bool host_float(const at::Tensor& t) {
  return t.is_cpu() && t.is_contiguous() &&
         (t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble);
}

} // namespace

std::optional<mismatch> compare_output(const at::Tensor& out, const at::Tensor& ref,
                                       const tolerance& tol, int64_t slice) {
  auto o = out.reshape({-1});
  auto r = ref.reshape({-1});
  mismatch mm;
  if (o.numel() != r.numel()) {
    mm.bad_count = std::max(o.numel(), r.numel());
    mm.first_bad_index = 0;
    mm.max_abs_err = mm.max_rel_err = std::numeric_limits<double>::infinity();
    return mm;
  }
  if (host_float(o) && host_float(r)) {
    if (o.scalar_type() == at::kFloat)
      return compare_host_ref(o.data_ptr<float>(), r, o.numel(), tol);
    return compare_host_ref(o.data_ptr<double>(), r, o.numel(), tol);
  }
  // The tensor-op path (a device, integers) a slice at a time: its float64 copies of a 1e9-element
  // output are 8 GB each, more than a job's whole budget beside its buffers on an 80 GB card.
  // An output kept in host memory (trials.cpp) is compared on the reference's device.
  slice = std::max<int64_t>(1, slice);
  const int64_t n = o.numel();
  struct compared {
    at::Tensor bad, diff, ref;
  };
  auto compare_slice = [&](int64_t b) {
    const int64_t e = std::min(n, b + slice);
    auto os = o.slice(0, b, e).to(r.device());
    auto rs = r.slice(0, b, e);
    compared c{{}, {}, rs};
    if (rs.scalar_type() == at::kLong || os.scalar_type() == at::kLong) {
      auto oi = os.to(at::kLong), ri = rs.to(at::kLong);
      c.bad = oi.ne(ri);
      c.diff = (oi.to(at::kDouble) - ri.to(at::kDouble)).abs();
    } else {
      auto od = os.to(at::kDouble), rd = rs.to(at::kDouble);
      auto both_nan = od.isnan().logical_and(rd.isnan());
      c.diff = (od - rd).abs();
      auto good = c.diff.le(tol.atol + tol.rtol * rd.abs())
                      .logical_and(rd.isfinite())
                      .logical_or(od.eq(rd))
                      .logical_or(both_nan);
      c.bad = good.logical_not();
      c.diff =
          c.diff.masked_fill(both_nan, 0.0).nan_to_num(std::numeric_limits<double>::infinity());
    }
    return c;
  };
  // Counting is the common case (every check of every job); the maxima only describe a mismatch.
  for (int64_t b = 0; b < n; b += slice) {
    auto c = compare_slice(b);
    const int64_t count = c.bad.sum().item<int64_t>();
    if (count > 0 && mm.bad_count == 0)
      mm.first_bad_index = b + c.bad.nonzero().select(1, 0)[0].item<int64_t>();
    mm.bad_count += count;
  }
  if (mm.bad_count == 0) return std::nullopt;
  bool any_rel = false;
  for (int64_t b = 0; b < n; b += slice) {
    auto c = compare_slice(b);
    mm.max_abs_err = std::max(mm.max_abs_err, c.diff.max().item<double>());
    auto rabs = c.ref.to(at::kDouble).abs();
    auto sel = rabs.gt(tol.atol);
    if (sel.any().item<bool>()) {
      double rel = (c.diff.masked_select(sel) / rabs.masked_select(sel)).max().item<double>();
      mm.max_rel_err = any_rel ? std::max(mm.max_rel_err, rel) : rel;
      any_rel = true;
    }
  }
  return mm;
}

std::optional<check_result> check_outputs(const job_context& c, uint64_t seed,
                                          const std::vector<at::Tensor>& outputs, int check) {
  const task& t = *c.t;
  auto ref = run_reference(t, make_inputs(t, seed, c.dev->device), *c.ref_params);
  if (!ref) return failure(outcome_kind::runtime_error, "reference failed: " + ref.message());
  for (size_t i = 0; i < ref->size() && i < outputs.size(); ++i) {
    if (auto mm = compare_output(outputs[i], (*ref)[i], t.tol)) {
      mm->output = t.outputs[i];
      mm->check = check;
      auto r = failure(outcome_kind::wrong,
                       "output '" + mm->output + "': " + std::to_string(mm->bad_count) +
                           " elements outside tolerance" +
                           (check >= 0 ? " in check " + std::to_string(check)
                                       : std::string(" in a timed trial checked after timing")));
      r.error = mm;
      return r;
    }
  }
  return std::nullopt;
}

std::optional<check_result> calibrate(job_context& c, int calls, int64_t flush_bytes) {
  auto inputs = draw_inputs(c, fresh_seed());
  std::vector<double> wall, outside, residual, round_trip;
  std::vector<host_phases> host;
  call_plan plan;
  plan.empty = true;
  plan.flush = flush_bytes > 0;
  plan.flush_bytes = flush_bytes;
  c.costs = protocol_costs{};
  for (int i = 0; i < calls; ++i) {
    call_sample s;
    if (auto bad = call_kernel(c, inputs, plan, s)) return bad;
    wall.push_back(s.trusted_ms);
    residual.push_back(s.residual_ms);
    round_trip.push_back(s.round_trip_ms);
    host.push_back(s.host);
  }
  // What an empty call's cycle costs in CPU beyond its wall time (the protocol's own work).
  for (int i = 0; i < 8; ++i) {
    auto r = c.host->empty_call(c.deadline_ms);
    if (r.failure != call_failure::none)
      return failure(outcome_kind::runtime_error, "kernel process failed while idle: " + r.why);
    if (r.prev_cycle_cpu_ms >= 0)
      outside.push_back(std::max(0.0, r.prev_cycle_cpu_ms - r.prev_wall_ms));
  }
  auto& k = c.costs;
  k.wall_p10_ms = percentile(wall, 0.1);
  k.wall_p50_ms = percentile(wall, 0.5);
  k.wall_p90_ms = percentile(wall, 0.9);
  k.round_trip_p50_ms = percentile(round_trip, 0.5);
  k.host_p50 = median_phases(host);
  // Per call, the protocol's own CPU beyond the wall time: microseconds on cpu; the CUDA
  // driver's threads wake now and then, so a floor there.
  double floor_ms = c.dev->device.is_cpu() ? 0.02 : 0.2;
  k.idle_cpu_ms = std::max(floor_ms, 2 * percentile(outside, 1.0));
  k.drain_slack_ms = std::max(0.02, 3 * percentile(residual, 0.9));
  k.samples = calls;
  return std::nullopt;
}

check_result verify_kernel(job_context& c, const verify_options& opts) {
  for (int check = 0; check < opts.checks; ++check) {
    uint64_t seed = fresh_seed();
    auto inputs = draw_inputs(c, seed);
    call_sample s;
    call_plan plan;
    if (auto bad = call_kernel(c, inputs, plan, s)) return *bad;
    if (auto bad = inspect_buffers(c, inputs)) return *bad;
    if (auto bad = inspect_params(c)) return *bad; // before the comparison: the better label
    std::vector<at::Tensor> outs;
    for (auto& g : c.buffers->outputs()) outs.push_back(g.data);
    if (auto bad = check_outputs(c, seed, outs, check)) return *bad;
  }
  if (auto bad = check_last_cycle(c)) return *bad;
  check_result r;
  r.message = std::to_string(opts.checks) + " checks passed";
  return r;
}

check_result time_reference(const task& t, const std::vector<at::Tensor>& params,
                            const timing_options& opts, const run_device& dev) {
  auto inputs = make_inputs(t, fresh_seed(), dev.device);
  auto run = dev.clock([&]() -> status {
    auto r = run_reference(t, inputs, params);
    if (!r) return r.err();
    return ok();
  });
  // Like the kernel's buffers: the reference reads its inputs and params from memory each trial.
  auto prepare = [&]() -> status {
    if (dev.device.is_cpu())
      for (const auto* v : {static_cast<const std::vector<at::Tensor>*>(&inputs), &params})
        for (const auto& x : *v)
          if (x.defined() && x.is_contiguous())
            evict_from_cache(x.data_ptr(), static_cast<int64_t>(x.numel() * x.element_size()));
    return ok();
  };
  auto summary = measure(opts, *dev.flusher, prepare, run);
  if (!summary)
    return failure(outcome_kind::runtime_error, "reference failed: " + summary.message());
  check_result r;
  r.time = summary->t;
  return r;
}

} // namespace kiln
