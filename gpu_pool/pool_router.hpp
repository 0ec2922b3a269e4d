// Several pools behind one actor that speaks the pool's messages, so episodes, evaluation and the
// coordinator use a farm of nodes as they use one pool: this process's pool and pools that other
// machines publish with `kiln node` (CAF middleman proxies).
//   (evaluate, job, program) --> router --fewest jobs in flight per device--> member pool
//   (stats) --> router --ask every member--> merged JSON (devices of all members, per node)
// A member that goes down (its connection closed, or silent past the middleman's connection
// timeout: actors/actor_system_setup.hpp) is dropped (logged); its jobs in flight are retried on
// the others, so a lost node costs time, not episodes. A lost remote member is reconnected every
// 2 s in the background and rejoins when its address answers with a pool of the same backend (a
// different backend is refused, logged). Remote members are monitored, never linked: ending the
// router ends this process's pool only.
#pragma once

#include "data/expected.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <chrono>
#include <string>
#include <vector>

namespace kiln {

struct pool_member {
  caf::actor pool;
  std::string name;                 // "local" or "host:port"
  int devices = 1;                  // weights placement: jobs in flight per device
  bool local = false;               // linked to the router (ends with it)
  std::string backend, device_name; // from the member's stats
};

caf::actor spawn_pool_router(caf::actor_system& sys, std::vector<pool_member> members);

// Connects to a pool that `kiln node` published at "host:port" and reads its stats (backend,
// devices); needs the middleman loaded in `sys`. The error names the address and what failed.
// A host that does not answer a TCP connect within `timeout` fails then (not after the kernel's
// SYN retries).
expected<pool_member> connect_pool(caf::actor_system& sys, const std::string& host_port,
                                   std::chrono::seconds timeout = std::chrono::seconds(10));

// Asks a pool (or a router) for its stats JSON and fills backend, device_name and devices.
status describe_member(caf::actor_system& sys, pool_member& m, std::chrono::seconds timeout);

} // namespace kiln
