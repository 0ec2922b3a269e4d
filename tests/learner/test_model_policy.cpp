// The transformer behind token_policy: masked sampling, temperature, log-probs after masking, and
// batched incremental decode with per-sequence KV caches equal to a full forward pass.
#include "learner/model_impl.hpp"
#include "learner/model_policy.hpp"
#include "rollout/token_space.hpp"

#include <doctest/doctest.h>

#include <random>

using namespace kiln;

namespace {

model_config tiny() {
  model_config c;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.max_len = 64;
  return c;
}

// Log-probs of every listed position under a full forward pass of `model` over `ctx`.
std::vector<float> full_forward_logprobs(policy_model& m, const std::vector<int32_t>& ctx,
                                         const std::vector<size_t>& positions,
                                         const std::vector<std::vector<uint8_t>>& masks) {
  torch::NoGradGuard ng;
  std::vector<int64_t> ids(ctx.begin(), ctx.end());
  auto tokens = torch::tensor(ids, torch::kLong).unsqueeze(0);
  auto out = m->forward_padded(tokens, torch::tensor({static_cast<int64_t>(ids.size())}));
  std::vector<float> lp;
  for (size_t k = 0; k < positions.size(); ++k) {
    auto logits = out.logits[0][static_cast<int64_t>(positions[k]) - 1].unsqueeze(0);
    std::vector<uint8_t> mk = masks[k];
    auto mask =
        torch::tensor(std::vector<int64_t>(mk.begin(), mk.end())).to(torch::kUInt8).unsqueeze(0);
    auto l = masked_log_softmax(logits, mask, 1.0);
    lp.push_back(l[0][ctx[positions[k]]].item<float>());
  }
  return lp;
}

std::vector<uint8_t> random_mask(std::mt19937_64& rng, int allowed) {
  std::vector<uint8_t> m(static_cast<size_t>(program_token_count()), 0);
  for (int i = 0; i < allowed; ++i) m[rng() % m.size()] = 1;
  return m;
}

} // namespace

TEST_CASE("model policy: KV-cache decode (joins, prefills, releases) equals a full forward") {
  at::set_num_threads(1);
  model_policy_options o;
  o.model = tiny();
  o.init_seed = 11;
  auto pol = model_policy::create(o);
  REQUIRE(pol);
  auto ref = make_model(tiny(), 11); // same seed: same weights
  std::mt19937_64 rng(3);
  const int32_t v = vocab_size();
  struct seq {
    std::vector<int32_t> ctx;
    std::vector<size_t> pos;
    std::vector<std::vector<uint8_t>> masks;
    std::vector<float> lp;
  };
  std::vector<seq> seqs(4);
  for (size_t i = 0; i < seqs.size(); ++i)
    for (size_t k = 0; k < 3 + 5 * i; ++k) seqs[i].ctx.push_back(static_cast<int32_t>(rng() % v));
  for (int stepi = 0; stepi < 12; ++stepi) {
    std::vector<decode_slot> slots;
    std::vector<std::vector<uint8_t>> masks(seqs.size());
    std::vector<size_t> who;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (i == 3 && stepi < 4) continue; // joins late
      if (i == 2 && stepi == 6) {
        // A new turn: observation tokens arrive before the next program token (multi-token
        // prefill on a warm cache).
        for (int k = 0; k < 4; ++k) seqs[i].ctx.push_back(static_cast<int32_t>(rng() % v));
      }
      masks[i] = random_mask(rng, 1 + static_cast<int>(rng() % 5));
      decode_slot s;
      s.seq_id = 100 + i;
      s.context = &seqs[i].ctx;
      s.mask = &masks[i];
      slots.push_back(s);
      who.push_back(i);
    }
    (*pol)->step(slots, rng);
    for (size_t k = 0; k < slots.size(); ++k) {
      auto& s = seqs[who[k]];
      REQUIRE(slots[k].token >= 0);
      CHECK(masks[who[k]][static_cast<size_t>(slots[k].token)] == 1); // respects the mask
      CHECK(slots[k].logprob <= 0.0f);
      s.pos.push_back(s.ctx.size());
      s.masks.push_back(masks[who[k]]);
      s.lp.push_back(slots[k].logprob);
      s.ctx.push_back(slots[k].token);
    }
  }
  CHECK((*pol)->cached_sequences() == 4);
  for (auto& s : seqs) {
    auto full = full_forward_logprobs(ref, s.ctx, s.pos, s.masks);
    REQUIRE(full.size() == s.lp.size());
    for (size_t k = 0; k < full.size(); ++k)
      CHECK(s.lp[k] == doctest::Approx(full[k]).epsilon(1e-4));
  }
  (*pol)->release(100);
  CHECK((*pol)->cached_sequences() == 3);
}

