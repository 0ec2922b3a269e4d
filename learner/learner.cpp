#include "learner/learner.hpp"

#include "learner/advantages.hpp"
#include "learner/model_impl.hpp"
#include "learner/ppo.hpp"
#include "learner/weight_publisher.hpp"
#include "rollout/token_space.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

namespace kiln {

namespace fs = std::filesystem;

std::string to_json(const update_metrics& m) {
  nlohmann::json j = {{"stage", m.stage},
                      {"version", m.version},
                      {"step", m.step},
                      {"trajectories", m.trajectories},
                      {"tokens", m.tokens},
                      {"model_tokens", m.model_tokens},
                      {"loss", m.loss},
                      {"pg_loss", m.pg_loss},
                      {"vf_loss", m.vf_loss},
                      {"entropy", m.entropy},
                      {"clip_frac", m.clip_frac},
                      {"approx_kl", m.approx_kl},
                      {"update_kl", m.update_kl >= 0 ? nlohmann::json(m.update_kl) : nullptr},
                      {"behav_kl", m.behav_kl},
                      {"behav_w_mean", m.behav_w_mean},
                      {"behav_capped", m.behav_capped},
                      {"lag_mean", m.lag_mean},
                      {"lag_max", m.lag_max},
                      {"reward_mean", m.reward_mean},
                      {"accuracy", m.accuracy},
                      {"lr", m.lr},
                      {"grad_norm", m.grad_norm},
                      {"seconds", m.seconds},
                      {"dropped_stale", m.dropped_stale},
                      {"duplicates", m.duplicates},
                      {"rejected", m.rejected}};
  return j.dump();
}

namespace {

using clock_type = std::chrono::steady_clock;

torch::Tensor bytes_tensor(const std::string& s) {
  auto t = torch::empty({static_cast<int64_t>(s.size())}, torch::kUInt8);
  if (!s.empty()) std::memcpy(t.data_ptr(), s.data(), s.size());
  return t;
}

std::string tensor_bytes(const torch::Tensor& t) {
  auto c = t.to(torch::kCPU).contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel()));
}

torch::Tensor scalar_tensor(int64_t v) { return torch::tensor({v}, torch::kLong); }
int64_t tensor_scalar(const torch::Tensor& t) { return t.item<int64_t>(); }

// Model-token tensors of a set of samples, right-padded into one [K, N] batch.
struct batch_tensors {
  torch::Tensor tokens, lengths, idx, targets, masks, behav;
  int64_t k = 0, n = 0, m = 0;
};

batch_tensors build_batch(const std::vector<const sample*>& ss, const torch::Device& dev) {
  batch_tensors b;
  b.k = static_cast<int64_t>(ss.size());
  for (auto* s : ss) {
    b.n = std::max<int64_t>(b.n, static_cast<int64_t>(s->tokens.size()));
    b.m += static_cast<int64_t>(s->model_pos.size());
  }
  const int64_t pc = program_token_count();
  b.tokens = torch::zeros({b.k, b.n}, torch::kLong);
  b.lengths = torch::empty({b.k}, torch::kLong);
  b.idx = torch::empty({b.m}, torch::kLong);
  b.targets = torch::empty({b.m}, torch::kLong);
  b.masks = torch::empty({b.m, pc}, torch::kUInt8);
  b.behav = torch::empty({b.m}, torch::kFloat);
  auto tok = b.tokens.accessor<int64_t, 2>();
  auto len = b.lengths.accessor<int64_t, 1>();
  auto idx = b.idx.accessor<int64_t, 1>();
  auto tgt = b.targets.accessor<int64_t, 1>();
  auto beh = b.behav.accessor<float, 1>();
  auto* mask = b.masks.data_ptr<uint8_t>();
  int64_t r = 0;
  for (int64_t i = 0; i < b.k; ++i) {
    const auto& s = *ss[static_cast<size_t>(i)];
    len[i] = static_cast<int64_t>(s.tokens.size());
    for (size_t j = 0; j < s.tokens.size(); ++j) tok[i][static_cast<int64_t>(j)] = s.tokens[j];
    std::memcpy(mask + r * pc, s.masks.data(), s.masks.size());
    for (size_t j = 0; j < s.model_pos.size(); ++j, ++r) {
      // The distribution over token p is the model's output at position p - 1.
      idx[r] = i * b.n + s.model_pos[j] - 1;
      tgt[r] = s.tokens[static_cast<size_t>(s.model_pos[j])];
      beh[r] = s.logp_behav[j];
    }
  }
  if (!dev.is_cpu()) {
    for (auto* t : {&b.tokens, &b.lengths, &b.idx, &b.targets, &b.masks, &b.behav}) *t = t->to(dev);
  }
  return b;
}

