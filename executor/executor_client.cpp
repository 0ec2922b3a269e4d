// Spawning, supervising and replacing executor processes. fork+exec rather than posix_spawn: the
// child needs PR_SET_PDEATHSIG (an orphaned executor must not outlive the pool) and fd 3 set up.
#include "executor/executor_client.hpp"

#include "executor/kernel_host_client.hpp"
#include "jobs/frame.hpp"
#include "sandbox/remove_tree.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <random>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace kiln {

namespace fs = std::filesystem;

std::string describe_signal(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return "signal " + std::to_string(sig) +
         (abbrev ? std::string(" (SIG") + abbrev + ")" : std::string());
}

executor_client::executor_client(executor_options opts) : opts_(std::move(opts)) {}

executor_client::~executor_client() { stop(); }

status executor_client::start() {
  if (pid_ > 0) return ok();
  // Exec can fail transiently (the binary is being relinked or replaced: ENOENT / ETXTBSY);
  // a short retry avoids charging that to a job.
  status st = start_once();
  for (int attempt = 1; !st && exec_failed_ && attempt < 3; ++attempt) {
    usleep(200000 * attempt);
    st = start_once();
  }
  return st;
}

status executor_client::start_once() {
  exec_failed_ = false;
  int64_t t0 = monotonic_ms();

  std::string root = opts_.scratch_root;
  if (root.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    root = tmp && *tmp ? tmp : "/tmp";
  }
  std::string tmpl = root + "/kiln-exec-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) return error{"executor: mkdtemp " + tmpl + ": " + std::strerror(errno)};
  scratch_ = buf.data();

  // Kernel hosts run as nobody, who may not traverse the scratch root (under /root by default):
  // their folders go into one of ours under /tmp (0711: enter, not list).
  std::string kh_tmpl = "/tmp/kiln-kh-XXXXXX";
  std::vector<char> kh_buf(kh_tmpl.begin(), kh_tmpl.end());
  kh_buf.push_back('\0');
  if (!mkdtemp(kh_buf.data())) {
    remove_tree(scratch_);
    return error{"executor: mkdtemp " + kh_tmpl + ": " + std::strerror(errno)};
  }
  kernel_scratch_ = kh_buf.data();
  chmod(kernel_scratch_.c_str(), 0711);
  // An executor that drops to nobody makes its kernel hosts' folders there itself.
  if (opts_.drop_privileges && geteuid() == 0 &&
      chown(kernel_scratch_.c_str(), 65534, 65534) != 0) {
    std::string why = std::strerror(errno);
    remove_tree(scratch_);
    remove_tree(kernel_scratch_);
    return error{"executor: chown " + kernel_scratch_ + " to nobody: " + why};
  }

  std::string exe = opts_.kiln_path;
  if (exe == "/proc/self/exe") {
    std::error_code ec;
    auto p = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) exe = p.string();
  }
  std::vector<std::string> args = {exe,
                                   "--log-level",
                                   opts_.log_level,
                                   "executor",
                                   "--fd",
                                   "3",
                                   "--scratch",
                                   scratch_,
                                   "--address-space-mib",
                                   std::to_string(opts_.address_space_mib),
                                   "--file-size-mib",
                                   std::to_string(opts_.file_size_mib),
                                   "--threads",
                                   std::to_string(opts_.threads)};
  if (opts_.cuda_device >= 0) {
    args.push_back("--cuda-device");
    args.push_back(std::to_string(opts_.cuda_device));
  }
  if (opts_.spare_hosts > 0) {
    args.push_back("--spare-hosts");
    args.push_back(std::to_string(opts_.spare_hosts));
  }
  if (!opts_.isolate_network) args.push_back("--no-net-isolation");
  if (!opts_.restrict_fs) args.push_back("--no-fs-restriction");
  if (opts_.drop_privileges) args.push_back("--drop-privileges");
  std::string host_bin = opts_.kernel_host_path.empty()
                             ? default_kernel_host_binary(exe, opts_.cuda_device >= 0)
                             : opts_.kernel_host_path;
  args.push_back("--kernel-host");
  args.push_back(host_bin);
  args.push_back("--kernel-scratch");
  args.push_back(kernel_scratch_);
  if (!opts_.kernel_drop_privileges) args.push_back("--kernel-keeps-privileges");
  if (!opts_.kernel_landlock) args.push_back("--no-kernel-landlock");
  if (!opts_.kernel_seccomp) args.push_back("--no-kernel-seccomp");
  if (opts_.cgroups && !cgroup2_root().empty()) {
    std::string parent = cgroup2_root() + "/kiln";
    mkdir(parent.c_str(), 0755);
    if (auto g = job_cgroup::create(parent, "exec-")) {
      cgroup_ = std::move(*g);
      // An executor that drops to nobody creates its kernel hosts' folders itself: delegate.
      if (opts_.drop_privileges && geteuid() == 0) cgroup_.delegate(65534);
      args.push_back("--cgroup");
      args.push_back(cgroup_.path());
    }
  }
  int cg_fd = cgroup_.procs_fd();
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    remove_tree(scratch_);
    return error{std::string("executor: socketpair: ") + std::strerror(errno)};
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(sv[0]);
    close(sv[1]);
    remove_tree(scratch_);
    return error{std::string("executor: fork: ") + std::strerror(e)};
  }
  if (pid == 0) {
    // Child: async-signal-safe calls only until exec.
    setpgid(0, 0); // its own group: a kill reaches anything the kernel forked
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);
    if (cg_fd >= 0 && write(cg_fd, "0", 1) != 1) _exit(126);
    if (sv[1] == 3) {
      fcntl(3, F_SETFD, 0);
    } else {
      dup2(sv[1], 3);
    }
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    dup2(2, 1);
    syscall(SYS_close_range, 4u, ~0u, 0u);
    sigset_t all;
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, nullptr);
    signal(SIGPIPE, SIG_DFL);
    execv(argv[0], argv.data());
    char msg[] = "kiln executor: exec failed: errno   \n";
    int e = errno;
    for (int i = 0; i < 3; ++i, e /= 10) msg[sizeof msg - 3 - i] = static_cast<char>('0' + e % 10);
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
    _exit(127);
  }
  setpgid(pid, pid); // both sides set it: no race with an early kill
  close(sv[1]);
  pid_ = pid;
  fd_ = sv[0];
  ++stats_.starts;

  auto f = read_frame(fd_, monotonic_ms() + static_cast<int64_t>(opts_.start_timeout_s * 1000));
  std::string why;
  if (f.status == frame_status::ok) {
    auto h = decode_hello(f.payload);
    if (h)
      hello_ = *h;
    else
      why = h.message();
  } else if (f.status == frame_status::timeout) {
    why = "no hello within " + std::to_string(opts_.start_timeout_s) + " s";
  } else {
    why = f.status == frame_status::eof ? "exited before its hello" : f.error;
  }
  if (!why.empty()) {
    auto ex = kill_and_reap(true);
    exec_failed_ = !ex.signaled && ex.code == 127;
    return error{"executor failed to start: " + why +
                 (ex.text.empty() ? "" : " (" + ex.text + ")")};
  }
  stats_.last_start_ms = static_cast<double>(monotonic_ms() - t0);
  if (pending_recover_) {
    stats_.last_recover_ms = stats_.last_kill_ms + stats_.last_start_ms;
    pending_recover_ = false;
  }
  return ok();
}

