#include "learner/model_impl.hpp"

#include "rollout/token_space.hpp"

#include <cmath>
#include <sstream>

namespace kiln {

std::string to_string(const model_config& c) {
  std::ostringstream o;
  o << "vocab=" << c.vocab << " d_model=" << c.d_model << " n_layers=" << c.n_layers
    << " n_heads=" << c.n_heads << " d_ff=" << c.d_ff << " max_len=" << c.max_len
    << " tied=" << (c.tied ? 1 : 0);
  return o.str();
}

bool parse_model_config(const std::string& text, model_config& out) {
  std::istringstream in(text);
  std::string kv;
  model_config c;
  int seen = 0;
  while (in >> kv) {
    auto eq = kv.find('=');
    if (eq == std::string::npos) return false;
    auto key = kv.substr(0, eq);
    long v = 0;
    try {
      v = std::stol(kv.substr(eq + 1));
    } catch (...) {
      return false;
    }
    auto i32 = static_cast<int32_t>(v);
    if (key == "vocab")
      c.vocab = i32;
    else if (key == "d_model")
      c.d_model = i32;
    else if (key == "n_layers")
      c.n_layers = i32;
    else if (key == "n_heads")
      c.n_heads = i32;
    else if (key == "d_ff")
      c.d_ff = i32;
    else if (key == "max_len")
      c.max_len = i32;
    else if (key == "tied")
      c.tied = v != 0;
    else
      return false;
    ++seen;
  }
  if (seen != 7) return false;
  out = c;
  return true;
}

std::string token_space_mismatch(const model_config& c) {
  if (c.vocab == vocab_size()) return {};
  return "its token space has " + std::to_string(c.vocab) + " words, this kiln's has " +
         std::to_string(vocab_size()) +
         " (the op vocabulary changed since it was written): retrain, or use the kiln that wrote "
         "it";
}

std::string resolve(model_config& c) {
  if (c.vocab <= 0) c.vocab = vocab_size();
  if (c.d_ff <= 0) c.d_ff = 4 * c.d_model;
  if (c.d_model <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.max_len <= 1)
    return "model sizes must be positive (max_len > 1)";
  if (c.d_model % c.n_heads != 0) return "d_model must be a multiple of n_heads";
  if (c.vocab < program_token_count()) return "vocab smaller than the program vocabulary";
  return {};
}

namespace {

// x @ w^T + b. On CPU this LibTorch's fp32 GEMM goes to whatever BLAS it was built with (Debian's
// 1.13 here: reference netlib BLAS, ~4-6 GFLOP/s), while oneDNN convolutions run at 80-160
// GFLOP/s: so a linear layer is computed as a 1x1 convolution over rows grouped 16 at a time.
// Same maths (differences ~1e-5); autograd flows through conv2d. Other devices: torch::linear.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  if (!x.is_cpu() || x.scalar_type() != torch::kFloat || !at::hasMKLDNN())
    return torch::linear(x, w, b);
  const int64_t in = x.size(-1), out = w.size(0), t = x.numel() / in;
  // oneDNN builds (JITs) a primitive per input shape, which costs more than the convolution
  // itself when every batch has a new length: rows go through in blocks of a fixed shape
  // (1024 rows; up to 256 rows, multiples of 16 for decode steps). Rows are grouped g to an
  // image, 16 or more images a block: LibTorch sends smaller single-threaded 1x1 convolutions
  // to its slow im2col path (netlib GEMM again) instead of oneDNN.
  const int64_t block = t > 256 ? 1024 : (t + 15) / 16 * 16;
  const int64_t g = block / 16 < 16 ? block / 16 : 16;
  const int64_t tp = (t + block - 1) / block * block;
  auto flat = x.reshape({t, in});
  if (tp != t) flat = torch::constant_pad_nd(flat, {0, 0, 0, tp - t});
  auto w4 = w.view({out, in, 1, 1});
  std::vector<torch::Tensor> ys;
  for (int64_t r = 0; r < tp; r += block) {
    auto xb = flat.narrow(0, r, block).view({block / g, g, in}).permute({0, 2, 1}).unsqueeze(-1);
    ys.push_back(torch::conv2d(xb, w4, b).squeeze(-1).permute({0, 2, 1}).reshape({block, out}));
  }
  auto y = ys.size() == 1 ? ys[0] : torch::cat(ys);
  if (tp != t) y = y.narrow(0, 0, t);
  auto shape = x.sizes().vec();
  shape.back() = out;
  return y.reshape(shape);
}

torch::Tensor linear(const torch::Tensor& x, const torch::nn::Linear& l) {
  return linear(x, l->weight, l->bias);
}

} // namespace

block_impl::block_impl(const model_config& c) : heads(c.n_heads), head_dim(c.d_model / c.n_heads) {
  ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})));
  ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})));
  qkv = register_module("qkv", torch::nn::Linear(c.d_model, 3 * c.d_model));
  proj = register_module("proj", torch::nn::Linear(c.d_model, c.d_model));
  fc1 = register_module("fc1", torch::nn::Linear(c.d_model, c.d_ff));
  fc2 = register_module("fc2", torch::nn::Linear(c.d_ff, c.d_model));
}