struct batch_eval {
  torch::Tensor logp, values, entropy; // [M], model tokens in sample order
  torch::Tensor hit;                   // [M] bool: the argmax is the token (sft accuracy)
};

batch_eval evaluate_padded(policy_model& model, const batch_tensors& b, double temperature) {
  auto out = model->forward_padded(b.tokens, b.lengths);
  const int64_t v = out.logits.size(-1);
  auto logits = out.logits.reshape({b.k * b.n, v}).index_select(0, b.idx);
  batch_eval e;
  e.values = out.values.reshape({b.k * b.n}).index_select(0, b.idx);
  auto logp_all = masked_log_softmax(logits, b.masks, temperature);
  e.logp = logp_all.gather(1, b.targets.unsqueeze(1)).squeeze(1);
  auto allowed = b.masks.to(torch::kBool);
  e.entropy = -(logp_all.exp() * logp_all.masked_fill(allowed.logical_not(), 0.0)).sum(-1);
  e.hit = logp_all.detach().argmax(1) == b.targets;
  return e;
}

// Forward over samples of mixed lengths: sorted by length and cut into chunks of at most
// `token_budget` padded tokens, so short trajectories are not padded to the longest one (3x less
// work on the quickstart mix); results come back in the samples' order. Autograd flows through.
batch_eval evaluate(policy_model& model, const std::vector<const sample*>& ss, double temperature,
                    int64_t token_budget) {
  std::vector<size_t> order(ss.size());
  std::vector<int64_t> offset(ss.size() + 1, 0);
  for (size_t i = 0; i < ss.size(); ++i) {
    order[i] = i;
    offset[i + 1] = offset[i] + static_cast<int64_t>(ss[i]->model_pos.size());
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ss[a]->tokens.size() < ss[b]->tokens.size(); });
  std::vector<batch_eval> parts;
  std::vector<int64_t> perm; // position in the concatenation -> model-token index
  perm.reserve(static_cast<size_t>(offset.back()));
  for (size_t lo = 0; lo < order.size();) {
    // Extend the chunk while it fits the budget and padding stays small (next <= 1.25x first).
    const auto first = static_cast<int64_t>(ss[order[lo]]->tokens.size());
    size_t hi = lo + 1;
    while (hi < order.size()) {
      const auto len = static_cast<int64_t>(ss[order[hi]]->tokens.size());
      if (static_cast<int64_t>(hi - lo + 1) * len > token_budget || 4 * len > 5 * first + 64) break;
      ++hi;
    }
    std::vector<const sample*> chunk;
    for (size_t k = lo; k < hi; ++k) {
      chunk.push_back(ss[order[k]]);
      for (int64_t j = offset[order[k]]; j < offset[order[k] + 1]; ++j) perm.push_back(j);
    }
    parts.push_back(
        evaluate_padded(model, build_batch(chunk, model->tok_emb->weight.device()), temperature));
    lo = hi;
  }
  if (parts.size() == 1 && std::is_sorted(perm.begin(), perm.end())) return parts[0];
  auto inv = torch::empty({static_cast<int64_t>(perm.size())}, torch::kLong);
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  inv = inv.to(parts[0].logp.device());
  auto gather = [&](auto field) {
    std::vector<torch::Tensor> ts;
    for (auto& p : parts) ts.push_back(p.*field);
    return torch::cat(ts).index_select(0, inv);
  };
  return {gather(&batch_eval::logp), gather(&batch_eval::values), gather(&batch_eval::entropy),
          gather(&batch_eval::hit)};
}

torch::Tensor behaviour_logprobs(const std::vector<const sample*>& ss) {
  std::vector<float> v;
  for (auto* s : ss) v.insert(v.end(), s->logp_behav.begin(), s->logp_behav.end());
  return torch::tensor(v, torch::kFloat);
}

} // namespace

struct learner::impl {
  learner_config cfg;
  std::vector<task> tasks;
  std::unordered_map<std::string, const task*> by_name;
  reward_placement placement = reward_placement::episode;
  policy_model model{nullptr};
  torch::Device dev{torch::kCPU};
  std::unique_ptr<torch::optim::Adam> opt;
  std::atomic<int64_t> version{0}, step{0};
  std::atomic<uint64_t> trained{0};
  int64_t value_updates_done = 0, ppo_updates = 0;
  bool sft_done = false;
  mutable std::mutex mu; // pending, seen sets, counters
  std::deque<sample> pending;
  std::unordered_set<std::string> seen_trained, seen_pending;
  uint64_t dropped_stale = 0, duplicates = 0, rejected = 0;
  std::map<std::string, double> task_mean; // running mean reward per task (group advantages)
  uint64_t critic_only = 0; // trajectories spent on value pretraining (no policy version made)
  std::shared_ptr<weight_slot> slot = std::make_shared<weight_slot>();
  std::shared_ptr<trajectory_queue> queue;
  std::unique_ptr<intake> in;
  std::unique_ptr<weight_publisher> pub;
  std::thread thread;
  std::atomic<bool> stop_flag{false}, finished{false};
  std::function<void(const update_metrics&)> cb;
  std::ofstream metrics_out;
  std::mt19937_64 rng;
  std::vector<sample> sft_samples;

