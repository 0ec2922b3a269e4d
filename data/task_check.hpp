// Validation of a parsed task before anything is allocated: names, arity, attributes, shapes
// (inferred op by op), outputs, and the memory budget. Fills op_node::shape.
#pragma once

#include "data/expected.hpp"
#include "data/task_spec.hpp"

#include <vector>

namespace kiln {

struct check_limits {
  // Upper bound on the peak bytes of a task's live tensors (peak_bytes).
  int64_t memory_budget_bytes = int64_t{16} << 30;
  int64_t max_dim = int64_t{1} << 31;
  int max_ops = 4096;
};

// Per op: the index of the last op that reads its result; ops.size() for task outputs (alive to
// the end); its own index for a result nothing reads.
std::vector<std::size_t> last_uses(const task& t);

// The reference's peak memory: inputs and params throughout, each op result from its op until
// its last use (outputs to the end). INT64_MAX on overflow. Needs shapes (check_task).
int64_t peak_bytes(const task& t);

// Bytes any implementation must move at least once: inputs, params and outputs (int64 for arg*
// results). Needs shapes (check_task). The memory roofline of the pool and eval's bandwidth.
int64_t compulsory_bytes(const task& t);

// On error the message names the task origin, the task, the op (index, op name, out) and the field.
status check_task(task& t, const check_limits& limits = {});

} // namespace kiln
