// Shared by the executor tests: hand-written cpu kernels for add_relu (x [ROWS, 1024] + b, relu),
// compiled through the real compiler, run through real `kiln executor` and kernel host processes.
#pragma once

#include "compile/cpu_compiler.hpp"
#include "data/task_parse.hpp"
#include "executor/executor_client.hpp"
#include "tests/data/sample_tasks.hpp"

#include <doctest/doctest.h>
#include <filesystem>
#include <string>
#include <thread>
#include <unistd.h>

namespace kiln::test {

namespace fs = std::filesystem;

inline const char* kTask = kAddRelu;

// `prologue` runs first (may return), then the correct loop unless `body` replaces it.
inline std::string kernel(const std::string& prologue, const std::string& body = "",
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

inline std::string cache_dir() {
  static std::string d = [] {
    auto p = fs::temp_directory_path() / "kiln_executor_tests_cache";
    fs::create_directories(p);
    return p.string();
  }();
  return d;
}

inline artifact_ref compile(const std::string& source) {
  cpu_compile_options o;
  o.cache_dir = cache_dir();
  o.include_dir = std::string(KILN_SOURCE_DIR) + "/skills";
  auto a = compile_cpu(source, o);
  REQUIRE_MESSAGE(a.has_value(), (a ? "" : a.message()));
  return {artifact_loader::cpu_shared_object, a->so_path, a->key, a->compile_ms};
}

inline task the_task(int rows = 256) {
  std::string text = kTask;
  text.replace(text.find("[256, 1024]"), 11, "[" + std::to_string(rows) + ", 1024]");
  auto t = task_from_toml(text, "add_relu.toml");
  REQUIRE(t.has_value());
  return *t;
}

inline job make_job(job_kind kind, const artifact_ref& a, double timeout_s = 30) {
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

// A private copy of a binary: on a shared build machine other builds relink build/kiln while tests
// run (exec then fails with EACCES / ETXTBSY). Copied once it has been stable for a second, into a
// folder of this process's own, so the kernel host lands beside the kiln binary as in a build.
inline std::string stable_copy(const fs::path& src) {
  static const fs::path dir = [] {
    auto d = fs::path(cache_dir()) / ("bin." + std::to_string(getpid()));
    fs::create_directories(d);
    static struct remover {
      fs::path p;
      ~remover() {
        std::error_code ec;
        fs::remove_all(p, ec);
      }
    } r{d};
    return d;
  }();
  fs::path dst = dir / src.filename();
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
  // The cache dir is root's; kernel hosts run as nobody and must traverse to their scratch.
  fs::permissions(dir, fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
  return dst.string();
}

inline std::string kiln_copy() {
  static std::string path = [] {
    stable_copy(KILN_KERNEL_HOST_BINARY);
    return stable_copy(KILN_BINARY);
  }();
  return path;
}

inline executor_options test_options() {
  executor_options o;
  o.kiln_path = kiln_copy();
  o.threads = 1;
  return o;
}

inline std::string describe(const outcome& o) {
  return std::string(to_string(o.kind)) + ": " + o.message;
}

inline const artifact_ref& good_kernel() {
  static artifact_ref a = compile(kernel(""));
  return a;
}

// The same client must still serve a correct kernel.
inline void still_serves(executor_client& c) {
  auto o = c.run(make_job(job_kind::verify, good_kernel()));
  CHECK_MESSAGE(o.kind == outcome_kind::correct, describe(o));
}

inline executor_client& shared_client() {
  static executor_client c(test_options());
  return c;
}

} // namespace kiln::test
