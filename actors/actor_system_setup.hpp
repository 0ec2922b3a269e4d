// The CAF actor system as Kiln runs it: scheduler threads = cores unless configured (CAF's own
// default, max(cores, 4), oversubscribes small machines and was 2-5x slower here).
//   kiln config --make_actor_config--> caf::actor_system_config --> caf::actor_system
#pragma once

#include "data/expected.hpp"

#include <caf/actor_system_config.hpp>
#include <string>

namespace kiln {

struct actor_settings {
  int threads = 0;                // 0 = hardware cores
  std::string policy = "sharing"; // 'sharing' | 'stealing'
  bool middleman = false;         // load caf::io (kiln node, remote pools)
  // With the middleman: every connection sends a heartbeat this often and is closed when nothing
  // arrived from its peer for peer_timeout_ms (0: off, CAF's default). A peer behind a cut link
  // then goes down (remote actors' down messages) within the timeout, not after TCP's minutes.
  int peer_heartbeat_ms = 1000;
  int peer_timeout_ms = 5000;
};

// Fills `cfg` with the settings (scheduler.max-threads, scheduler.policy, the middleman's
// heartbeat-interval and connection-timeout); returns the threads used.
int configure_actor_system(caf::actor_system_config& cfg, const actor_settings& s);

// Mutual TLS for the middleman (caf_openssl): this side presents DIR/cert.pem with DIR/key.pem
// and accepts only peers whose certificate DIR/ca.pem signed. Then `kiln node` publishes and
// pool clients connect over TLS only (pool/pool_router.hpp). Call after
// configure_actor_system with middleman = true; an error names a missing file, or says that this
// build has no TLS.
status enable_tls(caf::actor_system_config& cfg, const std::string& dir);

} // namespace kiln
