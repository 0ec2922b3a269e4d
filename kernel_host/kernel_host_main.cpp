// kiln-kernel-host: the untrusted side of one job. It holds no reference, no verdict logic, no
// nonce and no pool channel: only the job's buffers (shared memory or a device region), the
// kernel, and a channel to its executor on which it answers "called, here is what the call
// reported". Started by the executor (executor/kernel_host_client.hpp) and killed after the job.
//   start: limits -> device / host threads / Python and torch (--python) -> (wait) layout:
//          map the buffers -> uid drop -> landlock -> seccomp -> reply with the sandbox's facts
//   loop:  empty* -> load (seccomp: no more executable memory) -> call* -> EOF
// The buffers are mapped before the sandbox (a device region is imported as root, before landlock);
// a spare host started ahead of its job waits there with its device context already made.
#include "kernel_host/kernel_host_protocol.hpp"
#include "kernel_host/loaded_kernel.hpp"
#include "kernel_host/python_host.hpp"
#include "runtimes/cpu_runtime.hpp"
#include "sandbox/containment.hpp"
#ifdef KILN_HAVE_CUDA
#include "runtimes/cuda_program.hpp"
#include "runtimes/cuda_vmm.hpp"
#endif

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <grp.h>
#include <optional>
#include <string>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <vector>

namespace {

using namespace kiln;

struct host_args {
  int fd = 3;
  pid_t parent = 0;   // the executor: the host dies with it
  int cgroup_fd = -1; // its cgroup folder's cgroup.procs, to move itself in
  std::string scratch;
  int threads = 1;
  int cuda_device = -1;
  bool drop_privileges = false;
  bool landlock = true;
  bool seccomp = true;
  int64_t address_space_mib = 16384;
  int64_t file_size_mib = 64;
  std::string python_library; // --python: a host for ModelNew submissions (python_host.hpp)
  std::string python_path;    // --python-path: the interpreter's sys.path, ':'-separated
};

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "kiln-kernel-host: %s\n", what);
  _exit(3);
}

std::optional<host_args> parse(int argc, char** argv) {
  host_args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (k == "--no-landlock") {
      a.landlock = false;
    } else if (k == "--no-seccomp") {
      a.seccomp = false;
    } else if (k == "--drop-privileges") {
      a.drop_privileges = true;
    } else if (!(v = value())) {
      return std::nullopt;
    } else if (k == "--fd") {
      a.fd = std::atoi(v);
    } else if (k == "--parent") {
      a.parent = static_cast<pid_t>(std::atoi(v));
    } else if (k == "--cgroup-fd") {
      a.cgroup_fd = std::atoi(v);
    } else if (k == "--scratch") {
      a.scratch = v;
    } else if (k == "--threads") {
      a.threads = std::atoi(v);
    } else if (k == "--cuda-device") {
      a.cuda_device = std::atoi(v);
    } else if (k == "--address-space-mib") {
      a.address_space_mib = std::atoll(v);
    } else if (k == "--file-size-mib") {
      a.file_size_mib = std::atoll(v);
    } else if (k == "--python") {
      a.python_library = v;
    } else if (k == "--python-path") {
      a.python_path = v;
    } else {
      return std::nullopt;
    }
  }
  if (a.scratch.empty()) return std::nullopt;
  return a;
}

void cap(int resource, rlim_t value) {
  rlimit cur{};
  getrlimit(resource, &cur);
  if (cur.rlim_max != RLIM_INFINITY && cur.rlim_max < value) value = cur.rlim_max;
  rlimit lim{value, value};
  setrlimit(resource, &lim);
}

#ifdef KILN_HAVE_CUDA
// The GPU's device files: opened by the driver before the sandbox.
std::vector<std::string> nvidia_devices() {
  std::vector<std::string> out;
  if (DIR* d = opendir("/dev")) {
    while (dirent* e = readdir(d))
      if (std::strncmp(e->d_name, "nvidia", 6) == 0)
        out.push_back(std::string("/dev/") + e->d_name);
    closedir(d);
  }
  return out;
}
#endif

