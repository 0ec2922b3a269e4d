#include "skills/codegen_common.hpp"

#include "data/op_vocab.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <vector>

namespace kiln {

using std::string;

// cpu: branch-free helpers of the generated prelude (libm calls do not vectorize without fast
// math).
const codegen_dialect cpu_dialect = {"LL",
                                     "__builtin_nanf(\"\")",
                                     "__builtin_inff()",
                                     "(-__builtin_inff())",
                                     "a0",
                                     "a1",
                                     "kiln_exp",
                                     "kiln_tanh",
                                     "kiln_erf",
                                     "std::expm1",
                                     "std::log1p",
                                     "std::log",
                                     "std::sqrt",
                                     "std::fabs",
                                     "std::pow",
                                     "std::max",
                                     "std::min",
                                     "kiln_mish"};

// cuda: NVRTC's built-in device math; kmax / kmin come from the generated prelude.
const codegen_dialect cuda_dialect = {"",
                                      "__int_as_float(0x7fffffff)",
                                      "__int_as_float(0x7f800000)",
                                      "__int_as_float(0xff800000)",
                                      "x0",
                                      "x1",
                                      "expf",
                                      "tanhf",
                                      "erff",
                                      "expm1f",
                                      "log1pf",
                                      "logf",
                                      "sqrtf",
                                      "fabsf",
                                      "powf",
                                      "kmax",
                                      "kmin",
                                      nullptr};

string int_literal(int64_t v, const codegen_dialect& d) { return std::to_string(v) + d.int_suffix; }

string float_literal(double v, const codegen_dialect& d) {
  if (std::isnan(v)) return d.nan;
  if (std::isinf(v)) return v > 0 ? d.inf : d.neg_inf;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(static_cast<float>(v)));
  string s = buf;
  if (s.find_first_of(".e") == string::npos) s += ".0";
  return s + "f";
}

// All but the last `drop` dims (batch dims of a matrix operand); empty when there are no more.
shape_t leading_dims(const shape_t& s, std::size_t drop) {
  return shape_t(s.begin(),
                 s.begin() + static_cast<std::ptrdiff_t>(s.size() > drop ? s.size() - drop : 0));
}

int64_t shape_product(const shape_t& s, std::size_t from, std::size_t to) {
  // Iterators, not indices: g++ then sees the loop's bound (it warned of 2^61 iterations).
  auto last = s.begin() + static_cast<std::ptrdiff_t>(std::min(to, s.size()));
  auto first = s.begin() + static_cast<std::ptrdiff_t>(std::min(from, std::min(to, s.size())));
  return std::accumulate(first, last, int64_t{1}, std::multiplies<int64_t>());
}

string broadcast_index(const shape_t& operand, const shape_t& out, const string& i,
                       const codegen_dialect& dl) {
  if (operand == out) return i;
  if (shape_product(operand) == 1) return "0";
  std::size_t n = out.size(), pad = n - operand.size();
  std::vector<int64_t> ostride(n, 1), pstride(n, 0);
  for (std::size_t d = n; d-- > 1;) ostride[d - 1] = ostride[d] * out[d];
  int64_t s = 1;
  for (std::size_t d = n; d-- > pad;) {
    int64_t ext = operand[d - pad];
    pstride[d] = ext == 1 ? 0 : s;
    s *= ext;
  }
  string expr;
  for (std::size_t d = 0; d < n;) {
    if (pstride[d] == 0) {
      ++d;
      continue;
    }
    std::size_t e = d;
    int64_t ext = out[d];
    while (e + 1 < n && pstride[e + 1] != 0 && pstride[e] == pstride[e + 1] * out[e + 1])
      ext *= out[++e];
    string term = "(" + i + " / " + int_literal(ostride[e], dl) + ")";
    if (d > 0) term = "(" + term + " % " + int_literal(ext, dl) + ")";
    if (pstride[e] != 1) term += " * " + int_literal(pstride[e], dl);
    expr += (expr.empty() ? "" : " + ") + term;
    d = e + 1;
  }
  return expr.empty() ? "0" : "(" + expr + ")";
}

