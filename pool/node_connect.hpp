// Connecting to a pool that `kiln node` published: every step bounded in time, because CAF 0.17's
// own connect blocks on a dead host (the kernel's SYN retries) and its TLS client waits forever
// in the multiplexer for a peer that accepts TCP and never answers the handshake (wedging every
// TLS connection of the process). So: a non-blocking TCP probe, over TLS a mutual handshake probe
// with the process's own certificate, then CAF's connect through its manager actor with a timeout.
//   host:port --TCP probe--> [--TLS handshake probe-->] --middleman connect--> stats --> member
#pragma once

#include "data/expected.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <chrono>
#include <string>

namespace kiln {

struct pool_member {
  caf::actor pool;
  std::string name;                 // "local" or "host:port"
  int devices = 1;                  // weights placement: jobs in flight per device
  bool local = false;               // linked to the router (ends with it)
  std::string backend, device_name; // from the member's stats
};

// Connects to the pool at "host:port" and reads its stats (backend, devices); needs the middleman
// loaded in `sys` (and caf::openssl for TLS: actors/actor_system_setup.hpp). The error names the
// address and what failed; nothing waits past `timeout` per step.
expected<pool_member> connect_pool(caf::actor_system& sys, const std::string& host_port,
                                   std::chrono::seconds timeout = std::chrono::seconds(10));

// Asks a pool (or a router) for its stats JSON and fills backend, device_name and devices.
status describe_member(caf::actor_system& sys, pool_member& m, std::chrono::seconds timeout);

} // namespace kiln
