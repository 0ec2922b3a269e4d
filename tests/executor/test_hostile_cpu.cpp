// The hostile corpus, cpu: free-form kernels that try to win without computing, each pinned to
// its outcome and followed by an honest job on the same executor. Where a defence is a sandbox
// layer, a control run with that layer off shows the attack is real (it succeeds there).
// Attack classes: docs/DESIGN.md, "Threat model".
#include "tests/executor/executor_fixture.hpp"
#include "tests/support/loopback_listener.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cstdlib>
#include <dirent.h>
#include <doctest/doctest.h>
#include <fstream>
#include <limits>
#include <netinet/in.h>
#include <random>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

using namespace kiln;
using namespace kiln::test;

namespace {

// A compute-bound task where a remembered answer would be ~100x faster than computing: the
// naive kernel below does 192^3 multiply-adds per call.
const char* kMatmul = R"(
name = "mm"
level = 1
dtype = "float32"
outputs = ["y"]
[tolerance]
atol = 1e-3
rtol = 1e-3
[[inputs]]
name = "a"
shape = [192, 192]
init = "normal"
[[params]]
name = "w"
shape = [192, 192]
init = "normal"
[[ops]]
out = "y"
op = "matmul"
args = ["a", "w"]
)";

task matmul_task() {
  auto t = task_from_toml(kMatmul, "mm.toml");
  REQUIRE(t.has_value());
  return *t;
}

// `lookup` may return early with y filled from a cache; `store` runs after computing.
std::string matmul_kernel(const std::string& globals = "", const std::string& lookup = "",
                          const std::string& store = "") {
  return R"(#include "kiln_abi.h"
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#define N 192
)" + globals +
         R"(
extern "C" int kiln_run(const kiln_host* host, const void* const* in, const void* const* par, void* const* out) {
  const float* a = (const float*)in[0];
  const float* w = (const float*)par[0];
  float* y = (float*)out[0];
)" + lookup +
         R"(
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < N; ++j) {
      float s = 0;
      for (int k = 0; k < N; ++k) s += a[i * N + k] * w[k * N + j];
      y[i * N + j] = s;
    }
)" + store +
         R"(
  return 0;
}
)";
}

job matmul_job(job_kind kind, const artifact_ref& a) {
  job j = make_job(kind, a);
  j.spec = matmul_task();
  j.timing.time_cap_ms = 300;
  return j;
}

// Parent pid and name of a live process; false for zombies and processes already gone.
bool read_stat(int pid, int& ppid, std::string& comm) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(f, stat);
  auto open = stat.find('('), close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 4 >= stat.size())
    return false;
  comm = stat.substr(open + 1, close - open - 1);
  ppid = std::atoi(stat.c_str() + close + 4);
  return stat[close + 2] != 'Z';
}

bool descends_from_us(int pid) {
  std::string comm;
  for (int hops = 0; pid > 1 && hops < 64; ++hops) {
    if (pid == getpid()) return true;
    int ppid = 0;
    if (!read_stat(pid, ppid, comm)) return false;
    pid = ppid;
  }
  return false;
}

// Live processes named `comm`; with `ours_only`, only this test's descendants (ctest runs other
// tests, with their own kernel hosts, at the same time).
int processes_named(const std::string& comm, bool ours_only = false) {
  int n = 0;
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      int pid = std::atoi(e->d_name), ppid = 0;
      std::string name;
      if (!read_stat(pid, ppid, name) || name != comm) continue;
      if (!ours_only || descends_from_us(pid)) ++n;
    }
    closedir(d);
  }
  return n;
}

void kill_named(const std::string& comm) {
  std::string cmd = "pkill -9 -x " + comm + " > /dev/null 2>&1";
  (void)std::system(cmd.c_str());
}

// Every layer off: the judge's network namespace and landlock, the kernel host's landlock and
// seccomp. What an attack achieves here, the real configuration must prevent.
executor_options unsandboxed() {
  auto o = test_options();
  o.isolate_network = false;
  o.restrict_fs = false;
  o.kernel_landlock = false;
  o.kernel_seccomp = false;
  return o;
}

