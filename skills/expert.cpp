#include "skills/expert.hpp"

#include "data/op_vocab.hpp"
#include "skills/grammar.hpp"

#include <algorithm>

namespace kiln {

namespace {

int64_t pow2_at_least(int64_t x, int64_t lo, int64_t hi) {
  int64_t p = lo;
  while (p < x && p < hi) p *= 2;
  return p;
}

// Length of the rows a reduction or norm anchor works on (the reduced extent).
int64_t row_length(const task& t, const op_node& op) {
  const value_ref arg = find_value(t, op.args[0]);
  const shape_t& in = value_shape(t, arg);
  int64_t total = numel(in), out = std::max<int64_t>(1, numel(op.shape));
  const op_info* info = find_op(op.op);
  switch (info->family) {
  case op_family::softmax:
  case op_family::cumsum: {
    int64_t d = attr_int(op.attrs, "dim", -1);
    normalize_dim(d, in.size());
    return in.empty() ? 1 : in[d];
  }
  case op_family::batch_norm: return in.empty() ? 1 : total / in[1];
  case op_family::group_norm: return total / (in[0] * attr_int(op.attrs, "num_groups", 1));
  case op_family::instance_norm: return total / (in[0] * in[1]);
  case op_family::layer_norm:
  case op_family::rms_norm: {
    int64_t n = 1;
    for (auto d : attr_dims(op.attrs, "normalized_shape")) n *= d;
    return n;
  }
  default: return std::max<int64_t>(1, total / out);
  }
}

// cuda: at most one float4 per lane, so a warp's loads are 512 contiguous bytes (two float4 per
// lane split each warp access into strided halves: 73% of copy bandwidth on the H200).
int64_t vec_for(int64_t innermost, backend_kind backend) {
  for (int64_t v : {8, 4, 2})
    if (innermost % v == 0 && (backend == backend_kind::cpu || v <= 4)) return v;
  return 1;
}

} // namespace

program expert_program(const task& t, backend_kind backend) {
  program p;
  int64_t total = static_cast<int64_t>(t.ops.size());
  for (int64_t i = 0; i < total;) {
    int64_t n = std::min(max_group_ops, total - i);
    while (n > 1 && fitting_templates(t, i, n).empty()) --n;
    auto fits = fitting_templates(t, i, n);
    group g;
    g.first_op = i;
    g.num_ops = n;
    const op_node& anchor = t.ops[i];
    int64_t inner = anchor.shape.empty() ? 1 : anchor.shape.back();
    g.tmpl = fits.front();
    int64_t precision = t.tol.reduced_precision && backend == backend_kind::cuda ? 1 : 0;
    // Convolutions by the library on cuda only (cuDNN); on cpu the system BLAS is the reference
    // one, and im2col + its GEMM ran 3-9x slower than the direct template (session 8).
    bool conv_anchor = g.tmpl == kernel_template::conv;
    if (std::find(fits.begin(), fits.end(), kernel_template::library) != fits.end() &&
        (!conv_anchor || backend == backend_kind::cuda))
      g.tmpl = kernel_template::library;
    switch (g.tmpl) {
    case kernel_template::elementwise:
    case kernel_template::layout:
    case kernel_template::pool:
      g.knobs = {
          {knob::block, 256},
          {knob::vec, g.tmpl == kernel_template::pool ? 1 : vec_for(inner, backend)},
          {knob::unroll, backend == backend_kind::cuda && g.tmpl != kernel_template::pool ? 2 : 1},
          {knob::bounds, 1}};
      break;
    case kernel_template::library:
      g.knobs = {
          {knob::precision, precision}, {knob::block, 256}, {knob::vec, vec_for(inner, backend)}};
      break;
    case kernel_template::gemm:
      g.knobs = {{knob::tile_m, 64}, {knob::tile_n, 64},           {knob::tile_k, 16},
                 {knob::split_k, 1}, {knob::precision, precision}, {knob::stage, 1},
                 {knob::bounds, 1}};
      break;
    case kernel_template::conv:
      g.knobs = {{knob::tile_m, 16},
                 {knob::tile_n, 16},
                 {knob::unroll, 1},
                 {knob::precision, precision},
                 {knob::bounds, 1}};
      break;
    case kernel_template::norm:
    case kernel_template::reduce: {
      // cuda: float4 loads and up to 32 elements a thread, so rows of up to 32k stay in
      // registers (one read); a scan keeps one element a thread.
      int64_t row = row_length(t, anchor);
      bool cuda = backend == backend_kind::cuda;
      bool scan = find_op(anchor.op)->family == op_family::cumsum;
      int64_t vec = cuda && !scan ? 4 : 1;
      while (vec > 1 && row / vec < 32) vec /= 2; // a short row keeps every lane of a warp busy
      int64_t threads = cuda ? pow2_at_least(row / (8 * vec), 32, 1024) : 32;
      g.knobs = {{knob::threads, threads}, {knob::vec, vec}, {knob::onepass, 0}};
      break;
    }
    }
    p.groups.push_back(canonical(program{{g}}).groups.front());
    i += n;
  }
  return p;
}

} // namespace kiln
