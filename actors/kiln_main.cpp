// kiln: the command-line entry point. Parses arguments (CLI11), sets up logging, dispatches.
#include "actors/commands.hpp"

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

int main(int argc, char** argv) {
  CLI::App app{"kiln: reinforcement learning of agents that write fast GPU kernels"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kiln 0.1.0");
  kiln::common_args common;
  app.add_option("--log-level", common.log_level, "trace, debug, info, warn, error, off")
    ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
    ->capture_default_str();
  app.add_option("--threads", common.threads, "worker threads (0 = all cores)")->capture_default_str();

  kiln::run_args run;
  auto* run_cmd = app.add_subcommand("run", "run an experiment from a TOML config (default: the embedded configs/quickstart.toml)");
  run_cmd->add_option("config", run.config, "config file");
  run_cmd->add_option("--set", run.overrides, "override a config key: KEY=VALUE (TOML value)");

  auto* tasks_cmd = app.add_subcommand("tasks", "task files: validate");
  tasks_cmd->require_subcommand(1);
  kiln::tasks_validate_args validate;
  auto* val = tasks_cmd->add_subcommand("validate", "parse tasks, run the reference, check degeneracy; non-zero exit on any bad task");
  val->add_option("paths", validate.paths, "task files (.toml, .jsonl) or directories")->required();
  val->add_option("--device", validate.device, "cpu, cuda or cuda:N")->capture_default_str();
  val->add_option("--json", validate.json_out, "write one JSON row per task to this file");
  val->add_option("--memory-budget-mib", validate.memory_budget_mib, "largest total tensor size of a task")->capture_default_str();
  val->add_option("--timing-runs", validate.timing_runs, "timed reference runs (median reported)")->capture_default_str();
  val->add_option("--min-ms", validate.min_ms, "fail tasks whose eager time is below this (0 = off)");
  val->add_option("--max-ms", validate.max_ms, "fail tasks whose eager time is above this (0 = off)");
  val->add_flag("--shapes-only", validate.shapes_only, "parse and check shapes only; run nothing");

  kiln::synth_args synth;
  auto* syn = app.add_subcommand("synth", "synthesize a training dataset of fused tasks (JSON Lines)");
  syn->add_option("--out", synth.out, "output .jsonl")->required();
  syn->add_option("--count", synth.count, "tasks to produce")->capture_default_str();
  syn->add_option("--seed", synth.seed, "random seed (same seed, same dataset)")->capture_default_str();
  syn->add_option("--dedup-against", synth.dedup_against, "suites (files or directories) whose task graphs must not reappear");
  syn->add_option("--device", synth.device, "device for the eager filters")->capture_default_str();
  syn->add_option("--min-ms", synth.min_ms, "eager-time window, lower end")->capture_default_str();
  syn->add_option("--max-ms", synth.max_ms, "eager-time window, upper end")->capture_default_str();
  syn->add_option("--max-ops", synth.max_ops, "longest composition (1-8)")->check(CLI::Range(1, 8))->capture_default_str();
  syn->add_option("--stats", synth.stats_out, "write statistics JSON here");
  syn->add_flag("--no-run", synth.no_run, "skip the eager filters (structure and shapes only)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  spdlog::set_level(spdlog::level::from_str(common.log_level));
  spdlog::set_pattern("%H:%M:%S.%e %^%l%$ %v");
  if (*run_cmd) return kiln::cmd_run(common, run);
  if (*val) return kiln::cmd_tasks_validate(common, validate);
  if (*syn) return kiln::cmd_synth(common, synth);
  return 2;
}
