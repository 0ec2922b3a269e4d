// Honest verification and timing of a kernel that runs in another process (the kernel host), and
// timing of the eager reference, all decided in the trusted executor. Every call gets fresh input
// content no earlier call saw and NaN-poisoned outputs; references are computed after the kernel
// ran, in this process, which the kernel cannot reach.
//   calibrate (protocol alone) --> verify: checks x (fresh inputs, call, reference, compare)
//   --> time: trials (fresh inputs, call, keep a uniform sample of outputs) --> check the sample
#pragma once

#include "data/expected.hpp"
#include "data/task_spec.hpp"
#include "executor/kernel_calls.hpp"
#include "jobs/job.hpp"

#include <ATen/core/Tensor.h>
#include <optional>
#include <vector>

namespace kiln {

// Compares a kernel output with the reference: allclose(atol, rtol) per element, NaN never equal
// to a number, integer outputs exactly. nullopt when everything is within tolerance.
// Device and integer outputs are compared `slice` elements at a time (a bound on the float64
// temporaries); an output in host memory against a device reference is compared on the device.
std::optional<mismatch> compare_output(const at::Tensor& out, const at::Tensor& ref,
                                       const tolerance& tol, int64_t slice = int64_t{1} << 26);

// Empty calls (the kernel is not loaded yet): the protocol's own time per call, the CPU an idle
// host uses between calls, and (cuda) the drain residual of a call that launches nothing. A job
// that times calibrates with the trials' cache flush before each call (a host woken from idle,
// with cold caches, answers later: that is part of the protocol's cost a trial sees).
std::optional<check_result> calibrate(job_context& c, int calls, int64_t flush_bytes);

// `checks` rounds, each on fresh inputs from an unpredictable seed: call, guard and mutation
// checks, then the reference (computed after the call) and the tolerance check.
check_result verify_kernel(job_context& c, const verify_options& opts);

// Times the kernel: warm-up, then trials until the stop rule, then 1-3 more (so the last trial
// is not predictable), each on fresh inputs. The outputs of `checked_trials` trials chosen
// uniformly over all of them (reservoir sampling, decided by a generator the kernel cannot see)
// and of the last trial are kept and checked against references computed after the loop.
// cpu: the time is the executor's clock around the call less the protocol's p10 overhead; cuda:
// the kernel host's events, refused when the executor's own bound contradicts them.
check_result time_kernel(job_context& c, const timing_options& opts);

// Times run_reference on one fresh input set, by the same method, in this (trusted) process.
check_result time_reference(const task& t, const std::vector<at::Tensor>& params,
                            const timing_options& opts, const run_device& dev);

// Compares kept outputs against the reference on the inputs drawn from `seed`; `check` labels the
// mismatch (-1: a timed trial).
std::optional<check_result> check_outputs(const job_context& c, uint64_t seed,
                                          const std::vector<at::Tensor>& outputs, int check);

} // namespace kiln