struct host_state {
  host_args args;
  std::vector<const void*> in, par;
  std::vector<void*> out;
  bool have_layout = false;
  std::optional<loaded_kernel> kernel;
  std::vector<sock_filter> run_filter; // prepared before load: no allocation after it matters
};

void send_reply(int fd, kh_reply r) { (void)send(fd, &r, sizeof r, MSG_NOSIGNAL); }

// One command (and the memfd riding along, or -1). Exits on EOF: the executor is done.
size_t receive(int fd, kh_command& cmd, int& memfd) {
  for (;;) {
    cmd = kh_command{};
    memfd = -1;
    iovec iov{&cmd, sizeof cmd};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof control;
    ssize_t got = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    if (got == 0) _exit(0);
    if (got < 0) {
      if (errno == EINTR) continue;
      _exit(4);
    }
    for (cmsghdr* ch = CMSG_FIRSTHDR(&mh); ch; ch = CMSG_NXTHDR(&mh, ch))
      if (ch->cmsg_level == SOL_SOCKET && ch->cmsg_type == SCM_RIGHTS)
        std::memcpy(&memfd, CMSG_DATA(ch), sizeof memfd);
    return static_cast<size_t>(got);
  }
}

bool well_formed(const kh_command& c, size_t got) {
  return got >= kh_command_head && c.magic == kh_magic && c.version == kh_version;
}

kh_reply reply_to(const kh_command& c, kh_code code, const std::string& text = {}) {
  kh_reply r;
  r.op = c.op;
  r.seq = c.seq;
  r.code = static_cast<int32_t>(code);
  std::snprintf(r.text, sizeof r.text, "%s", text.c_str());
  return r;
}

