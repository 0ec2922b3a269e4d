// fork+exec of the kernel host with only async-signal-safe calls in the child (the executor has
// LibTorch's threads), its own process group, and PR_SET_PDEATHSIG so it never outlives us.
#include "executor/kernel_host_client.hpp"

#include "executor/shared_buffers.hpp"
#include "jobs/frame.hpp"
#include "sandbox/remove_tree.hpp"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <poll.h>
#include <random>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace kiln {

namespace fs = std::filesystem;

namespace {

double host_clock_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

std::string printable(const char* text, size_t cap) {
  std::string s;
  for (size_t i = 0; i < cap && text[i]; ++i) {
    unsigned char ch = static_cast<unsigned char>(text[i]);
    s += (ch >= 32 && ch < 127) ? static_cast<char>(ch) : '?';
    if (s.size() >= 200) break;
  }
  return s;
}

status copy_file(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  if (ec) return error{"cannot copy " + from + " into the kernel host's scratch: " + ec.message()};
  chmod(to.c_str(), 0644);
  return ok();
}

std::string signal_text(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return "signal " + std::to_string(sig) +
         (abbrev ? std::string(" (SIG") + abbrev + ")" : std::string());
}

} // namespace

std::string default_kernel_host_binary(const std::string& kiln_path, bool cuda) {
  if (const char* env = std::getenv(cuda ? "KILN_KERNEL_HOST_CUDA" : "KILN_KERNEL_HOST");
      env && *env)
    return env;
  std::error_code ec;
  fs::path exe = kiln_path;
  if (kiln_path == "/proc/self/exe") exe = fs::read_symlink("/proc/self/exe", ec);
  return (exe.parent_path() / (cuda ? "kiln-kernel-host-cuda" : "kiln-kernel-host")).string();
}

