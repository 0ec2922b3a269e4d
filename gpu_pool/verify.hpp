// Honest verification and timing of a kernel (and timing of the eager reference), run inside the
// executor, on the cpu or a cuda device. Every kernel call gets fresh guarded clones of its inputs
// and params and poisoned (NaN) outputs; the reference runs on its own tensors.
//   task + params --fresh seed--> inputs --reference--> expected
//                                        --clones--> kernel --> outputs, guards, inputs --> verdict
#pragma once

#include "data/expected.hpp"
#include "data/task_spec.hpp"
#include "gpu_pool/job.hpp"
#include "gpu_pool/timing.hpp"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

// Pointers in task declaration order (see skills/kiln_abi.h); returns the kernel's status.
using kernel_call = std::function<status(const std::vector<const void*>& inputs,
                                         const std::vector<const void*>& params,
                                         const std::vector<void*>& outputs)>;

struct check_result {
  outcome_kind kind = outcome_kind::correct;
  std::string message;
  std::optional<mismatch> error;
  std::optional<timings> time;
  bool retire = false; // the process may be damaged (guard zone hit): do not reuse it
};

// Where kernels run and how they are timed: cpu = monotonic clock + LLC flush; cuda = events +
// device synchronize + L2 flush (gpu_pool/cuda_runtime.hpp).
using clock_fn = std::function<timed_fn(std::function<status()>)>;
struct run_device {
  c10::Device device = c10::Device(c10::kCPU);
  cache_flusher* flusher = nullptr;
  clock_fn clock = wall_timed;
};

// Compares a kernel output with the reference: allclose(atol, rtol) per element, NaN never equal
// to a number, integer outputs exactly. nullopt when everything is within tolerance.
std::optional<mismatch> compare_output(const at::Tensor& out, const at::Tensor& ref,
                                       const tolerance& tol);

// `checks` rounds of fresh inputs (seeds from std::random_device); each round: reference, kernel,
// guard / input-mutation / tolerance checks, and a second kernel run that must agree. `kernel`
// must have finished its work (and reported device errors) when it returns.
check_result verify_kernel(const task& t, const std::vector<at::Tensor>& params,
                           const kernel_call& kernel, const verify_options& opts,
                           c10::Device device);

// Times the kernel. Two input sets alternate in the same buffers between trials (a kernel that
// caches results by pointer gets stale answers), outputs are re-poisoned every trial, and the last
// trial's outputs are checked against the reference afterwards, then one more call on a third
// fresh set in the same buffers.
// `kernel` may return before its work is done: dev.clock waits for it.
check_result time_kernel(const task& t, const std::vector<at::Tensor>& params,
                         const kernel_call& kernel, const timing_options& opts,
                         const run_device& dev);

// Times run_reference on one fresh input set, by the same method.
check_result time_reference(const task& t, const std::vector<at::Tensor>& params,
                            const timing_options& opts, const run_device& dev);

} // namespace kiln