  double lr_at(int64_t s) const {
    double base = cfg.lr;
    if (cfg.warmup_steps > 0 && s < cfg.warmup_steps)
      return base * static_cast<double>(s + 1) / static_cast<double>(cfg.warmup_steps);
    if (cfg.total_steps <= cfg.warmup_steps || cfg.lr_schedule == "constant") return base;
    double prog = std::clamp(static_cast<double>(s - cfg.warmup_steps) /
                                 static_cast<double>(cfg.total_steps - cfg.warmup_steps),
                             0.0, 1.0);
    double lo = cfg.lr_min_ratio;
    if (cfg.lr_schedule == "linear") return base * (1.0 - (1.0 - lo) * prog);
    return base * (lo + (1.0 - lo) * 0.5 * (1.0 + std::cos(M_PI * prog)));
  }

  double optimizer_step(bool value_only) {
    if (value_only) // critic pretraining: the policy (trunk, embeddings, LM head) stays put
      for (auto& p : model->named_parameters())
        if (p.key().rfind("value_head", 0) != 0) p.value().mutable_grad() = torch::Tensor();
    std::vector<torch::Tensor> params;
    for (auto& p : model->parameters())
      if (p.grad().defined()) params.push_back(p);
    double norm = torch::nn::utils::clip_grad_norm_(params, cfg.grad_clip);
    double lr = lr_at(step);
    for (auto& g : opt->param_groups()) static_cast<torch::optim::AdamOptions&>(g.options()).lr(lr);
    opt->step();
    ++step;
    return norm;
  }

  void emit(const update_metrics& m) {
    if (metrics_out.is_open()) metrics_out << to_json(m) << '\n' << std::flush;
    if (cb) cb(m);
  }

  bool value_stage() const {
    return cfg.stage == "value" || (cfg.stage == "all" && value_updates_done < cfg.value_updates);
  }
};

learner::learner(std::unique_ptr<impl> p) : p_(std::move(p)) {}

learner::~learner() { stop(); }

expected<std::unique_ptr<learner>> learner::create(const learner_config& cfg,
                                                   std::vector<task> tasks) {
  auto p = std::make_unique<impl>();
  p->cfg = cfg;
  if (auto why = resolve(p->cfg.model); !why.empty()) return error{"learner.model: " + why};
  if (cfg.batch_size < 1 || cfg.epochs < 1 || cfg.minibatches < 1 ||
      cfg.minibatches > cfg.batch_size)
    return error{"learner: batch_size, epochs >= 1 and 1 <= minibatches <= batch_size"};
  if (cfg.eta < 0) return error{"learner.eta must be >= 0"};
  if (cfg.reward_placement != "episode" && cfg.reward_placement != "turn")
    return error{"learner.reward_placement: episode | turn"};
  if (cfg.stage != "sft" && cfg.stage != "value" && cfg.stage != "ppo" && cfg.stage != "all")
    return error{"learner.stage: sft | value | ppo | all"};
  p->placement =
      cfg.reward_placement == "turn" ? reward_placement::turn : reward_placement::episode;
  p->tasks = std::move(tasks);
  for (const auto& t : p->tasks) p->by_name[t.name] = &t;
  if (cfg.threads > 0) at::set_num_threads(cfg.threads);
  p->rng.seed(cfg.seed);
  p->model = make_model(p->cfg.model, cfg.seed);
  try {
    p->dev = torch::Device(cfg.device);
    p->model->to(p->dev);
  } catch (const std::exception& e) {
    std::string what = e.what(); // c10 errors append a backtrace: keep the first line
    return error{"learner.device '" + cfg.device + "': " + what.substr(0, what.find('\n'))};
  }
  p->opt = std::make_unique<torch::optim::Adam>(
      p->model->parameters(), torch::optim::AdamOptions(cfg.lr).weight_decay(cfg.weight_decay));
  p->queue = std::make_shared<trajectory_queue>(static_cast<size_t>(cfg.queue_capacity));
  std::unique_ptr<learner> l(new learner(std::move(p)));
  if (!cfg.resume.empty()) {
    bool optional = cfg.resume == "latest" && !fs::exists(fs::path(cfg.checkpoint_dir) / "latest");
    if (optional) {
      spdlog::info("learner: no checkpoint in '{}' yet; starting fresh", cfg.checkpoint_dir);
    } else if (auto st = l->load_checkpoint(cfg.resume); !st) {
      return st.err();
    }
  }
  if (!cfg.metrics_path.empty()) {
    fs::create_directories(fs::path(cfg.metrics_path).parent_path().empty()
                               ? fs::path(".")
                               : fs::path(cfg.metrics_path).parent_path());
    l->p_->metrics_out.open(cfg.metrics_path, std::ios::app);
    if (!l->p_->metrics_out) return error{"learner: cannot open '" + cfg.metrics_path + "'"};
  }
  return l;
}

