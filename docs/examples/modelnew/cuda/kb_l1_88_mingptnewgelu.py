import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# The kernel is compiled by nvcc from a source that includes only the CUDA runtime; the binding
# (torch/extension.h, compiled by the host compiler) passes it raw pointers.
cuda_source = r"""
#include <cuda_runtime.h>
#include <math.h>

__device__ __forceinline__ float op(float x) { return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))); }

__global__ void ngelu_kernel(const float4* __restrict__ x, float4* __restrict__ y, long n4,
                              const float* __restrict__ xs, float* __restrict__ ys, long n) {
  long stride = (long)gridDim.x * blockDim.x;
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
    float4 v = x[i];
    v.x = op(v.x); v.y = op(v.y); v.z = op(v.z); v.w = op(v.w);
    y[i] = v;
  }
  for (long i = 4 * n4 + (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    ys[i] = op(xs[i]);
}

void ngelu_launch(const float* x, float* y, long n) {
  long n4 = ((unsigned long)x | (unsigned long)y) % 16 ? 0 : n / 4; // float4 needs 16-byte alignment
  int threads = 256;
  long want = (n4 + threads - 1) / threads;
  int blocks = (int)(want < 132 * 32 ? (want > 0 ? want : 1) : 132 * 32);
  ngelu_kernel<<<blocks, threads>>>((const float4*)x, (float4*)y, n4, x, y, n);
}
"""

cpp_source = r"""
#include <torch/extension.h>
void ngelu_launch(const float* x, float* y, long n);
torch::Tensor forward(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat, "a float32 cuda tensor");
  x = x.contiguous();
  auto y = torch::empty_like(x);
  ngelu_launch(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}
"""

ext = load_inline(name="ngelu_ext", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["forward"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.forward(x)
