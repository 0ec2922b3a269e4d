// The outcome of a turn as text, for policies that read text (LLMs): the counterpart of
// observation_tokens (rollout/token_space.hpp), with what a person fixing the kernel would want
// to see: the compiler's log (trimmed), where a wrong result is off and by how much, a runtime
// error's reason, or the time and speedups of a correct kernel.
//   outcome + speedups --observation_text--> the next user message
#pragma once

#include "jobs/job.hpp"

#include <optional>
#include <string>

namespace kiln {

std::string observation_text(const outcome& o, double speedup_eager,
                             std::optional<double> speedup_compile, size_t max_log_chars = 4000);

} // namespace kiln
