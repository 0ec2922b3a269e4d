// The cuda backend's trusted side (the executor): device facts, the device context, the job's
// baseline's event clock and the L2 flush the timing loop uses (the job's region is cuda_vmm.hpp).
// Generated code runs in the kernel host (cuda_program.hpp).
//   executor --cuda_open_device--> context --cuda_timed / flush--> baseline times
#pragma once

#include "data/expected.hpp"
#include "executor/timing.hpp"
#include <functional>

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

// Makes `ordinal` current and creates its primary context: called once, before the sandbox
// restricts file access (the driver opens /dev/nvidia* here).
status cuda_open_device(int ordinal);

// Waits for the whole device and reports any error. `sticky` is set when the context is damaged
// (illegal address, launch failure): only a fresh process can use the device again.
status cuda_synchronize(bool* sticky = nullptr);

// Hands the reference's cached, unused device memory back to the driver when less than a quarter
// of the device is free: the job's shared region (cuMemCreate) and the kernel host's own
// allocations come from outside PyTorch's caching allocator and would fail beside its cache.
void cuda_trim_cached_memory();

// Device time of `call` (trusted code: the eager baseline) from events on the legacy default
// stream, read after a whole-device synchronize.
timed_fn cuda_timed(std::function<status()> call);

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
