// The learner: updates from trajectories, staleness and duplicates, stages, checkpoint round trip
// and resume (version continues, optimizer state restored, no trajectory counted twice), and the
// threaded host over ZeroMQ (PUSH trajectories in, PUB weights out to a policy's SUB).
#include "data/task_set.hpp"
#include "learner/learner.hpp"
#include "learner/model_policy.hpp"
#include "learner/smoke.hpp"

#include <doctest/doctest.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <zmq.hpp>

#include <filesystem>
#include <fstream>
#include <thread>

using namespace kiln;
namespace fs = std::filesystem;

namespace {

const std::vector<task>& tasks() {
  static task_set s = load_tasks({KILN_SOURCE_DIR "/data/suites/level2/cpu"});
  return s.tasks;
}

learner_config tiny_config() {
  learner_config c;
  c.model.d_model = 32;
  c.model.n_layers = 1;
  c.model.n_heads = 2;
  c.model.max_len = 256;
  c.batch_size = 8;
  c.lr = 1e-3;
  c.threads = 1;
  c.sft_batch = 8;
  return c;
}

std::string temp_dir(const std::string& name) {
  auto d =
      fs::temp_directory_path() / ("kiln-learner-test-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d.string();
}

// Episodes from a policy following the learner's published weights.
std::vector<trajectory> episodes(learner& l, size_t n, const std::string& prefix, uint64_t seed) {
  static auto pts = proxy_tasks(tasks());
  model_policy_options o;
  o.model = l.config().model;
  o.slot = l.weights();
  auto pol = model_policy::create(o);
  REQUIRE(pol);
  (*pol)->refresh();
  std::mt19937_64 rng(seed);
  std::vector<size_t> which;
  for (size_t i = 0; i < n; ++i) which.push_back(i % pts.size());
  return generate_proxy_episodes(**pol, pts, which, rng, prefix, nullptr);
}

std::vector<float> scores(learner& l, const trajectory& t) {
  auto s = l.score(t);
  REQUIRE(s);
  return *s;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(double(a[i]) - b[i]));
  return d;
}

} // namespace

TEST_CASE(
    "learner: an update consumes a batch, bumps the version, publishes, reports finite metrics") {
  spdlog::set_level(spdlog::level::warn);
  auto l = learner::create(tiny_config(), tasks());
  REQUIRE(l);
  auto& L = **l;
  L.publish();
  auto eps = episodes(L, 10, "a", 1);
  // The behaviour log-probs the policy reported equal the learner's own scoring (same weights,
  // same grammar masks): the ratio starts at exactly 1.
  auto sc = scores(L, eps[0]);
  std::vector<float> behav;
  for (size_t i = 0; i < eps[0].tokens.size(); ++i)
    if (eps[0].loss_mask[i]) behav.push_back(eps[0].logprobs[i]);
  CHECK(max_abs_diff(sc, behav) < 1e-4);
  for (auto& t : eps) CHECK(L.offer(t) == offer_result::accepted);
  CHECK(L.offer(eps[0]) == offer_result::duplicate);
  CHECK(L.pending() == 10);
  auto m = L.update();
  REQUIRE(m);
  CHECK(L.version() == 1);
  CHECK(L.pending() == 2);
  CHECK(m->trajectories == 8);
  CHECK(std::isfinite(m->loss));
  CHECK(m->behav_w_mean == doctest::Approx(1.0).epsilon(1e-3)); // fresh samples: no correction
  CHECK(m->lag_mean == doctest::Approx(0.0));
  CHECK(L.weights()->latest()->version == 1);
  CHECK_FALSE(L.update());                           // only 2 pending
  CHECK(max_abs_diff(scores(L, eps[0]), sc) > 1e-6); // the weights moved
}

TEST_CASE("learner: update_kl measures how far an update moved the policy, approx_kl cannot") {
  spdlog::set_level(spdlog::level::warn);
  auto cfg = tiny_config();
  cfg.kl_every = 2;
  auto l = learner::create(cfg, tasks());
  REQUIRE(l);
  auto& L = **l;
  L.publish();
  auto eps = episodes(L, 16, "kl", 3);
  for (auto& t : eps) REQUIRE(L.offer(t) == offer_result::accepted);
  auto first = L.update();
  REQUIRE(first);
  CHECK(first->update_kl == -1); // update 1 of every 2: not measured
  CHECK(to_json(*first).find("\"update_kl\":null") != std::string::npos);
  auto second = L.update();
  REQUIRE(second);
  // One epoch, one minibatch: the only step is taken at the proximal weights.
  CHECK(second->approx_kl == doctest::Approx(0.0));
  CHECK(second->clip_frac == doctest::Approx(0.0));
  CHECK(std::isfinite(second->update_kl));
  CHECK(second->update_kl > 0);
  CHECK(to_json(*second).find("\"update_kl\":null") == std::string::npos);
}