reduce_layout reduce_layout_of(const shape_t& x, const op_node& op, op_family family) {
  std::vector<int64_t> dims = attr_dims(op.attrs, "dim");
  if (family == op_family::arg_reduce || op.op == "prod")
    dims = has_attr(op.attrs, "dim") ? std::vector<int64_t>{attr_int(op.attrs, "dim", 0)}
                                     : std::vector<int64_t>{};
  std::vector<bool> reduced(x.size(), dims.empty());
  for (auto d : dims)
    if (normalize_dim(d, x.size())) reduced[d] = true;
  std::vector<int64_t> stride(x.size(), 1);
  for (std::size_t d = x.size(); d-- > 1;) stride[d - 1] = stride[d] * x[d];
  reduce_layout l;
  l.inner_reduced = !x.empty() && reduced.back();
  for (std::size_t d = 0; d < x.size();) {
    std::size_t e = d;
    int64_t ext = x[d];
    while (e + 1 < x.size() && reduced[e + 1] == reduced[d]) ext *= x[++e];
    (reduced[d] ? l.reduced : l.kept).push_back({ext, stride[e]});
    d = e + 1;
  }
  for (auto& k : l.kept) l.nout *= k.extent;
  for (auto& r : l.reduced) l.nred *= r.extent;
  return l;
}

gemm_shape gemm_shape_of(const task& t, const op_node& op, op_family f, const codegen_dialect& d) {
  gemm_shape g;
  const shape_t& sa = value_shape(t, find_value(t, op.args[0]));
  const shape_t& sb = value_shape(t, find_value(t, op.args[1]));
  g.a = op.args[0];
  g.b = op.args[1];
  auto lit = [&](int64_t v) { return int_literal(v, d); };
  if (f == op_family::linear) {
    g.k = sa.back();
    g.m = shape_product(sa) / g.k;
    g.n = sb[0];
    g.trans_b = true;
    if (op.args.size() > 2) g.bias = op.args[2];
    return g;
  }
  if (f == op_family::bmm) {
    g.nb = sa[0], g.m = sa[1], g.k = sa[2], g.n = sb[2];
    g.a_mode = g.b_mode = gemm_shape::batch::full;
    g.a_off = "bi * " + lit(g.m * g.k);
    g.b_off = "bi * " + lit(g.k * g.n);
    return g;
  }
  // torch.matmul, every rank case.
  if (sa.size() == 1 && sb.size() == 1) {
    g.k = sa[0];
    return g;
  }
  if (sb.size() == 1) { // [..., m, k] x [k]: fold the batch into m, n = 1
    g.k = sb[0];
    g.m = shape_product(sa) / g.k;
    return g;
  }
  g.k = sb[sb.size() - 2];
  g.n = sb.back();
  shape_t bb = leading_dims(sb, 2);
  if (sa.size() == 1) { // [k] x [..., k, n]
    g.nb = shape_product(bb);
    g.b_mode = gemm_shape::batch::full;
    g.b_off = "bi * " + lit(g.k * g.n);
    return g;
  }
  g.m = sa[sa.size() - 2];
  shape_t ba = leading_dims(sa, 2);
  if (shape_product(bb) == 1) { // b is one matrix: a's batch folds into m
    g.m = shape_product(sa) / g.k;
    return g;
  }
  shape_t out = leading_dims(op.shape, 2);
  g.nb = shape_product(out);
  if (shape_product(ba) != 1) {
    g.a_mode = shape_product(ba) == g.nb ? gemm_shape::batch::full : gemm_shape::batch::general;
    g.a_off = broadcast_index(ba, out, "bi", d) + " * " + lit(g.m * g.k);
  }
  g.b_mode = shape_product(bb) == g.nb ? gemm_shape::batch::full : gemm_shape::batch::general;
  g.b_off = broadcast_index(bb, out, "bi", d) + " * " + lit(g.k * g.n);
  return g;
}

