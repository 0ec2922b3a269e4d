// A TCP front for a plaintext middleman listener. CAF 0.17 trusts the payload length in a BASP
// header and allocates it before reading (a 32-byte header claiming 4 GiB costs the node 4 GB),
// and keeps a half-open connection forever. So `kiln node` publishes its pool on loopback only,
// and this guard listens on the public address. It holds each frame a peer sends until the frame
// is whole and only then passes it on unchanged, so the middleman never sees a length it has to
// wait for. A header claiming more than max_payload (max_first_payload before the peer's first
// frame, its handshake), frames buffered past budget_bytes over all peers, a frame not complete
// within frame_ms (handshake_ms for the first), and connections past max_connections (or past
// max_per_host from one address) are cut.
//   peer --frames--> guard (whole frames, bounded) --same bytes--> 127.0.0.1:upstream (middleman)
//   peer <--bytes-- guard <--bytes-- middleman
// Outbound (guard_upstream): the same bounds on the frames of a remote node a coordinator connects
// to, whose middleman would otherwise allocate whatever a node's header claims:
//   middleman --bytes--> 127.0.0.1:port (guard) --same bytes--> node
//   middleman <--same bytes-- guard (whole frames, bounded) <--frames-- node
// Over TLS (caf_openssl) nothing reaches BASP before the handshake authenticates the peer, so
// TLS nodes publish directly and need no guard.
#pragma once

#include "data/expected.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

namespace kiln {

struct basp_guard_options {
  std::string bind = "127.0.0.1";
  uint16_t port = 0;                       // 0: any free port (port() tells)
  std::string upstream_host = "127.0.0.1"; // inbound: the middleman's listener; outbound: a node
  uint16_t upstream_port = 0;
  bool guard_upstream = false; // outbound: hold the upstream's frames, not the accepted peer's
  uint32_t max_payload = uint32_t{64} << 20;
  uint32_t max_first_payload = uint32_t{64} << 10; // a client handshake is a few hundred bytes
  uint64_t budget_bytes = uint64_t{512} << 20;     // partial frames held for all peers together
  int max_connections = 256;
  int max_per_host = 64; // one address cannot take every slot (a coordinator needs one or two)
  int handshake_ms = 10000;
  int frame_ms = 60000;
};

struct basp_guard_stats {
  int64_t accepted = 0;
  int64_t refused = 0;      // past max_connections
  int64_t refused_host = 0; // past max_per_host from one address
  int64_t oversize = 0;     // closed: a header claimed more than max_payload
  int64_t too_slow = 0;     // closed: a frame not complete within handshake_ms / frame_ms
  int64_t over_budget = 0;  // closed: its partial frame would pass budget_bytes
  int64_t upstream = 0;     // closed: the middleman could not be reached
};

// The BASP header fields the guard reads (caf/io/basp/header.hpp: 32 bytes, network byte
// order; payload_len at offset 4).
constexpr std::size_t basp_header_size = 32;
uint32_t basp_payload_len(const unsigned char* header);

class basp_guard {
public:
  basp_guard();
  ~basp_guard();
  basp_guard(const basp_guard&) = delete;
  basp_guard& operator=(const basp_guard&) = delete;

  // Listens and starts the relay thread; the error names the address that failed.
  status start(const basp_guard_options& opts);
  void stop();
  // Outbound only: dials the upstream and waits until its first frame (the node's handshake) is
  // held, so the next connection to port() gets it at once. CAF 0.17.6 drops an outgoing
  // connection whose handshake is not in by its next heartbeat tick (the connection's context
  // starts with last_seen at the clock's epoch), which a slow link otherwise meets on many tries.
  status prepare(std::chrono::milliseconds timeout);
  uint16_t port() const { return port_; }
  basp_guard_stats stats() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
  std::thread thread_;
  uint16_t port_ = 0;
  basp_guard_stats final_; // after stop()
};

} // namespace kiln
