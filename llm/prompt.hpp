// What an LLM policy is told: the system message (skills/LLM_SKILL.md and the backend's ABI
// header, embedded at build time) and the task as a program of torch-style ops with its shapes,
// initializations, tolerance and baseline times.
//   task --llm_task_prompt--> first user message; outcome text (rollout) --> later user messages
#pragma once

#include "data/task_spec.hpp"
#include "llm/llm_config.hpp"
#include "skills/expert.hpp"

#include <optional>
#include <string>

namespace kiln {

std::string llm_system_prompt(backend_kind backend, llm_answer_format format);
std::string llm_task_prompt(const task& t, backend_kind backend, llm_answer_format format,
                            std::optional<double> eager_ms, std::optional<double> compile_ms);

} // namespace kiln
