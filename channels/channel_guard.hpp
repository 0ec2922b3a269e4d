// Secures the ZeroMQ sockets of one context: CurveZMQ options per socket, a ZAP handler that lets
// in only the authorized public keys, and a monitor of every secured socket's handshakes, so that
// refused and failed peers are counted and logged (rate-limited) instead of vanishing silently.
//   socket --secure()--> CURVE options + monitor --> [guard thread: ZAP replies, handshake events]
#pragma once

#include "channels/curve_config.hpp"
#include "data/expected.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace zmq {
class context_t;
class socket_t;
} // namespace zmq

namespace kiln {

struct channel_counters {
  int64_t accepted = 0;          // peers that completed the handshake with a bound socket
  int64_t refused_key = 0;       // CURVE peers whose public key is not authorized
  int64_t failed_handshakes = 0; // peers that failed otherwise: plaintext, wrong server key, junk
  int64_t refused_by_server = 0; // this process's connects refused (key) or failed (mechanism)
};

class channel_guard {
public:
  // Reads the key files of `cfg` (errors name the key and the file). `owner` prefixes log lines.
  // The guard must be destroyed before its context is closed.
  static expected<std::unique_ptr<channel_guard>>
  create(zmq::context_t& ctx, const curve_config& cfg, const std::string& owner);
  ~channel_guard();
  channel_guard(const channel_guard&) = delete;
  channel_guard& operator=(const channel_guard&) = delete;

  // Call before the socket binds (a CURVE server) or connects (a CURVE client) to `endpoint`;
  // its handshakes are watched from then on, keyed or not. Without keys, an endpoint off
  // loopback is refused unless curve.allow_plaintext.
  status secure(zmq::socket_t& socket, const std::string& endpoint, bool bind);

  bool curve() const;
  channel_counters counters() const;
  // "curve: 2 accepted, 1 refused (unknown key), 0 failed handshakes, 0 refused by a server"
  std::string summary() const;

  struct impl;

private:
  explicit channel_guard(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

} // namespace kiln
