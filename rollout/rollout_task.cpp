#include "rollout/rollout_task.hpp"

#include "jobs/job.hpp"
#include "rollout/token_space.hpp"

namespace kiln {

std::shared_ptr<rollout_task> make_rollout_task(const task& t, const rollout_job_options& o) {
  auto r = std::make_shared<rollout_task>();
  r->spec = t;
  r->grammar = std::make_shared<const grammar_tables>(t);
  r->prompt.push_back(token_of(special_token::bos));
  auto tt = task_tokens(t);
  r->prompt.insert(r->prompt.end(), tt.begin(), tt.end());
  r->prompt.push_back(token_of(special_token::task_end));
  job j;
  j.kind = job_kind::evaluate;
  j.spec = t;
  j.verify.checks = o.verify_checks;
  j.timeout_s = o.timeout_s;
  j.timing.time_cap_ms = o.timing_cap_ms;
  r->job_msgpack = encode(j);
  j.kind = job_kind::baseline;
  r->baseline_job_msgpack = encode(j);
  return r;
}

} // namespace kiln
