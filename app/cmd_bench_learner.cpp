// kiln bench learner: figures of the PPO learner on this machine.
//   decode: trajectory frames (~600 tokens, 3 turns) through the intake's decode path, one core
//   prepare: grammar-mask replay of a 3-turn trajectory (the learner's per-trajectory CPU work)
//   update: PPO update tokens/s (forward + backward + Adam) on batches of typical trajectories
//   policy: decode tokens/s of the policy model (batched KV-cache steps) at several batch sizes
//   async vs sync: wall clock for the same number of updates with a concurrent producer
//   --learn: the smoke-check learning run on the proxy reward (learner/smoke.hpp; not the pool)
#include "app/commands.hpp"
#include "data/task_set.hpp"
#include "learner/intake.hpp"
#include "learner/learner.hpp"
#include "learner/model_policy.hpp"
#include "learner/samples.hpp"
#include "learner/smoke.hpp"
#include "rollout/token_space.hpp"
#include "skills/expert.hpp"
#include "skills/grammar.hpp"

#include <atomic>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <spdlog/spdlog.h>
#include <thread>

namespace kiln {

namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// A typical multi-turn trajectory: prompt, then per turn [PROGRAM] program tokens [OBS] ...
// [OBS_END]; model tokens are random program tokens (no grammar: for decode and update speed).
trajectory synthetic(const task& t, int turns, int program_len, std::mt19937_64& rng,
                     const std::string& id) {
  trajectory tr;
  tr.id = id;
  tr.task = t.name;
  tr.group = "bench";
  tr.policy_version = 0;
  tr.tokens = {token_of(special_token::bos)};
  for (auto x : task_tokens(t)) tr.tokens.push_back(x);
  tr.tokens.push_back(token_of(special_token::task_end));
  tr.loss_mask.assign(tr.tokens.size(), 0);
  for (int k = 0; k < turns; ++k) {
    tr.tokens.push_back(token_of(special_token::program));
    tr.loss_mask.push_back(0);
    turn_record r;
    r.start = static_cast<int32_t>(tr.tokens.size());
    for (int i = 0; i < program_len; ++i) {
      tr.tokens.push_back(static_cast<int32_t>(rng() % program_token_count()));
      tr.loss_mask.push_back(1);
    }
    r.end = static_cast<int32_t>(tr.tokens.size());
    r.outcome = "correct";
    r.reward = 1;
    r.speedup_eager = 1.3;
    r.compile_ms = 400;
    r.run_ms = 20;
    tr.turns.push_back(r);
    for (auto s : {special_token::obs, special_token::obs_end}) {
      tr.tokens.push_back(token_of(s));
      tr.loss_mask.push_back(0);
    }
  }
  tr.logprobs.assign(tr.tokens.size(), 0.0f);
  tr.versions.assign(tr.tokens.size(), -1);
  for (size_t i = 0; i < tr.tokens.size(); ++i)
    if (tr.loss_mask[i]) {
      tr.logprobs[i] = -static_cast<float>(rng() % 1000) / 500.0f;
      tr.versions[i] = 0;
    }
  tr.reward = 1;
  return tr;
}

// A 3-turn trajectory of expert programs (grammar-valid) for the prepare figure.
trajectory expert_three_turns(const task& t) {
  auto prog = to_tokens(expert_program(t, backend_kind::cpu));
  trajectory tr;
  tr.id = "expert3";
  tr.task = t.name;
  tr.tokens = first_turn_prompt(t);
  tr.tokens.pop_back();
  for (int k = 0; k < 3; ++k) {
    tr.tokens.push_back(token_of(special_token::program));
    turn_record r;
    r.start = static_cast<int32_t>(tr.tokens.size());
    tr.tokens.insert(tr.tokens.end(), prog.begin(), prog.end());
    r.end = static_cast<int32_t>(tr.tokens.size());
    tr.turns.push_back(r);
    tr.tokens.push_back(token_of(special_token::obs));
    tr.tokens.push_back(token_of(special_token::obs_end));
  }
  tr.loss_mask.assign(tr.tokens.size(), 0);
  for (const auto& r : tr.turns)
    for (int32_t i = r.start; i < r.end; ++i) tr.loss_mask[static_cast<size_t>(i)] = 1;
  tr.logprobs.assign(tr.tokens.size(), 0.0f);
  tr.versions.assign(tr.tokens.size(), 0);
  return tr;
}

template <class F>
double rate_for(double seconds, F&& f) {
  auto t0 = clock_type::now();
  uint64_t n = 0;
  double el = 0;
  do {
    for (int i = 0; i < 256; ++i) f();
    n += 256;
    el = since(t0);
  } while (el < seconds);
  return static_cast<double>(n) / el;
}

// Wall clock of `updates` PPO updates with a producer thread generating proxy episodes from the
// newest published weights; eta = 0 makes the producer wait for each new version (synchronous).
// The learner's device and model size from the bench's flags (0 = the default size).
learner_config bench_learner_config(const bench_args& args) {
  learner_config cfg;
  cfg.device = args.device;
  if (args.d_model > 0) cfg.model.d_model = args.d_model;
  if (args.n_layers > 0) cfg.model.n_layers = args.n_layers;
  if (args.n_heads > 0) cfg.model.n_heads = args.n_heads;
  return cfg;
}

nlohmann::json timed_run(const std::vector<task>& tasks, const std::vector<proxy_task>& pts,
                         int eta, const bench_args& args) {
  learner_config cfg = bench_learner_config(args);
  const int updates = args.updates;
  const uint64_t seed = args.seed;
  cfg.eta = eta;
  cfg.batch_size = 32;
  cfg.max_updates = updates;
  // One core trains, another generates (on a 2-core machine that is all of it).
  cfg.threads = args.device == "cpu" ? 1 : 0;
  cfg.queue_capacity = 2 * cfg.batch_size;
  cfg.seed = seed;
  auto l = learner::create(cfg, tasks);
  if (!l) return {{"error", l.message()}};
  model_policy_options po;
  po.model = (*l)->config().model;
  po.slot = (*l)->weights();
  po.device = args.device;
  auto pol = model_policy::create(po);
  if (!pol) return {{"error", pol.message()}};
  auto q = (*l)->queue();
  std::atomic<double> update_s{0};
  (*l)->on_metrics([&](const update_metrics& m) { update_s = update_s + m.seconds; });
  std::mt19937_64 rng(seed);
  auto t0 = clock_type::now();
  if (auto st = (*l)->start(); !st) return {{"error", st.message()}};
  proxy_stats ps;
  int64_t round = 0;
  // Admission as AReaL bounds staleness: batch number `round` may start once the learner has
  // reached version round - eta (eta = 0: wait for each new version, i.e. synchronous PPO).
  auto learner_version = [&] {
    auto w = (*l)->weights()->latest();
    return w ? w->version : int64_t{-1};
  };
  while (!(*l)->finished()) {
    while (!(*l)->finished() && learner_version() < std::max<int64_t>(0, round - eta))
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    (*pol)->refresh();
    std::vector<size_t> which;
    for (int i = 0; i < cfg.batch_size; ++i) which.push_back(rng() % pts.size());
    auto eps =
        generate_proxy_episodes(**pol, pts, which, rng, "r" + std::to_string(round) + "-", &ps);
    for (auto& e : eps) // try_push: a finished learner no longer drains the queue
      while (!q->try_push(e) && !(*l)->finished())
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ++round;
  }
  double wall = since(t0);
  (*l)->stop();
  return {{"eta", eta},
          {"updates", updates},
          {"wall_s", wall},
          {"update_s", update_s.load()}, // learner thread busy in update()
          {"generate_s", ps.seconds},    // producer thread busy generating
          {"episodes_generated", ps.episodes},
          {"trajectories_trained", (*l)->trajectories_trained()}};
}

// Decode throughput of the policy server's model: `batch` sequences with prompts of `prompt`
// tokens each take decode steps together (every step one token per sequence, all program tokens
// allowed), as the policy server runs them; the first steps (prefill) are not counted.
nlohmann::json policy_decode(const bench_args& args, int batch, int prompt, int steps) {
  model_policy_options po;
  po.model = bench_learner_config(args).model;
  po.device = args.device;
  auto pol = model_policy::create(po);
  if (!pol) return {{"error", pol.message()}};
  std::mt19937_64 rng(args.seed);
  std::vector<std::vector<int32_t>> ctx(static_cast<size_t>(batch));
  for (auto& c : ctx)
    for (int i = 0; i < prompt; ++i) c.push_back(static_cast<int32_t>(rng() % vocab_size()));
  std::vector<uint8_t> all(static_cast<size_t>(program_token_count()), 1);
  std::vector<decode_slot> slots(static_cast<size_t>(batch));
  auto run = [&](int n) {
    for (int s = 0; s < n; ++s) {
      for (size_t i = 0; i < slots.size(); ++i) {
        slots[i].seq_id = i;
        slots[i].context = &ctx[i];
        slots[i].mask = &all;
      }
      (*pol)->step(slots, rng);
      for (size_t i = 0; i < slots.size(); ++i) ctx[i].push_back(slots[i].token);
    }
  };
  run(2); // prefill and warm-up
  auto t0 = clock_type::now();
  run(steps);
  double secs = since(t0);
  return {{"batch", batch},
          {"prompt_tokens", prompt},
          {"steps", steps},
          {"tokens_per_s", batch * steps / secs},
          {"step_ms", 1e3 * secs / steps}};
}

nlohmann::json learn_run(const std::vector<task>& tasks, const std::vector<proxy_task>& pts,
                         const bench_args& args) {
  learner_config cfg = bench_learner_config(args);
  cfg.batch_size = 64;
  cfg.lr = 1e-3;
  cfg.eta = 0;
  cfg.seed = args.seed;
  cfg.ppo.ent_coef = 0.0;
  auto l = learner::create(cfg, tasks);
  if (!l) return {{"error", l.message()}};
  model_policy_options po;
  po.model = (*l)->config().model;
  po.slot = (*l)->weights();
  po.device = args.device;
  auto pol = model_policy::create(po);
  if (!pol) return {{"error", pol.message()}};
  (*l)->publish();
  std::mt19937_64 rng(args.seed);
  std::vector<size_t> all;
  for (size_t i = 0; i < pts.size(); ++i) all.push_back(i);
  auto evaluate = [&](const std::string& tag) {
    proxy_stats st;
    (*pol)->refresh();
    for (int rep = 0; rep < 4; ++rep) generate_proxy_episodes(**pol, pts, all, rng, tag, &st);
    return st;
  };
  // Baselines: the uniform random masked policy, and the untrained model.
  proxy_stats rnd;
  for (int rep = 0; rep < 4; ++rep)
    for (const auto& pt : pts) {
      auto p = sample_program(*pt.spec, rng);
      auto r = proxy_reward(pt.expert, std::vector<int32_t>(p.begin(), p.end()));
      ++rnd.episodes;
      rnd.passes += r.pass;
      rnd.reward_sum += r.reward;
    }
  auto before = evaluate("eval0-");
  std::ofstream curve;
  if (!args.out.empty()) curve.open(args.out);
  auto t0 = clock_type::now();
  int64_t n = 0;
  while (since(t0) < args.seconds) {
    std::vector<size_t> which;
    for (int i = 0; i < cfg.batch_size; ++i) which.push_back(rng() % pts.size());
    proxy_stats st;
    (*pol)->refresh();
    auto eps = generate_proxy_episodes(**pol, pts, which, rng, "u" + std::to_string(n) + "-", &st);
    for (auto& e : eps) (*l)->offer(e);
    auto m = (*l)->update();
    if (!m) return {{"error", m.message()}};
    ++n;
    nlohmann::json row = nlohmann::json::parse(to_json(*m));
    row["elapsed_s"] = since(t0);
    row["batch_pass_rate"] = st.pass_rate();
    row["batch_mean_reward"] = st.mean_reward();
    if (curve.is_open()) curve << row.dump() << '\n';
    if (n % 10 == 0)
      spdlog::info("learn: update {} at {:.0f}s: batch reward {:.3f} pass {:.3f} entropy {:.3f}", n,
                   since(t0), st.mean_reward(), st.pass_rate(), m->entropy);
  }
  auto after = evaluate("eval1-");
  auto js = [](const proxy_stats& s) {
    return nlohmann::json{
        {"mean_reward", s.mean_reward()}, {"pass_rate", s.pass_rate()}, {"episodes", s.episodes}};
  };
  return {{"what", "smoke check on the proxy reward (structure vs expert; no pool)"},
          {"tasks", pts.size()},
          {"updates", n},
          {"train_s", since(t0)},
          {"random_policy", js(rnd)},
          {"untrained", js(before)},
          {"trained", js(after)},
          {"expert", {{"mean_reward", 1.0}, {"pass_rate", 1.0}}}};
}

} // namespace

