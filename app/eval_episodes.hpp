// Evaluation through the rollout engine, for several samples and several turns per task: the
// same coordinator, episode actors, policy server and pool as training, with no learner.
//   tasks x k --coordinator (eager baseline once a task)--> episodes --policy / pool--> turns
//   --best_of_samples--> one eval row a task (pass@k, fastest correct kernel, turns used)
#pragma once

#include "app/eval_runner.hpp"
#include "llm/llm_policy_server.hpp"
#include "rollout/rollout_task.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

namespace kiln {

struct episode_eval_options {
  int samples = 1; // episodes per task
  int turns = 1;   // turns per episode (the outcome of one is the observation of the next)
  uint64_t seed = 1;
  int parallel = 3;         // episodes in flight
  double temperature = -1;  // checkpoints; < 0: greedy for one sample, 1.0 for several
  rollout_job_options jobs; // the pool's checks and timing for each program
  llm_policy_config llm;    // --policy llm (endpoints, model, limits)
};

// `sys` must have the rollout messages registered (actors/messages.hpp). Progress goes to the log.
expected<std::vector<eval_row>>
evaluate_policy_episodes(caf::actor_system& sys, const caf::actor& pool, backend_kind backend,
                         const std::vector<task>& tasks, const policy_spec& p,
                         const episode_eval_options& o, const compile_baselines* baselines);

} // namespace kiln
