// Evaluation of policies over tasks through the pool, shared by `kiln eval` and `kiln run`:
//   tasks x policy --pool (baseline, then evaluate the policy's program)--> rows --> summary JSON
#pragma once

#include "data/expected.hpp"
#include "data/task_spec.hpp"
#include "pool/device_pool.hpp"
#include "pool/pool_router.hpp"
#include "rollout/baselines.hpp"
#include "rollout/eval_metrics.hpp"

#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace kiln {

// $KILN_CACHE_DIR, $XDG_CACHE_HOME/kiln, ~/.cache/kiln or /tmp/kiln-cache.
std::string default_cache_dir();

// A pool for `backend` whose kernel cache, ABI header and executor scratch live under cache_dir.
// cuda: GPUs first_device .. first_device + devices - 1 (devices 0: every GPU from first_device).
expected<pool_config> make_pool_config(const std::string& backend, const std::string& cache_dir,
                                       int devices, int compile_workers, int first_device = 0);

// The pool a run or an evaluation sends its jobs to: this process's pool alone, or this process's
// pool (unless `local` is false) and the pools of `kiln node`s at `remote` (HOST:PORT) behind a
// router. Remote pools must serve the same backend. `sys` needs the middleman when remote is set.
expected<caf::actor> make_pool_actor(caf::actor_system& sys, const pool_config& cfg,
                                     const std::vector<std::string>& remote, bool local = true);

// Warns (once per process) when the baselines were measured on another kind of device than the
// pool's: compile speedups would then compare two machines.
void warn_if_other_device(const compile_baselines* b, const pool_config& pool);

struct policy_spec {
  std::string name; // "expert" | "random" | a checkpoint path | "sources:DIR"
  bool random = false;
  std::string checkpoint; // a learner checkpoint: its model writes programs greedily
  // Free-form source written elsewhere (an external model, a person): DIR/<task><ext> for the
  // backend's source kinds (submission/submission_kind.hpp: .cpp on cpu, .cu on cuda). A task
  // without exactly one such file fails.
  std::string sources_dir;
  bool llm = false; // an LLM behind an HTTP endpoint: always through episodes (eval_episodes.hpp)
};
// "expert", "random", "sources:DIR" or an existing checkpoint file; an error naming what else was
// given.
expected<policy_spec> parse_policy(const std::string& name);

// A row with what the task alone decides: name, level, compulsory bytes, memory-bound or not.
eval_row task_row(const task& t);

// Eager baselines measured once per task and shared by every policy evaluated with it, so their
// rows compare against the same eager time (small tasks' eager times move by several x between
// measurements on a busy 2-core machine). Thread-safe.
class eager_times {
public:
  // The task's baseline outcome, measured by `measure` on first use.
  outcome get(const std::string& task, const std::function<outcome()>& measure);

private:
  std::mutex mu_;
  std::map<std::string, outcome> by_task_;
};

// Evaluates every task with `parallel` requests in flight; logs one line per task as it finishes.
// `baselines` (may be null) fills each row's torch.compile time where the file has the task;
// `eager` (may be null) shares eager baselines across calls. `job_timeout_s` > 0 bounds each
// submission's job (else 120 s plus 60 eager calls' worth).
std::vector<eval_row> evaluate_policy(pool_handle& pool, const std::vector<task>& tasks,
                                      const policy_spec& p, uint64_t seed, int parallel,
                                      const compile_baselines* baselines = nullptr,
                                      eager_times* eager = nullptr, double job_timeout_s = 0);

// {"policy", "suite", "backend", "overall": {...}, "levels": {"1": {...}}, "tasks": [...]}
nlohmann::json summary_json(const std::string& policy, const std::string& suite,
                            const std::string& backend, const std::vector<eval_row>& rows);
// Prints the overall and per-level lines of a summary_json to stdout.
void print_summary(const nlohmann::json& summary);

} // namespace kiln
