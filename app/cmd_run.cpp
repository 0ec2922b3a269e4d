// kiln run: one process hosting every role of an experiment. Today it validates the configured
// suites (reference, degeneracy, eager time) and records them in a new run directory.
#include "actors/actor_system_setup.hpp"
#include "app/commands.hpp"
#include "app/eval_runner.hpp"
#include "app/phase_clock.hpp"
#include "app/report.hpp"
#include "app/run_config.hpp"
#include "app/run_training.hpp"
#include "app/task_table.hpp"
#include "data/op_vocab.hpp"
#include "data/reference.hpp"
#include "data/task_set.hpp"
#include "data/task_validate.hpp"

#include <ATen/Parallel.h>
#include <algorithm>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
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

check_limits limits_of(const run_config& c) {
  check_limits limits;
  limits.memory_budget_bytes = c.memory_budget_mib << 20;
  limits.max_ops = c.max_ops;
  return limits;
}

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

// One set of tasks to evaluate policies on ("" before training; "train", "held_out" after).
struct eval_set {
  std::string name;
  std::vector<task> tasks;
};

// Evaluates each policy on each set through one pool; returns one summary_json a pair (its
// "suite" is the set's name, its "policy" the label given).
expected<nlohmann::json> evaluate_sets(const run_config& cfg, const common_args& common,
                                       const std::vector<eval_set>& sets,
                                       const std::vector<std::pair<std::string, policy_spec>>& ps,
                                       const compile_baselines* baselines) {
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
  nlohmann::json all = nlohmann::json::array();
  eager_times eager; // one eager time per task for every policy: their rows compare alike
  for (const auto& set : sets) {
    if (set.tasks.empty()) continue;
    spdlog::info("evaluating {} policies on {} tasks{} through the pool", ps.size(),
                 set.tasks.size(), set.name.empty() ? "" : " (" + set.name + ")");
    for (const auto& [label, spec] : ps) {
      policy_spec p = spec;
      p.name = label; // progress lines say "trained", not a checkpoint's path
      auto rows =
          evaluate_policy(pool, set.tasks, p, cfg.eval_seed, cfg.eval_parallel, baselines, &eager);
      all.push_back(summary_json(label, set.name, cfg.backend, rows));
      print_summary(all.back());
    }
  }
  std::printf("pool: %s\n", pool.stats().c_str());
  return all;
}

// Evaluates the configured policies; writes eval.json; returns the overall lines.
expected<nlohmann::json> run_evaluation(const run_config& cfg, const common_args& common,
                                        const std::string& run_dir,
                                        const compile_baselines* baselines) {
  std::vector<std::pair<std::string, policy_spec>> policies;
  for (const auto& name : cfg.eval_policies) {
    auto p = parse_policy(name);
    if (!p) return error{cfg.origin + ": key 'eval.policies': " + p.message()};
    policies.emplace_back(p->name, *p);
  }
  auto set = load_tasks(cfg.eval_suites, limits_of(cfg));
  for (const auto& e : set.errors) spdlog::error("{}", e.message);
  if (cfg.eval_max_tasks > 0 && static_cast<int64_t>(set.tasks.size()) > cfg.eval_max_tasks)
    set.tasks.resize(static_cast<std::size_t>(cfg.eval_max_tasks));
  auto all = evaluate_sets(cfg, common, {{"", set.tasks}}, policies, baselines);
  if (!all) return all.err();
  std::ofstream(run_dir + "/eval.json") << all->dump(2) << "\n";
  nlohmann::json overall = nlohmann::json::object();
  for (const auto& e : *all) overall[e.value("policy", std::string())] = e["overall"];
  return overall;
}

// Paired speed of policy a over policy b: the geomean of b's kernel time over a's on the tasks
// both solved (1 when none), and how many those were.
std::pair<double, int> paired_speed(const nlohmann::json& a, const nlohmann::json& b) {
  std::map<std::string, double> ms;
  for (const auto& t : b["tasks"])
    if (t.value("correct", false)) ms[t.value("task", std::string())] = t.value("kernel_ms", 0.0);
  double log_sum = 0;
  int n = 0;
  for (const auto& t : a["tasks"]) {
    auto it = ms.find(t.value("task", std::string()));
    double k = t.value("kernel_ms", 0.0);
    if (!t.value("correct", false) || it == ms.end() || k <= 0 || it->second <= 0) continue;
    log_sum += std::log(it->second / k);
    ++n;
  }
  return {n ? std::exp(log_sum / n) : 1.0, n};
}

