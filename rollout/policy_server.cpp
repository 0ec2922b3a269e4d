#include "rollout/policy_server.hpp"

#include "actors/messages.hpp"
#include "rollout/grammar_state.hpp"
#include "rollout/token_space.hpp"

#include <algorithm>
#include <caf/event_based_actor.hpp>
#include <caf/spawn_options.hpp>
#include <caf/stateful_actor.hpp>
#include <chrono>
#include <cmath>
#include <deque>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <unordered_map>

namespace kiln {

namespace {

using clock_type = std::chrono::steady_clock;
double ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct sequence {
  uint64_t id = 0;
  rollout_task_ptr task;
  std::vector<int32_t> context;
  grammar_state grammar;
  std::vector<uint8_t> mask;
  int32_t turn_start = 0;
  int32_t max_tokens = 0;
  bool generating = false;
  // This turn's program so far; kept between turns so their capacity is reused.
  std::vector<int32_t> tokens, versions;
  std::vector<float> logprobs;
  gen_reply out; // timings and completion; filled from the vectors above when done
  caf::typed_response_promise<gen_reply> promise;
  clock_type::time_point queued, joined;
};

struct server_state {
  std::shared_ptr<token_policy> policy;
  policy_server_config cfg;
  std::mt19937_64 rng;
  std::unordered_map<uint64_t, sequence> seqs;
  std::vector<sequence*> active; // generating, in the batch (unordered_map nodes are stable)
  std::deque<uint64_t> waiting;  // generating, no batch slot yet
  std::vector<decode_slot> batch;
  std::vector<caf::actor> subscribers;
  bool step_scheduled = false;
  bool idle_armed = false; // an idle refresh tick is pending
  int64_t version = 0;
  // stats
  int64_t steps = 0, tokens = 0, requests = 0, rejected = 0, batch_sum = 0, swaps = 0;
  static inline const char* name = "kiln.policy_server";
};
using server_actor = caf::stateful_actor<server_state>;

void refresh(server_actor* self) {
  auto& st = self->state;
  if (!st.policy->refresh()) return;
  ++st.swaps;
  st.version = st.policy->version();
  for (auto& sub : st.subscribers) self->send(sub, version_atom::value, st.version);
}

bool idle(const server_state& st) { return st.active.empty() && st.waiting.empty(); }

void arm_idle_refresh(server_actor* self) {
  auto& st = self->state;
  if (st.idle_armed || !idle(st) || st.cfg.idle_refresh.count() <= 0) return;
  st.idle_armed = true;
  self->delayed_send(self, st.cfg.idle_refresh, flush_atom::value);
}

void schedule_step(server_actor* self) {
  auto& st = self->state;
  if (st.step_scheduled || (st.active.empty() && st.waiting.empty())) return;
  st.step_scheduled = true;
  self->send(self, decode_step_atom::value);
}

void finish(server_actor* self, sequence& s, const char* bad = nullptr) {
  s.generating = false;
  if (bad) {
    ++self->state.rejected;
    s.promise.deliver(caf::make_error(caf::sec::invalid_argument, std::string(bad)));
  } else {
    s.out.policy_ms = ms_between(s.joined, clock_type::now());
    s.out.pack(s.tokens, s.logprobs, s.versions);
    s.promise.deliver(std::move(s.out));
  }
  s.out = gen_reply{};
  s.promise = {};
}

// One decode step over every active sequence; finished ones leave, waiting ones join.
void decode_step(server_actor* self) {
  auto& st = self->state;
  st.step_scheduled = false;
  auto now = clock_type::now();
  while (!st.waiting.empty() && static_cast<int>(st.active.size()) < st.cfg.max_batch) {
    auto id = st.waiting.front();
    st.waiting.pop_front();
    auto it = st.seqs.find(id);
    if (it == st.seqs.end() || !it->second.generating) continue; // released meanwhile
    it->second.joined = now;
    it->second.out.queue_ms = ms_between(it->second.queued, now);
    st.active.push_back(&it->second);
  }
  if (st.active.empty()) return;
  st.batch.clear();
  bool masks = st.policy->uses_mask();
  for (auto* s : st.active) {
    if (masks) {
      std::fill(s->mask.begin(), s->mask.end(), 0);
      s->grammar.fill_mask(s->mask);
    }
    decode_slot slot;
    slot.seq_id = s->id;
    slot.spec = &s->task->spec;
    slot.context = &s->context;
    slot.turn_start = s->turn_start;
    slot.mask = masks ? &s->mask : nullptr;
    st.batch.push_back(slot);
  }
  try {
    st.policy->step(st.batch, st.rng);
  } catch (const std::exception& e) {
    // A failing policy fails this step's sequences, not the server (and not its other users).
    spdlog::error("policy server: {} step failed: {}", st.policy->name(), e.what());
    for (auto* s : st.active) finish(self, *s, "policy server: the policy's step failed");
    st.active.clear();
    schedule_step(self);
    return;
  }
  auto version = static_cast<int32_t>(st.policy->version());
  ++st.steps;
  st.batch_sum += static_cast<int64_t>(st.batch.size());
  size_t keep = 0;
  for (size_t i = 0; i < st.batch.size(); ++i) {
    auto& slot = st.batch[i];
    auto& s = *st.active[i];
    int32_t tok = slot.token;
    // advance() checks the token against the grammar whether or not a mask was built.
    if (!std::isfinite(slot.logprob) || slot.logprob > 0 || !s.grammar.advance(tok)) {
      finish(self, s, "policy server: the policy wrote a token the grammar does not allow");
      continue;
    }
    s.context.push_back(tok);
    s.tokens.push_back(tok);
    s.logprobs.push_back(slot.logprob);
    s.versions.push_back(version);
    ++st.tokens;
    if (s.grammar.done() || static_cast<int32_t>(s.tokens.size()) >= s.max_tokens) {
      s.out.complete = s.grammar.done();
      finish(self, s);
      continue;
    }
    st.active[keep++] = &s;
  }
  st.active.resize(keep);
  if (st.cfg.refresh_every_steps > 0 && st.steps % st.cfg.refresh_every_steps == 0) refresh(self);
  schedule_step(self);
  arm_idle_refresh(self);
}

caf::behavior policy_server(server_actor* self, std::shared_ptr<token_policy> policy,
                            policy_server_config cfg) {
  auto& st = self->state;
  st.policy = std::move(policy);
  st.cfg = cfg;
  st.rng.seed(cfg.seed);
  st.version = st.policy->version();
  arm_idle_refresh(self);
  return {
      [=](generate_atom, gen_request& r) -> caf::result<gen_reply> {
        auto& st = self->state;
        ++st.requests;
        if (!r.task || !r.task->grammar)
          return caf::make_error(caf::sec::invalid_argument, "policy server: request without task");
        auto& s = st.seqs[r.seq_id];
        if (s.generating)
          return caf::make_error(caf::sec::invalid_argument, "policy server: sequence " +
                                                                 std::to_string(r.seq_id) +
                                                                 " is already generating");
        if (!s.task) {
          s.id = r.seq_id;
          s.task = r.task;
          s.grammar = grammar_state(r.task->grammar);
          s.mask.assign(static_cast<size_t>(program_token_count()), 0);
        }
        for (auto t : r.append)
          if (t < 0 || t >= vocab_size())
            return caf::make_error(caf::sec::invalid_argument,
                                   "policy server: token " + std::to_string(t) + " out of range");
        s.context.insert(s.context.end(), r.append.begin(), r.append.end());
        s.turn_start = static_cast<int32_t>(s.context.size());
        s.max_tokens = std::max(1, r.max_tokens);
        s.grammar.reset();
        s.generating = true;
        s.tokens.clear();
        s.logprobs.clear();
        s.versions.clear();
        s.queued = clock_type::now();
        s.promise = self->make_response_promise<gen_reply>();
        st.waiting.push_back(r.seq_id);
        schedule_step(self);
        return s.promise;
      },
      [=](release_atom, uint64_t id) {
        auto& st = self->state;
        auto it = st.seqs.find(id);
        if (it == st.seqs.end()) return;
        if (it->second.generating) {
          auto a = std::find(st.active.begin(), st.active.end(), &it->second);
          if (a != st.active.end()) st.active.erase(a);
          finish(self, it->second, "policy server: sequence released while generating");
        }
        st.policy->release(id);
        st.seqs.erase(it);
      },
      [=](decode_step_atom) { decode_step(self); },
      [=](flush_atom) { // idle refresh tick
        auto& st = self->state;
        st.idle_armed = false;
        if (!idle(st)) return; // decode steps call refresh() themselves
        refresh(self);
        arm_idle_refresh(self);
      },
      [=](version_atom) { return self->state.policy->version(); },
      [=](subscribe_atom, const caf::actor& a) { self->state.subscribers.push_back(a); },
      [=](server_stats_atom) {
        auto& st = self->state;
        nlohmann::json j = {
            {"policy", st.policy->name()},
            {"version", st.policy->version()},
            {"steps", st.steps},
            {"tokens", st.tokens},
            {"requests", st.requests},
            {"rejected", st.rejected},
            {"weight_swaps", st.swaps},
            {"sequences", st.seqs.size()},
            {"mean_batch", st.steps ? double(st.batch_sum) / double(st.steps) : 0.0}};
        return j.dump();
      },
  };
}

} // namespace

caf::actor spawn_policy_server(caf::actor_system& sys, std::unique_ptr<token_policy> policy,
                               const policy_server_config& cfg) {
  std::shared_ptr<token_policy> shared(std::move(policy));
  if (shared->blocking()) return sys.spawn<caf::detached>(policy_server, std::move(shared), cfg);
  return sys.spawn(policy_server, std::move(shared), cfg);
}

} // namespace kiln
