// Sandbox layers, each independent: rlimits and scratch are required; network namespace, landlock
// and the uid drop are best effort (container kernels often refuse some), reported as warnings.
#include "sandbox/executor_sandbox.hpp"

#include "sandbox/containment.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace kiln {

namespace {

std::string errno_text() { return std::strerror(errno); }

status set_limit(int resource, const char* name, rlim_t value) {
  rlimit cur{};
  getrlimit(resource, &cur);
  rlimit lim{value, value};
  if (cur.rlim_max != RLIM_INFINITY && cur.rlim_max < value) lim = {cur.rlim_max, cur.rlim_max};
  if (setrlimit(resource, &lim) != 0)
    return error{std::string("setrlimit(") + name + "): " + errno_text()};
  return ok();
}

// Writes (create, modify, delete, rename) only beneath `scratch`, the extra folders and /dev/null;
// reads stay open (the executor's LibTorch and CUDA load what they like). TCP and signal scoping
// as containment.hpp says.
expected<int> restrict_with_landlock(const std::string& scratch,
                                     const std::vector<std::string>& writable) {
  landlock_paths paths;
  paths.restrict_reads = false;
  paths.read_write = {scratch, "/dev/null"};
  paths.read_write.insert(paths.read_write.end(), writable.begin(), writable.end());
  auto rules = prepare_landlock(paths);
  if (!rules) return rules.err();
  if (int e = enforce_landlock(*rules); e != 0)
    return error{std::string("landlock_restrict_self: ") + std::strerror(e)};
  return rules->abi();
}

} // namespace

expected<sandbox_state> apply_sandbox(const sandbox_options& opts) {
  sandbox_state st;
  if (auto s = set_limit(RLIMIT_CORE, "RLIMIT_CORE", 0); !s) return s.err();
  if (opts.file_size_mib > 0)
    if (auto s =
            set_limit(RLIMIT_FSIZE, "RLIMIT_FSIZE", static_cast<rlim_t>(opts.file_size_mib) << 20);
        !s)
      return s.err();
  if (opts.address_space_mib > 0)
    if (auto s =
            set_limit(RLIMIT_AS, "RLIMIT_AS", static_cast<rlim_t>(opts.address_space_mib) << 20);
        !s)
      return s.err();
  // A crashing kernel must not leave a core file or a ptrace-able process behind.
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);

  if (opts.scratch_dir.empty()) return error{"sandbox: no scratch directory"};
  if (chdir(opts.scratch_dir.c_str()) != 0)
    return error{"sandbox: chdir " + opts.scratch_dir + ": " + errno_text()};
  setenv("TMPDIR", opts.scratch_dir.c_str(), 1);
  setenv("HOME", opts.scratch_dir.c_str(), 1);

  if (opts.isolate_network) {
    if (unshare(CLONE_NEWNET) == 0) {
      st.net_isolated = true;
    } else {
      std::string first = errno_text();
      // Unprivileged fallback: a user namespace grants CLONE_NEWNET inside it; it rules out the uid
      // drop.
      if (!opts.drop_privileges && unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0) {
        st.net_isolated = true;
      } else {
        st.warnings.push_back("no network isolation (unshare: " + first + ")");
      }
    }
  }

  if (opts.open_devices)
    if (auto s = opts.open_devices(); !s) return error{"sandbox: " + s.message()};

  if (opts.drop_privileges && geteuid() == 0) {
    const uid_t nobody = 65534;
    // The scratch directory stays ours to write after the drop.
    if (chown(opts.scratch_dir.c_str(), nobody, nobody) != 0)
      st.warnings.push_back("chown scratch: " + errno_text());
    if (setgroups(0, nullptr) != 0 || setgid(nobody) != 0 || setuid(nobody) != 0)
      st.warnings.push_back("could not drop to uid 65534: " + errno_text());
  }

  if (opts.restrict_fs) {
    if (auto s = restrict_with_landlock(opts.scratch_dir, opts.writable); s) {
      st.fs_restricted = true;
      st.landlock_abi = *s;
    } else {
      st.warnings.push_back("no filesystem restriction (" + s.message() + ")");
    }
  }
  st.uid = static_cast<int64_t>(geteuid());
  return st;
}

} // namespace kiln
