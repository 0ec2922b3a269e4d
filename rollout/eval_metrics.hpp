// Evaluation metrics as KernelBench and CUDA Agent report them, from per-task outcomes:
//   rows (task, correct, kernel ms, eager ms, compile-baseline ms?) --summarize--> pass rate,
//   fast_p, geomean speedups, share faster than torch.compile; per level and overall.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace kiln {

struct eval_row {
  std::string task;
  int level = 1;
  std::string outcome; // outcome_kind as text
  bool correct = false;
  double kernel_ms = 0;              // median; 0 when not correct
  double eager_ms = 0;               // eager baseline median, measured by the same executor
  std::optional<double> compiled_ms; // torch.compile baseline from a baselines file, if any
  int turns = 1;   // turns used: up to the first correct one (all turns run when none was)
  int samples = 1; // episodes sampled for the task (pass@k: correct if any is)
  // Compulsory traffic (inputs + params + outputs, once each) and whether every op is
  // memory-bound (no GEMM / convolution): achieved bandwidth = bytes / kernel time.
  int64_t bytes = 0;
  bool memory_bound = false;
  // The timing's honesty signals: the bandwidth bound it was checked against (0: not checked),
  // whether it beat half of it (re-verified, flagged), and the device clocks after the trials.
  double roofline_ms = 0;
  bool beyond_roofline = false;
  int sm_mhz = 0;
  bool throttled = false;
  std::string program;
  std::string message;
};

// fast_p thresholds reported, as in KernelBench.
const std::vector<double>& fast_p_thresholds();

struct eval_summary {
  int tasks = 0;   // rows judged: every rate below is over these
  int skipped = 0; // rows the policy cannot take (outcome "skipped": no op graph to write over)
  double pass_rate = 0;                // fast_0: share correct
  std::map<double, double> fast_eager; // p -> share of ALL tasks correct and > p x faster
  // Compile metrics cover the tasks a baselines file has (compile_tasks of them: fast_p and the
  // share faster are over those, the geomean over those correct); absent when none has one.
  int compile_tasks = 0;
  std::optional<std::map<double, double>> fast_compile;
  double geomean_eager = 0; // over correct tasks; 0 when none
  std::optional<double> geomean_compile;
  std::optional<double> share_faster_than_compile;
  double mean_turns = 0;
  int beyond_roofline = 0, throttled = 0; // correct tasks so flagged
  int suspect = 0; // either flag: counted as no faster than the baselines in fast_p and geomeans
  int sm_mhz_min = 0, sm_mhz_max = 0; // over correct tasks with readable clocks
};

eval_summary summarize(const std::vector<eval_row>& rows);

// One sampled episode of a task as evaluation sees it.
struct sample_result {
  bool correct = false; // some turn was correct
  double best_kernel_ms = 0;
  int first_correct_turn = -1; // 0-based
  int turns = 0;               // turns the episode ran
  std::string outcome;         // the episode's status, for failed rows
  std::string message;
  std::string program; // the fastest correct turn's program, when the policy writes programs
};

// k samples of one task -> its row (task, level, eager / compile baselines, bytes come in `base`):
// correct if any sample is, the fastest correct sample's kernel time, turns used = that sample's
// first correct turn + 1 (the most turns any sample ran when none was correct).
eval_row best_of_samples(eval_row base, const std::vector<sample_result>& samples);

// {"tasks", "pass_rate", "fast_1_eager", "fast_1_compile", "geomean_eager", "geomean_compile",
// ...}; compile-based keys are the string "n/a" without baselines, never a guess.
nlohmann::json to_json(const eval_summary& s);
nlohmann::json to_json(const eval_row& r);

} // namespace kiln
