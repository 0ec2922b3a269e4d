#include "skills/codegen_cpu.hpp"

#include "skills/codegen_common.hpp"

#include "data/op_vocab.hpp"
#include "skills/grammar.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace kiln {

namespace {

using std::string;

string lit(int64_t v) { return int_literal(v, cpu_dialect); }

string flit(double v) { return float_literal(v, cpu_dialect); }

int64_t prod(const shape_t& s, std::size_t from = 0, std::size_t to = SIZE_MAX) {
  return shape_product(s, from, to);
}

string bcast_index(const shape_t& operand, const shape_t& out, const string& i) {
  return broadcast_index(operand, out, i, cpu_dialect);
}

struct gen {
  const task& t;
  std::ostringstream o;
  std::vector<bool> is_output; // per op
  std::vector<string> errors;

  string ptr(const string& name) const {
    auto r = find_value(t, name);
    switch (r.k) {
    case value_ref::kind::input: return "I" + std::to_string(r.index);
    case value_ref::kind::param: return "P" + std::to_string(r.index);
    case value_ref::kind::op: return "V" + std::to_string(r.index);
    case value_ref::kind::none: break;
    }
    return "NULL_VALUE";
  }
  const shape_t& shape(const string& name) const { return value_shape(t, find_value(t, name)); }
  string load(const string& name, const shape_t& out, const string& i) const {
    return ptr(name) + "[" + bcast_index(shape(name), out, i) + "]";
  }
};

string elementwise_formula(const op_node& op) { return kiln::elementwise_formula(op, cpu_dialect); }

// A lambda `name(i, v)` applying ops [from, to] of the task at output index i; an argument that
// is the previous op of the chain reads the register v, any other argument is loaded (broadcast).
string chain_lambda(gen& g, const string& name, int64_t from, int64_t to, int64_t chain_start) {
  std::ostringstream s;
  s << "  auto " << name << " = [=](int64_t i, float v) -> float {\n";
  for (int64_t j = from; j <= to; ++j) {
    const op_node& op = g.t.ops[j];
    string f = elementwise_formula(op);
    if (f.empty()) {
      g.errors.push_back("cpu backend: op '" + op.op + "' is not elementwise");
      continue;
    }
    s << "    { // " << op.op << " -> " << op.out << "\n";
    for (std::size_t k = 0; k < 2; ++k) {
      string e;
      if (k < op.args.size()) {
        auto r = find_value(g.t, op.args[k]);
        bool reg =
            r.k == value_ref::kind::op && static_cast<int64_t>(r.index) == j - 1 && j > chain_start;
        e = reg ? "v" : g.load(op.args[k], op.shape, "i");
      } else {
        e = flit(attr_real(op.attrs, "scalar", 0.0));
      }
      s << "      const float a" << k << " = " << e << ";\n";
    }
    s << "      v = " << f << ";\n    }\n";
  }
  s << "    return v;\n  };\n";
  return s.str();
}

// The epilogue of a group: ops after the anchor. Identity when there are none.
string epilogue(gen& g, const group& grp) {
  return chain_lambda(g, "epi", grp.first_op + 1, grp.first_op + grp.num_ops - 1, grp.first_op);
}

// A parallel loop over n outputs in units of `vec`; `body(i)` computes output i. bounds = false
// drops the remainder handling where vec divides n (shapes are constants: where it does not, the
// remainder is handled whatever the program asked).
void emit_elementwise_loop(gen& g, const string& dst, int64_t n, int64_t vec, int64_t unroll,
                           bool bounds, int64_t grain_elems, const string& body) {
  auto& o = g.o;
  bounds = bounds || n % vec != 0;
  int64_t units = bounds ? (n + vec - 1) / vec : n / vec;
  int64_t grain = std::max<int64_t>(1, grain_elems / vec);
  o << "  pfor(host, " << lit(units) << ", " << lit(grain) << ", [&](int64_t ub, int64_t ue) {\n";
  o << "    int64_t i = ub * " << lit(vec) << ";\n";
  o << "    const int64_t ie = "
    << (bounds ? "std::min<int64_t>(" + lit(n) + ", ue * " + lit(vec) + ")" : "ue * " + lit(vec))
    << ";\n";
  if (unroll > 1) o << "#pragma GCC unroll " << unroll << "\n";
  o << "    for (; i + " << lit(vec) << " <= ie; i += " << lit(vec) << ") {\n";
  o << "#pragma GCC ivdep\n";
  o << "      for (int64_t l = 0; l < " << lit(vec) << "; ++l) " << dst << "[i + l] = " << body
    << "(i + l);\n";
  o << "    }\n";
  if (bounds && vec > 1) o << "    for (; i < ie; ++i) " << dst << "[i] = " << body << "(i);\n";
  o << "  });\n";
}

// ---- elementwise ----
void emit_elementwise(gen& g, const group& grp, const string& dst) {
  const op_node& last = g.t.ops[grp.first_op + grp.num_ops - 1];
  g.o << chain_lambda(g, "chain", grp.first_op, grp.first_op + grp.num_ops - 1, grp.first_op);
  g.o << "  auto body = [=](int64_t i) { return chain(i, 0.f); };\n";
  emit_elementwise_loop(g, dst, numel(last.shape), grp.get(knob::vec, 1), grp.get(knob::unroll, 1),
                        grp.get(knob::bounds, 1) != 0, grp.get(knob::block, 256) * 64, "body");
}

// ---- gemm / library ----
struct gemm_desc {
  int64_t nb = 1, m = 1, n = 1, k = 1;
  bool trans_b = false;
  string a, b, bias;   // pointers
  string a_off, b_off; // element offsets as expressions of the batch index `bi`
  int64_t a_numel = 0, b_numel = 0;
};

gemm_desc describe_gemm(const gen& g, const op_node& op, op_family f) {
  gemm_shape s = gemm_shape_of(g.t, op, f, cpu_dialect);
  gemm_desc d;
  d.nb = s.nb, d.m = s.m, d.n = s.n, d.k = s.k;
  d.trans_b = s.trans_b;
  d.a = g.ptr(s.a);
  d.b = g.ptr(s.b);
  if (!s.bias.empty()) d.bias = g.ptr(s.bias);
  d.a_off = s.a_off;
  d.b_off = s.b_off;
  d.a_numel = prod(g.shape(s.a));
  d.b_numel = prod(g.shape(s.b));
  return d;
}

const char* rounding(int64_t precision) {
  return precision == 1 ? "kiln_tf32" : precision == 2 ? "kiln_fp16" : "";
}

// Reduced precision: `var` (a const float* of `count` elements) is pointed at a rounded copy, so
// the library sees operands as the precision would round them.
void emit_rounded_copy(gen& g, const string& var, int64_t count, int64_t precision) {
  g.o << "  {\n    float* r = (float*)host->alloc(host, " << lit(count * 4) << ");\n"
      << "    if (!r) return 2;\n    const float* s = " << var << ";\n"
      << "    pfor(host, " << lit(count)
      << ", 16384, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; ++i) r[i] = "
      << rounding(precision) << "(s[i]); });\n    " << var << " = r;\n  }\n";
}

void emit_library(gen& g, const group& grp, const gemm_desc& d, const string& dst) {
  auto& o = g.o;
  int64_t precision = grp.get(knob::precision, 0);
  o << "  const float* A = " << d.a << ";\n  const float* B = " << d.b << ";\n";
  if (precision != 0) {
    emit_rounded_copy(g, "A", d.a_numel, precision);
    emit_rounded_copy(g, "B", d.b_numel, precision);
  }
  o << "  for (int64_t bi = 0; bi < " << lit(d.nb) << "; ++bi)\n"
    << "    host->sgemm(host, 0, " << (d.trans_b ? 1 : 0) << ", " << lit(d.m) << ", " << lit(d.n)
    << ", " << lit(d.k) << ", 1.f, A + " << d.a_off << ", " << lit(d.k) << ", B + " << d.b_off
    << ", " << lit(d.trans_b ? d.k : d.n) << ", 0.f, " << dst << " + bi * " << lit(d.m * d.n)
    << ", " << lit(d.n) << ");\n";
  if (precision == 2)
    o << "  pfor(host, " << lit(d.nb * d.m * d.n)
      << ", 16384, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; ++i) " << dst
      << "[i] = kiln_fp16(" << dst << "[i]); });\n";
  if (grp.num_ops == 1 && d.bias.empty()) return;
  o << epilogue(g, grp);
  string bias = d.bias.empty() ? "" : " + " + d.bias + "[i % " + lit(d.n) + "]";
  o << "  auto body = [=](int64_t i) { return epi(i, " << dst << "[i]" << bias << "); };\n";
  emit_elementwise_loop(g, dst, d.nb * d.m * d.n, grp.get(knob::vec, 1), 1, true,
                        grp.get(knob::block, 256) * 64, "body");
}

void emit_gemm(gen& g, const group& grp, const gemm_desc& d, const string& dst) {
  auto& o = g.o;
  int64_t tm = grp.get(knob::tile_m, 32), tn = grp.get(knob::tile_n, 32),
          tk = grp.get(knob::tile_k, 16);
  int64_t sk = grp.get(knob::split_k, 1), precision = grp.get(knob::precision, 0);
  bool stage = grp.get(knob::stage, 0) != 0;
  // `bounds 0` drops the edge checks only where every tile divides its extent.
  bool bounds = grp.get(knob::bounds, 1) != 0 || d.m % tm != 0 || d.n % tn != 0 || d.k % sk != 0 ||
                (d.k / sk) % tk != 0;
  int64_t mt = bounds ? (d.m + tm - 1) / tm : d.m / tm,
          nt = bounds ? (d.n + tn - 1) / tn : d.n / tn;
  int64_t kc = bounds ? (d.k + sk - 1) / sk : d.k / sk;
  string acc = precision == 2 ? "_Float16" : "float";
  string rnd = precision == 1 ? "kiln_tf32" : "";
  string bget = d.trans_b ? "b[(n0 + j) * " + lit(d.k) + " + k0 + kk]"
                          : "b[(k0 + kk) * " + lit(d.n) + " + n0 + j]";
  o << epilogue(g, grp);
  o << "  constexpr int64_t M = " << lit(d.m) << ", N = " << lit(d.n) << ", K = " << lit(d.k)
    << ", TM = " << tm << ", TN = " << tn << ", TK = " << tk << ", SK = " << sk
    << ", KC = " << lit(kc) << ", MT = " << lit(mt) << ", NT = " << lit(nt) << ";\n";
  o << "  const float* A = " << d.a << ";\n  const float* B = " << d.b << ";\n";
  o << "  pfor(host, " << lit(d.nb * mt * nt) << ", 1, [&](int64_t wb, int64_t we) {\n"
    << "   for (int64_t w = wb; w < we; ++w) {\n"
    << "    const int64_t bi = w / (MT * NT), t = w % (MT * NT), m0 = (t / NT) * TM, n0 = (t % NT) "
       "* TN;\n"
    << "    const float* a = A + " << d.a_off << ";\n    const float* b = B + " << d.b_off << ";\n"
    << "    const int64_t mm = " << (bounds ? "std::min<int64_t>(TM, M - m0)" : "TM") << ";\n"
    << "    const int64_t nn = " << (bounds ? "std::min<int64_t>(TN, N - n0)" : "TN") << ";\n"
    << "    " << acc << " acc[TM][TN];\n"
    << "    for (int64_t i = 0; i < TM; ++i) for (int64_t j = 0; j < TN; ++j) acc[i][j] = 0;\n"
    << "    for (int64_t s = 0; s < SK; ++s) {\n"
    << "      const int64_t ks = s * KC, ke = "
    << (bounds ? "std::min<int64_t>(K, ks + KC)" : "ks + KC") << ";\n";
  if (sk > 1)
    o << "      " << acc << " part[TM][TN];\n"
      << "      for (int64_t i = 0; i < TM; ++i) for (int64_t j = 0; j < TN; ++j) part[i][j] = "
         "0;\n";
  else
    o << "      auto& part = acc;\n";
  o << "      for (int64_t k0 = ks; " << (bounds ? "k0 < ke" : "k0 + TK <= ke") << "; k0 += TK) {\n"
    << "        const int64_t kc = " << (bounds ? "std::min<int64_t>(TK, ke - k0)" : "TK") << ";\n";
  if (stage) { // pack both tiles, zero-padded, so the inner loop always runs the full tile width
    o << "        float as[TM][TK], bs[TK][TN];\n"
      << "        for (int64_t i = 0; i < TM; ++i) for (int64_t kk = 0; kk < TK; ++kk)\n"
      << "          as[i][kk] = (i < mm && kk < kc) ? " << rnd
      << "(a[(m0 + i) * K + k0 + kk]) : 0.f;\n"
      << "        for (int64_t kk = 0; kk < TK; ++kk) for (int64_t j = 0; j < TN; ++j)\n"
      << "          bs[kk][j] = (kk < kc && j < nn) ? " << rnd << "(" << bget << ") : 0.f;\n"
      << "        for (int64_t i = 0; i < mm; ++i)\n"
      << "          for (int64_t kk = 0; kk < kc; ++kk) {\n"
      << "            const float av = as[i][kk];\n"
      << "#pragma GCC ivdep\n"
      << "            for (int64_t j = 0; j < TN; ++j) part[i][j] += av * bs[kk][j];\n"
      << "          }\n";
  } else {
    o << "        for (int64_t i = 0; i < mm; ++i)\n"
      << "          for (int64_t kk = 0; kk < kc; ++kk) {\n"
      << "            const float av = " << rnd << "(a[(m0 + i) * K + k0 + kk]);\n"
      << "#pragma GCC ivdep\n"
      << "            for (int64_t j = 0; j < nn; ++j) part[i][j] += av * " << rnd << "(" << bget
      << ");\n"
      << "          }\n";
  }
  o << "      }\n";
  if (sk > 1)
    o << "      for (int64_t i = 0; i < TM; ++i) for (int64_t j = 0; j < TN; ++j) acc[i][j] += "
         "part[i][j];\n";
  o << "    }\n"
    << "    for (int64_t i = 0; i < mm; ++i)\n"
    << "      for (int64_t j = 0; j < nn; ++j) {\n"
    << "        const int64_t idx = bi * (M * N) + (m0 + i) * N + n0 + j;\n"
    << "        " << dst << "[idx] = epi(idx, (float)acc[i][j]"
    << (d.bias.empty() ? "" : " + " + d.bias + "[n0 + j]") << ");\n"
    << "      }\n"
    << "   }\n  });\n";
}

// The extents, kernel, stride, padding and dilation of a conv as constexpr lines (3-d padded).
string conv_constants(const conv_geometry& cg) {
  std::ostringstream o;
  const auto &in = cg.in, &ker = cg.ker, &out = cg.out;
  const auto &st = cg.stride, &pd = cg.pad, &dl = cg.dilation;
  o << "  constexpr int64_t ID = " << in[0] << ", IH = " << in[1] << ", IW = " << in[2]
    << ", OD = " << out[0] << ", OH = " << out[1] << ", OW = " << out[2] << ", KD = " << ker[0]
    << ", KH = " << ker[1] << ", KW = " << ker[2] << ";\n"
    << "  constexpr int64_t SD = " << st[0] << ", SH = " << st[1] << ", SW = " << st[2]
    << ", PD = " << pd[0] << ", PH = " << pd[1] << ", PW = " << pd[2] << ", DD = " << dl[0]
    << ", DH = " << dl[1] << ", DW = " << dl[2] << ";\n";
  return o.str();
}

// ---- conv / conv_transpose: direct loops; 1d / 2d pad to 3d with unit dims ----
void emit_conv(gen& g, const group& grp, const op_node& op, const string& dst) {
  auto& o = g.o;
  const conv_geometry cg = conv_geometry_of(g.t, op);
  const bool transposed = cg.transposed;
  const auto& out = cg.out;
  const int64_t groups = cg.groups, ci = cg.ci, co = cg.co, batch = cg.batch;
  int64_t tm = grp.get(knob::tile_m, 16), tn = grp.get(knob::tile_n, 16),
          unroll = grp.get(knob::unroll, 1);
  int64_t precision = grp.get(knob::precision, 0);
  int64_t cog = co / groups, p = out[0] * out[1] * out[2];
  // `bounds 0` drops the edge checks only where both tiles divide their extents.
  bool bounds = grp.get(knob::bounds, 1) != 0 || cog % tm != 0 || p % tn != 0;
  int64_t mb = bounds ? (cog + tm - 1) / tm : cog / tm, pb = bounds ? (p + tn - 1) / tn : p / tn;
  string acc = precision == 2 ? "_Float16" : "float", rnd = precision == 1 ? "kiln_tf32" : "";
  o << epilogue(g, grp);
  o << "  constexpr int64_t CI = " << ci << ", CO = " << co << ", G = " << groups
    << ", CIG = " << ci / groups << ", COG = " << cog << ";\n"
    << conv_constants(cg) << "  constexpr int64_t P = " << lit(p) << ", TM = " << tm
    << ", TN = " << tn << ", MB = " << mb << ", PB = " << lit(pb) << ";\n"
    << "  const float* X = " << g.ptr(op.args[0]) << ";\n  const float* W = " << g.ptr(op.args[1])
    << ";\n"
    << "  pfor(host, " << lit(batch * groups * mb * pb) << ", 1, [&](int64_t wb, int64_t we) {\n"
    << "   for (int64_t w = wb; w < we; ++w) {\n"
    << "    const int64_t n = w / (G * MB * PB), gr = (w / (MB * PB)) % G, ob = (w / PB) % MB, pq "
       "= w % PB;\n"
    << "    const int64_t oc0 = ob * TM, p0 = pq * TN;\n"
    << "    const int64_t mm = " << (bounds ? "std::min<int64_t>(TM, COG - oc0)" : "TM") << ";\n"
    << "    const int64_t pn = " << (bounds ? "std::min<int64_t>(TN, P - p0)" : "TN") << ";\n"
    << "    int64_t qd[TN], qh[TN], qw[TN];\n"
    << "    for (int64_t j = 0; j < TN; ++j) {\n"
    << "      const int64_t q = p0 + (j < pn ? j : 0);\n"
    << "      qd[j] = q / (OH * OW); qh[j] = (q / OW) % OH; qw[j] = q % OW;\n"
    << "    }\n"
    << "    " << acc << " acc[TM][TN];\n"
    << "    for (int64_t i = 0; i < TM; ++i) for (int64_t j = 0; j < TN; ++j) acc[i][j] = 0;\n"
    << "    for (int64_t ic = 0; ic < CIG; ++ic) {\n"
    << "      const int64_t c = gr * CIG + ic;\n"
    << "      const float* xb = X + (n * CI + c) * (ID * IH * IW);\n"
    << "      for (int64_t kd = 0; kd < KD; ++kd) for (int64_t kh = 0; kh < KH; ++kh) for (int64_t "
       "kw = 0; kw < KW; ++kw) {\n"
    << "        float xs[TN];\n"
    << "        for (int64_t j = 0; j < TN; ++j) {\n";
  if (!transposed) {
    o << "          const int64_t id = qd[j] * SD - PD + kd * DD, ih = qh[j] * SH - PH + kh * DH, "
         "iw = qw[j] * SW - PW + kw * DW;\n"
      << "          const bool ok = j < pn && id >= 0 && id < ID && ih >= 0 && ih < IH && iw >= 0 "
         "&& iw < IW;\n";
  } else { // gather form: output q receives input i where q = i * S - P + k * D
    o << "          const int64_t td = qd[j] + PD - kd * DD, th = qh[j] + PH - kh * DH, tw = qw[j] "
         "+ PW - kw * DW;\n"
      << "          const bool okd = td >= 0 && td % SD == 0 && td / SD < ID;\n"
      << "          const bool okh = th >= 0 && th % SH == 0 && th / SH < IH;\n"
      << "          const bool okw = tw >= 0 && tw % SW == 0 && tw / SW < IW;\n"
      << "          const bool ok = j < pn && okd && okh && okw;\n"
      << "          const int64_t id = td / SD, ih = th / SH, iw = tw / SW;\n";
  }
  o << "          xs[j] = ok ? " << rnd << "(xb[(id * IH + ih) * IW + iw]) : 0.f;\n"
    << "        }\n"
    << "        const int64_t tap = (kd * KH + kh) * KW + kw;\n";
  if (unroll > 1) o << "#pragma GCC unroll " << unroll << "\n";
  o << "        for (int64_t i = 0; i < mm; ++i) {\n";
  if (!transposed)
    o << "          const float wv = " << rnd
      << "(W[((gr * COG + oc0 + i) * CIG + ic) * (KD * KH * KW) + tap]);\n";
  else
    o << "          const float wv = " << rnd
      << "(W[(c * COG + oc0 + i) * (KD * KH * KW) + tap]);\n";
  o << "#pragma GCC ivdep\n"
    << "          for (int64_t j = 0; j < TN; ++j) acc[i][j] += wv * xs[j];\n"
    << "        }\n"
    << "      }\n"
    << "    }\n"
    << "    for (int64_t i = 0; i < mm; ++i) {\n"
    << "      const int64_t oc = gr * COG + oc0 + i;\n"
    << "      const float bias = " << (op.args.size() > 2 ? g.ptr(op.args[2]) + "[oc]" : "0.f")
    << ";\n"
    << "      for (int64_t j = 0; j < pn; ++j) {\n"
    << "        const int64_t idx = (n * CO + oc) * P + p0 + j;\n"
    << "        " << dst << "[idx] = epi(idx, (float)acc[i][j] + bias);\n"
    << "      }\n"
    << "    }\n"
    << "   }\n  });\n";
}

// ---- conv / conv_transpose by the library GEMM, one image and group at a time, in chunks of
// output (forward) or input (transposed) positions so the column buffer stays small. Forward:
// col[CIG*K, pc] = im2col(x), y[COG, pc] = w[COG, CIG*K] col. Transposed: col[COG*K, pc] =
// w[CIG, COG*K]^T x[CIG, pc], scattered into y (col2im; each output channel by one worker). ----
void emit_library_conv(gen& g, const group& grp, const op_node& op, const string& dst) {
  auto& o = g.o;
  const conv_geometry cg = conv_geometry_of(g.t, op);
  const auto &in = cg.in, &ker = cg.ker, &out = cg.out;
  int64_t precision = grp.get(knob::precision, 0);
  const string rnd = rounding(precision);
  int64_t taps = ker[0] * ker[1] * ker[2], cig = cg.ci / cg.groups, cog = cg.co / cg.groups;
  int64_t pin = in[0] * in[1] * in[2], pout = out[0] * out[1] * out[2];
  int64_t kk = (cg.transposed ? cog : cig) * taps, positions = cg.transposed ? pin : pout;
  int64_t pc = std::clamp<int64_t>((int64_t{1} << 21) / std::max<int64_t>(1, kk), 1, positions);
  o << epilogue(g, grp);
  o << "  constexpr int64_t CI = " << cg.ci << ", CO = " << cg.co << ", G = " << cg.groups
    << ", CIG = " << cig << ", COG = " << cog << ", TAPS = " << taps << ", KK = " << kk << ";\n"
    << conv_constants(cg) << "  constexpr int64_t PIN = " << lit(pin) << ", P = " << lit(pout)
    << ", PC = " << lit(pc) << ", NPOS = " << lit(positions) << ";\n"
    << "  const float* X = " << g.ptr(op.args[0]) << ";\n  const float* W = " << g.ptr(op.args[1])
    << ";\n"
    << "  float* col = (float*)host->alloc(host, " << lit(kk * pc * 4) << ");\n"
    << "  if (!col) return 2;\n";
  if (precision != 0) { // rounded weights; the inputs are rounded as they are gathered
    emit_rounded_copy(g, "W", prod(g.shape(op.args[1])), precision);
    if (cg.transposed) // the rounded input chunk of each GEMM
      o << "  float* xr = (float*)host->alloc(host, " << lit(cig * pc * 4) << ");\n"
        << "  if (!xr) return 2;\n";
  }
  if (cg.transposed)
    o << "  pfor(host, " << lit(cg.batch * cg.co * pout) << ", 16384, [&](int64_t b, int64_t e) { "
      << "for (int64_t i = b; i < e; ++i) " << dst << "[i] = 0.f; });\n";
  o << "  for (int64_t n = 0; n < " << cg.batch << "; ++n)\n"
    << "   for (int64_t gr = 0; gr < G; ++gr)\n"
    << "    for (int64_t p0 = 0; p0 < NPOS; p0 += PC) {\n"
    << "     const int64_t pc = std::min<int64_t>(PC, NPOS - p0);\n";
  if (!cg.transposed) {
    o << "     pfor(host, KK, 1, [&](int64_t rb, int64_t re) {\n"
      << "      for (int64_t r = rb; r < re; ++r) {\n"
      << "       const int64_t ic = r / TAPS, tap = r % TAPS;\n"
      << "       const int64_t kd = tap / (KH * KW), kh = (tap / KW) % KH, kw = tap % KW;\n"
      << "       const float* xb = X + (n * CI + gr * CIG + ic) * PIN;\n"
      << "       float* cr = col + r * pc;\n"
      << "       for (int64_t j = 0; j < pc; ++j) {\n"
      << "        const int64_t q = p0 + j, od = q / (OH * OW), oh = (q / OW) % OH, ow = q % OW;\n"
      << "        const int64_t id = od * SD - PD + kd * DD, ih = oh * SH - PH + kh * DH, iw = ow "
         "* SW - PW + kw * DW;\n"
      << "        const bool ok = id >= 0 && id < ID && ih >= 0 && ih < IH && iw >= 0 && iw < IW;\n"
      << "        cr[j] = ok ? " << rnd << "(xb[(id * IH + ih) * IW + iw]) : 0.f;\n"
      << "       }\n      }\n     });\n"
      << "     host->sgemm(host, 0, 0, COG, pc, KK, 1.f, W + gr * COG * KK, KK, col, pc, 0.f, "
      << dst << " + (n * CO + gr * COG) * P + p0, P);\n";
  } else {
    string xs = "X + (n * CI + gr * CIG) * PIN + p0", ldx = "PIN";
    if (precision != 0) {
      o << "     for (int64_t c = 0; c < CIG; ++c) for (int64_t j = 0; j < pc; ++j) xr[c * pc + j] "
        << "= " << rnd << "(X[(n * CI + gr * CIG + c) * PIN + p0 + j]);\n";
      xs = "xr", ldx = "pc";
    }
    o << "     host->sgemm(host, 1, 0, KK, pc, CIG, 1.f, W + gr * CIG * KK, KK, " << xs << ", "
      << ldx << ", 0.f, col, pc);\n"
      << "     pfor(host, COG, 1, [&](int64_t cb, int64_t ce) {\n"
      << "      for (int64_t oc = cb; oc < ce; ++oc) {\n"
      << "       float* yb = " << dst << " + (n * CO + gr * COG + oc) * P;\n"
      << "       for (int64_t tap = 0; tap < TAPS; ++tap) {\n"
      << "        const int64_t kd = tap / (KH * KW), kh = (tap / KW) % KH, kw = tap % KW;\n"
      << "        const float* cr = col + (oc * TAPS + tap) * pc;\n"
      << "        for (int64_t j = 0; j < pc; ++j) {\n"
      << "         const int64_t q = p0 + j, id = q / (IH * IW), ih = (q / IW) % IH, iw = q % IW;\n"
      << "         const int64_t od = id * SD - PD + kd * DD, oh = ih * SH - PH + kh * DH, ow = iw "
         "* SW - PW + kw * DW;\n"
      << "         if (od >= 0 && od < OD && oh >= 0 && oh < OH && ow >= 0 && ow < OW)\n"
      << "          yb[(od * OH + oh) * OW + ow] += cr[j];\n"
      << "        }\n       }\n      }\n     });\n";
  }
  o << "    }\n";
  if (grp.num_ops == 1 && op.args.size() < 3 && precision != 2) return;
  string bias = op.args.size() > 2 ? " + " + g.ptr(op.args[2]) + "[(i / P) % CO]" : "";
  string value = precision == 2 ? "kiln_fp16(" + dst + "[i])" : dst + "[i]";
  o << "  auto body = [=](int64_t i) { return epi(i, " << value << bias << "); };\n";
  emit_elementwise_loop(g, dst, cg.batch * cg.co * pout, grp.get(knob::vec, 1), 1, true,
                        grp.get(knob::block, 256) * 64, "body");
}

// ---- pools: input viewed as [planes, D, H, W] ----
void emit_pool(gen& g, const group& grp, const op_node& op, const op_info& info,
               const string& dst) {
  auto& o = g.o;
  std::size_t sd = static_cast<std::size_t>(info.spatial);
  const shape_t& x = g.shape(op.args[0]);
  auto pad3 = [&](std::vector<int64_t> v, int64_t fill) {
    while (v.size() < 3) v.insert(v.begin(), fill);
    return v;
  };
  std::size_t lead = x.size() - sd;
  auto in = pad3(shape_t(x.begin() + lead, x.end()), 1);
  auto out = pad3(shape_t(op.shape.begin() + lead, op.shape.end()), 1);
  int64_t planes = prod(x, 0, lead), window = 1;
  o << epilogue(g, grp);
  o << "  constexpr int64_t ID = " << in[0] << ", IH = " << in[1] << ", IW = " << in[2]
    << ", OD = " << out[0] << ", OH = " << out[1] << ", OW = " << out[2] << ";\n";
  o << "  const float* X = " << g.ptr(op.args[0]) << ";\n";
  o << "  auto body = [=](int64_t i) -> float {\n"
    << "    const int64_t q = i % (OD * OH * OW), od = q / (OH * OW), oh = (q / OW) % OH, ow = q % "
       "OW;\n"
    << "    const float* xb = X + (i / (OD * OH * OW)) * (ID * IH * IW);\n";
  if (info.family == op_family::adaptive_avg_pool) {
    o << "    const int64_t d0 = od * ID / OD, d1 = ((od + 1) * ID + OD - 1) / OD;\n"
      << "    const int64_t h0 = oh * IH / OH, h1 = ((oh + 1) * IH + OH - 1) / OH;\n"
      << "    const int64_t w0 = ow * IW / OW, w1 = ((ow + 1) * IW + OW - 1) / OW;\n"
      << "    float s = 0.f;\n"
      << "    for (int64_t d = d0; d < d1; ++d) for (int64_t h = h0; h < h1; ++h) for (int64_t w = "
         "w0; w < w1; ++w)\n"
      << "      s += xb[(d * IH + h) * IW + w];\n"
      << "    return epi(i, s / (float)((d1 - d0) * (h1 - h0) * (w1 - w0)));\n  };\n";
    window = std::max<int64_t>(1, prod(in) / std::max<int64_t>(1, prod(out)));
  } else {
    bool is_max = info.family == op_family::max_pool;
    auto k = pad3(attr_ints(op.attrs, "kernel_size", sd, 1), 1);
    auto st = has_attr(op.attrs, "stride") ? pad3(attr_ints(op.attrs, "stride", sd, 1), 1) : k;
    auto pd = pad3(attr_ints(op.attrs, "padding", sd, 0), 0);
    auto dl =
        is_max ? pad3(attr_ints(op.attrs, "dilation", sd, 1), 1) : std::vector<int64_t>{1, 1, 1};
    window = k[0] * k[1] * k[2];
    o << "    float s = " << (is_max ? "-__builtin_inff()" : "0.f") << ";\n"
      << "    for (int64_t kd = 0; kd < " << k[0] << "; ++kd) {\n"
      << "      const int64_t d = od * " << st[0] << " - " << pd[0] << " + kd * " << dl[0] << ";\n"
      << "      if (d < 0 || d >= ID) continue;\n"
      << "      for (int64_t kh = 0; kh < " << k[1] << "; ++kh) {\n"
      << "        const int64_t h = oh * " << st[1] << " - " << pd[1] << " + kh * " << dl[1]
      << ";\n"
      << "        if (h < 0 || h >= IH) continue;\n"
      << "        for (int64_t kw = 0; kw < " << k[2] << "; ++kw) {\n"
      << "          const int64_t w = ow * " << st[2] << " - " << pd[2] << " + kw * " << dl[2]
      << ";\n"
      << "          if (w < 0 || w >= IW) continue;\n"
      << "          const float xv = xb[(d * IH + h) * IW + w];\n"
      << (is_max ? "          if (xv > s || xv != xv) s = xv;\n" : "          s += xv;\n")
      << "        }\n      }\n    }\n"
      // count_include_pad = true and ceil_mode = false: the divisor is the whole window
      << "    return epi(i, " << (is_max ? string("s") : "s / " + flit(static_cast<double>(window)))
      << ");\n  };\n";
  }
  int64_t vec = grp.get(knob::vec, 1);
  emit_elementwise_loop(g, dst, planes * prod(out), vec, 1, grp.get(knob::bounds, 1) != 0,
                        std::max<int64_t>(vec, grp.get(knob::block, 256) * 64 / window), "body");
}

// ---- norms: each statistics group is A segments of L contiguous elements, SA apart ----
void emit_norm(gen& g, const group& grp, const op_node& op, const op_info& info,
               const string& dst) {
  auto& o = g.o;
  const shape_t& x = g.shape(op.args[0]);
  int64_t total = prod(x), rows = 1, segs = 1, len = 1, seg_stride = 0, base_mul = 1;
  string widx; // affine parameter index from the linear index i
  bool rms = info.family == op_family::rms_norm;
  double eps = attr_real(op.attrs, "eps", rms ? 1.1920928955078125e-07 : 1e-5);
  switch (info.family) {
  case op_family::batch_norm: {
    int64_t s = total / (x[0] * x[1]);
    rows = x[1], segs = x[0], len = s, seg_stride = x[1] * s, base_mul = s;
    widx = "(i / " + lit(s) + ") % " + lit(x[1]);
    break;
  }
  case op_family::group_norm: {
    int64_t s = x.size() > 2 ? total / (x[0] * x[1]) : 1, ng = attr_int(op.attrs, "num_groups", 1);
    rows = x[0] * ng, len = total / rows, base_mul = len;
    widx = "(i / " + lit(s) + ") % " + lit(x[1]);
    break;
  }
  case op_family::instance_norm: {
    int64_t s = total / (x[0] * x[1]);
    rows = x[0] * x[1], len = s, base_mul = s;
    widx = "(i / " + lit(s) + ") % " + lit(x[1]);
    break;
  }
  default: { // layer_norm, rms_norm: the trailing normalized_shape
    len = prod(attr_dims(op.attrs, "normalized_shape"));
    rows = total / len, base_mul = len;
    widx = "i % " + lit(len);
    break;
  }
  }
  int64_t count = segs * len, vec = grp.get(knob::vec, 1);
  bool onepass = grp.get(knob::onepass, 0) != 0;
  string w = op.args.size() > 1 ? g.ptr(op.args[1]) : "",
         b = op.args.size() > 2 ? g.ptr(op.args[2]) : "";
  o << epilogue(g, grp);
  o << "  const float* X = " << g.ptr(op.args[0]) << ";\n";
  o << "  constexpr int64_t SEGS = " << lit(segs) << ", LEN = " << lit(len)
    << ", SA = " << lit(seg_stride) << ", VEC = " << vec << ";\n";
  // Sums over a statistics group in VEC lanes of type T: f(x) accumulated into acc[lane].
  auto lanes = [&](const string& type, const string& name, const string& expr) {
    o << "    " << type << " " << name << "[VEC] = {};\n"
      << "    for (int64_t a = 0; a < SEGS; ++a) {\n"
      << "      const float* xs = X + base + a * SA;\n"
      << "      int64_t l = 0;\n"
      << "      for (; l + VEC <= LEN; l += VEC)\n"
      << "#pragma GCC ivdep\n"
      << "        for (int64_t u = 0; u < VEC; ++u) { const float xv = xs[l + u]; " << name
      << "[u] += " << expr << "; }\n"
      << "      for (; l < LEN; ++l) { const float xv = xs[l]; " << name << "[0] += " << expr
      << "; }\n"
      << "    }\n"
      << "    " << type << " " << name << "_sum = 0;\n"
      << "    for (int64_t u = 0; u < VEC; ++u) " << name << "_sum += " << name << "[u];\n";
  };
  o << "  pfor(host, " << lit(rows) << ", 1, [&](int64_t rb, int64_t re) {\n"
    << "   for (int64_t r = rb; r < re; ++r) {\n"
    << "    const int64_t base = "
    << (info.family == op_family::batch_norm ? "r * " + lit(base_mul) : "r * " + lit(base_mul))
    << ";\n";
  string cnt = flit(static_cast<double>(count));
  if (rms) {
    lanes("double", "sq", "(double)xv * xv");
    o << "    const float mean = 0.f;\n"
      << "    const float rstd = 1.f / std::sqrt((float)(sq_sum / " << count << ".0) + "
      << flit(eps) << ");\n";
  } else if (onepass) { // E[x^2] - E[x]^2 in float: cheap, cancels catastrophically (unsafe)
    lanes("float", "s1", "xv");
    lanes("float", "s2", "xv * xv");
    o << "    const float mean = s1_sum / " << cnt << ";\n"
      << "    const float var = std::max(s2_sum / " << cnt << " - mean * mean, 0.f);\n"
      << "    const float rstd = 1.f / std::sqrt(var + " << flit(eps) << ");\n";
  } else {
    lanes("double", "s1", "xv");
    o << "    const double mean_d = s1_sum / " << count << ".0;\n";
    lanes("double", "s2", "((double)xv - mean_d) * ((double)xv - mean_d)");
    o << "    const float mean = (float)mean_d;\n"
      << "    const float rstd = 1.f / std::sqrt((float)(s2_sum / " << count << ".0) + "
      << flit(eps) << ");\n";
  }
  o << "    for (int64_t a = 0; a < SEGS; ++a)\n"
    << "      for (int64_t l = 0; l < LEN; ++l) {\n"
    << "        const int64_t i = base + a * SA + l;\n"
    << "        float v = (X[i] - mean) * rstd;\n";
  if (!w.empty()) o << "        v = v * " << w << "[" << widx << "];\n";
  if (!b.empty()) o << "        v = v + " << b << "[" << widx << "];\n";
  o << "        " << dst << "[i] = epi(i, v);\n"
    << "      }\n"
    << "   }\n  });\n";
}

// ---- reductions ----
// Splits the input dims into runs of kept and reduced dims (merged when adjacent).
void emit_softmax_like(gen& g, const group& grp, const op_node& op, const op_info& info,
                       const string& dst) {
  auto& o = g.o;
  const shape_t& x = g.shape(op.args[0]);
  int64_t dim = attr_int(op.attrs, "dim", info.family == op_family::cumsum ? 0 : -1);
  normalize_dim(dim, x.size());
  int64_t len = x.empty() ? 1 : x[dim], inner = x.empty() ? 1 : prod(x, dim + 1),
          outer = x.empty() ? 1 : prod(x, 0, dim);
  o << epilogue(g, grp);
  o << "  const float* X = " << g.ptr(op.args[0]) << ";\n"
    << "  constexpr int64_t L = " << lit(len) << ", IN = " << lit(inner) << ";\n"
    << "  pfor(host, " << lit(outer * inner) << ", " << std::max<int64_t>(1, 4096 / len)
    << ", [&](int64_t rb, int64_t re) {\n"
    << "   for (int64_t r = rb; r < re; ++r) {\n"
    << "    const int64_t base = (r / IN) * (L * IN) + r % IN;\n";
  if (info.family == op_family::cumsum) {
    o << "    double acc = 0;\n"
      << "    for (int64_t l = 0; l < L; ++l) { const int64_t i = base + l * IN; acc += X[i]; "
      << dst << "[i] = epi(i, (float)acc); }\n";
  } else {
    // 8 independent lanes for the max and the sum, so both passes vectorize.
    o << "    const float* xs = X + base;\n"
      << "    float ml[8]; for (int64_t u = 0; u < 8; ++u) ml[u] = -__builtin_inff();\n"
      << "    double sl[8] = {};\n"
      << "    int64_t l = 0;\n"
      << "    for (; l + 8 <= L; l += 8)\n#pragma GCC ivdep\n"
      << "      for (int64_t u = 0; u < 8; ++u) ml[u] = std::max(ml[u], xs[(l + u) * IN]);\n"
      << "    for (; l < L; ++l) ml[0] = std::max(ml[0], xs[l * IN]);\n"
      << "    float m = ml[0]; for (int64_t u = 1; u < 8; ++u) m = std::max(m, ml[u]);\n"
      << "    for (l = 0; l + 8 <= L; l += 8)\n#pragma GCC ivdep\n"
      << "      for (int64_t u = 0; u < 8; ++u) sl[u] += kiln_exp(xs[(l + u) * IN] - m);\n"
      << "    for (; l < L; ++l) sl[0] += kiln_exp(xs[l * IN] - m);\n"
      << "    double s = 0; for (int64_t u = 0; u < 8; ++u) s += sl[u];\n";
    if (op.op == "softmax")
      o << "    const float inv = (float)(1.0 / s);\n"
        << "    for (int64_t l = 0; l < L; ++l) { const int64_t i = base + l * IN; " << dst
        << "[i] = epi(i, kiln_exp(X[i] - m) * inv); }\n";
    else
      o << "    const float ls = (float)std::log(s);\n"
        << "    for (int64_t l = 0; l < L; ++l) { const int64_t i = base + l * IN; " << dst
        << "[i] = epi(i, X[i] - m - ls); }\n";
  }
  o << "   }\n  });\n";
}

void emit_reduce(gen& g, const group& grp, const op_node& op, const op_info& info,
                 const string& dst) {
  auto& o = g.o;
  const shape_t& x = g.shape(op.args[0]);
  const reduce_layout lay = reduce_layout_of(x, op, info.family);
  const auto& kept = lay.kept;
  const auto& red = lay.reduced;
  const int64_t nout = lay.nout, nred = lay.nred;
  bool arg = info.family == op_family::arg_reduce;
  const string& n = op.op;
  if (!arg) o << epilogue(g, grp);
  o << "  const float* X = " << g.ptr(op.args[0]) << ";\n";
  o << "  pfor(host, " << lit(nout) << ", " << std::max<int64_t>(1, 16384 / nred)
    << ", [&](int64_t ob, int64_t oe) {\n"
    << "   for (int64_t oi = ob; oi < oe; ++oi) {\n"
    << "    int64_t base = 0, rest = oi;\n";
  for (std::size_t k = kept.size(); k-- > 0;)
    o << "    base += (rest % " << lit(kept[k].extent) << ") * " << lit(kept[k].stride)
      << "; rest /= " << lit(kept[k].extent) << ";\n";
  auto loops = [&](const string& body) {
    string ind = "    ", off = "base";
    for (std::size_t r = 0; r < red.size(); ++r) {
      o << ind << "for (int64_t r" << r << " = 0; r" << r << " < " << lit(red[r].extent) << "; ++r"
        << r << ")\n";
      ind += "  ";
      off += " + r" + std::to_string(r) + " * " + lit(red[r].stride);
    }
    o << ind << "{ const float xv = X[" << off << "]; " << body << " }\n";
  };
  if ((n == "sum" || n == "mean") && !red.empty() && red.back().stride == 1) {
    // Contiguous rows: 8 independent double lanes, so the adds vectorize and do not wait on
    // each other.
    string ind = "    ", off = "base";
    o << "    double lane[8] = {};\n";
    for (std::size_t r = 0; r + 1 < red.size(); ++r) {
      o << ind << "for (int64_t r" << r << " = 0; r" << r << " < " << lit(red[r].extent) << "; ++r"
        << r << ")\n";
      ind += "  ";
      off += " + r" + std::to_string(r) + " * " + lit(red[r].stride);
    }
    int64_t e = red.back().extent;
    o << ind << "{\n"
      << ind << "  const float* xs = X + " << off << ";\n"
      << ind << "  int64_t l = 0;\n"
      << ind << "  for (; l + 8 <= " << lit(e) << "; l += 8)\n#pragma GCC ivdep\n"
      << ind << "    for (int64_t u = 0; u < 8; ++u) lane[u] += xs[l + u];\n"
      << ind << "  for (; l < " << lit(e) << "; ++l) lane[0] += xs[l];\n"
      << ind << "}\n";
    o << "    double s = 0;\n    for (int64_t u = 0; u < 8; ++u) s += lane[u];\n";
    o << "    const float v = (float)(s" << (n == "mean" ? " / " + std::to_string(nred) + ".0" : "")
      << ");\n";
  } else if (n == "sum" || n == "mean") {
    o << "    double s = 0;\n";
    loops("s += xv;");
    o << "    const float v = (float)(s" << (n == "mean" ? " / " + std::to_string(nred) + ".0" : "")
      << ");\n";
  } else if (n == "prod") {
    o << "    double s = 1;\n";
    loops("s *= xv;");
    o << "    const float v = (float)s;\n";
  } else if (n == "amax" || n == "amin") {
    o << "    float v = " << (n == "amax" ? "-__builtin_inff()" : "__builtin_inff()") << ";\n";
    loops(string("if (xv ") + (n == "amax" ? ">" : "<") + " v || xv != xv) v = xv;");
  } else if (n == "logsumexp") { // max-subtracted; an infinite max counts as 0, as in PyTorch
    o << "    float m = -__builtin_inff();\n";
    loops("if (xv > m || xv != xv) m = xv;");
    o << "    if (std::isinf(m)) m = 0.f;\n    double s = 0;\n";
    loops("s += kiln_exp(xv - m);");
    o << "    const float v = (float)std::log(s) + m;\n";
  } else { // argmax / argmin: first index on ties, NaN wins
    o << "    float best = 0.f; int64_t bi = 0, ri = 0;\n";
    loops(string("if (ri == 0 || xv ") + (n == "argmax" ? ">" : "<") +
          " best || (xv != xv && best == best)) { best = xv; bi = ri; } ++ri;");
    o << "    " << dst << "[oi] = bi;\n   }\n  });\n";
    return;
  }
  o << "    " << dst << "[oi] = epi(oi, v);\n   }\n  });\n";
}

// ---- layout: reshape / flatten / dropout alias their input (or copy into a task output);
// cat copies row blocks; permute / transpose / slice / flip are strided copies ----
void emit_cat(gen& g, const op_node& op, const string& dst, int64_t grain) {
  int64_t dim = attr_int(op.attrs, "dim", 0);
  normalize_dim(dim, op.shape.size());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= op.shape[d];
  for (std::size_t d = dim + 1; d < op.shape.size(); ++d) inner *= op.shape[d];
  const int64_t out_row = op.shape[dim] * inner;
  int64_t at = 0;
  for (const auto& a : op.args) {
    int64_t row = g.shape(a)[dim] * inner;
    g.o << "  pfor(host, " << lit(outer) << ", " << std::max<int64_t>(1, grain / row)
        << ", [&](int64_t b, int64_t e) { for (int64_t r = b; r < e; ++r) std::memcpy(" << dst
        << " + r * " << lit(out_row) << " + " << lit(at) << ", " << g.ptr(a) << " + r * "
        << lit(row) << ", " << lit(row) << " * sizeof(float)); });\n";
    at += row;
  }
}

// pad: an output row (last dim) outside the input on a leading dim is all fill; otherwise fill,
// the input's row, fill.
void emit_padded_copy(gen& g, const op_node& op, const strided_read& read, const string& src,
                      const string& dst, int64_t grain) {
  auto& o = g.o;
  const std::size_t r = op.shape.size();
  const int64_t last = op.shape[r - 1], rows = numel(op.shape) / last;
  const int64_t lo = read.lo[r - 1], len = read.extent[r - 1];
  o << "  pfor(host, " << lit(rows) << ", " << std::max<int64_t>(1, grain / last)
    << ", [&](int64_t rb, int64_t re) {\n"
    << "   for (int64_t row = rb; row < re; ++row) {\n"
    << "    float* out = " << dst << " + row * " << lit(last) << ";\n"
    << "    int64_t off = " << lit(read.base + lo * read.stride[r - 1]) << ", rest = row, c;\n"
    << "    bool inside = true;\n";
  for (std::size_t d = r - 1; d-- > 0;)
    o << "    c = rest % " << lit(op.shape[d]) << "; rest /= " << lit(op.shape[d])
      << "; off += c * " << lit(read.stride[d]) << "; inside = inside && c >= " << lit(read.lo[d])
      << " && c < " << lit(read.lo[d] + read.extent[d]) << ";\n";
  o << "    if (!inside) { std::fill(out, out + " << lit(last) << ", " << flit(read.fill)
    << "); continue; }\n"
    << "    std::fill(out, out + " << lit(lo) << ", " << flit(read.fill) << ");\n"
    << "    std::memcpy(out + " << lit(lo) << ", " << src << " + off, " << lit(len)
    << " * sizeof(float));\n"
    << "    std::fill(out + " << lit(lo + len) << ", out + " << lit(last) << ", " << flit(read.fill)
    << ");\n"
    << "   }\n  });\n";
}

void emit_layout(gen& g, const group& grp, const op_node& op, const op_info& info,
                 const string& dst, int64_t op_index) {
  auto& o = g.o;
  const shape_t& x = g.shape(op.args[0]);
  string src = g.ptr(op.args[0]);
  int64_t n = prod(op.shape);
  int64_t grain = std::max<int64_t>(1, grp.get(knob::block, 256) * 64);
  if (is_view_layout(info.family)) {
    if (!g.is_output[op_index]) {
      o << "  " << dst << " = " << src << "; // a view\n";
      return;
    }
    o << "  pfor(host, " << lit(n) << ", " << grain << ", [&](int64_t b, int64_t e) { std::memcpy("
      << dst << " + b, " << src << " + b, (e - b) * sizeof(float)); });\n";
    return;
  }
  if (info.family == op_family::cat) return emit_cat(g, op, dst, grain);
  const auto read = strided_read_of(op, info.family, x);
  if (!read.lo.empty()) return emit_padded_copy(g, op, read, src, dst, grain);
  const auto& src_stride = read.stride;
  const int64_t base = read.base;
  std::size_t r = op.shape.size();
  if (r == 0) {
    o << "  " << dst << "[0] = " << src << "[0];\n";
    return;
  }
  int64_t last = op.shape[r - 1], rows = n / last, vec = grp.get(knob::vec, 1);
  o << "  pfor(host, " << lit(rows) << ", " << std::max<int64_t>(1, grain / last)
    << ", [&](int64_t rb, int64_t re) {\n"
    << "   for (int64_t row = rb; row < re; ++row) {\n"
    << "    int64_t off = " << lit(base) << ", rest = row;\n";
  for (std::size_t d = r - 1; d-- > 0;)
    o << "    off += (rest % " << lit(op.shape[d]) << ") * " << lit(src_stride[d])
      << "; rest /= " << lit(op.shape[d]) << ";\n";
  o << "    float* out = " << dst << " + row * " << lit(last) << ";\n"
    << "    const float* in = " << src << " + off;\n";
  if (vec > 1) o << "#pragma GCC unroll " << vec << "\n";
  o << "    for (int64_t j = 0; j < " << lit(last) << "; ++j) out[j] = in[j * "
    << lit(src_stride[r - 1]) << "];\n"
    << "   }\n  });\n";
}

const char* kPrelude = R"(// generated by kiln codegen_cpu
#include "kiln_abi.h"
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace {
template <class F> void kiln_tramp(void* c, int64_t b, int64_t e) { (*static_cast<F*>(c))(b, e); }
// Small ranges run inline; larger ones go to the host's threads.
template <class F> inline void pfor(const kiln_host* h, int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  if (n <= grain || h->num_threads <= 1) { f((int64_t)0, n); return; }
  h->parallel_for(h, n, grain, &kiln_tramp<typename std::remove_reference<F>::type>, &f);
}
// TF32: round to nearest even at a 10-bit mantissa.
inline float kiln_tf32(float x) {
  uint32_t u; std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) { u += 0x0fffu + ((u >> 13) & 1u); u &= 0xffffe000u; }
  std::memcpy(&x, &u, 4); return x;
}
inline float kiln_fp16(float x) { return (float)(_Float16)x; }
// Branch-free exp / tanh / erf that g++ vectorizes (libm calls stay scalar without -ffast-math).
// exp: Cephes range reduction and polynomial, ~1 ulp; NaN propagates, overflow gives inf.
inline float kiln_exp(float x) {
  const float c = std::min(std::max(x, -87.3f), 88.37f);
  const float k = (c * 1.44269504f + 12582912.f) - 12582912.f; // round to nearest, vectorizable
  const float r = (c - k * 0.693359375f) + k * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f; p = p * r + 8.3334519073e-3f; p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f; p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.f;
  const int32_t e = ((int32_t)k + 127) << 23;
  float s; std::memcpy(&s, &e, 4);
  const float v = y * s;
  return x > 88.7f ? __builtin_inff() : (x != x ? x : v);
}
inline float kiln_tanh(float x) { // 1 - 2 / (e^2|x| + 1), odd; absolute error ~1e-7
  const float a = std::fabs(x);
  const float t = 1.f - 2.f / (kiln_exp(2.f * a) + 1.f);
  return x < 0.f ? -t : t;
}
inline float kiln_erf(float x) { // Abramowitz-Stegun 7.1.26, |error| <= 1.5e-7
  const float a = std::fabs(x), t = 1.f / (1.f + 0.3275911f * a);
  const float p = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f) * t;
  const float r = 1.f - p * kiln_exp(-a * a);
  return x < 0.f ? -r : r;
}
inline float kiln_mish(float x) { // x * tanh(log1p(e^x)) = x * n / (n + 2), n = e^x (e^x + 2)
  const float e = kiln_exp(std::min(x, 20.f)), n = e * (e + 2.f);
  return x > 20.f ? x : x * n / (n + 2.f);
}
} // namespace