// A file no kernel may read: random content, readable by everyone, in a folder anyone may write
// (so the sandbox, not file permissions, is what stops a kernel).
struct canary {
  std::string token, dir, path;
  canary() {
    std::mt19937_64 rng(std::random_device{}());
    char buf[40];
    std::snprintf(buf, sizeof buf, "KILNCANARY%016llx", static_cast<unsigned long long>(rng()));
    token = buf;
    dir = (fs::temp_directory_path() / ("kiln_canary_" + std::to_string(getpid()))).string();
    fs::create_directories(dir);
    fs::permissions(dir, fs::perms::all); // anyone may write here: only the sandbox stops it
    path = dir + "/secret.txt";
    std::ofstream(path) << token << "\n";
    fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                              fs::perms::others_read);
  }
  ~canary() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

const canary& the_canary() {
  static canary c;
  return c;
}

outcome run_logged(executor_client& c, const job& j) {
  auto o = c.run(j);
  // Whatever else happens, no outcome may carry the canary.
  CHECK(o.message.find(the_canary().token) == std::string::npos);
  return o;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

} // namespace

TEST_CASE("result cache by content: every call sees new content, so no cache ever hits") {
  auto& c = shared_client();
  const auto honest_kernel = compile(matmul_kernel());
  // The honest kernel's time, re-measured beside each cache kernel: other tests share the cores,
  // and load only ever adds time, so the fastest honest median is the fair yardstick.
  double honest_ms = std::numeric_limits<double>::infinity();
  auto time_honest = [&] {
    auto honest = run_logged(c, matmul_job(job_kind::evaluate, honest_kernel));
    REQUIRE_MESSAGE(honest.kind == outcome_kind::correct, describe(honest));
    honest_ms = std::min(honest_ms, honest.time->median_ms);
  };
  time_honest();
  // Full-content hash and a strided-sample hash; on a hit the remembered output is copied.
  const std::string globals = R"(
static uint64_t keys[64]; static float* vals[64]; static int used;
static uint64_t key_of(const float* a, int stride) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < N * N; i += stride) { uint32_t v; memcpy(&v, &a[i], 4); h = (h ^ v) * 1099511628211ull; }
  return h;
})";
  for (int stride : {1, 97}) {
    std::string s = std::to_string(stride);
    auto cache = compile(
        matmul_kernel(globals,
                      "  uint64_t k = key_of(a, " + s +
                          ");\n  for (int i = 0; i < used; ++i) if (keys[i] == k) { memcpy(y, "
                          "vals[i], N * N * 4); "
                          "return 0; }",
                      "  if (used < 64) { keys[used] = k; vals[used] = (float*)malloc(N * N * 4); "
                      "memcpy(vals[used++], y, N * N * 4); }"));
    auto o = run_logged(c, matmul_job(job_kind::evaluate, cache));
    REQUIRE_MESSAGE(o.kind == outcome_kind::correct, describe(o));
    time_honest();
    // A hit is ~100x faster than computing; never hitting, the cache kernel is as slow as honest.
    CHECK_MESSAGE(o.time->median_ms > 0.6 * honest_ms, "cache kernel ", o.time->median_ms,
                  " ms vs honest ", honest_ms);
    MESSAGE("stride ", stride, ": cache kernel ", o.time->median_ms, " ms, honest ", honest_ms,
            " ms, ", o.time->checked, " trials checked");
  }
  still_serves(c);
}

TEST_CASE("lazy trials: garbage on trials it guesses are unchecked is caught after timing") {
  auto& c = shared_client();
  // Honest on the verification calls (the first five), then lazy except on every 40th call (a
  // guess at the stop rule); and a kernel lazy on a random 60% of its timed calls.
  for (const char* rule : {"calls > 5 && calls % 40 != 0", "calls > 5 && rand() % 10 < 6"}) {
    auto lazy = compile(matmul_kernel("static int calls;",
                                      std::string("  ++calls;\n  if (") + rule + ") return 0;"));
    auto o = run_logged(c, matmul_job(job_kind::evaluate, lazy));
    CHECK_MESSAGE(o.kind == outcome_kind::wrong, rule, ": ", describe(o));
    CHECK_MESSAGE(o.message.find("checked after timing") != std::string::npos, o.message);
  }
  still_serves(c);
}

