#include "rollout/episode.hpp"

#include "actors/messages.hpp"
#include "data/utf8.hpp"
#include "jobs/job.hpp"
#include "pool/device_pool.hpp"
#include "rollout/observation_text.hpp"
#include "rollout/token_space.hpp"
#include "rollout/trajectory.hpp"
#include "skills/grammar.hpp"

#include <algorithm>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

namespace kiln {

namespace {

using clock_type = std::chrono::steady_clock;
double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

struct episode_state {
  episode_args a;
  trajectory traj;
  std::vector<int32_t> pending; // context tokens the policy server has not seen yet
  std::string pending_text;     // text policies: the last outcome, for the next turn
  std::string last_message;     // the last turn's outcome message (summary rows)
  int64_t llm_tokens = 0;       // text policies: prompt + completion tokens the endpoint counted
  std::vector<double> rewards;
  int correct = 0;
  bool finished = false;
  bool versioned = false; // policy_version set from the first model token
  clock_type::time_point t0, deadline;
  // The request in flight (policy, pool or sink) and when it times out; nullptr: none.
  const char* waiting_for = nullptr;
  clock_type::time_point wait_deadline;
  double pool_ms = 0;
  std::string error;
  static inline const char* name = "kiln.episode";
};
using episode_actor = caf::stateful_actor<episode_state>;

void start_turn(episode_actor* self);

// tokens_to_text with one allocation: this runs once per env step.
std::string program_text(const int32_t* first, const int32_t* last) {
  const auto& v = program_vocab();
  size_t n = 0;
  for (auto* p = first; p != last; ++p)
    n += (*p >= 0 && static_cast<size_t>(*p) < v.size() ? v[*p].size() : 3) + 1;
  std::string out;
  out.reserve(n);
  for (auto* p = first; p != last; ++p) {
    auto id = *p;
    if (!out.empty()) out += ' ';
    out += id >= 0 && static_cast<size_t>(id) < v.size() ? v[id] : "<?>";
  }
  return out;
}

// Context tokens nobody trains on (prompt, [PROGRAM], observations).
void append_context(episode_state& st, const std::vector<int32_t>& toks) {
  auto& t = st.traj;
  t.tokens.insert(t.tokens.end(), toks.begin(), toks.end());
  t.loss_mask.insert(t.loss_mask.end(), toks.size(), 0);
  t.logprobs.insert(t.logprobs.end(), toks.size(), 0.0f);
  t.versions.insert(t.versions.end(), toks.size(), -1);
  st.pending.insert(st.pending.end(), toks.begin(), toks.end());
}

// Arms the watchdog for a request: due after the turn timeout, or at the episode deadline if that
// comes first (the sink wait is not bounded by the episode deadline: see sink_timeout).
void expect_reply(episode_state& st, const char* who, std::chrono::milliseconds timeout,
                  bool episode_bound = true) {
  st.waiting_for = who;
  st.wait_deadline = clock_type::now() + timeout;
  if (episode_bound) st.wait_deadline = std::min(st.wait_deadline, st.deadline);
}

void done(episode_actor* self, bool handed_on, double sink_ms) {
  auto& st = self->state;
  episode_summary s;
  s.episode = st.a.id;
  s.task = st.a.task->spec.name;
  s.status = static_cast<int32_t>(st.traj.status);
  s.reward = st.traj.reward;
  s.turns = static_cast<int32_t>(st.traj.turns.size());
  s.correct_turns = st.correct;
  s.tokens = st.a.cfg->text_policy ? st.llm_tokens : static_cast<int64_t>(st.traj.tokens.size());
  s.handed_on = handed_on;
  s.total_ms = st.traj.timings.total_ms;
  s.policy_ms = st.traj.timings.policy_ms;
  s.pool_ms = st.pool_ms;
  s.sink_ms = sink_ms;
  s.queue_ms = st.traj.timings.queue_ms;
  s.compile_ms = st.traj.timings.compile_ms;
  s.device_ms = st.traj.timings.device_ms;
  s.error = st.error;
  if (!st.traj.turns.empty()) {
    s.last_outcome = st.traj.turns.back().outcome;
    s.last_message = st.last_message;
  }
  for (size_t i = 0; i < st.traj.turns.size(); ++i) {
    const auto& t = st.traj.turns[i];
    s.turn_rewards.push_back(t.reward);
    s.turn_correct.push_back(t.outcome == "correct" ? 1 : 0);
    if (t.outcome != "correct" || t.run_ms <= 0) continue;
    if (s.first_correct_turn < 0) s.first_correct_turn = static_cast<int32_t>(i);
    if (s.best_kernel_ms <= 0 || t.run_ms < s.best_kernel_ms) {
      s.best_kernel_ms = t.run_ms;
      if (!st.a.cfg->text_policy)
        s.best_program =
            program_text(st.traj.tokens.data() + t.start, st.traj.tokens.data() + t.end);
    }
  }
  if (st.a.peers.coordinator)
    self->send(st.a.peers.coordinator, episode_done_atom::value, std::move(s));
  if (st.a.peers.policy_server) self->send(st.a.peers.policy_server, release_atom::value, st.a.id);
  self->quit();
}

void finish(episode_actor* self, episode_status status, std::string why = {}) {
  auto& st = self->state;
  if (st.finished) return;
  st.finished = true;
  st.error = std::move(why);
  auto& t = st.traj;
  t.status = status;
  t.reward = episode_reward(st.a.cfg->reward, st.rewards);
  t.timings.total_ms = ms_since(st.t0);
  if (!st.a.peers.sink) return done(self, false, 0);
  auto t_sink = clock_type::now();
  expect_reply(st, "sink", st.a.cfg->sink_timeout, false);
  self->request(st.a.peers.sink, caf::infinite, push_atom::value, encode(t))
      .then([=](bool ok) { done(self, ok, ms_since(t_sink)); },
            [=](caf::error& e) {
              // Still queued in the sink (it answers late, never drops): count, do not resend.
              self->state.error += (self->state.error.empty() ? "" : "; ") + std::string("sink: ") +
                                   self->system().render(e);
              done(self, false, ms_since(t_sink));
            });
}

// A request failed: the turn timeout or an error reply means failed, the episode deadline aborted.
void on_request_error(episode_actor* self, const char* who, const caf::error& e) {
  auto& st = self->state;
  if (st.finished) return;
  bool late = clock_type::now() >= st.deadline;
  finish(self, late ? episode_status::aborted : episode_status::failed,
         std::string(who) + (late ? ": episode deadline passed" : ": " + self->system().render(e)));
}

void on_outcome(episode_actor* self, const outcome& o, turn_record rec) {
  auto& st = self->state;
  st.waiting_for = nullptr;
  const auto& cfg = *st.a.cfg;
  const auto& task = *st.a.task;
  bool correct = o.kind == outcome_kind::correct;
  double kernel_ms = correct && o.time ? o.time->median_ms : 0;
  double se = 0;
  std::optional<double> sc;
  if (correct && kernel_ms > 0) {
    if (task.eager_ms) se = *task.eager_ms / kernel_ms;
    if (task.compile_ms) sc = *task.compile_ms / kernel_ms;
  }
  // A suspect timing keeps its figures in the trajectory but earns no speed tier.
  bool suspect = correct && o.time && timing_suspect(*o.time);
  double r = suspect ? turn_reward(cfg.reward, correct, std::min(se, 1.0), std::nullopt)
                     : turn_reward(cfg.reward, correct, se, sc);
  rec.outcome = to_string(o.kind);
  st.last_message = utf8_head(utf8_valid(o.message), 500);
  rec.reward = r;
  rec.speedup_eager = se;
  rec.speedup_compile = sc;
  rec.compile_ms = o.compile_ms;
  rec.run_ms = kernel_ms;
  st.traj.turns.push_back(std::move(rec));
  st.rewards.push_back(r);
  st.correct += correct;
  st.traj.timings.queue_ms += o.queue_ms;
  st.traj.timings.compile_ms += o.compile_ms;
  st.traj.timings.device_ms += o.device_ms;
  if (cfg.text_policy)
    st.pending_text = observation_text(o, se, sc);
  else
    append_context(st, observation_tokens(o, se, sc));
  if (cfg.stop_at_best && r >= max_turn_reward(cfg.reward, task.compile_ms.has_value()))
    return finish(self, episode_status::completed);
  if (static_cast<int>(st.traj.turns.size()) >= cfg.max_turns)
    return finish(self, episode_status::truncated);
  if (clock_type::now() >= st.deadline)
    return finish(self, episode_status::aborted, "episode deadline passed");
  start_turn(self);
}

void on_program(episode_actor* self, gen_reply& rep) {
  auto& st = self->state;
  if (st.finished) return;
  st.waiting_for = nullptr;
  auto& t = st.traj;
  if (rep.packed.size() % 3 != 0)
    return finish(self, episode_status::failed, "policy: malformed reply (packed size)");
  size_t n = rep.size();
  if (rep.text_policy) {
    // The model's own vocabulary: what the server put before the answer is context, not action.
    t.tokens.insert(t.tokens.end(), rep.prefix.begin(), rep.prefix.end());
    t.loss_mask.insert(t.loss_mask.end(), rep.prefix.size(), 0);
    t.logprobs.insert(t.logprobs.end(), rep.prefix.size(), 0.f);
    t.versions.insert(t.versions.end(), rep.prefix.size(), -1);
    t.messages.insert(t.messages.end(), rep.asked.begin(), rep.asked.end());
    t.messages.push_back({"assistant", rep.text});
    if (t.model.empty()) t.model = rep.model, t.api = rep.api, t.answer_format = rep.answer_format;
    if (!st.versioned && n == 0) t.policy_version = rep.version, st.versioned = true;
  }
  turn_record rec;
  rec.start = static_cast<int32_t>(t.tokens.size());
  if (!st.versioned && n > 0) {
    t.policy_version = *rep.versions_begin(); // the version at the episode's first model token
    st.versioned = true;
  }
  t.tokens.insert(t.tokens.end(), rep.tokens_begin(), rep.tokens_end());
  t.loss_mask.insert(t.loss_mask.end(), n, 1);
  for (size_t i = 0; i < n; ++i) t.logprobs.push_back(rep.logprob(i));
  t.versions.insert(t.versions.end(), rep.versions_begin(), rep.versions_begin() + n);
  // (Not added to `pending`: the server appended the program to its copy of the context.)
  rec.end = static_cast<int32_t>(t.tokens.size());
  t.timings.policy_ms += rep.policy_ms + rep.queue_ms;
  std::string text;
  if (st.a.cfg->text_policy) {
    st.llm_tokens += rep.prompt_tokens + rep.completion_tokens;
    if (rep.submission.empty()) { // no code block: a failed turn, said so, no pool round trip
      outcome o;
      o.kind = outcome_kind::compile_error;
      o.message = rep.failure.empty() ? "the answer holds no program" : rep.failure;
      return on_outcome(self, o, rec);
    }
    text = std::move(rep.submission);
  } else {
    text = program_text(rep.tokens_begin(), rep.tokens_end());
    if (!rep.complete) {
      // Cut at the token cap: it cannot parse; no pool round trip for it.
      auto parsed = parse_program(text);
      outcome o;
      o.kind = outcome_kind::compile_error;
      o.message = parsed ? "program too long" : parsed.message();
      return on_outcome(self, o, rec);
    }
  }
  auto t_pool = clock_type::now();
  expect_reply(st, "pool", st.a.cfg->pool_timeout);
  self->request(st.a.peers.pool, caf::infinite, evaluate_atom::value, st.a.task->job_msgpack,
                std::move(text))
      .then(
          [=](const std::string& bytes) {
            auto& st = self->state;
            if (st.finished) return;
            st.waiting_for = nullptr;
            st.pool_ms += ms_since(t_pool);
            auto o = decode_outcome(bytes);
            if (!o) return finish(self, episode_status::failed, "pool: " + o.message());
            on_outcome(self, *o, rec);
          },
          [=](caf::error& e) { on_request_error(self, "pool", e); });
}

void start_turn(episode_actor* self) {
  auto& st = self->state;
  if (!st.a.cfg->text_policy) append_context(st, {token_of(special_token::program)});
  gen_request r;
  r.seq_id = st.a.id;
  r.task = st.a.task;
  r.append = std::move(st.pending);
  st.pending.clear();
  r.observation = std::move(st.pending_text);
  st.pending_text.clear();
  r.max_tokens = st.a.cfg->max_program_tokens;
  expect_reply(st, "policy", st.a.cfg->policy_timeout);
  self->request(st.a.peers.policy_server, caf::infinite, generate_atom::value, std::move(r))
      .then([=](gen_reply& rep) { on_program(self, rep); },
            [=](caf::error& e) { on_request_error(self, "policy", e); });
}

caf::behavior episode(episode_actor* self, episode_args args) {
  auto& st = self->state;
  st.a = std::move(args);
  st.t0 = clock_type::now();
  st.deadline = st.t0 + st.a.cfg->episode_timeout;
  auto& t = st.traj;
  t.id = std::to_string(st.a.id);
  t.task = st.a.task->spec.name;
  t.group = st.a.group;
  size_t expect = st.a.task->prompt.size() + 2 + size_t(st.a.cfg->max_turns) * 32;
  t.tokens.reserve(expect);
  t.loss_mask.reserve(expect);
  t.logprobs.reserve(expect);
  t.versions.reserve(expect);
  t.turns.reserve(static_cast<size_t>(std::max(1, st.a.cfg->max_turns)));
  if (!st.a.cfg->text_policy) append_context(st, st.a.task->prompt);
  start_turn(self);
  auto tick = std::max(std::chrono::milliseconds(1), st.a.cfg->watchdog_interval);
  self->delayed_send(self, tick, deadline_atom::value);
  // Every other message this actor gets is a response (handled by the .then callbacks above).
  return {[=](deadline_atom) {
    auto& st = self->state;
    auto now = clock_type::now();
    if (st.waiting_for && now >= st.wait_deadline) {
      std::string who = st.waiting_for;
      st.waiting_for = nullptr;
      if (who == "sink") {
        self->state.error += (self->state.error.empty() ? "" : "; ") + std::string("sink: timeout");
        return done(self, false, ms_since(now));
      }
      if (st.finished) return;
      bool late = now >= st.deadline;
      return finish(
          self, late ? episode_status::aborted : episode_status::failed,
          who + (late ? ": episode deadline passed" : ": no reply within the turn timeout"));
    }
    self->delayed_send(self, tick, deadline_atom::value);
  }};
}

} // namespace

caf::actor spawn_episode(caf::actor_system& sys, episode_args args) {
  return sys.spawn(episode, std::move(args));
}

} // namespace kiln
