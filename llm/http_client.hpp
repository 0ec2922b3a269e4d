// An event-driven HTTP client for LLM endpoints: one thread drives every request in flight
// through libcurl's multi interface (connections reused per endpoint), so thousands of episodes
// wait on a few sockets, not on threads. Each endpoint has a cap on requests in flight; a request
// goes to the least-loaded endpoint with room, and a retry may go to another one. Retries with
// exponential backoff on connection loss, timeouts, 429 (Retry-After honoured) and 5xx; other
// statuses and the last failed attempt are final.
//   post(path, body, done) --queue--> client thread: curl_multi --> done(http_response)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

struct http_client_options {
  std::vector<std::string> endpoints; // base URLs, e.g. "http://127.0.0.1:8000"; may hold {session}
  int max_in_flight = 256;            // per endpoint
  double timeout_s = 300;             // per attempt, connect to last byte
  int max_attempts = 4;
  double backoff_s = 0.5;            // first retry delay; doubles per attempt
  double backoff_max_s = 30;         // also caps a server's Retry-After
  std::string bearer_token;          // Authorization: Bearer ... when non-empty
  int64_t max_body_bytes = 64 << 20; // an answer larger than this is an error, not a buffer
};

struct http_response {
  int status = 0;    // HTTP status of the last attempt; 0: no answer
  std::string body;  // the last attempt's body
  std::string error; // non-empty: the request failed (after its retries), says why
  int attempts = 0;
  double ms = 0;        // submission to completion, retries and backoff included
  std::string endpoint; // where the last attempt went
  bool ok() const { return error.empty() && status >= 200 && status < 300; }
};

struct http_client_stats {
  int64_t requests = 0, completed = 0, failed = 0, retries = 0, in_flight = 0, queued = 0;
};

class http_client {
public:
  explicit http_client(http_client_options opts);
  // Stops the thread; requests still queued or in flight complete with "client stopped".
  ~http_client();
  http_client(const http_client&) = delete;
  http_client& operator=(const http_client&) = delete;

  // POSTs `body` (JSON) to endpoint + path, "{session}" in the endpoint replaced by `session`.
  // `done` runs exactly once, on the client thread: it must be quick (hand the response to an
  // actor) and must not call back into the client.
  void post(std::string path, std::string body, std::function<void(http_response)> done,
            std::string session = {});
  http_client_stats stats() const;

  struct transfer; // one request across its attempts (http_client.cpp)
  struct impl;     // the loop's state (http_client.cpp)

private:
  void run();
  std::unique_ptr<impl> impl_;
};

} // namespace kiln