TEST_CASE("reference in memory: the kernel's process holds no reference to find") {
  auto& c = shared_client();
  // Computes y[0] and y[1], then scans every readable page within 1 GiB of its buffers, heap and
  // stack for that pair (outside y) and copies what follows; faults are skipped page by page.
  auto scan = compile(kernel(R"(
  { float y0 = x[0] + b[0]; y0 = y0 > 0 ? y0 : 0; float y1 = x[1] + b[1]; y1 = y1 > 0 ? y1 : 0;
    struct sigaction sa; memset(&sa, 0, sizeof sa); sa.sa_handler = on_fault; sa.sa_flags = SA_NODEFER;
    sigaction(SIGSEGV, &sa, 0); sigaction(SIGBUS, &sa, 0);
    const char* anchors[4] = {(const char*)x, (const char*)y, (const char*)sbrk(0), (const char*)&y0};
    for (int a = 0; a < 4; ++a)
      for (long off = -(1l << 30); off < (1l << 30); off += 4096) {
        const float* p = (const float*)(((uintptr_t)anchors[a] + off) & ~(uintptr_t)4095);
        if (p >= y - 2 && p < y + n) continue;
        if (sigsetjmp(jb, 1)) continue;
        for (int i = 0; i + 1 < 1024; ++i)
          if (p[i] == y0 && p[i + 1] == y1 && y0 != 0 && (p + i < y || p + i >= y + n)) {
            memcpy(y, p + i, n * 4); return 0; }
      }
    return 0; })",
                             "",
                             "#include <setjmp.h>\n#include <signal.h>\nstatic sigjmp_buf jb;\n"
                             "static void on_fault(int) { siglongjmp(jb, 1); }\n"));
  auto o = run_logged(c, make_job(job_kind::verify, scan, 60));
  CHECK_MESSAGE(o.kind == outcome_kind::wrong, describe(o));
  still_serves(c);
}

TEST_CASE("verifier patch: no executable memory can be made after load, nothing to patch") {
  // mprotect of its own code to RWX (the step before patching code) succeeds only unsandboxed;
  // /proc/self/exe (where the old executor's comparison lived) is unreadable too.
  auto patch = compile(kernel(R"(
  { uintptr_t page = (uintptr_t)(void*)&kiln_run & ~(uintptr_t)4095;
    if (mprotect((void*)page, 4096, PROT_READ | PROT_WRITE | PROT_EXEC) == 0) return 5;
    if (open("/proc/self/exe", O_RDONLY) >= 0) return 6; })",
                              "",
                              "#include <fcntl.h>\n#include <sys/mman.h>\n"
                              "extern \"C\" int kiln_run(const kiln_host*, const void* const*, "
                              "const void* const*, void* const*);\n"));
  executor_client open_one(unsandboxed());
  auto ctl = open_one.run(make_job(job_kind::verify, patch));
  CHECK_MESSAGE(ctl.kind == outcome_kind::runtime_error, describe(ctl));
  open_one.stop();
  auto& c = shared_client();
  auto o = run_logged(c, make_job(job_kind::verify, patch));
  CHECK_MESSAGE(o.kind == outcome_kind::correct, describe(o));
  still_serves(c);
}

