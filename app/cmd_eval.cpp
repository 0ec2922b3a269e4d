// kiln eval: policies x suite through the pool (codegen -> compile -> verify -> time) with an eager
// baseline per task measured by the same executor; metrics per level and overall, as JSON. With
// --samples k or --turns T the programs come from episodes (app/eval_episodes.hpp).
#include "actors/actor_system_setup.hpp"
#include "actors/messages.hpp"
#include "app/commands.hpp"
#include "app/eval_episodes.hpp"
#include "app/eval_runner.hpp"
#include "data/task_set.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <spdlog/spdlog.h>

namespace kiln {

int cmd_eval(const common_args& common, const eval_args& args) {
  std::vector<policy_spec> policies;
  for (const auto& name : args.policies) {
    auto p = parse_policy(name);
    if (!p) {
      spdlog::error("--policy: {}", p.message());
      return 2;
    }
    policies.push_back(*p);
  }
  check_limits limits;
  limits.max_ops = args.max_ops;
  auto set = load_tasks(args.suites, limits);
  for (const auto& e : set.errors) spdlog::error("{}", e.message);
  if (set.tasks.empty()) {
    spdlog::error("no tasks to evaluate");
    return 2;
  }
  if (args.max_tasks > 0 && static_cast<int64_t>(set.tasks.size()) > args.max_tasks)
    set.tasks.resize(static_cast<std::size_t>(args.max_tasks));
  auto cfg =
      make_pool_config(args.backend, args.cache_dir.empty() ? default_cache_dir() : args.cache_dir,
                       args.devices, args.compile_workers);
  if (!cfg) {
    spdlog::error("--backend: {}", cfg.message());
    return 2;
  }
  std::optional<compile_baselines> baselines;
  if (!args.baselines.empty()) {
    auto b = load_baselines(args.baselines);
    if (!b) {
      spdlog::error("--baselines: {}", b.message());
      return 2;
    }
    std::size_t found = 0;
    for (const auto& t : set.tasks) found += lookup(*b, t).has_value();
    spdlog::info("torch.compile baselines: {} of {} tasks ({}, torch {}, mode {})", found,
                 set.tasks.size(), b->device, b->torch, b->mode);
    baselines = std::move(*b);
    warn_if_other_device(&*baselines, *cfg);
  }
  caf::actor_system_config sys_cfg;
  configure_actor_system(sys_cfg, {common.threads, "sharing", !args.remote.empty(),
                                   common.peer_heartbeat_ms, common.peer_timeout_ms});
  if (!args.tls_dir.empty()) {
    if (args.remote.empty()) {
      spdlog::error("--tls: goes with --remote (it secures the connections to kiln nodes)");
      return 2;
    }
    if (auto st = enable_tls(sys_cfg, args.tls_dir); !st) {
      spdlog::error("--{}", st.message());
      return 2;
    }
  }
  register_rollout_messages(sys_cfg);
  caf::actor_system sys{sys_cfg};
  auto pool_actor = make_pool_actor(sys, *cfg, args.remote, !args.no_local);
  if (!pool_actor) {
    spdlog::error("{}", pool_actor.message());
    return 2;
  }
  pool_handle pool(sys, *pool_actor, cfg->backend);

  std::string suite_name;
  for (const auto& s : args.suites) suite_name += (suite_name.empty() ? "" : " ") + s;
  nlohmann::json out = nlohmann::json::array();
  auto t_start = std::chrono::steady_clock::now();
  const bool episodes = args.samples > 1 || args.turns > 1;
  episode_eval_options eo;
  eo.samples = args.samples;
  eo.turns = args.turns;
  eo.seed = args.seed;
  eo.parallel = args.parallel;
  eo.temperature = args.temperature;
  eo.llm.endpoints = args.llm_endpoints;
  eo.llm.model = args.llm_model;
  eo.llm.api = args.llm_api;
  eo.llm.answer_format = *llm_answer_format_from(args.llm_answer_format); // CLI checked it
  eo.llm.max_tokens = args.llm_max_tokens;
  eo.llm.timeout_s = args.llm_timeout_s;
  eo.llm.max_in_flight = args.llm_in_flight;
  eo.llm.max_attempts = args.llm_attempts;
  if (const char* key = std::getenv(args.llm_key_env.c_str())) eo.llm.bearer_token = key;
  for (const auto& p : policies) {
    std::vector<eval_row> rows;
    const bool via_episodes = episodes || p.llm; // an LLM always answers through episodes
    if (via_episodes) {
      auto r = evaluate_policy_episodes(sys, *pool_actor, cfg->backend, set.tasks, p, eo,
                                        baselines ? &*baselines : nullptr);
      if (!r) {
        spdlog::error("{}: {}", p.name, r.message());
        return 1;
      }
      rows = std::move(*r);
    } else {
      rows = evaluate_policy(pool, set.tasks, p, args.seed, args.parallel,
                             baselines ? &*baselines : nullptr, nullptr, args.job_timeout_s);
    }
    out.push_back(summary_json(p.name, suite_name, args.backend, rows));
    if (via_episodes) {
      out.back()["samples"] = args.samples;
      out.back()["turns"] = args.turns;
    }
    if (p.llm) {
      out.back()["answer_format"] = args.llm_answer_format;
      for (auto& row : out.back()["tasks"]) row["answer_format"] = args.llm_answer_format;
    }
    print_summary(out.back());
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  std::printf("pool: %s\n%.1f s\n", pool.stats().c_str(), secs);
  std::fflush(stdout);
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
