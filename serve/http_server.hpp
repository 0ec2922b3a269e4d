// The HTTP/1.1 front of `kiln serve` (Boost.Beast over Asio). One io thread accepts, reads and
// writes; a request goes to the route function, whose answer may come later from any thread
// (an evaluation waits minutes for the pool without holding the io thread).
//   socket --read (size limit, read timeout)--> http_request --route--> respond(http_response)
#pragma once

#include "data/expected.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

struct http_request {
  std::string method; // "GET", "POST", ...
  std::string target; // path and query, as sent
  std::string body;
  std::string authorization; // the Authorization header, "" when absent
  std::string host;          // the Host header
  std::string content_type;  // the Content-Type header
  std::string peer;          // "address:port"
};

struct http_response {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers; // extra ones (Retry-After, ...)
};

// Call once, from any thread; a respond_fn dropped uncalled answers 500.
using respond_fn = std::function<void(http_response)>;
using route_fn = std::function<void(http_request, respond_fn)>;

// One upgraded WebSocket connection (OpenEnv's /ws): text frames out, from any thread, in order.
class ws_channel {
public:
  virtual ~ws_channel() = default;
  virtual void send(std::string text) = 0;
  virtual void close() = 0;
};
struct ws_handler {
  std::function<void(std::string)> on_message; // on the io thread: must not block
  std::function<void()> on_close;
};
struct ws_routes {
  // An upgrade request: nullopt accepts it, a response refuses it (401, 404, ...).
  std::function<std::optional<http_response>(const http_request&)> check;
  // After the handshake: what handles the connection's messages.
  std::function<ws_handler(const http_request&, std::shared_ptr<ws_channel>)> open;
};

struct http_options {
  std::string bind = "127.0.0.1";
  uint16_t port = 10907; // KernelGYM's default port, so its clients' defaults reach Kiln
  size_t max_body_bytes = size_t{1} << 20;
  int read_timeout_s = 30;   // a request's headers and body must arrive within this
  int max_connections = 512; // beyond it a connection is answered 503 and closed
};

class http_server {
public:
  // Binds and starts the io thread; the error names the address when binding fails.
  static expected<std::unique_ptr<http_server>> start(const http_options& opts, route_fn route,
                                                      ws_routes ws = {});
  // Ends the io thread: nothing is read, routed or written after it. Answers that come later
  // are dropped; connections close when the server is destroyed. Idempotent.
  void stop();
  ~http_server(); // stop()
  uint16_t port() const;

private:
  struct impl;
  explicit http_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

} // namespace kiln
