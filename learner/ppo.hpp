// PPO as CUDA Agent ran it, with AReaL's decoupled objective for stale samples.
//   per-token rewards, values --gae--> advantages, returns
//   logp_new, logp_prox, logp_behav, advantages --ppo_loss--> loss + metrics
// Token level throughout: every model token (loss_mask = 1) of the batch weighs the same.
#pragma once

#include "learner/learner_config.hpp"

#include <ATen/ATen.h>

#include <cstddef>
#include <string>

namespace kiln {

// GAE over one trajectory's model tokens in order (observation tokens are skipped: the sequence of
// decisions is the sequence of model tokens). values[i] is V(state before token i); the value after
// the last token is 0 (episode over). adv / ret must hold n floats.
void gae(const float* rewards, const float* values, size_t n, double gamma, double lambda,
         float* adv, float* ret);

struct ppo_loss_inputs {
  at::Tensor logp_new;   // [M] under the weights being trained (requires grad)
  at::Tensor logp_prox;  // [M] under the learner weights at batch time (no grad)
  at::Tensor logp_behav; // [M] what the rollout recorded
  at::Tensor adv;        // [M]
  at::Tensor values;     // [M] value predictions (requires grad)
  at::Tensor returns;    // [M]
  at::Tensor entropy;    // [M] entropy of the masked distribution (optional, may be undefined)
};

struct ppo_loss_result {
  at::Tensor loss; // scalar to backprop
  double pg_loss = 0, vf_loss = 0, entropy = 0;
  double clip_frac = 0;    // share of tokens where the clipped branch was taken
  double approx_kl = 0;    // k3 estimate KL(prox || new)
  double behav_kl = 0;     // k3 estimate KL(behav || prox): how stale the samples are
  double behav_w_mean = 0; // mean importance weight after the cap
  double behav_capped = 0; // share of tokens whose weight hit the cap
};

ppo_loss_result ppo_loss(const ppo_loss_inputs& in, const ppo_config& c);

} // namespace kiln
