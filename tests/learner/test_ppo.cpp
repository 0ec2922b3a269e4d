// PPO maths on hand-computed cases: GAE, the clipped (clip-higher) token-level loss, and the
// decoupled correction for stale samples (behaviour importance weight, its cap, its effect).
#include "learner/ppo.hpp"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>
#include <random>

using namespace kiln;

namespace {
torch::Tensor f(std::vector<float> v) { return torch::tensor(v, torch::kFloat); }
torch::Tensor logs(std::vector<double> p) {
  std::vector<float> v;
  for (double x : p) v.push_back(static_cast<float>(std::log(x)));
  return f(v);
}
} // namespace

TEST_CASE("gae: gamma 1, lambda 0.95, reward at the end (hand-computed)") {
  float r[] = {0, 0, 1}, v[] = {0.5f, 0.6f, 0.7f}, adv[3], ret[3];
  gae(r, v, 3, 1.0, 0.95, adv, ret);
  // delta2 = 1 - 0.7 = 0.3; delta1 = 0.7 - 0.6 = 0.1; delta0 = 0.6 - 0.5 = 0.1
  CHECK(adv[2] == doctest::Approx(0.3));
  CHECK(adv[1] == doctest::Approx(0.1 + 0.95 * 0.3));
  CHECK(adv[0] == doctest::Approx(0.1 + 0.95 * (0.1 + 0.95 * 0.3)));
  CHECK(ret[2] == doctest::Approx(1.0));
  CHECK(ret[1] == doctest::Approx(0.985));
  CHECK(ret[0] == doctest::Approx(0.96575));
}

TEST_CASE("gae: lambda 1 gives discounted return minus value, lambda 0 gives one-step TD") {
  float r[] = {1, 2, 3}, v[] = {0.25f, 0.5f, 1.0f}, adv[3], ret[3];
  gae(r, v, 3, 0.5, 1.0, adv, ret);
  CHECK(ret[2] == doctest::Approx(3.0));
  CHECK(ret[1] == doctest::Approx(2 + 0.5 * 3));
  CHECK(ret[0] == doctest::Approx(1 + 0.5 * 2 + 0.25 * 3));
  CHECK(adv[0] == doctest::Approx(2.75 - 0.25));
  gae(r, v, 3, 0.5, 0.0, adv, ret);
  CHECK(adv[0] == doctest::Approx(1 + 0.5 * 0.5 - 0.25));
  CHECK(adv[2] == doctest::Approx(3 - 1.0));
}

TEST_CASE("ppo_loss: clipped objective, value loss and metrics on two tokens (hand-computed)") {
  ppo_config c; // eps_low 0.2, eps_high 0.28, vf_coef 0.5, cap 5
  ppo_loss_inputs in;
  in.logp_new = logs({0.6, 0.3});
  in.logp_prox = logs({0.5, 0.5});
  in.logp_behav = logs({0.5, 0.25}); // token b: pi_prox / pi_behav = 2
  in.adv = f({1, -1});
  in.values = f({0.5f, 0});
  in.returns = f({1, 1});
  auto r = ppo_loss(in, c);
  // a: ratio 1.2 (inside [0.8, 1.28]) -> -1 * 1.2; b: ratio 0.6, clipped 0.8, adv -1 ->
  // min(-0.6, -0.8) = -0.8, weight 2 -> +1.6. Token mean: (-1.2 + 1.6) / 2 = 0.2.
  CHECK(r.pg_loss == doctest::Approx(0.2));
  CHECK(r.vf_loss == doctest::Approx(0.5 * (0.25 + 1.0) / 2));
  CHECK(r.loss.item<double>() == doctest::Approx(0.2 + 0.5 * 0.3125));
  CHECK(r.clip_frac == doctest::Approx(0.5));
  CHECK(r.behav_w_mean == doctest::Approx(1.5));
  CHECK(r.behav_capped == doctest::Approx(0.0));
}

