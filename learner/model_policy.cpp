#include "learner/model_policy.hpp"

#include "learner/model_impl.hpp"
#include "rollout/token_space.hpp"

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include <unordered_map>

namespace kiln {

namespace {

struct seq_cache {
  std::vector<kv_pair> kv; // per layer, [H, len, dh]
  int64_t len = 0;         // context tokens already in the cache
};

} // namespace

struct model_policy::impl {
  model_policy_options opt;
  policy_model model{nullptr};
  int64_t version = -1; // fresh weights no learner published: trajectories would be rejected
  std::unordered_map<uint64_t, seq_cache> caches;
  std::unique_ptr<zmq::context_t> zctx;
  std::unique_ptr<zmq::socket_t> sub;
  bool warned_len = false;
};

model_policy::model_policy(std::unique_ptr<impl> p) : p_(std::move(p)) {}
model_policy::~model_policy() = default;

expected<std::unique_ptr<model_policy>> model_policy::create(const model_policy_options& opt) {
  auto p = std::make_unique<impl>();
  p->opt = opt;
  if (!opt.checkpoint.empty()) {
    auto m = load_model_checkpoint(opt.checkpoint, &p->version);
    if (!m) return m.err();
    p->model = *m;
    p->opt.model = p->model->cfg;
  } else {
    if (auto why = resolve(p->opt.model); !why.empty()) return error{"model: " + why};
    p->model = make_model(p->opt.model, opt.init_seed);
  }
  p->model->eval();
  if (!opt.sub_endpoint.empty()) {
    try {
      p->zctx = std::make_unique<zmq::context_t>(1);
      p->sub = std::make_unique<zmq::socket_t>(*p->zctx, zmq::socket_type::sub);
      p->sub->set(zmq::sockopt::conflate, 1); // only the newest weights matter
      p->sub->set(zmq::sockopt::linger, 0);
      p->sub->set(zmq::sockopt::subscribe, "KLNW");
      p->sub->connect(opt.sub_endpoint);
    } catch (const zmq::error_t& e) {
      return error{"model policy: SUB '" + opt.sub_endpoint + "': " + e.what()};
    }
  }
  std::unique_ptr<model_policy> out(new model_policy(std::move(p)));
  out->refresh(); // an in-process learner has published already: start from its weights
  return out;
}

std::string model_policy::name() const { return p_->opt.name; }
int64_t model_policy::version() const { return p_->version; }
size_t model_policy::cached_sequences() const { return p_->caches.size(); }
const model_config& model_policy::config() const { return p_->opt.model; }
void model_policy::release(uint64_t seq_id) { p_->caches.erase(seq_id); }

bool model_policy::refresh() {
  auto& s = *p_;
  std::shared_ptr<const weight_blob> newest;
  if (s.opt.slot) {
    auto w = s.opt.slot->latest();
    if (w && w->version != s.version) newest = w;
  }
  if (s.sub) {
    zmq::message_t msg;
    try {
      while (s.sub->recv(msg, zmq::recv_flags::dontwait)) {
        auto w = decode_weight_message(static_cast<const char*>(msg.data()), msg.size());
        if (w && w->version != s.version && (!newest || w->version > newest->version))
          newest = std::make_shared<weight_blob>(std::move(*w));
      }
    } catch (const zmq::error_t& e) {
      spdlog::warn("model policy: SUB receive failed: {}", e.what());
    }
  }
  if (!newest) return false;
  try {
    load_weights(s.model, newest->bytes);
  } catch (const std::exception& e) {
    spdlog::warn("model policy: weights version {} rejected: {}", newest->version, e.what());
    return false;
  }
  s.version = newest->version;
  s.caches.clear();
  return true;
}

void model_policy::step(std::vector<decode_slot>& batch, std::mt19937_64& rng) {
  auto& s = *p_;
  if (batch.empty()) return;
  torch::NoGradGuard ng;
  const int64_t b = static_cast<int64_t>(batch.size());
  const int64_t layers = s.opt.model.n_layers, heads = s.opt.model.n_heads;
  const int64_t dh = s.opt.model.d_model / heads;
  const int64_t pc = program_token_count();
  std::vector<seq_cache*> cache(batch.size());
  std::vector<int64_t> past(batch.size()), fresh(batch.size());
  int64_t max_past = 0, max_new = 1;
  for (size_t i = 0; i < batch.size(); ++i) {
    auto& c = s.caches[batch[i].seq_id];
    const auto n = static_cast<int64_t>(batch[i].context->size());
    if (c.len > n) c = seq_cache{}; // the context shrank: not the sequence we cached
    if (c.len == n && n > 0) {
      // Nothing new (a repeated step): re-feed the last token to get its distribution again.
      for (auto& kv : c.kv) {
        kv.k = kv.k.narrow(1, 0, c.len - 1);
        kv.v = kv.v.narrow(1, 0, c.len - 1);
      }
      --c.len;
    }
    cache[i] = &c;
    past[i] = c.len;
    fresh[i] = n - c.len;
    max_past = std::max(max_past, past[i]);
    max_new = std::max(max_new, fresh[i]);
    if (!s.warned_len && n > s.opt.model.max_len) {
      s.warned_len = true;
      spdlog::warn("model policy: context of {} tokens exceeds max_len {}", n, s.opt.model.max_len);
    }
  }
  auto tokens = torch::zeros({b, max_new}, torch::kLong);
  auto pos = torch::zeros({b, max_new}, torch::kLong);
  auto mask = torch::zeros({b, 1, max_new, max_past + max_new}, torch::kBool);
  {
    auto tok = tokens.accessor<int64_t, 2>();
    auto ps = pos.accessor<int64_t, 2>();
    auto mk = mask.accessor<bool, 4>();
    for (int64_t i = 0; i < b; ++i) {
      const auto& ctx = *batch[static_cast<size_t>(i)].context;
      for (int64_t q = 0; q < max_new; ++q) {
        if (q < fresh[i]) tok[i][q] = ctx[static_cast<size_t>(past[i] + q)];
        ps[i][q] = past[i] + std::min(q, fresh[i] - 1);
        for (int64_t j = 0; j < past[i]; ++j) mk[i][0][q][j] = true;
        for (int64_t j = 0; j <= q && j < fresh[i]; ++j) mk[i][0][q][max_past + j] = true;
      }
    }
  }
  std::vector<kv_pair> past_kv;
  if (max_past > 0) {
    past_kv.resize(static_cast<size_t>(layers));
    for (int64_t l = 0; l < layers; ++l) {
      auto k = torch::zeros({b, heads, max_past, dh});
      auto v = torch::zeros({b, heads, max_past, dh});
      for (int64_t i = 0; i < b; ++i)
        if (past[i] > 0) {
          k[i].narrow(1, 0, past[i]).copy_(cache[static_cast<size_t>(i)]->kv[l].k);
          v[i].narrow(1, 0, past[i]).copy_(cache[static_cast<size_t>(i)]->kv[l].v);
        }
      past_kv[static_cast<size_t>(l)] = {k, v};
    }
  }
  auto out = s.model->forward(tokens, pos, past_kv, mask, true);
  auto last = torch::tensor(std::vector<int64_t>(fresh.begin(), fresh.end()), torch::kLong) - 1;
  auto logits = out.logits.index({torch::arange(b), last}); // [B, V]
  // Extend each cache with this step's keys / values.
  for (int64_t i = 0; i < b; ++i) {
    auto& c = *cache[static_cast<size_t>(i)];
    if (c.kv.empty()) c.kv.resize(static_cast<size_t>(layers));
    for (int64_t l = 0; l < layers; ++l) {
      auto k = out.fresh[static_cast<size_t>(l)].k[i].narrow(1, 0, fresh[i]);
      auto v = out.fresh[static_cast<size_t>(l)].v[i].narrow(1, 0, fresh[i]);
      auto& kv = c.kv[static_cast<size_t>(l)];
      kv.k = kv.k.defined() && kv.k.size(1) > 0 ? torch::cat({kv.k, k}, 1) : k.contiguous();
      kv.v = kv.v.defined() && kv.v.size(1) > 0 ? torch::cat({kv.v, v}, 1) : v.contiguous();
    }
    c.len += fresh[i];
  }
  auto allowed = torch::zeros({b, pc}, torch::kUInt8);
  {
    auto* a = allowed.data_ptr<uint8_t>();
    for (int64_t i = 0; i < b; ++i) {
      const auto* m = batch[static_cast<size_t>(i)].mask;
      for (int64_t t = 0; t < pc; ++t)
        a[i * pc + t] =
            m ? (static_cast<size_t>(t) < m->size() && (*m)[static_cast<size_t>(t)]) : 1;
    }
  }
  const double temp = s.opt.temperature;
  auto logp = masked_log_softmax(logits, allowed, temp > 0 ? temp : 1.0).contiguous();
  auto* lp = logp.data_ptr<float>();
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int64_t i = 0; i < b; ++i) {
    auto& slot = batch[static_cast<size_t>(i)];
    const float* row = lp + i * pc;
    int32_t best = -1;
    if (temp <= 0) {
      for (int32_t t = 0; t < pc; ++t)
        if (std::isfinite(row[t]) && (best < 0 || row[t] > row[best])) best = t;
    } else {
      double u = unit(rng), acc = 0;
      int32_t last_valid = -1;
      for (int32_t t = 0; t < pc; ++t) {
        if (!std::isfinite(row[t])) continue;
        last_valid = t;
        acc += std::exp(static_cast<double>(row[t]));
        if (u < acc) {
          best = t;
          break;
        }
      }
      if (best < 0) best = last_valid; // rounding: the cumulative sum ended just below u
    }
    slot.token = best;
    slot.logprob = best >= 0 ? row[best] : 0.0f;
  }
}

} // namespace kiln
