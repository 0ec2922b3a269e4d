#include "llm/chat_api.hpp"

#include "data/utf8.hpp"

#include <nlohmann/json.hpp>

namespace kiln {

using json = nlohmann::json;

std::string message_json(const chat_message& m) {
  // Lossy, not strict: content quotes outcomes, which quote whatever bytes a kernel held.
  return json{{"role", m.role}, {"content", m.content}}.dump(-1, ' ', false,
                                                             json::error_handler_t::replace);
}

std::string messages_array_json(const std::vector<chat_message>& messages) {
  std::string out = "[";
  for (size_t i = 0; i < messages.size(); ++i) out += (i ? "," : "") + message_json(messages[i]);
  return out + "]";
}

std::string chat_request_json(const chat_options& o, const std::string& messages_array) {
  // Spliced, not re-serialized: the array is the bulk of the body (the system prompt alone is
  // several KiB) and is already valid JSON.
  std::string out = R"({"model":)" + json(o.model).dump() + R"(,"messages":)";
  out += messages_array;
  out += R"(,"max_tokens":)" + std::to_string(o.max_tokens) + R"(,"temperature":)" +
         json(o.temperature).dump() + R"(,"n":1)";
  if (o.seed) out += R"(,"seed":)" + std::to_string(o.seed);
  return out + "}";
}

std::string chat_request_json(const chat_options& o, const std::vector<chat_message>& messages) {
  return chat_request_json(o, messages_array_json(messages));
}

expected<chat_answer> parse_chat_answer(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded())
    return error{"answer: not valid JSON (" + std::to_string(body.size()) + " bytes)"};
  if (!j.is_object()) return error{"answer: not a JSON object"};
  if (j.contains("error")) {
    const auto& e = j["error"];
    std::string m = e.is_object() && e.contains("message") && e["message"].is_string()
                        ? e["message"].get<std::string>()
                        : e.dump();
    return error{"answer: the server reports an error: " + utf8_head(m, 300)};
  }
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty())
    return error{"answer: no choices[0]"};
  const auto& c = j["choices"][0];
  if (!c.is_object() || !c.contains("message") || !c["message"].is_object())
    return error{"answer: no choices[0].message"};
  const auto& msg = c["message"];
  if (!msg.contains("content") || !msg["content"].is_string())
    return error{"answer: choices[0].message.content is missing or not a string"};
  chat_answer a;
  a.content = msg["content"].get<std::string>();
  if (c.contains("finish_reason") && c["finish_reason"].is_string())
    a.finish_reason = c["finish_reason"].get<std::string>();
  if (j.contains("usage") && j["usage"].is_object()) {
    const auto& u = j["usage"];
    if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer())
      a.prompt_tokens = u["prompt_tokens"].get<int64_t>();
    if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer())
      a.completion_tokens = u["completion_tokens"].get<int64_t>();
  }
  return a;
}

expected<std::string> last_code_block(const std::string& text, const char* language) {
  // Fences open at the start of a line; the block runs to the next line that is a fence.
  std::string block;
  bool found = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t open = text.find("```", pos);
    if (open == std::string::npos) break;
    if (open > 0 && text[open - 1] != '\n') {
      pos = open + 3;
      continue;
    }
    size_t body = text.find('\n', open);
    if (body == std::string::npos) break;
    std::string info = text.substr(open + 3, body - open - 3);
    while (!info.empty() && (info.back() == '\r' || info.back() == ' ')) info.pop_back();
    bool counts = !language || info == language;
    ++body;
    size_t close = body;
    for (;;) {
      close = text.find("```", close);
      if (close == std::string::npos || close == 0 || text[close - 1] == '\n') break;
      close += 3;
    }
    if (close == std::string::npos) { // unterminated: the rest (an answer cut at max_tokens)
      if (counts) block = text.substr(body), found = true;
      break;
    }
    if (counts) block = text.substr(body, close - body), found = true;
    pos = close + 3;
  }
  if (!found)
    return error{language ? std::string("the answer has no ```") + language + " code block"
                          : std::string("the answer has no fenced code block (```cpp ... ```)")};
  return block;
}

} // namespace kiln
