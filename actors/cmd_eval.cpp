// kiln eval: policies x suite through the pool (codegen -> compile -> verify -> time) with an eager
// baseline per task measured by the same executor; metrics per level and overall, as JSON.
#include "actors/actor_system_setup.hpp"
#include "actors/commands.hpp"
#include "data/task_hash.hpp"
#include "data/task_set.hpp"
#include "gpu_pool/device_pool.hpp"
#include "kiln/embedded_config.hpp"
#include "rollout/eval_metrics.hpp"
#include "skills/expert.hpp"
#include "skills/grammar.hpp"

#include <atomic>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <thread>

namespace kiln {

namespace fs = std::filesystem;

std::string default_cache_dir() {
  if (const char* x = std::getenv("KILN_CACHE_DIR")) return x;
  if (const char* x = std::getenv("XDG_CACHE_HOME")) return std::string(x) + "/kiln";
  if (const char* h = std::getenv("HOME")) return std::string(h) + "/.cache/kiln";
  return "/tmp/kiln-cache";
}

expected<pool_config> make_pool_config(const std::string& backend, const std::string& cache_dir,
                                       int devices, int compile_workers) {
  if (backend != "cpu")
    return error{"--backend " + backend + ": the cuda code generator is not in this build yet (issue #3); use cpu"};
  pool_config cfg;
  cfg.backend = backend_kind::cpu;
  cfg.devices = devices;
  cfg.compile_workers = compile_workers;
  std::error_code ec;
  fs::create_directories(fs::path(cache_dir) / "include", ec);
  fs::create_directories(fs::path(cache_dir) / "scratch", ec);
  if (ec) return error{cache_dir + ": cannot create the kernel cache: " + ec.message()};
  std::ofstream(fs::path(cache_dir) / "include" / "kiln_abi.h") << embedded_kiln_abi_h;
  cfg.compile.cache_dir = (fs::path(cache_dir) / "kernels").string();
  cfg.compile.include_dir = (fs::path(cache_dir) / "include").string();
  cfg.executor.scratch_root = (fs::path(cache_dir) / "scratch").string();
  // A cpu device is a share of the host's cores: kernels and the eager baseline get the same threads.
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cfg.executor.threads = std::max(1, cores / std::max(1, devices));
  return cfg;
}

namespace {

struct policy_spec {
  std::string name;
  bool random = false;
};

job make_job(const task& t, job_kind kind) {
  job j;
  j.kind = kind;
  j.spec = t;
  j.timeout_s = 120;
  return j;
}

eval_row evaluate_task(pool_handle& pool, const task& t, const policy_spec& p, uint64_t seed) {
  eval_row r;
  r.task = t.name;
  r.level = t.level;
  auto base = pool.run(make_job(t, job_kind::baseline));
  if (base.kind != outcome_kind::correct || !base.time) {
    r.outcome = "baseline_failed";
    r.message = base.message;
    return r;
  }
  r.eager_ms = base.time->median_ms;
  program prog;
  if (p.random) {
    std::mt19937_64 rng(seed ^ fnv1a64(t.name));
    auto parsed = parse_program(tokens_to_text(sample_program(t, rng)));
    prog = *parsed; // sampled under the grammar mask: always parses
  } else {
    prog = expert_program(t, backend_kind::cpu);
  }
  r.program = print(prog);
  auto o = pool.run(make_job(t, job_kind::evaluate), r.program);
  r.outcome = to_string(o.kind);
  r.correct = o.kind == outcome_kind::correct && o.time.has_value();
  if (r.correct) r.kernel_ms = o.time->median_ms;
  if (!r.correct) r.message = o.message.substr(0, 300);
  return r;
}

nlohmann::json summary_json(const std::string& policy, const std::string& suite, const std::string& backend,
                            const std::vector<eval_row>& rows) {
  nlohmann::json j;
  j["policy"] = policy;
  j["suite"] = suite;
  j["backend"] = backend;
  j["overall"] = to_json(summarize(rows));
  std::map<int, std::vector<eval_row>> by_level;
  for (const auto& r : rows) by_level[r.level].push_back(r);
  for (const auto& [level, lr] : by_level) j["levels"][std::to_string(level)] = to_json(summarize(lr));
  j["tasks"] = nlohmann::json::array();
  for (const auto& r : rows) j["tasks"].push_back(to_json(r));
  return j;
}

} // namespace

int cmd_eval(const common_args& common, const eval_args& args) {
  std::vector<policy_spec> policies;
  for (const auto& p : args.policies) {
    if (p == "expert" || p == "random") {
      policies.push_back({p, p == "random"});
    } else if (fs::exists(p)) {
      spdlog::error("--policy {}: checkpoint policies need the learner's model (issue #5), not in this build", p);
      return 2;
    } else {
      spdlog::error("--policy {}: expected expert, random or a checkpoint file", p);
      return 2;
    }
  }
  auto set = load_tasks(args.suites);
  for (const auto& e : set.errors) spdlog::error("{}", e.message);
  if (set.tasks.empty()) {
    spdlog::error("no tasks to evaluate");
    return 2;
  }
  if (args.max_tasks > 0 && static_cast<int64_t>(set.tasks.size()) > args.max_tasks)
    set.tasks.resize(static_cast<std::size_t>(args.max_tasks));
  auto cfg = make_pool_config(args.backend, args.cache_dir.empty() ? default_cache_dir() : args.cache_dir,
                              args.devices, args.compile_workers);
  if (!cfg) {
    spdlog::error("{}", cfg.message());
    return 2;
  }
  caf::actor_system_config sys_cfg;
  configure_actor_system(sys_cfg, {common.threads, "sharing"});
  caf::actor_system sys{sys_cfg};
  pool_handle pool(sys, *cfg);

  std::string suite_name;
  for (const auto& s : args.suites) suite_name += (suite_name.empty() ? "" : " ") + s;
  nlohmann::json out = nlohmann::json::array();
  auto t_start = std::chrono::steady_clock::now();
  for (const auto& p : policies) {
    std::vector<eval_row> rows(set.tasks.size());
    std::atomic<std::size_t> next{0}, done{0};
    std::mutex log_mutex;
    auto worker = [&] {
      for (std::size_t i; (i = next++) < set.tasks.size();) {
        rows[i] = evaluate_task(pool, set.tasks[i], p, args.seed);
        std::size_t n = ++done;
        std::lock_guard<std::mutex> lock(log_mutex);
        const auto& r = rows[i];
        double sp = r.correct && r.kernel_ms > 0 ? r.eager_ms / r.kernel_ms : 0;
        spdlog::info("[{} {}/{}] {:<44} {:<16} eager {:8.3f} ms  kernel {:8.3f} ms  speedup {:.2f}x", p.name, n,
                     set.tasks.size(), r.task, r.outcome, r.eager_ms, r.kernel_ms, sp);
        if (!r.correct) spdlog::debug("  {}: {}", r.task, r.message);
      }
    };
    std::vector<std::thread> threads;
    for (int w = 0; w < std::max(1, args.parallel); ++w) threads.emplace_back(worker);
    for (auto& th : threads) th.join();
    auto j = summary_json(p.name, suite_name, args.backend, rows);
    const auto& o = j["overall"];
    std::printf("%-8s tasks %d  pass %.1f%%  fast_1 %.1f%%  geomean vs eager %.3fx  (compile baselines: %s)\n",
                p.name.c_str(), o["tasks"].get<int>(), 100 * o["pass_rate"].get<double>(),
                100 * o["fast_1_eager"].get<double>(), o["geomean_eager"].get<double>(),
                o["geomean_compile"].is_string() ? "n/a" : "yes");
    for (auto& [level, lj] : j["levels"].items())
      std::printf("  level %s: tasks %d  pass %.1f%%  fast_1 %.1f%%  geomean %.3fx\n", level.c_str(),
                  lj["tasks"].get<int>(), 100 * lj["pass_rate"].get<double>(),
                  100 * lj["fast_1_eager"].get<double>(), lj["geomean_eager"].get<double>());
    out.push_back(j);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  auto stats = nlohmann::json::parse(pool.stats());
  std::printf("pool: %s\n%.1f s\n", stats.dump().c_str(), secs);
  if (!args.json_out.empty()) {
    std::ofstream f(args.json_out);
    if (!f) {
      spdlog::error("{}: cannot write", args.json_out);
      return 2;
    }
    f << out.dump(2) << "\n";
  }
  return set.errors.empty() ? 0 : 1;
}

} // namespace kiln
