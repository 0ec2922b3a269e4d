// Eager filters of the synthesis pipeline: candidate task -> reference runs on the device
// (LibTorch)
// -> accepted with its eager time, or a reject_reason. Cheapest checks first, so most rejections
// cost one reference run.
#pragma once

#include "data/synth.hpp"
#include "data/task_spec.hpp"

#include <c10/core/Device.h>
#include <string>

namespace kiln {

struct filter_options {
  c10::Device device = c10::Device(c10::kCPU);
  double min_ms = 0.05, max_ms = 50; // eager-median window; max_ms <= 0 turns the upper end off
  int timing_runs = 3;
  int degeneracy_seeds = 2;
};

struct filter_verdict {
  bool ok = false;
  reject_reason reason = reject_reason::reference_error; // when !ok
  std::string detail;                                    // when !ok: the reason in words
  double eager_ms = 0;                                   // median of the timed runs
};

// Runs the task's reference: once to warm up (errors, NaN / Inf), timing_runs timed (window), then
// check_degeneracy on fresh input seeds. Never throws.
filter_verdict filter_task(const task& t, const filter_options& opts);

} // namespace kiln
