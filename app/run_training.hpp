// The training phase of `kiln run`: every role in one process.
//   tasks --rollout tasks--> coordinator --episodes--> policy server (model | expert | random)
//     --programs--> pool --outcomes--> episodes --trajectories--> sink ==ZeroMQ==> learner
//     --weights (in-process slot)--> policy server;  progress lines + rollout.jsonl, learner.jsonl
#pragma once

#include "app/run_config.hpp"
#include "data/expected.hpp"
#include "data/task_spec.hpp"
#include "rollout/baselines.hpp"

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace kiln {

// Runs cfg.rollout_episodes episodes over `tasks` (checked) and returns the summary: the
// coordinator's counts, the learner's version and last checkpoint. Checkpoints and metrics go to
// run_dir (checkpoints/, learner.jsonl, rollout.jsonl).
// `baselines` (may be null): torch.compile times, which make reward tier 3 reachable.
expected<nlohmann::json> run_training(const run_config& cfg, const std::vector<task>& tasks,
                                      const std::string& run_dir, int threads,
                                      const compile_baselines* baselines);

} // namespace kiln
