#include "rollout/coordinator.hpp"

#include "actors/messages.hpp"
#include "jobs/job.hpp"
#include "pool/device_pool.hpp"
#include "rollout/trajectory.hpp"
#include "rollout/turn_stats.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <unordered_map>

namespace kiln {

namespace {

using clock_type = std::chrono::steady_clock;

struct coordinator_state {
  std::vector<std::shared_ptr<rollout_task>> tasks;
  // Per task: 0 baseline not asked for yet, 1 being measured, 2 known (or not measured).
  std::vector<char> ready;
  coordinator_config cfg;
  std::shared_ptr<const episode_config> ep_cfg;
  episode_peers peers;
  std::unique_ptr<admission_control> adm;
  std::unordered_map<caf::actor_addr, uint64_t> running;
  std::vector<caf::typed_response_promise<std::string>> waiters;
  clock_type::time_point t0;
  bool started = false;
  // counters
  int64_t by_status[4] = {0, 0, 0, 0};
  int64_t crashed = 0, turns = 0, correct_turns = 0, tokens = 0, baseline_failures = 0;
  double reward_sum = 0, policy_ms = 0, pool_ms = 0, sink_ms = 0, total_ms = 0;
  double queue_ms = 0, compile_ms = 0, device_ms = 0, baseline_ms = 0;
  int64_t baselines = 0, errors = 0;
  // Reward against each task's first group of episodes: the batch mean swings with which task
  // groups land in it, this does not (a curve that rises is the policy improving on its tasks).
  std::unordered_map<std::string, std::pair<double, int64_t>> first_group; // sum, count
  double gain_sum = 0;
  int64_t gain_episodes = 0;
  turn_stats by_turn;
  nlohmann::json episode_rows = nlohmann::json::array(); // keep_episodes only
  static inline const char* name = "kiln.coordinator";
};
using coordinator_actor = caf::stateful_actor<coordinator_state>;

nlohmann::json summary(coordinator_actor* self, bool final_rows = false) {
  auto& st = self->state;
  double secs = st.started ? std::chrono::duration<double>(clock_type::now() - st.t0).count() : 0.0;
  int64_t ended = 0;
  for (auto n : st.by_status) ended += n;
  ended += st.crashed;
  nlohmann::json j = {{"episodes", ended},
                      {"running", st.adm->running()},
                      {"started", st.adm->started()},
                      {"accepted", st.adm->accepted()},
                      {"version", st.adm->version()},
                      {"crashed", st.crashed},
                      {"episode_errors", st.errors},
                      {"turns", st.turns},
                      {"correct_turns", st.correct_turns},
                      {"tokens", st.tokens},
                      {"baselines", st.baselines},
                      {"baseline_failures", st.baseline_failures},
                      {"baseline_ms_total", st.baseline_ms},
                      {"seconds", secs},
                      {"episodes_per_s", secs > 0 ? ended / secs : 0.0},
                      {"steps_per_s", secs > 0 ? st.turns / secs : 0.0},
                      {"mean_reward", ended ? st.reward_sum / double(ended) : 0.0},
                      {"task_gain_sum", st.gain_sum},
                      {"task_gain_episodes", st.gain_episodes},
                      {"learner_discarded", st.adm->discarded()}};
  nlohmann::json s;
  for (int i = 0; i < 4; ++i) s[to_string(static_cast<episode_status>(i))] = st.by_status[i];
  j["status"] = s;
  j["by_turn"] = st.by_turn.to_json();
  double n = ended ? double(ended) : 1.0;
  j["mean_ms"] = {{"total", st.total_ms / n},      {"policy", st.policy_ms / n},
                  {"pool", st.pool_ms / n},        {"sink", st.sink_ms / n},
                  {"pool_queue", st.queue_ms / n}, {"compile", st.compile_ms / n},
                  {"device", st.device_ms / n}};
  if (final_rows && st.cfg.keep_episodes) {
    j["episode_rows"] = st.episode_rows;
    nlohmann::json eager = nlohmann::json::object();
    for (const auto& t : st.tasks)
      if (t->eager_ms) eager[t->spec.name] = *t->eager_ms;
    j["eager_ms"] = eager;
  }
  return j;
}

void check_done(coordinator_actor* self) {
  auto& st = self->state;
  if (!st.adm->all_done() || st.waiters.empty()) return;
  auto s = summary(self, true).dump();
  for (auto& w : st.waiters) w.deliver(s);
  st.waiters.clear();
}

void admit(coordinator_actor* self);

// One baseline job per task, asked for when admission first needs the task (plus a lookahead),
// so a run over a few tasks of a large suite does not time every task first.
void request_baseline(coordinator_actor* self, size_t i) {
  auto& st = self->state;
  if (st.ready[i] != 0) return;
  st.ready[i] = 1;
  ++st.baselines;
  auto t0 = clock_type::now();
  auto done = [=](const std::string& failure) {
    auto& st = self->state;
    st.baseline_ms += std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
    if (!failure.empty()) {
      ++st.baseline_failures;
      spdlog::warn("baseline of task '{}' failed ({}): its speedups count as 0",
                   st.tasks[i]->spec.name, failure);
    }
    st.ready[i] = 2;
    admit(self);
  };
  self->request(st.peers.pool, caf::duration(st.cfg.baseline_timeout), evaluate_atom::value,
                st.tasks[i]->baseline_job_msgpack, std::string())
      .then(
          [=](const std::string& bytes) {
            auto o = decode_outcome(bytes);
            if (o && o->kind == outcome_kind::correct && o->time && o->time->median_ms > 0) {
              self->state.tasks[i]->eager_ms = o->time->median_ms;
              return done({});
            }
            done(o ? std::string(to_string(o->kind)) + " " + o->message : o.message());
          },
          [=](caf::error& e) { done(self->system().render(e)); });
}

void admit(coordinator_actor* self) {
  auto& st = self->state;
  auto n_tasks = static_cast<int64_t>(st.tasks.size());
  if (n_tasks == 0) return;
  auto g = std::max<int64_t>(1, st.cfg.admission.group_size);
  for (auto cap = st.adm->capacity(); cap > 0; --cap) {
    int64_t idx = st.adm->started();
    int64_t group = idx / g;
    auto ti = static_cast<size_t>(group % n_tasks);
    if (st.ready[ti] != 2) { // its baseline is not known yet: ask for it and the next ones
      for (int64_t k = 0; k <= cap / g && k < n_tasks; ++k)
        request_baseline(self, static_cast<size_t>((group + k) % n_tasks));
      break;
    }
    if (!st.started) {
      st.started = true;
      st.t0 = clock_type::now();
    }
    st.adm->admit();
    episode_args a;
    a.id = st.cfg.first_episode_id + static_cast<uint64_t>(idx);
    a.group = st.tasks[ti]->spec.name + "/" + std::to_string(group);
    a.task = st.tasks[ti];
    a.cfg = st.ep_cfg;
    a.peers = st.peers;
    auto ep = spawn_episode(self->system(), std::move(a));
    self->link_to(ep); // the episodes end with the coordinator: shutdown never waits on them
    st.running.emplace(ep.address(), st.cfg.first_episode_id + static_cast<uint64_t>(idx));
  }
  check_done(self);
}

caf::behavior coordinator(coordinator_actor* self, std::vector<std::shared_ptr<rollout_task>> tasks,
                          coordinator_config cfg, episode_peers peers) {
  auto& st = self->state;
  st.tasks = std::move(tasks);
  st.cfg = cfg;
  st.ep_cfg = std::make_shared<const episode_config>(cfg.episode);
  st.peers = peers;
  st.peers.coordinator = caf::actor_cast<caf::actor>(self);
  st.adm = std::make_unique<admission_control>(cfg.admission);
  st.ready.assign(st.tasks.size(), cfg.measure_baselines ? 0 : 2);
  if (st.peers.policy_server)
    self->send(st.peers.policy_server, subscribe_atom::value, st.peers.coordinator);
  self->set_exit_handler([=](caf::exit_msg& m) {
    auto& st = self->state;
    auto it = st.running.find(m.source);
    if (it == st.running.end()) { // not a running episode: an episode's normal end, or a stop
      if (m.reason && m.reason != caf::exit_reason::normal) self->quit(m.reason);
      return;
    }
    spdlog::error("episode {} exited without a report: {}", it->second,
                  self->system().render(m.reason));
    st.running.erase(it);
    ++st.crashed;
    st.adm->finished(false);
    admit(self);
  });
  admit(self);
  return {
      [=](episode_done_atom, const episode_summary& s) {
        auto& st = self->state;
        st.running.erase(caf::actor_cast<caf::actor_addr>(self->current_sender()));
        if (s.status >= 0 && s.status < 4) ++st.by_status[s.status];
        // Failed / aborted episodes are counted; the first few say why (then every 1000th).
        if (!s.error.empty() && (++st.errors <= 10 || st.errors % 1000 == 0))
          spdlog::warn("episode {} ({}) {}: {} [{} so far]", s.episode, s.task,
                       to_string(static_cast<episode_status>(s.status)), s.error, st.errors);
        st.turns += s.turns;
        st.correct_turns += s.correct_turns;
        st.tokens += s.tokens;
        st.reward_sum += s.reward;
        st.by_turn.add(s.turn_rewards, s.turn_correct);
        {
          auto& [sum, count] = st.first_group[s.task];
          if (count < st.cfg.admission.group_size) {
            sum += s.reward;
            ++count;
          } else {
            st.gain_sum += s.reward - sum / static_cast<double>(count);
            ++st.gain_episodes;
          }
        }
        st.policy_ms += s.policy_ms;
        st.pool_ms += s.pool_ms;
        st.sink_ms += s.sink_ms;
        st.total_ms += s.total_ms;
        st.queue_ms += s.queue_ms;
        st.compile_ms += s.compile_ms;
        st.device_ms += s.device_ms;
        if (st.cfg.keep_episodes)
          st.episode_rows.push_back({{"episode", s.episode},
                                     {"task", s.task},
                                     {"status", to_string(static_cast<episode_status>(s.status))},
                                     {"reward", s.reward},
                                     {"turns", s.turns},
                                     {"best_kernel_ms", s.best_kernel_ms},
                                     {"first_correct_turn", s.first_correct_turn},
                                     {"error", s.error},
                                     {"last_outcome", s.last_outcome},
                                     {"last_message", s.last_message},
                                     {"best_program", s.best_program}});
        st.adm->finished(s.handed_on);
        admit(self);
      },
      [=](version_atom, int64_t v) {
        self->state.adm->set_version(v);
        admit(self);
      },
      [=](discarded_atom, int64_t total) {
        self->state.adm->set_discarded(total);
        admit(self);
      },
      [=](run_atom) -> caf::result<std::string> {
        auto& st = self->state;
        if (st.cfg.admission.total <= 0)
          return caf::make_error(caf::sec::invalid_argument, "run: admission.total must be > 0");
        auto rp = self->make_response_promise<std::string>();
        st.waiters.push_back(rp);
        check_done(self);
        return rp;
      },
      [=](server_stats_atom) { return summary(self).dump(); },
  };
}

} // namespace

caf::actor spawn_coordinator(caf::actor_system& sys,
                             std::vector<std::shared_ptr<rollout_task>> tasks,
                             const coordinator_config& cfg, episode_peers peers) {
  return sys.spawn(coordinator, std::move(tasks), cfg, peers);
}

} // namespace kiln
