// The policy model's shape: one definition for the learner and the policy servers, so a checkpoint
// written by one loads in the other. LibTorch stays out of this header (model_impl.hpp has it).
//   config --make_model--> decoder-only transformer + value head --> logits, values
#pragma once

#include <cstdint>
#include <string>

namespace kiln {

struct model_config {
  int32_t vocab = 0; // 0: rollout/token_space.hpp vocab_size()
  int32_t d_model = 128;
  int32_t n_layers = 2;
  int32_t n_heads = 4;
  int32_t d_ff = 0;       // 0: 4 * d_model
  int32_t max_len = 1024; // longest context: the learner rejects longer trajectories, the policy
                          // clamps positions past it (and warns)
  bool tied = true;       // LM head shares the token embedding
};

// "d_model=128 n_layers=2 ..." and back: stored in checkpoints so a loader rebuilds the model.
std::string to_string(const model_config& c);
bool parse_model_config(const std::string& text, model_config& out);

} // namespace kiln
