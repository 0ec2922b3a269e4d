// Parent side of the executor protocol: owns one disposable `kiln executor` process per device.
//   device actor --job--> executor_client --frame--> child --frame--> outcome
//                         (crash / hang / garbage: kill, reap, outcome; next job: fresh child)
// Thread-compatible: one client per device, used from one thread at a time.
#pragma once

#include "data/expected.hpp"
#include "jobs/job.hpp"
#include "sandbox/job_cgroup.hpp"

#include <optional>
#include <random>
#include <string>
#include <sys/types.h>

namespace kiln {

struct executor_options {
  std::string kiln_path = "/proc/self/exe"; // the binary that has the `executor` subcommand
  std::string scratch_root; // per-executor scratch dirs go here; empty: $TMPDIR or /tmp
  int64_t address_space_mib = 16384;
  int64_t file_size_mib = 64;
  bool isolate_network = true;
  bool restrict_fs = true;
  bool drop_privileges =
      false; // root only; artifacts and the scratch root must be readable by nobody
  int threads = 1;
  int cuda_device = -1; // >= 0: a cuda executor on this device
  // The kernel hosts the executor starts, one per job (executor/kernel_host_client.hpp).
  std::string kernel_host_path;       // default: kiln-kernel-host beside kiln_path
  bool kernel_drop_privileges = true; // root only: kernel hosts run as nobody
  bool kernel_landlock = true;        // false only for control tests (the attack must work)
  bool kernel_seccomp = true;
  bool cgroups = true; // a cgroup v2 folder per executor and per kernel host, where writable
  int spare_hosts = 0; // kernel hosts started ahead of jobs; 0: the executor's default
  double start_timeout_s = 60; // spawn until hello (LibTorch start-up)
  double grace_s = 2;          // added to job.timeout_s for the reply to arrive
  std::string log_level = "warn";
};

struct executor_stats {
  int64_t jobs = 0, starts = 0, crashes = 0, timeouts = 0, protocol_errors = 0;
  double last_start_ms = 0;   // spawn -> hello of the latest executor
  double last_kill_ms = 0;    // failure detected -> child killed and reaped
  double last_recover_ms = 0; // last_kill_ms + the start of the replacement
};

class executor_client {
public:
  explicit executor_client(executor_options opts = {});
  ~executor_client();
  executor_client(const executor_client&) = delete;
  executor_client& operator=(const executor_client&) = delete;

  // Starts an executor unless one is running (run() calls it on demand).
  status start();
  // Runs one job; always returns an outcome (timeout / runtime_error when the executor fails).
  outcome run(const job& j);
  // Closes the channel, waits briefly for a clean exit, then kills.
  void stop();

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  const std::optional<executor_hello>& hello() const { return hello_; }
  const executor_stats& stats() const { return stats_; }
  const executor_options& options() const { return opts_; }

private:
  struct exit_info {
    bool signaled = false;
    int code = 0;     // signal number or exit status
    std::string text; // "signal 11 (SIGSEGV)", "exit code 3"
  };
  status start_once();
  exit_info kill_and_reap(bool wait_first);
  outcome failure(const job& j, outcome_kind k, std::string message, double device_ms);

  executor_options opts_;
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string scratch_;
  std::string kernel_scratch_; // the kernel hosts' folders, reachable by nobody
  std::optional<executor_hello> hello_;
  executor_stats stats_;
  bool pending_recover_ = false;
  bool exec_failed_ = false; // the last start died with exit code 127 (exec failed)
  std::mt19937_64 nonce_{std::random_device{}()};
  job_cgroup cgroup_; // the executor and its kernel hosts; killed with the executor
};

// "signal 11 (SIGSEGV)"
std::string describe_signal(int sig);

} // namespace kiln
