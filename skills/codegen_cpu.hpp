// The cpu code generator: a task and a checked program -> one C++ translation unit that implements
// kiln_run (skills/kiln_abi.h). Shapes are compile-time constants; each fusion group becomes one
// loop nest whose anchor value passes through the group's elementwise epilogue in registers before
// its single store. Values between groups live in host->alloc scratch; task outputs are written in
// place.
//   task + program --generate_cpu--> source --compile_cpu--> .so --cpu_program::run--> outputs
//
// The source includes only kiln_abi.h and <cmath>/<cstdint>/<cstring>/<algorithm>, so g++ builds it
// in well under a second. `bounds 0` drops the remainder handling only where vec / the tiles divide
// the extent. Unsafe knob values are generated as asked and fail for real:
//   precision    tf32 rounds GEMM / conv inputs to a 10-bit mantissa; fp16 accumulates in _Float16
//   onepass 1    norm variance as E[x^2] - E[x]^2 in float
#pragma once

#include "data/expected.hpp"
#include "data/task_spec.hpp"
#include "skills/program.hpp"

#include <string>

namespace kiln {

// Never crashes on a program that passes check_program; unsupported combinations (dtypes other
// than float32, int64 values read by later ops) come back as errors.
expected<std::string> generate_cpu(const task& t, const program& p);

} // namespace kiln
