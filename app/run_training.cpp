// The learner trains on its own thread while the actors roll out; the calling thread only waits
// for the coordinator's summary, and a second thread turns progress into lines and metrics rows.
#include "app/run_training.hpp"

#include "actors/actor_system_setup.hpp"
#include "actors/messages.hpp"
#include "app/eval_runner.hpp"
#include "app/phase_clock.hpp"
#include "app/sft_programs.hpp"
#include "app/tensorboard_events.hpp"
#include "learner/learner.hpp"
#include "learner/model_policy.hpp"
#include "llm/llm_policy_server.hpp"
#include "rollout/builtin_policies.hpp"
#include "rollout/coordinator.hpp"
#include "rollout/policy_server.hpp"
#include "rollout/trajectory_sink.hpp"
#include "rollout/turn_stats.hpp"

#include <atomic>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <spdlog/spdlog.h>
#include <thread>
#include <unistd.h>

namespace kiln {

namespace {

using json = nlohmann::json;

// Ctrl-C / SIGTERM during training: stop admitting, checkpoint, write the summary, exit cleanly.
std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int) { g_interrupted = true; }

double num(const json& j, const char* k) {
  return j.contains(k) && j[k].is_number() ? j[k].get<double>() : 0.0;
}

// One compact line a person can follow, from the coordinator's progress JSON plus the extras
// the progress thread adds (window rates, pool busy share, learner staleness).
void print_progress(const json& s, double t, int64_t total) {
  double done = num(s, "episodes"), rate = done > 0 && t > 0 ? done / t : 0;
  std::string left =
      rate > 0 ? ", ~" + phase_clock::span((static_cast<double>(total) - done) / rate) + " left"
               : std::string();
  spdlog::info(
      "[rollout {:5.0f} s{}] ep {:.0f}/{} run {:.0f} | {:.2f} ep/s {:.2f} steps/s {:.0f} tok/s | "
      "pass {:.0f}% reward {:+.2f} vs tasks' first group {:+.2f} (window) | pool busy {:.0f}% "
      "queue {:.0f} ms | v{:.0f} lag {:.2f}",
      t, left, done, total, num(s, "running"), num(s, "episodes_per_s"), num(s, "steps_per_s"),
      num(s, "tokens_per_s"), 100 * num(s, "window_pass_rate"), num(s, "window_reward"),
      num(s, "window_task_gain"), 100 * num(s, "pool_busy_share"), num(s, "pool_queue_ms"),
      num(s, "learner_version"), num(s, "learner_lag_mean"));
}

// The pool checks and timing of a training program (the run's [rollout] keys).
rollout_job_options jo_for(const run_config& cfg) {
  rollout_job_options jo;
  jo.verify_checks = cfg.rollout_verify_checks;
  jo.timing_cap_ms = cfg.rollout_timing_cap_ms;
  return jo;
}

// CUDA index of a device name ("cuda" = 0, "cuda:N" = N); -1 for others.
int cuda_index(const std::string& device) {
  if (device == "cuda") return 0;
  if (device.rfind("cuda:", 0) != 0) return -1;
  try {
    return std::stoi(device.substr(5));
  } catch (...) {
    return -1;
  }
}

// Training on a GPU the pool also times kernels on makes those timings (and the rewards built on
// them) depend on what the learner was doing: say so once, at start-up.
void warn_shared_gpus(const pool_config& pool, const run_config& cfg) {
  if (pool.backend != backend_kind::cuda) return;
  auto in_pool = [&](int d) {
    return d >= pool.first_device && d < pool.first_device + pool.devices;
  };
  for (const auto& [role, device] :
       {std::pair<const char*, std::string>{"learner.device", cfg.learner.device},
        {"rollout.policy_device", cfg.rollout_policy_device}})
    if (int d = cuda_index(device); d >= 0 && in_pool(d) && (cfg.rollout_policy == "model"))
      spdlog::warn("{} = {} is one of the pool's GPUs (pool.first_device {}, {} devices): kernel "
                   "timings there share the GPU with training and are not clean; put the pool "
                   "on other GPUs for rewards you can trust",
                   role, device, pool.first_device, pool.devices);
}

} // namespace

