// cgroup v2 folders that hold a process and everything it forks, whatever it does (setsid, double
// fork): cgroup.kill ends them all at once. The pool gives each executor one; the executor gives
// each kernel host one inside it. Best effort: where no writable cgroup2 hierarchy exists the pool
// runs without, and seccomp alone forbids kernels to create processes.
//   parent --create--> folder --child writes 0 to cgroup.procs--> ... --kill_all--> empty, removed
#pragma once

#include "data/expected.hpp"

#include <string>
#include <sys/types.h>

namespace kiln {

// The cgroup2 mount point this process can create folders in, or "" (checked once).
const std::string& cgroup2_root();

class job_cgroup {
public:
  job_cgroup() = default;
  // A fresh folder `<parent>/<prefix><n>`.
  static expected<job_cgroup> create(const std::string& parent, const std::string& prefix);
  ~job_cgroup();
  job_cgroup(job_cgroup&& o) noexcept;
  job_cgroup& operator=(job_cgroup&& o) noexcept;
  job_cgroup(const job_cgroup&) = delete;
  job_cgroup& operator=(const job_cgroup&) = delete;

  bool active() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  // An fd on cgroup.procs: a child writes "0" to it (async-signal-safe) to move itself in.
  int procs_fd() const { return procs_fd_; }
  // Lets `uid` create folders in it and move processes between them (cgroup v2 delegation).
  void delegate(uid_t uid);
  // Processes in the folder right now (its own cgroup.procs).
  int count() const;
  // Kills everything in it and below, waits until it is empty and removes it. Returns how many
  // processes it held.
  int kill_all();

private:
  std::string path_;
  int procs_fd_ = -1;
};

} // namespace kiln
