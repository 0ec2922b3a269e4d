// The call primitive. On cuda the executor's timed window spans its own copy of fresh inputs into
// the shared region, the kernel host's call and its own copy of the outputs back: a kernel that
// computes before the inputs arrive, or after the host replied, has nothing to compute with or
// is still inside the window.
#include "executor/kernel_calls.hpp"

#include "data/reference.hpp"
#ifdef KILN_HAVE_CUDA
#include "executor/cuda_runtime.hpp"
#endif

#include <ATen/ATen.h>
#include <chrono>
#include <cstdio>
#include <limits>
#include <random>

namespace kiln {

namespace {

constexpr int64_t poison_i = std::numeric_limits<int64_t>::min();

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void poison(const at::Tensor& t) {
  if (t.scalar_type() == at::kLong)
    t.fill_(poison_i);
  else
    t.fill_(std::numeric_limits<float>::quiet_NaN());
}

void evict_buffers(const shared_buffers& b) {
  for (const auto* v : {&b.inputs(), &b.params(), &b.outputs()})
    for (const auto& g : *v)
      evict_from_cache(g.storage.data_ptr(),
                       static_cast<int64_t>(g.storage.numel() * g.storage.element_size()));
}

void device_sync(const run_device& d) {
#ifdef KILN_HAVE_CUDA
  if (!d.device.is_cpu()) (void)cuda_synchronize();
#else
  (void)d;
#endif
}

std::string ms_text(double ms) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", ms);
  return b;
}

// Work before a call (racing the executor's refill) or after its reply (the host answered early)
// is CPU the executor's clock did not see: a call's cycle may use its wall time on each thread.
// Each cycle gets a loose bound: the host's CPU clock, read from this process, advances by whole
// ticks for a thread that is running when read (measured on a 250 Hz kernel: a quarter of the
// readings unchanged, then jumps of 4 ms), so one cycle may carry a tick earned in an earlier one
// (the honest kernels refused for it read "2.4 ms of CPU over a 0.7 ms call"); 10 ms covers a
// 100 Hz kernel. Ticks move time between cycles and create none, so the sum over the job gets a
// tight bound, and faking a median needs many cycles.
constexpr double clock_tick_ms = 10.0;

std::optional<check_result> cycle_check(job_context& c, const call_result& r) {
  if (c.costs.samples == 0 || r.prev_cycle_cpu_ms < 0) return std::nullopt;
  c.cycles.cpu_ms += r.prev_cycle_cpu_ms;
  c.cycles.wall_ms += r.prev_wall_ms;
  ++c.cycles.count;
  // All threads together can use threads x the call's wall time.
  double all = 1.2 * r.prev_wall_ms * c.threads + c.costs.idle_cpu_ms + 1.0 + clock_tick_ms;
  if (r.prev_cycle_cpu_ms > all)
    return failure(outcome_kind::runtime_error,
                   "the kernel process used " + ms_text(r.prev_cycle_cpu_ms) +
                       " ms of CPU over a " + ms_text(r.prev_wall_ms) + " ms call (allowed " +
                       ms_text(all) +
                       " ms): work before or after a call is not timed, so it is refused");
  return std::nullopt;
}

} // namespace

std::optional<check_result> check_last_cycle(job_context& c) {
  auto r = c.host->empty_call(c.deadline_ms);
  if (r.failure != call_failure::none)
    return failure(outcome_kind::runtime_error, "kernel process failed after its calls: " + r.why);
  if (auto bad = cycle_check(c, r)) return bad;
  const auto& y = c.cycles;
  double all = 1.01 * y.wall_ms * c.threads + y.count * c.costs.idle_cpu_ms + 0.5;
  if (y.cpu_ms <= all) return std::nullopt;
  return failure(outcome_kind::runtime_error,
                 "the kernel process used " + ms_text(y.cpu_ms) + " ms of CPU over " +
                     std::to_string(y.count) + " calls taking " + ms_text(y.wall_ms) +
                     " ms (allowed " + ms_text(all) +
                     " ms): work before or after a call is not timed, so it is refused");
}

check_result failure(outcome_kind k, std::string message) {
  check_result r;
  r.kind = k;
  r.message = std::move(message);
  return r;
}

at::Tensor kernel_form(const at::Tensor& x) {
  if (x.scalar_type() == at::kLong) return x.contiguous();
  return x.to(at::kFloat).contiguous();
}

std::vector<at::Tensor> kernel_form(const std::vector<at::Tensor>& v) {
  std::vector<at::Tensor> out;
  for (const auto& x : v) out.push_back(kernel_form(x));
  return out;
}

host_phases median_phases(const std::vector<host_phases>& calls) {
  if (calls.empty()) return {};
  std::vector<double> h, s, c, d;
  for (const auto& p : calls) {
    h.push_back(p.handler_ms);
    s.push_back(p.settle_ms);
    c.push_back(p.call_ms);
    d.push_back(p.drain_ms);
  }
  return {median_of(h), median_of(s), median_of(c), median_of(d)};
}

std::string phases_text(const host_phases& p) {
  return ms_text(p.handler_ms) + " ms (to the start " + ms_text(p.settle_ms) + ", the call " +
         ms_text(p.call_ms) + ", the synchronize after " + ms_text(p.drain_ms) + ")";
}

