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
#include "pool/node_connect.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <chrono>
#include <string>
#include <vector>

namespace kiln {

caf::actor spawn_pool_router(caf::actor_system& sys, std::vector<pool_member> members);

} // namespace kiln