TEST_CASE("forged verdict: a reply written by the kernel on its channel is not believed") {
  auto& c = shared_client();
  // A well-formed reply record ("correct") written to fd 3 before computing: its sequence number
  // cannot be guessed, and the genuine reply that follows is one nobody asked for.
  auto forge = compile(kernel(R"(
  { struct { uint32_t magic, version, op; int32_t code; uint64_t seq; int64_t pid, uid;
             int32_t ll, sc; double stream, residual; char text[240]; } r;
    memset(&r, 0, sizeof r); r.magic = 0x484e4c4b; r.version = 1; r.op = 5; r.seq = 1;
    for (uint64_t s = 0; s < 64; ++s) { r.seq = s; if (send(3, &r, sizeof r, MSG_NOSIGNAL) < 0) break; } })"));
  auto o = run_logged(c, make_job(job_kind::evaluate, forge));
  CHECK(o.kind == outcome_kind::runtime_error);
  CHECK_MESSAGE(o.message.find("broke the protocol") != std::string::npos, o.message);
  still_serves(c);
}

// Returns at once and finishes y in a thread; computes inline if the thread cannot start.
static std::string late_source(int rows) {
  return kernel(R"(
  { static const float* gx; static const float* gb; static float* gy;
    gx = x; gb = b; gy = y;
    pthread_t t;
    if (pthread_create(&t, 0, [](void*) -> void* {
          for (int64_t k = 0; k < ROWS * 1024; ++k) { float v = gx[k] + gb[k % 1024]; gy[k] = v > 0 ? v : 0; }
          return 0; }, 0) == 0) { pthread_detach(t); return 0; } })",
                "", "#include <pthread.h>\n", rows);
}

TEST_CASE("work after return: no thread can be made, and unsandboxed the late work is seen") {
  auto late = compile(late_source(256));
  executor_client open_one(unsandboxed());
  auto big = make_job(job_kind::evaluate, late);
  big.spec = the_task(2048); // milliseconds of late work: far beyond the idle allowance
  big.artifact = compile(late_source(2048));
  auto ctl = open_one.run(big);
  // Unsandboxed the thread starts: its work lands outside the call, on the host's CPU clock.
  CHECK_MESSAGE(ctl.kind != outcome_kind::correct, describe(ctl));
  MESSAGE("unsandboxed late work: ", describe(ctl));
  open_one.stop();
  auto& c = shared_client();
  auto o = run_logged(c, big);
  CHECK_MESSAGE(o.kind == outcome_kind::correct, describe(o));
  still_serves(c);
}

TEST_CASE("interference: no process outlives its job (setsid double fork)") {
  kill_named("kiln-orphan");
  // The grandchild renames itself, leaves the session and burns CPU forever.
  auto fork_bomb = compile(kernel(R"(
  { pid_t p = fork();
    if (p == 0) { if (fork() == 0) { setsid(); prctl(PR_SET_NAME, "kiln-orphan"); for (;;) {} } _exit(0); }
    if (p > 0) waitpid(p, 0, 0); })",
                                  "", "#include <sys/prctl.h>\n#include <sys/wait.h>\n"));
  executor_client open_one(unsandboxed());
  auto ctl = open_one.run(make_job(job_kind::verify, fork_bomb));
  usleep(200000);
  int orphans = processes_named("kiln-orphan");
  if (!cgroup2_root().empty()) {
    // Unsandboxed the fork works, but the kernel host's cgroup still ends the orphan.
    CHECK_MESSAGE(ctl.kind == outcome_kind::runtime_error, describe(ctl));
    CHECK_MESSAGE(ctl.message.find("outlived its job") != std::string::npos, ctl.message);
    CHECK(orphans == 0);
  } else {
    MESSAGE("no writable cgroup2 here: the unsandboxed orphan survives (", orphans, ")");
  }
  kill_named("kiln-orphan");
  open_one.stop();

  auto& c = shared_client();
  auto o = run_logged(c, make_job(job_kind::verify, fork_bomb));
  CHECK_MESSAGE(o.kind == outcome_kind::correct, describe(o)); // fork failed; it computed
  usleep(200000);
  CHECK(processes_named("kiln-orphan") == 0);
  // The job's kernel host is gone; only the spare for the next job is alive.
  CHECK(processes_named("kiln-kernel-hos", true) <= 1); // comm keeps 15 characters
  still_serves(c);
}

