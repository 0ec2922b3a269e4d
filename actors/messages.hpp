// Every message type of the rollout engine, declared in one place (the pool's own atoms are in
// pool/device_pool.hpp). Narrow CAF includes only: this header is in every rollout TU.
//   coordinator --spawn--> episode --(generate, gen_request)--> policy server --gen_reply-->
//   episode --(evaluate, job, program)--> pool --outcome--> episode --(push, bytes)--> sink
//   episode --(episode_done, episode_summary)--> coordinator
#pragma once

#include "rollout/rollout_task.hpp"
#include "rollout/trajectory.hpp"

#include <algorithm>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/fwd.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/type_id.hpp>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kiln {

// A turn's generation request. Only the tokens the server has not seen travel (the server keeps
// each sequence's context between turns): turn 0 sends the prompt + [PROGRAM], later turns the
// observation tokens + [PROGRAM].
struct gen_request {
  uint64_t seq_id = 0;
  rollout_task_ptr task; // in-process only (a shared pointer): see CAF_ALLOW_UNSAFE below
  std::vector<int32_t> append;
  int32_t max_tokens = 256; // program length cap for this turn
  // Text policies (LLMs): the previous turn's outcome as text (rollout/observation_text.hpp);
  // empty on the first turn. Token policies ignore it.
  std::string observation;
};

// The program's tokens, behaviour log-probs and policy versions packed in one buffer
// [tokens | logprob bits | versions], n each: one allocation per reply instead of three (this
// message is sent once per env step; see `kiln bench rollout`).
struct gen_reply {
  std::vector<int32_t> packed;
  bool complete = false; // the grammar reached the program's end (false: cut at max_tokens)
  double queue_ms = 0;   // waiting for a batch slot
  double policy_ms = 0;  // from joining the batch to the last token
  // Text policies: the answer, the submission taken from it (a free-form source program), or why
  // there is none (then the turn is a compile_error with that message), and the tokens the
  // endpoint counted. The packed tokens are then the model's own ids, when the endpoint gave any.
  bool text_policy = false;
  std::string text, submission, failure;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  // Text policies, for the trajectory: the messages this turn added before the answer (system and
  // task on the first turn, the outcome later), the context tokens the server put before the
  // answer in the model's vocabulary (empty without token ids; loss_mask 0), the served weights'
  // version when the turn was asked, the model's name and the endpoint kind.
  std::vector<message_record> asked;
  std::vector<int32_t> prefix;
  int64_t version = 0;
  std::string model, api;
  std::string answer_format; // an LLM's: how it was asked (llm/llm_config.hpp)