extern "C" const int kiln_abi_version = KILN_ABI_VERSION;

)";

} // namespace

expected<std::string> generate_cpu(const task& t, const program& p) {
  if (t.type != dtype::float32)
    return error{string("cpu backend: dtype ") + to_string(t.type) + " not supported"};
  if (auto st = check_program(p, t); !st) return st.err();
  gen g{t, {}, std::vector<bool>(t.ops.size(), false), {}};
  for (const auto& name : t.outputs) {
    auto r = find_value(t, name);
    if (r.k != value_ref::kind::op)
      return error{"cpu backend: output '" + name + "' is not an op result"};
    g.is_output[r.index] = true;
  }
  for (std::size_t j = 0; j < t.ops.size(); ++j)
    for (const auto& a : t.ops[j].args) {
      auto r = find_value(t, a);
      if (r.k == value_ref::kind::op && t.ops[r.index].is_index)
        return error{"cpu backend: op '" + t.ops[j].op + "' reads the int64 result '" + a +
                     "' (not supported)"};
    }
  auto& o = g.o;
  o << kPrelude;
  o << "extern \"C\" int kiln_run(const kiln_host* host, const void* const* inputs, const void* "
       "const* params,\n"
    << "                        void* const* outputs) {\n"
    << "  if (!host || host->abi_version != KILN_ABI_VERSION) return 1;\n";
  for (std::size_t i = 0; i < t.inputs.size(); ++i)
    o << "  float* I" << i << " = (float*)inputs[" << i << "];\n";
  for (std::size_t i = 0; i < t.params.size(); ++i)
    o << "  float* P" << i << " = (float*)params[" << i << "];\n";
  for (std::size_t j = 0; j < t.ops.size(); ++j)
    o << "  " << (t.ops[j].is_index ? "int64_t" : "float") << "* V" << j << " = nullptr;\n";
  for (std::size_t k = 0; k < t.outputs.size(); ++k) {
    auto r = find_value(t, t.outputs[k]);
    bool first = std::find(t.outputs.begin(), t.outputs.end(), t.outputs[k]) - t.outputs.begin() ==
                 static_cast<long>(k);
    if (first)
      o << "  V" << r.index << " = (" << (t.ops[r.index].is_index ? "int64_t" : "float")
        << "*)outputs[" << k << "];\n";
  }
  // The identity rounding is spelled "" in the templates: "(x)" stays a plain parenthesis.
  for (std::size_t gi = 0; gi < p.groups.size(); ++gi) {
    const group& grp = p.groups[gi];
    int64_t last = grp.first_op + grp.num_ops - 1;
    const op_node& anchor = t.ops[grp.first_op];
    const op_info* info = find_op(anchor.op);
    if (!info) return error{"cpu backend: unknown op '" + anchor.op + "'"};
    string dst = "V" + std::to_string(last);
    o << "  // kernel " << gi << ": " << to_string(grp.tmpl) << " over ops " << grp.first_op << ".."
      << last << " (" << anchor.op;
    for (int64_t j = grp.first_op + 1; j <= last; ++j) o << ", " << t.ops[j].op;
    o << ")\n";
    bool view =
        grp.tmpl == kernel_template::layout && !g.is_output[last] && is_view_layout(info->family);
    if (!g.is_output[last] && !view) {
      int64_t bytes =
          std::max<int64_t>(1, numel(t.ops[last].shape)) * (t.ops[last].is_index ? 8 : 4);
      o << "  " << dst << " = (" << (t.ops[last].is_index ? "int64_t" : "float")
        << "*)host->alloc(host, " << lit(bytes) << ");\n  if (!" << dst << ") return 2;\n";
    }
    o << "  {\n";
    switch (grp.tmpl) {
    case kernel_template::elementwise: emit_elementwise(g, grp, dst); break;
    case kernel_template::gemm:
      emit_gemm(g, grp, describe_gemm(g, anchor, info->family), dst);
      break;
    case kernel_template::library:
      if (info->family == op_family::conv || info->family == op_family::conv_transpose)
        emit_library_conv(g, grp, anchor, dst);
      else
        emit_library(g, grp, describe_gemm(g, anchor, info->family), dst);
      break;
    case kernel_template::conv: emit_conv(g, grp, anchor, dst); break;
    case kernel_template::pool: emit_pool(g, grp, anchor, *info, dst); break;
    case kernel_template::norm: emit_norm(g, grp, anchor, *info, dst); break;
    case kernel_template::reduce:
      if (info->family == op_family::softmax || info->family == op_family::cumsum)
        emit_softmax_like(g, grp, anchor, *info, dst);
      else
        emit_reduce(g, grp, anchor, *info, dst);
      break;
    case kernel_template::layout: emit_layout(g, grp, anchor, *info, dst, grp.first_op); break;
    }
    o << "  }\n";
  }
  // The same value named twice in `outputs`: copy into the later slots.
  for (std::size_t k = 0; k < t.outputs.size(); ++k) {
    auto r = find_value(t, t.outputs[k]);
    bool first = std::find(t.outputs.begin(), t.outputs.end(), t.outputs[k]) - t.outputs.begin() ==
                 static_cast<long>(k);
    if (!first)
      o << "  std::memcpy(outputs[" << k << "], V" << r.index << ", "
        << lit(numel(t.ops[r.index].shape) * (t.ops[r.index].is_index ? 8 : 4)) << ");\n";
  }
  o << "  return 0;\n}\n";
  if (!g.errors.empty()) return error{g.errors.front()};
  return o.str();
}

} // namespace kiln
