#include "compile/cpu_compiler.hpp"

#include "data/task_hash.hpp"
#include "sandbox/containment.hpp"
#include "sandbox/remove_tree.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <poll.h>
#include <sstream>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace kiln {

namespace {

namespace fs = std::filesystem;

constexpr std::size_t max_log_bytes = 4096;

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

struct run_result {
  int exit_code = -1; // -1: could not start or killed
  int signal = 0;     // the signal that ended it, if one did
  bool timed_out = false;
  std::string log; // stdout and stderr together
};

struct spawn_limits {
  int64_t address_space_bytes = 0; // RLIMIT_AS; 0: unlimited
  int64_t file_size_bytes = 0;     // RLIMIT_FSIZE; 0: unlimited
  // Containment prepared by the parent, enforced in the child before exec (nullptr: none).
  const landlock_ruleset* landlock = nullptr;
  const std::vector<sock_filter>* seccomp = nullptr;
  std::string cwd;              // the child's working directory ("" = ours)
  std::vector<std::string> env; // replaces the environment when not empty
};

// PATH lookup in the parent: after fork only async-signal-safe calls may run.
std::string find_executable(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// Runs argv in its own process group (so a timeout kills the compiler's children too) under
// `limits` (inherited by the compiler's children: cc1plus, as, cicc, ptxas), reads its output
// until EOF or the deadline.
expected<run_result> run_captured(const std::vector<std::string>& args, double timeout_s,
                                  const spawn_limits& limits = {}) {
  std::string exe = find_executable(args[0]);
  if (exe.empty()) return error{"cannot start '" + args[0] + "': not found"};
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return error{std::string("pipe: ") + std::strerror(errno)};
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : limits.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  char** child_env = limits.env.empty() ? environ : envp.data();
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return error{std::string("fork: ") + std::strerror(errno)};
  }
  if (pid == 0) {
    setpgid(0, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    auto cap = [](int resource, int64_t bytes) {
      if (bytes <= 0) return;
      rlimit r{static_cast<rlim_t>(bytes), static_cast<rlim_t>(bytes)};
      setrlimit(resource, &r);
    };
    cap(RLIMIT_AS, limits.address_space_bytes);
    cap(RLIMIT_FSIZE, limits.file_size_bytes);
    rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    if (!limits.cwd.empty() && chdir(limits.cwd.c_str()) != 0) _exit(125);
    // The source may be a policy's: the compiler reads only the toolchain and the job's folder,
    // and opens no socket.
    if (limits.landlock && enforce_landlock(*limits.landlock) != 0) _exit(124);
    if (limits.seccomp && enforce_seccomp(*limits.seccomp) != 0) _exit(124);
    execve(exe.c_str(), argv.data(), child_env);
    _exit(127);
  }
  close(fds[1]);
  run_result r;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      r.timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int n = poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    ssize_t got = read(fds[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break; // EOF: the compiler closed its output
    if (r.log.size() < 64 * 1024) r.log.append(buf, static_cast<std::size_t>(got));
  }
  close(fds[0]);
  if (r.timed_out) kill(-pid, SIGKILL);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (!r.timed_out && WIFEXITED(wstatus)) r.exit_code = WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) r.signal = WTERMSIG(wstatus);
  return r;
}

// First line of `compiler --version`, once per process and compiler: part of the cache key, so an
// upgraded compiler never reuses stale objects.
expected<std::string> compiler_identity(const std::string& compiler,
                                        const std::vector<std::string>& identity_args) {
  static std::mutex mu;
  static std::map<std::vector<std::string>, std::string> known;
  std::vector<std::string> argv{compiler};
  argv.insert(argv.end(), identity_args.begin(), identity_args.end());
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = known.find(argv); it != known.end()) return it->second;
  auto r = run_captured(argv, 30);
  if (!r) return r.err();
  if (r->exit_code != 0)
    return error{"compiler '" + compiler + "' identity (" + argv.back() + ") failed: " + r->log};
  std::string line = r->log.substr(0, r->log.find('\n'));
  known[argv] = line;
  return line;
}

// A name no other thread or process uses at the same time, for write-then-rename.
std::string temp_suffix() {
  static std::atomic<uint64_t> counter{0};
  return ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter++);
}

status write_atomically(const std::string& path, const std::string& text) {
  std::string tmp = path + temp_suffix();
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out) return error{"cannot write " + tmp};
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return error{"cannot rename " + tmp + ": " + std::strerror(errno)};
  }
  return ok();
}

// A fresh folder per compile under <cache>/jobs: the only place the compiler may write.
expected<std::string> make_job_dir(const cpu_compile_options& opts) {
  std::error_code ec;
  fs::path root = fs::path(opts.cache_dir) / "jobs";
  fs::create_directories(root, ec);
  std::string tmpl = (root / "c-XXXXXX").string();
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  if (!mkdtemp(name.data()))
    return error{"cpu compile: mkdtemp " + tmpl + ": " + std::strerror(errno)};
  return std::string(name.data());
}

std::string truncate_log(std::string log) {
  if (log.size() > max_log_bytes) log = log.substr(0, max_log_bytes) + "\n... (log truncated)";
  return log;
}

// A compiler (or one of its children) that hit a limit says so only indirectly: name the limits.
std::string limit_hint(const run_result& r, const cpu_compile_options& opts) {
  bool hit = r.signal != 0;
  for (const char* sign : {"signal terminated program", "memory exhausted", "File size limit",
                           "Cannot allocate memory", "out of memory"})
    hit = hit || r.log.find(sign) != std::string::npos;
  if (!hit) return "";
  return " (limits: " + std::to_string(opts.memory_mib) + " MiB of address space, " +
         std::to_string(opts.output_mib) + " MiB per file written)";
}

} // namespace

