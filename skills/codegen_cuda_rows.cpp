// The cuda generator's row kernels: norms (statistics then apply), softmax / log_softmax / cumsum
// along a dim, and reductions over any set of dims.
#include "skills/codegen_cuda_gen.hpp"

namespace kiln::cuda_gen {

namespace {

// How many threads of a row kernel a block holds: threads 32 puts four rows (warps) in a block.
int64_t rows_per_block(int64_t T) { return T == 32 ? 4 : 1; }

// The row index and lane of a row kernel; rows past the end return (warp-only reductions there).
string row_header(int64_t T, int64_t rows) {
  std::ostringstream o;
  o << "  constexpr int T = " << T << ";\n"
    << "  const I row = (I)blockIdx.x * " << rows_per_block(T) << " + threadIdx.x / T;\n"
    << "  const int tid = threadIdx.x % T;\n";
  if (rows_per_block(T) > 1) o << "  if (row >= " << lit(rows) << ") return;\n";
  return o.str();
}

// ---- norms: each statistics row is SEGS segments of LEN contiguous elements, SA apart, starting
// at row * BM; the affine parameter of linear index i is widx(i). ----
struct norm_geom {
  int64_t rows = 1, segs = 1, len = 1, sa = 0, bm = 1, count = 1;
  int64_t s = 1, channels = 1; // widx: (i / s) % channels, or i % len for layer / rms norm
  bool by_channel = true;
  string widx(const string& i) const {
    return by_channel ? "((" + i + ") / " + lit(s) + ") % " + lit(channels)
                      : "(" + i + ") % " + lit(len);
  }
  // The stats row of linear index i.
  string row_of(const string& i, op_family f) const {
    if (f == op_family::batch_norm) return "((" + i + ") / " + lit(len) + ") % " + lit(rows);
    return "(" + i + ") / " + lit(len);
  }
};

norm_geom norm_geometry(const op_node& op, const op_info& info, const shape_t& x) {
  norm_geom n;
  int64_t total = prod(x);
  switch (info.family) {
  case op_family::batch_norm: {
    int64_t s = total / (x[0] * x[1]);
    n.rows = x[1], n.segs = x[0], n.len = s, n.sa = x[1] * s, n.bm = s;
    n.s = s, n.channels = x[1];
    break;
  }
  case op_family::group_norm: {
    int64_t s = x.size() > 2 ? total / (x[0] * x[1]) : 1, ng = attr_int(op.attrs, "num_groups", 1);
    n.rows = x[0] * ng, n.len = total / n.rows, n.bm = n.len;
    n.s = s, n.channels = x[1];
    break;
  }
  case op_family::instance_norm: {
    int64_t s = total / (x[0] * x[1]);
    n.rows = x[0] * x[1], n.len = s, n.bm = s;
    n.s = s, n.channels = x[1];
    break;
  }
  default: { // layer_norm, rms_norm: the trailing normalized_shape
    n.len = prod(attr_dims(op.attrs, "normalized_shape"));
    n.rows = total / n.len, n.bm = n.len;
    n.by_channel = false;
    break;
  }
  }
  n.count = n.segs * n.len;
  return n;
}

// Normalizes lanes r[0..V) in place at indices i..: (x - mean) * rstd, then weight and bias.
string norm_affine(gen& g, kernel_builder& kb, const op_node& op, const norm_geom& ng, int64_t V) {
  std::ostringstream s;
  string w = op.args.size() > 1 ? g.rd(kb, op.args[1]) : "",
         b = op.args.size() > 2 ? g.rd(kb, op.args[2]) : "";
  s << "#pragma unroll\n      for (int l = 0; l < " << V << "; ++l) {\n"
    << "        float v = (r[l] - mean) * rstd;\n";
  if (!w.empty()) s << "        v = v * " << w << "[" << ng.widx("i + l") << "];\n";
  if (!b.empty()) s << "        v = v + " << b << "[" << ng.widx("i + l") << "];\n";
  s << "        r[l] = v;\n      }\n";
  return s.str();
}

// A statistics row of a norm in units of V contiguous elements: unit q of the row starts at
// base + (q / LENV) * SA + (q % LENV) * V (LENV = LEN / V; V divides LEN, SA and BM).
string unit_offset(const norm_geom& ng, int64_t V, const string& q) {
  if (ng.segs == 1) return "(" + q + ") * " + std::to_string(V);
  return "((" + q + ") / LENV) * SA + ((" + q + ") % LENV) * " + std::to_string(V);
}

// Code folding the V values xs[0..V) into st: a sum of squares (rms), sums of x and x^2
// (onepass), or Chan's (mean, M2, count) of the vector merged in (an exact variance in one pass).
string stat_accumulate(bool rms, bool onepass, int64_t V) {
  std::ostringstream o;
  string v = std::to_string(V);
  if (rms || onepass) {
    o << "#pragma unroll\n      for (int e = 0; e < " << v
      << "; ++e) { const float x = xs[e]; st.v += " << (rms ? "x * x" : "x") << ";"
      << (onepass ? " st.s += x * x;" : "") << " }\n";
    return o.str();
  }
  o << "      float mv = 0.f, m2v = 0.f;\n"
    << "#pragma unroll\n      for (int e = 0; e < " << v << "; ++e) mv += xs[e];\n"
    << "      mv *= " << flit(1.0 / static_cast<double>(V)) << ";\n"
    << "#pragma unroll\n      for (int e = 0; e < " << v
    << "; ++e) { const float d = xs[e] - mv; m2v += d * d; }\n"
    << "      r_chan::merge(st, rstate{mv, m2v, " << v << "});\n";
  return o.str();
}

// A row of UN units in registers: unit q = tid + k * T (k < K) of the row into xs[k] from
// X + base + offset(q), units past the row (ragged) filled with `pad`. With `track_max`, the row's
// maximum m over every thread as well (shf: 32 floats of shared memory).
string load_row_registers(const string& X, const string& offset_of_q, int64_t K, int64_t V,
                          bool ragged, const string& pad, bool track_max) {
  std::ostringstream o;
  o << "  float xs[" << K << "][" << V << "];\n";
  if (track_max) o << "  float m = -KILN_INF;\n";
  o << "#pragma unroll\n  for (int k = 0; k < " << K << "; ++k) {\n"
    << "    const I q = (I)tid + k * T;\n";
  if (ragged)
    o << "    if (q >= UN) {\n#pragma unroll\n      for (int e = 0; e < " << V
      << "; ++e) xs[k][e] = " << pad << ";\n      continue;\n    }\n";
  o << "    kld<" << V << ">(" << X << " + base + " << offset_of_q << ", xs[k]);\n";
  if (track_max)
    o << "#pragma unroll\n    for (int e = 0; e < " << V << "; ++e) m = kmax(m, xs[k][e]);\n";
  o << "  }\n";
  if (track_max) o << "  m = kallreduce<f_max, T>(m, shf);\n";
  return o.str();
}

} // namespace

void emit_norm(gen& g, const group& grp, const string& pfx, const op_node& op, const op_info& info,
               const string& dst) {
  const shape_t& x = g.shape(op.args[0]);
  norm_geom ng = norm_geometry(op, info, x);
  bool rms = info.family == op_family::rms_norm;
  bool onepass = grp.get(knob::onepass, 0) != 0 && !rms;
  bool exact = !rms && !onepass;
  double eps = attr_real(op.attrs, "eps", rms ? 1.1920928955078125e-07 : 1e-5);
  int64_t T = grp.get(knob::threads, 128);
  int64_t V = fit_vec(grp.get(knob::vec, 1), {ng.len, ng.sa, ng.bm});
  const int64_t units = ng.count / V; // per statistics row
  string cnt = flit(static_cast<double>(ng.count)), feps = flit(eps);
  string R = exact ? "r_chan" : "r_sum";
  auto geometry = [&](std::ostringstream& o) {
    o << "  constexpr I LENV = " << lit(ng.len / V) << ", SA = " << lit(ng.sa)
      << ", UN = " << lit(units) << ";\n"
      << "  const I base = row * " << lit(ng.bm) << ";\n";
  };
  // Few long rows: split each row's statistics over P blocks (Chan's combination), then apply.
  int64_t P = 1;
  if (ng.rows < 2 * kSms && ng.count >= 65536)
    P = std::clamp<int64_t>(ceil_div(4 * kSms, ng.rows), 1,
                            std::min<int64_t>(1024, std::max<int64_t>(1, units / (T * 4))));
  // The apply loop: unit q's V outputs, normalized, the epilogue, stored.
  auto apply_unit = [&](kernel_builder& kb, const string& load) {
    std::ostringstream s;
    s << "      const I i = base + " << unit_offset(ng, V, "q") << ";\n"
      << "      float r[" << V << "];\n"
      << load << norm_affine(g, kb, op, ng, V) << epilogue(g, kb, grp, V) << "      kst<" << V
      << ">(" << dst << " + i, r);\n";
    return s.str();
  };
  // Rows that fit in registers (at most 8 units a thread): one read of the input.
  const int64_t K = ceil_div(units, T);
  if (P == 1 && K <= 8 && K * V <= 32) {
    kernel_builder kb;
    kb.name = pfx + "_norm";
    auto& o = kb.body;
    string X = g.rd(kb, op.args[0]);
    bool ragged = units % T != 0;
    string guard = ragged ? "      if (q >= UN) continue;\n" : "";
    o << "  __shared__ float shf[32];\n" << row_header(T, ng.rows);
    geometry(o);
    o << load_row_registers(X, unit_offset(ng, V, "q"), K, V, ragged, "0.f", false)
      << "  float s1 = 0.f, s2 = 0.f;\n"
      << "#pragma unroll\n  for (int k = 0; k < " << K << "; ++k)\n#pragma unroll\n"
      << "    for (int e = 0; e < " << V
      << "; ++e) { const float x = xs[k][e]; s1 += " << (rms ? "x * x" : "x") << ";"
      << (onepass ? " s2 += x * x;" : "") << " }\n"
      << "  s1 = kallreduce<f_add, T>(s1, shf);\n";
    if (onepass) o << "  s2 = kallreduce<f_add, T>(s2, shf);\n";
    if (rms) {
      o << "  const float mean = 0.f, rstd = 1.f / sqrtf(s1 / " << cnt << " + " << feps << ");\n";
    } else if (onepass) {
      o << "  const float mean = s1 / " << cnt << ";\n"
        << "  const float rstd = 1.f / sqrtf(kmax(s2 / " << cnt << " - mean * mean, 0.f) + " << feps
        << ");\n";
    } else {
      o << "  const float mean = s1 / " << cnt << ";\n"
        << "#pragma unroll\n  for (int k = 0; k < " << K << "; ++k) {\n"
        << "    const I q = (I)tid + k * T;\n"
        << (ragged ? "    if (q >= UN) continue;\n" : "") << "#pragma unroll\n"
        << "    for (int e = 0; e < " << V
        << "; ++e) { const float d = xs[k][e] - mean; s2 += d * d; }\n"
        << "  }\n"
        << "  s2 = kallreduce<f_add, T>(s2, shf);\n"
        << "  const float rstd = 1.f / sqrtf(s2 / " << cnt << " + " << feps << ");\n";
    }
    g.use(kb, dst, true);
    std::ostringstream load;
    load << "#pragma unroll\n      for (int e = 0; e < " << V << "; ++e) r[e] = xs[k][e];\n";
    o << "#pragma unroll\n  for (int k = 0; k < " << K << "; ++k) {\n"
      << "    {\n      const I q = (I)tid + k * T;\n"
      << guard << apply_unit(kb, load.str()) << "    }\n  }\n";
    g.launch(kb, ceil_div(ng.rows, rows_per_block(T)), T * rows_per_block(T));
    return;
  }
  // One pass for the statistics over units [u0, u1) of the row, then the block's reduction.
  auto stat_loop = [&](std::ostringstream& o, const string& X, const string& u0, const string& u1) {
    o << "  rstate st = " << R << "::init();\n"
      << "  for (I q = " << u0 << " + (I)tid; q < " << u1 << "; q += T) {\n"
      << "      float xs[" << V << "];\n"
      << "      kld<" << V << ">(" << X << " + base + " << unit_offset(ng, V, "q") << ", xs);\n"
      << stat_accumulate(rms, onepass, V) << "  }\n"
      << "  st = kreduce<" << R << ", T>(st, sh);\n";
  };
  if (P == 1) {
    kernel_builder kb;
    kb.name = pfx + "_norm";
    auto& o = kb.body;
    string X = g.rd(kb, op.args[0]);
    o << "  __shared__ rstate sh[32];\n" << row_header(T, ng.rows);
    geometry(o);
    stat_loop(o, X, "0", "UN");
    if (rms) {
      o << "  const float mean = 0.f, rstd = 1.f / sqrtf(st.v / " << cnt << " + " << feps << ");\n";
    } else if (onepass) {
      o << "  const float mean = st.v / " << cnt << ";\n"
        << "  const float rstd = 1.f / sqrtf(kmax(st.s / " << cnt << " - mean * mean, 0.f) + "
        << feps << ");\n";
    } else {
      o << "  const float mean = st.v;\n"
        << "  const float rstd = 1.f / sqrtf(st.s / " << cnt << " + " << feps << ");\n";
    }
    g.use(kb, dst, true);
    string load = "      kld<" + std::to_string(V) + ">(" + X + " + i, r);\n";
    o << "  for (I q = (I)tid; q < UN; q += T) {\n" << apply_unit(kb, load) << "  }\n";
    g.launch(kb, ceil_div(ng.rows, rows_per_block(T)), T * rows_per_block(T));
    return;
  }
  // 1. partial statistics: block b = row * P + chunk -> (count, mean, M2) or (count, sum, sum of
  // squares); chunk c covers units [c * UN / P, (c + 1) * UN / P) of the row.
  string part = g.scratch(ng.rows * P * 4), stats = g.scratch(ng.rows * 2);
  {
    kernel_builder kb;
    kb.name = pfx + "_norm_part";
    auto& o = kb.body;
    string X = g.rd(kb, op.args[0]);
    g.use(kb, part, true);
    o << "  __shared__ rstate sh[32];\n"
      << "  constexpr int T = " << T << ";\n"
      << "  constexpr I P = " << P << ";\n"
      << "  const I row = blockIdx.x / P, c = blockIdx.x % P;\n"
      << "  const int tid = threadIdx.x;\n";
    geometry(o);
    o << "  const I u0 = (I)((long long)c * UN / P), u1 = (I)((long long)(c + 1) * UN / P);\n";
    stat_loop(o, X, "u0", "u1");
    o << "  if (tid == 0) { " << part << "[blockIdx.x * 4] = (float)((u1 - u0) * " << V << "); "
      << part << "[blockIdx.x * 4 + 1] = st.v; " << part << "[blockIdx.x * 4 + 2] = st.s; " << part
      << "[blockIdx.x * 4 + 3] = 0.f; }\n";
    g.launch(kb, ng.rows * P, T);
  }
  // 2. one thread per row combines its chunks in order -> (mean, rstd)
  {
    kernel_builder kb;
    kb.name = pfx + "_norm_stats";
    auto& o = kb.body;
    g.use(kb, part, false);
    g.use(kb, stats, true);
    o << "  const I row = (I)blockIdx.x * 128 + threadIdx.x;\n"
      << "  if (row >= " << lit(ng.rows) << ") return;\n"
      << "  const float* q = " << part << " + row * " << P * 4 << ";\n";
    if (rms || onepass) {
      o << "  float s1 = 0.f, s2 = 0.f;\n"
        << "  for (int c = 0; c < " << P << "; ++c) { s1 += q[c * 4 + 1]; s2 += q[c * 4 + 2]; }\n";
      if (rms)
        o << "  const float mean = 0.f, rstd = 1.f / sqrtf(s1 / " << cnt << " + " << feps << ");\n";
      else
        o << "  const float mean = s1 / " << cnt << ";\n"
          << "  const float rstd = 1.f / sqrtf(kmax(s2 / " << cnt << " - mean * mean, 0.f) + "
          << feps << ");\n";
    } else {
      o << "  float n = 0.f, mean = 0.f, m2 = 0.f;\n"
        << "  for (int c = 0; c < " << P << "; ++c) {\n"
        << "    const float nb = q[c * 4], mb = q[c * 4 + 1], m2b = q[c * 4 + 2];\n"
        << "    if (nb == 0.f) continue;\n"
        << "    const float nn = n + nb, delta = mb - mean;\n"
        << "    mean += delta * (nb / nn);\n"
        << "    m2 += m2b + delta * delta * (n * nb / nn);\n"
        << "    n = nn;\n"
        << "  }\n"
        << "  const float rstd = 1.f / sqrtf(m2 / " << cnt << " + " << feps << ");\n";
    }
    o << "  " << stats << "[row * 2] = mean;\n  " << stats << "[row * 2 + 1] = rstd;\n";
    g.launch(kb, ceil_div(ng.rows, 128), 128);
  }
  // 3. apply, elementwise
  kernel_builder kb;
  kb.name = pfx + "_norm_apply";
  string X = g.rd(kb, op.args[0]);
  g.use(kb, stats, false);
  int64_t n = prod(x);
  emit_driver(g, kb, dst, n, fit_vec(grp.get(knob::vec, 1), {n, ng.len}), 1, 256, [&](int64_t v) {
    std::ostringstream s;
    s << "      kld<" << v << ">(" << X << " + i, r);\n"
      << "#pragma unroll\n      for (int l = 0; l < " << v << "; ++l) {\n"
      << "        const I row = " << ng.row_of("i + l", info.family) << ";\n"
      << "        const float mean = " << stats << "[row * 2], rstd = " << stats
      << "[row * 2 + 1];\n"
      << "        r[l] = (r[l] - mean) * rstd;\n      }\n"
      << "      {\n        const float mean = 0.f, rstd = 1.f;\n"
      << norm_affine(g, kb, op, ng, v) << "      }\n"
      << epilogue(g, kb, grp, v);
    return s.str();
  });
}

// ---- softmax / log_softmax / cumsum along one dim: rows of L elements IN apart ----
void emit_softmax_like(gen& g, const group& grp, const string& pfx, const op_node& op,
                       const op_info& info, const string& dst) {
  const shape_t& x = g.shape(op.args[0]);
  bool cumsum = info.family == op_family::cumsum;
  int64_t dim = attr_int(op.attrs, "dim", cumsum ? 0 : -1);
  normalize_dim(dim, x.size());
  int64_t len = x.empty() ? 1 : x[dim], inner = x.empty() ? 1 : prod(x, dim + 1),
          outer = x.empty() ? 1 : prod(x, 0, dim);
  int64_t T = grp.get(knob::threads, 128);
  bool log = op.op == "log_softmax";
  kernel_builder kb;
  kb.name = pfx + (cumsum ? "_cumsum" : "_softmax");
  auto& o = kb.body;
  string X = g.rd(kb, op.args[0]);
  if (inner > 1) { // one thread per column: coalesced across the inner dim
    int64_t cols = outer * inner, block = std::max<int64_t>(T, 64);
    g.use(kb, dst, true);
    o << "  const I c = (I)blockIdx.x * " << block << " + threadIdx.x;\n"
      << "  if (c >= " << lit(cols) << ") return;\n"
      << "  constexpr I L = " << lit(len) << ", IN = " << lit(inner) << ";\n"
      << "  const I base = (c / IN) * (L * IN) + c % IN;\n";
    if (cumsum) {
      o << "  float acc = 0.f;\n"
        << "  for (I l = 0; l < L; ++l) {\n"
        << "    const I i = base + l * IN;\n"
        << "    acc += " << X << "[i];\n"
        << "    float r[1] = {acc};\n"
        << "    {\n"
        << epilogue(g, kb, grp, 1) << "    }\n"
        << "    " << dst << "[i] = r[0];\n  }\n";
    } else {
      o << "  rstate st = r_lse::init();\n"
        << "  for (I l = 0; l < L; ++l) r_lse::add(st, " << X << "[base + l * IN], 0);\n"
        << "  const float m = st.v, inv = 1.f / st.s, ls = logf(st.s);\n"
        << "  for (I l = 0; l < L; ++l) {\n"
        << "    const I i = base + l * IN;\n"
        << "    float r[1] = {" << (log ? X + "[i] - m - ls" : "expf(" + X + "[i] - m) * inv")
        << "};\n"
        << "    {\n"
        << epilogue(g, kb, grp, 1) << "    }\n"
        << "    " << dst << "[i] = r[0];\n  }\n";
    }
    g.launch(kb, ceil_div(cols, block), block);
    return;
  }
  int64_t V = fit_vec(grp.get(knob::vec, 1), {len});
  o << row_header(T, outer) << "  constexpr I L = " << lit(len) << ";\n  const I base = row * L;\n";
  g.use(kb, dst, true);
  if (cumsum) {
    o << "  __shared__ float sh[32];\n"
      << "  float carry = 0.f;\n"
      << "  for (I t0 = 0; t0 < L; t0 += T * " << V << ") {\n"
      << "    const I l0 = t0 + (I)tid * " << V << ";\n"
      << "    float xs[" << V << "];\n"
      << "    if (l0 < L) kld<" << V << ">(" << X << " + base + l0, xs);\n"
      << "    else for (int u = 0; u < " << V << "; ++u) xs[u] = 0.f;\n"
      << "#pragma unroll\n    for (int u = 1; u < " << V << "; ++u) xs[u] += xs[u - 1];\n"
      << "    float tot;\n"
      << "    const float ex = kscan<T>(xs[" << V - 1 << "], sh, tot) - xs[" << V - 1 << "];\n"
      << "    if (l0 < L) {\n"
      << "      const I i = base + l0;\n"
      << "      float r[" << V << "];\n"
      << "#pragma unroll\n      for (int u = 0; u < " << V
      << "; ++u) r[u] = carry + (ex + xs[u]);\n"
      << epilogue(g, kb, grp, V) << "      kst<" << V << ">(" << dst << " + i, r);\n"
      << "    }\n"
      << "    carry += tot;\n"
      << "  }\n";
  } else if (const int64_t units = len / V, K = ceil_div(units, T); K <= 8 && K * V <= 32) {
    // The row in registers (at most 8 units a thread): one read, max, sum of exps, write.
    bool ragged = units % T != 0;
    o << "  __shared__ float shf[32];\n"
      << "  constexpr I UN = " << lit(units) << ";\n"
      << load_row_registers(X, "q * " + std::to_string(V), K, V, ragged, "-KILN_INF", true)
      << "  float s = 0.f;\n"
      << "#pragma unroll\n  for (int k = 0; k < " << K << "; ++k) {\n"
      << (ragged ? "    if ((I)tid + k * T >= UN) continue;\n" : "") << "#pragma unroll\n"
      << "    for (int e = 0; e < " << V << "; ++e) {\n"
      << "      const float ex = expf(xs[k][e] - m);\n"
      << "      s += ex;\n"
      << (log ? "" : "      xs[k][e] = ex;\n") << "    }\n  }\n"
      << "  s = kallreduce<f_add, T>(s, shf);\n"
      << "  const float inv = 1.f / s, ls = logf(s);\n"
      << "#pragma unroll\n  for (int k = 0; k < " << K << "; ++k) {\n"
      << "    const I q = (I)tid + k * T;\n"
      << (ragged ? "    if (q >= UN) continue;\n" : "") << "    {\n"
      << "      const I i = base + q * " << V << ";\n"
      << "      float r[" << V << "];\n"
      << "#pragma unroll\n      for (int l = 0; l < " << V
      << "; ++l) r[l] = " << (log ? "xs[k][l] - m - ls" : "xs[k][l] * inv") << ";\n"
      << epilogue(g, kb, grp, V) << "      kst<" << V << ">(" << dst << " + i, r);\n"
      << "    }\n  }\n";
  } else {
    o << "  __shared__ rstate sh[32];\n"
      << "  rstate st = r_lse::init();\n"
      << "  for (I l = (I)tid * " << V << "; l < L; l += T * " << V << ") {\n"
      << "    float xs[" << V << "];\n    kld<" << V << ">(" << X << " + base + l, xs);\n"
      << "    klse_add<" << V << ">(st, xs);\n"
      << "  }\n"
      << "  st = kreduce<r_lse, T>(st, sh);\n"
      << "  const float m = st.v, inv = 1.f / st.s, ls = logf(st.s);\n"
      << "  for (I l = (I)tid * " << V << "; l < L; l += T * " << V << ") {\n"
      << "    const I i = base + l;\n"
      << "    float r[" << V << "];\n    kld<" << V << ">(" << X << " + i, r);\n"
      << "#pragma unroll\n    for (int l = 0; l < " << V
      << "; ++l) r[l] = " << (log ? "r[l] - m - ls" : "expf(r[l] - m) * inv") << ";\n"
      << epilogue(g, kb, grp, V) << "    kst<" << V << ">(" << dst << " + i, r);\n"
      << "  }\n";
  }
  g.launch(kb, ceil_div(outer, rows_per_block(T)), T * rows_per_block(T));
}

// ---- sum / mean / amax / amin / prod / logsumexp / argmax / argmin over any set of dims ----
void emit_reduce(gen& g, const group& grp, const string& pfx, const op_node& op,
                 const op_info& info, const string& dst) {
  const shape_t& x = g.shape(op.args[0]);
  const reduce_layout lay = reduce_layout_of(x, op, info.family);
  const auto& kept = lay.kept;
  const auto& red = lay.reduced;
  const int64_t nout = lay.nout, nred = lay.nred;
  bool arg = info.family == op_family::arg_reduce;
  const string& n = op.op;
  string R = n == "sum" || n == "mean" ? "r_sum"
             : n == "prod"             ? "r_prod"
             : n == "amax"             ? "r_max"
             : n == "amin"             ? "r_min"
             : n == "logsumexp"        ? "r_lse"
             : n == "argmax"           ? "r_argmax"
                                       : "r_argmin";
  string fin = n == "mean"        ? "st.v / " + flit(static_cast<double>(nred))
               : n == "logsumexp" ? "st.v + logf(st.s)"
                                  : "st.v";
  int64_t T = grp.get(knob::threads, 128);
  // Input offset of output oi (kept dims) and of reduced element ri.
  auto base_code = [&](const string& oi) {
    string s = "  I base = 0;\n  { I rest = " + oi + ";\n";
    for (std::size_t k = kept.size(); k-- > 0;)
      s += "    base += (rest % " + lit(kept[k].extent) + ") * " + lit(kept[k].stride) +
           "; rest /= " + lit(kept[k].extent) + ";\n";
    return s + "  }\n";
  };
  auto red_off = [&](const string& ri) {
    string e;
    int64_t inner = 1;
    for (std::size_t r = red.size(); r-- > 0;) {
      string t = "((" + ri + ") / " + lit(inner) + ")";
      if (r > 0) t = "(" + t + " % " + lit(red[r].extent) + ")";
      if (red[r].stride != 1) t += " * " + lit(red[r].stride);
      e += (e.empty() ? "" : " + ") + t;
      inner *= red[r].extent;
    }
    return e.empty() ? string("0") : e;
  };
  // Finalizes st for output oi: the epilogue, then the store.
  auto store = [&](kernel_builder& kb, const string& indent) {
    g.use(kb, dst, true);
    if (arg) return indent + dst + "[oi] = st.i;\n";
    return indent + "{\n" + indent + "  const I i = oi;\n" + indent + "  float r[1] = {" + fin +
           "};\n" + epilogue(g, kb, grp, 1) + indent + "  " + dst + "[oi] = r[0];\n" + indent +
           "}\n";
  };
  bool column = !x.empty() && !lay.inner_reduced;
  if (column) { // innermost dim kept: one thread per output, serial over the reduced elements
    kernel_builder kb;
    kb.name = pfx + "_reduce";
    auto& o = kb.body;
    string X = g.rd(kb, op.args[0]);
    int64_t block = std::max<int64_t>(T, 64);
    o << "  const I oi = (I)blockIdx.x * " << block << " + threadIdx.x;\n"
      << "  if (oi >= " << lit(nout) << ") return;\n"
      << base_code("oi") << "  rstate st = " << R << "::init();\n";
    // C loads in flight before the dependent merges (the reducers branch, so the compiler does
    // not hoist loads across them by itself).
    const int64_t C = fit_vec(8, {nred});
    o << "  for (I r0 = 0; r0 < " << lit(nred) << "; r0 += " << C << ") {\n"
      << "    float xv[" << C << "];\n"
      << "#pragma unroll\n    for (int u = 0; u < " << C
      << "; ++u) { const I ri = r0 + u; xv[u] = " << X << "[base + " << red_off("ri") << "]; }\n"
      << "#pragma unroll\n    for (int u = 0; u < " << C << "; ++u) " << R
      << "::add(st, xv[u], r0 + u);\n"
      << "  }\n"
      << store(kb, "  ");
    g.launch(kb, ceil_div(nout, block), block);
    return;
  }
  // Block (or warp) per output over the reduced elements; contiguous rows load vectors.
  bool contiguous = red.size() == 1 && red[0].stride == 1;
  int64_t V = contiguous ? fit_vec(grp.get(knob::vec, 1), {nred}) : 1;
  int64_t P = 1;
  if (nout < 2 * kSms && nred >= 65536)
    P = std::clamp<int64_t>(ceil_div(4 * kSms, nout), 1,
                            std::min<int64_t>(1024, std::max<int64_t>(1, nred / (T * V * 4))));
  // log-sum-exp of a row that fits in registers: one exp an element (max first, then the sum).
  if (const int64_t units = nred / V, K = ceil_div(units, T);
      n == "logsumexp" && contiguous && P == 1 && K <= 8 && K * V <= 32) {
    kernel_builder kb;
    kb.name = pfx + "_reduce";
    auto& o = kb.body;
    string X = g.rd(kb, op.args[0]);
    bool ragged = units % T != 0;
    o << "  __shared__ float shf[32];\n"
      << row_header(T, nout) << "  const I oi = row;\n"
      << base_code("oi") << "  constexpr I UN = " << lit(units) << ";\n"
      << load_row_registers(X, "q * " + std::to_string(V), K, V, ragged, "-KILN_INF", true)
      << "  float s = 0.f;\n"
      << "#pragma unroll\n  for (int k = 0; k < " << K << "; ++k)\n#pragma unroll\n"
      << "    for (int e = 0; e < " << V << "; ++e)\n"
      << "      s += xs[k][e] == -KILN_INF ? 0.f : (xs[k][e] == m ? 1.f : expf(xs[k][e] - m));\n"
      << "  s = kallreduce<f_add, T>(s, shf);\n"
      << "  const rstate st = {m, s, 0};\n"
      << "  if (tid == 0)\n"
      << store(kb, "  ");
    g.launch(kb, ceil_div(nout, rows_per_block(T)), T * rows_per_block(T));
    return;
  }
  string part = P > 1 ? g.scratch(nout * P * 4) : "";
  kernel_builder kb;
  kb.name = pfx + (P > 1 ? "_reduce_part" : "_reduce");
  auto& o = kb.body;
  string X = g.rd(kb, op.args[0]);
  o << "  __shared__ rstate sh[32];\n";
  if (P > 1) { // chunk c covers units [c * U / P, (c + 1) * U / P)
    o << "  constexpr int T = " << T << ";\n"
      << "  constexpr long long U = " << lit(nred / V) << ", PP = " << P << ";\n"
      << "  const I oi = blockIdx.x / PP, c = blockIdx.x % PP;\n"
      << "  const int tid = threadIdx.x;\n"
      << "  const I r0 = (I)((long long)c * U / PP) * " << V
      << ", r1 = (I)((long long)(c + 1) * U / PP) * " << V << ";\n";
  } else {
    o << row_header(T, nout) << "  const I oi = row, r0 = 0, r1 = " << lit(nred) << ";\n";
  }
  o << base_code("oi") << "  rstate st = " << R << "::init();\n";
  if (V > 1 || contiguous) {
    o << "  for (I ri = r0 + (I)tid * " << V << "; ri < r1; ri += T * " << V << ") {\n"
      << "    float xs[" << V << "];\n    kld<" << V << ">(" << X << " + base + ri, xs);\n";
    if (R == "r_lse")
      o << "    klse_add<" << V << ">(st, xs);\n";
    else
      o << "#pragma unroll\n    for (int u = 0; u < " << V << "; ++u) " << R
        << "::add(st, xs[u], ri + u);\n";
    o << "  }\n";
  } else {
    o << "  for (I ri = r0 + (I)tid; ri < r1; ri += T) " << R << "::add(st, " << X << "[base + "
      << red_off("ri") << "], ri);\n";
  }
  o << "  st = kreduce<" << R << ", T>(st, sh);\n";
  if (P > 1) {
    g.use(kb, part, true);
    o << "  if (tid == 0) reinterpret_cast<rstate*>(" << part << ")[blockIdx.x] = st;\n";
    g.launch(kb, nout * P, T);
    kernel_builder fk;
    fk.name = pfx + "_reduce";
    auto& f = fk.body;
    g.use(fk, part, false);
    f << "  __shared__ rstate sh[32];\n"
      << row_header(T, nout) << "  const I oi = row;\n"
      << "  rstate st = " << R << "::init();\n"
      << "  const rstate* q = reinterpret_cast<const rstate*>(" << part << ") + oi * " << P << ";\n"
      << "  for (int c = tid; c < " << P << "; c += T) " << R << "::merge(st, q[c]);\n"
      << "  st = kreduce<" << R << ", T>(st, sh);\n"
      << "  if (tid == 0)\n"
      << store(fk, "  ");
    g.launch(fk, ceil_div(nout, rows_per_block(T)), T * rows_per_block(T));
    return;
  }
  o << "  if (tid == 0)\n" << store(kb, "  ");
  g.launch(kb, ceil_div(nout, rows_per_block(T)), T * rows_per_block(T));
}

} // namespace kiln::cuda_gen