TEST_CASE("learner: eta bounds staleness (eta = 0 is synchronous)") {
  spdlog::set_level(spdlog::level::warn);
  auto cfg = tiny_config();
  cfg.eta = 0;
  auto l = learner::create(cfg, tasks());
  REQUIRE(l);
  auto& L = **l;
  L.publish();
  auto old = episodes(L, 16, "s", 2);
  for (size_t i = 0; i < 8; ++i) CHECK(L.offer(old[i]) == offer_result::accepted);
  REQUIRE(L.update());
  std::string why;
  CHECK(L.offer(old[8], &why) == offer_result::stale); // produced by version 0, learner at 1
  CHECK(why.find("lag") != std::string::npos);
  auto fresh = episodes(L, 8, "t", 3);
  CHECK(L.offer(fresh[0]) == offer_result::accepted);
  CHECK(L.offer(fresh[0]) == offer_result::duplicate);
}

TEST_CASE("learner: unknown tasks and over-long trajectories are rejected, not fatal") {
  auto l = learner::create(tiny_config(), tasks());
  REQUIRE(l);
  auto eps = episodes(**l, 2, "u", 4);
  eps[0].task = "no_such_task";
  CHECK((*l)->offer(eps[0]) == offer_result::rejected);
  eps[1].tokens.resize(300, eps[1].tokens.back());
  eps[1].loss_mask.resize(300, 0);
  eps[1].logprobs.resize(300, 0);
  eps[1].versions.resize(300, -1);
  CHECK((*l)->offer(eps[1]) == offer_result::rejected);
}

TEST_CASE("learner: checkpoint round trip, resume continues the version and the optimizer") {
  spdlog::set_level(spdlog::level::warn);
  auto dir = temp_dir("ckpt");
  auto cfg = tiny_config();
  cfg.checkpoint_dir = dir;
  auto a = learner::create(cfg, tasks());
  REQUIRE(a);
  (*a)->publish();
  auto b1 = episodes(**a, 8, "b1-", 5);
  for (auto& t : b1) (*a)->offer(t);
  REQUIRE((*a)->update());
  auto path = (*a)->save_checkpoint();
  REQUIRE(path);
  CHECK(fs::exists(*path));
  CHECK(fs::exists(fs::path(dir) / "latest"));
  auto b2 = episodes(**a, 8, "b2-", 6);

  auto rcfg = cfg;
  rcfg.resume = "latest";
  auto r = learner::create(rcfg, tasks());
  REQUIRE(r);
  CHECK((*r)->version() == (*a)->version());
  CHECK((*r)->steps() == (*a)->steps());
  CHECK((*r)->trajectories_trained() == 8);
  CHECK(max_abs_diff(scores(**r, b2[0]), scores(**a, b2[0])) < 1e-7);
  // A trajectory trained before the checkpoint is never counted again.
  for (auto& t : b1) CHECK((*r)->offer(t) == offer_result::duplicate);
  // The same next update on both gives the same weights: Adam moments and step were restored.
  for (auto& t : b2) {
    CHECK((*a)->offer(t) == offer_result::accepted);
    CHECK((*r)->offer(t) == offer_result::accepted);
  }
  REQUIRE((*a)->update());
  REQUIRE((*r)->update());
  CHECK((*r)->version() == 2);
  CHECK(max_abs_diff(scores(**r, b2[1]), scores(**a, b2[1])) < 1e-5);
  // A fresh learner (no resume) would differ: the check above can fail.
  auto fresh = learner::create(cfg, tasks());
  for (auto& t : b2) (*fresh)->offer(t);
  auto fm = (*fresh)->update();
  REQUIRE(fm);
  CHECK(max_abs_diff(scores(**fresh, b2[1]), scores(**a, b2[1])) > 1e-4);
  // keep_checkpoints (3) prunes old files.
  for (int i = 0; i < 4; ++i) {
    for (auto& t : episodes(**a, 8, "k" + std::to_string(i) + "-", 20 + i)) (*a)->offer(t);
    REQUIRE((*a)->update());
    REQUIRE((*a)->save_checkpoint());
  }
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.path().extension() == ".pt";
  CHECK(files == 3);
  fs::remove_all(dir);
}

