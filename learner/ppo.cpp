#include "learner/ppo.hpp"

#include <torch/torch.h>

namespace kiln {

void gae(const float* rewards, const float* values, size_t n, double gamma, double lambda,
         float* adv, float* ret) {
  double next_value = 0, next_adv = 0;
  for (size_t i = n; i-- > 0;) {
    double delta = rewards[i] + gamma * next_value - values[i];
    next_adv = delta + gamma * lambda * next_adv;
    adv[i] = static_cast<float>(next_adv);
    ret[i] = static_cast<float>(next_adv + values[i]);
    next_value = values[i];
  }
}

ppo_loss_result ppo_loss(const ppo_loss_inputs& in, const ppo_config& c) {
  ppo_loss_result r;
  auto m = std::max<int64_t>(in.logp_new.numel(), 1);
  auto prox = in.logp_prox.detach();
  // Behaviour importance weight pi_prox / pi_behav: corrects for the rollout having sampled from
  // older weights; capped so one very stale token cannot dominate.
  auto w = (prox - in.logp_behav).exp();
  auto over = w > c.behav_cap;
  if (c.behav_mask)
    w = w.masked_fill(over, 0.0);
  else
    w = w.clamp_max(c.behav_cap);
  auto ratio = (in.logp_new - prox).exp();
  auto s1 = ratio * in.adv;
  auto s2 = ratio.clamp(1.0 - c.eps_low, 1.0 + c.eps_high) * in.adv;
  auto pg = -(w * torch::min(s1, s2)).sum() / static_cast<double>(m);
  auto vf = 0.5 * (in.values - in.returns).pow(2).sum() / static_cast<double>(m);
  auto loss = c.policy_coef * pg + c.vf_coef * vf;
  if (in.entropy.defined() && c.ent_coef != 0)
    loss = loss - c.ent_coef * in.entropy.sum() / static_cast<double>(m);
  r.loss = loss;
  torch::NoGradGuard ng;
  r.pg_loss = pg.item<double>();
  r.vf_loss = vf.item<double>();
  if (in.entropy.defined()) r.entropy = in.entropy.detach().sum().item<double>() / m;
  r.clip_frac = (s2.detach() < s1.detach()).to(torch::kDouble).sum().item<double>() / m;
  auto lr = (in.logp_new.detach() - prox); // log(new / prox)
  r.approx_kl = ((lr.exp() - 1) - lr).sum().item<double>() / m;
  auto lb = (prox - in.logp_behav); // log(prox / behav)
  r.behav_kl = ((lb.exp() - 1) - lb).sum().item<double>() / m;
  r.behav_w_mean = w.detach().sum().item<double>() / m;
  r.behav_capped = over.to(torch::kDouble).sum().item<double>() / m;
  return r;
}

} // namespace kiln