executor_client::exit_info executor_client::kill_and_reap(bool wait_first) {
  exit_info info;
  if (pid_ <= 0) return info;
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
  int st = 0;
  pid_t r = 0;
  if (wait_first) {
    // The channel closes as the process exits; its exit status follows within moments.
    int64_t until = monotonic_ms() + 500;
    while ((r = waitpid(pid_, &st, WNOHANG)) == 0 && monotonic_ms() < until) usleep(1000);
  }
  if (r == 0) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    while ((r = waitpid(pid_, &st, 0)) < 0 && errno == EINTR) {
    }
  } else {
    kill(-pid_, SIGKILL); // anything the executor forked
  }
  if (r == pid_) {
    if (WIFSIGNALED(st)) {
      info.signaled = true;
      info.code = WTERMSIG(st);
      info.text = describe_signal(info.code);
    } else if (WIFEXITED(st)) {
      info.code = WEXITSTATUS(st);
      info.text = "exit code " + std::to_string(info.code);
    }
  }
  pid_ = -1;
  hello_.reset();
  cgroup_.kill_all(); // whatever the executor's kernel hosts left behind
  if (!scratch_.empty()) {
    remove_tree(scratch_);
    scratch_.clear();
  }
  if (!kernel_scratch_.empty()) {
    remove_tree(kernel_scratch_);
    kernel_scratch_.clear();
  }
  return info;
}

