// Process limits an executor applies to itself before it runs generated code.
//   executor start --apply_sandbox(opts)--> rlimits, scratch cwd, netns, landlock, uid --> state
#pragma once

#include "data/expected.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kiln {

struct sandbox_options {
  std::string scratch_dir;           // must exist; becomes cwd, TMPDIR and HOME
  int64_t address_space_mib = 16384; // RLIMIT_AS; 0 = leave as is
  int64_t file_size_mib = 64;        // RLIMIT_FSIZE: a bigger write gets SIGXFSZ
  bool isolate_network = true;       // unshare(CLONE_NEWNET) (no interfaces but a down loopback)
  bool restrict_fs = true; // landlock: writes only under scratch_dir (+ TCP and signal scoping)
  bool drop_privileges = false; // when root: become nobody (65534); artifacts must stay readable
  std::vector<std::string> writable; // more folders landlock lets it write in (its cgroup)
  // Runs after the network namespace and before the uid drop and landlock: opens what later layers
  // would forbid (the cuda backend's /dev/nvidia* devices). Its failure fails the sandbox.
  std::function<status()> open_devices;
};

struct sandbox_state {
  bool net_isolated = false;
  bool fs_restricted = false;
  int landlock_abi = 0; // 0 when landlock is not in force
  int64_t uid = -1;
  std::vector<std::string> warnings; // what was asked for but could not be applied
};

// Irreversible for the calling process. Fails only on what must not be skipped (rlimits, scratch);
// optional layers that the kernel refuses become warnings.
expected<sandbox_state> apply_sandbox(const sandbox_options& opts);

} // namespace kiln
