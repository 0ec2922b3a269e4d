// The executor process (child side): a loop that reads a job frame, runs it, writes an outcome
// frame.
//   executor_client --job frame (fd)--> executor_main --verify / time / baseline--> outcome frame
// It is disposable: generated code runs in it, so a crash or hang costs this process, not the pool.
#pragma once

#include "gpu_pool/device_clocks.hpp"
#include "gpu_pool/job.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace kiln {

struct executor_args {
  int fd = 3;                        // the protocol socket (the client puts it there)
  std::string scratch;               // private scratch directory (created by the client)
  int64_t address_space_mib = 16384; // RLIMIT_AS
  int64_t file_size_mib = 64;        // RLIMIT_FSIZE
  bool isolate_network = true;
  bool restrict_fs = true;      // landlock where the kernel has it
  bool drop_privileges = false; // root only: run as nobody
  int threads = 1;              // LibTorch intra-op and kiln_host threads
  int program_cache = 4;        // loaded programs kept between jobs
  int cuda_device = -1;         // >= 0: serve the cuda backend on this device
};

// `kiln executor`: applies the sandbox, sends a hello frame, then serves jobs until EOF.
// Returns the process exit code (0 on a clean EOF).
int executor_main(const executor_args& args);

// Runs jobs in the calling process: the part of executor_main after the sandbox. No isolation:
// for tests of verification logic and for tools that accept the risk.
class job_runner {
public:
  // cuda_device >= 0: cuda jobs on that device (cuda_open_device must have succeeded). `clocks`
  // (optional) is sampled after every timing.
  explicit job_runner(int program_cache = 4, int cuda_device = -1,
                      std::unique_ptr<device_clocks> clocks = nullptr);
  ~job_runner();
  job_runner(const job_runner&) = delete;
  job_runner& operator=(const job_runner&) = delete;

  // Never throws; every failure is an outcome. device_ms is filled, queue/compile copied from the
  // job.
  outcome run(const job& j);

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace kiln
