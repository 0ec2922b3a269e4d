// Landlock through raw system calls (Debian bookworm's headers stop at ABI 2 and no library wraps
// it); seccomp through libseccomp, exported to BPF once so that enforcing it needs no allocation.
#include "sandbox/containment.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <sstream>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace kiln {

namespace {

// Declared here: Debian bookworm's <linux/landlock.h> lacks the net and scope fields.
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
constexpr uint64_t ll_execute = 1ull << 0, ll_write_file = 1ull << 1, ll_read_file = 1ull << 2,
                   ll_read_dir = 1ull << 3, ll_refer = 1ull << 13, ll_truncate = 1ull << 14;
constexpr uint64_t ll_abi1_all = (1ull << 13) - 1; // execute .. make_sym
constexpr uint64_t ll_net_bind_tcp = 1ull << 0, ll_net_connect_tcp = 1ull << 1;
constexpr uint64_t ll_scope_abstract_unix = 1ull << 0, ll_scope_signal = 1ull << 1;

std::string errno_text(int e) { return std::strerror(e); }

} // namespace

landlock_ruleset::~landlock_ruleset() {
  if (fd_ >= 0) close(fd_);
}
landlock_ruleset::landlock_ruleset(landlock_ruleset&& o) noexcept : fd_(o.fd_), abi_(o.abi_) {
  o.fd_ = -1;
}
landlock_ruleset& landlock_ruleset::operator=(landlock_ruleset&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    abi_ = o.abi_;
    o.fd_ = -1;
  }
  return *this;
}

expected<landlock_ruleset> prepare_landlock(const landlock_paths& paths) {
#ifdef SYS_landlock_create_ruleset
  long abi = syscall(SYS_landlock_create_ruleset, nullptr, 0, ll_create_ruleset_version);
  if (abi < 1) return error{"landlock unavailable: " + errno_text(errno)};
  uint64_t fs_all = ll_abi1_all;
  if (abi >= 2) fs_all |= ll_refer;
  if (abi >= 3) fs_all |= ll_truncate;
  if (!paths.restrict_reads) fs_all &= ~(ll_execute | ll_read_file | ll_read_dir);
  // LANDLOCK_ACCESS_FS_IOCTL_DEV (ABI 5) stays unhandled: the devices a kernel may use (CUDA's)
  // are opened before the ruleset, and no other device can be opened at all.
  ll_ruleset_attr attr{fs_all, 0, 0};
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
  if (rs < 0) return error{"landlock_create_ruleset: " + errno_text(errno)};
  landlock_ruleset rules(rs, static_cast<int>(abi));
  const uint64_t file_rights = ll_execute | ll_write_file | ll_read_file | ll_truncate;
  auto allow = [&](const std::string& path, uint64_t access) -> status {
    int fd = open(path.c_str(), O_PATH | O_CLOEXEC);
    if (fd < 0) return ok(); // not on this machine: nothing to grant
    struct stat st {};
    fstat(fd, &st);
    if (!S_ISDIR(st.st_mode)) access &= file_rights; // a file rule takes file rights only
    ll_path_beneath_attr pb{access & fs_all, fd};
    long r = syscall(SYS_landlock_add_rule, rs, ll_rule_path_beneath, &pb, 0);
    int saved = errno;
    close(fd);
    if (r != 0) return error{"landlock_add_rule " + path + ": " + errno_text(saved)};
    return ok();
  };
  for (const auto& p : paths.read_exec)
    if (auto st = allow(p, ll_execute | ll_read_file | ll_read_dir); !st) return st.err();
  for (const auto& p : paths.read_write)
    if (auto st = allow(p, fs_all); !st) return st.err();
  return rules;
#else
  (void)paths;
  return error{"landlock: not supported by this build"};
#endif
}

int enforce_landlock(const landlock_ruleset& rules) {
  if (rules.fd() < 0) return EBADF;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
#ifdef SYS_landlock_restrict_self
  if (syscall(SYS_landlock_restrict_self, rules.fd(), 0) != 0) return errno;
  return 0;
#else
  return ENOSYS;
#endif
}

std::vector<std::string> system_read_paths() {
  std::vector<std::string> p = {"/usr",      "/lib",         "/lib64",           "/lib32",
                                "/bin",      "/sbin",        "/etc/ld.so.cache", "/dev/null",
                                "/dev/zero", "/dev/urandom", "/opt/deps",        "/usr/local/cuda"};
  // The GPU machine's LibTorch and CUDA libraries come from LD_LIBRARY_PATH.
  if (const char* ld = std::getenv("LD_LIBRARY_PATH")) {
    std::istringstream in(ld);
    for (std::string dir; std::getline(in, dir, ':');)
      if (!dir.empty() && dir[0] == '/') p.push_back(dir);
  }
  return p;
}

const char* to_string(seccomp_profile p) {
  switch (p) {
  case seccomp_profile::compiler: return "compiler";
  case seccomp_profile::kernel_load: return "kernel_load";
  case seccomp_profile::kernel_run: return "kernel_run";
  }
  return "?";
}

