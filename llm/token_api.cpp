#include "llm/token_api.hpp"

#include "data/utf8.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

namespace kiln {

using json = nlohmann::json;

namespace {

json ids_json(const std::vector<int32_t>& ids) {
  json a = json::array();
  for (auto t : ids) a.push_back(t);
  return a;
}

// The body as a JSON object, or an error: not JSON, not an object, or the server's own error.
expected<json> answer_object(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded())
    return error{"answer: not valid JSON (" + std::to_string(body.size()) + " bytes)"};
  if (!j.is_object()) return error{"answer: not a JSON object"};
  if (j.contains("error") && !j["error"].is_null()) {
    const auto& e = j["error"];
    std::string m = e.is_object() && e.contains("message") && e["message"].is_string()
                        ? e["message"].get<std::string>()
                        : e.dump();
    return error{"answer: the server reports an error: " + utf8_head(m, 300)};
  }
  return j;
}

// A token id array (within int32, non-negative), naming `field` in the error.
expected<std::vector<int32_t>> id_array(const json& a, const std::string& field) {
  if (!a.is_array()) return error{"answer: " + field + " is not an array"};
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const auto& v = a[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
        v.get<int64_t>() > std::numeric_limits<int32_t>::max())
      return error{"answer: " + field + "[" + std::to_string(i) + "] is not a token id"};
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

expected<float> logprob_value(const json& v, const std::string& field) {
  if (!v.is_number()) return error{"answer: " + field + " is not a number"};
  double d = v.get<double>();
  if (!std::isfinite(d) || d > 1e-6)
    return error{"answer: " + field + " = " + std::to_string(d) + " is not a log-probability"};
  return static_cast<float>(std::min(d, 0.0));
}

int64_t usage_field(const json& u, const char* k) {
  return u.is_object() && u.contains(k) && u[k].is_number_integer() ? u[k].get<int64_t>() : 0;
}

} // namespace

std::string tokenize_request_json(const std::string& model, const std::string& messages_array,
                                  bool add_generation_prompt) {
  // add_special_tokens false: the template writes its own BOS where it wants one.
  return R"({"model":)" + json(model).dump() + R"(,"messages":)" + messages_array +
         R"(,"add_generation_prompt":)" + (add_generation_prompt ? "true" : "false") +
         R"(,"add_special_tokens":false})";
}

std::string tokenize_request_json(const std::string& model, const std::vector<chat_message>& m,
                                  bool add_generation_prompt) {
  return tokenize_request_json(model, messages_array_json(m), add_generation_prompt);
}

expected<std::vector<int32_t>> parse_tokenize_answer(const std::string& body) {
  auto j = answer_object(body);
  if (!j) return j.err();
  if (!j->contains("tokens")) return error{"answer: no tokens"};
  return id_array((*j)["tokens"], "tokens");
}

std::string completion_request_json(const chat_options& o, const std::vector<int32_t>& prompt) {
  json j{{"model", o.model},
         {"prompt", ids_json(prompt)},
         {"max_tokens", o.max_tokens},
         {"temperature", o.temperature},
         {"n", 1},
         {"logprobs", 0}, // the sampled token's log-probability, no alternatives
         {"return_token_ids", true},
         {"skip_special_tokens", false}};
  if (o.seed) j["seed"] = o.seed;
  return j.dump();
}

expected<token_answer> parse_completion_answer(const std::string& body) {
  auto j = answer_object(body);
  if (!j) return j.err();
  if (!j->contains("choices") || !(*j)["choices"].is_array() || (*j)["choices"].empty())
    return error{"answer: no choices[0]"};
  const auto& c = (*j)["choices"][0];
  if (!c.is_object()) return error{"answer: choices[0] is not an object"};
  token_answer a;
  if (!c.contains("text") || !c["text"].is_string())
    return error{"answer: choices[0].text is missing or not a string"};
  a.text = c["text"].get<std::string>();
  if (!c.contains("token_ids") || c["token_ids"].is_null())
    return error{"answer: choices[0].token_ids is missing (a vLLM server older than "
                 "return_token_ids, or not vLLM: use api = \"chat\")"};
  auto ids = id_array(c["token_ids"], "choices[0].token_ids");
  if (!ids) return ids.err();
  a.ids = std::move(*ids);
  if (!c.contains("logprobs") || !c["logprobs"].is_object() ||
      !c["logprobs"].contains("token_logprobs") || !c["logprobs"]["token_logprobs"].is_array())
    return error{"answer: choices[0].logprobs.token_logprobs is missing"};
  const auto& lp = c["logprobs"]["token_logprobs"];
  if (lp.size() != a.ids.size())
    return error{"answer: choices[0].logprobs.token_logprobs has " + std::to_string(lp.size()) +
                 " entries for " + std::to_string(a.ids.size()) + " token ids"};
  for (size_t i = 0; i < lp.size(); ++i) {
    auto v = logprob_value(lp[i], "choices[0].logprobs.token_logprobs[" + std::to_string(i) + "]");
    if (!v) return v.err();
    a.logprobs.push_back(*v);
  }
  if (c.contains("finish_reason") && c["finish_reason"].is_string())
    a.finish_reason = c["finish_reason"].get<std::string>();
  if (j->contains("usage")) {
    a.prompt_tokens = usage_field((*j)["usage"], "prompt_tokens");
    a.completion_tokens = usage_field((*j)["usage"], "completion_tokens");
  }
  return a;
}

std::string generate_request_json(const chat_options& o, const std::vector<int32_t>& prompt) {
  json sp{{"max_new_tokens", o.max_tokens},
          {"temperature", o.temperature},
          {"skip_special_tokens", false}};
  if (o.seed) sp["sampling_seed"] = o.seed;
  json j{{"input_ids", ids_json(prompt)}, {"sampling_params", sp}, {"return_logprob", true}};
  return j.dump();
}

expected<token_answer> parse_generate_answer(const std::string& body) {
  auto j = answer_object(body);
  if (!j) return j.err();
  token_answer a;
  if (!j->contains("text") || !(*j)["text"].is_string())
    return error{"answer: text is missing or not a string"};
  a.text = (*j)["text"].get<std::string>();
  if (!j->contains("meta_info") || !(*j)["meta_info"].is_object())
    return error{"answer: meta_info is missing"};
  const auto& mi = (*j)["meta_info"];
  if (!mi.contains("output_token_logprobs") || !mi["output_token_logprobs"].is_array())
    return error{"answer: meta_info.output_token_logprobs is missing (was return_logprob "
                 "honoured?)"};
  const auto& otl = mi["output_token_logprobs"];
  for (size_t i = 0; i < otl.size(); ++i) {
    std::string f = "meta_info.output_token_logprobs[" + std::to_string(i) + "]";
    const auto& e = otl[i];
    if (!e.is_array() || e.size() < 2) return error{"answer: " + f + " is not [logprob, id, ...]"};
    auto v = logprob_value(e[0], f + "[0]");
    if (!v) return v.err();
    auto id = id_array(json::array({e[1]}), f + "[1]");
    if (!id) return error{"answer: " + f + "[1] is not a token id"};
    a.logprobs.push_back(*v);
    a.ids.push_back(id->front());
  }
  if (j->contains("output_ids")) { // newer servers send the ids too: they must agree
    auto ids = id_array((*j)["output_ids"], "output_ids");
    if (!ids) return ids.err();
    if (*ids != a.ids)
      return error{"answer: output_ids (" + std::to_string(ids->size()) +
                   ") disagree with meta_info.output_token_logprobs (" +
                   std::to_string(a.ids.size()) + ")"};
  }
  if (mi.contains("finish_reason")) {
    const auto& fr = mi["finish_reason"];
    if (fr.is_object() && fr.contains("type") && fr["type"].is_string())
      a.finish_reason = fr["type"].get<std::string>();
    else if (fr.is_string())
      a.finish_reason = fr.get<std::string>();
  }
  a.prompt_tokens = usage_field(mi, "prompt_tokens");
  a.completion_tokens = usage_field(mi, "completion_tokens");
  return a;
}

expected<std::vector<int32_t>> context_extension(const std::vector<int32_t>& context,
                                                 const std::vector<int32_t>& through_answer,
                                                 const std::vector<int32_t>& with_next,
                                                 bool stopped, size_t max_closing) {
  if (with_next.size() < through_answer.size() ||
      !std::equal(through_answer.begin(), through_answer.end(), with_next.begin()))
    return error{"the chat template is not prefix-stable: the conversation with the next message "
                 "does not start with the conversation through the answer (" +
                 std::to_string(through_answer.size()) +
                 " tokens), so the context cannot be "
                 "extended without re-tokenizing the model's answer"};
  // The end of the answer in through_answer: the largest e with the context's last k tokens
  // right before it.
  auto answer_end = [&](size_t k) -> std::optional<size_t> {
    size_t n = through_answer.size();
    size_t lo = n > max_closing ? n - max_closing : 0;
    for (size_t e = n; e >= std::max(lo, k) && e > 0; --e)
      if (std::equal(context.end() - static_cast<std::ptrdiff_t>(k), context.end(),
                     through_answer.begin() + static_cast<std::ptrdiff_t>(e - k)))
        return e;
    return std::nullopt;
  };
  size_t k = std::min<size_t>(4, context.size());
  auto end = k ? answer_end(k) : std::nullopt;
  if (!end && stopped && k > 1) end = answer_end(1);
  if (!end)
    return error{"the end of the model's answer (its last " + std::to_string(k) +
                 " tokens) is not among the last " + std::to_string(max_closing) +
                 " tokens of the template's rendering of it, so the template's closing of the "
                 "answer is unknown"};
  std::vector<int32_t> out(through_answer.begin() + static_cast<std::ptrdiff_t>(*end),
                           through_answer.end());
  out.insert(out.end(), with_next.begin() + static_cast<std::ptrdiff_t>(through_answer.size()),
             with_next.end());
  return out;
}

} // namespace kiln