TEST_CASE("learner stages: sft raises expert log-likelihood, value pretraining leaves the policy") {
  spdlog::set_level(spdlog::level::warn);
  auto cfg = tiny_config();
  cfg.lr = 3e-3;
  auto l = learner::create(cfg, tasks());
  REQUIRE(l);
  auto expert = expert_samples(tasks(), backend_kind::cpu);
  REQUIRE(!expert.empty());
  // Score an expert program as a trajectory.
  trajectory e;
  e.id = "e";
  e.task = expert[0].task;
  e.tokens = expert[0].tokens;
  e.loss_mask.assign(e.tokens.size(), 0);
  for (auto p : expert[0].model_pos) e.loss_mask[static_cast<size_t>(p)] = 1;
  e.logprobs.assign(e.tokens.size(), 0);
  e.versions.assign(e.tokens.size(), 0);
  auto ll = [&] {
    double s = 0;
    for (float x : scores(**l, e)) s += x;
    return s;
  };
  double before = ll();
  auto m = (*l)->run_sft(60);
  REQUIRE(m);
  CHECK(m->stage == "sft");
  CHECK((*l)->version() == 1);
  double after = ll();
  CHECK(after > before + 1.0);
  CHECK(m->accuracy > 0.5);

  auto vcfg = cfg;
  vcfg.stage = "value";
  auto v = learner::create(vcfg, tasks());
  REQUIRE(v);
  (*v)->publish();
  auto eps = episodes(**v, 8, "v", 8);
  for (auto& t : eps) (*v)->offer(t);
  auto s0 = scores(**v, eps[0]);
  auto vm = (*v)->update();
  REQUIRE(vm);
  CHECK(vm->stage == "value");
  CHECK(max_abs_diff(scores(**v, eps[0]), s0) < 1e-7); // policy untouched
  CHECK(vm->vf_loss > 0);
  CHECK((*v)->version() == 0); // and so is its version: the episodes it wrote stay fresh
}

