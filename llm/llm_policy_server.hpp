// A policy served by an LLM behind an HTTP endpoint, as a sibling of the token policy server
// (rollout/policy_server.hpp): episodes send it the same (generate_atom, gen_request) and get a
// gen_reply, with the answer's text and the free-form submission taken from its last code block.
// It keeps each episode's conversation (system: skills/LLM_SKILL.md and the ABI; user: the task;
// then assistant / user(outcome) per turn) and sends every turn through one event-driven HTTP
// client (llm/http_client.hpp). Episodes run with episode_config::text_policy.
//   episode --(generate, gen_request)--> server --POST /v1/chat/completions--> endpoint(s)
//   --llm_answer--> server --gen_reply (text, submission)--> episode
#pragma once

#include "skills/expert.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <string>
#include <vector>

namespace kiln {

struct llm_policy_config {
  std::string api = "chat";           // the endpoint kind (only OpenAI chat so far)
  std::vector<std::string> endpoints; // base URLs; requests balance across them
  std::string model;
  std::string bearer_token; // sent as Authorization: Bearer when non-empty
  int max_tokens = 8192;    // per answer
  double temperature = 0;
  int max_in_flight = 256; // per endpoint
  double timeout_s = 300;  // per HTTP attempt
  int max_attempts = 4;
  double backoff_s = 0.5;
  backend_kind backend = backend_kind::cpu; // what the submissions are written for
};

// Messages (actors/messages.hpp):
//   (generate_atom, gen_request) -> gen_reply   one turn; an error when the endpoint stays down
//                                               or the answer is malformed (the episode fails)
//   (release_atom, uint64_t seq)                 the episode ended: forget its conversation
//   (version_atom) -> int64_t                    0 (the served weights' version is external)
//   (subscribe_atom, caf::actor)                 (version_atom, 0) sent once
//   (server_stats_atom) -> std::string           JSON: requests, failed, retries, in flight
caf::actor spawn_llm_policy_server(caf::actor_system& sys, llm_policy_config cfg);

} // namespace kiln
