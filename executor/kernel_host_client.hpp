// The executor's handle on one kernel host process (kernel_host/kernel_host_main.cpp): starts it,
// hands it the job's buffers and artifact, calls the kernel with its own clock around every call,
// and reads the host's CPU clock (all its threads) before and after, so work done outside a
// call is seen. Everything the host answers is checked: it runs code that may write anything.
//   executor --start--> host (sandboxed) --layout / load--> --call: wall ms, cpu ms--> kill
#pragma once

#include "data/expected.hpp"
#include "jobs/job.hpp"
#include "kernel_host/kernel_host_protocol.hpp"
#include "sandbox/job_cgroup.hpp"

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

namespace kiln {

class shared_buffers;

struct kernel_host_options {
  std::string binary;       // kiln-kernel-host
  std::string scratch_root; // each host gets a fresh directory here (the executor's scratch)
  int threads = 1;          // the host's thread pool (cpu)
  int cuda_device = -1;
  bool drop_privileges = true; // when root: the host runs as nobody
  bool landlock = true;        // off only for control tests: that the attacks work without it
  bool seccomp = true;
  int64_t address_space_mib = 16384; // cpu only (the CUDA driver reserves far more)
  int64_t file_size_mib = 64;
  double start_timeout_s = 30;
  bool keep_stderr = false;  // the host's stderr to ours (debugging) instead of /dev/null
  std::string cgroup_parent; // each host gets a cgroup folder here ("" = none)
  // libpython and its sys.path for hosts that run ModelNew submissions (compile/torch_python.hpp);
  // `python` starts this host with them.
  std::string python_library;
  std::vector<std::string> python_path;
  bool python = false;
};

enum class call_failure {
  none,
  timeout,  // no reply by the deadline: the host was killed
  died,     // the host exited or was killed by a signal (exit_text says which)
  protocol, // the reply was malformed, out of order or unrequested: the kernel spoke on the channel
};

struct call_result {
  call_failure failure = call_failure::none;
  std::string why;            // failure: what happened
  kh_code code = kh_code::ok; // the host's answer (failure == none)
  std::string text;           // load / device errors, printable ASCII, at most 200 chars
  double wall_ms = 0;         // the executor's clock: command sent .. reply read
  double stream_ms = 0;       // cuda: the host's events (untrusted)
  double residual_ms = 0;     // cuda: device busy after the stream was done (untrusted)
  host_phases host;           // the host's own clock (untrusted; messages only)
  // The previous call's cycle, from its command to this one: the host's CPU time over it (all
  // threads, read while the host waits for a command) and its wall time. An honest host uses at
  // most wall x threads; more is work outside the call.
  double prev_cycle_cpu_ms = -1; // -1: no previous call
  double prev_wall_ms = 0;
  bool ok() const { return failure == call_failure::none && code == kh_code::ok; }
};

class kernel_host {
public:
  // Spawns the host without waiting: it makes its device context (a while, on cuda) and waits
  // for its buffers while the caller does other work.
  static expected<std::unique_ptr<kernel_host>> start(const kernel_host_options& opts);
  ~kernel_host(); // kills it
  kernel_host(const kernel_host&) = delete;
  kernel_host& operator=(const kernel_host&) = delete;

  // What the host reported once its sandbox was in force (after set_layout).
  const kh_reply& ready() const { return ready_; }
  pid_t pid() const { return pid_; }
  const std::string& scratch() const { return scratch_; }

  // Waits for the host's `started` (its device context exists): after this, nothing the host
  // does touches the device until it gets a job. Called by set_layout; once is enough.
  status wait_started(int64_t deadline_ms);
  // Hands over the job's buffers; the host maps them, then applies its sandbox and answers.
  status set_layout(const shared_buffers& b, int64_t deadline_ms);
  // Copies the artifact (and a cubin's plan) into the host's scratch directory, then loads it.
  call_result load(const artifact_ref& a, int64_t deadline_ms);
  call_result call(int64_t deadline_ms) { return call_op(kh_op::call, deadline_ms); }
  call_result empty_call(int64_t deadline_ms) { return call_op(kh_op::empty, deadline_ms); }

  // SIGKILL to the host's process group and cgroup, reap, remove its scratch. Returns how many
  // other processes of the host's were found (0: nothing but the host itself existed).
  int kill_all();
  // "signal 11 (SIGSEGV)", "exit code 3": how the host ended (after a died failure).
  const std::string& exit_text() const { return exit_text_; }

private:
  kernel_host() = default;
  call_result call_op(kh_op op, int64_t deadline_ms);
  // Sends `bytes` of cmd (with pass_fd as SCM_RIGHTS when >= 0), waits for its reply, checks it.
  // One reply off the channel: recv's result (<= 0: the host is gone), nullopt past the deadline.
  std::optional<ssize_t> receive_reply(kh_reply& reply, int64_t deadline_ms);
  // A start-up deadline: at least start_timeout_s from the spawn (a CUDA context takes a while).
  int64_t start_deadline(int64_t deadline_ms) const;
  call_result round_trip(kh_command& cmd, size_t bytes, int pass_fd, int64_t deadline_ms,
                         kh_reply* keep = nullptr);
  // The host process's CPU clock, ms (-1 when unreadable).
  double read_cpu() const;
  void reap(bool wait_first);

  kernel_host_options opts_;
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string scratch_;
  kh_reply ready_;
  clockid_t cpu_clock_ = CLOCK_MONOTONIC;
  int64_t started_ms_ = 0;
  bool started_ = false; // its `started` was received
  double cpu_at_last_send_ = -1;
  double wall_of_last_ = 0;
  uint64_t seq_ = 0;
  std::string exit_text_;
  job_cgroup cgroup_;
};

// "kernel host uid 65534, landlock abi 7, seccomp on": what a ready host reported.
std::string describe(const kh_reply& ready);

// Where kiln-kernel-host (cpu) or kiln-kernel-host-cuda lies: beside the kiln binary at
// `kiln_path` (or $KILN_KERNEL_HOST / $KILN_KERNEL_HOST_CUDA). Two binaries, because loading the
// CUDA libraries costs a cpu host ~80 ms and 150 MB per job.
std::string default_kernel_host_binary(const std::string& kiln_path, bool cuda);

} // namespace kiln
