// Dataset synthesis, generator side: seed -> random compositions of v1 seed operators (a head op
// and epilogues, each shape-checked) -> dedup by structure_hash -> candidate tasks and statistics.
// No LibTorch here; the eager filters (reference run, finiteness, degeneracy, time window) are in
// synth_filter, and `kiln synth` (app/cmd_synth.cpp) drives both.
#pragma once

#include "data/expected.hpp"
#include "data/task_spec.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace kiln {

enum class reject_reason {
  shape,              // no well-typed composition came out of the draw (or check_task refused it)
  reference_error,    // the eager reference threw
  non_finite,         // NaN / Inf in an output
  degenerate,         // constant, near-zero or input-independent outputs (check_degeneracy)
  too_fast,           // eager median below the window
  too_slow,           // eager median above the window
  duplicate_of_suite, // structure_hash of a task in a --dedup-against suite
  duplicate_in_set,   // structure_hash of a task already accepted
};
constexpr std::size_t reject_reason_count = 8;
const char* to_string(reject_reason r); // the snake_case names above

struct synth_options {
  uint64_t seed = 1;
  int max_ops = 5;          // longest composition (1-8)
  int max_attempts = 20000; // candidates drawn for one task before next() gives up
  // Size budgets keep the eager reference on CPU in roughly 0.05-50 ms.
  int64_t min_elements = int64_t{1} << 16; // input numel of elementwise / norm / pool heads
  int64_t max_elements = int64_t{1} << 21;
  int64_t max_tensor = int64_t{1} << 23; // no intermediate larger than this (numel)
  int64_t min_macs = int64_t{1} << 19;   // multiply-accumulates of a GEMM / conv head
  int64_t max_macs = int64_t{1} << 25;
};

struct synth_stats {
  int64_t candidates = 0; // drawn compositions, accepted or not
  int64_t accepted = 0;
  std::array<int64_t, reject_reason_count> rejected{};
  std::map<std::string, int64_t> by_op;   // op occurrences in accepted tasks
  std::map<std::string, int64_t> by_head; // first op of accepted tasks
  std::map<int, int64_t> by_length;       // ops per accepted task
  std::map<int, int64_t> by_level;
  std::map<std::string, std::map<std::string, int64_t>> rejected_by_head; // head -> reason -> n
  std::vector<double> eager_ms; // accepted tasks' eager medians, when the filters ran
  int64_t suite_tasks = 0, suite_structures = 0;
  double seconds = 0;

  int64_t rejected_total() const;
  std::string rejections_line() const; // "too_fast 12, degenerate 3" (non-zero reasons only)
  nlohmann::json to_json() const;
};

// One random composition named synth_<index>_<ops>, checked with check_task (op shapes filled).
// An error means the draw did not yield a well-typed task; draw again.
expected<task> random_task(std::mt19937_64& rng, const synth_options& opts, int64_t index);

// The stateful generator: draws candidates, rejects structures already taken, keeps statistics.
// Deterministic for a seed given the same sequence of accept / reject calls.
class synthesizer {
public:
  explicit synthesizer(const synth_options& opts);

  // Structures of these tasks (e.g. benchmark suites) are never produced.
  void exclude(const std::vector<task>& suite);
  // The next candidate for `index` that is well typed and of a structure not yet taken; the shape
  // failures and duplicates met on the way are counted. Error after max_attempts draws.
  expected<task> next(int64_t index);
  // The caller's verdict on the last candidate: rejected by an eager filter, or accepted (its
  // structure is then taken).
  void reject(const task& t, reject_reason r);
  void accept(const task& t, double eager_ms = -1);

  const synth_stats& stats() const { return stats_; }
  synth_stats& stats() { return stats_; }

private:
  void count(reject_reason r, const std::string& head);

  synth_options opts_;
  std::mt19937_64 rng_;
  std::set<uint64_t> suite_, produced_;
  synth_stats stats_;
};

} // namespace kiln