// Pointers into the region; every entry must lie inside it.
kh_reply apply_layout(host_state& s, const kh_command& c, int memfd, size_t got) {
  uint32_t n = c.inputs + c.params + c.outputs;
  if (n > kh_max_buffers || got < kh_command_bytes(n) || s.have_layout)
    return reply_to(c, kh_code::bad_command, "bad layout");
  char* base = nullptr;
  if (memfd < 0) return reply_to(c, kh_code::bad_command, "no region");
  if (c.cuda) {
#ifdef KILN_HAVE_CUDA
    // Mapped for the job's life: the host is killed after it, and the executor frees the memory.
    auto r = cuda_vmm_import(memfd, static_cast<int64_t>(c.region_bytes));
    close(memfd);
    if (!r) return reply_to(c, kh_code::device_error, r.message());
    base = static_cast<char*>(r->ptr);
#else
    close(memfd);
    return reply_to(c, kh_code::bad_command, "no cuda in this build");
#endif
  } else {
    void* p = mmap(nullptr, c.region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    close(memfd);
    if (p == MAP_FAILED) return reply_to(c, kh_code::bad_command, "mmap failed");
    base = static_cast<char*>(p);
  }
  for (uint32_t i = 0; i < n; ++i) {
    const auto& b = c.buffers[i];
    if (b.offset > c.region_bytes || b.bytes > c.region_bytes - b.offset)
      return reply_to(c, kh_code::bad_command, "buffer outside the region");
    char* p = base + b.offset;
    if (i < c.inputs)
      s.in.push_back(p);
    else if (i < c.inputs + c.params)
      s.par.push_back(p);
    else
      s.out.push_back(p);
  }
  s.have_layout = true;
  return reply_to(c, kh_code::ok);
}

kh_reply load(host_state& s, const kh_command& c) {
  std::string name(c.artifact, strnlen(c.artifact, sizeof c.artifact));
  if (name.empty() || name.find('/') != std::string::npos || name[0] == '.')
    return reply_to(c, kh_code::bad_command, "bad artifact name");
  if (s.kernel) return reply_to(c, kh_code::bad_command, "already loaded");
  std::string path = s.args.scratch + "/" + name;
  auto k = loaded_kernel::load(static_cast<artifact_loader>(c.loader), path,
                               s.args.cuda_device >= 0, s.in, s.par, s.out);
  if (!k) return reply_to(c, kh_code::load_failed, k.message());
  s.kernel.emplace(std::move(*k));
  // From here on no memory of this process may become executable: the kernel is in.
  if (!s.run_filter.empty())
    if (int e = enforce_seccomp(s.run_filter); e != 0)
      return reply_to(c, kh_code::load_failed, std::string("seccomp: ") + std::strerror(e));
  return reply_to(c, kh_code::ok);
}

kh_reply call(host_state& s, const kh_command& c, bool empty) {
  if (!s.have_layout) return reply_to(c, kh_code::bad_command, "no layout");
  if (s.args.cuda_device < 0) {
    if (empty) return reply_to(c, kh_code::ok);
    if (!s.kernel) return reply_to(c, kh_code::bad_command, "nothing loaded");
    auto st = s.kernel->run(s.in, s.par, s.out);
    if (st) return reply_to(c, kh_code::ok);
    return reply_to(c, kh_code::kernel_failed, python_host_started() ? st.message() : "");
  }
#ifdef KILN_HAVE_CUDA
  if (!empty && !s.kernel) return reply_to(c, kh_code::bad_command, "nothing loaded");
  bool sticky = false;
  std::string entry_failure; // the kernel's own failure, not a CUDA error
  auto t = cuda_timed_call(
      [&]() -> status {
        if (empty) return ok();
        auto st = s.kernel->run(s.in, s.par, s.out);
        if (!st) entry_failure = st.message();
        return st;
      },
      &sticky, python_host_started());
  if (!t) {
    bool entry = !entry_failure.empty() && t.message() == entry_failure;
    if (!entry) return reply_to(c, kh_code::device_error, t.message());
    return reply_to(c, kh_code::kernel_failed, python_host_started() ? entry_failure : "");
  }
  auto r = reply_to(c, kh_code::ok);
  // Fault injection for tests: a host that under-reports, as a compromised one would.
  static const double scale = [] {
    const char* f = std::getenv("KILN_FAULT_SCALE_EVENTS");
    return f ? std::atof(f) : 1.0;
  }();
  r.stream_ms = t->stream_ms * (empty ? 1.0 : scale);
  r.residual_ms = t->residual_ms;
  r.host.settle_ms = t->settle_ms;
  r.host.call_ms = t->call_ms;
  r.host.drain_ms = t->drain_ms;
  return r;
#else
  return reply_to(c, kh_code::bad_command, "no cuda in this build");
#endif
}

} // namespace

