// The coordinator: measures each task's eager baseline once (one `baseline` job per task, cached
// for every episode of the task), then admits episodes in groups under the staleness bound
// (rollout/admission.hpp), counts what ends, and admits again as episodes finish or the policy
// version moves. Episodes are linked to it: one that dies without reporting is counted and
// replaced, and they all end when the coordinator ends (shutdown never waits on an episode).
//   coordinator --baseline jobs--> pool; --spawn--> episodes --(episode_done)--> coordinator
//   policy server --(version)--> coordinator
#pragma once

#include "rollout/admission.hpp"
#include "rollout/episode.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <memory>
#include <vector>

namespace kiln {

struct coordinator_config {
  admission_config admission;
  episode_config episode;
  bool measure_baselines = true; // false: tasks keep the eager_ms they came with
  std::chrono::milliseconds baseline_timeout{600'000};
  uint64_t first_episode_id = 1;
  // Evaluation: the summary also lists every episode ("episode_rows": task, status, reward,
  // turns, best_kernel_ms, first_correct_turn, error) and each task's eager baseline
  // ("eager_ms": {task: ms}).
  bool keep_episodes = false;
};

// Messages:
//   (run_atom) -> std::string        answered with the summary JSON once admission.total
//                                    episodes ended (total must be > 0)
//   (version_atom, int64_t)          a newer policy version (the policy server sends these)
//   (server_stats_atom) -> std::string   progress JSON (running, started, accepted, statuses)
// peers.coordinator is ignored (the coordinator puts itself there).
caf::actor spawn_coordinator(caf::actor_system& sys,
                             std::vector<std::shared_ptr<rollout_task>> tasks,
                             const coordinator_config& cfg, episode_peers peers);

} // namespace kiln