offer_result learner::offer(const trajectory& t, std::string* why) {
  auto& s = *p_;
  auto fail = [&](offer_result r, std::string msg) {
    if (why) *why = std::move(msg);
    std::lock_guard<std::mutex> lock(s.mu);
    if (r == offer_result::duplicate)
      ++s.duplicates;
    else if (r == offer_result::stale)
      ++s.dropped_stale;
    else
      ++s.rejected;
    return r;
  };
  bool dup;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    dup = s.seen_trained.count(t.id) || s.seen_pending.count(t.id);
  }
  if (dup) return fail(offer_result::duplicate, "trajectory '" + t.id + "' already seen");
  if (t.tokens.size() > static_cast<size_t>(s.cfg.model.max_len))
    return fail(offer_result::rejected, "longer than the model's max_len");
  const task* spec = nullptr;
  if (!s.by_name.empty()) {
    auto it = s.by_name.find(t.task);
    if (it == s.by_name.end()) return fail(offer_result::rejected, "unknown task '" + t.task + "'");
    spec = it->second;
  }
  auto smp = prepare_sample(t, spec, s.placement);
  if (!smp) return fail(offer_result::rejected, smp.message());
  int32_t oldest = *std::min_element(smp->versions.begin(), smp->versions.end());
  if (s.version - oldest > s.cfg.eta)
    return fail(offer_result::stale,
                "version lag " + std::to_string(s.version - oldest) + " > eta");
  std::lock_guard<std::mutex> lock(s.mu);
  s.seen_pending.insert(t.id);
  s.pending.push_back(std::move(*smp));
  return offer_result::accepted;
}

size_t learner::pending() const {
  std::lock_guard<std::mutex> lock(p_->mu);
  return p_->pending.size();
}