// After training: the untrained model, the final checkpoint and the expert, greedily, on the
// training tasks and the held-out ones. Appends to eval.json; returns summary.json's "learned";
// prints what was learned as a table.
expected<nlohmann::json> evaluate_learning(const run_config& cfg, const common_args& common,
                                           const std::string& run_dir,
                                           const std::vector<task>& train,
                                           const nlohmann::json& rollout,
                                           const compile_baselines* baselines) {
  std::string dir = rollout.value("checkpoints", std::string());
  std::string latest;
  std::ifstream(dir + "/latest") >> latest;
  if (dir.empty() || latest.empty())
    return error{"eval.after_training: no final checkpoint in '" + dir + "'"};
  std::vector<std::pair<std::string, policy_spec>> ps;
  for (const auto& [label, path] :
       {std::pair<std::string, std::string>{"untrained", dir + "/untrained.pt"},
        {"trained", dir + "/" + latest},
        {"expert", "expert"}}) {
    auto p = parse_policy(path);
    if (!p) return error{"eval.after_training: " + p.message()};
    ps.emplace_back(label, *p);
  }
  std::vector<eval_set> sets{{"train", train}, {"held_out", {}}};
  if (!cfg.eval_held_out.empty()) {
    auto held = load_tasks(cfg.eval_held_out, limits_of(cfg));
    for (const auto& e : held.errors) spdlog::error("{}", e.message);
    shuffle_tasks(held.tasks, cfg.shuffle_seed); // the same suites: the training tasks' order
    int overlap = 0;
    for (auto& t : held.tasks) {
      bool seen =
          std::any_of(train.begin(), train.end(), [&](const task& x) { return x.name == t.name; });
      if (seen)
        ++overlap;
      else
        sets[1].tasks.push_back(std::move(t));
    }
    if (overlap > 0)
      spdlog::info("eval.held_out_suites: {} training tasks left out of the held-out set", overlap);
  }
  for (auto& s : sets)
    if (cfg.eval_after_max_tasks > 0 &&
        static_cast<int64_t>(s.tasks.size()) > cfg.eval_after_max_tasks)
      s.tasks.resize(static_cast<std::size_t>(cfg.eval_after_max_tasks));
  auto all = evaluate_sets(cfg, common, sets, ps, baselines);
  if (!all) return all.err();
  auto file = nlohmann::json::parse(std::ifstream(run_dir + "/eval.json"), nullptr, false);
  if (!file.is_array()) file = nlohmann::json::array();
  for (const auto& e : *all) file.push_back(e);
  std::ofstream(run_dir + "/eval.json") << file.dump(2) << "\n";

  nlohmann::json learned = nlohmann::json::object();
  std::printf("\nwhat was learned (greedy programs through the pool; speed = paired geomean of "
              "kernel time vs the expert on tasks both solved)\n");
  std::printf("  %-9s %-10s %6s %10s %14s\n", "set", "policy", "pass", "vs eager", "vs expert");
  for (const auto& s : sets) {
    if (s.tasks.empty()) continue;
    std::map<std::string, nlohmann::json> by;
    for (const auto& e : *all)
      if (e.value("suite", std::string()) == s.name) by[e.value("policy", std::string())] = e;
    nlohmann::json row = nlohmann::json::object();
    for (const auto& [label, p] : ps) {
      const auto& e = by[label];
      const auto& o = e["overall"];
      auto [speed, n] = paired_speed(e, by["expert"]);
      row[label] = {{"pass_rate", o.value("pass_rate", 0.0)},
                    {"geomean_eager", o.value("geomean_eager", 0.0)},
                    {"speed_vs_expert", speed},
                    {"paired_tasks", n}};
      std::printf("  %-9s %-10s %5.0f%% %9.3fx %9.3fx (%d)\n", s.name.c_str(), label.c_str(),
                  100 * o.value("pass_rate", 0.0), o.value("geomean_eager", 0.0), speed, n);
    }
    row["tasks"] = s.tasks.size();
    row["trained_over_expert"] = row["trained"]["speed_vs_expert"];
    auto [over_untrained, n] = paired_speed(by["trained"], by["untrained"]);
    row["trained_over_untrained"] = over_untrained;
    row["trained_over_untrained_tasks"] = n;
    learned[s.name] = row;
  }
  // What it means, in words: the margin training bought on each set.
  for (const auto& s : sets) {
    if (!learned.contains(s.name)) continue;
    const auto& row = learned[s.name];
    double g = row.value("trained_over_untrained", 1.0);
    std::printf(
        "  %s: the trained model's kernels run %.2fx %s the untrained model's (paired over %d "
        "tasks both solved; pass %.0f%% -> %.0f%%)%s\n",
        s.name.c_str(), g >= 1 ? g : 1 / g, g >= 1 ? "as fast as" : "slower than",
        row.value("trained_over_untrained_tasks", 0),
        100 * row["untrained"].value("pass_rate", 0.0),
        100 * row["trained"].value("pass_rate", 0.0),
        s.name == "held_out" ? ": tasks no reward ever covered" : "");
  }
  return learned;
}
} // namespace

