// The pool as actors: compile -> device -> outcome, cache merging, failures as outcomes.
#include "actors/actor_system_setup.hpp"
#include "data/task_check.hpp"
#include "data/task_parse.hpp"
#include "pool/device_pool.hpp"
#include "skills/expert.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

using namespace kiln;
namespace fs = std::filesystem;

namespace {

task small_task() {
  auto t = task_from_toml(R"(
name = "pool_gelu_scale"
level = 2
outputs = ["y1"]
[[inputs]]
name = "x"
shape = [64, 96]
init = "normal"
[[ops]]
out = "y0"
op = "gelu"
args = ["x"]
[[ops]]
out = "y1"
op = "mul"
args = ["y0"]
attrs = { scalar = 3.0 }
)",
                          "pool_test.toml");
  REQUIRE(t);
  REQUIRE(check_task(*t));
  return *t;
}

pool_config test_config() {
  auto root = fs::path(KILN_TEST_TMP) / "pool_cache";
  fs::create_directories(root / "include");
  fs::create_directories(root / "scratch");
  fs::copy_file(KILN_SOURCE_DIR "/skills/kiln_abi.h", root / "include" / "kiln_abi.h",
                fs::copy_options::overwrite_existing);
  pool_config cfg;
  cfg.devices = 1;
  cfg.compile_workers = 2;
  cfg.compile.cache_dir = (root / "kernels").string();
  cfg.compile.include_dir = (root / "include").string();
  cfg.executor.kiln_path = KILN_BINARY;
  cfg.executor.scratch_root = (root / "scratch").string();
  return cfg;
}

job make(job_kind k, const task& t) {
  job j;
  j.kind = k;
  j.spec = t;
  j.timeout_s = 60;
  j.timing.max_trials = 20;
  j.timing.time_cap_ms = 200;
  return j;
}

} // namespace

TEST_CASE("the pool compiles, verifies and times a program, and reports the baseline") {
  caf::actor_system_config cfg;
  configure_actor_system(cfg, {2, "sharing"});
  caf::actor_system sys{cfg};
  pool_handle pool(sys, test_config());
  task t = small_task();

  auto base = pool.run(make(job_kind::baseline, t));
  CHECK_MESSAGE(base.kind == outcome_kind::correct, base.message);
  REQUIRE(base.time.has_value());
  CHECK(base.time->median_ms > 0);

  auto prog = print(expert_program(t, backend_kind::cpu));
  auto o = pool.run(make(job_kind::evaluate, t), prog);
  CHECK_MESSAGE(o.kind == outcome_kind::correct, o.message);
  CHECK(o.time.has_value());
  CHECK(o.device_ms > 0);

  auto again = pool.run(make(job_kind::evaluate, t), prog); // cached artifact: no compile time
  CHECK(again.kind == outcome_kind::correct);
  CHECK(again.compile_ms == 0);

  auto stats = nlohmann::json::parse(pool.stats());
  CHECK(stats["cache_hits"].get<int>() >= 1);
  CHECK(stats["devices"].size() == 1);
  CHECK(stats["devices"][0]["busy_share"].get<double>() > 0);
}

TEST_CASE("bad programs come back as compile errors and the pool keeps serving") {
  caf::actor_system_config cfg;
  configure_actor_system(cfg, {2, "sharing"});
  caf::actor_system sys{cfg};
  pool_handle pool(sys, test_config());
  task t = small_task();
  auto o = pool.run(make(job_kind::evaluate, t), "kernel ops 2 gemm end");
  CHECK(o.kind == outcome_kind::compile_error);
  CHECK(o.message.find("does not fit") != std::string::npos);
  auto garbage = pool.run(make(job_kind::evaluate, t), "print('hello')");
  CHECK(garbage.kind == outcome_kind::compile_error);
  auto good = pool.run(make(job_kind::verify, t), print(expert_program(t, backend_kind::cpu)));
  CHECK_MESSAGE(good.kind == outcome_kind::correct, good.message);
}

TEST_CASE("concurrent identical programs compile once") {
  caf::actor_system_config cfg;
  configure_actor_system(cfg, {2, "sharing"});
  caf::actor_system sys{cfg};
  auto pc = test_config();
  pc.compile.cache_dir += "_concurrent"; // a cold disk cache
  fs::remove_all(pc.compile.cache_dir);
  pool_handle pool(sys, pc);
  task t = small_task();
  auto prog = print(expert_program(t, backend_kind::cpu));
  std::vector<std::thread> threads;
  std::vector<outcome_kind> kinds(4);
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] { kinds[i] = pool.run(make(job_kind::verify, t), prog).kind; });
  for (auto& th : threads) th.join();
  for (auto k : kinds) CHECK(k == outcome_kind::correct);
  auto stats = nlohmann::json::parse(pool.stats());
  CHECK(stats["cache_misses"].get<int>() == 1);
  CHECK(stats["cache_hits"].get<int>() == 3);
}

namespace {

// Free-form cpu source for small_task(): gelu (tanh-free, erf form) times 3 over 64 x 96.
std::string gelu_scale_source(const std::string& extra) {
  return R"(//! kiln-source cpu
#include "kiln_abi.h"
#include <math.h>
extern "C" int kiln_run(const kiln_host*, const void* const* in, const void* const*,
                        void* const* out) {
  const float* x = (const float*)in[0];
  float* y = (float*)out[0];
  for (int i = 0; i < 64 * 96; ++i) y[i] = 3.0f * 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678f));
)" + extra +
         R"(
  return 0;
}
)";
}

} // namespace

TEST_CASE("free-form source runs through the pool like a program: verified, timed, cached") {
  caf::actor_system_config cfg;
  configure_actor_system(cfg, {2, "sharing"});
  caf::actor_system sys{cfg};
  pool_handle pool(sys, test_config());
  task t = small_task();

  auto o = pool.run(make(job_kind::evaluate, t), gelu_scale_source(""));
  CHECK_MESSAGE(o.kind == outcome_kind::correct, o.message);
  REQUIRE(o.time);
  CHECK(o.time->median_ms > 0);
  auto again = pool.run(make(job_kind::verify, t), gelu_scale_source(""));
  CHECK_MESSAGE(again.kind == outcome_kind::correct, again.message);

  // The hostile cases of generated programs apply to free-form source just the same.
  auto mutate = pool.run(make(job_kind::verify, t), gelu_scale_source("  ((float*)in[0])[7] = 0;"));
  CHECK_MESSAGE(mutate.kind == outcome_kind::input_mutated, mutate.message);
  auto constant = pool.run(make(job_kind::verify, t),
                           gelu_scale_source("  for (int i = 0; i < 64 * 96; ++i) y[i] = 1.0f;"));
  CHECK_MESSAGE(constant.kind == outcome_kind::wrong, constant.message);

  auto broken = pool.run(make(job_kind::evaluate, t), gelu_scale_source("  undeclared = 1;"));
  CHECK(broken.kind == outcome_kind::compile_error);
  CHECK_MESSAGE(broken.message.find("undeclared") != std::string::npos, broken.message);

  std::string for_cuda = gelu_scale_source("");
  for_cuda.replace(0, std::string("//! kiln-source cpu").size(), "//! kiln-source cuda");
  auto other = pool.run(make(job_kind::evaluate, t), for_cuda);
  CHECK(other.kind == outcome_kind::compile_error);
  CHECK_MESSAGE(other.message.find("runs on the cuda backend; this pool serves cpu") !=
                    std::string::npos,
                other.message);

  auto stats = nlohmann::json::parse(pool.stats());
  CHECK(stats["cache_hits"].get<int>() >= 1); // the second submission of the same source
}
