// The token-level wire formats: vLLM's OpenAI server (`/tokenize`, `/v1/completions` with a
// prompt of token ids and `return_token_ids`) and SGLang's native `/generate` (`input_ids`,
// `return_logprob`). A multi-turn context is extended token by token: the model's own ids are kept
// as generated, and only the new messages are tokenized, as the chat template renders them after
// the answer (context_extension). Every field read is checked; an error names the field.
//   messages --tokenize--> ids --completion / generate--> answer ids + logprobs + text
#pragma once

#include "data/expected.hpp"
#include "llm/chat_api.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

// POST /tokenize (vLLM, and SGLang's OpenAI-compatible server): the chat template applied to
// `messages`, with the assistant's generation prompt at the end when asked.
std::string tokenize_request_json(const std::string& model, const std::vector<chat_message>& m,
                                  bool add_generation_prompt);
// With the messages already serialized (chat_api.hpp's messages_array_json).
std::string tokenize_request_json(const std::string& model, const std::string& messages_array,
                                  bool add_generation_prompt);
// The answer's "tokens".
expected<std::vector<int32_t>> parse_tokenize_answer(const std::string& body);

struct token_answer {
  std::string text;
  std::vector<int32_t> ids;    // the generated tokens, stop token included when it was sampled
  std::vector<float> logprobs; // one per id: the sampling policy's log-probability
  std::string finish_reason;   // "stop", "length", ...
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

// vLLM: POST /v1/completions with the prompt as token ids; logprobs of the sampled tokens and the
// ids themselves (return_token_ids) come back.
std::string completion_request_json(const chat_options& o, const std::vector<int32_t>& prompt);
expected<token_answer> parse_completion_answer(const std::string& body);

// SGLang: POST /generate with input_ids; return_logprob gives meta_info.output_token_logprobs as
// [logprob, token_id, text] triples.
std::string generate_request_json(const chat_options& o, const std::vector<int32_t>& prompt);
expected<token_answer> parse_generate_answer(const std::string& body);

// The tokens that follow a context ending in the model's answer: the template's closing of that
// answer, then the next messages and the generation prompt. `through_answer` is the template's
// rendering of the conversation up to and including the answer (no generation prompt), `with_next`
// the same plus the next messages (with it). The template must be prefix-stable (with_next starts
// with through_answer). The closing is what through_answer holds after the context's end: the
// last place among its final `max_closing` + 1 tokens where the context's last 4 tokens occur
// (the answer's stop token, e.g. <|im_end|>, then "\n"). A single matching token is enough only
// when the answer `stopped` on a stop token: the last token of an answer cut at max_tokens may
// be a "\n" that the closing holds too. No match is an error: the end of the answer is unknown.
expected<std::vector<int32_t>> context_extension(const std::vector<int32_t>& context,
                                                 const std::vector<int32_t>& through_answer,
                                                 const std::vector<int32_t>& with_next,
                                                 bool stopped, size_t max_closing = 8);

} // namespace kiln
