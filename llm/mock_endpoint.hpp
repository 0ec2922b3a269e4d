// A fast in-process LLM endpoint for `kiln bench rollout --policy llm-mock`: one epoll thread
// serves HTTP/1.1 keep-alive on loopback and answers every generation request after a fixed
// latency with a prebuilt answer (a chat completion with a code block, a vLLM completion or an
// SGLang generate answer of `answer_tokens` ids), /tokenize at once with `prompt_tokens` ids.
// It does no tokenizing or sampling, so at thousands of requests per second the client under test,
// not the mock, is what is measured; its own CPU time is reported so it can be subtracted.
//   client --POST--> accept / read --(due = now + latency)--> FIFO --> write answer
#pragma once

#include "data/expected.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

namespace kiln {

struct mock_endpoint_options {
  double latency_ms = 1000; // from a generation request's last byte to its answer
  std::string answer_text;  // the content (chat) or text (token apis) of every answer
  int prompt_tokens = 6144; // ids /tokenize returns
  int answer_tokens = 2048; // ids a completion / generate answer carries
};

struct mock_endpoint_stats {
  int64_t requests = 0, connections = 0, bad_requests = 0;
  double cpu_s = 0; // the server thread's CPU time
};

class mock_endpoint {
public:
  // Listens on 127.0.0.1 (an ephemeral port) and starts the thread; an error names the call.
  static expected<std::unique_ptr<mock_endpoint>> start(mock_endpoint_options o);
  ~mock_endpoint();
  mock_endpoint(const mock_endpoint&) = delete;
  mock_endpoint& operator=(const mock_endpoint&) = delete;

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  mock_endpoint_stats stats() const;

private:
  mock_endpoint() = default;
  void run();
  struct impl;
  std::unique_ptr<impl> impl_;
  int port_ = 0;
  std::thread thread_;
};

} // namespace kiln
