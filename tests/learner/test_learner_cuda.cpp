// GPU test (ctest label "gpu"): the learner and the policy model on CUDA. The policy's batched
// KV-cache decode on cuda gives the log-probs of the same weights on cpu; cuda-trained weights
// load into a cpu policy and score its trajectories as the cuda learner does; PPO updates on
// cuda stay finite and change the weights. Exits 77 (ctest: skipped) without a CUDA device.
#include "data/task_set.hpp"
#include "learner/learner.hpp"
#include "learner/model_impl.hpp"
#include "learner/model_policy.hpp"
#include "learner/smoke.hpp"
#include "rollout/token_space.hpp"

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <unistd.h>

using namespace kiln;

namespace {

const std::vector<task>& tasks() {
  static task_set s = load_tasks({KILN_SOURCE_DIR "/data/suites/level2/cpu"});
  return s.tasks;
}

model_policy_options policy_on(const std::string& device, uint64_t seed) {
  model_policy_options o;
  o.model.d_model = 64;
  o.model.n_layers = 2;
  o.model.n_heads = 4;
  o.model.max_len = 256;
  o.init_seed = seed;
  o.device = device;
  return o;
}

} // namespace

TEST_CASE("cuda policy: batched KV-cache decode gives the cpu policy's log-probs") {
  auto cpu = model_policy::create(policy_on("cpu", 5));
  auto gpu = model_policy::create(policy_on("cuda", 5));
  REQUIRE(cpu);
  REQUIRE(gpu);
  std::mt19937_64 rng(9);
  const int32_t v = vocab_size();
  std::vector<std::vector<int32_t>> ctx(6);
  for (size_t i = 0; i < ctx.size(); ++i)
    for (size_t k = 0; k < 2 + 7 * i; ++k) ctx[i].push_back(static_cast<int32_t>(rng() % v));
  std::vector<uint8_t> all(static_cast<size_t>(program_token_count()), 1);
  double worst = 0;
  int differ = 0;
  for (int step = 0; step < 20; ++step) {
    std::vector<decode_slot> a, b;
    for (size_t i = 0; i < ctx.size(); ++i) {
      if (i == 5 && step < 8) continue; // joins late
      if (i == 1 && step == 10)         // a new turn: several tokens at once on a warm cache
        for (int k = 0; k < 5; ++k) ctx[i].push_back(static_cast<int32_t>(rng() % v));
      decode_slot s;
      s.seq_id = 40 + i;
      s.context = &ctx[i];
      s.mask = &all;
      a.push_back(s);
      b.push_back(s);
    }
    if (step == 12) { // a released sequence's row is reused by a new one
      (*cpu)->release(40);
      (*gpu)->release(40);
      ctx[0] = {3, 4, 5};
      a[0].seq_id = b[0].seq_id = 99;
    }
    std::mt19937_64 ra(step), rb(step);
    (*cpu)->step(a, ra);
    (*gpu)->step(b, rb);
    for (size_t k = 0; k < a.size(); ++k) {
      REQUIRE(a[k].token >= 0);
      // The same rng state over nearly equal distributions picks the same token, but for a draw
      // that lands on a boundary between two tokens.
      if (a[k].token == b[k].token)
        worst = std::max(worst, static_cast<double>(std::abs(a[k].logprob - b[k].logprob)));
      else
        ++differ;
      ctx[static_cast<size_t>(a[k].seq_id == 99 ? 0 : a[k].seq_id - 40)].push_back(a[k].token);
    }
  }
  MESSAGE("worst |logprob cpu - cuda| over 20 steps: " << worst
                                                       << ", tokens differing: " << differ);
  CHECK(worst < 1e-3);
  CHECK(differ <= 2);
}

