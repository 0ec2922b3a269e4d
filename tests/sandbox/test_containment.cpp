// Landlock rulesets and seccomp profiles, each enforced in a forked child that reports, bit by
// bit in its exit code, which forbidden things it still managed to do.
#include "sandbox/containment.hpp"

#include <cerrno>
#include <cstdio>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace kiln;
namespace fs = std::filesystem;

namespace {

// Runs `body` in a child; returns its exit code (or 100 + signal).
int in_child(const std::function<int()>& body) {
  pid_t p = fork();
  if (p == 0) _exit(body());
  int st = 0;
  waitpid(p, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
}

bool can_fork() {
  pid_t p = fork();
  if (p == 0) _exit(0);
  if (p < 0) return false;
  waitpid(p, nullptr, 0);
  return true;
}

bool can_socket() {
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  if (s < 0) return false;
  close(s);
  return true;
}

bool can_map_exec() {
  void* m = mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return false;
  munmap(m, 4096);
  return true;
}

bool can_mprotect_exec() {
  void* m = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  bool ok = mprotect(m, 4096, PROT_READ | PROT_EXEC) == 0;
  munmap(m, 4096);
  return ok;
}

} // namespace

TEST_CASE(
    "seccomp kernel profiles: no processes, sockets or outside signals, then no exec memory") {
  int code = in_child([] {
    auto load = seccomp_program(seccomp_profile::kernel_load, getpid());
    auto run = seccomp_program(seccomp_profile::kernel_run, getpid());
    if (!load || !run) return 64;
    if (enforce_seccomp(*load) != 0) return 65;
    int bad = 0;
    if (can_fork()) bad |= 1;
    if (can_socket()) bad |= 2;
    if (kill(getppid(), 0) == 0) bad |= 4;
    if (kill(getpid(), 0) != 0) bad |= 8; // itself: allowed (abort, raise)
    if (!can_map_exec()) bad |= 16;       // loading still maps code
    if (enforce_seccomp(*run) != 0) return 66;
    if (can_map_exec()) bad |= 32;
    if (can_mprotect_exec()) bad |= 1; // reuse: any escape fails the test
    return bad;
  });
  CHECK_MESSAGE(code == 0, "forbidden things that worked (bits): ", code);
}

TEST_CASE("seccomp compiler profile: fork and exec stay, sockets go") {
  int code = in_child([] {
    auto p = seccomp_program(seccomp_profile::compiler, getpid());
    if (!p || enforce_seccomp(*p) != 0) return 64;
    int bad = 0;
    if (!can_fork()) bad |= 1;
    if (can_socket()) bad |= 2;
    if (!can_map_exec()) bad |= 4;
    return bad;
  });
  CHECK_MESSAGE(code == 0, "bits: ", code);
}

TEST_CASE("landlock: reads beneath the granted paths only, writes beneath the writable one") {
  auto base = fs::temp_directory_path() / ("kiln_landlock_" + std::to_string(getpid()));
  fs::create_directories(base / "rw");
  fs::create_directories(base / "other");
  std::ofstream(base / "other" / "secret") << "x";
  landlock_paths paths;
  paths.read_exec = system_read_paths();
  paths.read_write = {(base / "rw").string()};
  auto rules = prepare_landlock(paths);
  if (!rules) {
    MESSAGE("SKIPPED: ", rules.message());
    fs::remove_all(base);
    return;
  }
  std::string rw = (base / "rw" / "f").string(), secret = (base / "other" / "secret").string(),
              other = (base / "other" / "new").string();
  int code = in_child([&] {
    if (enforce_landlock(*rules) != 0) return 64;
    int bad = 0;
    int fd = open(rw.c_str(), O_WRONLY | O_CREAT, 0600);
    if (fd < 0)
      bad |= 1;
    else
      close(fd);
    if (open(secret.c_str(), O_RDONLY) >= 0) bad |= 2;
    if (open(other.c_str(), O_WRONLY | O_CREAT, 0600) >= 0) bad |= 4;
    if (open("/etc/passwd", O_RDONLY) >= 0) bad |= 8;
    if (open("/usr/include/stdio.h", O_RDONLY) < 0 && fs::exists("/usr/include/stdio.h")) bad |= 16;
    return bad;
  });
  CHECK_MESSAGE(code == 0, "bits: ", code, " (landlock abi ", rules->abi(), ")");
  fs::remove_all(base);
}
