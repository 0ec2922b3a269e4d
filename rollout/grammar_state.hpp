// Incremental form of skills/grammar.hpp for the policy server: grammar::valid_next re-parses the
// whole prefix and looks words up in a std::map on every call (O(prefix) per token), so per-task
// tables are built once and each sequence keeps a small cursor that advances in O(1) per token.
//   task --grammar_tables (once)--> grammar_state per sequence: fill_mask / advance / done
// Its answers equal grammar::valid_next for every prefix (tests/rollout/test_grammar_state.cpp).
#pragma once

#include "data/task_spec.hpp"

#include <cstdint>
#include <memory>
#include <vector>

namespace kiln {

class grammar_tables {
public:
  explicit grammar_tables(const task& t);
  int64_t ops() const { return total_; }

private:
  friend class grammar_state;
  struct knob_tokens {
    int32_t name = 0;
    std::vector<int32_t> values;
  };
  int64_t total_ = 0;
  std::vector<std::vector<int32_t>> count_tokens_; // per next op: token ids of valid counts
  // [first][count - 1]: token ids of the templates fitting ops [first, first + count)
  std::vector<std::vector<std::vector<int32_t>>> template_tokens_;
  std::vector<int32_t> token_count_;            // token id -> its count value (or -1)
  std::vector<int32_t> template_index_;         // token id -> kernel_template (or -1)
  std::vector<std::vector<knob_tokens>> knobs_; // per template, in template order
  int32_t kernel_ = 0, ops_ = 0, end_ = 0;
};

class grammar_state {
public:
  grammar_state() = default;
  explicit grammar_state(std::shared_ptr<const grammar_tables> t) : t_(std::move(t)) {}

  // Sets mask[id] = 1 for every valid next token (mask must be program_token_count() long and
  // zeroed); returns how many were set.
  int fill_mask(std::vector<uint8_t>& mask) const;
  // Appends a token; false (and the state becomes invalid) when the token is not allowed.
  bool advance(int32_t token);
  bool done() const { return state_ == expect::done; }
  bool invalid() const { return state_ == expect::invalid; }
  void reset() { *this = grammar_state(t_); }

private:
  enum class expect : uint8_t {
    kernel_or_end,
    ops,
    count,
    tmpl,
    knob_name,
    knob_value,
    done,
    invalid
  };
  std::shared_ptr<const grammar_tables> t_;
  expect state_ = expect::kernel_or_end;
  int64_t next_op_ = 0, count_ = 0;
  int32_t tmpl_ = 0;
  size_t knob_index_ = 0;
};

} // namespace kiln
