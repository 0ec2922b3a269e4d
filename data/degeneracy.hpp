// Degenerate-task detection: runs the reference on several input seeds and flags tasks that a
// trivial kernel would pass (constant outputs, outputs within tolerance of zero, NaN/Inf).
#pragma once

#include "data/expected.hpp"
#include "data/task_spec.hpp"

#include <c10/core/Device.h>
#include <string>

namespace kiln {

struct degeneracy_report {
  bool degenerate = false;
  std::string reason;         // empty when not degenerate
  double max_abs = 0;         // largest |y| over all outputs and seeds
  double zero_pass_share = 0; // share of output elements an all-zeros kernel would get right
  std::string warning;        // non-fatal: e.g. most elements within tolerance of zero
};

// `seeds` input draws (>= 2); params drawn once from default_param_seed.
expected<degeneracy_report> check_degeneracy(const task& t, c10::Device device, int seeds = 3);

} // namespace kiln
