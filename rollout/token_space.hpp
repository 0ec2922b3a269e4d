// The policy model's token space: one vocabulary for the whole multi-turn context.
//   [BOS] task tokens [TASK_END] ( [PROGRAM] program tokens [OBS] observation tokens [OBS_END] )*
// Ids: [0, program_vocab().size()) are the kernel language's own tokens (skills/grammar.hpp), so a
// program's tokens appear in the context unchanged; special, task and observation tokens follow.
// The learner's model and the policy servers size their embeddings with vocab_size().
#pragma once

#include "data/task_spec.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

struct outcome;

int32_t vocab_size();
int32_t program_token_count(); // == program_vocab().size()
bool is_program_token(int32_t id);

enum class special_token { pad, bos, task_end, program, obs, obs_end };
int32_t token_of(special_token s);

// The task as tokens: level, then per op its op word and a log2 bucket of its output size,
// then per input a log2 size bucket. Deterministic; at most max_task_tokens long (truncated).
constexpr int32_t max_task_tokens = 96;
std::vector<int32_t> task_tokens(const task& t);

// What the agent sees after a turn: [OBS] outcome-kind token, then for `wrong` a log10 bucket of
// the max relative error, for `correct` a speedup bucket vs eager and one vs compile (or a "n/a"
// token), then [OBS_END].
std::vector<int32_t> observation_tokens(const outcome& o, double speedup_eager,
                                        std::optional<double> speedup_compile);

// The word of any id ("<bos>", "op:relu", "size:2^12", "obs:correct", "speedup_eager:1.05-1.5",
// or the program word): for logs and tests.
std::string token_word(int32_t id);

} // namespace kiln
