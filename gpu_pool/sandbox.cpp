// Sandbox layers, each independent: rlimits and scratch are required; network namespace, landlock
// and the uid drop are best effort (container kernels often refuse some), reported as warnings.
#include "gpu_pool/sandbox.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
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

// Landlock, declared here: Debian bookworm's <linux/landlock.h> stops at ABI 2 (no net, no scopes).
struct ll_ruleset_attr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net; // ABI >= 4
  uint64_t scoped;             // ABI >= 6
};
struct __attribute__((packed)) ll_path_beneath_attr {
  uint64_t allowed_access;
  int32_t parent_fd;
};
constexpr uint32_t ll_create_ruleset_version = 1u << 0;
constexpr int ll_rule_path_beneath = 1;
constexpr uint64_t ll_fs_write_file = 1ull << 1, ll_fs_remove_dir = 1ull << 4,
                   ll_fs_remove_file = 1ull << 5, ll_fs_make_char = 1ull << 6,
                   ll_fs_make_dir = 1ull << 7, ll_fs_make_reg = 1ull << 8,
                   ll_fs_make_sock = 1ull << 9, ll_fs_make_fifo = 1ull << 10,
                   ll_fs_make_block = 1ull << 11, ll_fs_make_sym = 1ull << 12,
                   ll_fs_refer = 1ull << 13, ll_fs_truncate = 1ull << 14;
constexpr uint64_t ll_net_bind_tcp = 1ull << 0, ll_net_connect_tcp = 1ull << 1;
constexpr uint64_t ll_scope_abstract_unix = 1ull << 0, ll_scope_signal = 1ull << 1;

// Writes (create, modify, delete, rename) only beneath `scratch` and to /dev/null; no TCP bind or
// connect (ABI >= 4); no signals to processes outside the executor, such as the pool (ABI >= 6).
expected<int> restrict_with_landlock(const std::string& scratch,
                                     const std::vector<std::string>& writable) {
#ifdef SYS_landlock_create_ruleset
  long abi = syscall(SYS_landlock_create_ruleset, nullptr, 0, ll_create_ruleset_version);
  if (abi < 1) return error{"landlock unavailable: " + errno_text()};
  uint64_t writes = ll_fs_write_file | ll_fs_remove_dir | ll_fs_remove_file | ll_fs_make_char |
                    ll_fs_make_dir | ll_fs_make_reg | ll_fs_make_sock | ll_fs_make_fifo |
                    ll_fs_make_block | ll_fs_make_sym;
  if (abi >= 2) writes |= ll_fs_refer;
  if (abi >= 3) writes |= ll_fs_truncate;
  ll_ruleset_attr attr{writes, 0, 0};
  size_t attr_size = sizeof(uint64_t);
  if (abi >= 4) {
    attr.handled_access_net = ll_net_bind_tcp | ll_net_connect_tcp;
    attr_size = 2 * sizeof(uint64_t);
  }
  if (abi >= 6) {
    attr.scoped = ll_scope_abstract_unix | ll_scope_signal;
    attr_size = sizeof(attr);
  }
  int rs = static_cast<int>(syscall(SYS_landlock_create_ruleset, &attr, attr_size, 0));
  if (rs < 0) return error{"landlock_create_ruleset: " + errno_text()};
  auto allow = [&](const char* path, uint64_t access) -> status {
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) return error{std::string("landlock: open ") + path + ": " + errno_text()};
    ll_path_beneath_attr pb{access, fd};
    long r = syscall(SYS_landlock_add_rule, rs, ll_rule_path_beneath, &pb, 0);
    int saved = errno;
    close(fd);
    if (r != 0)
      return error{std::string("landlock_add_rule ") + path + ": " + std::strerror(saved)};
    return ok();
  };
  status st = allow(scratch.c_str(), writes);
  for (const auto& w : writable)
    if (st) st = allow(w.c_str(), writes);
  if (st) st = allow("/dev/null", ll_fs_write_file | (abi >= 3 ? ll_fs_truncate : 0));
  if (st && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    st = error{"PR_SET_NO_NEW_PRIVS: " + errno_text()};
  if (st && syscall(SYS_landlock_restrict_self, rs, 0) != 0)
    st = error{"landlock_restrict_self: " + errno_text()};
  close(rs);
  if (!st) return st.err();
  return static_cast<int>(abi);
#else
  return error{"landlock: not supported by this build"};
#endif
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
