// A kernel-language program: how a task (spec v1) is computed. The op list is cut into contiguous
// fusion groups; each group is one generated kernel (or a library call plus an epilogue kernel)
// built from a template whose knobs pick tiling, vector width, threads, precision and safety.
//   tokens --parse--> program --check(task)--> groups with templates --codegen(backend)--> source
#pragma once

#include "data/expected.hpp"
#include "data/task_spec.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

// Implementation templates. Which ones fit a group depends on the group's anchor (first) op.
enum class kernel_template {
  elementwise, // unary / binary chains with broadcasting
  gemm,        // linear / matmul / bmm computed by generated tiled loops, epilogue fused
  library, // linear / matmul / bmm by the host library (cpu: BLAS; cuda: cuBLASLt), epilogue fused
  conv,    // conv / conv_transpose, direct, epilogue fused
  pool,    // max / avg / adaptive pooling, epilogue fused
  norm,    // batch / group / layer / instance / rms norm, epilogue fused
  reduce,  // softmax, log_softmax, logsumexp, sum / mean / amax / amin / prod, arg*, cumsum
  layout,  // reshape, permute, transpose, flatten, dropout(p=0): a copy or a view
};
const char* to_string(kernel_template t);

// Knobs, each with a fixed set of values in the vocabulary. Not every template reads every knob;
// a template's knob list (template_knobs) fixes which appear and in which order.
enum class knob {
  block,     // cuda: threads per block; cpu: elements per parallel work item / 64
  vec,       // elements per vector load/store
  unroll,    // inner-loop unroll factor
  tile_m,    // gemm / conv: output tile rows (cpu: register/cache block)
  tile_n,    // gemm / conv: output tile columns
  tile_k,    // gemm: reduction tile
  split_k,   // gemm: split of the reduction across blocks / threads (atomic or two-pass)
  threads,   // reduce / norm: threads cooperating on one row (cuda: a power of two up to 1024)
  precision, // fp32 | tf32 | fp16: accumulation / math precision (lower is unsafe)
  stage,     // shared-memory staging (cuda) / packing (cpu): 0 off, 1 on
  bounds,    // 1 = bounds checks; 0 = assume divisible shapes (unsafe)
  onepass,   // norm: one-pass variance E[x^2]-E[x]^2 (faster, unsafe in precision)
};
const char* to_string(knob k);

const std::vector<kernel_template>& all_templates();
const std::vector<knob>& all_knobs();
// The vocabulary word of a knob value ("64", "tf32").
std::string knob_value_word(knob k, int64_t v);

enum class precision_mode { fp32 = 0, tf32 = 1, fp16 = 2 };

struct knob_setting {
  knob k;
  int64_t value;
};

struct group {
  int64_t first_op = 0; // index into task.ops
  int64_t num_ops = 1;
  kernel_template tmpl = kernel_template::elementwise;
  std::vector<knob_setting> knobs;

  int64_t get(knob k, int64_t fallback) const {
    for (const auto& s : knobs)
      if (s.k == k) return s.value;
    return fallback;
  }
};

struct program {
  std::vector<group> groups;
};

// Token form. Every token is one word of a fixed vocabulary (program_vocab).
//   program := group+ "end"
//   group   := "kernel" "ops" COUNT TEMPLATE (KNOB VALUE)*
// e.g. "kernel ops 3 gemm tile_m 64 tile_n 64 tile_k 16 split_k 1 precision fp32 stage 1 bounds 1
// end"
std::string print(const program& p);
expected<program> parse_program(const std::string& text);

// Canonical form: knobs in template order, knobs the template ignores dropped. Two programs with
// the same canonical text generate the same code (the compile cache keys on it).
program canonical(const program& p);

} // namespace kiln