torch::Tensor block_impl::forward(const torch::Tensor& x, const kv_pair& past,
                                  const torch::Tensor& mask, kv_pair* fresh) {
  auto b = x.size(0), n = x.size(1), d = x.size(2);
  auto h = ln1(x);
  auto parts =
      linear(h, qkv).view({b, n, 3, heads, head_dim}).permute({2, 0, 3, 1, 4}); // 3,B,H,N,dh
  auto q = parts[0], k = parts[1], v = parts[2];
  if (fresh) *fresh = {k, v};
  if (past.k.defined() && past.k.size(2) > 0) {
    k = torch::cat({past.k, k}, 2);
    v = torch::cat({past.v, v}, 2);
  }
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim));
  scores = scores.masked_fill(mask.logical_not(), -1e30);
  auto att = torch::softmax(scores, -1);
  auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({b, n, d});
  auto out = x + linear(y, proj);
  return out + linear(torch::gelu(linear(ln2(out), fc1)), fc2);
}

policy_model_impl::policy_model_impl(const model_config& c) : cfg(c) {
  tok_emb = register_module("tok_emb", torch::nn::Embedding(c.vocab, c.d_model));
  pos_emb = register_module("pos_emb", torch::nn::Embedding(c.max_len, c.d_model));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int i = 0; i < c.n_layers; ++i) blocks->push_back(block(c));
  ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})));
  if (!c.tied)
    head = register_module(
        "head", torch::nn::Linear(torch::nn::LinearOptions(c.d_model, c.vocab).bias(false)));
  value_head = register_module("value_head", torch::nn::Linear(c.d_model, 1));
}

torch::Tensor clamp_positions(const torch::Tensor& pos, int64_t max_len) {
  return pos.clamp_max(max_len - 1);
}

model_output policy_model_impl::forward(const torch::Tensor& tokens, const torch::Tensor& positions,
                                        const std::vector<kv_pair>& past, const torch::Tensor& mask,
                                        bool want_kv) {
  auto x = tok_emb(tokens) + pos_emb(clamp_positions(positions, cfg.max_len));
  model_output out;
  if (want_kv) out.fresh.resize(blocks->size());
  for (size_t i = 0; i < blocks->size(); ++i) {
    kv_pair none;
    const kv_pair& p = past.empty() ? none : past[i];
    x = blocks[i]->as<block_impl>()->forward(x, p, mask, want_kv ? &out.fresh[i] : nullptr);
  }
  auto h = ln_f(x);
  out.logits = cfg.tied ? linear(h, tok_emb->weight, torch::Tensor()) : linear(h, head);
  out.values = linear(h, value_head).squeeze(-1);
  return out;
}

model_output policy_model_impl::forward_padded(const torch::Tensor& tokens,
                                               const torch::Tensor& lengths) {
  auto b = tokens.size(0), n = tokens.size(1);
  auto opt = torch::TensorOptions().dtype(torch::kLong).device(tokens.device());
  auto pos = torch::arange(n, opt).unsqueeze(0).expand({b, n});
  auto q = torch::arange(n, opt).view({1, n, 1});
  auto k = torch::arange(n, opt).view({1, 1, n});
  // Key j is visible to query i when j <= i and j is a real token (padded queries still see the
  // real keys, so no softmax row is empty).
  auto mask = (k <= q).logical_and(k < lengths.view({b, 1, 1})).unsqueeze(1);
  return forward(tokens, pos, {}, mask, false);
}

policy_model make_model(model_config c, uint64_t seed) {
  auto why = resolve(c);
  TORCH_CHECK(why.empty(), why);
  torch::manual_seed(seed);
  policy_model m(c);
  torch::NoGradGuard ng;
  for (auto& p : m->named_parameters()) {
    const auto& name = p.key();
    auto& t = p.value();
    if (name.find("ln") != std::string::npos) continue; // LayerNorm: ones / zeros
    if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0)
      t.zero_();
    else
      t.normal_(0.0, 0.02);
  }
  return m;
}

std::string save_weights(policy_model& m) {
  std::ostringstream out;
  torch::serialize::OutputArchive a;
  m->save(a);
  a.save_to(out);
  return out.str();
}

void load_weights(policy_model& m, const std::string& bytes) {
  std::istringstream in(bytes);
  torch::serialize::InputArchive a;
  a.load_from(in, m->tok_emb->weight.device()); // weights trained on a GPU load on a CPU server
  m->load(a);
}

expected<policy_model> load_model_checkpoint(const std::string& path, int64_t* version) {
  try {
    torch::serialize::InputArchive a, model_a;
    a.load_from(path, torch::Device(torch::kCPU));
    torch::Tensor t;
    a.read("model_config", t);
    auto c = t.contiguous();
    std::string text(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel()));
    model_config mc;
    if (!parse_model_config(text, mc)) return error{path + ": bad model_config '" + text + "'"};
    if (auto why = token_space_mismatch(mc); !why.empty()) return error{path + ": " + why};
    auto m = make_model(mc, 0);
    a.read("model", model_a);
    m->load(model_a);
    if (version) {
      a.read("version", t);
      *version = t.item<int64_t>();
    }
    return m;
  } catch (const std::exception& e) {
    return error{"cannot load checkpoint '" + path + "': " + e.what()};
  }
}

torch::Tensor masked_log_softmax(const torch::Tensor& logits, const torch::Tensor& mask,
                                 double temperature) {
  auto p = mask.size(1);
  auto l = logits.narrow(1, 0, p);
  if (temperature > 0 && temperature != 1.0) l = l / temperature;
  l = l.masked_fill(mask.to(torch::kBool).logical_not(), -std::numeric_limits<float>::infinity());
  return torch::log_softmax(l, -1);
}

} // namespace kiln
