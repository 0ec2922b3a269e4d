// `kiln tasks validate` for one task: reference run on fresh seeds, eager timing, degeneracy.
#pragma once

#include "data/degeneracy.hpp"
#include "data/task_spec.hpp"
#include "data/tensor_digest.hpp"

#include <c10/core/Device.h>
#include <string>

namespace kiln {

struct validation {
  std::string name;
  std::string origin;
  int level = 0;
  std::size_t ops = 0;
  std::string output_shape;
  std::string content_hash; // keys torch.compile baselines (data/task_hash.hpp)
  double eager_ms = 0;      // median wall time of the reference, after a warm-up run
  bool ok = false;          // ran, finite, not degenerate, eager time inside the window (if set)
  std::string verdict;      // "ok", or the reason it is bad
  std::string warning;      // non-fatal notes
  // With validate_options::digest: the warm-up run's params, inputs (seed digest_input_seed) and
  // outputs, for fidelity checks against another implementation (tools/torch_baselines.py).
  std::vector<tensor_digest> digest_params, digest_inputs, digest_outputs;
};

// Inputs of the warm-up run (and of the digests) are drawn from this seed; params from
// default_param_seed(t).
constexpr uint64_t digest_input_seed = 7;

struct validate_options {
  c10::Device device = c10::Device(c10::kCPU);
  int timing_runs = 3;
  int degeneracy_seeds = 3;
  double min_eager_ms = 0; // 0 = no window
  double max_eager_ms = 0;
  int64_t digest_samples = 0; // > 0: fill the digests, with this many samples per output
};

validation validate_task(const task& t, const validate_options& opts);

} // namespace kiln
