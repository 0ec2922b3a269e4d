#include "learner/model_policy.hpp"

#include "channels/channel_guard.hpp"
#include "learner/model_impl.hpp"
#include "rollout/token_space.hpp"

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include <unordered_map>

namespace kiln {

// Named, not anonymous: impl holds these and has external linkage (a unity build,
// which includes this file into another, warns of that).
namespace model_policy_parts {

struct cache_row {
  int64_t row = 0; // index into the cache tensors' first dimension
  int64_t len = 0; // context tokens already in the cache
};

} // namespace model_policy_parts
using model_policy_parts::cache_row;

struct model_policy::impl {
  model_policy_options opt;
  policy_model model{nullptr};
  torch::Device dev{torch::kCPU};
  int64_t version = -1; // fresh weights no learner published: trajectories would be rejected
  // Per layer [rows_cap, heads, time_cap, head_dim]; both capacities grow by doubling.
  std::vector<torch::Tensor> cache_k, cache_v;
  int64_t rows_cap = 0, time_cap = 0;
  std::unordered_map<uint64_t, cache_row> rows;
  std::vector<int64_t> free_rows;
  std::unique_ptr<zmq::context_t> zctx; // destroyed last: after the socket and the guard
  std::unique_ptr<channel_guard> guard;
  std::unique_ptr<zmq::socket_t> sub;
  bool warned_len = false;

  cache_row& row_of(uint64_t seq) {
    auto it = rows.find(seq);
    if (it != rows.end()) return it->second;
    cache_row r;
    if (!free_rows.empty()) {
      r.row = free_rows.back();
      free_rows.pop_back();
    } else {
      r.row = static_cast<int64_t>(rows.size());
    }
    return rows.emplace(seq, r).first->second;
  }