expected<update_metrics> learner::update() {
  auto& s = *p_;
  auto t0 = clock_type::now();
  std::vector<sample> batch;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    // Samples that aged past eta while waiting are dropped here (asynchronous mode).
    for (auto it = s.pending.begin(); it != s.pending.end();) {
      int32_t oldest = *std::min_element(it->versions.begin(), it->versions.end());
      if (s.version - oldest > s.cfg.eta) {
        ++s.dropped_stale;
        s.seen_pending.erase(it->id);
        it = s.pending.erase(it);
      } else {
        ++it;
      }
    }
    if (s.pending.size() < static_cast<size_t>(s.cfg.batch_size))
      return error{"learner: " + std::to_string(s.pending.size()) + " trajectories pending, " +
                   std::to_string(s.cfg.batch_size) + " needed"};
    for (int i = 0; i < s.cfg.batch_size; ++i) {
      batch.push_back(std::move(s.pending.front()));
      s.pending.pop_front();
    }
  }
  const bool value_only = s.value_stage();
  ppo_config pc = s.cfg.ppo;
  if (value_only) pc.policy_coef = 0;
  s.model->train();

  update_metrics m;
  m.stage = value_only ? "value" : "ppo";
  m.trajectories = batch.size();
  std::vector<const sample*> all;
  std::vector<int64_t> offsets{0}; // model-token offset of each sample
  double lag_sum = 0, lag_max = 0, reward_sum = 0;
  for (const auto& smp : batch) {
    all.push_back(&smp);
    offsets.push_back(offsets.back() + static_cast<int64_t>(smp.model_pos.size()));
    m.tokens += smp.tokens.size();
    reward_sum += smp.reward;
    for (auto v : smp.versions) {
      double lag = static_cast<double>(s.version - v);
      lag_sum += lag;
      lag_max = std::max(lag_max, lag);
    }
  }
  m.model_tokens = static_cast<size_t>(offsets.back());
  m.lag_mean = lag_sum / static_cast<double>(m.model_tokens);
  m.lag_max = lag_max;
  m.reward_mean = reward_sum / static_cast<double>(batch.size());

  // Proximal log-probs and values: the learner's weights at batch time.
  const bool single = s.cfg.epochs == 1 && s.cfg.minibatches == 1;
  const int64_t total_m = offsets.back();
  auto behav = behaviour_logprobs(all).to(s.dev);
  batch_eval first;
  torch::Tensor prox, values0;
  if (single) { // one pass: the proximal policy is the graph being trained
    first = evaluate(s.model, all, s.cfg.temperature, s.cfg.chunk_tokens);
    prox = first.logp.detach();
    values0 = first.values.detach();
  } else {
    torch::NoGradGuard ng;
    auto e = evaluate(s.model, all, s.cfg.temperature, s.cfg.chunk_tokens);
    prox = e.logp;
    values0 = e.values;
  }
  // GAE per trajectory over its model tokens.
  auto vals = values0.to(torch::kCPU).contiguous();
  auto adv = torch::empty({total_m}, torch::kFloat), ret = torch::empty({total_m}, torch::kFloat);
  for (size_t i = 0; i < batch.size(); ++i) {
    auto o = offsets[i];
    gae(batch[i].rewards.data(), vals.data_ptr<float>() + o, batch[i].rewards.size(), pc.gamma,
        pc.lambda, adv.data_ptr<float>() + o, ret.data_ptr<float>() + o);
  }
  if (pc.advantage == "group") { // the critic's returns stay; the policy sees the group's verdict
    auto per = group_advantages(all, s.task_mean);
    for (size_t i = 0; i < batch.size(); ++i)
      adv.slice(0, offsets[i], offsets[i + 1]).fill_(per[i]);
  } else if (pc.normalize_adv && total_m > 1) {
    adv = (adv - adv.mean()) / (adv.std() + 1e-8);
  }
  adv = adv.to(s.dev);
  ret = ret.to(s.dev);

  int64_t updates = 0;
  for (int e = 0; e < s.cfg.epochs; ++e) {
    for (int mb = 0; mb < s.cfg.minibatches; ++mb) {
      size_t lo = batch.size() * static_cast<size_t>(mb) / static_cast<size_t>(s.cfg.minibatches);
      size_t hi =
          batch.size() * static_cast<size_t>(mb + 1) / static_cast<size_t>(s.cfg.minibatches);
      int64_t a = offsets[lo], b = offsets[hi];
      batch_eval ev;
      if (single) {
        ev = first;
      } else {
        std::vector<const sample*> part(all.begin() + static_cast<std::ptrdiff_t>(lo),
                                        all.begin() + static_cast<std::ptrdiff_t>(hi));
        ev = evaluate(s.model, part, s.cfg.temperature, s.cfg.chunk_tokens);
      }
      ppo_loss_inputs in{ev.logp,
                         prox.slice(0, a, b),
                         behav.slice(0, a, b),
                         adv.slice(0, a, b),
                         ev.values,
                         ret.slice(0, a, b),
                         ev.entropy};
      auto r = ppo_loss(in, pc);
      s.opt->zero_grad();
      if (!std::isfinite(r.loss.item<double>())) { // never let one bad batch poison the weights
        spdlog::warn("learner: non-finite loss at version {}; optimizer step skipped",
                     s.version.load());
        continue;
      }
      r.loss.backward();
      m.grad_norm = s.optimizer_step(value_only);
      if (e == 0 && mb == 0) { // metrics of the first pass: pi_new == pi_prox up to one step
        m.loss = r.loss.item<double>();
        m.pg_loss = r.pg_loss;
        m.vf_loss = r.vf_loss;
        m.entropy = r.entropy;
        m.behav_kl = r.behav_kl;
        m.behav_w_mean = r.behav_w_mean;
        m.behav_capped = r.behav_capped;
      }
      m.clip_frac = r.clip_frac;
      m.approx_kl = r.approx_kl;
      ++updates;
    }
  }
  if (value_only) {
    ++s.value_updates_done;
    s.critic_only += batch.size();
  } else
    ++s.ppo_updates;
  if (!value_only && updates > 0 && s.cfg.kl_every > 0 && s.ppo_updates % s.cfg.kl_every == 0) {
    torch::NoGradGuard ng;
    auto after = evaluate(s.model, all, s.cfg.temperature, s.cfg.chunk_tokens).logp;
    auto lr = after - prox;
    m.update_kl = ((lr.exp() - 1) - lr).mean().item<double>();
  }
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (const auto& smp : batch) {
      s.seen_pending.erase(smp.id);
      s.seen_trained.insert(smp.id);
    }
    m.dropped_stale = s.dropped_stale;
    m.duplicates = s.duplicates;
    m.rejected = s.rejected;
  }
  s.trained += batch.size();
  // A version is a policy: critic-only updates leave the policy as it was, so its episodes stay
  // fresh (bumping here made every episode of the sft policy stale two value updates later).
  if (!value_only) {
    ++s.version;
    publish();
  }
  m.version = s.version;
  m.step = s.step;
  m.lr = s.lr_at(s.step - 1);
  m.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  s.emit(m);
  return m;
}

void learner::set_sft_samples(std::vector<sample> samples) { p_->sft_samples = std::move(samples); }

