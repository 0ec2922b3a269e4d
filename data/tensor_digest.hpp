// A fingerprint of a tensor small enough for a JSON row: shape, float64 sums and values at fixed
// flat indices. It lets another implementation of a task (tools/torch_baselines.py, in PyTorch)
// be compared with Kiln's reference without shipping gigabytes of tensors.
//   tensor --digest_of--> {shape, sum, abs_sum, nonfinite, samples at (i * numel) / k} --> JSON
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace at {
class Tensor;
}

namespace kiln {

struct tensor_digest {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;           // "float32", "int64", ... (the tensor's own)
  double sum = 0, abs_sum = 0; // in float64, over finite elements
  int64_t nonfinite = 0;       // NaN and +-Inf elements
  // samples[i] = x.flatten()[(i * numel) / k] for i < k = min(numel, max_samples); NaN stays NaN.
  std::vector<double> samples;
};

tensor_digest digest_of(const std::string& name, const at::Tensor& x, int64_t max_samples);

// Flat index of sample i of k over numel elements (the rule the Python side mirrors).
inline int64_t digest_index(int64_t i, int64_t k, int64_t numel) {
  return static_cast<int64_t>((static_cast<__int128>(i) * numel) / k);
}

} // namespace kiln