  void reserve(int64_t need_rows, int64_t need_time) {
    if (need_rows <= rows_cap && need_time <= time_cap) return;
    int64_t nr = std::max({need_rows, rows_cap, int64_t{8}});
    if (need_rows > rows_cap) nr = std::max(need_rows, 2 * rows_cap);
    int64_t nt = std::max({need_time, time_cap, int64_t{64}});
    if (need_time > time_cap) nt = std::max((need_time + 63) / 64 * 64, 2 * time_cap);
    const int64_t layers = opt.model.n_layers, heads = opt.model.n_heads;
    const int64_t dh = opt.model.d_model / heads;
    auto o = torch::TensorOptions().dtype(torch::kFloat).device(dev);
    for (int64_t l = 0; l < layers; ++l) {
      auto k = torch::zeros({nr, heads, nt, dh}, o), v = torch::zeros({nr, heads, nt, dh}, o);
      if (rows_cap > 0) {
        k.narrow(0, 0, rows_cap).narrow(2, 0, time_cap).copy_(cache_k[static_cast<size_t>(l)]);
        v.narrow(0, 0, rows_cap).narrow(2, 0, time_cap).copy_(cache_v[static_cast<size_t>(l)]);
      }
      if (cache_k.size() <= static_cast<size_t>(l)) {
        cache_k.push_back(k);
        cache_v.push_back(v);
      } else {
        cache_k[static_cast<size_t>(l)] = k;
        cache_v[static_cast<size_t>(l)] = v;
      }
    }
    rows_cap = nr;
    time_cap = nt;
  }
};

model_policy::model_policy(std::unique_ptr<impl> p) : p_(std::move(p)) {}
model_policy::~model_policy() = default;

expected<std::unique_ptr<model_policy>> model_policy::create(const model_policy_options& opt) {
  auto p = std::make_unique<impl>();
  p->opt = opt;
  try {
    p->dev = torch::Device(opt.device.empty() ? std::string("cpu") : opt.device);
  } catch (const std::exception& e) {
    std::string what = e.what();
    return error{"policy device '" + opt.device + "': " + what.substr(0, what.find('\n'))};
  }
  if (p->dev.is_cuda() && !torch::cuda::is_available())
    return error{"policy device '" + opt.device + "': this LibTorch has no usable CUDA device"};
  if (!opt.checkpoint.empty()) {
    auto m = load_model_checkpoint(opt.checkpoint, &p->version);
    if (!m) return m.err();
    p->model = *m;
    p->opt.model = p->model->cfg;
  } else {
    if (auto why = resolve(p->opt.model); !why.empty()) return error{"model: " + why};
    p->model = make_model(p->opt.model, opt.init_seed);
  }
  p->model->to(p->dev);
  p->model->eval();
  if (!opt.sub_endpoint.empty()) {
    p->zctx = std::make_unique<zmq::context_t>(1);
    auto g = channel_guard::create(*p->zctx, opt.curve, "model policy SUB");
    if (!g) return error{"model policy: " + g.message()};
    p->guard = std::move(*g);
    try {
      p->sub = std::make_unique<zmq::socket_t>(*p->zctx, zmq::socket_type::sub);
      p->sub->set(zmq::sockopt::conflate, 1); // only the newest weights matter
      p->sub->set(zmq::sockopt::linger, 0);
      p->sub->set(zmq::sockopt::subscribe, "KLNW");
      if (auto st = p->guard->secure(*p->sub, opt.sub_endpoint, false); !st)
        return error{"model policy: SUB: " + st.message()};
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
size_t model_policy::cached_sequences() const {
  size_t n = 0;
  for (const auto& [seq, r] : p_->rows) n += r.len > 0;
  return n;
}
const model_config& model_policy::config() const { return p_->opt.model; }

void model_policy::release(uint64_t seq_id) {
  auto it = p_->rows.find(seq_id);
  if (it == p_->rows.end()) return;
  p_->free_rows.push_back(it->second.row);
  p_->rows.erase(it);
}

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
  for (auto& [seq, r] : s.rows) r.len = 0; // computed with the old weights: re-read each context
  return true;
}

void model_policy::step(std::vector<decode_slot>& batch, std::mt19937_64& rng) {
  auto& s = *p_;
  if (batch.empty()) return;
  torch::NoGradGuard ng;
  const int64_t b = static_cast<int64_t>(batch.size());
  const int64_t layers = s.opt.model.n_layers;
  const int64_t pc = program_token_count();
  std::vector<int64_t> row(batch.size()), past(batch.size()), fresh(batch.size());
  int64_t max_past = 0, max_new = 1, max_len = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    auto& c = s.row_of(batch[i].seq_id);
    const auto n = static_cast<int64_t>(batch[i].context->size());
    if (c.len > n) c.len = 0;         // the context shrank: not the sequence we cached
    if (c.len == n && n > 0) --c.len; // nothing new: re-feed the last token for its distribution
    row[i] = c.row;
    past[i] = c.len;
    fresh[i] = n - c.len;
    max_past = std::max(max_past, past[i]);
    max_new = std::max(max_new, fresh[i]);
    max_len = std::max(max_len, n);
    if (!s.warned_len && n > s.opt.model.max_len) {
      s.warned_len = true;
      spdlog::warn("model policy: context of {} tokens exceeds max_len {}", n, s.opt.model.max_len);
    }
  }
  s.reserve(static_cast<int64_t>(s.rows.size() + s.free_rows.size()), max_len);

  // Host-side inputs (small), then one transfer each.
  auto host_long = torch::TensorOptions().dtype(torch::kLong);
  auto tokens = torch::zeros({b, max_new}, host_long);
  auto pos = torch::zeros({b, max_new}, host_long);
  std::vector<int64_t> dst_row, dst_time, src_seq, src_q; // where this step's K/V go
  {
    auto tok = tokens.accessor<int64_t, 2>();
    auto ps = pos.accessor<int64_t, 2>();
    for (int64_t i = 0; i < b; ++i) {
      const auto& ctx = *batch[static_cast<size_t>(i)].context;
      for (int64_t q = 0; q < max_new; ++q) {
        if (q < fresh[i]) {
          tok[i][q] = ctx[static_cast<size_t>(past[i] + q)];
          dst_row.push_back(row[i]);
          dst_time.push_back(past[i] + q);
          src_seq.push_back(i);
          src_q.push_back(q);
        }
        ps[i][q] = past[i] + std::min(q, fresh[i] - 1);
      }
    }
  }
  auto to_dev = [&](const std::vector<int64_t>& v) {
    return torch::tensor(v, host_long).to(s.dev);
  };
  auto rows_t = to_dev(row), past_t = to_dev(past), fresh_t = to_dev(fresh);
  // Key j (past keys first, then this step's) is visible to query q when it is one of the
  // sequence's cached tokens, or one of its new tokens at or before q.
  auto dopt = torch::TensorOptions().dtype(torch::kLong).device(s.dev);
  auto q_idx = torch::arange(max_new, dopt).view({1, max_new, 1});
  auto j_idx = torch::arange(max_past + max_new, dopt).view({1, 1, max_past + max_new});
  auto jn = j_idx - max_past;
  auto mask =
      (j_idx < past_t.view({b, 1, 1}))
          .logical_or(jn.ge(0).logical_and(jn <= q_idx).logical_and(jn < fresh_t.view({b, 1, 1})))
          .unsqueeze(1);
  std::vector<kv_pair> past_kv;
  if (max_past > 0)
    for (int64_t l = 0; l < layers; ++l)
      past_kv.push_back(
          {s.cache_k[static_cast<size_t>(l)].narrow(2, 0, max_past).index_select(0, rows_t),
           s.cache_v[static_cast<size_t>(l)].narrow(2, 0, max_past).index_select(0, rows_t)});
  auto out = s.model->forward(tokens.to(s.dev), pos.to(s.dev), past_kv, mask, true);
  auto logits = out.logits.index({torch::arange(b, dopt), fresh_t - 1}); // [B, V]
  // Scatter this step's keys / values into their rows: [B, H, N, dh] -> [M, H, dh] at (row, time).
  {
    auto dr = to_dev(dst_row), dt = to_dev(dst_time), ss = to_dev(src_seq), sq = to_dev(src_q);
    using torch::indexing::Slice;
    for (int64_t l = 0; l < layers; ++l) {
      const auto& f = out.fresh[static_cast<size_t>(l)];
      auto k = f.k.permute({0, 2, 1, 3}).index({ss, sq}); // [M, H, dh]
      auto v = f.v.permute({0, 2, 1, 3}).index({ss, sq});
      s.cache_k[static_cast<size_t>(l)].index_put_({dr, Slice(), dt}, k);
      s.cache_v[static_cast<size_t>(l)].index_put_({dr, Slice(), dt}, v);
    }
  }
  for (int64_t i = 0; i < b; ++i) s.rows[batch[static_cast<size_t>(i)].seq_id].len += fresh[i];

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
  auto logp = masked_log_softmax(logits, allowed.to(s.dev), temp > 0 ? temp : 1.0)
                  .to(torch::kCPU)
                  .contiguous();
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