TEST_CASE("cuda learner: PPO updates run, stay finite, and their weights load on a cpu policy") {
  learner_config c;
  c.model.d_model = 64;
  c.model.n_layers = 2;
  c.model.n_heads = 4;
  c.model.max_len = 256;
  c.batch_size = 16;
  c.lr = 1e-3;
  c.device = "cuda";
  auto l = learner::create(c, tasks());
  REQUIRE(l);
  (*l)->publish();
  auto pts = proxy_tasks(tasks());
  auto pol_opts = policy_on("cuda", 1);
  pol_opts.model = (*l)->config().model;
  pol_opts.slot = (*l)->weights();
  auto pol = model_policy::create(pol_opts);
  REQUIRE(pol);
  std::mt19937_64 rng(2);
  for (int u = 0; u < 3; ++u) {
    (*pol)->refresh();
    std::vector<size_t> which;
    for (int i = 0; i < c.batch_size; ++i) which.push_back(rng() % pts.size());
    auto eps =
        generate_proxy_episodes(**pol, pts, which, rng, "u" + std::to_string(u) + "-", nullptr);
    for (auto& e : eps) CHECK((*l)->offer(e) == offer_result::accepted);
    auto m = (*l)->update();
    REQUIRE(m);
    CHECK(std::isfinite(m->pg_loss));
    CHECK(std::isfinite(m->vf_loss));
    CHECK(m->tokens > 0);
  }
  CHECK((*l)->version() >= 3);
  // The newest weights on a cpu policy: its behaviour log-probs are the cuda learner's scores.
  auto cpu_opts = policy_on("cpu", 1);
  cpu_opts.model = (*l)->config().model;
  cpu_opts.slot = (*l)->weights();
  auto cpu_pol = model_policy::create(cpu_opts);
  REQUIRE(cpu_pol);
  CHECK((*cpu_pol)->version() == (*l)->version());
  auto eps = generate_proxy_episodes(**cpu_pol, pts, {0, 1, 2}, rng, "check-", nullptr);
  double worst = 0;
  for (const auto& e : eps) {
    auto s = (*l)->score(e);
    REQUIRE(s);
    size_t k = 0;
    for (size_t i = 0; i < e.tokens.size(); ++i)
      if (e.loss_mask[i]) worst = std::max(worst, std::abs(double(e.logprobs[i]) - (*s)[k++]));
  }
  MESSAGE("worst |behaviour logprob (cpu policy) - learner score (cuda)|: " << worst);
  CHECK(worst < 1e-3);

  // A cuda checkpoint resumes on cuda (version, optimizer) and loads as a cpu model for eval.
  auto dir =
      std::filesystem::temp_directory_path() / ("kiln-cuda-ckpt-" + std::to_string(::getpid()));
  c.checkpoint_dir = dir.string();
  auto l2 = learner::create(c, tasks());
  REQUIRE(l2);
  std::printf("checkpoint: save\n");
  std::fflush(stdout);
  auto file = (*l)->save_checkpoint(dir.string() + "/ckpt.pt");
  REQUIRE(file);
  REQUIRE((*l2)->load_checkpoint(*file));
  CHECK((*l2)->version() == (*l)->version());
  std::printf("checkpoint: resumed, scoring\n");
  std::fflush(stdout);
  auto again = (*l2)->score(eps[0]);
  REQUIRE(again);
  auto first = (*l)->score(eps[0]);
  REQUIRE(first);
  for (size_t i = 0; i < again->size(); ++i)
    CHECK((*again)[i] == doctest::Approx((*first)[i]).epsilon(1e-5));
  std::printf("checkpoint: loading on cpu\n");
  std::fflush(stdout);
  int64_t version = -1;
  auto on_cpu = load_model_checkpoint(*file, &version);
  REQUIRE(on_cpu);
  CHECK(version == (*l)->version());
  CHECK((*on_cpu)->tok_emb->weight.device().is_cpu());
  // Not fs::remove_all: LibTorch 2.11 exports an interposing copy of it that crashes.
  for (const auto& e : std::filesystem::directory_iterator(dir)) std::filesystem::remove(e.path());
  std::filesystem::remove(dir);
}

int main(int argc, char** argv) {
  if (!torch::cuda::is_available()) {
    std::printf("SKIPPED: no CUDA device visible to LibTorch\n");
    return 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
