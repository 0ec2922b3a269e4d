// What an LLM policy is: the endpoints and their wire format, the model, sampling and the HTTP
// client's limits. Read from `kiln eval --llm-*` flags and from a run config's [llm] section.
#pragma once

#include "channels/curve_config.hpp"
#include "skills/expert.hpp"

#include <optional>
#include <string>
#include <vector>

namespace kiln {

// How an LLM is asked and what its answer is taken as. kiln: the task as ops, the answer one
// fenced block of C++ / CUDA C++ for Kiln's ABI (the backend's first source kind). kernelbench:
// KernelBench's own style, the problem's Model source and "write ModelNew", the answer's last
// ```python block a ModelNew module (submission kind kernelbench), so a model trained on
// KernelBench prompts meets what it was trained on.
enum class llm_answer_format { kiln, kernelbench };
inline const char* to_string(llm_answer_format f) {
  return f == llm_answer_format::kernelbench ? "kernelbench" : "kiln";
}
inline std::optional<llm_answer_format> llm_answer_format_from(const std::string& name) {
  for (auto f : {llm_answer_format::kiln, llm_answer_format::kernelbench})
    if (name == to_string(f)) return f;
  return std::nullopt;
}

struct llm_policy_config {
  std::string api = "chat";           // chat | vllm | sglang (the wire formats: llm/token_api.hpp)
  // Base URLs; requests balance across them. "{session}" in one is replaced by the episode's id
  // (its trajectory's `id`), so a trainer's gateway can keep each episode's tokens.
  std::vector<std::string> endpoints;
  std::string model;
  std::string bearer_token; // sent as Authorization: Bearer when non-empty
  int max_tokens = 8192;    // per answer
  double temperature = 0;
  int max_in_flight = 256; // per endpoint
  double timeout_s = 300;  // per HTTP attempt
  int max_attempts = 4;
  double backoff_s = 0.5;
  backend_kind backend = backend_kind::cpu; // what the submissions are written for
  llm_answer_format answer_format = llm_answer_format::kiln;
  // Where an external trainer announces the weight version its servers run (ZeroMQ PUB, the
  // weights channel's frame with no weights: learner/weights.hpp); empty: version 0 throughout.
  std::string version_endpoint;
  curve_config curve; // the version SUB is a CURVE client when it has keys ([curve])
};

} // namespace kiln
