// The hostile corpus through a real executor process: each program gets the right outcome and the
// same client keeps serving afterwards.
#include "gpu_pool/executor_client.hpp"

#include "data/task_parse.hpp"
#include "gpu_pool/cpu_compiler.hpp"
#include "tests/data/sample_tasks.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cmath>
#include <doctest/doctest.h>
#include <filesystem>
#include <netinet/in.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

using namespace kiln;
namespace fs = std::filesystem;

namespace {

const char* kTask = test::kAddRelu;

// `prologue` runs first (may return), then the correct loop unless `body` replaces it.
std::string kernel(const std::string& prologue, const std::string& body = "",
                   const std::string& globals = "", int rows = 256) {
  std::string loop = R"(
  for (int64_t i = 0; i < ROWS; ++i)
    for (int64_t j = 0; j < 1024; ++j) {
      float v = x[i * 1024 + j] + b[j];
      y[i * 1024 + j] = v > 0 ? v : 0;
    })";
  return R"(#include "kiln_abi.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#define ROWS )" +
         std::to_string(rows) + "\n" + globals + R"(
extern "C" int kiln_run(const kiln_host* host, const void* const* in, const void* const* par, void* const* out) {
  const float* x = (const float*)in[0];
  const float* b = (const float*)par[0];
  float* y = (float*)out[0];
  const int64_t n = ROWS * 1024;
  (void)n;
)" + prologue +
         (body.empty() ? loop : body) + R"(
  return 0;
}
)";
}

std::string cache_dir() {
  static std::string d = [] {
    auto p = fs::temp_directory_path() / "kiln_gpu_pool_tests_cache";
    fs::create_directories(p);
    return p.string();
  }();
  return d;
}

artifact_ref compile(const std::string& source) {
  cpu_compile_options o;
  o.cache_dir = cache_dir();
  o.include_dir = std::string(KILN_SOURCE_DIR) + "/skills";
  auto a = compile_cpu(source, o);
  REQUIRE_MESSAGE(a.has_value(), (a ? "" : a.message()));
  return {"cpu", a->so_path, a->key, a->compile_ms};
}

task the_task(int rows = 256) {
  std::string text = kTask;
  text.replace(text.find("[256, 1024]"), 11, "[" + std::to_string(rows) + ", 1024]");
  auto t = task_from_toml(text, "add_relu.toml");
  REQUIRE(t.has_value());
  return *t;
}

job make_job(job_kind kind, const artifact_ref& a, double timeout_s = 30) {
  static uint64_t next_id = 1;
  job j;
  j.id = next_id++;
  j.kind = kind;
  j.spec = the_task();
  j.artifact = a;
  j.timeout_s = timeout_s;
  j.timing.time_cap_ms = 150;
  j.timing.max_trials = 50;
  j.timing.flush_bytes = 8 << 20; // keep the suite fast; the default 64 MiB is for real timing
  return j;
}

