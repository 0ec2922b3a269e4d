// The token space as one word table built once: program words (skills/grammar.hpp) keep their ids,
// then specials, task words, observation words. A word's id never depends on a task.
#include "rollout/token_space.hpp"

#include "data/op_vocab.hpp"
#include "jobs/job.hpp"
#include "skills/grammar.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace kiln {

namespace {

constexpr int max_size_log2 = 47;
constexpr int min_err_log10 = -7, max_err_log10 = 3;

// Speedup bucket edges (baseline / kernel); the word names the half-open range.
const double speedup_edges[] = {0.5, 0.95, 1.05, 1.5, 2.0, 4.0};
const char* const speedup_words[] = {"<0.5",  "0.5-0.95", "0.95-1.05", "1.05-1.5",
                                     "1.5-2", "2-4",      ">=4"};
constexpr int speedup_buckets = 7;

const outcome_kind all_outcome_kinds[] = {
    outcome_kind::correct,      outcome_kind::wrong,         outcome_kind::runtime_error,
    outcome_kind::timeout,      outcome_kind::compile_error, outcome_kind::nondeterministic,
    outcome_kind::input_mutated};

// outcome_kind words spelled here too, so the rollout library need not link the pool's codec.
const char* outcome_word(outcome_kind k) {
  switch (k) {
  case outcome_kind::correct: return "correct";
  case outcome_kind::wrong: return "wrong";
  case outcome_kind::runtime_error: return "runtime_error";
  case outcome_kind::timeout: return "timeout";
  case outcome_kind::compile_error: return "compile_error";
  case outcome_kind::nondeterministic: return "nondeterministic";
  case outcome_kind::input_mutated: return "input_mutated";
  }
  return "?";
}

struct table {
  std::vector<std::string> words;
  std::unordered_map<std::string, int32_t> ids;
  int32_t program_count = 0;
  // First ids of the observation blocks, so observation_tokens does no string work per turn.
  int32_t outcome_first = 0, err_first = 0, err_nan = 0, eager_first = 0, compile_first = 0,
          compile_na = 0;

  int32_t add(std::string w) {
    auto id = static_cast<int32_t>(words.size());
    ids.emplace(w, id);
    words.push_back(std::move(w));
    return id;
  }
  int32_t at(const std::string& w) const { return ids.at(w); }
};

const table& vocab() {
  static const table t = [] {
    table v;
    for (const auto& w : program_vocab()) v.add(w); // ids unchanged: see the header
    v.program_count = static_cast<int32_t>(v.words.size());
    for (auto w : {"<pad>", "<bos>", "<task_end>", "<program>", "<obs>", "<obs_end>"}) v.add(w);
    for (int l = 1; l <= 3; ++l) v.add("level:" + std::to_string(l));
    for (const auto& op : all_ops()) // a pytorch_module is no op a task is read by: no word
      if (op.family != op_family::module) v.add("op:" + std::string(op.name));
    for (int k = 0; k <= max_size_log2; ++k) v.add("size:2^" + std::to_string(k));
    v.outcome_first = static_cast<int32_t>(v.words.size());
    for (auto k : all_outcome_kinds) v.add(std::string("obs:") + outcome_word(k));
    v.err_first = static_cast<int32_t>(v.words.size());
    for (int e = min_err_log10; e <= max_err_log10; ++e) v.add("err:1e" + std::to_string(e));
    v.err_nan = v.add("err:nan");
    v.eager_first = static_cast<int32_t>(v.words.size());
    for (auto w : speedup_words) v.add(std::string("speedup_eager:") + w);
    v.compile_first = static_cast<int32_t>(v.words.size());
    for (auto w : speedup_words) v.add(std::string("speedup_compile:") + w);
    v.compile_na = v.add("speedup_compile:n/a");
    return v;
  }();
  return t;
}

int32_t size_token(int64_t n) {
  int k = 0;
  while (k < max_size_log2 && (int64_t{2} << k) <= n) ++k; // floor(log2(n)), n >= 1
  return vocab().at("size:2^" + std::to_string(k));
}

int speedup_bucket(double s) {
  int b = 0;
  while (b < speedup_buckets - 1 && s >= speedup_edges[b]) ++b;
  return b;
}

} // namespace

int32_t vocab_size() { return static_cast<int32_t>(vocab().words.size()); }
int32_t program_token_count() { return vocab().program_count; }
bool is_program_token(int32_t id) { return id >= 0 && id < vocab().program_count; }

int32_t token_of(special_token s) { return vocab().program_count + static_cast<int32_t>(s); }

std::vector<int32_t> task_tokens(const task& t) {
  const auto& v = vocab();
  std::vector<int32_t> out;
  out.push_back(v.at("level:" + std::to_string(std::clamp(t.level, 1, 3))));
  auto push = [&](int32_t id) {
    if (static_cast<int32_t>(out.size()) < max_task_tokens) out.push_back(id);
  };
  for (const auto& op : t.ops) {
    auto it = v.ids.find("op:" + op.op);
    if (it != v.ids.end()) push(it->second);
    push(size_token(std::max<int64_t>(1, numel(op.shape))));
  }
  for (const auto& in : t.inputs) push(size_token(std::max<int64_t>(1, numel(in.shape))));
  return out;
}

std::vector<int32_t> observation_tokens(const outcome& o, double speedup_eager,
                                        std::optional<double> speedup_compile) {
  const auto& v = vocab();
  std::vector<int32_t> out;
  out.reserve(5);
  out.push_back(token_of(special_token::obs));
  int kind = 0; // all_outcome_kinds order
  while (kind < 6 && all_outcome_kinds[kind] != o.kind) ++kind;
  out.push_back(v.outcome_first + kind);
  if (o.kind == outcome_kind::wrong) {
    double e = o.error ? o.error->max_rel_err : NAN;
    if (!std::isfinite(e)) {
      out.push_back(v.err_nan);
    } else {
      int k = e > 0 ? static_cast<int>(std::ceil(std::log10(e))) : min_err_log10;
      k = std::clamp(k, min_err_log10, max_err_log10);
      out.push_back(v.err_first + (k - min_err_log10));
    }
  } else if (o.kind == outcome_kind::correct) {
    out.push_back(v.eager_first + speedup_bucket(speedup_eager));
    out.push_back(speedup_compile ? v.compile_first + speedup_bucket(*speedup_compile)
                                  : v.compile_na);
  }
  out.push_back(token_of(special_token::obs_end));
  return out;
}

std::string token_word(int32_t id) {
  const auto& v = vocab();
  if (id < 0 || id >= static_cast<int32_t>(v.words.size())) return "<?" + std::to_string(id) + ">";
  return v.words[static_cast<size_t>(id)];
}

} // namespace kiln
