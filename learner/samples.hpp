// Training samples: a trajectory made ready for the loss (grammar masks recomputed per model token,
// per-token rewards placed), and the supervised warm-up samples built from expert programs.
//   trajectory + task --prepare_sample--> sample;   tasks --expert_samples--> samples (SFT)
// The policy samples under the grammar mask and reports log-probs after masking, so the learner
// must score each model token under the same mask: it replays the grammar over the turn's prefix.
#pragma once

#include "data/expected.hpp"
#include "data/task_spec.hpp"
#include "rollout/trajectory.hpp"
#include "skills/expert.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

// Where episode rewards land. episode: trajectory.reward on the last model token (CUDA Agent's
// outcome reward; with gamma = 1 every token's return is the episode reward). turn: each turn's
// reward on that turn's last model token.
enum class reward_placement { episode, turn };

struct sample {
  std::string id, task, group;
  std::vector<int32_t> tokens;    // the whole context
  std::vector<int32_t> model_pos; // positions of model tokens, ascending
  std::vector<uint8_t> masks;     // model_pos.size() x program_token_count(): allowed tokens
  std::vector<float> logp_behav;  // per model token
  std::vector<int32_t> versions;  // per model token
  std::vector<float> rewards;     // per model token
  int64_t policy_version = 0;
  double reward = 0;
};

// `spec` may be null: the mask is then every program token (no grammar replay; documented
// fallback for learners without the task files). Errors when a model token is outside its mask.
expected<sample> prepare_sample(const trajectory& t, const task* spec, reward_placement where);

// Supervised warm-up: context [BOS] task tokens [TASK_END] [PROGRAM] expert program tokens, the
// program tokens as model tokens (reward 0, behaviour log-prob 0). Tasks whose expert program does
// not check are skipped. `verified` (optional, same length as tasks) keeps only tasks whose expert
// program verified correct in the pool (rejection fine-tuning); empty keeps all.
std::vector<sample> expert_samples(const std::vector<task>& tasks, backend_kind backend,
                                   const std::vector<bool>& verified = {});

// Warm-up samples from chosen programs (rejection sampling: the fastest verified program found
// for each task): programs[i], in printed form, for tasks[i]; the expert's program where it is
// empty, does not parse or does not check.
std::vector<sample> program_samples(const std::vector<task>& tasks,
                                    const std::vector<std::string>& programs, backend_kind backend);

// The prompt the policy starts a first turn from: [BOS] task tokens [TASK_END] [PROGRAM].
std::vector<int32_t> first_turn_prompt(const task& t);

} // namespace kiln