outcome executor_client::failure(const job& j, outcome_kind k, std::string message,
                                 double device_ms) {
  outcome o = make_outcome(j, k, std::move(message));
  o.device_ms = device_ms;
  return o;
}

outcome executor_client::run(const job& j) {
  ++stats_.jobs;
  if (pid_ <= 0)
    if (auto st = start(); !st) return failure(j, outcome_kind::runtime_error, st.message(), 0);

  int64_t t0 = monotonic_ms();
  int64_t deadline = t0 + static_cast<int64_t>((j.timeout_s + opts_.grace_s) * 1000);
  auto died = [&](std::string what, bool timed_out) {
    int64_t k0 = monotonic_ms();
    double device_ms = static_cast<double>(k0 - t0);
    auto ex = kill_and_reap(!timed_out);
    stats_.last_kill_ms = static_cast<double>(monotonic_ms() - k0);
    pending_recover_ = true;
    if (timed_out) {
      ++stats_.timeouts;
      return failure(j, outcome_kind::timeout, what + "; executor killed", device_ms);
    }
    ++stats_.crashes;
    // CPU-time and file-size limits are signals too; name them for what they mean.
    if (ex.signaled && ex.code == SIGXCPU)
      return failure(j, outcome_kind::timeout, "cpu time limit exceeded (" + ex.text + ")",
                     device_ms);
    std::string reason = what + (ex.text.empty() ? "" : ": " + ex.text);
    if (ex.signaled && ex.code == SIGXFSZ) reason += " (file size limit)";
    return failure(j, outcome_kind::runtime_error, reason, device_ms);
  };

  job sent = j;
  sent.nonce = nonce_();
  if (auto st = write_frame(fd_, encode(sent), deadline); !st) return died("executor died", false);
  auto f = read_frame(fd_, deadline);
  if (f.status == frame_status::timeout) {
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.3g", j.timeout_s);
    return died(std::string("no result within ") + secs + " s", true);
  }
  if (f.status == frame_status::eof) return died("executor died", false);
  if (f.status == frame_status::error) {
    ++stats_.protocol_errors;
    return died("executor sent a bad frame (" + f.error + ")", false);
  }
  auto o = decode_outcome(f.payload);
  if (!o || o->job_id != j.id || o->nonce != sent.nonce) {
    ++stats_.protocol_errors;
    std::string why = !o                  ? o.message()
                      : o->job_id != j.id ? "reply for job " + std::to_string(o->job_id)
                                          : std::string("wrong nonce: forged by the kernel?");
    return died("executor sent a bad outcome (" + why + ")", false);
  }
  // The executor's view of queue and compile time is what we sent; keep ours authoritative.
  o->nonce = 0; // ours, not the caller's business
  o->queue_ms = j.queue_ms;
  o->compile_ms = j.artifact.compile_ms;
  if (o->retire) {
    int64_t k0 = monotonic_ms();
    kill_and_reap(true);
    stats_.last_kill_ms = static_cast<double>(monotonic_ms() - k0);
    pending_recover_ = true;
  }
  return *o;
}

void executor_client::stop() {
  if (pid_ > 0) kill_and_reap(true); // closing the channel is the executor's signal to exit
}

} // namespace kiln
