// One task as the rollout engine carries it: the spec, its grammar tables, its prompt tokens, the
// evaluate job encoded once for the pool, and its baselines (measured once per task by the
// coordinator, never per episode). Shared read-only by every episode of the task.
//   task --make_rollout_task--> rollout_task --(baseline job, once)--> eager_ms --> episodes
#pragma once

#include "data/task_spec.hpp"
#include "rollout/grammar_state.hpp"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

struct rollout_task {
  task spec;
  std::shared_ptr<const grammar_tables> grammar;
  std::vector<int32_t> prompt;      // [BOS] task tokens [TASK_END]
  std::string job_msgpack;          // the evaluate job, encoded once (jobs/job.hpp)
  std::string baseline_job_msgpack; // the eager baseline job
  std::optional<double> eager_ms;   // eager baseline median; unset: speedups are 0
  std::optional<double> compile_ms; // torch.compile baseline median, when one is known
};
using rollout_task_ptr = std::shared_ptr<const rollout_task>;

struct rollout_job_options {
  int verify_checks = 5;
  double timeout_s = 60;
  double timing_cap_ms = 1000; // trials stop once they took this long (or reached the CV target)
};

// `t` must be checked (shapes inferred: data/task_check.hpp).
std::shared_ptr<rollout_task> make_rollout_task(const task& t, const rollout_job_options& o = {});

} // namespace kiln
