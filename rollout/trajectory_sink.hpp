// The trajectory sink: the only owner of the ZeroMQ PUSH sockets (sockets are not thread-safe), a
// detached actor so a slow send never holds a scheduler thread. Backpressure instead of loss: a
// push is answered only once every output's ZeroMQ socket took the message; while a high-water
// mark is reached the sink keeps the messages queued and retries, so episodes wait and nothing is
// dropped. Several outputs make a tee: the in-process learner and an external trainer each get
// every trajectory.
//   episode --(push, msgpack bytes)--> sink --zmq PUSH (sndhwm)==> each output's PULL; reply: true
#pragma once

#include "channels/curve_config.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

struct sink_output {
  std::string endpoint = "tcp://127.0.0.1:5557";
  bool bind = true;      // PUSH binds (the consumer connects); false: connect to a bound PULL
  int sndhwm = 1000;     // messages ZeroMQ queues per peer before send would block
  bool internal = false; // Kiln's own private path (the hosted learner's ipc): never keyed
};

struct sink_config {
  std::vector<sink_output> outputs{sink_output{}}; // every trajectory goes to each
  int linger_ms = 1000; // on shutdown, how long queued messages may still be delivered
  int retry_ms = 1;     // re-try interval while a high-water mark is reached
  curve_config curve;   // outputs other than internal ones are CURVE servers / clients with keys
};

// Messages:
//   (push_atom, std::string bytes) -> bool   answered once handed to ZeroMQ (true); an error
//                                             once a server refused this process's CURVE key
//   (server_stats_atom) -> std::string       JSON: sent, bytes, queued, max_queued, retries,
//   failed,
//                                             channel (handshake counters of the keyed outputs)
// A bad endpoint (or no output at all) is reported by spawn (the error names it).
struct spawned_sink {
  caf::actor actor;
  std::string error; // non-empty: the socket could not be set up
};
spawned_sink spawn_trajectory_sink(caf::actor_system& sys, const sink_config& cfg);

} // namespace kiln