int main(int argc, char** argv) {
  auto parsed = parse(argc, argv);
  if (!parsed)
    die("usage: kiln-kernel-host --scratch DIR [--fd N] [--threads N] [--cuda-device D]");
  host_state s;
  s.args = *parsed;
  const auto& a = s.args;
  // First, before anything else runs: die with the executor, and join the job's cgroup.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (a.parent > 0 && getppid() != a.parent) _exit(126);
  if (a.cgroup_fd >= 0) {
    if (write(a.cgroup_fd, "0", 1) != 1) die("cannot join the job's cgroup");
    close(a.cgroup_fd);
  }
  cap(RLIMIT_CORE, 0);
  if (a.file_size_mib > 0) cap(RLIMIT_FSIZE, static_cast<rlim_t>(a.file_size_mib) << 20);
  // The driver reserves far more address space than any limit that would bound a host kernel.
  if (a.cuda_device < 0 && a.address_space_mib > 0)
    cap(RLIMIT_AS, static_cast<rlim_t>(a.address_space_mib) << 20);
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); // no core file, no ptrace or /proc/<pid>/mem by peers
  if (chdir(a.scratch.c_str()) != 0) die("cannot enter the scratch directory");
  setenv("TMPDIR", a.scratch.c_str(), 1);
  setenv("HOME", a.scratch.c_str(), 1);

  landlock_paths paths;
  paths.read_exec = system_read_paths();
  paths.read_write = {a.scratch, "/dev/null"};
  if (a.cuda_device >= 0) {
#ifdef KILN_HAVE_CUDA
    if (auto st = cuda_host_open(a.cuda_device); !st) die(st.message().c_str());
    for (auto& d : nvidia_devices()) paths.read_write.push_back(d);
#else
    die("this build has no cuda backend");
#endif
  }
  if (!a.python_library.empty()) {
    // Trusted code (the system's interpreter and torch) before the sandbox; the submission's
    // code runs only at load, inside it.
    if (auto st = start_python_host(a.python_library, a.python_path, std::max(1, a.threads),
                                    a.cuda_device);
        !st)
      die(st.message().c_str());
    for (auto& d : python_host_read_paths()) paths.read_exec.push_back(d);
  } else if (a.cuda_device < 0) {
    start_cpu_host_threads(std::max(1, a.threads));
  }
  kh_reply started;
  started.op = static_cast<uint32_t>(kh_op::started);
  send_reply(a.fd, started);
  // The job's buffers first, while the process may still open what mapping them needs.
  auto cmd = std::make_unique<kh_command>();
  int memfd = -1;
  kh_reply first;
  for (;;) {
    size_t got = receive(a.fd, *cmd, memfd);
    if (well_formed(*cmd, got) && cmd->op == static_cast<uint32_t>(kh_op::layout)) {
      first = apply_layout(s, *cmd, memfd, got);
      break;
    }
    if (memfd >= 0) close(memfd);
    send_reply(a.fd, reply_to(*cmd, kh_code::bad_command, "expected the layout"));
  }
  if (a.drop_privileges && geteuid() == 0) {
    const uid_t nobody = 65534;
    if (setgroups(0, nullptr) != 0 || setgid(nobody) != 0 || setuid(nobody) != 0)
      die("cannot drop to uid 65534");
  }
  first.pid = getpid();
  first.uid = geteuid();
  if (a.landlock) {
    auto rules = prepare_landlock(paths);
    // A kernel without landlock gets no file restriction: the executor sees abi 0 and says so.
    if (rules && enforce_landlock(*rules) == 0) first.landlock_abi = rules->abi();
  }
  if (a.seccomp) {
    auto load_filter = seccomp_program(seccomp_profile::kernel_load, getpid());
    auto run_filter = seccomp_program(seccomp_profile::kernel_run, getpid());
    if (!load_filter || !run_filter) die("cannot build the seccomp filters");
    if (int e = enforce_seccomp(*load_filter); e != 0) die(std::strerror(e));
    s.run_filter = std::move(*run_filter);
    first.seccomp = 1;
  }
  send_reply(a.fd, first);

  for (;;) {
    size_t got = receive(a.fd, *cmd, memfd);
    if (memfd >= 0) close(memfd); // only the layout brings one
    const kh_command& c = *cmd;
    if (!well_formed(c, got)) {
      send_reply(a.fd, reply_to(c, kh_code::bad_command, "bad command"));
      continue;
    }
    timespec t0{}, t1{};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kh_reply r;
    switch (static_cast<kh_op>(c.op)) {
    case kh_op::load: r = load(s, c); break;
    case kh_op::empty: r = call(s, c, true); break;
    case kh_op::call: r = call(s, c, false); break;
    default: r = reply_to(c, kh_code::bad_command, "unknown op");
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    r.host.handler_ms = static_cast<double>(t1.tv_sec - t0.tv_sec) * 1e3 +
                        static_cast<double>(t1.tv_nsec - t0.tv_nsec) / 1e6;
    send_reply(a.fd, r);
  }
}
