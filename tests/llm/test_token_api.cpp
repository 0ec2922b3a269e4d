// The token-level wire formats (vLLM completions and tokenize, SGLang generate) against answers of
// the documented shape, and the context extension between turns.
#include "llm/token_api.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

using namespace kiln;
using json = nlohmann::json;

TEST_CASE("token api: a vLLM completion gives the answer's ids and log-probs") {
  chat_options o;
  o.model = "m";
  o.max_tokens = 64;
  auto req = json::parse(completion_request_json(o, {5, 6, 7}));
  CHECK(req["prompt"] == json::array({5, 6, 7}));
  CHECK(req["return_token_ids"] == true);
  CHECK(req["logprobs"] == 0);
  auto a = parse_completion_answer(R"({"choices":[{"text":"hi","token_ids":[10,11,2],
      "logprobs":{"token_logprobs":[-0.5,-0.25,0.0],"tokens":["h","i","</s>"]},
      "finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":3}})");
  REQUIRE_MESSAGE(a.has_value(), (a ? "" : a.message()));
  CHECK(a->text == "hi");
  CHECK(a->ids == std::vector<int32_t>{10, 11, 2});
  CHECK(a->logprobs == std::vector<float>{-0.5f, -0.25f, 0.f});
  CHECK(a->finish_reason == "stop");
  CHECK(a->prompt_tokens == 3);
}

TEST_CASE("token api: malformed vLLM answers name the field") {
  auto err = [](const char* body) {
    auto a = parse_completion_answer(body);
    REQUIRE_FALSE(a.has_value());
    return a.message();
  };
  CHECK(err(R"({"choices":[{"text":"hi"}]})").find("token_ids is missing") != std::string::npos);
  CHECK(err(R"({"choices":[{"text":"hi","token_ids":[1,2],"logprobs":{"token_logprobs":[-1]}}]})")
            .find("1 entries for 2 token ids") != std::string::npos);
  CHECK(
      err(R"({"choices":[{"text":"hi","token_ids":[1,-2],"logprobs":{"token_logprobs":[-1,-1]}}]})")
          .find("token_ids[1]") != std::string::npos);
  CHECK(err(R"({"choices":[{"text":"hi","token_ids":[1],"logprobs":{"token_logprobs":[0.7]}}]})")
            .find("not a log-probability") != std::string::npos);
  CHECK(err(R"({"error":{"message":"context too long"}})").find("context too long") !=
        std::string::npos);
  CHECK(err("{oops").find("not valid JSON") != std::string::npos);
}

TEST_CASE("token api: an SGLang generate answer, whose output_ids must agree with the logprobs") {
  chat_options o;
  o.max_tokens = 32;
  auto req = json::parse(generate_request_json(o, {1, 2}));
  CHECK(req["input_ids"] == json::array({1, 2}));
  CHECK(req["sampling_params"]["max_new_tokens"] == 32);
  CHECK(req["return_logprob"] == true);
  auto a = parse_generate_answer(R"({"text":"ok","output_ids":[40,41],"meta_info":{
      "prompt_tokens":2,"completion_tokens":2,"finish_reason":{"type":"length","length":2},
      "output_token_logprobs":[[-0.1,40,null],[-0.2,41,null]]}})");
  REQUIRE_MESSAGE(a.has_value(), (a ? "" : a.message()));
  CHECK(a->ids == std::vector<int32_t>{40, 41});
  CHECK(a->logprobs[1] == doctest::Approx(-0.2));
  CHECK(a->finish_reason == "length");
  auto bad = parse_generate_answer(R"({"text":"ok","output_ids":[40,42],"meta_info":{
      "output_token_logprobs":[[-0.1,40,null],[-0.2,41,null]]}})");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.message().find("disagree") != std::string::npos);
  auto none = parse_generate_answer(R"({"text":"ok","meta_info":{}})");
  REQUIRE_FALSE(none.has_value());
  CHECK(none.message().find("output_token_logprobs") != std::string::npos);
}

