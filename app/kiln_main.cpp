// kiln: the command-line entry point. Parses arguments (CLI11), sets up logging, dispatches.
#include "app/commands.hpp"
#include "executor/executor.hpp"

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

int main(int argc, char** argv) {
  CLI::App app{"kiln: reinforcement learning of agents that write fast GPU kernels"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kiln 0.1.0");
  kiln::common_args common;
  app.add_option("--log-level", common.log_level, "trace, debug, info, warn, error, off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();
  app.add_option("--threads", common.threads, "worker threads (0 = all cores)")
      ->capture_default_str();
  app.add_option("--peer-heartbeat-ms", common.peer_heartbeat_ms,
                 "node / remote pools: heartbeat on each connection every MS (0 = off)")
      ->check(CLI::Range(0, 600000))
      ->capture_default_str();
  app.add_option("--peer-timeout-ms", common.peer_timeout_ms,
                 "node / remote pools: a peer silent this long is down; its jobs go elsewhere "
                 "(0 = off: only a closed connection counts)")
      ->check(CLI::Range(0, 3600000))
      ->capture_default_str();

  kiln::run_args run;
  auto* run_cmd = app.add_subcommand(
      "run",
      "run an experiment from a TOML config (default: the embedded configs/quickstart.toml)");
  run_cmd->add_option("config", run.config, "config file");
  run_cmd->add_option("--set", run.overrides, "override a config key: KEY=VALUE (TOML value)");

  auto* tasks_cmd = app.add_subcommand("tasks", "task files: validate, import");
  tasks_cmd->require_subcommand(1);
  kiln::tasks_validate_args validate;
  auto* val = tasks_cmd->add_subcommand(
      "validate",
      "parse tasks, run the reference, check degeneracy; non-zero exit on any bad task");
  val->add_option("paths", validate.paths, "task files (.toml, .jsonl) or directories")->required();
  val->add_option("--device", validate.device, "cpu, cuda or cuda:N")->capture_default_str();
  val->add_option("--json", validate.json_out, "write one JSON row per task to this file");
  val->add_option("--memory-budget-mib", validate.memory_budget_mib,
                  "largest total tensor size of a task")
      ->capture_default_str();
  val->add_option("--timing-runs", validate.timing_runs, "timed reference runs (median reported)")
      ->capture_default_str();
  val->add_option("--min-ms", validate.min_ms,
                  "fail tasks whose eager time is below this (0 = off)");
  val->add_option("--max-ms", validate.max_ms,
                  "fail tasks whose eager time is above this (0 = off)");
  val->add_flag("--shapes-only", validate.shapes_only, "parse and check shapes only; run nothing");
  val->add_option("--max-ops", validate.max_ops, "longest task (ops) accepted")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  val->add_option("--digest", validate.digest,
                  "JSON rows also carry digests of params, inputs and outputs (N samples per "
                  "output) for tools/torch_baselines.py's fidelity check")
      ->check(CLI::Range(1, 100000));

  auto* imp = tasks_cmd->add_subcommand(
      "import", "KernelBench problems (files, folders, JSON Lines of {\"code\"}) as task files: "
                "spec v1, else the problem's own Model, or refused with the reason: kiln tasks "
                "import --help for the importer's options");
  imp->set_help_flag(); // --help goes to the importer, which owns these options
  imp->allow_extras();
  imp->positionals_at_end(false);

  kiln::eval_args eval;
  auto* ev = app.add_subcommand(
      "eval", "evaluate policies over a suite: pass rate, fast_p, geomean speedups");
  ev->add_option("--policy", eval.policies,
                 "expert, random, sources:DIR, llm or a checkpoint (repeatable)")
      ->capture_default_str();
  ev->add_option("--suite", eval.suites, "task files or directories")->required();
  ev->add_option("--backend", eval.backend, "cpu or cuda")->capture_default_str();
  ev->add_option("--json", eval.json_out, "write results (one entry per policy) here");
  ev->add_option("--cache-dir", eval.cache_dir, "kernel cache (default ~/.cache/kiln)");
  ev->add_option("--seed", eval.seed, "seed of the random policy")->capture_default_str();
  ev->add_option("--devices", eval.devices, "device actors (cpu: executors)")
      ->capture_default_str();
  ev->add_option("--compile-workers", eval.compile_workers, "parallel compiles")
      ->capture_default_str();
  ev->add_option("--parallel", eval.parallel, "tasks in flight")->capture_default_str();
  ev->add_option("--max-tasks", eval.max_tasks, "evaluate only the first N tasks (0 = all)");
  ev->add_option("--max-ops", eval.max_ops, "longest task (ops) accepted")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  ev->add_option("--job-timeout", eval.job_timeout_s,
                 "seconds for each submission's job (0: 120 plus 60 eager calls' worth)")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  ev->add_option("--baselines", eval.baselines,
                 "torch.compile baselines file (tools/torch_baselines.py): compile metrics");
  ev->add_option("--remote", eval.remote,
                 "a pool published by `kiln node` (HOST:PORT, repeatable)");
  ev->add_flag("--no-local", eval.no_local, "with --remote: evaluate on remote pools only");
  ev->add_option("--tls", eval.tls_dir,
                 "with --remote: mutual TLS, DIR holds cert.pem, key.pem and ca.pem");
  ev->add_option("--samples", eval.samples,
                 "episodes per task: a task counts as correct if any is (pass@k), its time is "
                 "the fastest correct one's")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  ev->add_option("--turns", eval.turns,
                 "turns per episode: each outcome is fed back before the next program")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  ev->add_option("--temperature", eval.temperature,
                 "sampling temperature of checkpoints and LLMs (default: greedy for 1 sample, 1 "
                 "for more)");
  ev->add_option("--llm-endpoint", eval.llm_endpoints,
                 "--policy llm: base URL of an OpenAI-compatible server (repeatable: balanced)");
  ev->add_option("--llm-model", eval.llm_model, "--policy llm: the model name to request");
  ev->add_option("--llm-api", eval.llm_api,
                 "--policy llm: endpoint kind: chat (OpenAI chat completions, text), vllm or "
                 "sglang (token ids and log-probs)")
      ->check(CLI::IsMember({"chat", "vllm", "sglang"}))
      ->capture_default_str();
  ev->add_option("--llm-answer-format", eval.llm_answer_format,
                 "--policy llm: kiln (the task as ops, a C++ / CUDA program for Kiln's ABI) or "
                 "kernelbench (the problem's Model source, a ModelNew module in a ```python block; "
                 "tasks imported from KernelBench)")
      ->check(CLI::IsMember({"kiln", "kernelbench"}))
      ->capture_default_str();
  ev->add_option("--llm-max-tokens", eval.llm_max_tokens, "--policy llm: tokens per answer")
      ->check(CLI::Range(16, 1 << 20))
      ->capture_default_str();
  ev->add_option("--llm-timeout", eval.llm_timeout_s, "--policy llm: seconds per HTTP attempt")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  ev->add_option("--llm-in-flight", eval.llm_in_flight,
                 "--policy llm: requests in flight per endpoint")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  ev->add_option("--llm-attempts", eval.llm_attempts,
                 "--policy llm: attempts per request (retries on 429, 5xx, connection loss)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  ev->add_option("--llm-key-env", eval.llm_key_env,
                 "--policy llm: environment variable holding the API key (sent as a bearer "
                 "token when set)")
      ->capture_default_str();

  kiln::serve_args serve;
  auto* sv = app.add_subcommand(
      "serve",
      "the pool as an HTTP service: KernelGYM's /evaluate for RL frameworks (Ctrl-C stops)");
  sv->add_option("--bind", serve.bind, "address to listen on")->capture_default_str();
  sv->add_option("--port", serve.port, "TCP port (0: any free one, printed)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  sv->add_option("--tokens", serve.tokens_file,
                 "bearer tokens, one per line: TOKEN NAME [priority=..] [max_pending=N]");
  sv->add_option("--state", serve.state_dir, "journal and imported problems (kept across restarts)")
      ->capture_default_str();
  sv->add_option("--backend", serve.backend, "cpu or cuda")->capture_default_str();
  sv->add_option("--devices", serve.devices, "device actors (cuda: GPUs, 0 = all)")
      ->capture_default_str();
  sv->add_option("--compile-workers", serve.compile_workers, "parallel compiles")
      ->capture_default_str();
  sv->add_option("--cache-dir", serve.cache_dir, "kernel cache (default ~/.cache/kiln)");
  sv->add_option("--suite", serve.suites, "tasks callers may name as reference_code (repeatable)");
  sv->add_option("--baselines", serve.baselines,
                 "torch.compile times (tools/torch_baselines.py): reference_backend \"compile\"");
  sv->add_option("--remote", serve.remote, "a kiln node (HOST:PORT), repeatable");
  sv->add_flag("--no-local", serve.no_local, "with --remote: no pool in this process");
  sv->add_option("--tls", serve.tls_dir, "with --remote: mutual TLS to the nodes");
  sv->add_option("--capacity", serve.capacity, "accepted, unfinished evaluations; past it 429")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  sv->add_option("--workers", serve.workers,
                 "evaluations in flight (0: 2 x (devices + compile workers))")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  sv->add_option("--max-request-mib", serve.max_request_mib, "larger request bodies get 413")
      ->check(CLI::Range(0.01, 256.0))
      ->capture_default_str();
  sv->add_option("--keep-results-h", serve.keep_results_h, "hours a finished result is kept")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  sv->add_flag("--import-references", serve.import_references,
               "reference_code may be a KernelBench problem source, imported on first use: it "
               "runs as this user outside the sandbox (trusted callers only)");
  sv->add_option("--scale-batch", serve.scale_batch,
                 "problems sent as reference_code: the importer's batch scale")
      ->check(CLI::Range(1e-6, 1.0))
      ->capture_default_str();
  sv->add_option("--import-timeout", serve.import_timeout_s, "seconds to import one problem")
      ->check(CLI::Range(10, 86400))
      ->capture_default_str();
  sv->add_option("--max-turns", serve.max_turns, "episodes (/reset, /step): steps per episode")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  sv->add_option("--max-sessions", serve.max_sessions, "episodes open at once; past it 429")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  sv->add_option("--session-ttl-s", serve.session_ttl_s,
                 "idle seconds before an episode is dropped")
      ->check(CLI::Range(1.0, 1e7))
      ->capture_default_str();

  kiln::node_args node;
  auto* nd = app.add_subcommand(
      "node", "publish this machine's pool for kiln run / kiln eval elsewhere (until Ctrl-C)");
  nd->add_option("--backend", node.backend,
                 "cpu, cuda, or null (answers every job at once: for `kiln bench router`)")
      ->capture_default_str();
  nd->add_option("--devices", node.devices, "device actors (cuda: GPUs, 0 = all)")
      ->capture_default_str();
  nd->add_option("--first-device", node.first_device, "cuda: the first GPU")->capture_default_str();
  nd->add_option("--compile-workers", node.compile_workers, "parallel compiles")
      ->capture_default_str();
  nd->add_option("--cache-dir", node.cache_dir, "kernel cache (default ~/.cache/kiln)");
  nd->add_option("--bind", node.bind,
                 "address to listen on (no authentication: loopback or a trusted network)")
      ->capture_default_str();
  nd->add_option("--port", node.port, "TCP port (0: any free one, printed)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  nd->add_option("--tls", node.tls_dir,
                 "mutual TLS: DIR holds cert.pem, key.pem and ca.pem (clients need the same CA)");
  nd->add_option("--stats-every", node.stats_s, "seconds between stats lines")
      ->capture_default_str();
  nd->add_option("--max-frame-mib", node.max_frame_mib,
                 "without --tls: a peer whose protocol frame claims more is disconnected")
      ->check(CLI::Range(1, 4095))
      ->capture_default_str();
  nd->add_option("--max-peers", node.max_peers, "without --tls: connections past this are refused")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  nd->add_option("--max-peers-per-host", node.max_peers_per_host,
                 "without --tls: connections past this from one address are refused")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();

  kiln::report_args report;
  auto* rep = app.add_subcommand(
      "report", "HTML report (curves, eval tables, speedups) and a Markdown summary of runs");
  rep->add_option("sources", report.sources, "run directories or `kiln eval --json` files")
      ->required();
  rep->add_option("--out", report.out, "the HTML page")->capture_default_str();
  rep->add_option("--markdown", report.markdown, "also write the Markdown summary here");

  kiln::bench_args bench;
  auto* be = app.add_subcommand("bench", "throughput figures: pool, rollout");
  be->add_option("what", bench.what, "pool | rollout | learner | router | serve")->required();
  be->add_flag("--json", bench.json, "print one JSON object");
  be->add_option("--suite", bench.suites, "tasks to run (default: data/suites/level1/cpu)");
  be->add_option("--backend", bench.backend, "cpu or cuda")->capture_default_str();
  be->add_option("--cache-dir", bench.cache_dir, "kernel cache (default ~/.cache/kiln)");
  be->add_option("--devices", bench.devices, "device actors")->capture_default_str();
  be->add_option("--compile-workers", bench.compile_workers, "parallel compiles")
      ->capture_default_str();
  be->add_option("--compiles", bench.compiles, "distinct programs compiled cold")
      ->capture_default_str();
  be->add_option("--jobs", bench.jobs, "verify jobs at saturation")->capture_default_str();
  be->add_option("--in-flight", bench.in_flight, "requests in flight")->capture_default_str();
  be->add_option("--spare-hosts", bench.spare_hosts,
                 "pool: kernel hosts each executor starts ahead of jobs (0: one)")
      ->capture_default_str();
  be->add_option(
      "--remote", bench.remote,
      "router: a `kiln node` (HOST:PORT; --backend null for the router alone), repeated");
  be->add_option("--episodes", bench.episodes, "rollout: concurrent episodes (cpu pool: total)")
      ->capture_default_str();
  be->add_option("--turns", bench.turns, "rollout: turns per episode")->capture_default_str();
  be->add_option("--pool", bench.pool, "rollout: null (instant outcomes) or cpu")
      ->capture_default_str();
  be->add_option("--policy", bench.policy,
                 "rollout: expert or random (with --pool cpu), or llm-mock (the LLM policy and "
                 "its HTTP client against a mock endpoint in a child process, null pool)")
      ->capture_default_str();
  be->add_option("--llm-api", bench.llm_api, "rollout --policy llm-mock: chat, vllm or sglang")
      ->check(CLI::IsMember({"chat", "vllm", "sglang"}))
      ->capture_default_str();
  be->add_option("--llm-latency-ms", bench.llm_latency_ms,
                 "rollout --policy llm-mock: the endpoint's time per answer")
      ->capture_default_str();
  be->add_option("--llm-prompt-tokens", bench.llm_prompt_tokens,
                 "rollout --policy llm-mock: prompt ids /tokenize returns")
      ->capture_default_str();
  be->add_option("--llm-answer-tokens", bench.llm_answer_tokens,
                 "rollout --policy llm-mock: ids (and ~4 bytes of text each) per answer")
      ->capture_default_str();
  be->add_option("--group", bench.group, "rollout with --pool cpu: episodes per task group")
      ->capture_default_str();
  be->add_option("--scheduler", bench.scheduler, "rollout: CAF scheduler, sharing or stealing")
      ->capture_default_str();
  be->add_flag("--learn", bench.learn,
               "learner: smoke-check learning run on a proxy reward (no pool; learner/smoke.hpp)");
  be->add_option("--seconds", bench.seconds, "learner --learn: training time budget")
      ->capture_default_str();
  be->add_option("--clients", bench.clients, "serve: concurrent clients, one level each")
      ->delimiter(',')
      ->check(CLI::Range(1, 20000))
      ->capture_default_str();
  be->add_option("--duration", bench.duration_s, "serve: seconds per level")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  be->add_option("--rate", bench.rate,
                 "serve: requests/s offered in the paced levels, where latency is measured "
                 "below saturation (0: none)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  be->add_option("--queued", bench.queued,
                 "serve: jobs held in the queue to measure memory per queued job (0: skip)")
      ->check(CLI::Range(0, 10000000))
      ->capture_default_str();
  be->add_option("--updates", bench.updates, "learner: updates timed in async and sync mode")
      ->capture_default_str();
  be->add_option("--out", bench.out, "learner --learn: write the curve (JSONL) here");
  be->add_option("--device", bench.device,
                 "learner: where the learner and policy run (cpu, cuda[:N])")
      ->capture_default_str();
  be->add_option("--d-model", bench.d_model, "learner: model width (0 = the default, 128)");
  be->add_option("--layers", bench.n_layers, "learner: transformer layers (0 = the default, 2)");
  be->add_option("--heads", bench.n_heads, "learner: attention heads (0 = the default, 4)");

  kiln::learner_args learner;
  auto* lrn = app.add_subcommand(
      "learner", "the PPO learner as its own process: PULL trajectories, PUB weights");
  lrn->add_option("config", learner.config,
                  "config file ([learner], [tasks]; default: quickstart)");
  lrn->add_option("--set", learner.overrides, "override a config key: KEY=VALUE (TOML value)");
  lrn->add_option("--pull", learner.pull,
                  "trajectory PULL endpoint (tcp://*:5557 for other hosts: needs [curve] keys)");
  lrn->add_option("--pub", learner.pub,
                  "weights PUB endpoint (tcp://*:5558 for other hosts: needs [curve] keys)");
  lrn->add_option("--resume", learner.resume, "latest, or a checkpoint file");

  kiln::keys_args keys;
  auto* kys = app.add_subcommand(
      "keys", "CurveZMQ key pairs for [curve]: NAME.key (secret, 0600) and NAME.pub per name");
  kys->add_option("names", keys.names, "one key pair per name (e.g. learner rollout1)")->required();
  kys->add_option("--out", keys.out, "folder for the key files")->capture_default_str();

  kiln::synth_args synth;
  auto* syn =
      app.add_subcommand("synth", "synthesize a training dataset of fused tasks (JSON Lines)");
  syn->add_option("--out", synth.out, "output .jsonl")->required();
  syn->add_option("--count", synth.count, "tasks to produce")->capture_default_str();
  syn->add_option("--seed", synth.seed, "random seed (same seed, same dataset)")
      ->capture_default_str();
  syn->add_option("--dedup-against", synth.dedup_against,
                  "suites (files or directories) whose task graphs must not reappear");
  syn->add_option("--device", synth.device, "device for the eager filters")->capture_default_str();
  syn->add_option("--min-ms", synth.min_ms, "eager-time window, lower end")->capture_default_str();
  syn->add_option("--max-ms", synth.max_ms, "eager-time window, upper end")->capture_default_str();
  syn->add_option("--max-ops", synth.max_ops, "longest composition (1-8)")
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
  syn->add_option("--stats", synth.stats_out, "write statistics JSON here");
  syn->add_flag("--no-run", synth.no_run, "skip the eager filters (structure and shapes only)");

  // Internal: spawned by executor_client, not for people, so hidden from the help (empty group).
  kiln::executor_args exec;
  auto* exe = app.add_subcommand("executor", "sandboxed job process of a device (internal)");
  exe->group("");
  exe->add_option("--fd", exec.fd, "protocol socket")->capture_default_str();
  exe->add_option("--scratch", exec.scratch, "private scratch directory")->required();
  exe->add_option("--address-space-mib", exec.address_space_mib, "RLIMIT_AS")
      ->capture_default_str();
  exe->add_option("--file-size-mib", exec.file_size_mib, "RLIMIT_FSIZE")->capture_default_str();
  exe->add_option("--threads", exec.threads, "kernel and LibTorch threads")->capture_default_str();
  exe->add_option("--kernel-host", exec.kernel_host, "kiln-kernel-host binary");
  exe->add_option("--spare-hosts", exec.spare_hosts, "kernel hosts started ahead of jobs");
  exe->add_option("--cgroup", exec.cgroup, "this executor's cgroup folder");
  exe->add_option("--kernel-scratch", exec.kernel_scratch, "where kernel hosts' folders go");
  exe->add_flag("!--kernel-keeps-privileges", exec.kernel_drop_privileges,
                "kernel hosts keep root (control tests)");
  exe->add_flag("!--no-kernel-landlock", exec.kernel_landlock, "kernel hosts without landlock");
  exe->add_flag("!--no-kernel-seccomp", exec.kernel_seccomp, "kernel hosts without seccomp");
  exe->add_flag("!--no-net-isolation", exec.isolate_network, "skip the network namespace");
  exe->add_flag("!--no-fs-restriction", exec.restrict_fs, "skip landlock");
  exe->add_flag("--drop-privileges", exec.drop_privileges, "when root, run as nobody");
  exe->add_option("--cuda-device", exec.cuda_device, "serve the cuda backend on this device")
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // Logs go to stderr: stdout carries results (tables, summaries, --json objects) for pipes.
  spdlog::set_default_logger(spdlog::stderr_color_mt("kiln"));
  spdlog::set_level(spdlog::level::from_str(common.log_level));
  spdlog::set_pattern("%H:%M:%S.%e %^%l%$ %v");
  if (common.peer_timeout_ms > 0 && common.peer_timeout_ms <= common.peer_heartbeat_ms) {
    spdlog::error("--peer-timeout-ms {} must exceed --peer-heartbeat-ms {} (or be 0), else every "
                  "quiet peer times out",
                  common.peer_timeout_ms, common.peer_heartbeat_ms);
    return 2;
  }
  if (*run_cmd) return kiln::cmd_run(common, run);
  if (*val) return kiln::cmd_tasks_validate(common, validate);
  if (*imp) return kiln::cmd_tasks_import(imp->remaining());
  if (*syn) return kiln::cmd_synth(common, synth);
  if (*ev) return kiln::cmd_eval(common, eval);
  if (*nd) return kiln::cmd_node(common, node);
#ifdef KILN_HAVE_SERVE
  if (*sv) return kiln::cmd_serve(common, serve);
#else
  if (*sv) {
    spdlog::error("kiln serve: this build has no HTTP service (it needs Boost's headers and "
                  "libsqlite3-dev: apt-get install libboost-dev libsqlite3-dev, then rebuild)");
    return 2;
  }
#endif
  if (*rep) return kiln::cmd_report(common, report);
  if (*be) {
    if (bench.suites.empty() && bench.what != "learner")
      bench.suites = {KILN_SOURCE_DIR "/data/suites/level1/cpu"};
    return kiln::cmd_bench(common, bench);
  }
  if (*lrn) return kiln::cmd_learner(common, learner);
  if (*kys) return kiln::cmd_keys(keys);
  if (*exe) return kiln::executor_main(exec);
  return 2;
}
