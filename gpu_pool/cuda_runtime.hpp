// The cuda backend's executor side: loads a cubin with its launch plan and walks the plan's steps
// (kernel launches, cuBLASLt GEMMs) on the legacy default stream, or a free-form program's nvcc
// shared object; plus the device clock (events + whole-device synchronize, work that outlives the
// stream refused) and the L2 flush the timing loop uses. Executor process only.
//   cubin + plan.json | .so --load--> cuda_executable --run(buffers)--> launches / kiln_cuda_run
#pragma once

#include "data/expected.hpp"
#include "gpu_pool/timing.hpp"
#include "skills/launch_plan.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

struct cuda_device_info {
  int ordinal = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int64_t l2_bytes = 0;
  int64_t memory_bytes = 0;
  int sm_clock_khz = 0, memory_clock_khz = 0; // 0 where the driver does not report them
};

// Devices visible to this process; an error when the driver or a device is missing. These
// initialize the CUDA runtime in the calling process: executors only.
expected<int> cuda_device_count();
expected<cuda_device_info> cuda_device_query(int ordinal);

// The same facts for every visible device, gathered in a short-lived child process, so the pool
// process never initializes CUDA itself: it forks executors, and a parent holding driver state
// crashed (SIGSEGV, no usable stack) when its executors exited on the H200.
expected<std::vector<cuda_device_info>> cuda_probe_devices();
std::string cuda_arch_of(const cuda_device_info& d); // "sm_90"
// "0000:19:00.0": how NVML finds the same GPU (its numbering may differ from CUDA's); "" if
// unknown.
std::string cuda_pci_bus_id(int ordinal);

// Makes `ordinal` current and creates its primary context, cuBLASLt handle and workspace: called
// once, before the sandbox restricts file access (the driver opens /dev/nvidia* here).
status cuda_open_device(int ordinal);

// Waits for the whole device and reports any error. `sticky` is set when the context is damaged
// (illegal address, launch failure): only a fresh process can use the device again.
status cuda_synchronize(bool* sticky = nullptr);

class cuda_executable {
public:
  // Reads `<cubin_path>` and `<cubin_path>.plan.json`, checks the plan and that every kernel's
  // parameter list matches the plan's argument sizes. A path ending in ".so" is a free-form
  // program instead: loaded with dlopen, it must export kiln_cuda_run (skills/kiln_cuda_abi.h).
  static expected<cuda_executable> load(const std::string& cubin_path);
  cuda_executable(cuda_executable&&) noexcept;
  cuda_executable& operator=(cuda_executable&&) noexcept;
  ~cuda_executable();

  // Enqueues every step (or calls kiln_cuda_run with the legacy default stream); does not wait.
  // Pointers are device pointers in task declaration order.
  status run(const std::vector<const void*>& inputs, const std::vector<const void*>& params,
             const std::vector<void*>& outputs);

private:
  cuda_executable() = default;
  static expected<cuda_executable> load_shared_object(const std::string& so_path);
  struct impl;
  std::unique_ptr<impl> impl_;
};

// Device time of `call` from events on the legacy default stream (the job's stream), read after a
// whole-device synchronize. A third event, recorded once the device is idle, shows work that
// outlived the stream (launched on a non-blocking stream and never joined back): when it exceeds
// cuda_drain_slack_ms() + 5% of the stream time on three runs in a row, the timing is an error.
timed_fn cuda_timed(std::function<status()> call);
// What an honest call leaves between its stream's last event and an idle device (3 x the p90 of
// an empty call, at least 0.02 ms): measured once per process, on first use.
double cuda_drain_slack_ms();

// Evicts L2 by writing a buffer of max(bytes, 2 x L2) on the device (untimed, before a trial).
class cuda_cache_flusher : public cache_flusher {
public:
  void flush(int64_t bytes) override;
  ~cuda_cache_flusher() override;

private:
  void* buf_ = nullptr;
  int64_t size_ = 0;
  unsigned char tick_ = 0;
};

} // namespace kiln
