// The policy server: one actor that batches generation requests from many episodes and runs a
// token_policy over them one decode step at a time (continuous batching: a request joins the
// batch at the next step, a finished program leaves it at once). Each sequence keeps its context
// and an incremental grammar cursor between turns; tokens carry the policy version that wrote
// them; token_policy::refresh() runs between steps, so new weights swap in without stopping.
//   episodes --(generate, gen_request)--> server --step(batch)--> token_policy --> gen_reply
#pragma once

#include "rollout/token_policy.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <chrono>
#include <memory>

namespace kiln {

struct policy_server_config {
  int max_batch = 16384;       // sequences per decode step; more wait for a slot
  uint64_t seed = 1;           // sampling
  int refresh_every_steps = 1; // how often refresh() is called between steps
  // While no sequence is generating, refresh() is still polled this often: with eta = 0 the
  // coordinator waits for a new version before it admits anything, so an idle server must
  // still notice new weights.
  std::chrono::milliseconds idle_refresh{50};
};

// Messages (actors/messages.hpp):
//   (generate_atom, gen_request) -> gen_reply   one turn's program; errors: the seq is already
//                                               generating, a token off the grammar mask
//   (release_atom, uint64_t seq)                 the episode ended: free its sequence
//   (version_atom) -> int64_t                    the policy's current version
//   (subscribe_atom, caf::actor)                 (version_atom, int64_t) sent on every change
//   (server_stats_atom) -> std::string           JSON: steps, tokens, mean batch, sequences
caf::actor spawn_policy_server(caf::actor_system& sys, std::unique_ptr<token_policy> policy,
                               const policy_server_config& cfg = {});

} // namespace kiln