  size_t size() const { return packed.size() / 3; }
  const int32_t* tokens_begin() const { return packed.data(); }
  const int32_t* tokens_end() const { return packed.data() + size(); }
  const int32_t* versions_begin() const { return packed.data() + 2 * size(); }
  float logprob(size_t i) const {
    float f;
    std::memcpy(&f, &packed[size() + i], sizeof f);
    return f;
  }
  std::vector<int32_t> tokens() const { return {tokens_begin(), tokens_end()}; }
  std::vector<int32_t> versions() const { return {versions_begin(), versions_begin() + size()}; }
  std::vector<float> logprobs() const {
    std::vector<float> v(size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = logprob(i);
    return v;
  }
  void pack(const std::vector<int32_t>& t, const std::vector<float>& lp,
            const std::vector<int32_t>& ver) {
    packed.resize(3 * t.size());
    std::copy(t.begin(), t.end(), packed.begin());
    std::memcpy(packed.data() + t.size(), lp.data(), lp.size() * sizeof(float));
    std::copy(ver.begin(), ver.end(), packed.begin() + 2 * static_cast<ptrdiff_t>(t.size()));
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, message_record& x) {
  return f(caf::meta::type_name("message_record"), x.role, x.content);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gen_reply& x) {
  return f(caf::meta::type_name("gen_reply"), x.packed, x.complete, x.queue_ms, x.policy_ms,
           x.text_policy, x.text, x.submission, x.failure, x.prompt_tokens, x.completion_tokens,
           x.asked, x.prefix, x.version, x.model, x.api, x.answer_format);
}

// An LLM endpoint's answer to one turn, from the HTTP client's thread back to the LLM policy
// server (llm/llm_policy_server.hpp).
struct llm_answer {
  uint64_t seq_id = 0;
  int32_t stage = 0; // which request of the turn this answers (llm_policy_server.cpp)
  int32_t status = 0;
  std::string body, error;
  int32_t attempts = 0;
  double ms = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, llm_answer& x) {
  return f(caf::meta::type_name("llm_answer"), x.seq_id, x.stage, x.status, x.body, x.error,
           x.attempts, x.ms);
}

// What an episode tells the coordinator when it ends (after the sink took its trajectory).
struct episode_summary {
  uint64_t episode = 0;
  std::string task;
  int32_t status = 0; // episode_status
  double reward = 0;
  int32_t turns = 0;
  int32_t correct_turns = 0;
  int64_t tokens = 0;
  bool handed_on = false; // the sink passed the trajectory to ZeroMQ
  double total_ms = 0, policy_ms = 0, pool_ms = 0, sink_ms = 0;
  double queue_ms = 0, compile_ms = 0, device_ms = 0; // from the pool's outcomes
  std::string error;                                  // why it failed / aborted, empty otherwise
  double best_kernel_ms = 0;         // fastest correct turn's kernel median; 0: none correct
  int32_t first_correct_turn = -1;   // 0-based; -1: none correct
  std::string last_outcome;          // the last turn's outcome kind ("" when no turn ran)
  std::string last_message;          // and its message (a compile log, why it failed), trimmed
  std::string best_program;          // the fastest correct turn's program (token policies)
  std::vector<double> turn_rewards;  // per turn, in order
  std::vector<int32_t> turn_correct; // per turn: 1 correct, 0 not
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, episode_summary& x) {
  return f(caf::meta::type_name("episode_summary"), x.episode, x.task, x.status, x.reward, x.turns,
           x.correct_turns, x.tokens, x.handed_on, x.total_ms, x.policy_ms, x.pool_ms, x.sink_ms,
           x.queue_ms, x.compile_ms, x.device_ms, x.error, x.best_kernel_ms, x.first_correct_turn,
           x.last_outcome, x.last_message, x.best_program, x.turn_rewards, x.turn_correct);
}

} // namespace kiln

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::gen_request)

// Above the range other Kiln blocks may take (first_custom_type_id .. +99).
CAF_BEGIN_TYPE_ID_BLOCK(kiln_rollout, caf::first_custom_type_id + 100)
CAF_ADD_TYPE_ID(kiln_rollout, (kiln::gen_reply))
CAF_ADD_TYPE_ID(kiln_rollout, (kiln::episode_summary))
CAF_ADD_TYPE_ID(kiln_rollout, (kiln::llm_answer))
CAF_END_TYPE_ID_BLOCK(kiln_rollout)

namespace kiln {
using generate_atom = caf::atom_constant<caf::atom("generate")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
using decode_step_atom = caf::atom_constant<caf::atom("dec_step")>;
using version_atom = caf::atom_constant<caf::atom("version")>;
using subscribe_atom = caf::atom_constant<caf::atom("subscribe")>;
using push_atom = caf::atom_constant<caf::atom("push")>;
using flush_atom = caf::atom_constant<caf::atom("flush")>;
using episode_done_atom = caf::atom_constant<caf::atom("ep_done")>;
using deadline_atom = caf::atom_constant<caf::atom("deadline")>;
using run_atom = caf::atom_constant<caf::atom("run")>;
using baseline_atom = caf::atom_constant<caf::atom("baseline")>;
using server_stats_atom = caf::atom_constant<caf::atom("srv_stats")>;
using discarded_atom = caf::atom_constant<caf::atom("discarded")>;

// Registers the block above (call on every actor_system_config that runs rollout actors).
void register_rollout_messages(caf::actor_system_config& cfg);
} // namespace kiln