expected<update_metrics> learner::run_sft(int64_t steps) {
  auto& s = *p_;
  if (s.sft_samples.empty()) {
    s.sft_samples =
        expert_samples(s.tasks, s.cfg.backend == "cuda" ? backend_kind::cuda : backend_kind::cpu);
    if (s.sft_samples.empty()) return error{"learner sft: no expert samples (no tasks?)"};
  }
  auto t0 = clock_type::now();
  update_metrics m;
  m.stage = "sft";
  s.model->train();
  std::uniform_int_distribution<size_t> pick(0, s.sft_samples.size() - 1);
  for (int64_t i = 0; i < steps && !s.stop_flag; ++i) {
    std::vector<const sample*> b;
    for (int j = 0; j < s.cfg.sft_batch; ++j) b.push_back(&s.sft_samples[pick(s.rng)]);
    auto ev = evaluate(s.model, b, 1.0, s.cfg.chunk_tokens);
    auto loss = -ev.logp.mean();
    s.opt->zero_grad();
    loss.backward();
    m.grad_norm = s.optimizer_step(false);
    m.loss = loss.item<double>();
    m.entropy = ev.entropy.detach().mean().item<double>();
    m.accuracy = ev.hit.to(torch::kDouble).mean().item<double>();
    for (auto* x : b) m.tokens += x->tokens.size();
    m.model_tokens += static_cast<size_t>(ev.logp.numel());
    m.trajectories += b.size();
    if ((i + 1) % 50 == 0 || i + 1 == steps)
      spdlog::info("learner sft: step {}/{} loss {:.4f} token accuracy {:.3f}", i + 1, steps,
                   m.loss, m.accuracy);
  }
  s.sft_done = true;
  ++s.version;
  publish();
  m.version = s.version;
  m.step = s.step;
  m.lr = s.lr_at(s.step - 1);
  m.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  s.emit(m);
  return m;
}

void learner::publish() {
  auto& s = *p_;
  auto blob = std::make_shared<weight_blob>();
  blob->version = s.version;
  blob->bytes = save_weights(s.model);
  if (s.pub) s.pub->publish(encode_weight_message(*blob));
  s.slot->publish(std::move(blob));
}

expected<std::string> learner::save_checkpoint(const std::string& path) {
  auto& s = *p_;
  std::string file = path;
  if (file.empty()) {
    if (s.cfg.checkpoint_dir.empty()) return error{"learner: no checkpoint_dir configured"};
    file = (fs::path(s.cfg.checkpoint_dir) / ("ckpt-v" + std::to_string(s.version.load()) + ".pt"))
               .string();
  }
  try {
    auto dir = fs::path(file).parent_path();
    if (!dir.empty()) fs::create_directories(dir);
    torch::serialize::OutputArchive a, model_a, opt_a;
    s.model->save(model_a);
    s.opt->save(opt_a);
    a.write("model", model_a);
    a.write("optimizer", opt_a);
    a.write("model_config", bytes_tensor(to_string(s.cfg.model)));
    a.write("version", scalar_tensor(s.version));
    a.write("step", scalar_tensor(s.step));
    a.write("trained", scalar_tensor(static_cast<int64_t>(s.trained.load())));
    a.write("value_updates_done", scalar_tensor(s.value_updates_done));
    a.write("ppo_updates", scalar_tensor(s.ppo_updates));
    a.write("sft_done", scalar_tensor(s.sft_done ? 1 : 0));
    {
      // Trained trajectory ids, length-prefixed: a resumed learner never counts one twice.
      std::string ids;
      std::vector<int64_t> lens;
      std::lock_guard<std::mutex> lock(s.mu);
      for (const auto& id : s.seen_trained) {
        ids += id;
        lens.push_back(static_cast<int64_t>(id.size()));
      }
      a.write("seen_ids", bytes_tensor(ids));
      a.write("seen_lens", torch::tensor(lens, torch::kLong));
    }
    a.write("rng_torch", at::detail::getDefaultCPUGenerator().get_state());
    std::ostringstream rs;
    rs << s.rng;
    a.write("rng_std", bytes_tensor(rs.str()));
    nlohmann::json cj = {{"lr", s.cfg.lr},
                         {"batch_size", s.cfg.batch_size},
                         {"eta", s.cfg.eta},
                         {"stage", s.cfg.stage},
                         {"epochs", s.cfg.epochs},
                         {"minibatches", s.cfg.minibatches},
                         {"eps_low", s.cfg.ppo.eps_low},
                         {"eps_high", s.cfg.ppo.eps_high},
                         {"gamma", s.cfg.ppo.gamma},
                         {"lambda", s.cfg.ppo.lambda},
                         {"behav_cap", s.cfg.ppo.behav_cap},
                         {"temperature", s.cfg.temperature},
                         {"seed", s.cfg.seed}};
    a.write("learner_config", bytes_tensor(cj.dump()));
    auto tmp = file + ".tmp";
    a.save_to(tmp);
    fs::rename(tmp, file);
    if (path.empty()) {
      auto latest = fs::path(s.cfg.checkpoint_dir) / "latest";
      {
        std::ofstream out(latest.string() + ".tmp");
        out << fs::path(file).filename().string() << '\n';
      }
      fs::rename(latest.string() + ".tmp", latest);
      // Keep the newest keep_checkpoints files.
      std::vector<std::pair<int64_t, fs::path>> found;
      for (const auto& e : fs::directory_iterator(s.cfg.checkpoint_dir)) {
        auto n = e.path().filename().string();
        if (n.rfind("ckpt-v", 0) == 0 && e.path().extension() == ".pt")
          found.emplace_back(std::atoll(n.c_str() + 6), e.path());
      }
      std::sort(found.begin(), found.end());
      for (size_t i = 0;
           i + static_cast<size_t>(std::max(1, s.cfg.keep_checkpoints)) < found.size(); ++i)
        fs::remove(found[i].second);
    }
  } catch (const std::exception& e) {
    return error{"learner: checkpoint '" + file + "': " + e.what()};
  }
  return file;
}

