// The transformer itself (LibTorch): only learner/*.cpp and tests include this header.
//   tokens, positions, KV cache, attention mask --policy_model--> logits, values, new K/V
// Attention is written out (matmul + masked softmax) because scaled_dot_product_attention is not in
// LibTorch 1.13; one code path serves the full forward (training) and incremental decode.
#pragma once

#include "data/expected.hpp"
#include "learner/model.hpp"

#include <torch/torch.h>

#include <vector>

namespace kiln {

struct kv_pair {
  torch::Tensor k, v; // [B, H, T, head_dim]
};

struct block_impl : torch::nn::Module {
  explicit block_impl(const model_config& c);
  // x [B, N, D]; past (k, v may be undefined) [B, H, P, dh]; mask [B, 1, N, P + N] (true = attend).
  // Returns the block output; writes this step's K/V ([B, H, N, dh]) to *fresh.
  torch::Tensor forward(const torch::Tensor& x, const kv_pair& past, const torch::Tensor& mask,
                        kv_pair* fresh);

  int64_t heads, head_dim;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE_IMPL(block, block_impl);

struct model_output {
  torch::Tensor logits;       // [B, N, V]
  torch::Tensor values;       // [B, N]
  std::vector<kv_pair> fresh; // per layer [B, H, N, dh], only when asked for
};

struct policy_model_impl : torch::nn::Module {
  explicit policy_model_impl(const model_config& c);

  // General form: tokens/positions [B, N] int64; past per layer (or empty); mask [B,1,N,P+N] bool.
  model_output forward(const torch::Tensor& tokens, const torch::Tensor& positions,
                       const std::vector<kv_pair>& past, const torch::Tensor& mask, bool want_kv);
  // Training form: right-padded tokens [B, N], true lengths [B]: causal, no cache.
  model_output forward_padded(const torch::Tensor& tokens, const torch::Tensor& lengths);

  model_config cfg;
  torch::nn::Embedding tok_emb{nullptr}, pos_emb{nullptr};
  torch::nn::ModuleList blocks;
  torch::nn::LayerNorm ln_f{nullptr};
  torch::nn::Linear head{nullptr}; // untied only
  torch::nn::Linear value_head{nullptr};
};
TORCH_MODULE_IMPL(policy_model, policy_model_impl);

// Fills cfg.vocab / d_ff defaults and checks divisibility; empty string when fine.
std::string resolve(model_config& c);
// Why a checkpoint's model cannot read this kiln's tokens (word ids shift when ops are added);
// empty when its vocabulary is this kiln's.
std::string token_space_mismatch(const model_config& c);
policy_model make_model(model_config c, uint64_t seed);

// Positions past max_len - 1 clamp to it (both in training and in decode, so they agree).
torch::Tensor clamp_positions(const torch::Tensor& pos, int64_t max_len);

// Weights only (what is published to policy servers): torch serialization into bytes.
std::string save_weights(policy_model& m);
void load_weights(policy_model& m, const std::string& bytes);

// The model of a learner checkpoint (its "model_config" and "model" entries).
// *version (when given) receives the checkpoint's policy version.
expected<policy_model> load_model_checkpoint(const std::string& path, int64_t* version = nullptr);

// Masked log-softmax over program tokens: logits [M, V] (full vocab), mask [M, P] uint8/bool over
// program tokens; returns logp [M, P] (-inf off the mask) after dividing by temperature.
torch::Tensor masked_log_softmax(const torch::Tensor& logits, const torch::Tensor& mask,
                                 double temperature);

} // namespace kiln