expected<std::unique_ptr<kernel_host>> kernel_host::start(const kernel_host_options& opts) {
  std::unique_ptr<kernel_host> h(new kernel_host());
  h->opts_ = opts;
  h->seq_ = (uint64_t{std::random_device{}()} << 32) | std::random_device{}(); // not guessable
  if (access(opts.binary.c_str(), X_OK) != 0)
    return error{"kernel host: cannot run " + opts.binary + ": " + std::strerror(errno)};
  std::string root = opts.scratch_root.empty() ? "/tmp" : opts.scratch_root;
  std::string tmpl = root + "/kh-XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  if (!mkdtemp(name.data()))
    return error{"kernel host: mkdtemp " + tmpl + ": " + std::strerror(errno)};
  h->scratch_ = name.data();
  bool drop = opts.drop_privileges && geteuid() == 0;
  if (drop && chown(h->scratch_.c_str(), 65534, 65534) != 0)
    return error{"kernel host: chown " + h->scratch_ + ": " + std::strerror(errno)};

  std::vector<std::string> args = {opts.binary,
                                   "--fd",
                                   "3",
                                   "--scratch",
                                   h->scratch_,
                                   "--threads",
                                   std::to_string(std::max(1, opts.threads)),
                                   "--address-space-mib",
                                   std::to_string(opts.address_space_mib),
                                   "--file-size-mib",
                                   std::to_string(opts.file_size_mib)};
  if (opts.cuda_device >= 0) {
    args.push_back("--cuda-device");
    args.push_back(std::to_string(opts.cuda_device));
  }
  if (opts.python) {
    args.push_back("--python");
    args.push_back(opts.python_library);
    std::string path;
    for (const auto& p : opts.python_path) path += (path.empty() ? "" : ":") + p;
    args.push_back("--python-path");
    args.push_back(path);
  }
  if (drop) args.push_back("--drop-privileges");
  if (!opts.landlock) args.push_back("--no-landlock");
  if (!opts.seccomp) args.push_back("--no-seccomp");

  if (!opts.cgroup_parent.empty()) {
    auto g = job_cgroup::create(opts.cgroup_parent, "kh-");
    if (!g) return g.err();
    h->cgroup_ = std::move(*g);
  }
  int cg_fd = h->cgroup_.procs_fd();
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return error{std::string("kernel host: socketpair: ") + std::strerror(errno)};
  // The host sets its own death signal and joins its cgroup first thing (posix_spawn can do
  // neither); both before it reads anything, and it exits if its parent is already gone.
  args.insert(args.begin() + 1, {"--parent", std::to_string(getpid())});
  if (cg_fd >= 0) args.insert(args.begin() + 1, {"--cgroup-fd", "4"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Kernels may print; their output reaches nobody unless a developer asks for it.
  const char* show = std::getenv("KILN_KERNEL_HOST_STDERR");
  bool keep_stderr = opts.keep_stderr || (show && *show == '1');
  // posix_spawn (vfork-like in glibc): a fork would copy the page tables of this LibTorch process
  // on every job.
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  if (!keep_stderr) posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
  if (cg_fd >= 0) posix_spawn_file_actions_adddup2(&fa, cg_fd, 4);
  posix_spawn_file_actions_addclosefrom_np(&fa, cg_fd >= 0 ? 5 : 4);
  posix_spawnattr_t sa;
  posix_spawnattr_init(&sa);
  sigset_t none, dflt;
  sigemptyset(&none);
  sigemptyset(&dflt);
  sigaddset(&dflt, SIGPIPE);
  posix_spawnattr_setsigmask(&sa, &none);
  posix_spawnattr_setsigdefault(&sa, &dflt);
  posix_spawnattr_setpgroup(&sa, 0);
  posix_spawnattr_setflags(&sa,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  pid_t pid = -1;
  int e = posix_spawn(&pid, argv[0], &fa, &sa, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&sa);
  close(sv[1]);
  if (e != 0) {
    close(sv[0]);
    return error{std::string("kernel host: spawn ") + argv[0] + ": " + std::strerror(e)};
  }
  h->pid_ = pid;
  h->fd_ = sv[0];
  if (clock_getcpuclockid(pid, &h->cpu_clock_) != 0)
    return error{"kernel host: no CPU clock for its process"};

  h->started_ms_ = monotonic_ms();
  return h;
}

std::string describe(const kh_reply& ready) {
  return "kernel host uid " + std::to_string(ready.uid) + ", landlock abi " +
         std::to_string(ready.landlock_abi) + ", seccomp " + (ready.seccomp ? "on" : "off");
}

kernel_host::~kernel_host() { kill_all(); }

// Another process's CPU clock is the only one Linux lets the executor read (a thread's clock is
// readable only from its own thread group). It lags a thread that is running when read by up
// to a scheduler tick: that time shows in a later reading (kernel_calls.cpp allows for it).
double kernel_host::read_cpu() const {
  timespec ts{};
  if (clock_gettime(cpu_clock_, &ts) != 0) return -1.0;
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

void kernel_host::reap(bool wait_first) {
  if (pid_ <= 0) return;
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
  int st = 0;
  pid_t r = 0;
  if (wait_first) { // the channel closes as the process exits; its status follows within moments
    int64_t until = monotonic_ms() + 300;
    while ((r = waitpid(pid_, &st, WNOHANG)) == 0 && monotonic_ms() < until) usleep(500);
  }
  ::kill(-pid_, SIGKILL);
  if (r == 0)
    while ((r = waitpid(pid_, &st, 0)) < 0 && errno == EINTR) {
    }
  if (r == pid_ && exit_text_.empty()) {
    if (WIFSIGNALED(st))
      exit_text_ = signal_text(WTERMSIG(st));
    else if (WIFEXITED(st))
      exit_text_ = "exit code " + std::to_string(WEXITSTATUS(st));
  }
}

int kernel_host::kill_all() {
  if (pid_ <= 0 && scratch_.empty()) return 0;
  pid_t group = pid_;
  reap(false);
  pid_ = -1;
  // The host is reaped: anything still in its cgroup or process group is a process the kernel
  // made (seccomp should make that impossible), and is killed now.
  int alive = cgroup_.kill_all();
  if (group > 0 && ::kill(-group, 0) == 0) {
    alive = std::max(alive, 1);
    ::kill(-group, SIGKILL);
  }
  if (!scratch_.empty()) {
    remove_tree(scratch_);
    scratch_.clear();
  }
  return alive;
}

int64_t kernel_host::start_deadline(int64_t deadline_ms) const {
  return std::max(deadline_ms, started_ms_ + static_cast<int64_t>(opts_.start_timeout_s * 1000));
}

std::optional<ssize_t> kernel_host::receive_reply(kh_reply& reply, int64_t deadline_ms) {
  for (;;) {
    int64_t left = deadline_ms - monotonic_ms();
    if (left <= 0) return std::nullopt;
    pollfd p{fd_, POLLIN, 0};
    int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (n <= 0) continue; // EINTR or a second of nothing: look at the deadline again
    ssize_t got = recv(fd_, &reply, sizeof reply, MSG_TRUNC);
    if (got < 0 && errno == EINTR) continue;
    return got;
  }
}

status kernel_host::wait_started(int64_t deadline_ms) {
  if (started_) return ok();
  if (fd_ < 0) return error{"kernel host did not start: it is gone"};
  kh_reply reply;
  auto got = receive_reply(reply, start_deadline(deadline_ms));
  if (!got) {
    reap(false);
    return error{"kernel host did not start by its deadline"};
  }
  if (*got <= 0) {
    reap(true);
    return error{"kernel host did not start" + (exit_text_.empty() ? "" : ": " + exit_text_)};
  }
  // No code of the job's has run in the host yet, but the check is the same as for any reply.
  if (*got != static_cast<ssize_t>(sizeof reply) || reply.magic != kh_magic ||
      reply.version != kh_version || reply.op != static_cast<uint32_t>(kh_op::started))
    return error{"kernel host: its first message is not `started` (version mismatch?)"};
  started_ = true;
  return ok();
}

status kernel_host::set_layout(const shared_buffers& b, int64_t deadline_ms) {
  if (auto st = wait_started(deadline_ms); !st) return st;
  auto cmd = std::make_unique<kh_command>(b.layout());
  uint32_t n = cmd->inputs + cmd->params + cmd->outputs;
  // The reply comes once the host's sandbox is in force.
  auto r = round_trip(*cmd, kh_command_bytes(n), b.memfd(), start_deadline(deadline_ms), &ready_);
  if (r.failure == call_failure::died) return error{"kernel host did not start: " + r.why};
  if (r.failure != call_failure::none) return error{"kernel host: " + r.why};
  if (r.code != kh_code::ok) return error{"kernel host refused the buffers: " + r.text};
  return ok();
}

call_result kernel_host::load(const artifact_ref& a, int64_t deadline_ms) {
  call_result r;
  std::string base = fs::path(a.path).filename().string();
  if (base.empty() || base.size() >= sizeof(kh_command{}.artifact)) {
    r.failure = call_failure::protocol;
    r.why = "artifact name '" + base + "' is not usable";
    return r;
  }
  std::vector<std::pair<std::string, std::string>> files = {{a.path, scratch_ + "/" + base}};
  if (a.loader == artifact_loader::cuda_cubin_plan)
    files.push_back({a.path + ".plan.json", scratch_ + "/" + base + ".plan.json"});
  for (const auto& [from, to] : files)
    if (auto st = copy_file(from, to); !st) {
      r.code = kh_code::load_failed;
      r.text = st.message();
      return r;
    }
  if (opts_.drop_privileges && geteuid() == 0)
    for (const auto& f : files)
      if (chown(f.second.c_str(), 65534, 65534) != 0) {
        r.code = kh_code::load_failed;
        r.text = "chown " + f.second + " to nobody: " + std::strerror(errno);
        return r;
      }
  kh_command cmd;
  cmd.op = static_cast<uint32_t>(kh_op::load);
  cmd.loader = static_cast<uint32_t>(a.loader);
  std::snprintf(cmd.artifact, sizeof cmd.artifact, "%s", base.c_str());
  return round_trip(cmd, kh_command_head, -1, deadline_ms);
}

call_result kernel_host::call_op(kh_op op, int64_t deadline_ms) {
  kh_command cmd;
  cmd.op = static_cast<uint32_t>(op);
  return round_trip(cmd, kh_command_head, -1, deadline_ms);
}

call_result kernel_host::round_trip(kh_command& cmd, size_t bytes, int pass_fd, int64_t deadline_ms,
                                    kh_reply* keep) {
  call_result r;
  auto fail = [&](call_failure f, std::string why) {
    r.failure = f;
    r.why = std::move(why);
    if (f != call_failure::protocol) reap(f == call_failure::died);
    if (f == call_failure::died && !exit_text_.empty()) r.why += ": " + exit_text_;
    return r;
  };
  if (fd_ < 0) return fail(call_failure::died, "the kernel host is gone");
  // Nothing may be waiting: a reply nobody asked for was written by the kernel.
  pollfd pending{fd_, POLLIN, 0};
  if (poll(&pending, 1, 0) > 0 && (pending.revents & POLLIN)) {
    char junk[8];
    if (recv(fd_, junk, sizeof junk, MSG_DONTWAIT | MSG_PEEK) > 0)
      return fail(call_failure::protocol, "the kernel host sent a reply nobody asked for");
  }
  cmd.seq = ++seq_;
  iovec iov{&cmd, bytes};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (pass_fd >= 0) {
    mh.msg_control = control;
    mh.msg_controllen = sizeof control;
    cmsghdr* ch = CMSG_FIRSTHDR(&mh);
    ch->cmsg_level = SOL_SOCKET;
    ch->cmsg_type = SCM_RIGHTS;
    ch->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(ch), &pass_fd, sizeof pass_fd);
  }
  auto cpu_before = read_cpu();
  double t0 = host_clock_ms();
  if (sendmsg(fd_, &mh, MSG_NOSIGNAL) != static_cast<ssize_t>(bytes))
    return fail(call_failure::died, "the kernel host is gone");
  kh_reply reply;
  auto received = receive_reply(reply, deadline_ms);
  if (!received) return fail(call_failure::timeout, "no reply by the job's deadline");
  ssize_t got = *received;
  double t1 = host_clock_ms();
  if (got <= 0) return fail(call_failure::died, "the kernel process died");
  if (got != static_cast<ssize_t>(sizeof reply) || reply.magic != kh_magic ||
      reply.version != kh_version || reply.op != cmd.op || reply.seq != cmd.seq || reply.code < 0 ||
      reply.code > static_cast<int32_t>(kh_code::bad_command))
    return fail(call_failure::protocol, "the kernel host's reply is malformed or out of order");
  if (keep) *keep = reply;
  r.code = static_cast<kh_code>(reply.code);
  r.text = printable(reply.text, sizeof reply.text);
  r.wall_ms = t1 - t0;
  r.stream_ms = reply.stream_ms;
  r.residual_ms = reply.residual_ms;
  r.host = reply.host;
  // A process's CPU clock is exact only while none of its threads runs (a running thread's time
  // since its last tick is not in it yet): read it at each command, when the host is waiting.
  if (cpu_at_last_send_ >= 0 && cpu_before >= 0) {
    r.prev_cycle_cpu_ms = cpu_before - cpu_at_last_send_;
    r.prev_wall_ms = wall_of_last_;
  }
  cpu_at_last_send_ = cpu_before;
  wall_of_last_ = t1 - t0;
  return r;
}

} // namespace kiln
