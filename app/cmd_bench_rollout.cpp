// kiln bench rollout: the engine's speed against the bare CAF ceiling of the same message pattern.
// 1. engine: coordinator, N concurrent episodes, the policy server running a fixed policy (the
//    expert program per task, replayed token by token under the grammar) and a null pool that
//    answers every job at once with a prebuilt outcome; env steps/s = turns / wall time.
// 2. ceiling: N bare actors doing the same exchange per step (episode -> policy server -> episode
//    -> pool -> episode, same message types and payload sizes, requests without CAF timeouts as
//    the engine's) with handlers that do nothing else.
// ratio = engine / ceiling. bytes_per_episode = peak RSS growth of the engine run / episodes.
// With --pool cpu: the real cpu pool and the expert policy; episodes/s and where the time goes.
#include "actors/actor_system_setup.hpp"
#include "actors/messages.hpp"
#include "app/bench_probes.hpp"
#include "app/commands.hpp"
#include "app/eval_runner.hpp"
#include "data/task_set.hpp"
#include "jobs/job.hpp"
#include "pool/device_pool.hpp"
#include "rollout/builtin_policies.hpp"
#include "rollout/coordinator.hpp"
#include "rollout/policy_server.hpp"
#include "rollout/token_space.hpp"
#include "skills/expert.hpp"
#include "skills/grammar.hpp"

#include <atomic>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <thread>
#include <unistd.h>

