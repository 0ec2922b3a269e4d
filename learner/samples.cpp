#include "learner/samples.hpp"

#include "rollout/token_space.hpp"
#include "skills/grammar.hpp"

#include <optional>

namespace kiln {

expected<sample> prepare_sample(const trajectory& t, const task* spec, reward_placement where) {
  sample s;
  s.id = t.id;
  s.task = t.task;
  s.group = t.group;
  s.tokens = t.tokens;
  s.policy_version = t.policy_version;
  s.reward = t.reward;
  const size_t pc = static_cast<size_t>(program_token_count());
  std::optional<grammar> g;
  if (spec) g.emplace(*spec);
  std::vector<int> prefix;
  int64_t prefix_turn = -1; // the turn (or run) the prefix belongs to
  for (size_t i = 0; i < t.tokens.size(); ++i) {
    if (!t.loss_mask[i]) {
      if (t.turns.empty()) prefix_turn = -1; // runs of model tokens are the turns
      continue;
    }
    int64_t turn = -2;
    if (!t.turns.empty()) {
      for (size_t k = 0; k < t.turns.size(); ++k)
        if (static_cast<int64_t>(i) >= t.turns[k].start && static_cast<int64_t>(i) < t.turns[k].end)
          turn = static_cast<int64_t>(k);
      if (turn < 0) return error{"model token " + std::to_string(i) + " outside every turn"};
    } else {
      turn = prefix_turn < 0 ? static_cast<int64_t>(i) : prefix_turn;
    }
    if (turn != prefix_turn) {
      prefix.clear();
      prefix_turn = turn;
    }
    size_t row = s.masks.size();
    s.masks.resize(row + pc, 0);
    if (g) {
      for (int id : g->valid_next(prefix)) s.masks[row + static_cast<size_t>(id)] = 1;
    } else {
      std::fill(s.masks.begin() + static_cast<std::ptrdiff_t>(row), s.masks.end(), 1);
    }
    int32_t tok = t.tokens[i];
    if (tok < 0 || static_cast<size_t>(tok) >= pc || !s.masks[row + static_cast<size_t>(tok)])
      return error{"model token " + std::to_string(i) + " ('" + token_word(tok) +
                   "') is not allowed by the grammar of task '" + t.task + "'"};
    prefix.push_back(tok);
    s.model_pos.push_back(static_cast<int32_t>(i));
    s.logp_behav.push_back(t.logprobs[i]);
    s.versions.push_back(t.versions[i]);
  }
  if (s.model_pos.empty()) return error{"no model tokens"};
  s.rewards.assign(s.model_pos.size(), 0.0f);
  if (where == reward_placement::episode || t.turns.empty()) {
    s.rewards.back() = static_cast<float>(t.reward);
  } else {
    for (const auto& turn : t.turns) {
      // Last model token inside the turn.
      for (size_t k = s.model_pos.size(); k-- > 0;)
        if (s.model_pos[k] >= turn.start && s.model_pos[k] < turn.end) {
          s.rewards[k] += static_cast<float>(turn.reward);
          break;
        }
    }
  }
  return s;
}

std::vector<int32_t> first_turn_prompt(const task& t) {
  std::vector<int32_t> p{token_of(special_token::bos)};
  auto tt = task_tokens(t);
  p.insert(p.end(), tt.begin(), tt.end());
  p.push_back(token_of(special_token::task_end));
  p.push_back(token_of(special_token::program));
  return p;
}

namespace {

// The warm-up sample of program p on t: the first-turn prompt, then p's tokens as model tokens.
expected<sample> program_sample(const task& t, const program& p, const std::string& id) {
  trajectory tr;
  tr.id = id;
  tr.task = t.name;
  tr.tokens = first_turn_prompt(t);
  auto start = static_cast<int32_t>(tr.tokens.size());
  tr.loss_mask.assign(tr.tokens.size(), 0);
  for (int tok : to_tokens(p)) {
    tr.tokens.push_back(tok);
    tr.loss_mask.push_back(1);
  }
  tr.logprobs.assign(tr.tokens.size(), 0.0f);
  tr.versions.assign(tr.tokens.size(), 0);
  turn_record turn;
  turn.start = start;
  turn.end = static_cast<int32_t>(tr.tokens.size());
  tr.turns.push_back(turn);
  return prepare_sample(tr, &t, reward_placement::episode);
}

} // namespace

std::vector<sample> expert_samples(const std::vector<task>& tasks, backend_kind backend,
                                   const std::vector<bool>& verified) {
  std::vector<sample> out;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (!verified.empty() && (i >= verified.size() || !verified[i])) continue;
    const auto& t = tasks[i];
    auto p = expert_program(t, backend);
    if (!check_program(p, t)) continue;
    if (auto s = program_sample(t, p, "expert:" + t.name)) out.push_back(std::move(*s));
  }
  return out;
}

std::vector<sample> program_samples(const std::vector<task>& tasks,
                                    const std::vector<std::string>& programs,
                                    backend_kind backend) {
  std::vector<sample> out;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const auto& t = tasks[i];
    std::string id = "chosen:" + t.name;
    std::optional<program> p;
    if (i < programs.size() && !programs[i].empty())
      if (auto parsed = parse_program(programs[i]); parsed && check_program(*parsed, t))
        p = *parsed;
    if (!p) {
      p = expert_program(t, backend);
      id = "expert:" + t.name;
      if (!check_program(*p, t)) continue;
    }
    if (auto s = program_sample(t, *p, id)) out.push_back(std::move(*s));
  }
  return out;
}

} // namespace kiln
