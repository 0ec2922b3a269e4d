// Clocks of the device a timing ran on, read where the platform lets us: NVML (dlopen'ed, so no
// link dependency and no failure where no driver exists) for cuda, /proc/cpuinfo for cpu. A
// timing taken while the GPU was power- or thermally throttled is not comparable to one taken at
// full clocks: outcomes carry the clocks seen right after the last trial.
//   executor start --open (before the sandbox)--> reader --sample() after timing--> timings
#pragma once

#include "jobs/clock_sample.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace kiln {

class device_clocks {
public:
  // cuda: NVML handle of the GPU at `pci_bus_id` (from cudaDeviceGetPCIBusId: NVML and CUDA may
  // number devices differently). An empty reader (describe() says why) where NVML is missing.
  static std::unique_ptr<device_clocks> open_nvml(const std::string& pci_bus_id);
  // cpu: the frequency of the core the caller runs on.
  static std::unique_ptr<device_clocks> open_cpu();
  virtual ~device_clocks() = default;

  virtual clock_sample sample() = 0;
  // For the executor's hello: source and maximum clocks, or why nothing is readable.
  virtual std::string describe() const = 0;
};

// NVML's clocks-event reason bits as names ("sw_power_cap|hw_slowdown"); the reasons that
// lower clocks of a busy GPU set `throttled`.
std::string throttle_reason_names(uint64_t bits, bool* throttled);

} // namespace kiln
