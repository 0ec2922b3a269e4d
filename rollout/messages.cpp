#include "actors/messages.hpp"

#include <caf/actor_system_config.hpp>

namespace kiln {

void register_rollout_messages(caf::actor_system_config& cfg) {
  cfg.add_message_types<caf::id_block::kiln_rollout>();
}

} // namespace kiln
