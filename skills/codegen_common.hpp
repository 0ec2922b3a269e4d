// What the cpu and cuda generators share: literals, broadcast indexing and the formula of every
// elementwise op, written once and spelled per target through a dialect.
//   op + dialect --elementwise_formula--> "(x0 > 0.f ? x0 : x0 * 0.01f)"
#pragma once

#include "data/op_vocab.hpp"
#include "data/task_spec.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

struct codegen_dialect {
  const char* int_suffix;          // "LL" (C++) or "" (CUDA: int indices where they fit)
  const char *nan, *inf, *neg_inf; // spellings that need no headers
  const char *x0, *x1;             // operand names in formulas
  const char *exp, *tanh, *erf, *expm1, *log1p, *log, *sqrt, *fabs, *pow, *max, *min;
  const char* mish_fn; // a function of one argument, or nullptr: spelled out
};

extern const codegen_dialect cpu_dialect;
extern const codegen_dialect cuda_dialect;

std::string int_literal(int64_t v, const codegen_dialect& d);
// A float literal that round-trips through float.
std::string float_literal(double v, const codegen_dialect& d);

// Product of s[from, to).
int64_t shape_product(const shape_t& s, std::size_t from = 0, std::size_t to = SIZE_MAX);

// Index into a tensor of shape `operand` that broadcasts to `out`, from the linear index `i` of
// `out`. Runs of consecutive non-broadcast dims merge into one div/mod pair.
std::string broadcast_index(const shape_t& operand, const shape_t& out, const std::string& i,
                            const codegen_dialect& d);

// A conv / conv_transpose op's geometry, spatial lists padded to 3 dims with unit dims in front,
// so one loop nest serves 1d, 2d and 3d.
struct conv_geometry {
  bool transposed = false;
  int64_t batch = 0, ci = 0, co = 0, groups = 1;
  std::vector<int64_t> in, ker, out, stride, pad, dilation; // 3 entries each
};
conv_geometry conv_geometry_of(const task& t, const op_node& op);

// A reduction's input dims merged into runs (consecutive dims all kept or all reduced), in input
// order, each with the input stride of its last dim: the loop nest of sum / mean / amax / amin /
// prod / logsumexp / argmax / argmin over any set of dims. nout / nred: elements kept / reduced.
struct dim_run {
  int64_t extent, stride;
};
struct reduce_layout {
  std::vector<dim_run> kept, reduced;
  int64_t nout = 1, nred = 1;
  bool inner_reduced = false; // the input's innermost dim is reduced
};
reduce_layout reduce_layout_of(const shape_t& x, const op_node& op, op_family family);

// permute / transpose / slice / flip / pad as a strided read of a contiguous input x: output
// element (c_0, ..., c_r) reads x[base + sum c_d * stride[d]] (a flipped dim's stride is negative).
// pad: only where lo[d] <= c_d < lo[d] + extent[d] on every dim; elsewhere the element is `fill`.
struct strided_read {
  int64_t base = 0;
  std::vector<int64_t> stride;     // one per output dim
  std::vector<int64_t> lo, extent; // empty: every element reads x
  double fill = 0;
};
strided_read strided_read_of(const op_node& op, op_family family, const shape_t& x);

// A linear / matmul / bmm op as a batched row-major GEMM: for bi in [0, nb),
// C_bi[m, n] = A[a_off] (m x k) * B[b_off] (k x n, or n x k when trans_b) (+ bias). Operands are
// value names; offsets are element offsets spelled in `d` as expressions of the batch index `bi`.
// Batch modes: none = one matrix for every bi, full = consecutive matrices (offset bi * size),
// general = broadcast batch dims (offset through broadcast_index).
struct gemm_shape {
  int64_t nb = 1, m = 1, n = 1, k = 1;
  bool trans_b = false;
  std::string a, b, bias; // bias empty: none
  enum class batch { none, full, general } a_mode = batch::none, b_mode = batch::none;
  std::string a_off = "0", b_off = "0";
};
// `f` is the op's family (linear, matmul or bmm); shapes must be inferred (check_task).
gemm_shape gemm_shape_of(const task& t, const op_node& op, op_family f, const codegen_dialect& d);

// The formula of one unary or binary op on x0 (and x1), PyTorch semantics; "" for other ops.
std::string elementwise_formula(const op_node& op, const codegen_dialect& d);

} // namespace kiln