TEST_CASE("leaks: files, sockets and the network are out of reach, no outcome carries a secret") {
  const auto& k = the_canary();
  // Reads the canary; returns its first byte (a channel) when it can.
  auto reader = compile(kernel(R"(
  { FILE* f = fopen(")" + k.path + R"(", "r");
    if (f) { int ch = fgetc(f); fclose(f); return ch; }
    DIR* d = opendir(")" + cache_dir() +
                                   R"(");
    if (d) { closedir(d); return 3; } })",
                               "", "#include <dirent.h>\n"));
  // A unix socket of the host's, and TCP on loopback.
  std::string sock_path = k.dir + "/host.sock";
  int us = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un ua{};
  ua.sun_family = AF_UNIX;
  std::snprintf(ua.sun_path, sizeof ua.sun_path, "%s", sock_path.c_str());
  REQUIRE(bind(us, (sockaddr*)&ua, sizeof ua) == 0);
  REQUIRE(listen(us, 4) == 0);
  chmod(sock_path.c_str(), 0777);
  auto [ts, ts_port] = test::listen_on_loopback();
  auto dialer = compile(kernel(R"(
  { int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s >= 0) { struct sockaddr_un a; memset(&a, 0, sizeof a); a.sun_family = AF_UNIX;
      strcpy(a.sun_path, ")" + sock_path +
                                   R"(");
      if (connect(s, (struct sockaddr*)&a, sizeof a) == 0) return 7; close(s); }
    int t = socket(AF_INET, SOCK_STREAM, 0);
    if (t >= 0) { struct sockaddr_in a; memset(&a, 0, sizeof a); a.sin_family = AF_INET;
      a.sin_port = htons()" + std::to_string(ts_port) +
                                   R"(); a.sin_addr.s_addr = htonl(0x7f000001);
      if (connect(t, (struct sockaddr*)&a, sizeof a) == 0) return 8; close(t); } })",
                               "", "#include <sys/un.h>\n"));
  // Writes outside its scratch directory.
  auto outside = fs::path(k.dir) / "escaped.txt";
  auto writer = compile(kernel(R"(
  { FILE* f = fopen("inside.txt", "w"); if (!f) return 11; fputs("ok", f); fclose(f);
    FILE* g = fopen(")" + outside.string() +
                               R"(", "w"); if (g) { fclose(g); return 9; } })"));

  executor_client open_one(unsandboxed());
  for (const auto* a : {&reader, &dialer, &writer}) {
    auto ctl = open_one.run(make_job(job_kind::verify, *a));
    CHECK_MESSAGE(ctl.kind == outcome_kind::runtime_error, describe(ctl)); // the attack works
    CHECK(ctl.message.find(k.token) == std::string::npos); // and still reports no value
  }
  open_one.stop();
  fs::remove(outside);

  auto& c = shared_client();
  for (const auto* a : {&reader, &dialer, &writer}) {
    auto o = run_logged(c, make_job(job_kind::verify, *a));
    CHECK_MESSAGE(o.kind == outcome_kind::correct, describe(o));
  }
  CHECK_FALSE(fs::exists(outside));
  close(us);
  close(ts);
  still_serves(c);
}

TEST_CASE("leaks through the compiler: #include and .incbin of a secret fail, quoting nothing") {
  const auto& k = the_canary();
  cpu_compile_options o;
  o.cache_dir = cache_dir();
  o.include_dir = std::string(KILN_SOURCE_DIR) + "/skills";
  std::string inc = "#include \"" + k.path + "\"\nint x;\n";
  std::string bin =
      "__asm__(\".section .rodata\\n.incbin \\\"" + k.path + "\\\"\\n.text\");\nint y;\n";
  for (const auto& src : {inc, bin}) {
    auto open = o;
    open.sandbox = false;
    auto ctl = compile_cpu(src + "// control\n", open);
    bool leaked = !ctl ? ctl.message().find(k.token) != std::string::npos
                       : read_all(ctl->so_path).find(k.token) != std::string::npos;
    CHECK_MESSAGE(leaked, "the control compile should carry the secret: ", ctl.message());
    auto a = compile_cpu(src, o);
    REQUIRE_FALSE(a.has_value());
    CHECK_MESSAGE(a.message().find(k.token) == std::string::npos, a.message());
  }
}
