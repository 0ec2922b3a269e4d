// The `kiln` subcommands as plain functions of their parsed arguments; kiln_main.cpp owns the
// command line (CLI11) and calls these. Each returns the process exit code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

struct common_args {
  std::string log_level = "info";
  int threads = 0; // 0 = all cores
  // kiln node / eval --remote: the middleman's heartbeat and dead-peer timeout (actor_settings)
  int peer_heartbeat_ms = 1000;
  int peer_timeout_ms = 5000;
};

struct tasks_validate_args {
  std::vector<std::string> paths;
  std::string device = "cpu";
  std::string json_out;
  int64_t memory_budget_mib = 16384;
  int max_ops = 4096; // longer tasks are refused (check_limits::max_ops)
  int timing_runs = 3;
  double min_ms = 0, max_ms = 0;
  bool shapes_only = false; // parse and check only; no reference runs
  int64_t digest = 0;       // > 0: JSON rows carry digests with this many samples per output
};
int cmd_tasks_validate(const common_args& common, const tasks_validate_args& args);

// kiln tasks import --from kernelbench ...: runs tools/kernelbench_import.py (PyTorch traces the
// problems) with the system's Python, this kiln as its --kiln; `args` are passed through as given.
int cmd_tasks_import(const std::vector<std::string>& args);

struct run_args {
  std::string config; // empty = the embedded configs/quickstart.toml
  std::vector<std::string> overrides;
};
int cmd_run(const common_args& common, const run_args& args);

struct synth_args {
  std::string out;
  int64_t count = 6000;
  uint64_t seed = 1;
  std::vector<std::string> dedup_against;
  std::string device = "cpu";
  double min_ms = 0.05, max_ms = 50;
  std::string stats_out;
  bool no_run = false; // skip the eager filters (structure only)
  int max_ops = 5;
};
int cmd_synth(const common_args& common, const synth_args& args);

// `kiln executor` (hidden): the sandboxed job process of a device, spoken to over fd 3 by
// executor_client. Defined in executor/executor.cpp; the arguments in executor/executor.hpp.
struct executor_args;
int executor_main(const executor_args& args);

// `kiln node`: this machine's pool, published for `kiln run` / `kiln eval` on other machines
// (app/cmd_node.cpp).
struct node_args {
  std::string backend = "cpu";
  int devices = 1; // cuda: 0 = every GPU from first_device
  int first_device = 0;
  int compile_workers = 2;
  std::string cache_dir;
  std::string bind = "127.0.0.1"; // CAF's BASP has no authentication: loopback or a trusted net
  int port = 4710;                // 0: any free port (printed)
  double stats_s = 30;            // seconds between stats lines
  std::string tls_dir;            // mutual TLS: cert.pem, key.pem, ca.pem (enable_tls)
  int max_frame_mib = 64;         // plaintext: larger BASP frames close the connection
  int max_peers = 256;            // plaintext: connections past this are refused
  int max_peers_per_host = 64;    // plaintext: and past this many from one address
};
int cmd_node(const common_args& common, const node_args& args);

struct serve_args {
  std::string bind = "127.0.0.1";
  int port = 10907;        // KernelGYM's default, so its clients' defaults reach Kiln
  std::string tokens_file; // bearer tokens (serve/tokens.hpp); required beyond loopback
  std::string state_dir = "kiln-serve"; // journal.sqlite and imported problems
  std::string backend = "cpu";
  int devices = 1;
  int compile_workers = 2;
  std::string cache_dir;
  std::vector<std::string> suites; // tasks callers may name as reference_code
  std::string baselines;           // torch.compile times (reference_backend "compile")
  std::vector<std::string> remote; // kiln nodes beside or instead of the local pool
  bool no_local = false;
  std::string tls_dir;
  int capacity = 256; // accepted, unfinished evaluations; past it 429
  int workers = 0;    // evaluations in flight; 0: 2 x (devices + compile workers)
  double max_request_mib = 1;
  double keep_results_h = 24;
  bool import_references = false; // reference_code may be a problem source (runs unsandboxed)
  double scale_batch = 1.0;       // imported problems' batch scale (the importer's --scale-batch)
  int import_timeout_s = 600;
  int max_turns = 4; // OpenEnv episodes: steps per episode unless /reset asks otherwise
  int max_sessions = 4096;
  double session_ttl_s = 3600; // idle episodes dropped after this
};
int cmd_serve(const common_args& common, const serve_args& args);

