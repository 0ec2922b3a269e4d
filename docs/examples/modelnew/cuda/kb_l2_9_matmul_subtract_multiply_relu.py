import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# The kernel is compiled by nvcc from a source that includes only the CUDA runtime; the binding
# (torch/extension.h, compiled by the host compiler) passes it raw pointers.
cuda_source = r"""
#include <cuda_runtime.h>
#include <math.h>

__global__ void sub_mul_relu_kernel(float* __restrict__ y, long n, float a0, float a1) {
  long stride = (long)gridDim.x * blockDim.x;
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float x = y[i];
    
    y[i] = fmaxf((x - a0) * a1, 0.f);
  }
}

void sub_mul_relu_launch(float* y, long n, float a0, float a1) {
  int threads = 256;
  long want = (n + threads - 1) / threads;
  int blocks = (int)(want < 132 * 32 ? (want > 0 ? want : 1) : 132 * 32);
  sub_mul_relu_kernel<<<blocks, threads>>>(y, n, a0, a1);
}
"""

cpp_source = r"""
#include <torch/extension.h>
void sub_mul_relu_launch(float* y, long n, float a0, float a1);
torch::Tensor epilogue(torch::Tensor y, float a0, float a1) {
  TORCH_CHECK(y.is_cuda() && y.is_contiguous() && y.scalar_type() == torch::kFloat, "a dense float32 cuda tensor");
  
  sub_mul_relu_launch(y.data_ptr<float>(), y.numel(), a0, a1);
  return y;
}
"""

ext = load_inline(name="sub_mul_relu_ext", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["epilogue"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, subtract_value, multiply_value):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.subtract_value = subtract_value
        self.multiply_value = multiply_value

    def forward(self, x):
        return ext.epilogue(self.linear(x), self.subtract_value, self.multiply_value)
