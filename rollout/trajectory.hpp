// Trajectory stream v1 (docs/DESIGN.md): one finished episode as the learner consumes it, and its
// msgpack wire form (one map per ZeroMQ message).
//   episode actor --trajectory--> encode --PUSH==>PULL--> decode_trajectory (strict) --> learner
#pragma once

#include "data/expected.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

enum class episode_status { completed, truncated, aborted, failed };
const char* to_string(episode_status s);

// One turn: the model's program occupies tokens [start, end) of the context (observation tokens
// follow it). speedup_* are kernel-time ratios (baseline / kernel), 0 when the turn failed;
// speedup_compile is absent (msgpack nil) without a torch.compile baseline.
struct turn_record {
  int32_t start = 0, end = 0;
  std::string outcome; // outcome_kind word (jobs/job.hpp), e.g. "correct", "compile_error"
  double reward = 0;
  double speedup_eager = 0;
  std::optional<double> speedup_compile;
  double compile_ms = 0, run_ms = 0;
};

struct episode_timings {
  double queue_ms = 0, policy_ms = 0, compile_ms = 0, device_ms = 0, total_ms = 0;
};

// One message of an LLM episode's conversation, as text.
struct message_record {
  std::string role; // "system" | "user" | "assistant"
  std::string content;
};

struct trajectory {
  std::string id, task, group;
  episode_status status = episode_status::completed;
  int64_t policy_version = 0;     // version at the episode's first token
  std::vector<int32_t> tokens;    // whole multi-turn context (rollout/token_space.hpp ids)
  std::vector<uint8_t> loss_mask; // 1 on model-generated tokens only
  std::vector<float> logprobs;    // behaviour log-probs, 0 where loss_mask is 0
  std::vector<int32_t> versions;  // policy version per token, -1 where loss_mask is 0
  std::vector<turn_record> turns;
  double reward = 0;
  episode_timings timings;
  // LLM episodes (text policies) only, each key written only when set: the conversation as text,
  // the model's name and the endpoint kind (chat | vllm | sglang). Their tokens are then in the
  // model's own vocabulary (prompt and observations with loss_mask 0), or empty when the endpoint
  // returned no token ids (chat).
  std::vector<message_record> messages;
  std::string model, api;
  std::string answer_format; // "kiln" | "kernelbench": how the LLM was asked (llm/llm_config.hpp)
};

// What a decoder accepts; anything beyond is rejected before it is allocated.
struct trajectory_limits {
  size_t max_bytes = size_t{16} << 20;
  size_t max_tokens = size_t{1} << 20;
  size_t max_turns = 1024;
  size_t max_string = 4096;          // names, outcomes, roles
  size_t max_text = size_t{1} << 20; // one message's content
  int32_t vocab_size = 0;            // > 0: every token id must be in [0, vocab_size)
};

std::string encode(const trajectory& t);
// Strict: wrong types, missing keys, v != 1, unequal array lengths, loss_mask values other than
// 0/1, non-finite or positive log-probs on model tokens, non-zero log-probs / versions != -1 off
// them, turn ranges outside the context, trailing bytes: each an error naming the field.
// Unknown keys are ignored (forward compatible).
expected<trajectory> decode_trajectory(const char* data, size_t size,
                                       const trajectory_limits& limits = {});

} // namespace kiln
