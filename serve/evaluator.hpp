// One evaluation, blocking, on the honest pool: the reference (a served task by name, or a
// KernelBench problem imported on first use), its eager time (measured once per task), the
// submission's kind, then the pool's verdict in KernelGYM's fields. Thread-safe: the job board's
// workers call it side by side, and the pool orders the device work.
//   evaluation_request --reference--> task --pool: baseline, evaluate--> evaluation_result
#pragma once

#include "data/task_spec.hpp"
#include "jobs/job.hpp"
#include "rollout/baselines.hpp"
#include "serve/evaluation.hpp"
#include "serve/problem_import.hpp"

#include <map>
#include <mutex>
#include <string>

namespace kiln {

class pool_handle;

class evaluator {
public:
  // `served`: tasks callers may name as reference_code; `baselines` may be null.
  evaluator(pool_handle& pool, std::vector<task> served, problem_importer& problems,
            const compile_baselines* baselines);
  evaluation_result run(const evaluation_request& r);
  // A served task by name, else the problem source imported (blocking on a first import).
  expected<task> resolve_reference(const std::string& code);

private:
  outcome eager(const task& t);

  pool_handle& pool_;
  std::map<std::string, task> served_;
  problem_importer& problems_;
  const compile_baselines* baselines_;
  std::mutex mu_;
  std::map<std::string, outcome> eager_; // by task name
};

// The submission text for the pool: a marked source as it is, a ModelNew module as the
// kernelbench kind; anything else is refused with the forms that are taken.
expected<std::string> submission_text(const std::string& kernel_code);

} // namespace kiln
