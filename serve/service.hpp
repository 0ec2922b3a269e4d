// The endpoints of `kiln serve`: KernelGYM's reward calls (/evaluate, /evaluate/batch,
// /status/{id}, /results/{id}, /health), OpenEnv's episodes (/reset, /step, /state, /schema) and
// Prometheus' /metrics, behind bearer tokens. It checks, admits and answers; the job board holds
// the work, the evaluator does it.
//   http_request --auth, parse--> job_board.submit --result--> http_response
#pragma once

#include "serve/episodes.hpp"
#include "serve/http_server.hpp"
#include "serve/job_board.hpp"
#include "serve/tokens.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace kiln {

struct service_info {
  std::string backend;                     // "cpu" | "cuda"
  std::function<std::string()> pool_stats; // the pool's stats JSON (busy share per device)
};

class service {
public:
  // `tokens` null: no authentication (loopback only; cmd_serve enforces that).
  service(job_board& board, episodes& eps, const token_table* tokens, int capacity,
          service_info info);
  void route(http_request req, respond_fn respond);
  // OpenEnv's WebSocket /ws: one episode at a time per connection, messages {type, data}.
  ws_routes websocket_routes();

private:
  void evaluate(const http_request& req, const token_entry& who, respond_fn respond);
  void evaluate_batch(const http_request& req, const token_entry& who, respond_fn respond);
  // The caller's own ids only.
  http_response status_of(const token_entry& who, const std::string& id);
  http_response result_of(const token_entry& who, const std::string& id);
  http_response health();
  http_response metrics();
  std::optional<http_response> browser_guard(const http_request& req) const;
  struct ws_state;
  void ws_message(const std::shared_ptr<ws_state>& st, const std::string& text);
  void count(const std::string& endpoint, int code);
  void observe_latency(double s);

  job_board& board_;
  episodes& episodes_;
  const token_table* tokens_;
  int capacity_;
  service_info info_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> requests_; // (endpoint, status) -> count
  static constexpr std::array<double, 10> buckets_{0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900};
  std::array<int64_t, 10> latency_counts_{};
  int64_t latency_n_ = 0;
  double latency_sum_ = 0;
};

} // namespace kiln
