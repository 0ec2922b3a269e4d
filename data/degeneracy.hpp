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

// Elements per slice of the float64 comparisons: 128 MiB of float64, so an output of 1.6 G
// elements (KernelBench level 1 at its own sizes) is never copied whole to float64.
constexpr int64_t degeneracy_slice_elems = int64_t{1} << 24;

// `seeds` input draws (>= 2); params drawn once from default_param_seed. Outputs are kept as the
// reference makes them and compared `slice` elements at a time (tests pass a small one).
expected<degeneracy_report> check_degeneracy(const task& t, c10::Device device, int seeds = 3,
                                             int64_t slice = degeneracy_slice_elems);

} // namespace kiln
