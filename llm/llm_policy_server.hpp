// A policy served by an LLM behind HTTP endpoints, as a sibling of the token policy server
// (rollout/policy_server.hpp): episodes send it the same (generate_atom, gen_request) and get a
// gen_reply, with the answer's text and the free-form submission taken from its last code block.
// It keeps each episode's conversation (system: skills/LLM_SKILL.md and the ABI; user: the task;
// then assistant / user(outcome) per turn) and sends every turn through one event-driven HTTP
// client (llm/http_client.hpp). api "chat" speaks OpenAI chat completions (text only); "vllm" and
// "sglang" keep the context as the model's token ids (llm/token_api.hpp), so the reply carries
// the answer's ids and log-probabilities, tagged with the version a trainer announced last on
// version_endpoint. Episodes run with episode_config::text_policy.
//   episode --(generate, gen_request)--> server --POST chat | tokenize + completion--> endpoint(s)
//   --llm_answer--> server --gen_reply (text, submission, ids)--> episode
#pragma once

#include "data/expected.hpp"
#include "llm/llm_config.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <string>
#include <vector>

namespace kiln {

// Messages (actors/messages.hpp):
//   (generate_atom, gen_request) -> gen_reply   one turn; an error when the endpoint stays down
//                                               or the answer is malformed (the episode fails)
//   (release_atom, uint64_t seq)                 the episode ended: forget its conversation
//   (version_atom) -> int64_t                    the newest announced version (0 before any)
//   (subscribe_atom, caf::actor)                 (version_atom, int64_t) now and on every change
//   (server_stats_atom) -> std::string           JSON: requests, failed, retries, in flight,
//                                                answers, malformed, version, announcements
// Errors: an unknown api, no endpoint, a version_endpoint ZeroMQ cannot connect to.
expected<caf::actor> spawn_llm_policy_server(caf::actor_system& sys, llm_policy_config cfg);

} // namespace kiln