uint64_t fresh_seed() {
  static thread_local std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

std::vector<at::Tensor> draw_inputs(const job_context& c, uint64_t seed) {
  return kernel_form(make_inputs(*c.t, seed, c.dev->device));
}

std::optional<check_result> call_kernel(job_context& c, const std::vector<at::Tensor>& inputs,
                                        const call_plan& plan, call_sample& sample) {
  auto& b = *c.buffers;
  const bool cpu = c.dev->device.is_cpu();
  for (auto& g : b.outputs()) poison(g.data);
  if (cpu) {
    for (size_t i = 0; i < inputs.size(); ++i) b.inputs()[i].data.copy_(inputs[i]);
    if (plan.flush) {
      evict_buffers(b);
      c.dev->flusher->flush(plan.flush_bytes);
    }
  }
  if (!cpu && c.discard.empty())
    for (auto& g : b.outputs()) c.discard.push_back(at::empty_like(g.data));
  if (plan.keep && !cpu && plan.keep->empty())
    for (auto& g : b.outputs()) plan.keep->push_back(at::empty_like(g.data));
  device_sync(*c.dev);

  double t0 = now_ms();
  if (!cpu) {
    // The copy leaves the inputs in L2: flush after it, so the kernel starts as cold as the eager
    // baseline does (the flush is inside the window, and so inside the calibration's too).
    for (size_t i = 0; i < inputs.size(); ++i) b.inputs()[i].data.copy_(inputs[i]);
    if (plan.flush) c.dev->flusher->flush(plan.flush_bytes);
    device_sync(*c.dev);
  }
  auto r = plan.empty ? c.host->empty_call(c.deadline_ms) : c.host->call(c.deadline_ms);
  if (!cpu && r.failure == call_failure::none) {
    auto& dst = plan.keep ? *plan.keep : c.discard;
    for (size_t i = 0; i < dst.size(); ++i) dst[i].copy_(b.outputs()[i].data);
    device_sync(*c.dev);
  }
  double t1 = now_ms();

  switch (r.failure) {
  case call_failure::none: break;
  case call_failure::timeout:
    return failure(outcome_kind::timeout,
                   "no result by the job's deadline; the kernel process was killed");
  case call_failure::died:
    return failure(outcome_kind::runtime_error,
                   "kernel process died" +
                       (c.host->exit_text().empty() ? std::string() : ": " + c.host->exit_text()));
  case call_failure::protocol:
    return failure(outcome_kind::runtime_error, "the kernel process broke the protocol: " + r.why);
  }
  switch (r.code) {
  case kh_code::ok: break;
  case kh_code::kernel_failed:
    return failure(outcome_kind::runtime_error, r.text.empty() ? "the entry point returned non-zero"
                                                               : "the call failed: " + r.text);
  case kh_code::device_error:
    return failure(outcome_kind::runtime_error, "device error: " + r.text);
  case kh_code::load_failed:
  case kh_code::bad_command:
    return failure(outcome_kind::runtime_error, "the kernel process refused the call: " + r.text);
  }
  if (auto bad = cycle_check(c, r)) return bad;
  sample.trusted_ms = cpu ? r.wall_ms : t1 - t0;
  sample.reported_ms = cpu ? r.wall_ms : r.stream_ms;
  sample.residual_ms = r.residual_ms;
  sample.round_trip_ms = r.wall_ms;
  sample.host = r.host;
  if (!cpu && r.stream_ms > sample.trusted_ms + 0.05)
    return failure(outcome_kind::runtime_error, "the kernel process reported " +
                                                    ms_text(r.stream_ms) +
                                                    " ms for a call the executor saw take " +
                                                    ms_text(sample.trusted_ms) + " ms");
  if (cpu && plan.keep) {
    plan.keep->clear();
    for (auto& g : b.outputs()) plan.keep->push_back(g.data.clone());
  }
  return std::nullopt;
}

std::optional<check_result> inspect_buffers(job_context& c, const std::vector<at::Tensor>& inputs) {
  const task& t = *c.t;
  std::vector<std::string> in_names, par_names;
  for (const auto& d : t.inputs) in_names.push_back(d.name);
  for (const auto& d : t.params) par_names.push_back(d.name);
  auto broken = c.buffers->first_broken_guard(in_names, par_names, t.outputs);
  if (!broken.empty()) {
    c.buffers->reset_guards();
    return failure(outcome_kind::runtime_error,
                   "out-of-bounds write: guard zone around " + broken + " overwritten");
  }
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!at::equal(c.buffers->inputs()[i].data, inputs[i]))
      return failure(outcome_kind::input_mutated,
                     "the kernel wrote into input '" + t.inputs[i].name + "'");
  return std::nullopt;
}

std::optional<check_result> inspect_params(job_context& c) {
  const task& t = *c.t;
  for (size_t i = 0; i < c.params->size(); ++i)
    if (!at::equal(c.buffers->params()[i].data, (*c.params)[i]))
      return failure(outcome_kind::input_mutated,
                     "the kernel wrote into param '" + t.params[i].name + "'");
  return std::nullopt;
}

} // namespace kiln