struct eval_args {
  std::vector<std::string> policies = {"expert"};
  std::vector<std::string> suites;
  std::string backend = "cpu";
  std::string json_out;
  std::string cache_dir; // empty: $KILN_CACHE_DIR, $XDG_CACHE_HOME/kiln or ~/.cache/kiln
  uint64_t seed = 1;
  int devices = 1;
  int compile_workers = 2;
  int parallel = 3; // tasks in flight (compiles overlap device work)
  int64_t max_tasks = 0;
  int max_ops = 4096;              // longer tasks are refused (check_limits::max_ops)
  double job_timeout_s = 0;        // a submission's job; 0: 120 s plus 60 eager calls' worth
  std::string baselines;           // torch.compile baselines file (rollout/baselines.hpp)
  std::vector<std::string> remote; // pools of `kiln node`s (HOST:PORT), beside or instead of ours
  bool no_local = false;           // with remote: no pool in this process
  std::string tls_dir;             // with remote: connect over mutual TLS (enable_tls)
  int samples = 1;                 // episodes per task (pass@k); > 1 or turns > 1: via episodes
  int turns = 1;                   // turns per episode (outcomes fed back as observations)
  double temperature = -1;         // checkpoints: < 0 = greedy for 1 sample, 1.0 for more
  // --policy llm: an LLM behind an HTTP endpoint (llm/llm_policy_server.hpp)
  std::vector<std::string> llm_endpoints; // base URLs
  std::string llm_model;
  std::string llm_api = "chat";
  std::string llm_answer_format = "kiln";
  int llm_max_tokens = 8192;
  double llm_timeout_s = 300;
  int llm_in_flight = 256;
  int llm_attempts = 4;
  std::string llm_key_env = "OPENAI_API_KEY"; // the bearer token's environment variable
};
int cmd_eval(const common_args& common, const eval_args& args);

struct bench_args {
  std::string what = "pool"; // pool (rollout, learner: later)
  bool json = false;         // one JSON object on stdout
  std::vector<std::string> suites;
  std::string backend = "cpu";
  std::string cache_dir;
  uint64_t seed = 1;
  int devices = 1;
  int compile_workers = 2;
  int compiles = 24; // distinct random programs for compile latency
  int jobs = 200;    // verify jobs at saturation (router: jobs in all)
  int in_flight = 8;
  int spare_hosts = 0;             // pool: kernel hosts each executor starts ahead (0: its default)
  std::vector<std::string> remote; // router (app/cmd_bench_router.cpp): the nodes it spreads over
  // rollout (app/cmd_bench_rollout.cpp)
  int episodes = 10000;          // concurrent episodes (null pool) / episodes in total (cpu pool)
  int turns = 16;                // turns per episode
  std::string pool = "null";     // null: instant outcomes; cpu: the real pool
  std::string policy = "expert"; // expert | random (cpu pool only) | llm-mock
  // --policy llm-mock (app/cmd_bench_rollout_llm.cpp): the mock endpoint's answers
  std::string llm_api = "chat";
  double llm_latency_ms = 1000;
  int llm_prompt_tokens = 6144, llm_answer_tokens = 2048;
  int group = 4;                     // episodes per task group (cpu pool)
  std::string scheduler = "sharing"; // rollout: CAF scheduler policy, sharing | stealing
  // learner (app/cmd_bench_learner.cpp)
  bool learn = false;         // the smoke-check learning run (proxy reward, see learner/smoke.hpp)
  int seconds = 120;          // --learn: training time budget
  int updates = 10;           // async vs sync: updates timed in each mode
  std::string out;            // --learn: JSONL curve written here
  std::string device = "cpu"; // learner and policy: cpu | cuda | cuda:N
  int d_model = 0, n_layers = 0, n_heads = 0; // model size (0: learner_config's default)
  // serve (app/cmd_bench_serve.cpp)
  std::vector<int> clients{1, 100, 1000}; // concurrent clients, one level each
  double duration_s = 5;                  // seconds per level
  int queued = 10000;                     // jobs held queued to measure memory per job
  double rate = 2500;                     // paced levels: requests/s offered (0: none)
};
int cmd_bench(const common_args& common, const bench_args& args);
int cmd_bench_rollout(const common_args& common, const bench_args& args);
int cmd_bench_learner(const common_args& common, const bench_args& args);
int cmd_bench_router(const common_args& common, const bench_args& args);
int cmd_bench_serve(const common_args& common, const bench_args& args);

// `kiln learner`: the learner as its own process (app/cmd_learner.cpp).
struct learner_args {
  std::string config; // empty = the embedded configs/quickstart.toml ([learner], [tasks])
  std::vector<std::string> overrides;
  std::string pull, pub; // override learner.pull_endpoint / pub_endpoint
  std::string resume;    // override learner.resume ("latest" or a file)
};
int cmd_learner(const common_args& common, const learner_args& args);

// `kiln keys NAME... --out DIR`: CurveZMQ key pairs for the [curve] keys (app/cmd_keys.cpp).
struct keys_args {
  std::vector<std::string> names;
  std::string out = "keys";
};
int cmd_keys(const keys_args& args);

// `kiln report RUN_DIR|EVAL.json ... --out report.html` (app/cmd_report.cpp).
struct report_args {
  std::vector<std::string> sources;
  std::string out = "report.html";
  std::string markdown; // also write the Markdown summary here (it always goes to stdout)
};
int cmd_report(const common_args& common, const report_args& args);

// Applies the thread count to LibTorch's intra-op pool (0 = hardware cores); returns it.
int configure_threads(int threads);

} // namespace kiln