status learner::load_checkpoint(const std::string& path) {
  auto& s = *p_;
  std::string file = path;
  if (path == "latest") {
    std::ifstream in(fs::path(s.cfg.checkpoint_dir) / "latest");
    std::string name;
    if (!(in >> name)) return error{"learner: no checkpoint in '" + s.cfg.checkpoint_dir + "'"};
    file = (fs::path(s.cfg.checkpoint_dir) / name).string();
  }
  try {
    torch::serialize::InputArchive a, model_a, opt_a;
    a.load_from(file, s.dev);
    torch::Tensor t;
    a.read("model_config", t);
    model_config mc;
    if (!parse_model_config(tensor_bytes(t), mc)) return error{file + ": bad model_config"};
    if (auto why = token_space_mismatch(mc); !why.empty()) return error{file + ": " + why};
    if (to_string(mc) != to_string(s.cfg.model)) {
      spdlog::warn("learner: checkpoint model ({}) differs from the config ({}); using the "
                   "checkpoint's",
                   to_string(mc), to_string(s.cfg.model));
      s.cfg.model = mc;
      s.model = make_model(mc, s.cfg.seed);
      s.model->to(s.dev);
      s.opt = std::make_unique<torch::optim::Adam>(
          s.model->parameters(),
          torch::optim::AdamOptions(s.cfg.lr).weight_decay(s.cfg.weight_decay));
    }
    a.read("model", model_a);
    s.model->load(model_a);
    a.read("optimizer", opt_a);
    s.opt->load(opt_a);
    a.read("version", t);
    s.version = tensor_scalar(t);
    a.read("step", t);
    s.step = tensor_scalar(t);
    a.read("trained", t);
    s.trained = static_cast<uint64_t>(tensor_scalar(t));
    a.read("value_updates_done", t);
    s.value_updates_done = tensor_scalar(t);
    a.read("ppo_updates", t);
    s.ppo_updates = tensor_scalar(t);
    a.read("sft_done", t);
    s.sft_done = tensor_scalar(t) != 0;
    torch::Tensor ids, lens;
    a.read("seen_ids", ids);
    a.read("seen_lens", lens);
    auto all = tensor_bytes(ids);
    {
      std::lock_guard<std::mutex> lock(s.mu);
      s.seen_trained.clear();
      size_t at = 0;
      auto l = lens.to(torch::kCPU).contiguous();
      for (int64_t i = 0; i < l.numel(); ++i) {
        auto n = static_cast<size_t>(l.data_ptr<int64_t>()[i]);
        if (at + n > all.size()) return error{file + ": bad seen_ids"};
        s.seen_trained.insert(all.substr(at, n));
        at += n;
      }
    }
    a.read("rng_torch", t);
    auto gen = at::detail::getDefaultCPUGenerator();
    gen.set_state(t.to(torch::kCPU));
    a.read("rng_std", t);
    std::istringstream rs(tensor_bytes(t));
    rs >> s.rng;
  } catch (const std::exception& e) {
    return error{"learner: cannot load checkpoint '" + file + "': " + e.what()};
  }
  spdlog::info("learner: resumed from {} (version {}, step {}, {} trajectories trained)", file,
               s.version.load(), s.step.load(), s.trained.load());
  publish();
  return ok();
}

