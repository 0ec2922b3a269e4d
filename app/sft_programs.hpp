// Rejection sampling for the sft stage (learner.sft_source = "best_of_k"): K random masked
// programs per training task and the expert's, through the pool; the fastest verified one is what
// the policy is fine-tuned on, so warm-up starts from the speed sampling finds, not one heuristic.
//   tasks --random x K, expert x 1 (episodes through the pool)--> fastest correct program per task
#pragma once

#include "app/eval_episodes.hpp"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kiln {

struct sft_programs {
  std::vector<std::string> programs; // per task: the chosen program, "" for the expert's
  nlohmann::json summary;            // tasks, random_faster, geomean_over_expert, per-task rows
};

// `o` gives the pool checks, parallelism and seed; samples are set here.
expected<sft_programs> choose_sft_programs(caf::actor_system& sys, const caf::actor& pool,
                                           backend_kind backend, const std::vector<task>& tasks,
                                           int candidates, episode_eval_options o);

} // namespace kiln