TEST_CASE("ppo_loss: clip-higher bounds are asymmetric") {
  ppo_config c;
  c.vf_coef = 0;
  auto one = [&](double ratio, double adv) {
    ppo_loss_inputs in;
    in.logp_new = logs({0.5 * ratio});
    in.logp_prox = logs({0.5});
    in.logp_behav = logs({0.5});
    in.adv = f({static_cast<float>(adv)});
    in.values = f({0});
    in.returns = f({0});
    return ppo_loss(in, c).pg_loss;
  };
  CHECK(one(1.3, 1) == doctest::Approx(-1.28));  // upper clip at 1 + 0.28, not 1.2
  CHECK(one(1.25, 1) == doctest::Approx(-1.25)); // inside the higher bound: not clipped
  CHECK(one(0.7, 1) == doctest::Approx(-0.7));   // positive advantage: no lower clip
  CHECK(one(0.75, -1) == doctest::Approx(0.8));  // negative advantage: lower clip at 0.8
  CHECK(one(1.5, -1) == doctest::Approx(1.5));   // negative advantage, ratio up: unclipped
}

TEST_CASE(
    "decoupled ppo: behaviour weight clamped at the cap, or masked, and scales the gradient") {
  ppo_config c;
  c.vf_coef = 0;
  auto run = [&](bool mask) {
    c.behav_mask = mask;
    ppo_loss_inputs in;
    in.logp_new = logs({0.6, 0.6}).requires_grad_(true);
    in.logp_prox = logs({0.6, 0.6});
    in.logp_behav = logs({0.06, 0.3}); // weights 10 (capped) and 2
    in.adv = f({1, 1});
    in.values = f({0, 0});
    in.returns = f({0, 0});
    auto r = ppo_loss(in, c);
    r.loss.backward();
    return std::make_pair(r, in.logp_new.grad().clone());
  };
  auto [clamped, g1] = run(false);
  CHECK(clamped.behav_w_mean == doctest::Approx((5.0 + 2.0) / 2));
  CHECK(clamped.behav_capped == doctest::Approx(0.5));
  // d(-w * ratio * A / M) / d logp_new = -w * ratio * A / M with ratio 1
  CHECK(g1[0].item<double>() == doctest::Approx(-5.0 / 2));
  CHECK(g1[1].item<double>() == doctest::Approx(-2.0 / 2));
  auto [masked, g2] = run(true);
  CHECK(masked.behav_w_mean == doctest::Approx(1.0));
  CHECK(g2[0].item<double>() == doctest::Approx(0.0));
  CHECK(g2[1].item<double>() == doctest::Approx(-1.0));
  CHECK(clamped.behav_kl > 0);
}

TEST_CASE("decoupled ppo: samples from a stale policy give the on-policy gradient") {
  // Bandit with 3 arms: proximal policy p = softmax(theta), behaviour q (older, different),
  // advantages A. E_q[(p/q) A grad log p] = E_p[A grad log p]: the corrected estimator matches
  // the exact on-policy gradient; without the weight it is biased toward q.
  auto theta = torch::tensor({0.2f, -0.4f, 0.1f}).requires_grad_(true);
  std::vector<double> q = {0.6, 0.3, 0.1}, a = {1.0, -0.5, 2.0};
  auto p = torch::softmax(theta.detach(), 0);
  torch::Tensor exact = torch::zeros({3});
  for (int k = 0; k < 3; ++k) {
    auto e = torch::zeros({3});
    e[k] = 1;
    exact -= p[k] * a[k] * (e - p); // gradient of -E_p[A log p]
  }
  std::mt19937_64 rng(7);
  std::discrete_distribution<int> draw(q.begin(), q.end());
  const int n = 200000;
  std::vector<int64_t> arms(n);
  std::vector<float> adv(n), behav(n);
  for (int i = 0; i < n; ++i) {
    arms[i] = draw(rng);
    adv[i] = static_cast<float>(a[static_cast<size_t>(arms[i])]);
    behav[i] = static_cast<float>(std::log(q[static_cast<size_t>(arms[i])]));
  }
  auto idx = torch::tensor(arms, torch::kLong);
  auto grad_with = [&](bool correct) {
    theta.mutable_grad() = torch::Tensor();
    ppo_config c;
    c.vf_coef = 0;
    c.behav_cap = 100;
    ppo_loss_inputs in;
    in.logp_new = torch::log_softmax(theta, 0).index_select(0, idx);
    in.logp_prox = in.logp_new.detach();
    in.logp_behav = correct ? f(behav) : in.logp_prox; // no correction: pretend on-policy
    in.adv = f(adv);
    in.values = torch::zeros({n});
    in.returns = torch::zeros({n});
    ppo_loss(in, c).loss.backward();
    return theta.grad().clone();
  };
  auto corrected = grad_with(true);
  auto naive = grad_with(false);
  CHECK((corrected - exact).abs().max().item<double>() < 0.015);
  CHECK((naive - exact).abs().max().item<double>() > 0.05);
}
