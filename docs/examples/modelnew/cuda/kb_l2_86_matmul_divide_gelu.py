import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# The kernel is compiled by nvcc from a source that includes only the CUDA runtime; the binding
# (torch/extension.h, compiled by the host compiler) passes it raw pointers.
cuda_source = r"""
#include <cuda_runtime.h>
#include <math.h>

__global__ void div_gelu_kernel(float* __restrict__ y, long n, float a0) {
  long stride = (long)gridDim.x * blockDim.x;
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float x = y[i];
    
    y[i] = 0.5f * (x / a0) * (1.f + erff((x / a0) * 0.70710678118654752f));
  }
}

void div_gelu_launch(float* y, long n, float a0) {
  int threads = 256;
  long want = (n + threads - 1) / threads;
  int blocks = (int)(want < 132 * 32 ? (want > 0 ? want : 1) : 132 * 32);
  div_gelu_kernel<<<blocks, threads>>>(y, n, a0);
}
"""

cpp_source = r"""
#include <torch/extension.h>
void div_gelu_launch(float* y, long n, float a0);
torch::Tensor epilogue(torch::Tensor y, float a0) {
  TORCH_CHECK(y.is_cuda() && y.is_contiguous() && y.scalar_type() == torch::kFloat, "a dense float32 cuda tensor");
  
  div_gelu_launch(y.data_ptr<float>(), y.numel(), a0);
  return y;
}
"""

ext = load_inline(name="div_gelu_ext", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["epilogue"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)
        self.divisor = divisor

    def forward(self, x):
        return ext.epilogue(self.linear(x), self.divisor)
