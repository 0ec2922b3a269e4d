#include "data/tensor_digest.hpp"

#include <ATen/ATen.h>

namespace kiln {

namespace {

std::string python_dtype(at::ScalarType t) {
  switch (t) {
  case at::kFloat: return "float32";
  case at::kHalf: return "float16";
  case at::kBFloat16: return "bfloat16";
  case at::kDouble: return "float64";
  case at::kLong: return "int64";
  case at::kInt: return "int32";
  default: return c10::toString(t);
  }
}

} // namespace

// Reductions run where the tensor lives, without a float64 copy of it: gpu-profile tensors are
// gigabytes. Only the samples cross to the host.
tensor_digest digest_of(const std::string& name, const at::Tensor& x, int64_t max_samples) {
  tensor_digest d;
  d.name = name;
  d.shape = x.sizes().vec();
  d.dtype = python_dtype(x.scalar_type());
  auto flat = x.detach().reshape({-1});
  const int64_t n = flat.numel();
  if (at::isFloatingType(flat.scalar_type())) {
    d.nonfinite = n - flat.isfinite().sum().item<int64_t>();
    auto clean = d.nonfinite ? flat.nan_to_num(0.0, 0.0, 0.0) : flat;
    d.sum = clean.sum(at::kDouble).item<double>();
    d.abs_sum = at::linalg_vector_norm(clean, 1, c10::nullopt, false, at::kDouble).item<double>();
  } else {
    auto wide = flat.to(at::kDouble);
    d.sum = wide.sum().item<double>();
    d.abs_sum = wide.abs().sum().item<double>();
  }
  const int64_t k = std::min(n, std::max<int64_t>(max_samples, 0));
  if (k == 0) return d;
  std::vector<int64_t> idx(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) idx[static_cast<size_t>(i)] = digest_index(i, k, n);
  auto at_idx = at::tensor(idx, at::TensorOptions().dtype(at::kLong)).to(flat.device());
  auto picked = flat.index_select(0, at_idx).to(at::kCPU).to(at::kDouble).contiguous();
  const double* p = picked.data_ptr<double>();
  d.samples.assign(p, p + k);
  return d;
}

} // namespace kiln