// The run's page (kiln report on its directory): curves and what was learned, as the last line.
static void write_run_report(const std::string& run_dir) {
  auto src = load_report_source(run_dir);
  if (!src) {
    spdlog::warn("report: {}", src.message());
    return;
  }
  std::string path = run_dir + "/report.html";
  std::ofstream(path) << render_html({*src});
  std::printf("report: %s\n", fs::absolute(path).c_str());
}

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

  auto set = load_tasks(cfg->suites, limits_of(*cfg));
  for (const auto& e : set.errors) spdlog::error("{}", e.message);
  if (cfg->rollout_policy != "llm") {
    // The hosted model writes programs over an op graph: a PyTorch-module reference has none.
    auto module_task = [](const task& t) { return has_module_reference(t); };
    auto n = std::count_if(set.tasks.begin(), set.tasks.end(), module_task);
    if (n > 0) {
      spdlog::warn("{} task{} whose reference is a PyTorch module left out: rollout.policy '{}' "
                   "writes programs over an op graph (rollout.policy = \"llm\" takes them)",
                   n, n == 1 ? "" : "s", cfg->rollout_policy);
      set.tasks.erase(std::remove_if(set.tasks.begin(), set.tasks.end(), module_task),
                      set.tasks.end());
    }
  }
  shuffle_tasks(set.tasks, cfg->shuffle_seed);
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
  phase_clock clock(static_cast<int64_t>(set.tasks.size()));
  int64_t done = 0;
  for (const auto& t : set.tasks) {
    auto v = validate_task(t, opts);
    if (!v.ok) ++bad;
    table.row(v);
    if (++done % 10 == 0 && done < static_cast<int64_t>(set.tasks.size()))
      spdlog::info("[validate {}]", clock.status(done));
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
      write_run_report(*run_dir);
      return 2;
    }
    summary["rollout"] = *trained;
    // After training: only a hosted model learned anything (expert / random only stream).
    if (cfg->eval_after_training && cfg->rollout_policy == "model" &&
        !trained->value("interrupted", false)) {
      std::vector<task> train = set.tasks;
      if (cfg->rollout_max_tasks > 0 && static_cast<int64_t>(train.size()) > cfg->rollout_max_tasks)
        train.resize(static_cast<std::size_t>(cfg->rollout_max_tasks));
      auto learned = evaluate_learning(*cfg, common, *run_dir, train, *trained, bl);
      if (!learned) {
        spdlog::error("{}", learned.message());
        std::ofstream(*run_dir + "/summary.json") << summary.dump(2) << "\n";
        write_run_report(*run_dir);
        return 2;
      }
      summary["learned"] = *learned;
    }
  }
  std::ofstream(*run_dir + "/summary.json") << summary.dump(2) << "\n";
  std::printf("run directory: %s\n", run_dir->c_str());
  write_run_report(*run_dir);
  if (summary.contains("rollout") && summary["rollout"].value("interrupted", false))
    return 130; // the shell's code for an interrupted command; the run directory is complete
  if (summary.contains("rollout") && summary["rollout"].value("sink_refused", false))
    return 1; // the trajectories had nowhere to go; the run directory says why
  return bad == 0 ? 0 : 1;
}

} // namespace kiln
