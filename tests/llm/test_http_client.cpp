// The HTTP client and the chat wire format against the scripted server (tests/llm/mock_openai.py,
// started here on a free loopback port): retries, Retry-After, timeouts, dropped connections, a
// dead endpoint beside a live one, and answers that are not what they should be.
#include "llm/chat_api.hpp"
#include "llm/http_client.hpp"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <doctest/doctest.h>
#include <future>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

using namespace kiln;

namespace {

// The mock server as a child process; its port from its first line.
struct mock_server {
  pid_t pid = -1;
  int port = 0;
  mock_server() {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      dup2(fds[1], 1);
      close(fds[0]);
      execl(KILN_PYTHON, KILN_PYTHON, KILN_SOURCE_DIR "/tests/llm/mock_openai.py", nullptr);
      _exit(127);
    }
    close(fds[1]);
    FILE* f = fdopen(fds[0], "r");
    char line[64] = {};
    REQUIRE(std::fgets(line, sizeof line, f) != nullptr);
    REQUIRE(std::sscanf(line, "port %d", &port) == 1);
    fclose(f);
  }
  ~mock_server() {
    kill(pid, SIGTERM);
    waitpid(pid, nullptr, 0);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
};

std::string ask_body(const std::string& task) {
  chat_options o;
  o.model = "mock";
  return chat_request_json(o,
                           {{"system", "rules"}, {"user", "Task `" + task + "`\n- x: [4, 8]\n"}});
}

http_response ask(http_client& c, const std::string& task) {
  std::promise<http_response> p;
  auto f = p.get_future();
  c.post("/v1/chat/completions", ask_body(task),
         [&](http_response r) { p.set_value(std::move(r)); });
  REQUIRE(f.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  return f.get();
}

http_client_options opts(const mock_server& m) {
  http_client_options o;
  o.endpoints = {m.url()};
  o.timeout_s = 2;
  o.max_attempts = 3;
  o.backoff_s = 0.05;
  return o;
}

} // namespace

TEST_CASE("chat answers: content, usage, and every malformed shape named") {
  auto a = parse_chat_answer(
      R"({"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}})");
  REQUIRE(a);
  CHECK(a->content == "hi");
  CHECK(a->finish_reason == "stop");
  CHECK(a->prompt_tokens == 3);
  CHECK(a->completion_tokens == 1);
  CHECK(parse_chat_answer("{not json").message().find("not valid JSON") != std::string::npos);
  CHECK(parse_chat_answer("[]").message().find("not a JSON object") != std::string::npos);
  CHECK(parse_chat_answer(R"({"choices":[]})").message().find("choices[0]") != std::string::npos);
  CHECK(parse_chat_answer(R"({"choices":[{"message":{"content":7}}]})").message().find("content") !=
        std::string::npos);
  CHECK(parse_chat_answer(R"({"error":{"message":"model not found"}})")
            .message()
            .find("model not found") != std::string::npos);
}

TEST_CASE("the last fenced code block is the submission") {
  auto one = last_code_block("text\n```cpp\nint a;\n```\nmore");
  REQUIRE(one);
  CHECK(*one == "int a;\n");
  auto two = last_code_block("```\nfirst\n```\nthen\n```c++\nsecond\n```\n");
  REQUIRE(two);
  CHECK(*two == "second\n");
  CHECK(!last_code_block("no code here, only ``` inline ticks"));
  // KernelBench's answers: the last ```python block, whatever other blocks follow it.
  auto py = last_code_block("```python\nold\n```\n```python\nclass ModelNew: pass\n```\n"
                            "```cpp\n// the kernel again, for reading\n```\n",
                            "python");
  REQUIRE(py);
  CHECK(*py == "class ModelNew: pass\n");
  auto none = last_code_block("```cpp\nint a;\n```\n", "python");
  REQUIRE(!none);
  CHECK(none.message() == "the answer has no ```python code block");
  auto cut = last_code_block("```cpp\nint a = 1;\nint b"); // cut at max_tokens
  REQUIRE(cut);
  CHECK(*cut == "int a = 1;\nint b");
}

