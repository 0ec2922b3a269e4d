// Robustness of the executor and its kernel hosts against broken kernels: each program gets the
// right outcome and the same client keeps serving afterwards. Hostile kernels (the ones that try
// to win) are in test_hostile_cpu.cpp.
#include "tests/executor/executor_fixture.hpp"

#include <algorithm>
#include <cmath>
#include <doctest/doctest.h>
#include <fstream>

using namespace kiln;
using namespace kiln::test;

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

TEST_CASE("a kernel too small to resolve on cpu is timed at the protocol's jitter, never at 0") {
  // One row (1024 elements): the kernel costs less than the protocol's own jitter, so the
  // executor's clock less the protocol's p10 falls at or below 0 on some trials.
  auto& c = shared_client();
  auto tiny = compile(kernel("", "", "", 1));
  for (int run = 0; run < 3; ++run) {
    auto j = make_job(job_kind::evaluate, tiny);
    j.spec = the_task(1);
    auto o = c.run(j);
    REQUIRE_MESSAGE(o.kind == outcome_kind::correct, describe(o));
    REQUIRE(o.time.has_value());
    CHECK(o.time->min_ms >= 0.001);
    CHECK(o.time->median_ms >= o.time->min_ms);
    MESSAGE("one row: median ", o.time->median_ms, " ms, min ", o.time->min_ms, " ms, overhead ",
            o.time->overhead_ms, " ms");
  }
}

TEST_CASE("segfault: runtime_error naming the signal, the next job succeeds") {
  auto& c = shared_client();
  auto o = c.run(make_job(job_kind::verify, compile(kernel("*(volatile int*)0 = 1;"))));
  CHECK(o.kind == outcome_kind::runtime_error);
  CHECK_MESSAGE(o.message == "kernel process died: signal 11 (SIGSEGV)", o.message);
  auto starts = c.stats().starts;
  still_serves(c);
  CHECK(c.stats().starts == starts); // the executor itself survived: only the kernel host died
}

namespace {

// The executor's kernel hosts alive now (its children), by /proc.
int kernel_hosts_of(pid_t executor) {
  int n = 0;
  std::error_code ec;
  for (const auto& task :
       fs::directory_iterator("/proc/" + std::to_string(executor) + "/task", ec)) {
    std::ifstream children(task.path() / "children");
    for (pid_t child; children >> child;) {
      std::ifstream comm("/proc/" + std::to_string(child) + "/comm");
      std::string name;
      if (comm >> name && name.rfind("kiln-kernel", 0) == 0) ++n;
    }
  }
  return n;
}

} // namespace

TEST_CASE("spare kernel hosts: started ahead, each job gets one that never ran code") {
  auto o = test_options();
  o.spare_hosts = 3;
  executor_client c(o);
  auto first = c.run(make_job(job_kind::verify, good_kernel()));
  CHECK_MESSAGE(first.kind == outcome_kind::correct, describe(first));
  REQUIRE(c.hello().has_value());
  // After a job: its host is gone and three more wait (a short settle: the last one was spawned
  // just before the outcome left).
  int hosts = 0;
  for (int i = 0; i < 50 && (hosts = kernel_hosts_of(c.hello()->pid)) != 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(hosts == 3);
  // A crash spends one host; the spares behind it serve the next jobs, timed ones included.
  auto crash = c.run(make_job(job_kind::verify, compile(kernel("*(volatile int*)0 = 1;"))));
  CHECK(crash.kind == outcome_kind::runtime_error);
  for (int i = 0; i < 4; ++i) {
    auto e = c.run(make_job(i % 2 ? job_kind::verify : job_kind::evaluate, good_kernel()));
    CHECK_MESSAGE(e.kind == outcome_kind::correct, describe(e));
  }
  CHECK(c.stats().starts == 1);
}

TEST_CASE("abort and a non-zero return are runtime errors") {
  auto& c = shared_client();
  auto a = c.run(make_job(job_kind::verify, compile(kernel("abort();"))));
  CHECK(a.kind == outcome_kind::runtime_error);
  CHECK(a.message == "kernel process died: signal 6 (SIGABRT)");
  auto r = c.run(make_job(job_kind::verify, compile(kernel("return 3;"))));
  CHECK(r.kind == outcome_kind::runtime_error);
  // The value is not reported: a kernel could return what it read.
  CHECK_MESSAGE(r.message == "the entry point returned non-zero", r.message);
  still_serves(c);
}

TEST_CASE("infinite loop: timeout, the next job succeeds") {
  auto& c = shared_client();
  auto j =
      make_job(job_kind::verify, compile(kernel("volatile int spin = 1; while (spin) {}")), 1.0);
  auto o = c.run(j);
  CHECK(o.kind == outcome_kind::timeout);
  CHECK_MESSAGE(o.message.find("no result by the job's deadline") != std::string::npos, o.message);
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

TEST_CASE("a counter across calls: wrong on the call where it differs") {
  auto& c = shared_client();
  auto o = c.run(make_job(job_kind::verify, compile(kernel("", R"(
  for (int64_t i = 0; i < 256; ++i)
    for (int64_t j = 0; j < 1024; ++j) { float v = x[i * 1024 + j] + b[j]; y[i * 1024 + j] = v > 0 ? v : 0; }
  if (calls++ % 2 == 1) y[100] += 1.0f;)",
                                                           "static int calls = 0;"))));
  CHECK_MESSAGE(o.kind == outcome_kind::wrong, describe(o));
  REQUIRE(o.error.has_value());
  CHECK(o.error->first_bad_index == 100);
  CHECK(o.error->check == 1); // the second call of the job
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

TEST_CASE("kernel hosts run as nobody by default, and both sides can drop to nobody") {
  if (geteuid() != 0) {
    MESSAGE("SKIPPED: not root");
    return;
  }
  auto& shared = shared_client();
  REQUIRE(shared.start().has_value());
  CHECK_MESSAGE(shared.hello()->kernel_host.find("uid 65534") != std::string::npos,
                shared.hello()->kernel_host);
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
  auto o = c.run(make_job(job_kind::verify,
                          {artifact_loader::cpu_shared_object, "/nonexistent/x.so", "k", 0}));
  CHECK(o.kind == outcome_kind::runtime_error);
  CHECK_MESSAGE(o.message.find("cannot copy /nonexistent/x.so") != std::string::npos, o.message);
  auto junk = fs::path(cache_dir()) / "not_an_object.so";
  { std::ofstream(junk) << "garbage"; }
  auto j = c.run(
      make_job(job_kind::verify, {artifact_loader::cpu_shared_object, junk.string(), "k", 0}));
  CHECK(j.kind == outcome_kind::runtime_error);
  CHECK_MESSAGE(j.message.find("dlopen") != std::string::npos, j.message);
  auto g = good_kernel();
  g.loader = artifact_loader::cuda_cubin_plan;
  auto b = c.run(make_job(job_kind::verify, g));
  CHECK(b.kind == outcome_kind::runtime_error);
  CHECK(b.message.find("not served") != std::string::npos);
  still_serves(c);
}

// Not part of the suite (~40 s): `kiln_executor_tests -tc="timing repeatability*" --no-skip` for
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