// A private copy of the kiln binary: on a shared build machine other builds relink build/kiln while
// tests run (exec then fails with EACCES / ETXTBSY). Copied once it has been stable for a second.
std::string kiln_copy() {
  static std::string path = [] {
    fs::path src = KILN_BINARY;
    fs::path dst = fs::path(cache_dir()) / ("kiln." + std::to_string(getpid()));
    for (int i = 0; i < 600; ++i) {
      std::error_code ec;
      auto t = fs::last_write_time(src, ec);
      auto age = fs::file_time_type::clock::now() - t;
      if (!ec && access(src.c_str(), X_OK) == 0 && age > std::chrono::seconds(1)) {
        auto size = fs::file_size(src, ec);
        fs::copy_file(src, dst, fs::copy_options::overwrite_existing, ec);
        if (!ec && fs::last_write_time(src) == t && fs::file_size(dst) == size) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    static struct remover {
      fs::path p;
      ~remover() {
        std::error_code ec;
        fs::remove(p, ec);
      }
    } r{dst};
    return dst.string();
  }();
  return path;
}

executor_options test_options() {
  executor_options o;
  o.kiln_path = kiln_copy();
  o.threads = 1;
  return o;
}

std::string describe(const outcome& o) { return std::string(to_string(o.kind)) + ": " + o.message; }

const artifact_ref& good_kernel() {
  static artifact_ref a = compile(kernel(""));
  return a;
}

// The same client must still serve a correct kernel.
void still_serves(executor_client& c) {
  auto o = c.run(make_job(job_kind::verify, good_kernel()));
  CHECK_MESSAGE(o.kind == outcome_kind::correct, describe(o));
}

executor_client& shared_client() {
  static executor_client c(test_options());
  return c;
}

} // namespace

TEST_CASE("a correct kernel verifies, times, and evaluates, baseline times the reference") {
  auto& c = shared_client();
  auto v = c.run(make_job(job_kind::verify, good_kernel()));
  CHECK_MESSAGE(v.kind == outcome_kind::correct, describe(v));
  CHECK(v.device_ms > 0);
  CHECK(v.compile_ms == good_kernel().compile_ms);
  REQUIRE(c.hello().has_value());
  MESSAGE("executor: pid ", c.hello()->pid, " uid ", c.hello()->uid, " net isolated ",
          c.hello()->net_isolated, " fs restricted ", c.hello()->fs_restricted, " start ",
          c.stats().last_start_ms, " ms; warnings: ", c.hello()->warnings);

  auto e = c.run(make_job(job_kind::evaluate, good_kernel()));
  CHECK_MESSAGE(e.kind == outcome_kind::correct, describe(e));
  REQUIRE(e.time.has_value());
  CHECK(e.time->median_ms > 0);
  CHECK(e.time->trials >= 5);

  auto b = c.run(make_job(job_kind::baseline, {}));
  CHECK_MESSAGE(b.kind == outcome_kind::correct, describe(b));
  REQUIRE(b.time.has_value());
  CHECK(b.time->median_ms > 0);
  MESSAGE("kernel ", e.time->median_ms, " ms (cv ", e.time->cv, ", ", e.time->trials,
          " trials); eager ", b.time->median_ms, " ms (cv ", b.time->cv, ")");
}

TEST_CASE("timings beyond the bandwidth roofline are re-verified and flagged") {
  auto& c = shared_client();
  auto real = make_job(job_kind::evaluate, good_kernel());
  real.timing.flush_bytes = timing_options{}.flush_bytes; // the tests' small flush leaves the
                                                          // inputs in cache: beyond the roofline
  auto honest = c.run(real);
  REQUIRE_MESSAGE(honest.kind == outcome_kind::correct, describe(honest));
  REQUIRE(honest.time.has_value());
  CHECK(honest.time->roofline_ms > 0); // the executor measured its bandwidth
  CHECK_FALSE(honest.time->beyond_roofline);
  MESSAGE("add_relu ", honest.time->median_ms, " ms; roofline ", honest.time->roofline_ms, " ms");

  // Claim the machine moves 1 MB/s: every kernel is then "too fast", so it is re-verified on
  // fresh inputs, stays correct, and carries the flag.
  auto j = make_job(job_kind::evaluate, good_kernel());
  j.timing.roofline_gbps = 0.001;
  auto fast = c.run(j);
  CHECK_MESSAGE(fast.kind == outcome_kind::correct, describe(fast));
  REQUIRE(fast.time.has_value());
  CHECK(fast.time->beyond_roofline);
  CHECK(fast.message.find("beyond the bandwidth roofline") != std::string::npos);
}

TEST_CASE("segfault: runtime_error naming the signal, the next job succeeds") {
  auto& c = shared_client();
  auto o = c.run(make_job(job_kind::verify, compile(kernel("*(volatile int*)0 = 1;"))));
  CHECK(o.kind == outcome_kind::runtime_error);
  CHECK_MESSAGE(o.message == "executor died: signal 11 (SIGSEGV)", o.message);
  still_serves(c);
  MESSAGE("recover after crash: kill ", c.stats().last_kill_ms, " ms + restart ",
          c.stats().last_start_ms, " ms = ", c.stats().last_recover_ms, " ms");
  CHECK(c.stats().last_recover_ms > 0);
}

TEST_CASE("abort and a non-zero return are runtime errors") {
  auto& c = shared_client();
  auto a = c.run(make_job(job_kind::verify, compile(kernel("abort();"))));
  CHECK(a.kind == outcome_kind::runtime_error);
  CHECK(a.message == "executor died: signal 6 (SIGABRT)");
  auto r = c.run(make_job(job_kind::verify, compile(kernel("return 3;"))));
  CHECK(r.kind == outcome_kind::runtime_error);
  CHECK_MESSAGE(r.message.find("kiln_run returned 3") != std::string::npos, r.message);
  still_serves(c);
}

TEST_CASE("infinite loop: timeout, the next job succeeds") {
  auto& c = shared_client();
  auto j =
      make_job(job_kind::verify, compile(kernel("volatile int spin = 1; while (spin) {}")), 1.0);
  auto o = c.run(j);
  CHECK(o.kind == outcome_kind::timeout);
  CHECK_MESSAGE(o.message.find("no result within 1 s") != std::string::npos, o.message);
  still_serves(c);
}

TEST_CASE("out-of-bounds writes: large -> crash, small -> guard zone, both runtime_error") {
  auto& c = shared_client();
  auto big = c.run(make_job(
      job_kind::verify,
      compile(kernel("for (int64_t i = 0; i < (int64_t(1) << 32); i += 4096) y[n + i] = 1;"))));
  CHECK_MESSAGE((big.kind == outcome_kind::runtime_error || big.kind == outcome_kind::wrong),
                describe(big));
  MESSAGE("large out-of-bounds write: ", describe(big));
  auto small = c.run(make_job(job_kind::verify, compile(kernel("y[n + 3] = 1;"))));
  CHECK(small.kind == outcome_kind::runtime_error);
  CHECK_MESSAGE(small.message == "out-of-bounds write: guard zone around output 'y' overwritten",
                small.message);
  CHECK(small.retire); // the executor was replaced
  auto under = c.run(make_job(job_kind::verify, compile(kernel("((float*)in[0])[-2] = 1;"))));
  CHECK(under.kind == outcome_kind::runtime_error);
  CHECK(under.message == "out-of-bounds write: guard zone around input 'x' overwritten");
  still_serves(c);
}

TEST_CASE("huge allocation: malloc 1 TB and touch -> runtime_error") {
  auto& c = shared_client();
  auto o = c.run(
      make_job(job_kind::verify,
               compile(kernel("char* p = (char*)malloc(size_t(1) << 40);"
                              "for (size_t i = 0; i < (size_t(1) << 40); i += 4096) p[i] = 1;"))));
  CHECK_MESSAGE(o.kind == outcome_kind::runtime_error, describe(o));
  MESSAGE("huge allocation: ", describe(o));
  still_serves(c);
}

TEST_CASE("input or param mutation -> input_mutated") {
  auto& c = shared_client();
  auto o = c.run(make_job(job_kind::verify, compile(kernel("((float*)in[0])[5] = 42.0f;"))));
  CHECK_MESSAGE(o.kind == outcome_kind::input_mutated, describe(o));
  CHECK(o.message == "the kernel wrote into input 'x'");
  auto p = c.run(make_job(job_kind::verify, compile(kernel("((float*)par[0])[0] = 0.0f;"))));
  CHECK_MESSAGE(p.kind == outcome_kind::input_mutated, describe(p));
  still_serves(c);
}

TEST_CASE("outputs not written -> wrong (NaN poison)") {
  auto& c = shared_client();
  auto o = c.run(make_job(job_kind::verify, compile(kernel("", "/* nothing */"))));
  CHECK_MESSAGE(o.kind == outcome_kind::wrong, describe(o));
  REQUIRE(o.error.has_value());
  CHECK(o.error->first_bad_index == 0);
  CHECK(o.error->bad_count == 256 * 1024);
  CHECK(o.error->check == 0);
  // Half written: the unwritten half is caught.
  auto h = c.run(make_job(job_kind::verify, compile(kernel("", R"(
  for (int64_t k = 0; k < n / 2; ++k) { float v = x[k] + b[k % 1024]; y[k] = v > 0 ? v : 0; })"))));
  CHECK_MESSAGE(h.kind == outcome_kind::wrong, describe(h));
  REQUIRE(h.error.has_value());
  CHECK(h.error->first_bad_index == 256 * 1024 / 2);
}

TEST_CASE("constant output -> wrong") {
  auto& c = shared_client();
  auto o = c.run(make_job(job_kind::verify,
                          compile(kernel("", "for (int64_t k = 0; k < n; ++k) y[k] = 0.5f;"))));
  CHECK_MESSAGE(o.kind == outcome_kind::wrong, describe(o));
  REQUIRE(o.error.has_value());
  CHECK(o.error->max_abs_err > 0.1);
}

TEST_CASE("a counter across calls -> nondeterministic") {
  auto& c = shared_client();
  auto o = c.run(make_job(job_kind::verify, compile(kernel("", R"(
  for (int64_t i = 0; i < 256; ++i)
    for (int64_t j = 0; j < 1024; ++j) { float v = x[i * 1024 + j] + b[j]; y[i * 1024 + j] = v > 0 ? v : 0; }
  if (calls++ % 2 == 1) y[100] += 1.0f;)",
                                                           "static int calls = 0;"))));
  CHECK_MESSAGE(o.kind == outcome_kind::nondeterministic, describe(o));
  REQUIRE(o.error.has_value());
  CHECK(o.error->first_bad_index == 100);
}

TEST_CASE("caching results by input pointer is caught by the timing check") {
  auto& c = shared_client();
  auto src = kernel(R"(
  if (in[0] == last_in) { memcpy(y, cache, sizeof cache); return 0; }
  last_in = in[0];)",
                    R"(
  for (int64_t k = 0; k < n; ++k) { float v = x[k] + b[k % 1024]; y[k] = v > 0 ? v : 0; }
  memcpy(cache, y, sizeof cache);)",
                    "static const void* last_in = 0; static float cache[256 * 1024];");
  auto o = c.run(make_job(job_kind::evaluate, compile(src)));
  CHECK_MESSAGE(o.kind != outcome_kind::correct, describe(o));
  MESSAGE("pointer cache: ", describe(o));
}

TEST_CASE("network connect to 127.0.0.1 fails inside the executor") {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(ls >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  REQUIRE(bind(ls, (sockaddr*)&addr, sizeof addr) == 0);
  REQUIRE(listen(ls, 4) == 0);
  REQUIRE(getsockname(ls, (sockaddr*)&addr, &len) == 0);
  int port = ntohs(addr.sin_port);
  // Returns 7 when the connection succeeds; computes the right answer when it is refused.
  auto src = kernel(R"(
  { int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s >= 0) {
      struct sockaddr_in a; memset(&a, 0, sizeof a);
      a.sin_family = AF_INET; a.sin_port = htons()" +
                    std::to_string(port) + R"(); a.sin_addr.s_addr = htonl(0x7f000001);
      int r = connect(s, (struct sockaddr*)&a, sizeof a);
      close(s);
      if (r == 0) return 7;
    } })");
  auto art = compile(src);

  // Control: without the sandbox the connection works, so the test is meaningful.
  auto ctl_opts = test_options();
  ctl_opts.isolate_network = false;
  ctl_opts.restrict_fs = false;
  executor_client ctl(ctl_opts);
  auto ctl_o = ctl.run(make_job(job_kind::verify, art));
  CHECK_MESSAGE(ctl_o.kind == outcome_kind::runtime_error, describe(ctl_o));
  ctl.stop();

  auto& c = shared_client();
  REQUIRE(c.start().has_value());
  REQUIRE(c.hello().has_value());
  if (!c.hello()->net_isolated && !c.hello()->fs_restricted) {
    MESSAGE("SKIPPED: no network namespace and no landlock here: ", c.hello()->warnings);
  } else {
    auto o = c.run(make_job(job_kind::verify, art));
    CHECK_MESSAGE(o.kind == outcome_kind::correct, describe(o));
  }
  close(ls);
}

TEST_CASE("file writes outside the scratch directory fail, inside it they work") {
  auto outside = fs::temp_directory_path() / ("kiln_escape_" + std::to_string(getpid()));
  fs::remove(outside);
  auto src = kernel(R"(
  { FILE* f = fopen("inside.txt", "w");
    if (!f) return 11;
    fputs("ok", f); fclose(f);
    FILE* g = fopen(")" +
                    outside.string() + R"(", "w");
    if (g) { fputs("escaped", g); fclose(g); return 9; } })");
  auto art = compile(src);
  // Control: without landlock the write succeeds (we run as root here), so the test is meaningful.
  auto ctl_opts = test_options();
  ctl_opts.restrict_fs = false;
  executor_client ctl(ctl_opts);
  auto ctl_o = ctl.run(make_job(job_kind::verify, art));
  CHECK_MESSAGE(ctl_o.kind == outcome_kind::runtime_error, describe(ctl_o));
  ctl.stop();
  fs::remove(outside);

  auto& c = shared_client();
  REQUIRE(c.start().has_value());
  if (!c.hello()->fs_restricted) {
    MESSAGE("SKIPPED: landlock unavailable here: ", c.hello()->warnings);
  } else {
    auto o = c.run(make_job(job_kind::verify, art));
    CHECK_MESSAGE(o.kind == outcome_kind::correct, describe(o));
    CHECK_FALSE(fs::exists(outside));
  }
  fs::remove(outside);
}

TEST_CASE("signals to processes outside the executor are refused") {
  auto& c = shared_client();
  REQUIRE(c.start().has_value());
  if (c.hello()->landlock_abi < 6) {
    MESSAGE("SKIPPED: landlock ABI ", c.hello()->landlock_abi, " has no signal scoping");
    return;
  }
  // Signal 0 only checks permission: harmless to the test process if the check were to pass.
  auto o = c.run(make_job(job_kind::verify, compile(kernel("if (kill(getppid(), 0) == 0) return 5;",
                                                           "", "#include <signal.h>\n"))));
  CHECK_MESSAGE(o.kind == outcome_kind::correct, describe(o));
}

TEST_CASE("a forged outcome frame written by the kernel is not believed") {
  auto& c = shared_client();
  auto j = make_job(job_kind::verify, good_kernel());
  outcome forged = make_outcome(j, outcome_kind::correct, "forged");
  std::string frame = encode(forged);
  uint32_t len = static_cast<uint32_t>(frame.size());
  frame = std::string{char(len & 0xff), char((len >> 8) & 0xff), char((len >> 16) & 0xff),
                      char(len >> 24)} +
          frame;
  std::string bytes;
  for (unsigned char ch : frame) bytes += std::to_string(ch) + ",";
  j.artifact = compile(kernel("{ static const unsigned char f[] = {" + bytes +
                              "};\n"
                              "  if (write(3, f, sizeof f) != (ssize_t)sizeof f) return 1;\n"
                              "  volatile int spin = 1; while (spin) {} }"));
  j.timeout_s = 5;
  auto o = c.run(j);
  CHECK(o.kind == outcome_kind::runtime_error);
  CHECK_MESSAGE(o.message.find("wrong nonce") != std::string::npos, o.message);
  still_serves(c);
}

TEST_CASE("dropping to nobody keeps artifacts readable") {
  if (geteuid() != 0) {
    MESSAGE("SKIPPED: not root");
    return;
  }
  auto opts = test_options();
  opts.drop_privileges = true;
  executor_client c(opts);
  auto o = c.run(make_job(job_kind::verify, good_kernel()));
  CHECK_MESSAGE(o.kind == outcome_kind::correct, describe(o));
  REQUIRE(c.hello().has_value());
  CHECK(c.hello()->uid == 65534);
}

TEST_CASE("a bad artifact path or backend is a runtime_error, not a crash") {
  auto& c = shared_client();
  auto o = c.run(make_job(job_kind::verify, {"cpu", "/nonexistent/x.so", "k", 0}));
  CHECK(o.kind == outcome_kind::runtime_error);
  CHECK(o.message.find("dlopen") != std::string::npos);
  auto g = good_kernel();
  g.backend = "cuda";
  auto b = c.run(make_job(job_kind::verify, g));
  CHECK(b.kind == outcome_kind::runtime_error);
  CHECK(b.message.find("not served") != std::string::npos);
  still_serves(c);
}

// Not part of the suite (~40 s): `kiln_gpu_pool_tests -tc="timing repeatability*" --no-skip` for
// reports.
TEST_CASE("timing repeatability of a simple kernel" * doctest::skip()) {
  executor_client c(test_options());
  for (int rows : {256, 8192}) {
    auto art = compile(kernel("", "", "", rows));
    std::vector<double> medians, cvs;
    int trials = 0;
    for (int i = 0; i < 20; ++i) {
      auto j = make_job(job_kind::time, art);
      j.spec = the_task(rows);
      j.timing = timing_options{}; // defaults: 64 MiB flush, CV 1%, 1 s cap
      auto o = c.run(j);
      REQUIRE_MESSAGE(o.kind == outcome_kind::correct, describe(o));
      medians.push_back(o.time->median_ms);
      cvs.push_back(o.time->cv);
      trials += o.time->trials;
    }
    double mean = 0;
    for (double m : medians) mean += m;
    mean /= medians.size();
    double var = 0;
    for (double m : medians) var += (m - mean) * (m - mean);
    std::sort(cvs.begin(), cvs.end());
    MESSAGE(rows, "x1024: medians over 20 jobs: mean ", mean, " ms, cv ",
            std::sqrt(var / (medians.size() - 1)) / mean, "; within-job cv median ", cvs[10],
            " (min ", cvs[0], ", max ", cvs[19], "), ", trials / 20, " trials/job");
  }
}