conv_geometry conv_geometry_of(const task& t, const op_node& op) {
  const op_info* info = find_op(op.op);
  std::size_t sd = static_cast<std::size_t>(info->spatial);
  const shape_t& x = value_shape(t, find_value(t, op.args[0]));
  const shape_t& w = value_shape(t, find_value(t, op.args[1]));
  auto pad3 = [](std::vector<int64_t> v, int64_t fill) {
    while (v.size() < 3) v.insert(v.begin(), fill);
    return v;
  };
  conv_geometry g;
  g.transposed = info->family == op_family::conv_transpose;
  g.batch = x[0];
  g.ci = x[1];
  g.co = op.shape[1];
  g.groups = attr_int(op.attrs, "groups", 1);
  g.in = pad3(shape_t(x.begin() + 2, x.end()), 1);
  g.ker = pad3(shape_t(w.begin() + 2, w.end()), 1);
  g.out = pad3(shape_t(op.shape.begin() + 2, op.shape.end()), 1);
  g.stride = pad3(attr_ints(op.attrs, "stride", sd, 1), 1);
  g.pad = pad3(attr_ints(op.attrs, "padding", sd, 0), 0);
  g.dilation = pad3(attr_ints(op.attrs, "dilation", sd, 1), 1);
  return g;
}

string elementwise_formula(const op_node& op, const codegen_dialect& d) {
  const auto& a = op.attrs;
  const string& n = op.op;
  const string x = d.x0, y = d.x1;
  auto f = [&](const char* fn, const string& arg) { return string(fn) + "(" + arg + ")"; };
  auto lit = [&](double v) { return float_literal(v, d); };
  auto clamp = [&](const string& v, const string& lo, const string& hi) {
    return f(d.min, f(d.max, v + ", " + lo) + ", " + hi);
  };
  if (n == "relu") return "(" + x + " < 0.f ? 0.f : " + x + ")";
  if (n == "leaky_relu")
    return "(" + x + " > 0.f ? " + x + " : " + x + " * " +
           lit(attr_real(a, "negative_slope", 0.01)) + ")";
  if (n == "sigmoid") return "(1.f / (1.f + " + f(d.exp, "-" + x) + "))";
  if (n == "tanh") return f(d.tanh, x);
  if (n == "gelu") {
    if (attr_string(a, "approximate", "none") == "tanh")
      return "(0.5f * " + x + " * (1.f + " +
             f(d.tanh,
               "0.797884560802865f * (" + x + " + 0.044715f * " + x + " * " + x + " * " + x + ")") +
             "))";
    return "(0.5f * " + x + " * (1.f + " + f(d.erf, x + " * 0.707106781186547f") + "))";
  }
  if (n == "silu") return "(" + x + " / (1.f + " + f(d.exp, "-" + x) + "))";
  if (n == "mish")
    return d.mish_fn ? f(d.mish_fn, x) : "(" + x + " * " + f(d.tanh, f(d.log1p, f(d.exp, x))) + ")";
  if (n == "hardswish") return "(" + x + " * " + clamp(x + " + 3.f", "0.f", "6.f") + " / 6.f)";
  if (n == "hardsigmoid") return "(" + clamp(x + " + 3.f", "0.f", "6.f") + " / 6.f)";
  if (n == "hardtanh")
    return clamp(x, lit(attr_real(a, "min_val", -1.0)), lit(attr_real(a, "max_val", 1.0)));
  if (n == "elu")
    return "(" + x + " > 0.f ? " + x + " : " + lit(attr_real(a, "alpha", 1.0)) + " * " +
           f(d.expm1, x) + ")";
  if (n == "selu")
    return "(1.05070098735548f * (" + x + " > 0.f ? " + x + " : 1.67326324235437f * " +
           f(d.expm1, x) + "))";
  if (n == "softplus") {
    string b = lit(attr_real(a, "beta", 1.0)), th = lit(attr_real(a, "threshold", 20.0));
    return "(" + x + " * " + b + " > " + th + " ? " + x + " : " +
           f(d.log1p, f(d.exp, x + " * " + b)) + " / " + b + ")";
  }
  if (n == "softsign") return "(" + x + " / (1.f + " + f(d.fabs, x) + "))";
  if (n == "exp") return f(d.exp, x);
  if (n == "log") return f(d.log, x);
  if (n == "abs") return f(d.fabs, x);
  if (n == "neg") return "(-" + x + ")";
  if (n == "sqrt") return f(d.sqrt, x);
  if (n == "rsqrt") return "(1.f / " + f(d.sqrt, x) + ")";
  if (n == "clamp") {
    string e = x;
    if (has_attr(a, "min")) e = f(d.max, e + ", " + lit(attr_real(a, "min", 0)));
    if (has_attr(a, "max")) e = f(d.min, e + ", " + lit(attr_real(a, "max", 0)));
    return e;
  }
  if (n == "add") return "(" + x + " + " + y + ")";
  if (n == "sub") return "(" + x + " - " + y + ")";
  if (n == "mul") return "(" + x + " * " + y + ")";
  if (n == "div") return "(" + x + " / " + y + ")";
  // NaN propagates as in torch.maximum / minimum.
  if (n == "maximum")
    return "((" + x + " != " + x + " || " + x + " > " + y + ") ? " + x + " : " + y + ")";
  if (n == "minimum")
    return "((" + x + " != " + x + " || " + x + " < " + y + ") ? " + x + " : " + y + ")";
  if (n == "pow") {
    if (op.args.size() == 1) {
      double s = attr_real(a, "scalar", 1.0);
      if (s == 2.0) return "(" + x + " * " + x + ")";
      if (s == 3.0) return "(" + x + " * " + x + " * " + x + ")";
      if (s == 1.0) return x;
      if (s == 0.5) return f(d.sqrt, x);
    }
    return f(d.pow, x + ", " + y);
  }
  return "";
}

