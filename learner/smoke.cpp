#include "learner/smoke.hpp"

#include "learner/samples.hpp"
#include "skills/expert.hpp"
#include "skills/grammar.hpp"

#include <chrono>
#include <tuple>

namespace kiln {

void proxy_stats::add(const proxy_stats& o) {
  episodes += o.episodes;
  passes += o.passes;
  tokens += o.tokens;
  model_tokens += o.model_tokens;
  reward_sum += o.reward_sum;
  seconds += o.seconds;
}

proxy_result proxy_reward(const program& expert, const std::vector<int32_t>& program_tokens) {
  std::vector<int> ids(program_tokens.begin(), program_tokens.end());
  auto p = parse_program(tokens_to_text(ids));
  if (!p) return {};
  using key = std::tuple<int64_t, int64_t, kernel_template>;
  std::vector<key> e, s;
  for (const auto& g : expert.groups) e.emplace_back(g.first_op, g.num_ops, g.tmpl);
  int64_t first = 0; // parse_program leaves first_op to the checker: recompute from counts
  for (const auto& g : p->groups) {
    s.emplace_back(first, g.num_ops, g.tmpl);
    first += g.num_ops;
  }
  size_t matched = 0;
  for (const auto& k : s)
    if (std::find(e.begin(), e.end(), k) != e.end()) ++matched;
  double f = static_cast<double>(matched) / static_cast<double>(std::max(e.size(), s.size()));
  return {2.0 * f - 1.0, matched == e.size() && e.size() == s.size()};
}

std::vector<proxy_task> proxy_tasks(const std::vector<task>& tasks) {
  std::vector<proxy_task> out;
  for (const auto& t : tasks) {
    auto p = expert_program(t, backend_kind::cpu);
    if (!check_program(p, t)) continue;
    // Canonical group boundaries (first_op filled in order), as proxy_reward compares them.
    int64_t first = 0;
    for (auto& g : p.groups) {
      g.first_op = first;
      first += g.num_ops;
    }
    out.push_back({&t, p});
  }
  return out;
}

std::vector<trajectory> generate_proxy_episodes(token_policy& policy,
                                                const std::vector<proxy_task>& tasks,
                                                const std::vector<size_t>& which,
                                                std::mt19937_64& rng, const std::string& id_prefix,
                                                proxy_stats* stats) {
  auto t0 = std::chrono::steady_clock::now();
  static thread_local uint64_t next_seq = 1;
  struct episode {
    size_t task;
    uint64_t seq;
    trajectory tr;
    std::vector<int> program;
    std::vector<uint8_t> mask;
    int32_t start;
    bool done = false;
  };
  std::vector<episode> eps;
  for (size_t i = 0; i < which.size(); ++i) {
    episode e;
    e.task = which[i];
    e.seq = next_seq++;
    const auto& t = *tasks[e.task].spec;
    e.tr.id = id_prefix + std::to_string(i);
    e.tr.task = t.name;
    e.tr.group = id_prefix;
    e.tr.policy_version = policy.version();
    e.tr.tokens = first_turn_prompt(t);
    e.tr.loss_mask.assign(e.tr.tokens.size(), 0);
    e.tr.logprobs.assign(e.tr.tokens.size(), 0.0f);
    e.tr.versions.assign(e.tr.tokens.size(), -1);
    e.start = static_cast<int32_t>(e.tr.tokens.size());
    eps.push_back(std::move(e));
  }
  std::vector<grammar> grammars;
  grammars.reserve(eps.size());
  for (auto& e : eps) grammars.emplace_back(*tasks[e.task].spec);
  for (;;) {
    std::vector<decode_slot> slots;
    std::vector<size_t> owner;
    for (size_t i = 0; i < eps.size(); ++i) {
      auto& e = eps[i];
      if (e.done) continue;
      e.mask = grammars[i].mask(e.program);
      bool any = std::find(e.mask.begin(), e.mask.end(), 1) != e.mask.end();
      if (!any) { // the grammar says the program is complete
        e.done = true;
        policy.release(e.seq);
        continue;
      }
      decode_slot s;
      s.seq_id = e.seq;
      s.spec = tasks[e.task].spec;
      s.context = &e.tr.tokens;
      s.turn_start = e.start;
      s.mask = &e.mask;
      slots.push_back(s);
      owner.push_back(i);
    }
    if (slots.empty()) break;
    policy.step(slots, rng);
    for (size_t k = 0; k < slots.size(); ++k) {
      auto& e = eps[owner[k]];
      auto tok = slots[k].token;
      if (tok < 0) { // no valid token: abandon the episode
        e.done = true;
        e.tr.status = episode_status::failed;
        policy.release(e.seq);
        continue;
      }
      e.program.push_back(tok);
      e.tr.tokens.push_back(tok);
      e.tr.loss_mask.push_back(1);
      e.tr.logprobs.push_back(slots[k].logprob);
      e.tr.versions.push_back(static_cast<int32_t>(policy.version()));
    }
  }
  std::vector<trajectory> out;
  proxy_stats st;
  for (auto& e : eps) {
    std::vector<int32_t> prog(e.program.begin(), e.program.end());
    auto r = proxy_reward(tasks[e.task].expert, prog);
    turn_record turn;
    turn.start = e.start;
    turn.end = static_cast<int32_t>(e.tr.tokens.size());
    turn.outcome = r.pass ? "correct" : "wrong"; // proxy outcome, see smoke.hpp
    turn.reward = r.reward;
    e.tr.turns.push_back(turn);
    e.tr.reward = r.reward;
    ++st.episodes;
    st.passes += r.pass ? 1 : 0;
    st.reward_sum += r.reward;
    st.tokens += e.tr.tokens.size();
    st.model_tokens += prog.size();
    out.push_back(std::move(e.tr));
  }
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (stats) stats->add(st);
  return out;
}

} // namespace kiln