TEST_CASE("http client: answers, retries, Retry-After, stalls, drops, dead endpoints") {
  mock_server m;
  http_client c(opts(m));
  auto ok = ask(c, "llm_correct");
  CHECK(ok.ok());
  CHECK(ok.attempts == 1);
  CHECK(parse_chat_answer(ok.body).has_value());

  auto e500 = ask(c, "llm_flaky500");
  CHECK_MESSAGE(e500.ok(), e500.error);
  CHECK(e500.attempts == 2);

  auto t0 = std::chrono::steady_clock::now();
  auto e429 = ask(c, "llm_429");
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK_MESSAGE(e429.ok(), e429.error);
  CHECK(e429.attempts == 2);
  CHECK(waited >= 0.9); // the server's Retry-After: 1, not the 0.05 s backoff

  // A connection closed unanswered: libcurl itself retries a request on a reused connection
  // that died, else the client's retry does.
  auto drop = ask(c, "llm_drop");
  CHECK_MESSAGE(drop.ok(), drop.error);
  CHECK(drop.attempts <= 2);

  auto stall = ask(c, "llm_stall"); // 6 s stall, 2 s timeout: the second attempt answers
  CHECK_MESSAGE(stall.ok(), stall.error);
  CHECK(stall.attempts == 2);

  auto down = ask(c, "llm_down"); // 503 on every attempt: a clear failure, not a hang
  CHECK(!down.ok());
  CHECK(down.status == 503);
  CHECK(down.attempts == 3);
  CHECK(down.error.find("HTTP 503 (after 3 attempts)") != std::string::npos);

  auto malformed = ask(c, "llm_malformed"); // HTTP is fine; the body is not an answer
  CHECK(malformed.ok());
  CHECK(!parse_chat_answer(malformed.body));
  auto s = c.stats();
  CHECK(s.retries >= 4);
  CHECK(s.failed == 1);
  CHECK(s.in_flight == 0);
}

TEST_CASE("http client: a dead endpoint beside a live one loses no request") {
  mock_server m;
  auto o = opts(m);
  o.endpoints = {"http://127.0.0.1:9", m.url()}; // port 9: nothing listens (connection refused)
  o.max_attempts = 4;
  http_client c(o);
  std::vector<std::future<http_response>> answers;
  std::vector<std::promise<http_response>> promises(40);
  for (auto& p : promises) {
    answers.push_back(p.get_future());
    c.post("/v1/chat/completions", ask_body("llm_correct"),
           [&p](http_response r) { p.set_value(std::move(r)); });
  }
  int ok = 0, retried = 0;
  for (auto& f : answers) {
    REQUIRE(f.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
    auto r = f.get();
    ok += r.ok();
    retried += r.attempts > 1;
  }
  CHECK(ok == 40);
  CHECK(retried > 0); // some went to the dead endpoint first, then to the live one

  http_client_options none;
  none.endpoints = {"http://127.0.0.1:9"};
  none.max_attempts = 2;
  none.backoff_s = 0.01;
  http_client dead(none);
  auto r = ask(dead, "llm_correct");
  CHECK(!r.ok());
  CHECK(r.status == 0);
  CHECK(r.attempts == 2);
  CHECK(!r.error.empty());
}

TEST_CASE("http client: requests over many multi handles, and a cap far below the offered load") {
  mock_server m;
  for (int cap : {4096, 3}) { // 16 shards of the client's loop; one shard and a long queue
    CAPTURE(cap);
    auto o = opts(m);
    o.max_in_flight = cap;
    o.timeout_s = 20; // 300 at once against one mock on a loaded 2-core CI: not a latency test
    http_client c(o);
    const int n = cap > 100 ? 300 : 30;
    std::vector<std::promise<http_response>> promises(static_cast<size_t>(n));
    std::vector<std::future<http_response>> answers;
    for (auto& p : promises) {
      answers.push_back(p.get_future());
      c.post("/v1/chat/completions", ask_body("llm_correct"),
             [&p](http_response r) { p.set_value(std::move(r)); });
    }
    int ok = 0;
    for (auto& f : answers) {
      REQUIRE(f.wait_for(std::chrono::seconds(120)) == std::future_status::ready);
      auto r = f.get();
      ok += r.ok() && r.body.find("kiln_run") != std::string::npos;
    }
    CHECK(ok == n);
    auto s = c.stats();
    CHECK(s.completed == n);
    CHECK(s.in_flight == 0);
    CHECK(s.queued == 0);
    CHECK(s.failed == 0);
  }
}