expected<std::vector<sock_filter>> seccomp_program(seccomp_profile p, pid_t self) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) return error{"seccomp_init failed"};
  struct ctx_guard {
    scmp_filter_ctx c;
    ~ctx_guard() { seccomp_release(c); }
  } guard{ctx};
  // Another ABI on the same machine (x32, i386 via int 0x80) would bypass every rule below.
  seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  auto deny = [&](const char* name, int err = EPERM) -> status {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) return ok(); // not a system call on this architecture
    int r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(err), nr, 0);
    if (r != 0) return error{std::string("seccomp rule for ") + name + ": " + errno_text(-r)};
    return ok();
  };
  // Reaching outside the process: other processes' memory, the network, the kernel's
  // attack surface beyond what computing needs.
  static const char* const outward[] = {
      "socket",
      "socketpair",
      "connect",
      "bind",
      "listen",
      "accept",
      "accept4",
      "ptrace",
      "process_vm_readv",
      "process_vm_writev",
      "process_madvise",
      "kcmp",
      "pidfd_open",
      "pidfd_getfd",
      "pidfd_send_signal",
      "io_uring_setup",
      "io_uring_enter",
      "io_uring_register",
      "bpf",
      "perf_event_open",
      "userfaultfd",
      "add_key",
      "request_key",
      "keyctl",
      "mount",
      "umount2",
      "pivot_root",
      "chroot",
      "fsopen",
      "fsconfig",
      "fsmount",
      "fspick",
      "move_mount",
      "open_tree",
      "mount_setattr",
      "unshare",
      "setns",
      "name_to_handle_at",
      "open_by_handle_at",
      "syslog",
      "quotactl",
      "acct",
      "swapon",
      "swapoff",
      "reboot",
      "kexec_load",
      "kexec_file_load",
      "init_module",
      "finit_module",
      "delete_module",
      "iopl",
      "ioperm",
      "modify_ldt",
      "lookup_dcookie",
      "vhangup",
      "uselib",
      "setuid",
      "setgid",
      "setreuid",
      "setregid",
      "setresuid",
      "setresgid",
      "setfsuid",
      "setfsgid",
      "setgroups",
      "settimeofday",
      "clock_settime",
      "clock_adjtime",
      "adjtimex",
      "memfd_secret",
  };
  for (const char* name : outward)
    if (auto st = deny(name); !st) return st.err();
  if (p != seccomp_profile::compiler) {
    static const char* const spawning[] = {
        "fork",        "vfork", "clone",  "execve",          "execveat",         "tkill",
        "personality", "shmat", "shmget", "rt_sigqueueinfo", "rt_tgsigqueueinfo"};
    for (const char* name : spawning)
      if (auto st = deny(name); !st) return st.err();
    if (auto st = deny("clone3", ENOSYS); !st) return st.err();
    // Signals to itself only: abort() and raise() use tgkill(getpid(), ...).
    for (const char* name : {"kill", "tgkill"}) {
      int nr = seccomp_syscall_resolve_name(name);
      if (nr == __NR_SCMP_ERROR) continue;
      if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1,
                           SCMP_A0(SCMP_CMP_NE, static_cast<scmp_datum_t>(self))) != 0)
        return error{std::string("seccomp rule for ") + name};
    }
  }
  if (p == seccomp_profile::kernel_run) {
    // The prot argument: mmap and mprotect take it third, pkey_mprotect too.
    for (const char* name : {"mmap", "mprotect", "pkey_mprotect"}) {
      int nr = seccomp_syscall_resolve_name(name);
      if (nr == __NR_SCMP_ERROR) continue;
      if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1,
                           SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC)) != 0)
        return error{std::string("seccomp rule for ") + name};
    }
  }
  // libseccomp 2.5 exports only to a file descriptor.
  int mfd = static_cast<int>(syscall(SYS_memfd_create, "kiln-seccomp", 0));
  if (mfd < 0) return error{"memfd_create: " + errno_text(errno)};
  std::vector<sock_filter> prog;
  int r = seccomp_export_bpf(ctx, mfd);
  off_t size = lseek(mfd, 0, SEEK_END);
  if (r == 0 && size > 0 && size % static_cast<off_t>(sizeof(sock_filter)) == 0) {
    prog.resize(static_cast<size_t>(size) / sizeof(sock_filter));
    if (pread(mfd, prog.data(), static_cast<size_t>(size), 0) != size) prog.clear();
  }
  close(mfd);
  if (prog.empty()) return error{"seccomp_export_bpf failed"};
  return prog;
}

int enforce_seccomp(const std::vector<sock_filter>& program) {
  if (program.empty()) return EINVAL;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
  sock_fprog fp{static_cast<unsigned short>(program.size()),
                const_cast<sock_filter*>(program.data())};
  // Kernels before 5.16 (and later ones booted with spec_store_bypass_disable=seccomp or
  // spectre_v2_user=seccomp) force store-bypass and indirect-branch mitigations on any process
  // that installs a filter without SPEC_ALLOW. Store-bypass protection guards the process against
  // itself, and a kernel host holds nothing of its own worth guarding; both cost interpreted code
  // much of its speed (a Python host's forward). What the indirect-branch part also did, an IBPB
  // when the CPU switches away from the host, is not kept: docs/DESIGN.md (threat model) says
  // what that leaves open. A kernel without the flag (before 4.17) gets the filter as before.
  long r = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                   SECCOMP_FILTER_FLAG_TSYNC | SECCOMP_FILTER_FLAG_SPEC_ALLOW, &fp);
  if (r < 0 && errno == EINVAL)
    r = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &fp);
  if (r < 0) return errno;
  return r == 0 ? 0 : EAGAIN; // r > 0: the id of a thread that could not be synchronized
}

} // namespace kiln
