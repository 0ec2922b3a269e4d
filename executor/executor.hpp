// The executor process (child side, trusted): a loop that reads a job frame, runs it, writes an
// outcome frame. It holds the references, verification, timing and the verdict; the kernel runs
// in a kernel host process of its own per job (executor/kernel_host_client.hpp), never here.
//   executor_client --job frame (fd)--> executor_main --kernel host per job--> outcome frame
#pragma once

#include "executor/device_clocks.hpp"
#include "executor/kernel_host_client.hpp"
#include "jobs/job.hpp"

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
  bool restrict_fs = true;            // landlock where the kernel has it
  bool drop_privileges = false;       // root only: run as nobody
  int threads = 1;                    // LibTorch intra-op and kiln_host threads
  int cuda_device = -1;               // >= 0: serve the cuda backend on this device
  std::string kernel_host;            // kiln-kernel-host (default: beside this binary)
  std::string kernel_scratch;         // where kernel hosts' folders go (default: scratch)
  bool kernel_drop_privileges = true; // root only: kernel hosts run as nobody
  bool kernel_landlock = true;        // off only for control tests
  bool kernel_seccomp = true;         // off only for control tests
  std::string cgroup;                 // this executor's cgroup folder: kernel hosts get one inside
  int spare_hosts = 0;                // kernel hosts started ahead of jobs; 0: one
};

// `kiln executor`: applies the sandbox, sends a hello frame, then serves jobs until EOF.
// Returns the process exit code (0 on a clean EOF).
int executor_main(const executor_args& args);

// Runs jobs: baselines in this process, kernels in a fresh kernel host per job.
class job_runner {
public:
  // `clocks` (optional) is sampled after every timing. On cuda, cuda_open_device must have
  // succeeded for host.cuda_device. `spare_hosts` kernel hosts are kept started ahead of jobs.
  explicit job_runner(kernel_host_options host, std::unique_ptr<device_clocks> clocks = nullptr,
                      int spare_hosts = 1);
  ~job_runner();
  job_runner(const job_runner&) = delete;
  job_runner& operator=(const job_runner&) = delete;

  // Never throws; every failure is an outcome. device_ms is filled, queue/compile copied from the
  // job.
  outcome run(const job& j);
  // Starts the kernel host the next job will use and waits for it: what its sandbox is.
  expected<std::string> prepare_host();
  std::string clocks_description() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace kiln
