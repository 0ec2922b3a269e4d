# Honest: the ReLU as C++ through load_inline, the Linear as PyTorch's. Must pass.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_source = r"""
#include <torch/extension.h>
torch::Tensor relu_forward(torch::Tensor x) {
  auto y = torch::empty_like(x);
  const float* in = x.contiguous().data_ptr<float>();
  float* out = y.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = in[i] > 0.f ? in[i] : 0.f;
  return y;
}
"""
relu = load_inline(name="kiln_test_relu", cpp_sources=relu_source, functions=["relu_forward"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return relu.relu_forward(self.fc(x))