TEST_CASE("model policy: a single allowed token has log-prob 0, an empty mask yields no token") {
  model_policy_options o;
  o.model = tiny();
  auto pol = model_policy::create(o);
  REQUIRE(pol);
  std::mt19937_64 rng(1);
  std::vector<int32_t> ctx = {token_of(special_token::bos), 3, 4};
  std::vector<uint8_t> one(static_cast<size_t>(program_token_count()), 0), none = one;
  one[5] = 1;
  std::vector<decode_slot> slots(2);
  slots[0].seq_id = 1;
  slots[0].context = &ctx;
  slots[0].mask = &one;
  slots[1].seq_id = 2;
  slots[1].context = &ctx;
  slots[1].mask = &none;
  (*pol)->step(slots, rng);
  CHECK(slots[0].token == 5);
  CHECK(slots[0].logprob == doctest::Approx(0.0));
  CHECK(slots[1].token == -1);
}

TEST_CASE("model policy: sampling frequencies follow the masked distribution, greedy is argmax") {
  at::set_num_threads(1);
  model_policy_options o;
  o.model = tiny();
  o.init_seed = 5;
  auto pol = model_policy::create(o);
  REQUIRE(pol);
  std::mt19937_64 rng(9);
  std::vector<int32_t> ctx = {token_of(special_token::bos), 7};
  std::vector<uint8_t> m(static_cast<size_t>(program_token_count()), 0);
  m[1] = m[2] = m[3] = 1;
  std::map<int32_t, int> counts;
  std::map<int32_t, float> lp;
  const int n = 3000;
  for (int i = 0; i < n; ++i) {
    std::vector<decode_slot> slots(1);
    slots[0].seq_id = 1;
    slots[0].context = &ctx;
    slots[0].mask = &m;
    (*pol)->step(slots, rng); // same context each time: the cache re-feeds the last token
    ++counts[slots[0].token];
    lp[slots[0].token] = slots[0].logprob;
  }
  double total = 0;
  for (auto& [tok, c] : counts) {
    CHECK(m[static_cast<size_t>(tok)] == 1);
    CHECK(static_cast<double>(c) / n == doctest::Approx(std::exp(lp[tok])).epsilon(0.1));
    total += std::exp(lp[tok]);
  }
  CHECK(total == doctest::Approx(1.0).epsilon(1e-3));
  o.temperature = 0;
  auto greedy = model_policy::create(o);
  std::vector<decode_slot> slots(1);
  slots[0].seq_id = 1;
  slots[0].context = &ctx;
  slots[0].mask = &m;
  (*greedy)->step(slots, rng);
  int32_t best = -1;
  for (auto& [tok, l] : lp)
    if (best < 0 || l > lp[best]) best = tok;
  CHECK(slots[0].token == best);
}

TEST_CASE("model policy: refresh swaps in published weights, reports the version, drops caches") {
  model_policy_options o;
  o.model = tiny();
  o.init_seed = 1;
  o.slot = std::make_shared<weight_slot>();
  auto pol = model_policy::create(o);
  REQUIRE(pol);
  CHECK_FALSE((*pol)->refresh());
  CHECK((*pol)->version() == -1);
  std::mt19937_64 rng(1);
  std::vector<int32_t> ctx = {token_of(special_token::bos), 7, 9};
  std::vector<uint8_t> m(static_cast<size_t>(program_token_count()), 1);
  std::vector<decode_slot> slots(1);
  slots[0].seq_id = 4;
  slots[0].context = &ctx;
  slots[0].mask = &m;
  (*pol)->step(slots, rng);
  CHECK((*pol)->cached_sequences() == 1);

  auto other = make_model(tiny(), 2);
  auto blob = std::make_shared<weight_blob>();
  blob->version = 7;
  blob->bytes = save_weights(other);
  o.slot->publish(blob);
  CHECK((*pol)->refresh());
  CHECK((*pol)->version() == 7);
  CHECK((*pol)->cached_sequences() == 0);
  CHECK_FALSE((*pol)->refresh()); // nothing newer
  ctx.push_back(slots[0].token);
  (*pol)->step(slots, rng);
  ctx.push_back(slots[0].token);
  auto full = full_forward_logprobs(other, ctx, {ctx.size() - 1}, {m});
  CHECK(slots[0].logprob == doctest::Approx(full[0]).epsilon(1e-4));
}

TEST_CASE("weight messages round-trip and reject garbage") {
  weight_blob w{42, std::string("\x00\x01payload", 9)};
  auto msg = encode_weight_message(w);
  auto back = decode_weight_message(msg.data(), msg.size());
  REQUIRE(back);
  CHECK(back->version == 42);
  CHECK(back->bytes == w.bytes);
  CHECK_FALSE(decode_weight_message("KLN", 3));
  CHECK_FALSE(decode_weight_message("XXXXXXXXXXXXXXXX", 16));
}
