//! kiln-source cuda
// Free-form cuda source for data/suites/level1/gpu/relu.toml (x: [61440, 16384] -> y0 = relu(x)):
// CUDA C++ compiled by nvcc into a shared object exporting kiln_cuda_run (skills/kiln_cuda_abi.h).
// Every launch goes on the stream it is given; the executor times that stream and refuses work
// that outlives it.
#include "kiln_cuda_abi.h"

#include <cuda_runtime.h>

namespace {

__global__ void relu(const float4* __restrict__ x, float4* __restrict__ y, long long n4) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  float4 v = x[i];
  v.x = fmaxf(v.x, 0.f);
  v.y = fmaxf(v.y, 0.f);
  v.z = fmaxf(v.z, 0.f);
  v.w = fmaxf(v.w, 0.f);
  y[i] = v;
}

} // namespace

extern "C" int kiln_cuda_run(const void* const* inputs, const void* const* /*params*/,
                             void* const* outputs, void* stream) {
  const long long n4 = 61440LL * 16384 / 4;
  relu<<<(unsigned)((n4 + 255) / 256), 256, 0, (cudaStream_t)stream>>>((const float4*)inputs[0],
                                                                       (float4*)outputs[0], n4);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
