// One call of the kernel under test as the trusted executor makes it, shared by verification and
// timing: fresh inputs into the shared buffers, poisoned outputs, the call across the process
// boundary timed by the executor's own clock, and the checks every call gets (CPU the kernel host
// used outside its calls, inputs left unchanged).
//   fresh seed --draw--> private inputs --copy--> shared buffers --call (kernel host)--> outputs
//   cpu: [copy, poison, evict | t0 call t1]     cuda: [draw, poison | t0 copy, flush, call, snap
//   t1]
#pragma once

#include "data/task_spec.hpp"
#include "executor/kernel_host_client.hpp"
#include "executor/shared_buffers.hpp"
#include "executor/timing.hpp"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

struct check_result {
  outcome_kind kind = outcome_kind::correct;
  std::string message;
  std::optional<mismatch> error;
  std::optional<timings> time;
};

// Where trusted code (references, eager baselines) runs and how it is timed: cpu = monotonic
// clock + LLC flush; cuda = events + device synchronize + L2 flush (executor/cuda_runtime.hpp).
using clock_fn = std::function<timed_fn(std::function<status()>)>;
struct run_device {
  c10::Device device = c10::Device(c10::kCPU);
  cache_flusher* flusher = nullptr;
  clock_fn clock = wall_timed;
  // cuda: device bytes the timing loop's kept outputs may hold; beyond it they wait in host
  // memory (a 4 GB output kept 9 times does not fit an 80 GB card beside the job). The
  // executor gives it a third of the device. 0: no limit.
  int64_t keep_budget_bytes = 0;
};

// What the protocol costs on its own, measured with calls that skip the kernel, before the kernel
// is loaded (so it cannot influence them).
struct protocol_costs {
  double wall_p10_ms = 0, wall_p50_ms = 0, wall_p90_ms = 0; // the executor's clock per call
  double idle_cpu_ms = 0;    // CPU a call's cycle uses beyond wall x threads in the protocol alone
  double drain_slack_ms = 0; // cuda: residual an honest call leaves after its stream
  double round_trip_p50_ms = 0; // an empty call's parts, for messages
  host_phases host_p50;
  int samples = 0;
};

// Everything a call needs: the task, its params in kernel form (already in the shared buffers),
// the kernel host and the job's deadline.
struct job_context {
  const task* t = nullptr;
  const std::vector<at::Tensor>* ref_params = nullptr; // as the reference takes them
  const std::vector<at::Tensor>* params = nullptr;     // kernel form, as in the shared buffers
  kernel_host* host = nullptr;
  shared_buffers* buffers = nullptr;
  const run_device* dev = nullptr;
  int64_t deadline_ms = 0;
  int threads = 1; // the host's threads: a call may use wall x threads of CPU
  protocol_costs costs;
  struct {
    double cpu_ms = 0, wall_ms = 0;
    int count = 0;
  } cycles;                        // the host's CPU (all threads) and the calls' wall time
  std::vector<at::Tensor> discard; // cuda: where unkept output snapshots go (allocated once)
};

// What one call measured.
struct call_sample {
  double trusted_ms = 0;    // the executor's clock (cuda: input copy .. output snapshot, inclusive)
  double reported_ms = 0;   // cuda: the kernel host's events; cpu: trusted_ms
  double residual_ms = 0;   // cuda: device busy after the stream (reported)
  double round_trip_ms = 0; // the executor's clock from command to reply
  host_phases host;         // the host's own clock (untrusted; messages only)
};

// The kernel ABI's form of a tensor: float32 (int64 stays int64), dense, row-major.
at::Tensor kernel_form(const at::Tensor& x);
std::vector<at::Tensor> kernel_form(const std::vector<at::Tensor>& v);

// Fresh inputs from `seed`, in kernel form, on the job's device (the executor keeps them).
std::vector<at::Tensor> draw_inputs(const job_context& c, uint64_t seed);
// An unpredictable seed (std::random_device).
uint64_t fresh_seed();

// Each phase's median over calls, and its text for messages ("2.1 ms: 0.01 to the start, ...").
host_phases median_phases(const std::vector<host_phases>& calls);
std::string phases_text(const host_phases& p);

struct call_plan {
  bool flush = false;      // evict caches before the call (timed trials)
  int64_t flush_bytes = 0; // the device flush's size
  // Receives copies of the outputs. cuda: every call copies them inside its timed window (here,
  // or into c.discard), so the executor's clock covers the kernel's work however early the host
  // replies; cpu: copied after the call, untimed (CPU accounting covers early replies).
  std::vector<at::Tensor>* keep = nullptr;
  bool empty = false; // the protocol alone, kernel skipped (calibration)
};

// Loads `inputs` (kernel form) into the shared buffers, poisons the outputs, calls the kernel.
// A failure (timeout, crash, protocol, non-zero entry status, CPU outside calls) comes back as
// the check_result to report; `sample` is filled on success.
std::optional<check_result> call_kernel(job_context& c, const std::vector<at::Tensor>& inputs,
                                        const call_plan& plan, call_sample& sample);

// Checks the last call's CPU with one more call that skips the kernel (after the last trial no
// call would otherwise look), then the CPU of all the job's calls against their wall time.
std::optional<check_result> check_last_cycle(job_context& c);

// After a call: guard zones intact (a small out-of-bounds write; guards are refilled), then the
// inputs unchanged (input_mutated). Empty when all is well.
std::optional<check_result> inspect_buffers(job_context& c, const std::vector<at::Tensor>& inputs);
// Params stay in the shared buffers for the whole job: checked once the calls are done (a kernel
// that rewrote them, say into a faster layout, is input_mutated).
std::optional<check_result> inspect_params(job_context& c);

check_result failure(outcome_kind k, std::string message);

} // namespace kiln
