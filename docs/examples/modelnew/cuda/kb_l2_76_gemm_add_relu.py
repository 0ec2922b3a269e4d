import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# The kernel is compiled by nvcc from a source that includes only the CUDA runtime; the binding
# (torch/extension.h, compiled by the host compiler) passes it raw pointers.
cuda_source = r"""
#include <cuda_runtime.h>
#include <math.h>

__global__ void add_relu_kernel(float* __restrict__ y, long n, const float* __restrict__ bias, long inner, long channels) {
  long stride = (long)gridDim.x * blockDim.x;
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float x = y[i];
    float b = bias[(i / inner) % channels];
    y[i] = fmaxf(x + b, 0.f);
  }
}

void add_relu_launch(float* y, long n, const float* __restrict__ bias, long inner, long channels) {
  int threads = 256;
  long want = (n + threads - 1) / threads;
  int blocks = (int)(want < 132 * 32 ? (want > 0 ? want : 1) : 132 * 32);
  add_relu_kernel<<<blocks, threads>>>(y, n, bias, inner, channels);
}
"""

cpp_source = r"""
#include <torch/extension.h>
void add_relu_launch(float* y, long n, const float* __restrict__ bias, long inner, long channels);
torch::Tensor epilogue(torch::Tensor y, torch::Tensor bias) {
  TORCH_CHECK(y.is_cuda() && y.is_contiguous() && y.scalar_type() == torch::kFloat, "a dense float32 cuda tensor");
  auto b = bias.contiguous(); long channels = b.numel(); long inner = y.numel() / (y.size(0) * channels);
  add_relu_launch(y.data_ptr<float>(), y.numel(), b.data_ptr<float>(), inner, channels);
  return y;
}
"""

ext = load_inline(name="add_relu_ext", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["epilogue"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        y = self.gemm(x)
        # (batch, features): each feature is its own "channel" with an inner size of 1
        return ext.epilogue(y, self.bias)