TEST_CASE("token api: tokenize sends the messages and reads the tokens") {
  auto req = json::parse(tokenize_request_json("m", {{"user", "hi"}}, true));
  CHECK(req["messages"][0]["content"] == "hi");
  CHECK(req["add_generation_prompt"] == true);
  auto ids = parse_tokenize_answer(R"({"tokens":[1,2,3],"count":3})");
  REQUIRE(ids.has_value());
  CHECK(*ids == std::vector<int32_t>{1, 2, 3});
  CHECK_FALSE(parse_tokenize_answer(R"({"count":3})").has_value());
}

TEST_CASE("token api: the context extension keeps the answer's ids and adds the closing") {
  // ChatML-like: 1 = <|im_start|>, 2 = <|im_end|>, 9 = "\n". The model's answer 50 51 then its
  // stop token 2; the template renders the answer as 50 51 2 9 and the next user turn after it.
  std::vector<int32_t> context = {1, 30, 2, 9, 1, 40, 50, 51, 2};
  std::vector<int32_t> through = {1, 30, 2, 9, 1, 40, 50, 51, 2, 9};
  std::vector<int32_t> next = through;
  for (int32_t t : {1, 60, 61, 2, 9, 1, 40}) next.push_back(t);
  auto ext = context_extension(context, through, next, true);
  REQUIRE_MESSAGE(ext.has_value(), (ext ? "" : ext.message()));
  CHECK(*ext == std::vector<int32_t>{9, 1, 60, 61, 2, 9, 1, 40});
  // An answer cut at max_tokens (no stop token): the template's closing follows its last token.
  std::vector<int32_t> cut = {1, 30, 2, 9, 1, 40, 50, 51};
  ext = context_extension(cut, through, next, false);
  REQUIRE(ext.has_value());
  CHECK(*ext == std::vector<int32_t>{2, 9, 1, 60, 61, 2, 9, 1, 40});
  // A template that renders an earlier turn differently once a later one exists.
  auto unstable = next;
  unstable[2] = 77;
  auto bad = context_extension(context, through, unstable, true);
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.message().find("not prefix-stable") != std::string::npos);
}

TEST_CASE("token api: an answer cut at max_tokens on a newline still gets the template's closing") {
  // The answer 50 9 stops at max_tokens on "\n" (9); the template closes it with 2 9. Matching the
  // last token alone would find the closing's 9 and drop the <|im_end|>.
  std::vector<int32_t> context = {1, 30, 2, 9, 1, 40, 50, 9};
  std::vector<int32_t> through = {1, 30, 2, 9, 1, 40, 50, 9, 2, 9};
  std::vector<int32_t> next = through;
  for (int32_t t : {1, 60, 2, 9, 1, 40}) next.push_back(t);
  auto ext = context_extension(context, through, next, false);
  REQUIRE_MESSAGE(ext.has_value(), (ext ? "" : ext.message()));
  CHECK(*ext == std::vector<int32_t>{2, 9, 1, 60, 2, 9, 1, 40});
  // The template re-tokenized the answer's end differently (51 became 52 53): a stop token still
  // locates it, a cut answer does not, and that is an error rather than a context without its
  // closing.
  std::vector<int32_t> ctx2 = {1, 30, 2, 9, 1, 40, 51, 2};
  std::vector<int32_t> thr2 = {1, 30, 2, 9, 1, 40, 52, 53, 2, 9};
  std::vector<int32_t> next2 = thr2;
  next2.push_back(1);
  auto stopped = context_extension(ctx2, thr2, next2, true);
  REQUIRE(stopped.has_value());
  CHECK(*stopped == std::vector<int32_t>{9, 1});
  std::vector<int32_t> cut2 = {1, 30, 2, 9, 1, 40, 51};
  auto lost = context_extension(cut2, thr2, next2, false);
  REQUIRE_FALSE(lost.has_value());
  CHECK(lost.message().find("closing of the answer is unknown") != std::string::npos);
}