namespace kiln {

namespace {

using clock_type = std::chrono::steady_clock;

struct ceiling_state {
  int64_t left = 0;
  static inline const char* name = "kiln.bench.ceiling_episode";
};

// A bare episode: the same two requests per step, nothing else.
caf::behavior ceiling_episode(caf::stateful_actor<ceiling_state>* self, caf::actor server,
                              caf::actor pool, gen_request req, std::string job, std::string prog,
                              int64_t steps, caf::actor done, bool timeouts) {
  self->state.left = steps;
  auto step = std::make_shared<std::function<void()>>();
  caf::duration t1 = timeouts ? caf::duration(std::chrono::seconds(60)) : caf::infinite;
  caf::duration t2 = timeouts ? caf::duration(std::chrono::seconds(300)) : caf::infinite;
  *step = [=] {
    self->request(server, t1, generate_atom::value, req).then([=](gen_reply&) {
      self->request(pool, t2, evaluate_atom::value, job, prog).then([=](const std::string&) {
        if (--self->state.left > 0) {
          (*step)();
        } else {
          self->send(done, episode_done_atom::value, episode_summary{});
          self->quit();
        }
      });
    });
  };
  (*step)();
  return {[](caf::unit_t) {}};
}

struct ceiling_result {
  double steps_per_s = 0;
  double seconds = 0;
  double cpu_us_per_step = 0;
};

ceiling_result run_ceiling(caf::actor_system& sys,
                           const std::vector<std::shared_ptr<rollout_task>>& tasks,
                           const std::vector<std::vector<int32_t>>& programs, int episodes,
                           int turns, const std::string& outcome_bytes, bool timeouts) {
  // The bare server answers with a prebuilt reply of the real program's size.
  std::vector<gen_reply> replies;
  for (const auto& p : programs) {
    gen_reply r;
    r.pack(p, std::vector<float>(p.size(), 0.0f), std::vector<int32_t>(p.size(), 0));
    r.complete = true;
    replies.push_back(std::move(r));
  }
  auto server = sys.spawn([replies](caf::event_based_actor*) -> caf::behavior {
    return {
        [=](generate_atom, const gen_request& r) { return replies[r.seq_id % replies.size()]; }};
  });
  auto pool = sys.spawn(null_pool, outcome_bytes);
  caf::scoped_actor self{sys};
  auto t0 = clock_type::now();
  double cpu0 = cpu_seconds();
  for (int i = 0; i < episodes; ++i) {
    auto ti = static_cast<size_t>(i) % tasks.size();
    gen_request req;
    req.seq_id = ti;
    req.task = tasks[ti];
    req.append = {token_of(special_token::program)};
    sys.spawn(ceiling_episode, server, pool, req, tasks[ti]->job_msgpack,
              tokens_to_text(programs[ti]), static_cast<int64_t>(turns),
              caf::actor_cast<caf::actor>(self), timeouts);
  }
  for (int i = 0; i < episodes; ++i)
    self->receive([](episode_done_atom, const episode_summary&) {});
  double secs = std::chrono::duration<double>(clock_type::now() - t0).count();
  double steps = double(episodes) * turns;
  double cpu = cpu_seconds() - cpu0;
  self->send_exit(server, caf::exit_reason::user_shutdown);
  self->send_exit(pool, caf::exit_reason::user_shutdown);
  return {steps / secs, secs, cpu * 1e6 / steps};
}

std::vector<std::shared_ptr<rollout_task>> make_tasks(const std::vector<task>& tasks) {
  std::vector<std::shared_ptr<rollout_task>> out;
  for (const auto& t : tasks) out.push_back(make_rollout_task(t));
  return out;
}

int bench_null(caf::actor_system& sys, const std::vector<task>& spec, const bench_args& args) {
  auto tasks = make_tasks(spec);
  std::vector<std::vector<int32_t>> programs;
  for (const auto& t : spec) {
    auto ids = to_tokens(expert_program(t, backend_kind::cpu));
    programs.emplace_back(ids.begin(), ids.end());
  }
  auto outcome_bytes = correct_outcome(1.0);
  nlohmann::json out = {{"episodes", args.episodes},
                        {"turns", args.turns},
                        {"scheduler", args.scheduler},
                        {"tasks", spec.size()},
                        {"pool", "null"},
                        {"policy", "expert (fixed program per task, through the policy server)"}};
  // Engine.
  int64_t rss0 = rss_bytes();
  double engine_steps_per_s = 0, engine_cpu = 0;
  int64_t peak = 0;
  {
    rss_sampler sampler;
    auto server = spawn_policy_server(sys, make_expert_policy(backend_kind::cpu));
    auto pool = sys.spawn(null_pool, outcome_bytes);
    coordinator_config cc = all_in_flight(args.episodes, args.turns);
    episode_peers peers;
    peers.policy_server = server;
    peers.pool = pool;
    auto coord = spawn_coordinator(sys, tasks, cc, peers);
    caf::scoped_actor self{sys};
    std::string summary;
    double cpu0 = cpu_seconds();
    self->request(coord, std::chrono::seconds(600), run_atom::value)
        .receive([&](const std::string& s) { summary = s; },
                 [&](caf::error& e) { summary = "{}", spdlog::error("{}", sys.render(e)); });
    std::string server_stats;
    self->request(server, std::chrono::seconds(10), server_stats_atom::value)
        .receive([&](const std::string& s) { server_stats = s; }, [](caf::error&) {});
    engine_cpu = cpu_seconds() - cpu0;
    peak = sampler.finish();
    auto j = nlohmann::json::parse(summary);
    engine_steps_per_s = j.value("steps_per_s", 0.0);
    out["engine"] = j;
    if (!server_stats.empty()) out["policy_server"] = nlohmann::json::parse(server_stats);
    for (auto& a : {coord, server, pool}) self->send_exit(a, caf::exit_reason::user_shutdown);
  }
  // The engine's requests carry no CAF timeout (its episodes run a watchdog tick instead), so the
  // ceiling does not either; the same pattern with CAF request timeouts is reported beside it.
  auto ceil = run_ceiling(sys, tasks, programs, args.episodes, args.turns, outcome_bytes, false);
  auto ceil_to = run_ceiling(sys, tasks, programs, args.episodes, args.turns, outcome_bytes, true);
  out["ceiling_with_request_timeouts_steps_per_s"] = ceil_to.steps_per_s;
  // CPU per step (all threads): the same comparison, robust to other load on the machine.
  double steps = double(args.episodes) * args.turns;
  out["engine_cpu_us_per_step"] = engine_cpu * 1e6 / steps;
  out["ceiling_cpu_us_per_step"] = ceil.cpu_us_per_step;
  out["cpu_ratio"] = engine_cpu > 0 ? ceil.cpu_us_per_step / (engine_cpu * 1e6 / steps) : 0.0;
  out["steps_per_s"] = engine_steps_per_s;
  out["ceiling_steps_per_s"] = ceil.steps_per_s;
  out["ratio"] = ceil.steps_per_s > 0 ? engine_steps_per_s / ceil.steps_per_s : 0.0;
  out["bytes_per_episode"] = args.episodes ? double(peak - rss0) / args.episodes : 0.0;
  out["program_tokens_mean"] = [&] {
    double s = 0;
    for (auto& p : programs) s += double(p.size());
    return programs.empty() ? 0.0 : s / double(programs.size());
  }();
  if (args.json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("engine:  %d episodes x %d turns: %.0f env steps/s\n", args.episodes, args.turns,
                engine_steps_per_s);
    std::printf("ceiling: %.0f steps/s (bare actors, same messages)\n", ceil.steps_per_s);
    std::printf("ratio:   %.2f   memory: %.0f bytes/episode\n", out["ratio"].get<double>(),
                out["bytes_per_episode"].get<double>());
    std::printf("cpu per step: engine %.2f us, ceiling %.2f us (ratio %.2f)\n",
                out["engine_cpu_us_per_step"].get<double>(), ceil.cpu_us_per_step,
                out["cpu_ratio"].get<double>());
  }
  return 0;
}

int bench_cpu_pool(caf::actor_system& sys, const std::vector<task>& spec, const bench_args& args) {
  auto cache = args.cache_dir.empty() ? default_cache_dir() : args.cache_dir;
  auto pcfg = make_pool_config(args.backend, cache, args.devices, args.compile_workers);
  if (!pcfg) {
    spdlog::error("{}", pcfg.message());
    return 2;
  }
  auto tasks = make_tasks(spec);
  auto pool = spawn_device_pool(sys, *pcfg);
  auto server = spawn_policy_server(
      sys, args.policy == "random" ? make_random_policy() : make_expert_policy(backend_kind::cpu));
  coordinator_config cc;
  cc.admission.max_concurrent = std::max(1, args.in_flight);
  cc.admission.group_size = std::max(1, args.group);
  cc.admission.total = args.episodes;
  cc.episode.max_turns = args.turns;
  episode_peers peers;
  peers.policy_server = server;
  peers.pool = pool;
  auto coord = spawn_coordinator(sys, tasks, cc, peers);
  caf::scoped_actor self{sys};
  std::string summary = "{}", pool_stats = "{}";
  self->request(coord, std::chrono::seconds(7200), run_atom::value)
      .receive([&](const std::string& s) { summary = s; },
               [&](caf::error& e) { spdlog::error("{}", sys.render(e)); });
  self->request(pool, std::chrono::seconds(10), stats_atom::value)
      .receive([&](const std::string& s) { pool_stats = s; }, [](caf::error&) {});
  for (auto& a : {coord, server, pool}) self->send_exit(a, caf::exit_reason::user_shutdown);
  nlohmann::json out = nlohmann::json::parse(summary);
  out["pool"] = args.backend;
  out["policy"] = args.policy;
  out["scheduler"] = args.scheduler;
  out["pool_stats"] = nlohmann::json::parse(pool_stats);
  if (args.json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("%s\n", out.dump(2).c_str());
  }
  return 0;
}

} // namespace

int cmd_bench_rollout(const common_args& common, const bench_args& args) {
  auto set = load_tasks(args.suites);
  for (const auto& e : set.errors) spdlog::error("{}", e.message);
  if (set.tasks.empty()) {
    spdlog::error("bench rollout: no tasks");
    return 2;
  }
  if (args.episodes <= 0 || args.turns <= 0) {
    spdlog::error("bench rollout: --episodes and --turns must be > 0");
    return 2;
  }
  if (args.scheduler != "sharing" && args.scheduler != "stealing") {
    spdlog::error("bench rollout: --scheduler must be sharing or stealing, not '{}'",
                  args.scheduler);
    return 2;
  }
  // Its own actor system: the mock endpoint is forked before any thread starts.
  if (args.policy == "llm-mock") return bench_llm_mock(common, set.tasks, args);
  caf::actor_system_config cfg;
  int threads = configure_actor_system(cfg, {common.threads, args.scheduler});
  register_rollout_messages(cfg);
  caf::actor_system sys{cfg};
  if (!args.json) // --json: stdout holds the one JSON object only
    spdlog::info("bench rollout: {} scheduler threads, {} tasks, pool {}", threads,
                 set.tasks.size(), args.pool);
  if (args.pool == "null") return bench_null(sys, set.tasks, args);
  if (args.pool == "cpu") return bench_cpu_pool(sys, set.tasks, args);
  spdlog::error("bench rollout: --pool must be null or cpu, not '{}'", args.pool);
  return 2;
}

} // namespace kiln