expected<cpu_artifact> compile_cpu(const std::string& source, const cpu_compile_options& opts) {
  auto ident = compiler_identity(opts.compiler, opts.identity_args);
  if (!ident) return ident.err();
  std::string keyed = source;
  const std::string& version = *ident;
  for (const std::string* part : {&opts.compiler, &opts.flags, &version}) {
    keyed += '\0';
    keyed += *part;
  }
  for (const auto& w : opts.command) keyed += '\0' + w;
  for (const auto& [name, text] : opts.job_files) keyed += '\0' + name + '\0' + text;
  cpu_artifact art;
  art.key = hash_hex(fnv1a64(keyed));
  std::error_code ec;
  fs::create_directories(opts.cache_dir, ec);
  if (ec)
    return error{"cpu compile: cannot create cache dir " + opts.cache_dir + ": " + ec.message()};
  std::string base = (fs::path(opts.cache_dir) / art.key).string();
  art.so_path = base + opts.artifact_extension;
  if (fs::exists(art.so_path)) {
    art.cache_hit = true;
    return art;
  }
  auto start = std::chrono::steady_clock::now();
  std::string src_path = base + ".cpp";
  if (auto st = write_atomically(src_path, source); !st) return st.err();
  auto job_dir = make_job_dir(opts);
  if (!job_dir) return job_dir.err();
  struct dir_guard {
    std::string d;
    ~dir_guard() { remove_tree(d); }
  } guard{*job_dir};
  // The job's folder holds what the compiler may read besides the toolchain: the source (under a
  // short name, so the log quotes "kernel.cpp:3:1", not our paths) and the ABI headers.
  const std::string& ext = opts.source_extension;
  if (auto st = write_atomically(*job_dir + "/kernel" + ext, source); !st) return st.err();
  if (!opts.include_dir.empty())
    for (const char* h : {"kiln_abi.h", "kiln_cuda_abi.h"}) {
      std::error_code ec;
      fs::copy_file(fs::path(opts.include_dir) / h, fs::path(*job_dir) / h, ec);
    }
  for (const auto& [name, text] : opts.job_files)
    if (auto st = write_atomically(*job_dir + "/" + name, text); !st) return st.err();
  const std::string output = "kernel" + opts.artifact_extension;
  std::vector<std::string> args = opts.command;
  if (args.empty()) {
    args.push_back(opts.compiler);
    for (auto& w : split_words(opts.flags)) args.push_back(w);
    args.insert(args.end(), {"-I.", "-o", output, "kernel" + ext});
  }
  spawn_limits limits;
  limits.address_space_bytes = opts.memory_mib << 20;
  limits.file_size_bytes = opts.output_mib << 20;
  limits.cwd = *job_dir;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "TMPDIR=", 7) != 0 && std::strncmp(*e, "HOME=", 5) != 0)
      limits.env.push_back(*e);
  limits.env.push_back("TMPDIR=" + *job_dir);
  limits.env.push_back("HOME=" + *job_dir); // caches a builder keeps (torch's) stay in the job
  expected<landlock_ruleset> rules = error{"not asked for"};
  expected<std::vector<sock_filter>> filter = error{"not asked for"};
  if (opts.sandbox) {
    landlock_paths paths;
    paths.read_exec = system_read_paths();
    paths.read_exec.insert(paths.read_exec.end(), opts.read_paths.begin(), opts.read_paths.end());
    paths.read_write = {*job_dir, "/dev/null"};
    rules = prepare_landlock(paths);
    if (rules) limits.landlock = &*rules;
    filter = seccomp_program(seccomp_profile::compiler, getpid());
    if (!filter) return error{"compiler sandbox: " + filter.message()};
    limits.seccomp = &*filter;
  }
  auto r = run_captured(args, opts.timeout_s, limits);
  if (!r) return r.err();
  std::string tmp_so = art.so_path + temp_suffix();
  if (!r->timed_out && r->exit_code == 0) {
    std::error_code ec;
    fs::rename(*job_dir + "/" + output, tmp_so, ec);
    if (ec) fs::copy_file(*job_dir + "/" + output, tmp_so, ec);
    if (ec)
      return error{"cpu compile: cannot move the object out of " + *job_dir + ": " + ec.message()};
  }
  if (r->timed_out || r->exit_code != 0) {
    write_atomically(base + ".log", r->log);
    if (r->timed_out)
      return error{opts.compiler + ": killed after " + std::to_string(opts.timeout_s) + " s (key " +
                   art.key + ")"};
    if (r->exit_code == 124)
      return error{"compiler sandbox could not be applied (key " + art.key + ")"};
    return error{opts.compiler + " failed (" +
                 (r->signal ? "signal " + std::to_string(r->signal)
                            : "exit " + std::to_string(r->exit_code)) +
                 ", key " + art.key + ")" + limit_hint(*r, opts) + ":\n" + truncate_log(r->log)};
  }
  // Same key, same bytes: whichever concurrent compile renames last wins harmlessly.
  if (std::rename(tmp_so.c_str(), art.so_path.c_str()) != 0) {
    std::remove(tmp_so.c_str());
    return error{"cpu compile: cannot rename object into " + art.so_path + ": " +
                 std::strerror(errno)};
  }
  art.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return art;
}

} // namespace kiln
