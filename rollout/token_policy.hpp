// The interface every token-writing policy serves behind (random masked, expert, the learner's
// transformer): the policy server calls step() once per decode step with every active sequence,
// so sequences join and leave between steps (continuous batching).
//   policy server --slots (context, grammar mask)--> step --token, logprob per slot--> server
#pragma once

#include "data/task_spec.hpp"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace kiln {

struct decode_slot {
  uint64_t seq_id = 0;        // stable while the sequence lives (KV caches)
  const task* spec = nullptr; // the episode's task
  const std::vector<int32_t>* context =
      nullptr;            // the whole context so far, this turn's prefix last
  int32_t turn_start = 0; // index in *context where this turn's program began
  // Valid next program tokens (program_token_count() long); nullptr when the policy said it
  // does not read masks (uses_mask() false): the server still rejects a token off the grammar.
  const std::vector<uint8_t>* mask = nullptr;
  // Written by step():
  int32_t token = -1;
  float logprob = 0; // log-probability of `token` under the policy, after masking
};

class token_policy {
public:
  virtual ~token_policy() = default;
  virtual std::string name() const = 0;
  // The weights' version; tokens written by step() carry it.
  virtual int64_t version() const = 0;
  // Fills token and logprob of every slot; a token must be allowed by the slot's mask.
  virtual void step(std::vector<decode_slot>& batch, std::mt19937_64& rng) = 0;
  // The sequence ended (or was aborted): free whatever step() kept for it.
  virtual void release(uint64_t seq_id) {}
  // Called between steps: swap in newer weights if some arrived; true when the version changed.
  virtual bool refresh() { return false; }
  // False for policies that never read slot.mask (a replayed program): the server then skips
  // building masks, which is most of its per-token cost for such policies.
  virtual bool uses_mask() const { return true; }
  // True when step() does heavy compute or waits for a device: the policy server then gets its own
  // thread (a detached actor) instead of holding one of the scheduler's.
  virtual bool blocking() const { return false; }
};

} // namespace kiln