strided_read strided_read_of(const op_node& op, op_family family, const shape_t& x) {
  std::vector<int64_t> in_stride(x.size(), 1);
  for (std::size_t d = x.size(); d-- > 1;) in_stride[d - 1] = in_stride[d] * x[d];
  strided_read r;
  r.stride = in_stride;
  if (family == op_family::permute) {
    auto perm = attr_dims(op.attrs, "dims");
    for (std::size_t d = 0; d < perm.size() && d < r.stride.size(); ++d) {
      normalize_dim(perm[d], x.size());
      r.stride[d] = in_stride[perm[d]];
    }
  } else if (family == op_family::transpose) {
    int64_t d0 = attr_int(op.attrs, "dim0", 0), d1 = attr_int(op.attrs, "dim1", 0);
    if (!x.empty() && normalize_dim(d0, x.size()) && normalize_dim(d1, x.size()))
      std::swap(r.stride[d0], r.stride[d1]);
  } else if (family == op_family::flip) {
    for (auto d : attr_dims(op.attrs, "dims")) {
      if (!normalize_dim(d, x.size())) continue;
      r.base += (x[d] - 1) * in_stride[d];
      r.stride[d] = -in_stride[d];
    }
  } else if (family == op_family::slice) {
    if (auto w = slice_window_of(op.attrs, x)) {
      r.base = w->start * in_stride[w->dim];
      r.stride[w->dim] *= w->step;
    }
  } else if (family == op_family::pad) {
    if (auto w = pad_widths_of(op.attrs, x)) {
      for (std::size_t d = 0; d < x.size(); ++d) r.base -= w->before[d] * in_stride[d];
      r.lo = w->before;
      r.extent = x;
      r.fill = attr_real(op.attrs, "value", 0.0);
    }
  }
  return r;
}

} // namespace kiln
