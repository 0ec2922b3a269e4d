// The episode actor: one multi-turn agent loop on one task, for token policies (the kernel
// language) and text policies (LLMs writing free-form source) alike.
//   context = [BOS] task [TASK_END]; per turn: [PROGRAM] --policy server--> program tokens
//   --pool--> outcome --> [OBS] ... [OBS_END], reward; then --sink--> trajectory, --> coordinator
// Statuses: completed (a turn reached the best reward reachable), truncated (turn limit),
// aborted (the episode deadline passed), failed (a policy / pool request failed or timed out, or
// an outcome could not be decoded). Every wait is bounded: CAF 0.17 never answers a dropped
// promise. The bounds are enforced by a per-episode watchdog tick rather than CAF request
// timeouts: those cost a clock-thread insert and cancel per request (measured here: the
// bare message pattern ran at 95-140k steps/s with them, 210k without), the tick costs one timer
// per episode per watchdog interval. A timeout fires within one interval after it is due.
#pragma once

#include "rollout/reward.hpp"
#include "rollout/rollout_task.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <chrono>
#include <string>

namespace kiln {

struct episode_config {
  int max_turns = 4;
  int max_program_tokens = 256;
  std::chrono::milliseconds policy_timeout{60'000}; // per turn, the policy server's answer
  std::chrono::milliseconds pool_timeout{300'000};  // per turn, the pool's outcome
  std::chrono::milliseconds episode_timeout{3'600'000};
  std::chrono::milliseconds sink_timeout{3'600'000}; // waiting for the learner (backpressure)
  std::chrono::milliseconds watchdog_interval{1'000};
  bool stop_at_best = true; // end the episode once a turn earns max_turn_reward
  // A text policy (an LLM, llm/llm_policy_server.hpp): the prompt and the observations travel as
  // text, the answer carries its own submission, and the trajectory's tokens are the model's own
  // (none when the endpoint returns no token ids).
  bool text_policy = false;
  reward_config reward;
};

struct episode_peers {
  caf::actor policy_server, pool, sink, coordinator; // sink may be null: nothing is streamed
};

struct episode_args {
  uint64_t id = 0;
  std::string group;
  rollout_task_ptr task;
  std::shared_ptr<const episode_config> cfg;
  episode_peers peers;
};

// Spawns the episode; it starts at once and reports (episode_done_atom, episode_summary) to
// peers.coordinator before it exits.
caf::actor spawn_episode(caf::actor_system& sys, episode_args args);

} // namespace kiln
