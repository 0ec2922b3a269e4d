// The cuda backend inside the kernel host (untrusted side): opens the device and the job's buffer
// region (a device allocation's fd from the executor, cuda_vmm.hpp), loads a cubin with its launch
// plan and walks the plan's steps (kernel launches, cuBLASLt GEMMs) on the legacy default stream,
// or a free-form program's nvcc shared object; and times one call by events. Library convolutions
// run through cuDNN (runtimes/cudnn_conv.hpp).
//   region fd --import--> region; cubin + plan.json | .so --load--> cuda_executable
//   --timed_call--> stream ms + residual ms (the executor bounds both by its own clock)
#pragma once

#include "data/expected.hpp"
#include "skills/launch_plan.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

// Makes `ordinal` current and creates its context, cuBLASLt handle and workspace: before the
// sandbox (the driver opens /dev/nvidia* here).
status cuda_host_open(int ordinal);

class cuda_executable {
public:
  // Reads `<cubin_path>` and `<cubin_path>.plan.json`, checks the plan and that every kernel's
  // parameter list matches the plan's argument sizes (artifact_loader::cuda_cubin_plan).
  static expected<cuda_executable> load_cubin(const std::string& cubin_path);
  // A free-form program's nvcc shared object, loaded with dlopen: it must export kiln_cuda_run
  // (skills/kiln_cuda_abi.h) (artifact_loader::cuda_shared_object).
  static expected<cuda_executable> load_shared_object(const std::string& so_path);
  cuda_executable(cuda_executable&&) noexcept;
  cuda_executable& operator=(cuda_executable&&) noexcept;
  ~cuda_executable();

  // Enqueues every step (or calls kiln_cuda_run with the legacy default stream); does not wait.
  // Pointers are device pointers in task declaration order.
  status run(const std::vector<const void*>& inputs, const std::vector<const void*>& params,
             const std::vector<void*>& outputs);
  // Runs the plan's library convolutions once and waits: cuDNN loads its sub-libraries and
  // kernels on first use, which must happen before the run seccomp filter. Only trusted library
  // code runs here (no generated kernel, no free-form entry point); the outputs it writes are
  // poisoned again before every call.
  status warm_library_steps(const std::vector<const void*>& inputs,
                            const std::vector<const void*>& params,
                            const std::vector<void*>& outputs);

private:
  cuda_executable() = default;
  status run_plan(const std::vector<const void*>& inputs, const std::vector<const void*>& params,
                  const std::vector<void*>& outputs, bool convs_only);
  struct impl;
  std::unique_ptr<impl> impl_;
};

struct cuda_call_time {
  double stream_ms = 0;   // start .. stop on the job's stream
  double residual_ms = 0; // stop .. the device idle (recorded after a whole-device synchronize)
  // The host's CPU clock over the call's phases: up to the start event (settled, where asked),
  // the call itself, and from the stop event to the device idle. Diagnostics only.
  double settle_ms = 0, call_ms = 0, drain_ms = 0;
};

// Runs `call` between events on the legacy default stream, synchronizes the whole device, then
// records a third event: work still running when the stream was done shows as the residual. An
// error names the CUDA error (a kernel fault); `sticky` is set when the context is damaged.
// `settle_start`: wait until the device has passed the start event before calling, so the events
// also hold the CPU time between the call's launches (a ModelNew's Python and torch dispatch,
// which the executor's clock sees); otherwise a start event recorded on an idle device may be
// stamped only when the first launch reaches it.
expected<cuda_call_time> cuda_timed_call(const std::function<status()>& call, bool* sticky,
                                         bool settle_start = false);

} // namespace kiln
