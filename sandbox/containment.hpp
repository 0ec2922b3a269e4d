// What an untrusted process may reach: landlock (which paths it may read, execute or write; no
// TCP; no signals or abstract sockets outside its domain) and seccomp (which system calls it may
// make). Both are prepared as plain data in the parent and enforced with async-signal-safe calls,
// so a compile worker can apply them between fork and exec, and the kernel host on itself.
//   paths / profile --prepare_*--> ruleset fd / BPF program --enforce_*--> the calling process
#pragma once

#include "data/expected.hpp"

#include <linux/filter.h>
#include <string>
#include <sys/types.h>
#include <vector>

namespace kiln {

// Landlock: every filesystem right the running kernel knows is handled (or, with restrict_reads
// off, every write right only), so anything not granted beneath one of these paths is denied. A
// path that does not exist is skipped. TCP bind / connect are denied (ABI >= 4), and so are
// signals and abstract unix sockets outside the domain (ABI >= 6).
struct landlock_paths {
  std::vector<std::string> read_exec;  // read files, list directories, execute
  std::vector<std::string> read_write; // all of the above plus every write right
  bool restrict_reads = true;
};

class landlock_ruleset {
public:
  landlock_ruleset() = default;
  landlock_ruleset(int fd, int abi) : fd_(fd), abi_(abi) {}
  ~landlock_ruleset();
  landlock_ruleset(landlock_ruleset&& o) noexcept;
  landlock_ruleset& operator=(landlock_ruleset&& o) noexcept;
  landlock_ruleset(const landlock_ruleset&) = delete;
  landlock_ruleset& operator=(const landlock_ruleset&) = delete;

  int fd() const { return fd_; }
  int abi() const { return abi_; } // >= 4: TCP bind / connect denied; >= 6: signal scoping

private:
  int fd_ = -1;
  int abi_ = 0;
};

// An error when the kernel has no landlock (the caller decides whether that is fatal).
expected<landlock_ruleset> prepare_landlock(const landlock_paths& paths);
// Sets no_new_privs and restricts the calling thread (and its future children). 0 or an errno.
// Async-signal-safe.
int enforce_landlock(const landlock_ruleset& rules);

// The library and toolchain directories every process here needs to read: /usr, /lib*, /bin,
// /etc/ld.so.cache, /dev/null, /dev/urandom, CUDA's directories and those on LD_LIBRARY_PATH.
std::vector<std::string> system_read_paths();

enum class seccomp_profile {
  // Compilers: no sockets of any family, no ptrace or cross-process memory access, no io_uring,
  // bpf, perf, userfaultfd, keyrings, mounts or namespaces. fork and exec stay (g++ runs cc1plus).
  compiler,
  // A kernel being loaded: the compiler's set, plus no new processes or threads (clone, fork,
  // exec), signals only to itself, no personality changes (READ_IMPLIES_EXEC), no SysV shm.
  kernel_load,
  // A loaded kernel: kernel_load's set, plus no executable memory (mmap / mprotect / pkey_mprotect
  // with PROT_EXEC).
  kernel_run,
};
const char* to_string(seccomp_profile p);

// A classic-BPF filter for the native architecture: denied calls fail with EPERM (clone3 with
// ENOSYS, so libc falls back to clone and gets EPERM there); calls of another ABI kill the
// process. `self` is the pid that kernel_* profiles allow to signal itself.
expected<std::vector<sock_filter>> seccomp_program(seccomp_profile p, pid_t self);
// Installs the filter on every thread of the calling process (TSYNC), setting no_new_privs
// first, without the speculation mitigations Linux otherwise forces on a filtered process
// (SPEC_ALLOW; see the .cpp). 0 or an errno. Async-signal-safe.
int enforce_seccomp(const std::vector<sock_filter>& program);

} // namespace kiln
