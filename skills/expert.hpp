// The expert heuristic: a sensible program for any task. Fuses each elementwise chain into its
// producer, uses the library GEMM, and picks vector widths and threads from the shapes. A baseline
// policy and the source of warm-up data for the learner.
//   task --expert_program(backend)--> program
#pragma once

#include "data/task_spec.hpp"
#include "skills/backend_kind.hpp"
#include "skills/program.hpp"

namespace kiln {

program expert_program(const task& t, backend_kind backend);

} // namespace kiln
