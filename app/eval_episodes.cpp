#include "app/eval_episodes.hpp"

#include "actors/messages.hpp"
#include "learner/model_policy.hpp"
#include "rollout/builtin_policies.hpp"
#include "rollout/coordinator.hpp"
#include "rollout/policy_server.hpp"
#include "rollout/turn_stats.hpp"
#ifdef KILN_HAVE_LLM
#include "llm/llm_policy_server.hpp"
#endif

#include <atomic>
#include <caf/scoped_actor.hpp>
#include <condition_variable>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <thread>

namespace kiln {

namespace {

// One sample: greedy, deterministic; several: sampled (checkpoints and LLMs alike).
double sampling_temperature(const episode_eval_options& o) {
  return o.temperature >= 0 ? o.temperature : (o.samples > 1 ? 1.0 : 0.0);
}

expected<std::unique_ptr<token_policy>> make_policy(const policy_spec& p, backend_kind backend,
                                                    const episode_eval_options& o) {
  if (!p.sources_dir.empty())
    return error{"policy " + p.name +
                 ": free-form sources are one submission per task; episodes "
                 "(--samples, --turns) need a policy that writes programs"};
  if (p.random) return make_random_policy();
  if (p.checkpoint.empty()) return make_expert_policy(backend);
  model_policy_options mo;
  mo.checkpoint = p.checkpoint;
  mo.temperature = sampling_temperature(o);
  auto m = model_policy::create(mo);
  if (!m) return error{"checkpoint " + p.checkpoint + ": " + m.message()};
  return std::unique_ptr<token_policy>(std::move(*m));
}

} // namespace

expected<std::vector<eval_row>>
evaluate_policy_episodes(caf::actor_system& sys, const caf::actor& pool, backend_kind backend,
                         const std::vector<task>& tasks, const policy_spec& p,
                         const episode_eval_options& o, const compile_baselines* baselines) {
  if (tasks.empty()) return std::vector<eval_row>{};
  caf::actor server;
  if (p.llm) {
#ifdef KILN_HAVE_LLM
    if (o.llm.endpoints.empty() || o.llm.model.empty())
      return error{"--policy llm needs --llm-endpoint and --llm-model"};
    auto lc = o.llm;
    lc.backend = backend;
    lc.temperature = sampling_temperature(o);
    auto spawned = spawn_llm_policy_server(sys, std::move(lc));
    if (!spawned) return spawned.err();
    server = *spawned;
#else
    return error{"--policy llm: this build has no LLM policies (libcurl was not found)"};
#endif
  } else {
    auto policy = make_policy(p, backend, o);
    if (!policy) return policy.err();
    policy_server_config psc;
    psc.seed = o.seed;
    server = spawn_policy_server(sys, std::move(*policy), psc);
  }
  std::vector<std::shared_ptr<rollout_task>> rtasks;
  for (const auto& t : tasks) {
    rtasks.push_back(make_rollout_task(t, o.jobs));
    if (baselines) rtasks.back()->compile_ms = lookup(*baselines, t);
  }
  coordinator_config cc;
  cc.admission.max_concurrent = std::max(1, o.parallel);
  cc.admission.group_size = std::max(1, o.samples);
  cc.admission.total = static_cast<int64_t>(tasks.size()) * std::max(1, o.samples);
  cc.admission.eta = -1; // no learner: no staleness bound
  cc.episode.max_turns = std::max(1, o.turns);
  cc.episode.text_policy = p.llm;
  if (p.llm) // an answer takes as long as the endpoint does, retries included
    cc.episode.policy_timeout = std::chrono::milliseconds(
        static_cast<int64_t>(o.llm.timeout_s * 1000 * (o.llm.max_attempts + 1)) + 60'000);
  cc.keep_episodes = true;
  episode_peers peers;
  peers.policy_server = server;
  peers.pool = pool;
  auto coord = spawn_coordinator(sys, rtasks, cc, peers);

  // Progress while the episodes run; the summary comes back in one piece at the end.
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  std::thread progress([&] {
    caf::scoped_actor probe{sys};
    std::unique_lock<std::mutex> lock(mu);
    while (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return finished; })) {
      probe->request(coord, std::chrono::seconds(5), server_stats_atom::value)
          .receive(
              [&](const std::string& s) {
                auto j = nlohmann::json::parse(s, nullptr, false);
                if (!j.is_object()) return;
                spdlog::info("[{}] {}/{} episodes, {} turns, {} correct", p.name,
                             j.value("episodes", 0), cc.admission.total, j.value("turns", 0),
                             j.value("correct_turns", 0));
              },
              [](caf::error&) {});
    }
  });
  std::string summary;
  std::string failure;
  {
    caf::scoped_actor self{sys};
    self->request(coord, std::chrono::seconds(7 * 86400), run_atom::value)
        .receive([&](std::string& s) { summary = std::move(s); },
                 [&](caf::error& e) { failure = sys.render(e); });
    self->send_exit(coord, caf::exit_reason::user_shutdown);
    self->send_exit(server, caf::exit_reason::user_shutdown);
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    finished = true;
  }
  cv.notify_all();
  progress.join();
  if (!failure.empty()) return error{"evaluation episodes: " + failure};
  auto j = nlohmann::json::parse(summary, nullptr, false);
  if (!j.is_object() || !j.contains("episode_rows"))
    return error{"evaluation episodes: the coordinator's summary has no episode rows"};
  if (j.contains("by_turn"))
    for (const auto& line : describe_turns(j["by_turn"])) spdlog::info("[{}] {}", p.name, line);

  std::map<std::string, std::vector<sample_result>> by_task;
  for (const auto& e : j["episode_rows"]) {
    sample_result s;
    s.best_kernel_ms = e.value("best_kernel_ms", 0.0);
    s.first_correct_turn = e.value("first_correct_turn", -1);
    s.correct = s.first_correct_turn >= 0 && s.best_kernel_ms > 0;
    s.turns = e.value("turns", 0);
    s.program = e.value("best_program", std::string());
    // The last turn's outcome says more than the episode's status ("truncated"), unless the
    // episode failed before any turn (an endpoint down, a malformed answer).
    s.outcome = e.value("last_outcome", std::string());
    s.message = e.value("last_message", std::string());
    if (s.outcome.empty() || e.value("status", std::string()) == "failed") {
      s.outcome = e.value("status", std::string());
      s.message = e.value("error", std::string());
    }
    by_task[e.value("task", std::string())].push_back(std::move(s));
  }
  std::vector<eval_row> rows;
  for (const auto& t : tasks) {
    eval_row base = task_row(t);
    if (j["eager_ms"].contains(t.name)) base.eager_ms = j["eager_ms"][t.name].get<double>();
    if (baselines) base.compiled_ms = lookup(*baselines, t);
    auto& samples = by_task[t.name];
    if (base.eager_ms <= 0) {
      base.outcome = "baseline_failed";
      base.samples = static_cast<int>(samples.size());
      rows.push_back(base);
      continue;
    }
    rows.push_back(best_of_samples(base, samples));
    const auto& r = rows.back();
    spdlog::info("[{}] {:<44} {:<10} {} samples, {} turns used, kernel {:8.3f} ms, speedup {:.2f}x",
                 p.name, r.task, r.outcome, r.samples, r.turns, r.kernel_ms,
                 r.correct ? r.eager_ms / r.kernel_ms : 0.0);
  }
  return rows;
}

} // namespace kiln