TEST_CASE("learner host: PUSH trajectories in over ZeroMQ, weights out over PUB to a policy") {
  spdlog::set_level(spdlog::level::warn);
  auto dir = temp_dir("host");
  auto cfg = tiny_config();
  cfg.checkpoint_dir = dir;
  cfg.metrics_path = dir + "/metrics.jsonl";
  auto id = std::to_string(::getpid());
  cfg.pull_endpoint = "ipc:///tmp/kiln-test-pull-" + id;
  cfg.pub_endpoint = "ipc:///tmp/kiln-test-pub-" + id;
  auto l = learner::create(cfg, tasks());
  REQUIRE(l);
  std::vector<update_metrics> seen;
  std::mutex mu;
  (*l)->on_metrics([&](const update_metrics& m) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(m);
  });
  model_policy_options po;
  po.model = cfg.model;
  po.sub_endpoint = cfg.pub_endpoint;
  auto pol = model_policy::create(po);
  REQUIRE(pol);
  REQUIRE((*l)->start());
  auto eps = episodes(**l, 8, "h", 9);
  zmq::context_t ctx;
  zmq::socket_t push(ctx, zmq::socket_type::push);
  push.connect(cfg.pull_endpoint);
  for (auto& t : eps) {
    auto b = encode(t);
    push.send(zmq::buffer(b));
    push.send(zmq::str_buffer("\x81\xa1v\x02")); // a map with v = 2: rejected
  }
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool got_weights = false;
  while (std::chrono::steady_clock::now() < until) {
    if ((*pol)->refresh() && (*pol)->version() >= 1) {
      got_weights = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(got_weights);
  CHECK((*l)->version() >= 1);
  CHECK((*l)->intake_counters().rejected == 8);
  (*l)->stop();
  {
    std::lock_guard<std::mutex> lock(mu);
    CHECK(seen.size() == 1);
  }
  CHECK(fs::exists(fs::path(dir) / "latest"));
  std::ifstream in(cfg.metrics_path);
  std::string line;
  REQUIRE(std::getline(in, line));
  CHECK(line.find("\"stage\":\"ppo\"") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("learning smoke check: PPO raises the proxy reward above the untrained policy's") {
  // Proxy reward (learner/smoke.hpp), not the pool: this pins that sampling, masks, GAE, the
  // decoupled loss, Adam and weight swaps together improve a policy on a learnable signal.
  spdlog::set_level(spdlog::level::warn);
  at::set_num_threads(1);
  auto cfg = tiny_config();
  cfg.model.d_model = 64;
  cfg.model.n_heads = 4;
  cfg.model.n_layers = 2;
  cfg.batch_size = 32;
  cfg.lr = 2e-3;
  cfg.eta = 0;
  std::vector<task> ts(tasks().begin(), tasks().begin() + std::min<size_t>(24, tasks().size()));
  auto l = learner::create(cfg, ts);
  REQUIRE(l);
  auto pts = proxy_tasks(ts);
  model_policy_options o;
  o.model = (*l)->config().model;
  o.slot = (*l)->weights();
  auto pol = model_policy::create(o);
  REQUIRE(pol);
  (*l)->publish();
  std::mt19937_64 rng(17);
  std::vector<size_t> all;
  for (size_t i = 0; i < pts.size(); ++i) all.push_back(i);
  auto eval = [&] {
    proxy_stats st;
    (*pol)->refresh();
    for (int r = 0; r < 4; ++r) generate_proxy_episodes(**pol, pts, all, rng, "e", &st);
    return st.mean_reward();
  };
  double before = eval();
  for (int u = 0; u < 25; ++u) {
    std::vector<size_t> which;
    for (int i = 0; i < cfg.batch_size; ++i) which.push_back(rng() % pts.size());
    (*pol)->refresh();
    for (auto& t :
         generate_proxy_episodes(**pol, pts, which, rng, "u" + std::to_string(u) + "-", nullptr))
      REQUIRE((*l)->offer(t) == offer_result::accepted);
    REQUIRE((*l)->update());
  }
  double after = eval();
  MESSAGE("proxy mean reward: untrained " << before << ", after 25 updates " << after);
  CHECK(after > before + 0.15);
}

TEST_CASE("learner: length-sorted forward chunks give the same update as one padded batch") {
  spdlog::set_level(spdlog::level::warn);
  auto cfg = tiny_config();
  auto one = learner::create(cfg, tasks());
  cfg.chunk_tokens = 1; // every trajectory its own chunk
  auto many = learner::create(cfg, tasks());
  REQUIRE(one);
  REQUIRE(many);
  (*one)->publish();
  auto eps = episodes(**one, 8, "c", 31);
  for (auto& t : eps) {
    REQUIRE((*one)->offer(t) == offer_result::accepted);
    REQUIRE((*many)->offer(t) == offer_result::accepted);
  }
  auto a = (*one)->update();
  auto b = (*many)->update();
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->loss == doctest::Approx(b->loss).epsilon(1e-5));
  CHECK(a->vf_loss == doctest::Approx(b->vf_loss).epsilon(1e-5));
  for (size_t i = 0; i < 3; ++i)
    CHECK(max_abs_diff(scores(**one, eps[i]), scores(**many, eps[i])) < 1e-5);
}

TEST_CASE("learner: stale trajectories are corrected and their version lag reported") {
  spdlog::set_level(spdlog::level::warn);
  auto cfg = tiny_config();
  cfg.eta = 1;
  cfg.lr = 3e-3;
  auto l = learner::create(cfg, tasks());
  REQUIRE(l);
  (*l)->publish();
  auto old = episodes(**l, 16, "o", 41); // behaviour policy: version 0
  for (size_t i = 0; i < 8; ++i) REQUIRE((*l)->offer(old[i]) == offer_result::accepted);
  auto first = (*l)->update();
  REQUIRE(first);
  CHECK(first->lag_mean == doctest::Approx(0.0));
  CHECK(first->behav_w_mean == doctest::Approx(1.0).epsilon(1e-3));
  for (size_t i = 8; i < 16; ++i) REQUIRE((*l)->offer(old[i]) == offer_result::accepted);
  auto second = (*l)->update(); // learner at version 1, samples from version 0
  REQUIRE(second);
  CHECK(second->lag_mean == doctest::Approx(1.0));
  CHECK(second->lag_max == doctest::Approx(1.0));
  // pi_prox != pi_behav now: the weights differ from 1 (their mean stays ~1: E_behav[w] = 1).
  CHECK(second->behav_kl > 1e-6);
  CHECK(first->behav_kl < 1e-9);
}

TEST_CASE("learner host: stage all runs sft, then value pretraining, then ppo, then stops") {
  spdlog::set_level(spdlog::level::warn);
  auto cfg = tiny_config();
  cfg.stage = "all";
  cfg.sft_steps = 3;
  cfg.value_updates = 1;
  cfg.max_updates = 1;
  cfg.eta = 10;
  auto l = learner::create(cfg, tasks());
  REQUIRE(l);
  std::vector<std::string> stages;
  std::mutex mu;
  (*l)->on_metrics([&](const update_metrics& m) {
    std::lock_guard<std::mutex> lock(mu);
    stages.push_back(m.stage);
  });
  REQUIRE((*l)->start());
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int round = 0;
  while (!(*l)->finished() && std::chrono::steady_clock::now() < until) {
    if ((*l)->queue()->size() < 8) {
      ++round;
      for (auto& t : episodes(**l, 8, "all" + std::to_string(round) + "-", 50 + round))
        (*l)->queue()->try_push(t);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK((*l)->finished());
  (*l)->stop();
  std::lock_guard<std::mutex> lock(mu);
  CHECK(stages == std::vector<std::string>{"sft", "value", "ppo"});
  CHECK((*l)->version() == 2); // sft and ppo; the value update leaves the policy's version
}
