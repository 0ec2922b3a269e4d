// The token policies that need no model, behind token_policy (rollout/token_policy.hpp):
// - random: uniform over the grammar mask, logprob = -log(#valid);
// - expert: replays skills/expert.hpp's program for the slot's task token by token, logprob 0
//   (computed once per task and cached, so it is also the "fixed policy" of `kiln bench rollout`).
//   policy server --slots--> step --token, logprob--> policy server
#pragma once

#include "rollout/token_policy.hpp"
#include "skills/expert.hpp"

#include <memory>

namespace kiln {

std::unique_ptr<token_policy> make_random_policy();
std::unique_ptr<token_policy> make_expert_policy(backend_kind backend);

} // namespace kiln
