// The cuda code generator: a task and a checked program -> one CUDA C++ translation unit of
// `extern "C" __global__` kernels (no includes; NVRTC builds it) plus the launch plan that runs it.
// Shapes are compile-time constants; each fusion group becomes one kernel (norms and split
// reductions: two or three; library GEMMs: a cuBLASLt step then an epilogue kernel) whose anchor
// value passes through the group's elementwise epilogue in registers before its single store.
// Values between groups live in plan scratch buffers; reshape / flatten / dropout that no output
// names are views (no step).
//   task + program --generate_cuda--> {source, plan} --compile_nvrtc--> cubin --executor--> outputs
//
// Knobs, as generated (unsafe values fail for real, but never write out of bounds):
//   block / threads    threads per block; threads 32 = one warp per row, several rows per block
//   vec                float2 / float4 accesses (8 = two float4) where the extent divides, else
//   scalar unroll             units per thread per grid-stride step (elementwise), taps unrolled
//   bounds             no effect: tails and ragged tiles are guarded exactly where the constant
//                      shapes need it
//   stage              gemm: tiles through dynamic shared memory (else straight from global)
//   split_k            gemm: partial sums per slice into scratch, added in order by a second kernel
//   precision          tf32 rounds gemm / conv operands (cvt.rna.tf32); fp16 accumulates in half
//   onepass            norm variance as E[x^2] - E[x]^2
#pragma once

#include "data/expected.hpp"
#include "data/task_spec.hpp"
#include "skills/launch_plan.hpp"
#include "skills/program.hpp"

#include <string>

namespace kiln {

struct cuda_program {
  std::string source; // one translation unit for NVRTC
  launch_plan plan;
  bool fast_math = false; // every precision knob of the program asks for reduced precision
};

// Never crashes on a program that passes check_program; unsupported combinations (dtypes other
// than float32, int64 values read by later ops, outputs that are not op results) are errors.
expected<cuda_program> generate_cuda(const task& t, const program& p);

} // namespace kiln
