// Validation of a parsed task before anything is allocated: names, arity, attributes, shapes
// (inferred op by op), outputs, and the memory budget. Fills op_node::shape.
#pragma once

#include "data/expected.hpp"
#include "data/task_spec.hpp"

namespace kiln {

struct check_limits {
  // Upper bound on the bytes of all tensors of a task (inputs, params, every intermediate).
  int64_t memory_budget_bytes = int64_t{16} << 30;
  int64_t max_dim = int64_t{1} << 31;
  int max_ops = 256;
};

// Total bytes of inputs, params and op results (an upper bound on the reference's peak).
int64_t task_bytes(const task& t);

// Bytes any implementation must move at least once: inputs, params and outputs (int64 for arg*
// results). Needs shapes (check_task). The memory roofline of the pool and eval's bandwidth.
int64_t compulsory_bytes(const task& t);

// On error the message names the task origin, the task, the op (index, op name, out) and the field.
status check_task(task& t, const check_limits& limits = {});

} // namespace kiln