int cmd_bench_learner(const common_args& common, const bench_args& args) {
  auto suites = args.suites;
  if (suites.empty())
    suites = {KILN_SOURCE_DIR "/data/suites/level1/cpu", KILN_SOURCE_DIR "/data/suites/level2/cpu",
              KILN_SOURCE_DIR "/data/suites/level3/cpu"};
  auto set = load_tasks(suites);
  for (const auto& e : set.errors) spdlog::error("{}", e.message);
  if (set.tasks.empty()) {
    spdlog::error("bench learner: no tasks");
    return 2;
  }
  auto pts = proxy_tasks(set.tasks);
  nlohmann::json out;
  std::mt19937_64 rng(args.seed);
  auto level = spdlog::get_level();

  if (args.learn) {
    configure_threads(common.threads);
    out["learn"] = learn_run(set.tasks, pts, args);
    std::printf("%s\n", out.dump(args.json ? -1 : 2).c_str());
    return out["learn"].contains("error") ? 1 : 0;
  }

  // 1. Decode on one core: the intake's whole path (decode_trajectory + consistency checks).
  {
    auto tr = synthetic(set.tasks[0], 3, 190, rng, "bench-decode");
    auto frame = encode(tr);
    trajectory_limits lim;
    lim.vocab_size = vocab_size();
    intake in(lim, std::make_shared<trajectory_queue>());
    size_t ok = 0;
    double r =
        rate_for(1.5, [&] { ok += in.accept_frame(frame.data(), frame.size()).has_value(); });
    if (ok == 0) spdlog::error("bench learner: the typical frame was rejected");
    out["decode_msgs_per_s"] = r;
    out["decode_MB_per_s"] = r * static_cast<double>(frame.size()) / 1e6;
    out["decode_frame_bytes"] = frame.size();
    out["decode_frame_tokens"] = tr.tokens.size();
    spdlog::info("decode: {:.0f} frames/s of {} tokens ({} B) on one core", r, tr.tokens.size(),
                 frame.size());
    // Grammar-mask replay (learner side, per trajectory).
    const task* t2 = &set.tasks.back();
    auto e3 = expert_three_turns(*t2);
    double pr = rate_for(1.0, [&] { (void)prepare_sample(e3, t2, reward_placement::episode); });
    out["prepare_per_s"] = pr;
    out["prepare_tokens"] = e3.tokens.size();
  }

  // 2. PPO update throughput on typical trajectories (~600 tokens, 3 turns; grammar-free masks,
  // synthetic tokens).
  {
    int threads = configure_threads(common.threads);
    spdlog::set_level(spdlog::level::warn);
    learner_config cfg = bench_learner_config(args);
    cfg.batch_size = 16;
    cfg.threads = threads;
    cfg.eta = 1 << 20;
    auto l = learner::create(cfg, {});
    if (!l) {
      spdlog::error("{}", l.message());
      return 1;
    }
    size_t tokens = 0, model_tokens = 0;
    double secs = 0;
    for (int u = 0; u < 4; ++u) {
      for (int i = 0; i < cfg.batch_size; ++i)
        (*l)->offer(synthetic(set.tasks[static_cast<size_t>(i) % set.tasks.size()], 3, 190, rng,
                              "u" + std::to_string(u) + "-" + std::to_string(i)));
      auto m = (*l)->update();
      if (!m) {
        spdlog::error("{}", m.message());
        return 1;
      }
      if (u == 0) continue; // warm-up
      tokens += m->tokens;
      model_tokens += m->model_tokens;
      secs += m->seconds;
    }
    spdlog::set_level(level);
    out["update_tokens_per_s"] = static_cast<double>(tokens) / secs;
    out["update_model_tokens_per_s"] = static_cast<double>(model_tokens) / secs;
    out["update_batch"] = cfg.batch_size;
    out["update_threads"] = threads;
    out["model"] = to_string((*l)->config().model);
    out["device"] = args.device;
    spdlog::info("update: {:.0f} tokens/s ({:.0f} model tokens/s), {} threads",
                 out["update_tokens_per_s"].get<double>(),
                 out["update_model_tokens_per_s"].get<double>(), threads);
  }

  // 3. Policy decode: what one policy server's model writes per second.
  {
    spdlog::set_level(spdlog::level::warn);
    auto rows = nlohmann::json::array();
    for (int b : {1, 16, 256}) rows.push_back(policy_decode(args, b, 128, b >= 256 ? 16 : 32));
    spdlog::set_level(level);
    out["policy_decode"] = rows;
    for (const auto& r : rows)
      if (r.contains("tokens_per_s"))
        spdlog::info("policy decode: batch {:>3}: {:.0f} tokens/s ({:.2f} ms per step)",
                     r["batch"].get<int>(), r["tokens_per_s"].get<double>(),
                     r["step_ms"].get<double>());
  }

  // 4. Async (eta = 1) vs sync (eta = 0): same number of updates, producer on its own thread.
  if (args.updates > 0) {
    spdlog::set_level(spdlog::level::warn);
    auto sync = timed_run(set.tasks, pts, 0, args);
    auto async = timed_run(set.tasks, pts, 1, args);
    spdlog::set_level(level);
    out["sync"] = sync;
    out["async"] = async;
    if (sync.contains("wall_s") && async.contains("wall_s"))
      out["async_speedup"] = sync["wall_s"].get<double>() / async["wall_s"].get<double>();
  }
  std::printf("%s\n", out.dump(args.json ? -1 : 2).c_str());
  return 0;
}

} // namespace kiln
