// The learner's transformer behind the token_policy interface, for policy servers, on cpu or cuda.
//   step(slots) --new context tokens + KV cache rows--> batched forward --masked sampling-->
//   token, logprob per slot;  refresh() --weight_slot / ZeroMQ SUB--> newer weights swapped in
// The KV cache is one row per live sequence in preallocated per-layer tensors on the device: a
// decode step gathers the batch's rows once per layer and scatters the new keys / values back,
// so a token costs O(1) cache writes however long its context. LibTorch stays behind the pimpl.
#pragma once

#include "channels/curve_config.hpp"
#include "data/expected.hpp"
#include "learner/model.hpp"
#include "learner/weights.hpp"
#include "rollout/token_policy.hpp"

#include <memory>
#include <string>

namespace kiln {

struct model_policy_options {
  // Without a checkpoint: fresh weights from init_seed, version -1 until the first refresh (the
  // learner rejects tokens of version -1: they come from no published policy).
  model_config model;
  std::string checkpoint; // a learner checkpoint to start from (its model config wins)
  uint64_t init_seed = 1;
  double temperature = 1.0;          // 0: greedy (log-probs then at temperature 1)
  std::shared_ptr<weight_slot> slot; // in-process weights (kiln run)
  std::string sub_endpoint;          // or ZeroMQ SUB to the learner's PUB
  curve_config curve;                // the SUB is a CURVE client when it has keys
  std::string name = "model";
  std::string device = "cpu"; // cpu | cuda | cuda:N (weights load onto it, whatever wrote them)
};

class model_policy : public token_policy {
public:
  static expected<std::unique_ptr<model_policy>> create(const model_policy_options& opt);
  ~model_policy() override;

  std::string name() const override;
  int64_t version() const override;
  // Runs on the calling thread and, on cuda, waits for the device: serve it from a detached actor.
  bool blocking() const override { return true; }
  // Every slot needs a context whose length grew since its last step (the sampled token, or a new
  // turn's observation and prompt tokens); a slot whose mask allows nothing gets token -1.
  void step(std::vector<decode_slot>& batch, std::mt19937_64& rng) override;
  void release(uint64_t seq_id) override;
  // Swaps in the newest published weights; KV caches are dropped (they were computed with the
  // old weights), so the next step re-reads each context under the new policy.
  bool refresh() override;

  size_t cached_sequences() const; // sequences with keys / values in the cache
  const model_config& config() const;

private:
  struct impl;
  explicit model_policy(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

} // namespace kiln