int64_t learner::version() const { return p_->version; }
int64_t learner::steps() const { return p_->step; }
uint64_t learner::trajectories_trained() const { return p_->trained; }
uint64_t learner::discarded() const {
  std::lock_guard<std::mutex> lock(p_->mu);
  return p_->dropped_stale + p_->duplicates + p_->rejected + p_->critic_only +
         intake_counters().rejected;
}
const learner_config& learner::config() const { return p_->cfg; }
std::shared_ptr<weight_slot> learner::weights() const { return p_->slot; }
std::shared_ptr<trajectory_queue> learner::queue() const { return p_->queue; }
intake_stats learner::intake_counters() const { return p_->in ? p_->in->stats() : intake_stats{}; }
void learner::on_metrics(std::function<void(const update_metrics&)> cb) { p_->cb = std::move(cb); }
bool learner::finished() const { return p_->finished; }

expected<std::vector<float>> learner::score(const trajectory& t) {
  auto& s = *p_;
  const task* spec = nullptr;
  if (auto it = s.by_name.find(t.task); it != s.by_name.end()) spec = it->second;
  auto smp = prepare_sample(t, spec, s.placement);
  if (!smp) return smp.err();
  torch::NoGradGuard ng;
  s.model->eval();
  auto ev = evaluate(s.model, {&*smp}, s.cfg.temperature, s.cfg.chunk_tokens);
  auto lp = ev.logp.to(torch::kCPU).contiguous();
  return std::vector<float>(lp.data_ptr<float>(), lp.data_ptr<float>() + lp.numel());
}

status learner::start() {
  auto& s = *p_;
  if (s.thread.joinable()) return error{"learner already started"};
  if (!s.cfg.pull_endpoint.empty()) {
    trajectory_limits lim;
    lim.vocab_size = vocab_size();
    lim.max_tokens = static_cast<size_t>(s.cfg.model.max_len);
    s.in = std::make_unique<intake>(lim, s.queue);
    if (auto st = s.in->start(s.cfg.pull_endpoint, 1000, s.cfg.curve); !st) return st;
  }
  if (!s.cfg.pub_endpoint.empty()) {
    auto p = weight_publisher::bind(s.cfg.pub_endpoint, s.cfg.curve);
    if (!p) return p.err();
    s.pub = std::move(*p);
  }
  s.stop_flag = false;
  s.finished = false;
  publish(); // before start() returns: policy servers start from the learner's weights
  s.thread = std::thread([this] {
    auto& s = *p_;
    try {
      if ((s.cfg.stage == "sft" || s.cfg.stage == "all") && !s.sft_done) {
        if (auto r = run_sft(s.cfg.sft_steps); !r) spdlog::error("{}", r.message());
        if (!s.cfg.checkpoint_dir.empty()) save_checkpoint();
      }
      int64_t since_ckpt = 0;
      auto done = [&] {
        if (s.cfg.stage == "sft") return true;
        if (s.cfg.stage == "value") return s.value_updates_done >= s.cfg.value_updates;
        return s.cfg.max_updates > 0 && s.ppo_updates >= s.cfg.max_updates;
      };
      while (!s.stop_flag && !done()) {
        if (s.pub) s.pub->resend_if_idle();
        if (auto t = s.queue->pop(std::chrono::milliseconds(50))) {
          offer(*t);
          while (pending() < static_cast<size_t>(s.cfg.batch_size))
            if (auto more = s.queue->pop(std::chrono::milliseconds(0)))
              offer(*more);
            else
              break;
        }
        if (pending() >= static_cast<size_t>(s.cfg.batch_size)) {
          auto m = update();
          if (!m) continue; // stale ones were dropped; wait for more
          spdlog::debug("learner: {}", to_json(*m));
          if (s.cfg.checkpoint_every > 0 && ++since_ckpt >= s.cfg.checkpoint_every &&
              !s.cfg.checkpoint_dir.empty()) {
            since_ckpt = 0;
            if (auto c = save_checkpoint(); !c) spdlog::error("{}", c.message());
          }
        }
      }
    } catch (const std::exception& e) {
      spdlog::error("learner: training thread stopped: {}", e.what());
    }
    s.finished = true;
  });
  return ok();
}

void learner::stop() {
  auto& s = *p_;
  if (!s.thread.joinable()) return;
  s.stop_flag = true;
  s.queue->close();
  s.thread.join();
  if (s.in) {
    s.in->stop();
    if (s.cfg.curve.enabled())
      spdlog::info("learner: trajectories channel {}", s.in->channel_summary());
  }
  if (!s.cfg.checkpoint_dir.empty()) {
    if (auto c = save_checkpoint(); !c)
      spdlog::error("{}", c.message());
    else
      spdlog::info("learner: checkpoint {}", *c);
  }
  if (s.pub && s.cfg.curve.enabled())
    spdlog::info("learner: weights channel {}", s.pub->channel_summary());
  s.pub.reset();
}

} // namespace kiln
