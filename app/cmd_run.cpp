// kiln run: one process hosting every role of an experiment. Today it validates the configured
// suites (reference, degeneracy, eager time) and records them in a new run directory.
#include "actors/actor_system_setup.hpp"
#include "app/commands.hpp"
#include "app/eval_runner.hpp"
#include "app/run_config.hpp"
#include "app/run_training.hpp"
#include "app/task_table.hpp"
#include "data/reference.hpp"
#include "data/task_set.hpp"
#include "data/task_validate.hpp"

#include <ATen/Parallel.h>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <spdlog/spdlog.h>
#include <thread>

namespace kiln {

namespace fs = std::filesystem;

int configure_threads(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);
  return threads;
}

namespace {

expected<std::string> make_run_dir(const run_config& c) {
  std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  fs::path dir = fs::path(c.out_dir) / (c.name + "-" + stamp);
  for (int i = 2; fs::exists(dir); ++i)
    dir = fs::path(c.out_dir) / (c.name + "-" + stamp + "-" + std::to_string(i));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return error{dir.string() + ": cannot create run directory: " + ec.message()};
  return dir.string();
}

// Evaluates the configured policies through a pool; writes eval.json; returns the overall lines.
expected<nlohmann::json> run_evaluation(const run_config& cfg, const common_args& common,
                                        const std::string& run_dir,
                                        const compile_baselines* baselines) {
  std::vector<policy_spec> policies;
  for (const auto& name : cfg.eval_policies) {
    auto p = parse_policy(name);
    if (!p) return error{cfg.origin + ": key 'eval.policies': " + p.message()};
    policies.push_back(*p);
  }
  check_limits limits;
  limits.memory_budget_bytes = cfg.memory_budget_mib << 20;
  limits.max_ops = cfg.max_ops;
  auto set = load_tasks(cfg.eval_suites, limits);
  for (const auto& e : set.errors) spdlog::error("{}", e.message);
  if (cfg.eval_max_tasks > 0 && static_cast<int64_t>(set.tasks.size()) > cfg.eval_max_tasks)
    set.tasks.resize(static_cast<std::size_t>(cfg.eval_max_tasks));
  auto pool_cfg =
      make_pool_config(cfg.backend, cfg.cache_dir.empty() ? default_cache_dir() : cfg.cache_dir,
                       cfg.devices, cfg.compile_workers, cfg.first_device);
  if (!pool_cfg) return error{cfg.origin + ": " + pool_cfg.message()};
  warn_if_other_device(baselines, *pool_cfg);
  caf::actor_system_config sys_cfg;
  configure_actor_system(
      sys_cfg, {common.threads > 0 ? common.threads : cfg.threads, "sharing", !cfg.remote.empty()});
  if (!cfg.remote.empty() && !cfg.tls_dir.empty())
    if (auto st = enable_tls(sys_cfg, cfg.tls_dir); !st)
      return error{cfg.origin + ": key 'pool.tls': " + st.message()};
  caf::actor_system sys{sys_cfg};
  auto pool_actor = make_pool_actor(sys, *pool_cfg, cfg.remote, cfg.local_pool);
  if (!pool_actor) return error{cfg.origin + ": [pool]: " + pool_actor.message()};
  pool_handle pool(sys, *pool_actor, pool_cfg->backend);
  spdlog::info("evaluating {} policies on {} tasks through the pool", policies.size(),
               set.tasks.size());
  nlohmann::json all = nlohmann::json::array(), overall = nlohmann::json::object();
  for (const auto& p : policies) {
    auto rows = evaluate_policy(pool, set.tasks, p, cfg.eval_seed,
                                cfg.compile_workers + cfg.devices, baselines);
    all.push_back(summary_json(p.name, "", cfg.backend, rows));
    print_summary(all.back());
    overall[p.name] = all.back()["overall"];
  }
  std::ofstream(run_dir + "/eval.json") << all.dump(2) << "\n";
  std::printf("pool: %s\n", pool.stats().c_str());
  return overall;
}

} // namespace

int cmd_run(const common_args& common, const run_args& args) {
  auto cfg = load_run_config(args.config, args.overrides);
  if (!cfg) {
    spdlog::error("{}", cfg.message());
    return 2;
  }
  // Read once and before the long validation: used by evaluation (compile metrics) and training
  // (reward tier 3).
  std::optional<compile_baselines> baselines;
  if (!cfg->baselines.empty()) {
    auto b = load_baselines(cfg->baselines);
    if (!b) {
      spdlog::error("{}: key 'pool.baselines': {}", cfg->origin, b.message());
      return 2;
    }
    baselines = std::move(*b);
  }
  const compile_baselines* bl = baselines ? &*baselines : nullptr;
  int threads = configure_threads(common.threads > 0 ? common.threads : cfg->threads);
  auto device = parse_device(cfg->backend == "cuda" ? "cuda" : "cpu");
  if (!device) {
    spdlog::error("{}", device.message());
    return 2;
  }
  auto run_dir = make_run_dir(*cfg);
  if (!run_dir) {
    spdlog::error("{}", run_dir.message());
    return 2;
  }
  spdlog::info("kiln run '{}' from {}: backend {}, {} threads, run directory {}", cfg->name,
               cfg->origin, cfg->backend, threads, *run_dir);

  check_limits limits;
  limits.memory_budget_bytes = cfg->memory_budget_mib << 20;
  limits.max_ops = cfg->max_ops;
  auto set = load_tasks(cfg->suites, limits);
  for (const auto& e : set.errors) spdlog::error("{}", e.message);
  if (cfg->max_tasks > 0 && static_cast<int64_t>(set.tasks.size()) > cfg->max_tasks)
    set.tasks.resize(static_cast<std::size_t>(cfg->max_tasks));
  spdlog::info("validating {} tasks ({} failed to load)", set.tasks.size(), set.errors.size());

  validate_options opts;
  opts.device = *device;
  opts.timing_runs = cfg->timing_runs;
  opts.degeneracy_seeds = cfg->degeneracy_seeds;
  task_table table(*run_dir + "/tasks.jsonl", false);
  if (!table.open()) return 2;
  int bad = static_cast<int>(set.errors.size());
  for (const auto& t : set.tasks) {
    auto v = validate_task(t, opts);
    if (!v.ok) ++bad;
    table.row(v);
  }
  std::size_t total = set.tasks.size() + set.errors.size();
  table.summary(total, bad, cfg->backend);

  nlohmann::json summary = {
      {"name", cfg->name}, {"config", cfg->origin}, {"backend", cfg->backend}, {"tasks", total},
      {"bad", bad},        {"threads", threads}};
  if (!cfg->eval_policies.empty()) {
    auto evaluated = run_evaluation(*cfg, common, *run_dir, bl);
    if (!evaluated) {
      spdlog::error("{}", evaluated.message());
      return 2;
    }
    summary["eval"] = *evaluated;
  }
  if (cfg->rollout_episodes > 0) {
    auto trained = run_training(*cfg, set.tasks, *run_dir, threads, bl);
    if (!trained) {
      spdlog::error("{}", trained.message());
      std::ofstream(*run_dir + "/summary.json") << summary.dump(2) << "\n";
      return 2;
    }
    summary["rollout"] = *trained;
  }
  std::ofstream(*run_dir + "/summary.json") << summary.dump(2) << "\n";
  std::printf("run directory: %s\n", run_dir->c_str());
  if (summary.contains("rollout") && summary["rollout"].value("interrupted", false))
    return 130; // the shell's code for an interrupted command; the run directory is complete
  return bad == 0 ? 0 : 1;
}

} // namespace kiln
