#include "actors/actor_system_setup.hpp"

#include <caf/atom.hpp>
#include <caf/io/middleman.hpp>
#include <thread>

namespace kiln {

int configure_actor_system(caf::actor_system_config& cfg, const actor_settings& s) {
  int threads = s.threads > 0 ? s.threads
                              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cfg.set("scheduler.max-threads", static_cast<size_t>(threads));
  cfg.set("scheduler.policy",
          s.policy == "stealing" ? caf::atom("stealing") : caf::atom("sharing"));
  cfg.set("logger.console", caf::atom("none"));
  if (s.middleman) cfg.load<caf::io::middleman>();
  return threads;
}

} // namespace kiln
