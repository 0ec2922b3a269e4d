// The OpenAI chat-completions wire format (`/v1/chat/completions`, which vLLM, SGLang, llama.cpp's
// server and hosted APIs all serve): the request body Kiln sends, the fields it reads back, and
// the code block an answer must carry. Every field read is checked; an error names the field.
//   messages --chat_request_json--> POST body; answer body --parse_chat_answer--> content
#pragma once

#include "data/expected.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

struct chat_message {
  std::string role; // "system" | "user" | "assistant"
  std::string content;
};

struct chat_options {
  std::string model;
  int max_tokens = 8192;
  double temperature = 0; // 0: greedy
  uint64_t seed = 0;      // 0: not sent
};

std::string chat_request_json(const chat_options& o, const std::vector<chat_message>& messages);
// The same with the messages already serialized as a JSON array: a conversation serializes each
// message once when it is added (message_json), not its whole history on every turn.
std::string chat_request_json(const chat_options& o, const std::string& messages_array);
std::string message_json(const chat_message& m); // {"role": ..., "content": ...}
std::string messages_array_json(const std::vector<chat_message>& messages);

struct chat_answer {
  std::string content;
  std::string finish_reason;                        // "stop", "length", ...
  int64_t prompt_tokens = 0, completion_tokens = 0; // 0 where the server sends no usage
};

// choices[0].message.content of a 2xx answer; an error naming what is missing or malformed, or the
// server's own error message when it sent one.
expected<chat_answer> parse_chat_answer(const std::string& body);

// The last fenced code block of an answer (```lang ... ```), without its fences; an error when
// the answer has none. With `language` ("python"), only blocks whose fence names it count.
expected<std::string> last_code_block(const std::string& text, const char* language = nullptr);

} // namespace kiln
