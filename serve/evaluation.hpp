// One evaluation as `kiln serve` takes and answers it, in KernelGYM's field names (docs/DESIGN.md,
// "kiln serve", maps them field by field). The request's JSON is checked here, whole, before any
// work is accepted: a field of the wrong type or out of range is a 400 naming it.
//   JSON body --parse_evaluation_request--> evaluation_request ... evaluation_result --to_json-->
//   JSON
#pragma once

#include "data/expected.hpp"

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace kiln {

struct evaluation_request {
  std::string task_id;          // the caller's id for this evaluation; results are kept under it
  std::string reference_code;   // a KernelBench problem source, or the name of a served task
  std::string kernel_code;      // ModelNew source, or any submission kind the pool takes
  std::string backend = "cuda"; // KernelGYM's "cuda" | "triton"; Kiln also takes "cpu"
  std::string entry_point = "Model";
  std::string reference_backend = "pytorch"; // "pytorch" (eager) | "compile" (torch.compile)
  std::string priority = "normal";           // "low" | "normal" | "high"
  int num_correct_trials = 5;
  int num_perf_trials = 100;
  int num_warmup = 3;
  int timeout_s = 300;
  bool force_refresh = false;
  bool wait = true; // Kiln's: false answers 202 at once; the result is then polled
};

expected<evaluation_request> parse_evaluation_request(const nlohmann::json& body);

struct evaluation_result {
  std::string task_id;
  std::string status = "pending"; // pending | processing | completed | failed
  std::optional<bool> compiled, correctness;
  std::optional<double> reference_runtime, kernel_runtime, speedup; // ms, ms, ratio
  std::string error_code;                             // KernelGYM's ErrorCode names; "" when none
  std::string error_message;                          // "" when none
  double processing_time = 0;                         // s, from acceptance to the verdict
  std::string submitted_at, completed_at;             // ISO 8601, UTC
  nlohmann::json metadata = nlohmann::json::object(); // metadata.kiln: the pool's own facts
};

nlohmann::json to_json(const evaluation_result& r);
expected<evaluation_result> result_from_json(const nlohmann::json& j);

// "2026-12-07T02:00:00.123Z"
std::string iso_time_now();

// For every dump of JSON that holds text from elsewhere (compiler logs cut at a byte count, a
// kernel's exception): invalid UTF-8 becomes U+FFFD instead of an exception.
inline constexpr auto utf8_replace = nlohmann::json::error_handler_t::replace;

} // namespace kiln
