#include "rollout/grammar_state.hpp"

#include "skills/grammar.hpp"

#include <string>

namespace kiln {

grammar_tables::grammar_tables(const task& t) : total_(static_cast<int64_t>(t.ops.size())) {
  const auto vocab_n = program_vocab().size();
  kernel_ = token_id("kernel");
  ops_ = token_id("ops");
  end_ = token_id("end");
  token_count_.assign(vocab_n, -1);
  template_index_.assign(vocab_n, -1);
  for (int64_t n = 1; n <= max_group_ops; ++n)
    token_count_[token_id(std::to_string(n))] = int32_t(n);
  const auto& templates = all_templates();
  for (size_t i = 0; i < templates.size(); ++i) {
    template_index_[token_id(to_string(templates[i]))] = static_cast<int32_t>(templates[i]);
    knobs_.resize(std::max(knobs_.size(), static_cast<size_t>(templates[i]) + 1));
    auto& ks = knobs_[static_cast<size_t>(templates[i])];
    for (knob k : template_knobs(templates[i])) {
      knob_tokens kt;
      kt.name = token_id(to_string(k));
      for (auto v : knob_values(k))
        if (knob_value_allowed(t, k, v)) kt.values.push_back(token_id(knob_value_word(k, v)));
      ks.push_back(std::move(kt));
    }
  }
  count_tokens_.resize(static_cast<size_t>(total_) + 1);
  template_tokens_.resize(static_cast<size_t>(total_) + 1);
  for (int64_t first = 0; first < total_; ++first) {
    auto& spans = template_tokens_[static_cast<size_t>(first)];
    for (int64_t n = 1; n <= std::min(max_group_ops, total_ - first); ++n) {
      std::vector<int32_t> ids;
      for (auto tm : fitting_templates(t, first, n)) ids.push_back(token_id(to_string(tm)));
      if (!ids.empty())
        count_tokens_[static_cast<size_t>(first)].push_back(token_id(std::to_string(n)));
      spans.push_back(std::move(ids));
    }
  }
}

int grammar_state::fill_mask(std::vector<uint8_t>& mask) const {
  const auto& t = *t_;
  auto set = [&](const std::vector<int32_t>& ids) {
    for (auto id : ids) mask[static_cast<size_t>(id)] = 1;
    return static_cast<int>(ids.size());
  };
  switch (state_) {
  case expect::kernel_or_end:
    mask[static_cast<size_t>(next_op_ < t.total_ ? t.kernel_ : t.end_)] = 1;
    return 1;
  case expect::ops: mask[static_cast<size_t>(t.ops_)] = 1; return 1;
  case expect::count: return set(t.count_tokens_[static_cast<size_t>(next_op_)]);
  case expect::tmpl:
    return set(t.template_tokens_[static_cast<size_t>(next_op_)][static_cast<size_t>(count_ - 1)]);
  case expect::knob_name:
    mask[static_cast<size_t>(t.knobs_[static_cast<size_t>(tmpl_)][knob_index_].name)] = 1;
    return 1;
  case expect::knob_value: return set(t.knobs_[static_cast<size_t>(tmpl_)][knob_index_].values);
  case expect::done:
  case expect::invalid: return 0;
  }
  return 0;
}

bool grammar_state::advance(int32_t tok) {
  const auto& t = *t_;
  auto in = [&](const std::vector<int32_t>& ids) {
    for (auto id : ids)
      if (id == tok) return true;
    return false;
  };
  auto bad = [&] {
    state_ = expect::invalid;
    return false;
  };
  auto group_done = [&] {
    next_op_ += count_;
    state_ = expect::kernel_or_end;
  };
  switch (state_) {
  case expect::kernel_or_end:
    if (next_op_ < t.total_ && tok == t.kernel_) {
      state_ = expect::ops;
      return true;
    }
    if (next_op_ >= t.total_ && tok == t.end_) {
      state_ = expect::done;
      return true;
    }
    return bad();
  case expect::ops:
    if (tok != t.ops_) return bad();
    state_ = expect::count;
    return true;
  case expect::count:
    if (!in(t.count_tokens_[static_cast<size_t>(next_op_)])) return bad();
    count_ = t.token_count_[static_cast<size_t>(tok)];
    state_ = expect::tmpl;
    return true;
  case expect::tmpl:
    if (!in(t.template_tokens_[static_cast<size_t>(next_op_)][static_cast<size_t>(count_ - 1)]))
      return bad();
    tmpl_ = t.template_index_[static_cast<size_t>(tok)];
    knob_index_ = 0;
    if (t.knobs_[static_cast<size_t>(tmpl_)].empty())
      group_done();
    else
      state_ = expect::knob_name;
    return true;
  case expect::knob_name:
    if (tok != t.knobs_[static_cast<size_t>(tmpl_)][knob_index_].name) return bad();
    state_ = expect::knob_value;
    return true;
  case expect::knob_value:
    if (!in(t.knobs_[static_cast<size_t>(tmpl_)][knob_index_].values)) return bad();
    if (++knob_index_ < t.knobs_[static_cast<size_t>(tmpl_)].size())
      state_ = expect::knob_name;
    else
      group_done();
    return true;
  case expect::done:
  case expect::invalid: return bad();
  }
  return bad();
}

} // namespace kiln
