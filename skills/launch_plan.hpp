// How to run a generated cuda program, as data: the executor allocates the scratch buffers, then
// walks the steps in order on one stream (kernel launches and library GEMMs), so it needs no
// per-kernel host code. Plain structs with a JSON form that travels to the executor process.
//   generate_cuda --launch_plan--> to_json --wire--> plan_from_json --> executor: cuLaunchKernel /
//   cuBLASLt
#pragma once

#include "data/expected.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

// A device buffer. Inputs, params and outputs follow the task's declaration order (float32, dense,
// row-major; argmax / argmin outputs int64). Scratch buffers are owned by the executor for the
// duration of one run, each allocated separately. Every buffer must be at least 16-byte aligned
// (cudaMalloc gives 256): kernels use float4 accesses from a buffer's start.
enum class buffer_kind { input, param, output, scratch };
const char* to_string(buffer_kind k);

struct buffer_ref {
  buffer_kind kind = buffer_kind::input;
  int32_t index = 0;
  bool operator==(const buffer_ref& o) const { return kind == o.kind && index == o.index; }
};

enum class access { read, write, read_write };

// One kernel parameter, in the kernel's parameter order: a device pointer (8 bytes) or a scalar
// passed by value (int64: 8 bytes; float32: 4 bytes).
struct kernel_arg {
  enum class kind { buffer, i64, f32 } k = kind::buffer;
  buffer_ref buffer;
  access mode = access::read;
  int64_t i64 = 0;
  float f32 = 0.f;
};

struct dim3_t {
  uint32_t x = 1, y = 1, z = 1;
  uint64_t count() const { return uint64_t{x} * y * z; }
};

struct kernel_step {
  std::string kernel; // extern "C" name in the program's source
  dim3_t grid, block;
  uint32_t shared_bytes = 0; // dynamic; above 48 KiB the executor raises the function's limit first
  std::vector<kernel_arg> args;
};

// Math of a library GEMM. fp16_accumulate: products of fp16-rounded operands, reduced in fp16 or
// better (cuBLASLt: CUBLAS_COMPUTE_32F_FAST_16F on fp32 data is the suggested mapping).
enum class gemm_precision { fp32, tf32, fp16_accumulate };
const char* to_string(gemm_precision p);

// Row-major, like kiln_abi.h's sgemm: for b in [0, batch):
//   C_b[m, n] = alpha * op(A_b)[m, k] * op(B_b)[k, n] + beta * C_b
// where X_b starts stride_x elements after X (stride 0: the same matrix for every b), op
// transposes when trans_x is set, and ld* are the row strides of A, B and C as stored. An executor
// on column-major cuBLASLt computes C^T = op(B)^T op(A)^T: swap A and B, m and n, keep the flags.
struct gemm_step {
  int64_t m = 1, n = 1, k = 1, batch = 1;
  bool trans_a = false, trans_b = false;
  int64_t lda = 1, ldb = 1, ldc = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  buffer_ref a, b, c;
  float alpha = 1.f, beta = 0.f;
  gemm_precision precision = gemm_precision::fp32;
};

// A library convolution (cuda: cuDNN) on dense NC[D]HW float32 data, no bias (the epilogue kernel
// adds it). Spatial lists have 3 entries, unit dims in front for 1d / 2d. Forward: x [batch, ci,
// in], w [co, ci / groups, ker], y [batch, co, out]. transposed (conv_transpose): w [ci, co /
// groups, ker], computed as the backward-data pass of the forward conv from y to x, so `in` must
// be what that forward conv makes of `out`. precision: fp32 exact; tf32 lets tensor cores round
// operands to tf32; fp16_accumulate lets the library convert them to fp16.
struct conv_step {
  int32_t spatial = 2; // 1, 2 or 3
  bool transposed = false;
  int64_t batch = 1, ci = 1, co = 1, groups = 1;
  std::vector<int64_t> in, ker, out, stride, pad, dilation;
  buffer_ref x, w, y;
  gemm_precision precision = gemm_precision::fp32;
};

struct plan_step {
  enum class kind { kernel, gemm, conv } k = kind::kernel;
  kernel_step kernel; // k == kernel
  gemm_step gemm;     // k == gemm; an epilogue kernel, when needed, is the next step
  conv_step conv;     // k == conv; likewise
};

struct launch_plan {
  int32_t version = 1;
  int32_t num_inputs = 0, num_params = 0, num_outputs = 0;
  std::vector<int64_t> output_bytes;  // per output, for poisoning and copies
  std::vector<int64_t> scratch_bytes; // per scratch buffer
  std::vector<plan_step> steps;
};

// Hardware limits a plan must respect (Hopper defaults).
struct plan_limits {
  uint32_t max_threads_per_block = 1024;
  uint32_t max_shared_bytes = 227 * 1024;
  uint32_t max_grid_x = 0x7fffffffu, max_grid_yz = 65535;
  uint32_t max_block_xy = 1024, max_block_z = 64;
};

// A conv step's geometry alone (check_plan runs it on every conv step); `at` prefixes the error.
status check_conv(const conv_step& c, const std::string& at);

// Every binding in range, launch shapes within the limits, every output written by some step,
// every scratch buffer written before it is read.
status check_plan(const launch_plan& p, const plan_limits& limits = {});

std::string to_json(const launch_plan& p);
// Rejects malformed text, unknown enum words and missing fields with a message naming the field.
expected<launch_plan> plan_from_json(const std::string& text);

} // namespace kiln