expected<json> run_training(const run_config& cfg, const std::vector<task>& all_tasks,
                            const std::string& run_dir, int threads,
                            const compile_baselines* baselines) {
  std::vector<task> tasks = all_tasks;
  if (cfg.rollout_max_tasks > 0 && static_cast<int64_t>(tasks.size()) > cfg.rollout_max_tasks)
    tasks.resize(static_cast<std::size_t>(cfg.rollout_max_tasks));
  if (tasks.empty()) return error{"rollout: no valid tasks to train on"};
  auto cache = cfg.cache_dir.empty() ? default_cache_dir() : cfg.cache_dir;
  auto pcfg =
      make_pool_config(cfg.backend, cache, cfg.devices, cfg.compile_workers, cfg.first_device);
  if (!pcfg) return pcfg.err();
  warn_shared_gpus(*pcfg, cfg);
  warn_if_other_device(baselines, *pcfg);

  bool hosted = cfg.rollout_policy == "model";
  json sft_summary; // best_of_k: what rejection sampling chose
  // ipc paths are limited to ~100 bytes: a short one per process, not one under the run dir.
  std::string endpoint = "ipc:///tmp/kiln-" + std::to_string(getpid()) + "-trajectories";
  // Declared before the learner: its training thread writes it until learn->stop().
  std::atomic<double> last_lag{0}; // staleness of the newest update, for the progress line
  std::unique_ptr<learner> learn;
  std::unique_ptr<token_policy> policy;
  learner_config lc = cfg.learner;
  if (hosted) {
    lc.checkpoint_dir = run_dir + "/checkpoints";
    lc.metrics_path = run_dir + "/learner.jsonl";
    lc.pull_endpoint = endpoint;
    lc.pub_endpoint.clear(); // in-process weights
    lc.curve = {};           // its PULL is this process's private ipc path
    auto l = learner::create(lc, tasks);
    if (!l) return error{"learner: " + l.message()};
    learn = std::move(*l);
    model_policy_options mo;
    mo.model = lc.model;
    mo.temperature = lc.temperature;
    mo.slot = learn->weights();
    mo.init_seed = cfg.seed;
    mo.device = cfg.rollout_policy_device;
    auto p = model_policy::create(mo);
    if (!p) return error{"policy: " + p.message()};
    policy = std::move(*p);
  } else if (cfg.rollout_policy != "llm") {
    policy =
        cfg.rollout_policy == "random" ? make_random_policy() : make_expert_policy(pcfg->backend);
  }
#ifndef KILN_HAVE_LLM
  if (cfg.rollout_policy == "llm")
    return error{"rollout.policy = \"llm\": this build has no LLM policies (libcurl was not "
                 "found)"};
#endif

  caf::actor_system_config sc;
  configure_actor_system(
      sc, {threads, "sharing", !cfg.remote.empty(), cfg.peer_heartbeat_ms, cfg.peer_timeout_ms});
  if (!cfg.remote.empty() && !cfg.tls_dir.empty())
    if (auto st = enable_tls(sc, cfg.tls_dir); !st) return error{"key 'pool.tls': " + st.message()};
  register_rollout_messages(sc);
  caf::actor_system sys{sc};
  // First: a remote pool that cannot be reached fails the run before anything else starts.
  auto pool_actor = make_pool_actor(sys, *pcfg, cfg.remote, cfg.local_pool);
  if (!pool_actor) return error{"[pool]: " + pool_actor.message()};
  auto pool = *pool_actor;
  // The hosted learner PULLs from a private ipc path; rollout.sink tees every trajectory to an
  // external trainer as well (or alone, for expert / random / llm policies).
  sink_config skc;
  skc.outputs.clear();
  skc.curve = cfg.curve;
  if (hosted) skc.outputs.push_back({endpoint, false, 1000, true});
  if (!cfg.rollout_sink.empty())
    skc.outputs.push_back({cfg.rollout_sink, cfg.rollout_sink_bind, cfg.rollout_sink_hwm});
  caf::actor sink;
  // The pool lives already: end it on the way out, or the actor system waits for it forever.
  auto fail = [&](std::string why) {
    caf::anon_send_exit(pool, caf::exit_reason::user_shutdown);
    if (sink) caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
    return error{std::move(why)};
  };
  if (!skc.outputs.empty()) {
    auto s = spawn_trajectory_sink(sys, skc);
    if (!s.error.empty()) return fail("key 'rollout.sink': " + s.error);
    sink = s.actor;
    if (!cfg.rollout_sink.empty())
      spdlog::info("trajectories: stream v1 to {} ({}, high-water mark {})", cfg.rollout_sink,
                   cfg.rollout_sink_bind ? "bound here" : "connected", cfg.rollout_sink_hwm);
  } else if (cfg.rollout_policy == "llm") {
    spdlog::warn("rollout.policy = \"llm\" without rollout.sink: the trajectories go nowhere "
                 "(rewards and metrics are still measured)");
  }
  if (hosted) {
    learn->on_metrics([&last_lag](const update_metrics& m) { last_lag = m.lag_mean; });
    // The model before any training, for the after-training comparison.
    if (auto c = learn->save_checkpoint(lc.checkpoint_dir + "/untrained.pt"); !c)
      return fail("learner: " + c.message());
    bool sft = (lc.stage == "sft" || lc.stage == "all") && lc.sft_steps > 0;
    if (sft && lc.sft_source == "best_of_k") {
      episode_eval_options eo;
      eo.seed = cfg.seed;
      eo.parallel = static_cast<int>(cfg.rollout_max_concurrent);
      eo.jobs = jo_for(cfg);
      auto chosen = choose_sft_programs(sys, pool, pcfg->backend, tasks, lc.sft_candidates, eo);
      if (!chosen) return fail(chosen.message());
      sft_summary = chosen->summary;
      std::ofstream(run_dir + "/sft_programs.json") << chosen->summary.dump(2) << "\n";
      learn->set_sft_samples(program_samples(tasks, chosen->programs, pcfg->backend));
    }
    // The warm-up before the first episode: episodes sampled from the untrained weights while sft
    // ran would be stale at once, discarded, and spend the episode budget on programs nobody
    // trains on.
    if (sft) {
      spdlog::info("learner sft: {} steps before the rollout starts", lc.sft_steps);
      if (auto r = learn->run_sft(lc.sft_steps); !r) return fail("learner sft: " + r.message());
    }
    if (auto st = learn->start(); !st) return fail("learner: " + st.message());
  }
  caf::actor server;
  if (policy) {
    // It was made before sft: take the weights the learner has published since, or the first
    // episodes sample version -1 (the untrained weights), which the learner refuses.
    policy->refresh();
    policy_server_config psc;
    psc.seed = cfg.seed;
    server = spawn_policy_server(sys, std::move(policy), psc);
  } else {
#ifdef KILN_HAVE_LLM
    auto lc = cfg.llm;
    lc.backend = pcfg->backend;
    if (const char* key = std::getenv(cfg.llm_key_env.c_str())) lc.bearer_token = key;
    auto spawned = spawn_llm_policy_server(sys, std::move(lc));
    if (!spawned) return fail("[llm]: " + spawned.message());
    server = *spawned;
    spdlog::info("policy: {} via {} endpoint(s) ({} api), temperature {}", cfg.llm.model,
                 cfg.llm.endpoints.size(), cfg.llm.api, cfg.llm.temperature);
#endif
  }

  std::vector<std::shared_ptr<rollout_task>> rtasks;
  rollout_job_options jo = jo_for(cfg);
  int with_compile = 0;
  for (const auto& t : tasks) {
    rtasks.push_back(make_rollout_task(t, jo));
    // Reward tier 3 (faster than torch.compile too) exists only where a baseline was measured.
    if (baselines) rtasks.back()->compile_ms = lookup(*baselines, t);
    with_compile += rtasks.back()->compile_ms.has_value();
  }
  if (baselines)
    spdlog::info("torch.compile baselines for {} of {} training tasks ({})", with_compile,
                 tasks.size(), baselines->origin);
  coordinator_config cc;
  cc.admission.max_concurrent = cfg.rollout_max_concurrent;
  cc.admission.group_size = cfg.rollout_group_size;
  cc.admission.total = cfg.rollout_episodes;
  cc.admission.eta = hosted ? lc.eta : cfg.rollout_policy == "llm" ? cfg.llm_eta : -1;
  cc.admission.batch = lc.batch_size;
  cc.episode.max_turns = cfg.rollout_max_turns;
  if (cfg.rollout_policy == "llm") {
    cc.episode.text_policy = true;
    // An answer takes as long as the endpoint does, retries included.
    cc.episode.policy_timeout = std::chrono::milliseconds(
        static_cast<int64_t>(cfg.llm.timeout_s * 1000 * (cfg.llm.max_attempts + 1)) + 60'000);
  }
  auto shaping = parse_reward_shaping(cfg.rollout_reward);
  if (!shaping) return error{"key 'rollout.reward': " + shaping.message()};
  cc.episode.reward.shaping = *shaping;
  cc.episode.reward.speedup_cap = cfg.rollout_reward_cap;
  episode_peers peers;
  peers.policy_server = server;
  peers.pool = pool;
  peers.sink = sink;
  auto coord = spawn_coordinator(sys, rtasks, cc, peers);
  caf::scoped_actor self{sys};
  self->send(server, subscribe_atom::value, coord);

  spdlog::info("rollout: {} episodes over {} tasks, policy {}, {} concurrent, groups of {}, "
               "{} turns; metrics in {}/rollout.jsonl{}",
               cfg.rollout_episodes, tasks.size(), cfg.rollout_policy, cfg.rollout_max_concurrent,
               cfg.rollout_group_size, cfg.rollout_max_turns, run_dir,
               hosted ? " and learner.jsonl" : "");
  auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::optional<tensorboard_events> tb;
  if (cfg.metrics_tensorboard) {
    auto w = tensorboard_events::open(run_dir + "/tensorboard");
    if (!w) return error{cfg.origin + ": [metrics] tensorboard: " + w.message()};
    tb.emplace(std::move(*w));
    spdlog::info("tensorboard: {} (tensorboard --logdir {})", tb->path(), run_dir);
  }
  // The learner writes its own rows; they are mirrored as they arrive (whole lines only).
  std::ifstream learner_rows;
  int64_t learner_row = 0;
  auto mirror_learner = [&] {
    if (!tb) return;
    if (!learner_rows.is_open()) learner_rows.open(run_dir + "/learner.jsonl");
    std::string line;
    for (auto at = learner_rows.tellg(); std::getline(learner_rows, line);
         at = learner_rows.tellg()) {
      if (learner_rows.eof()) { // a line still being written: read it again next time
        learner_rows.clear();
        learner_rows.seekg(at);
        break;
      }
      auto row = json::parse(line, nullptr, false);
      if (row.is_object()) tb->scalars("learner", row, ++learner_row);
    }
    learner_rows.clear();
  };
  std::thread progress([&] {
    caf::scoped_actor probe{sys};
    std::ofstream rows(run_dir + "/rollout.jsonl");
    auto period = std::chrono::milliseconds(static_cast<int64_t>(cfg.rollout_progress_s * 1000));
    double last_turns = 0, last_correct = 0, last_episodes = 0, last_reward_sum = 0;
    double last_gain = 0, last_gain_n = 0;
    uint64_t last_rejected = 0;
    double last_tokens = 0, last_t = 0;
    std::unique_lock<std::mutex> lock(mu);
    while (!cv.wait_for(lock, period, [&] { return done; })) {
      json s;
      probe->request(coord, std::chrono::seconds(5), server_stats_atom::value)
          .receive([&](const std::string& text) { s = json::parse(text, nullptr, false); },
                   [](caf::error&) {});
      if (!s.is_object()) continue;
      // Without a hosted learner: the version the policy server last saw (an LLM's trainer).
      int64_t v = learn ? learn->version() : static_cast<int64_t>(num(s, "version"));
      if (learn)
        caf::anon_send(coord, discarded_atom::value, static_cast<int64_t>(learn->discarded()));
      s["t"] = elapsed();
      s["learner_version"] = v;
      if (learn) {
        // Frames the learner refused (malformed, too long for the model, stale): counted here
        // so a misconfigured run (e.g. max_turns beyond learner.model.max_len) is visible.
        auto in = learn->intake_counters();
        s["learner_frames"] = in.frames;
        s["learner_rejected"] = in.rejected;
        if (in.rejected > last_rejected) {
          std::string why;
          for (const auto& [reason, n] : in.reasons)
            why += (why.empty() ? "" : ", ") + reason + " x" + std::to_string(n);
          spdlog::warn("learner refused {} trajectories so far: {}", in.rejected, why);
          last_rejected = in.rejected;
        }
      }
      if (num(s, "turns") > 0) s["pass_rate"] = num(s, "correct_turns") / num(s, "turns");
      // The counters are cumulative; the window since the last row shows learning as it happens.
      double turns = num(s, "turns"), correct = num(s, "correct_turns");
      double episodes = num(s, "episodes"), reward_sum = num(s, "mean_reward") * episodes;
      if (turns > last_turns)
        s["window_pass_rate"] = (correct - last_correct) / (turns - last_turns);
      if (episodes > last_episodes)
        s["window_reward"] = (reward_sum - last_reward_sum) / (episodes - last_episodes);
      double gain = num(s, "task_gain_sum"), gain_n = num(s, "task_gain_episodes");
      if (gain_n > last_gain_n) s["window_task_gain"] = (gain - last_gain) / (gain_n - last_gain_n);
      if (gain_n > 0) s["task_gain"] = gain / gain_n;
      last_gain = gain, last_gain_n = gain_n;
      last_turns = turns, last_correct = correct, last_episodes = episodes;
      last_reward_sum = reward_sum;
      double now = elapsed();
      s["tokens_per_s"] = (num(s, "tokens") - last_tokens) / std::max(1e-9, now - last_t);
      last_tokens = num(s, "tokens"), last_t = now;
      if (s.contains("mean_ms") && s["mean_ms"].is_object())
        s["pool_queue_ms"] = num(s["mean_ms"], "pool_queue");
      probe->request(pool, std::chrono::seconds(5), stats_atom::value)
          .receive(
              [&](const std::string& text) {
                auto p = json::parse(text, nullptr, false);
                if (!p.is_object() || !p.contains("devices")) return;
                double busy = 0;
                for (const auto& d : p["devices"]) busy += num(d, "busy_share");
                if (!p["devices"].empty()) s["pool_busy_share"] = busy / p["devices"].size();
              },
              [](caf::error&) {});
      s["learner_lag_mean"] = last_lag.load();
      rows << s.dump() << "\n" << std::flush;
      if (tb) {
        tb->scalars("rollout", s, static_cast<int64_t>(num(s, "episodes")));
        mirror_learner();
        tb->flush();
      }
      print_progress(s, elapsed(), cfg.rollout_episodes);
    }
  });

  json summary;
  std::string failure;
  // A plain send, answered as a message: the wait below can then also watch for an interrupt.
  g_interrupted = false;
  auto old_int = std::signal(SIGINT, on_interrupt);
  auto old_term = std::signal(SIGTERM, on_interrupt);
  self->send(coord, run_atom::value);
  for (bool answered = false; !answered && !g_interrupted;)
    self->receive(
        [&](const std::string& text) {
          summary = json::parse(text, nullptr, false);
          answered = true;
        },
        [&](caf::error& e) {
          failure = sys.render(e);
          answered = true;
        },
        caf::after(std::chrono::milliseconds(200)) >> [] {});
  if (g_interrupted) {
    spdlog::warn("interrupted: stopping the rollout, checkpointing the learner");
    self->request(coord, std::chrono::seconds(5), server_stats_atom::value)
        .receive([&](const std::string& text) { summary = json::parse(text, nullptr, false); },
                 [](caf::error&) {});
    if (!summary.is_object()) summary = json::object();
    summary["interrupted"] = true;
  }
  std::signal(SIGINT, old_int);
  std::signal(SIGTERM, old_term);
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  progress.join();
  if (learn) {
    // Episodes can outrun the learner (eta > 0, a fast pool): train on what arrived, batch by
    // batch, before the final checkpoint, or the last versions' episodes are lost to training.
    std::this_thread::sleep_for(std::chrono::milliseconds(500)); // the sink's last frames
    auto waiting = [&] { return learn->pending() + learn->queue()->size(); };
    auto drain_until = std::chrono::steady_clock::now() + std::chrono::minutes(10);
    if (!g_interrupted && waiting() >= static_cast<size_t>(lc.batch_size))
      spdlog::info("rollout done; the learner trains on the {} trajectories still waiting",
                   waiting());
    while (!g_interrupted && !learn->finished() &&
           waiting() >= static_cast<size_t>(lc.batch_size) &&
           std::chrono::steady_clock::now() < drain_until)
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    learn->stop(); // writes the final checkpoint
    if (tb) {      // the rows written after the last progress row
      mirror_learner();
      tb->flush();
    }
    summary["learner_version"] = learn->version();
    summary["learner_steps"] = learn->steps();
    summary["trajectories_trained"] = learn->trajectories_trained();
    summary["checkpoints"] = lc.checkpoint_dir;
    if (!sft_summary.is_null()) {
      sft_summary.erase("rows"); // in sft_programs.json
      summary["sft_programs"] = sft_summary;
    }
  }
  // What the endpoints and the stream did: retries and failures of an LLM's requests, the
  // trajectories handed to each output.
  for (const auto& [key, who] : {std::pair<const char*, caf::actor>{
                                     "llm", cfg.rollout_policy == "llm" ? server : caf::actor{}},
                                 {"sink", sink}})
    if (who)
      self->request(who, std::chrono::seconds(5), server_stats_atom::value)
          .receive(
              [&, key = key](const std::string& text) {
                summary[key] = json::parse(text, nullptr, false);
              },
              [](caf::error&) {});
  for (const auto& a : {coord, server, pool}) self->send_exit(a, caf::exit_reason::user_shutdown);
  if (sink) self->send_exit(sink, caf::exit_reason::user_shutdown);
  ::unlink(endpoint.substr(6).c_str());
  if (!failure.empty()) return error{"rollout: " + failure};
  if (summary.contains("sink") && summary["sink"].is_object() &&
      summary["sink"].value("channel", json::object()).value("refused_by_server", 0) > 0) {
    summary["sink_refused"] = true; // cmd_run exits non-zero after writing summary.json
    spdlog::error("rollout.sink: the consumer refused this process's CURVE key: the trajectories "
                  "were not delivered ({} refused at the sink)",
                  summary["sink"].value("failed", 0));
  }
  summary["seconds"] = elapsed();
  double turns = num(summary, "turns");
  spdlog::info("rollout done: {:.0f} episodes in {:.0f} s | pass {:.1f}% | mean reward {:+.3f} | "
               "learner version {}",
               num(summary, "episodes"), elapsed(),
               turns > 0 ? 100 * num(summary, "correct_turns") / turns : 0.0,
               num(summary, "mean_reward"), learn ? learn->version() : 0);
  if (summary.contains("by_turn"))
    for (const auto& line : describe_turns(summary["by_turn"])) spdlog::info("rollout {}", line);
  return summary;
}

} // namespace kiln
