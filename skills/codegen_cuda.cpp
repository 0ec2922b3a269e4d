#include "skills/codegen_cuda.hpp"

#include "skills/codegen_cuda_gen.hpp"

#include <cmath>
#include <cstdio>

namespace kiln {

namespace cuda_gen {

namespace {
string elementwise_formula(const op_node& op) {
  return kiln::elementwise_formula(op, cuda_dialect);
}
} // namespace

// Code applying ops [from, to] to the V lanes r[0..V) at output indices i .. i + V - 1. An argument
// that is the previous op of the chain reads the register; a full-shape operand is a vector load; a
// broadcast operand is loaded per lane. The anchor of an elementwise group has no register input.
string chain_code(gen& g, kernel_builder& kb, int64_t from, int64_t to, int64_t chain_start,
                  int64_t V) {
  std::ostringstream s;
  for (int64_t j = from; j <= to; ++j) {
    const op_node& op = g.t.ops[j];
    string f = elementwise_formula(op);
    if (f.empty()) {
      g.errors.push_back("cuda backend: op '" + op.op + "' is not elementwise");
      continue;
    }
    s << "    { // " << op.op << " -> " << op.out << "\n";
    string lane[2];
    std::size_t nargs = find_op(op.op)->family == op_family::unary ? 1 : 2;
    for (std::size_t k = 0; k < nargs; ++k) {
      if (k >= op.args.size()) {
        lane[k] = flit(attr_real(op.attrs, "scalar", 0.0));
        continue;
      }
      auto r = find_value(g.t, op.args[k]);
      if (r.k == value_ref::kind::op && static_cast<int64_t>(r.index) == j - 1 && j > chain_start) {
        lane[k] = "r[l]";
        continue;
      }
      string sym = g.rd(kb, op.args[k]);
      const shape_t& sh = g.shape(op.args[k]);
      if (sh == op.shape && V > 1) {
        s << "      float a" << k << "[" << V << "];\n      kld<" << V << ">(" << sym << " + i, a"
          << k << ");\n";
        lane[k] = "a" + std::to_string(k) + "[l]";
      } else {
        lane[k] = sym + "[" + bcast_index(sh, op.shape, "(i + l)") + "]";
      }
    }
    s << "#pragma unroll\n      for (int l = 0; l < " << V
      << "; ++l) {\n        const float x0 = " << lane[0] << ";\n";
    if (nargs > 1) s << "        const float x1 = " << lane[1] << ";\n";
    s << "        r[l] = " << f << ";\n      }\n    }\n";
  }
  return s.str();
}

// The group's epilogue (ops after the anchor) on lanes r[0..V) at indices i...
string epilogue(gen& g, kernel_builder& kb, const group& grp, int64_t V) {
  return chain_code(g, kb, grp.first_op + 1, grp.first_op + grp.num_ops - 1, grp.first_op, V);
}

// A grid-stride kernel over n outputs in units of V: `lanes(V)` is code filling float r[V] for the
// outputs at i .. i + V - 1; unroll units per thread per step; the n % V tail, if any, one thread
// an output.
void emit_driver(gen& g, kernel_builder& kb, const string& dst, int64_t n, int64_t V,
                 int64_t unroll, int64_t block, const std::function<string(int64_t)>& lanes) {
  auto& o = kb.body;
  g.use(kb, dst, true);
  int64_t units = n / V, per_block = block * unroll;
  o << "  constexpr I N = " << lit(n) << ", UNITS = N / " << V << ";\n"
    << "  for (I base = (I)blockIdx.x * " << per_block
    << " + threadIdx.x; base < UNITS; base += (I)gridDim.x * " << per_block << ") {\n"
    << "#pragma unroll\n"
    << "    for (int uu = 0; uu < " << unroll << "; ++uu) {\n"
    << "      const I u = base + uu * " << block << ";\n"
    << "      if (u >= UNITS) break;\n"
    << "      const I i = u * " << V << ";\n"
    << "      float r[" << V << "];\n"
    << lanes(V) << "      kst<" << V << ">(" << dst << " + i, r);\n"
    << "    }\n  }\n";
  if (n % V != 0) {
    o << "  if (blockIdx.x == 0 && threadIdx.x < N % " << V << ") {\n"
      << "    const I i = UNITS * " << V << " + threadIdx.x;\n"
      << "    float r[1];\n"
      << lanes(1) << "    " << dst << "[i] = r[0];\n  }\n";
  }
  int64_t cap = 4 * kSms * std::max<int64_t>(1, 2048 / block);
  g.launch(kb, std::clamp<int64_t>(ceil_div(units, per_block), 1, cap), block);
}

namespace {

// A plain copy of n floats (task outputs that are views or repeated).
void emit_copy(gen& g, const string& name, const string& dst, const string& src, int64_t n) {
  kernel_builder kb;
  kb.name = name;
  int64_t V = fit_vec(4, {n});
  g.use(kb, src, false);
  emit_driver(g, kb, dst, n, V, 1, 256, [&](int64_t v) {
    return "      kld<" + std::to_string(v) + ">(" + src + " + i, r);\n";
  });
}

// ---- elementwise ----
void emit_elementwise(gen& g, const group& grp, const string& name, const string& dst) {
  kernel_builder kb;
  kb.name = name;
  const op_node& last = g.t.ops[grp.first_op + grp.num_ops - 1];
  int64_t n = std::max<int64_t>(1, numel(last.shape));
  emit_driver(g, kb, dst, n, grp.get(knob::vec, 1), grp.get(knob::unroll, 1),
              grp.get(knob::block, 256), [&](int64_t V) {
                return chain_code(g, kb, grp.first_op, grp.first_op + grp.num_ops - 1, grp.first_op,
                                  V);
              });
}

// ---- gemm / library ----
using gemm_desc = gemm_shape; // operands are value names (codegen_common.hpp)

gemm_precision library_precision(const group& grp) {
  int64_t p = grp.get(knob::precision, 0);
  return p == 1   ? gemm_precision::tf32
         : p == 2 ? gemm_precision::fp16_accumulate
                  : gemm_precision::fp32;
}

// The kernel after a library step (GEMM or conv) has written dst: in place, the bias (read at
// index (q / bias_div) % bias_mod of output q) and the group's chain; none when neither applies.
void emit_library_epilogue(gen& g, const group& grp, const string& pfx, const string& dst,
                           int64_t total, const string& bias, int64_t bias_div, int64_t bias_mod) {
  if (grp.num_ops == 1 && bias.empty()) return;
  kernel_builder kb;
  kb.name = pfx + "_epilogue";
  emit_driver(
      g, kb, dst, total, grp.get(knob::vec, 1), 1, grp.get(knob::block, 256), [&](int64_t V) {
        std::ostringstream s;
        g.use(kb, dst, false);
        s << "      kld<" << V << ">(" << dst << " + i, r);\n";
        if (!bias.empty()) {
          string q = bias_div == 1 ? "(i + l)" : "((i + l) / " + lit(bias_div) + ")";
          s << "#pragma unroll\n      for (int l = 0; l < " << V
            << "; ++l) r[l] += " << g.rd(kb, bias) << "[" << q << " % " << bias_mod << "];\n";
        }
        s << epilogue(g, kb, grp, V);
        return s.str();
      });
}

void emit_library(gen& g, const group& grp, const string& pfx, const gemm_desc& d,
                  const string& dst) {
  string a = g.sym_of(d.a), b = g.sym_of(d.b);
  auto expand = [&](const string& src, const string& off, int64_t mat, const string& tag) {
    string s = g.scratch(d.nb * mat);
    kernel_builder kb;
    kb.name = pfx + "_expand_" + tag;
    g.use(kb, src, false);
    emit_driver(g, kb, s, d.nb * mat, 1, 1, 256, [&](int64_t V) {
      string body = "      for (int l = 0; l < " + std::to_string(V) +
                    "; ++l) {\n        const I q = i + l, bi = q / " + lit(mat) +
                    ";\n        r[l] = " + src + "[" + off + " + q % " + lit(mat) + "];\n      }\n";
      return body;
    });
    return s;
  };
  if (d.a_mode == gemm_desc::batch::general) a = expand(a, d.a_off, d.m * d.k, "a");
  if (d.b_mode == gemm_desc::batch::general) b = expand(b, d.b_off, d.k * d.n, "b");
  gemm_step gs;
  gs.m = d.m, gs.n = d.n, gs.k = d.k, gs.batch = d.nb;
  gs.trans_b = d.trans_b;
  gs.lda = d.k;
  gs.ldb = d.trans_b ? d.k : d.n;
  gs.ldc = d.n;
  gs.stride_a = d.a_mode == gemm_desc::batch::none ? 0 : d.m * d.k;
  gs.stride_b = d.b_mode == gemm_desc::batch::none ? 0 : d.k * d.n;
  gs.stride_c = d.m * d.n;
  gs.a = g.buffers[a].ref;
  gs.b = g.buffers[b].ref;
  gs.c = g.buffers[dst].ref;
  gs.precision = library_precision(grp);
  plan_step st;
  st.k = plan_step::kind::gemm;
  st.gemm = gs;
  g.prog.plan.steps.push_back(st);
  emit_library_epilogue(g, grp, pfx, dst, d.nb * d.m * d.n, d.bias, 1, d.n);
}

// Generated GEMM: a TM x TN tile per block, TX x TY threads each owning an RM x RN micro-tile
// (rows ty + r * TY, columns tx + c * TX: coalesced columns). stage: TK-deep tiles of A
// (transposed) and B through dynamic shared memory, padded a word per row. split_k > 1: each slice
// stores its partial tile to scratch; a second kernel adds the slices in order, then bias and
// epilogue.
void emit_gemm(gen& g, const group& grp, const string& pfx, const gemm_desc& d, const string& dst) {
  int64_t TM = grp.get(knob::tile_m, 32), TN = grp.get(knob::tile_n, 32),
          TK = grp.get(knob::tile_k, 16);
  int64_t SK = grp.get(knob::split_k, 1), precision = grp.get(knob::precision, 0);
  bool stage = grp.get(knob::stage, 0) != 0;
  int64_t TX = std::min<int64_t>(TN, 16), TY = std::min<int64_t>(TM, 16), RM = TM / TY,
          RN = TN / TX;
  int64_t threads = TX * TY;
  tiling mt = tiles(d.m, TM), nt = tiles(d.n, TN);
  int64_t KC = ceil_div(d.k, SK);
  bool ragged_k = d.k % SK != 0, guard_k = ragged_k || KC % TK != 0;
  int64_t total = d.nb * d.m * d.n;
  string rnd = precision == 1 ? "ktf32" : "";
  auto fma = [&](const string& acc, const string& x, const string& y) {
    return precision == 2 ? acc + " = khalf(fmaf(" + x + ", " + y + ", " + acc + "))"
                          : acc + " = fmaf(" + x + ", " + y + ", " + acc + ")";
  };
  string part = SK > 1 ? g.scratch(SK * total) : "";
  kernel_builder kb;
  kb.name = pfx + "_gemm";
  auto& o = kb.body;
  string A = g.rd(kb, d.a), B = g.rd(kb, d.b);
  o << "  constexpr int TM = " << TM << ", TN = " << TN << ", TK = " << TK << ", TX = " << TX
    << ", TY = " << TY << ", RM = " << RM << ", RN = " << RN << ", THREADS = " << threads << ";\n"
    << "  constexpr I M = " << d.m << ", N = " << d.n << ", K = " << d.k << ", KC = " << KC
    << ", MT = " << mt.count << ", NT = " << nt.count << ", SK = " << SK << ";\n"
    << "  long long w = blockIdx.x;\n"
    << "  const I n0 = (I)(w % NT) * TN; w /= NT;\n"
    << "  const I m0 = (I)(w % MT) * TM; w /= MT;\n"
    << "  const I s = (I)(w % SK);\n"
    << "  const I bi = (I)(w / SK);\n"
    << "  const float* __restrict__ a = " << A << " + " << d.a_off << ";\n"
    << "  const float* __restrict__ b = " << B << " + " << d.b_off << ";\n"
    << "  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;\n"
    << "  float acc[RM][RN];\n"
    << "#pragma unroll\n  for (int r = 0; r < RM; ++r)\n#pragma unroll\n    for (int c = 0; c < "
       "RN; ++c) acc[r][c] = 0.f;\n"
    << "  const I ks = s * KC, ke = " << (ragged_k ? "(ks + KC < K ? ks + KC : K)" : "ks + KC")
    << ";\n";
  string mguard = mt.guard ? "gm < M" : "true", nguard = nt.guard ? "gn < N" : "true";
  string kguard = guard_k ? "gk < ke" : "true";
  string bget = d.trans_b ? "b[gn * K + gk]" : "b[gk * N + gn]";
  if (stage) {
    o << "  extern __shared__ float smem[];\n"
      << "  float* As = smem;                      // [TK][TM + 1]\n"
      << "  float* Bs = smem + TK * (TM + 1);      // [TK][TN + 1]\n"
      << "  for (I k0 = ks; " << (guard_k ? "k0 < ke" : "k0 + TK <= ke") << "; k0 += TK) {\n"
      << "    for (int l = threadIdx.x; l < TM * TK; l += THREADS) {\n"
      << "      const int kk = l % TK, mm = l / TK;\n"
      << "      const I gm = m0 + mm, gk = k0 + kk;\n"
      << "      As[kk * (TM + 1) + mm] = (" << mguard << " && " << kguard << ") ? " << rnd
      << "(a[gm * K + gk]) : 0.f;\n"
      << "    }\n";
    if (d.trans_b)
      o << "    for (int l = threadIdx.x; l < TN * TK; l += THREADS) {\n"
        << "      const int kk = l % TK, nn = l / TK;\n";
    else
      o << "    for (int l = threadIdx.x; l < TN * TK; l += THREADS) {\n"
        << "      const int nn = l % TN, kk = l / TN;\n";
    o << "      const I gn = n0 + nn, gk = k0 + kk;\n"
      << "      Bs[kk * (TN + 1) + nn] = (" << nguard << " && " << kguard << ") ? " << rnd << "("
      << bget << ") : 0.f;\n"
      << "    }\n"
      << "    __syncthreads();\n"
      << "#pragma unroll 4\n"
      << "    for (int kk = 0; kk < TK; ++kk) {\n"
      << "      float av[RM], bv[RN];\n"
      << "#pragma unroll\n      for (int r = 0; r < RM; ++r) av[r] = As[kk * (TM + 1) + ty + r * "
         "TY];\n"
      << "#pragma unroll\n      for (int c = 0; c < RN; ++c) bv[c] = Bs[kk * (TN + 1) + tx + c * "
         "TX];\n"
      << "#pragma unroll\n      for (int r = 0; r < RM; ++r)\n#pragma unroll\n        for (int c = "
         "0; c < RN; ++c) "
      << fma("acc[r][c]", "av[r]", "bv[c]") << ";\n"
      << "    }\n"
      << "    __syncthreads();\n"
      << "  }\n";
  } else {
    o << "  for (I k0 = ks; " << (guard_k ? "k0 < ke" : "k0 + TK <= ke") << "; k0 += TK) {\n"
      << "    const int kc = " << (guard_k ? "(int)(ke - k0 < TK ? ke - k0 : TK)" : "TK") << ";\n"
      << "    for (int kk = 0; kk < kc; ++kk) {\n"
      << "      const I gk = k0 + kk;\n"
      << "      float av[RM], bv[RN];\n"
      << "#pragma unroll\n      for (int r = 0; r < RM; ++r) { const I gm = m0 + ty + r * TY; "
         "av[r] = ("
      << mguard << ") ? " << rnd << "(a[gm * K + gk]) : 0.f; }\n"
      << "#pragma unroll\n      for (int c = 0; c < RN; ++c) { const I gn = n0 + tx + c * TX; "
         "bv[c] = ("
      << nguard << ") ? " << rnd << "(" << bget << ") : 0.f; }\n"
      << "#pragma unroll\n      for (int r = 0; r < RM; ++r)\n#pragma unroll\n        for (int c = "
         "0; c < RN; ++c) "
      << fma("acc[r][c]", "av[r]", "bv[c]") << ";\n"
      << "    }\n"
      << "  }\n";
  }
  o << "#pragma unroll\n  for (int rr = 0; rr < RM; ++rr) {\n"
    << "    const I gm = m0 + ty + rr * TY;\n"
    << "    if (!(" << mguard << ")) continue;\n"
    << "#pragma unroll\n    for (int cc = 0; cc < RN; ++cc) {\n"
    << "      const I gn = n0 + tx + cc * TX;\n"
    << "      if (!(" << nguard << ")) continue;\n"
    << "      const I i = bi * (M * N) + gm * N + gn;\n";
  if (SK > 1) {
    g.use(kb, part, true);
    o << "      " << part << "[s * " << lit(total) << " + i] = acc[rr][cc];\n";
  } else {
    g.use(kb, dst, true);
    o << "      float r[1] = {acc[rr][cc]};\n";
    if (!d.bias.empty()) o << "      r[0] += " << g.rd(kb, d.bias) << "[gn];\n";
    o << "      {\n"
      << epilogue(g, kb, grp, 1) << "      }\n"
      << "      " << dst << "[i] = r[0];\n";
  }
  o << "    }\n  }\n";
  int64_t shared = stage ? (TK * (TM + 1) + TK * (TN + 1)) * 4 : 0;
  g.launch(kb, d.nb * SK * mt.count * nt.count, threads, shared);
  if (SK == 1) return;
  kernel_builder rk;
  rk.name = pfx + "_splitk";
  int64_t V = fit_vec(4, {total});
  emit_driver(g, rk, dst, total, V, 1, 256, [&](int64_t v) {
    std::ostringstream s;
    g.use(rk, part, false);
    s << "      kld<" << v << ">(" << part << " + i, r);\n"
      << "      for (int sk = 1; sk < " << SK << "; ++sk) {\n"
      << "        float p[" << v << "];\n        kld<" << v << ">(" << part << " + (I)sk * "
      << lit(total) << " + i, p);\n"
      << "#pragma unroll\n        for (int l = 0; l < " << v << "; ++l) r[l] += p[l];\n      }\n";
    if (!d.bias.empty())
      s << "#pragma unroll\n      for (int l = 0; l < " << v
        << "; ++l) r[l] += " << g.rd(rk, d.bias) << "[(i + l) % " << d.n << "];\n";
    s << epilogue(g, rk, grp, v);
    return s.str();
  });
}

// ---- conv / conv_transpose by the library (cuDNN in the kernel host), then one epilogue kernel
// for the bias and the group's elementwise chain, like the library GEMM. ----
void emit_library_conv(gen& g, const group& grp, const string& pfx, const op_node& op,
                       const string& dst) {
  const conv_geometry cg = conv_geometry_of(g.t, op);
  conv_step cs;
  cs.spatial = static_cast<int32_t>(find_op(op.op)->spatial);
  cs.transposed = cg.transposed;
  cs.batch = cg.batch, cs.ci = cg.ci, cs.co = cg.co, cs.groups = cg.groups;
  cs.in = cg.in, cs.ker = cg.ker, cs.out = cg.out;
  cs.stride = cg.stride, cs.pad = cg.pad, cs.dilation = cg.dilation;
  cs.x = g.buffers[g.sym_of(op.args[0])].ref;
  cs.w = g.buffers[g.sym_of(op.args[1])].ref;
  cs.y = g.buffers[dst].ref;
  cs.precision = library_precision(grp);
  plan_step st;
  st.k = plan_step::kind::conv;
  st.conv = cs;
  g.prog.plan.steps.push_back(st);
  int64_t p = cg.out[0] * cg.out[1] * cg.out[2];
  emit_library_epilogue(g, grp, pfx, dst, cg.batch * cg.co * p,
                        op.args.size() > 2 ? op.args[2] : string(), p, cg.co);
}

// ---- conv / conv_transpose: direct; 1d / 2d pad to 3d with unit dims. A block owns TM output
// channels of one group x TN output positions of one image; TX x TY threads each RM x RN. ----
void emit_conv(gen& g, const group& grp, const string& pfx, const op_node& op, const string& dst) {
  const conv_geometry cg = conv_geometry_of(g.t, op);
  const bool transposed = cg.transposed;
  const auto &in = cg.in, &ker = cg.ker, &out = cg.out;
  const auto &st = cg.stride, &pd = cg.pad, &dl = cg.dilation;
  const int64_t groups = cg.groups, ci = cg.ci, co = cg.co, batch = cg.batch;
  int64_t TM = grp.get(knob::tile_m, 16), TN = grp.get(knob::tile_n, 16),
          unroll = grp.get(knob::unroll, 1);
  int64_t precision = grp.get(knob::precision, 0);
  int64_t cog = co / groups, p = out[0] * out[1] * out[2];
  int64_t TX = std::min<int64_t>(TN, 32),
          TY = std::min<int64_t>(TM, std::max<int64_t>(1, 256 / TX));
  int64_t RM = TM / TY, RN = TN / TX, threads = TX * TY;
  tiling mb = tiles(cog, TM), pb = tiles(p, TN);
  string rnd = precision == 1 ? "ktf32" : "";
  kernel_builder kb;
  kb.name = pfx + "_conv";
  auto& o = kb.body;
  string X = g.rd(kb, op.args[0]), W = g.rd(kb, op.args[1]);
  o << "  constexpr I CI = " << ci << ", CO = " << co << ", G = " << groups
    << ", CIG = " << ci / groups << ", COG = " << cog << ";\n"
    << "  constexpr I ID = " << in[0] << ", IH = " << in[1] << ", IW = " << in[2]
    << ", OD = " << out[0] << ", OH = " << out[1] << ", OW = " << out[2] << ";\n"
    << "  constexpr int KD = " << ker[0] << ", KH = " << ker[1] << ", KW = " << ker[2] << ";\n"
    << "  constexpr I SD = " << st[0] << ", SH = " << st[1] << ", SW = " << st[2]
    << ", PD = " << pd[0] << ", PH = " << pd[1] << ", PW = " << pd[2] << ", DD = " << dl[0]
    << ", DH = " << dl[1] << ", DW = " << dl[2] << ";\n"
    << "  constexpr I P = " << lit(p) << ", MB = " << mb.count << ", PB = " << pb.count << ";\n"
    << "  constexpr int TM = " << TM << ", TN = " << TN << ", TX = " << TX << ", TY = " << TY
    << ", RM = " << RM << ", RN = " << RN << ";\n"
    << "  long long w = blockIdx.x;\n"
    << "  const I p0 = (I)(w % PB) * TN; w /= PB;\n"
    << "  const I oc0 = (I)(w % MB) * TM; w /= MB;\n"
    << "  const I gr = (I)(w % G);\n"
    << "  const I n = (I)(w / G);\n"
    << "  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;\n"
    << "  I qd[RN], qh[RN], qw[RN];\n  bool qv[RN];\n"
    << "#pragma unroll\n  for (int c = 0; c < RN; ++c) {\n"
    << "    const I q0 = p0 + tx + c * TX;\n"
    << "    qv[c] = " << (pb.guard ? "q0 < P" : "true") << ";\n"
    << "    const I q = qv[c] ? q0 : 0;\n"
    << "    qd[c] = q / (OH * OW); qh[c] = (q / OW) % OH; qw[c] = q % OW;\n"
    << "  }\n"
    << "  bool mv[RM];\n"
    << "#pragma unroll\n  for (int r = 0; r < RM; ++r) mv[r] = "
    << (mb.guard ? "oc0 + ty + r * TY < COG" : "true") << ";\n"
    << "  float acc[RM][RN];\n"
    << "#pragma unroll\n  for (int r = 0; r < RM; ++r)\n#pragma unroll\n    for (int c = 0; c < "
       "RN; ++c) acc[r][c] = 0.f;\n"
    << "  for (I ic = 0; ic < CIG; ++ic) {\n"
    << "    const I ch = gr * CIG + ic;\n"
    << "    const float* __restrict__ xb = " << X << " + (n * CI + ch) * (ID * IH * IW);\n";
  if (!transposed)
    o << "    const float* __restrict__ wb = " << W
      << " + ((gr * COG + oc0) * CIG + ic) * (KD * KH * KW);\n"
      << "    constexpr I WS = CIG * KD * KH * KW; // between output channels\n";
  else
    o << "    const float* __restrict__ wb = " << W << " + (ch * COG + oc0) * (KD * KH * KW);\n"
      << "    constexpr I WS = KD * KH * KW;\n";
  o << "    for (int kd = 0; kd < KD; ++kd)\n"
    << "      for (int kh = 0; kh < KH; ++kh)\n"
    << "#pragma unroll " << unroll << "\n"
    << "        for (int kw = 0; kw < KW; ++kw) {\n"
    << "          float xv[RN], wv[RM];\n"
    << "#pragma unroll\n          for (int c = 0; c < RN; ++c) {\n";
  if (!transposed) {
    o << "            const I id = qd[c] * SD - PD + kd * DD, ih = qh[c] * SH - PH + kh * DH, iw = "
         "qw[c] * SW - PW + kw * DW;\n"
      << "            const bool ok = qv[c] && id >= 0 && id < ID && ih >= 0 && ih < IH && iw >= 0 "
         "&& iw < IW;\n";
  } else { // gather form: output q receives input i where q = i * S - P + k * D
    o << "            const I td = qd[c] + PD - kd * DD, th = qh[c] + PH - kh * DH, tw = qw[c] + "
         "PW - kw * DW;\n"
      << "            const I id = td / SD, ih = th / SH, iw = tw / SW;\n"
      << "            const bool ok = qv[c] && td >= 0 && td % SD == 0 && id < ID && th >= 0 && th "
         "% SH == 0 && ih < IH &&\n"
      << "                            tw >= 0 && tw % SW == 0 && iw < IW;\n";
  }
  o << "            xv[c] = ok ? " << rnd << "(xb[(id * IH + ih) * IW + iw]) : 0.f;\n"
    << "          }\n"
    << "          const int tap = (kd * KH + kh) * KW + kw;\n"
    << "#pragma unroll\n          for (int r = 0; r < RM; ++r) wv[r] = mv[r] ? " << rnd
    << "(wb[(ty + r * TY) * WS + tap]) : 0.f;\n"
    << "#pragma unroll\n          for (int r = 0; r < RM; ++r)\n#pragma unroll\n            for "
       "(int c = 0; c < RN; ++c) "
    << (precision == 2 ? "acc[r][c] = khalf(fmaf(wv[r], xv[c], acc[r][c]));\n"
                       : "acc[r][c] = fmaf(wv[r], xv[c], acc[r][c]);\n")
    << "        }\n"
    << "  }\n";
  g.use(kb, dst, true);
  o << "#pragma unroll\n  for (int rr = 0; rr < RM; ++rr) {\n"
    << "    if (!mv[rr]) continue;\n"
    << "    const I oc = gr * COG + oc0 + ty + rr * TY;\n"
    << "    const float bias = " << (op.args.size() > 2 ? g.rd(kb, op.args[2]) + "[oc]" : "0.f")
    << ";\n"
    << "#pragma unroll\n    for (int cc = 0; cc < RN; ++cc) {\n"
    << "      if (!qv[cc]) continue;\n"
    << "      const I i = (n * CO + oc) * P + p0 + tx + cc * TX;\n"
    << "      float r[1] = {acc[rr][cc] + bias};\n"
    << "      {\n"
    << epilogue(g, kb, grp, 1) << "      }\n"
    << "      " << dst << "[i] = r[0];\n"
    << "    }\n  }\n";
  g.launch(kb, batch * groups * mb.count * pb.count, threads);
}

// ---- pools: input viewed as [planes, D, H, W]; one output per lane ----
void emit_pool(gen& g, const group& grp, const string& pfx, const op_node& op, const op_info& info,
               const string& dst) {
  std::size_t sd = static_cast<std::size_t>(info.spatial);
  const shape_t& x = g.shape(op.args[0]);
  auto pad3 = [&](std::vector<int64_t> v, int64_t fill) {
    while (v.size() < 3) v.insert(v.begin(), fill);
    return v;
  };
  std::size_t lead = x.size() - sd;
  auto in = pad3(shape_t(x.begin() + lead, x.end()), 1);
  auto out = pad3(shape_t(op.shape.begin() + lead, op.shape.end()), 1);
  int64_t planes = prod(x, 0, lead);
  kernel_builder kb;
  kb.name = pfx + "_pool";
  string X = g.rd(kb, op.args[0]);
  std::ostringstream pre;
  pre << "  constexpr I ID = " << in[0] << ", IH = " << in[1] << ", IW = " << in[2]
      << ", OD = " << out[0] << ", OH = " << out[1] << ", OW = " << out[2] << ";\n";
  kb.body << pre.str();
  std::ostringstream one; // computes float s for output q
  one << "        const I p = q % (OD * OH * OW), od = p / (OH * OW), oh = (p / OW) % OH, ow = p % "
         "OW;\n"
      << "        const float* __restrict__ xb = " << X
      << " + (q / (OD * OH * OW)) * (ID * IH * IW);\n";
  if (info.family == op_family::adaptive_avg_pool) {
    one << "        const I d0 = od * ID / OD, d1 = ((od + 1) * ID + OD - 1) / OD;\n"
        << "        const I h0 = oh * IH / OH, h1 = ((oh + 1) * IH + OH - 1) / OH;\n"
        << "        const I w0 = ow * IW / OW, w1 = ((ow + 1) * IW + OW - 1) / OW;\n"
        << "        float s = 0.f;\n"
        << "        for (I d = d0; d < d1; ++d)\n          for (I h = h0; h < h1; ++h)\n           "
           " for (I w = w0; w < w1; ++w) s += xb[(d * IH + h) * IW + w];\n"
        << "        s = s / (float)((d1 - d0) * (h1 - h0) * (w1 - w0));\n";
  } else {
    bool is_max = info.family == op_family::max_pool;
    auto k = pad3(attr_ints(op.attrs, "kernel_size", sd, 1), 1);
    auto stv = has_attr(op.attrs, "stride") ? pad3(attr_ints(op.attrs, "stride", sd, 1), 1) : k;
    auto pdv = pad3(attr_ints(op.attrs, "padding", sd, 0), 0);
    auto dlv =
        is_max ? pad3(attr_ints(op.attrs, "dilation", sd, 1), 1) : std::vector<int64_t>{1, 1, 1};
    int64_t window = k[0] * k[1] * k[2];
    one << "        float s = " << (is_max ? "__int_as_float(0xff800000)" : "0.f") << ";\n"
        << "#pragma unroll\n        for (int kd = 0; kd < " << k[0] << "; ++kd) {\n"
        << "          const I d = od * " << stv[0] << " - " << pdv[0] << " + kd * " << dlv[0]
        << ";\n"
        << "          if (d < 0 || d >= ID) continue;\n"
        << "#pragma unroll\n          for (int kh = 0; kh < " << k[1] << "; ++kh) {\n"
        << "            const I h = oh * " << stv[1] << " - " << pdv[1] << " + kh * " << dlv[1]
        << ";\n"
        << "            if (h < 0 || h >= IH) continue;\n"
        << "#pragma unroll\n            for (int kw = 0; kw < " << k[2] << "; ++kw) {\n"
        << "              const I w = ow * " << stv[2] << " - " << pdv[2] << " + kw * " << dlv[2]
        << ";\n"
        << "              if (w < 0 || w >= IW) continue;\n"
        << "              const float xv = xb[(d * IH + h) * IW + w];\n"
        << (is_max ? "              if (xv > s || xv != xv) s = xv;\n" : "              s += xv;\n")
        << "            }\n          }\n        }\n";
    // count_include_pad = true, ceil_mode = false: the divisor is the whole window
    if (!is_max) one << "        s = s / " << flit(static_cast<double>(window)) << ";\n";
  }
  string body = one.str();
  emit_driver(g, kb, dst, planes * prod(out), grp.get(knob::vec, 1), 1, grp.get(knob::block, 256),
              [&](int64_t V) {
                return "      for (int l = 0; l < " + std::to_string(V) +
                       "; ++l) {\n        const I q = i + l;\n" + body +
                       "        r[l] = s;\n      }\n" + epilogue(g, kb, grp, V);
              });
}

// ---- layout: permute / transpose as a gather per output element; others copy or alias ----
// cat: each output element picks its input by its coordinate on `dim` (a chain of ternaries, so
// only the chosen input is read).
void emit_cat(gen& g, const group& grp, kernel_builder& kb, const op_node& op, const string& dst) {
  int64_t dim = attr_int(op.attrs, "dim", 0);
  normalize_dim(dim, op.shape.size());
  int64_t inner = 1;
  for (std::size_t d = dim + 1; d < op.shape.size(); ++d) inner *= op.shape[d];
  const int64_t total = op.shape[dim];
  string pick;
  int64_t at = 0;
  for (std::size_t k = 0; k < op.args.size(); ++k) {
    string sym = g.rd(kb, op.args[k]);
    int64_t len = g.shape(op.args[k])[dim];
    string read = sym + "[(o * " + lit(len) + " + (c - " + lit(at) + ")) * " + lit(inner) + " + j]";
    at += len;
    pick += k + 1 < op.args.size() ? "c < " + lit(at) + " ? " + read + " : " : read;
  }
  int64_t n = std::max<int64_t>(1, numel(op.shape));
  emit_driver(g, kb, dst, n, grp.get(knob::vec, 1), 1, grp.get(knob::block, 256), [&](int64_t v) {
    return "#pragma unroll\n      for (int l = 0; l < " + std::to_string(v) +
           "; ++l) {\n        const I q = i + l, j = q % " + lit(inner) + ", c = (q / " +
           lit(inner) + ") % " + lit(total) + ", o = q / " + lit(inner * total) +
           ";\n        r[l] = " + pick + ";\n      }\n";
  });
}

void emit_layout(gen& g, const group& grp, const string& pfx, const op_node& op,
                 const op_info& info, const string& dst) {
  const shape_t& x = g.shape(op.args[0]);
  string src = g.sym_of(op.args[0]);
  int64_t n = std::max<int64_t>(1, numel(op.shape));
  kernel_builder kb;
  kb.name = pfx + "_layout";
  if (info.family == op_family::cat) return emit_cat(g, grp, kb, op, dst);
  g.use(kb, src, false);
  if (is_view_layout(info.family)) {
    int64_t V = fit_vec(grp.get(knob::vec, 1), {n});
    emit_driver(g, kb, dst, n, V, 1, grp.get(knob::block, 256), [&](int64_t v) {
      return "      kld<" + std::to_string(v) + ">(" + src + " + i, r);\n";
    });
    return;
  }
  std::vector<int64_t> out_stride(op.shape.size(), 1);
  for (std::size_t d = op.shape.size(); d-- > 1;) out_stride[d - 1] = out_stride[d] * op.shape[d];
  const auto read = strided_read_of(op, info.family, x);
  const auto& src_stride = read.stride;
  const int64_t base = read.base;
  string off = base ? lit(base) : "", inside;
  for (std::size_t d = 0; d < op.shape.size(); ++d) {
    if (op.shape[d] == 1 && read.lo.empty()) continue;
    string t = "(q / " + lit(out_stride[d]) + ")";
    if (d > 0) t = "(" + t + " % " + lit(op.shape[d]) + ")";
    off += (off.empty() ? "" : " + ") + t + " * " + lit(src_stride[d]);
    if (!read.lo.empty() && read.extent[d] != op.shape[d]) // pad: this dim has a border
      inside += (inside.empty() ? "" : " && ") + string("(unsigned long long)(") + t + " - " +
                lit(read.lo[d]) + ") < " + lit(read.extent[d]) + "ull";
  }
  if (off.empty()) off = "0";
  // pad: a border element's offset points outside x, so it is read only inside
  const string read_x = src + "[" + off + "]";
  const string value =
      inside.empty() ? read_x : "(" + inside + ") ? " + read_x + " : " + flit(read.fill);
  emit_driver(g, kb, dst, n, grp.get(knob::vec, 1), 1, grp.get(knob::block, 256), [&](int64_t v) {
    return "#pragma unroll\n      for (int l = 0; l < " + std::to_string(v) +
           "; ++l) {\n        const I q = i + l;\n        r[l] = " + value + ";\n      }\n";
  });
}

const char* kPrelude =
    R"(// generated by kiln codegen_cuda: fp32, shapes baked in, launched by the plan
__device__ __forceinline__ float kmax(float a, float b) { return a < b ? b : a; } // std::max
__device__ __forceinline__ float kmin(float a, float b) { return b < a ? b : a; } // std::min
// TF32: round to nearest (ties away) at a 10-bit mantissa, as the tensor cores see it.
__device__ __forceinline__ float ktf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return __uint_as_float(r);
}
// fp16 round trip: the value an fp16 accumulator holds.
__device__ __forceinline__ float khalf(float x) {
  float r;
  asm("{ .reg .b16 h; cvt.rn.f16.f32 h, %1; cvt.f32.f16 %0, h; }" : "=f"(r) : "f"(x));
  return r;
}
// V consecutive floats; V = 8 is two float4. Callers keep p 4 * V-byte aligned.
template <int V> __device__ __forceinline__ void kld(const float* p, float* r) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int j = 0; j < V; j += 4) {
      const float4 t = *reinterpret_cast<const float4*>(p + j);
      r[j] = t.x; r[j + 1] = t.y; r[j + 2] = t.z; r[j + 3] = t.w;
    }
  } else if constexpr (V == 2) {
    const float2 t = *reinterpret_cast<const float2*>(p);
    r[0] = t.x; r[1] = t.y;
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) r[j] = p[j];
  }
}
template <int V> __device__ __forceinline__ void kst(float* p, const float* r) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int j = 0; j < V; j += 4) *reinterpret_cast<float4*>(p + j) = make_float4(r[j], r[j + 1], r[j + 2], r[j + 3]);
  } else if constexpr (V == 2) {
    *reinterpret_cast<float2*>(p) = make_float2(r[0], r[1]);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) p[j] = r[j];
  }
}
// Reduction state: value, second moment / sum of exps, index. Reducers: init, add, merge (commutative).
struct rstate { float v, s; long long i; };
#define KILN_INF __int_as_float(0x7f800000)
struct r_sum {
  static __device__ __forceinline__ rstate init() { return {0.f, 0.f, 0}; }
  static __device__ __forceinline__ void add(rstate& a, float x, long long) { a.v += x; }
  static __device__ __forceinline__ void merge(rstate& a, const rstate& b) { a.v += b.v; a.s += b.s; }
};
struct r_prod {
  static __device__ __forceinline__ rstate init() { return {1.f, 0.f, 0}; }
  static __device__ __forceinline__ void add(rstate& a, float x, long long) { a.v *= x; }
  static __device__ __forceinline__ void merge(rstate& a, const rstate& b) { a.v *= b.v; }
};
// amax / amin: NaN wins.
struct r_max {
  static __device__ __forceinline__ rstate init() { return {-KILN_INF, 0.f, 0}; }
  static __device__ __forceinline__ void add(rstate& a, float x, long long) { if (a.v == a.v && (x != x || x > a.v)) a.v = x; }
  static __device__ __forceinline__ void merge(rstate& a, const rstate& b) { add(a, b.v, 0); }
};
struct r_min {
  static __device__ __forceinline__ rstate init() { return {KILN_INF, 0.f, 0}; }
  static __device__ __forceinline__ void add(rstate& a, float x, long long) { if (a.v == a.v && (x != x || x < a.v)) a.v = x; }
  static __device__ __forceinline__ void merge(rstate& a, const rstate& b) { add(a, b.v, 0); }
};
// log-sum-exp online: v = running max, s = sum of exp(x - v).
struct r_lse {
  static __device__ __forceinline__ rstate init() { return {-KILN_INF, 0.f, 0}; }
  static __device__ __forceinline__ void merge(rstate& a, const rstate& b) {
    if (b.v == -KILN_INF) return;
    if (a.v == -KILN_INF) { a = b; return; }
    if (b.v > a.v) { a.s = a.s * expf(a.v - b.v) + b.s; a.v = b.v; }
    else a.s += b.s * expf(b.v - a.v);
  }
  static __device__ __forceinline__ void add(rstate& a, float x, long long) { merge(a, rstate{x, 1.f, 0}); }
};
// argmax / argmin: first index on ties; the first NaN wins.
struct r_argmax {
  static __device__ __forceinline__ rstate init() { return {-KILN_INF, 0.f, 0x7fffffffffffffffLL}; }
  static __device__ __forceinline__ void merge(rstate& a, const rstate& b) {
    const bool an = a.v != a.v, bn = b.v != b.v;
    if (an ? (bn && b.i < a.i) : (bn || b.v > a.v || (b.v == a.v && b.i < a.i))) a = b;
  }
  static __device__ __forceinline__ void add(rstate& a, float x, long long i) { merge(a, rstate{x, 0.f, i}); }
};
struct r_argmin {
  static __device__ __forceinline__ rstate init() { return {KILN_INF, 0.f, 0x7fffffffffffffffLL}; }
  static __device__ __forceinline__ void merge(rstate& a, const rstate& b) {
    const bool an = a.v != a.v, bn = b.v != b.v;
    if (an ? (bn && b.i < a.i) : (bn || b.v < a.v || (b.v == a.v && b.i < a.i))) a = b;
  }
  static __device__ __forceinline__ void add(rstate& a, float x, long long i) { merge(a, rstate{x, 0.f, i}); }
};
// (mean, M2, count): Chan et al.'s pairwise combination, an exact variance in one pass.
struct r_chan {
  static __device__ __forceinline__ rstate init() { return {0.f, 0.f, 0}; }
  static __device__ __forceinline__ void merge(rstate& a, const rstate& b) {
    if (b.i == 0) return;
    if (a.i == 0) { a = b; return; }
    const float fb = (float)b.i / (float)(a.i + b.i), d = b.v - a.v;
    a.v += d * fb;
    a.s += b.s + d * d * (float)a.i * fb;
    a.i += b.i;
  }
  static __device__ __forceinline__ void add(rstate& a, float x, long long) { merge(a, rstate{x, 0.f, 1}); }
};
// V values into an online log-sum-exp state with one rescale per vector (r_lse per element pays
// an exp and a branch for each). Infinities as r_lse: -inf adds nothing, +inf counts 1.
template <int V> __device__ __forceinline__ void klse_add(rstate& a, const float* x) {
  float m = x[0];
#pragma unroll
  for (int u = 1; u < V; ++u) m = kmax(m, x[u]);
  if (m > a.v) { a.s = a.s == 0.f ? 0.f : a.s * expf(a.v - m); a.v = m; }
#pragma unroll
  for (int u = 0; u < V; ++u)
    a.s += x[u] == -KILN_INF ? 0.f : (x[u] == a.v ? 1.f : expf(x[u] - a.v));
}
// One float reduced over the T threads of a row (every thread gets it): sums and maxima.
struct f_add {
  static __device__ __forceinline__ float op(float a, float b) { return a + b; }
  static __device__ __forceinline__ float id() { return 0.f; }
};
struct f_max {
  static __device__ __forceinline__ float op(float a, float b) { return kmax(a, b); }
  static __device__ __forceinline__ float id() { return -KILN_INF; }
};
template <class F, int T> __device__ __forceinline__ float kallreduce(float x, float* sh) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) x = F::op(x, __shfl_xor_sync(0xffffffffu, x, m));
  if (T <= 32) return x;
  const int w = (threadIdx.x % T) >> 5, lane = threadIdx.x & 31;
  if (lane == 0) sh[w] = x;
  __syncthreads();
  x = lane < T / 32 ? sh[lane] : F::id();
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) x = F::op(x, __shfl_xor_sync(0xffffffffu, x, m));
  __syncthreads();
  return x;
}
__device__ __forceinline__ rstate kshfl(rstate a, int m) {
  a.v = __shfl_xor_sync(0xffffffffu, a.v, m);
  a.s = __shfl_xor_sync(0xffffffffu, a.s, m);
  a.i = __shfl_xor_sync(0xffffffffu, a.i, m);
  return a;
}
__device__ __forceinline__ rstate kbcast(rstate a) {
  a.v = __shfl_sync(0xffffffffu, a.v, 0);
  a.s = __shfl_sync(0xffffffffu, a.s, 0);
  a.i = __shfl_sync(0xffffffffu, a.i, 0);
  return a;
}
// Reduces over the T threads of a row (T = 32: one warp, no barrier); every thread gets the result.
template <class R, int T> __device__ __forceinline__ rstate kreduce(rstate x, rstate* sh) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) { const rstate o = kshfl(x, m); R::merge(x, o); }
  x = kbcast(x);
  if (T <= 32) return x;
  const int w = (threadIdx.x % T) >> 5, lane = threadIdx.x & 31;
  if (lane == 0) sh[w] = x;
  __syncthreads();
  x = lane < T / 32 ? sh[lane] : R::init();
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) { const rstate o = kshfl(x, m); R::merge(x, o); }
  x = kbcast(x);
  __syncthreads();
  return x;
}
// Inclusive scan over the T threads of a row; total gets the row's sum.
template <int T> __device__ __forceinline__ float kscan(float x, float* sh, float& total) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) { const float y = __shfl_up_sync(0xffffffffu, x, o); if (lane >= o) x += y; }
  if (T <= 32) { total = __shfl_sync(0xffffffffu, x, 31); return x; }
  const int w = (threadIdx.x % T) >> 5;
  if (lane == 31) sh[w] = x;
  __syncthreads();
  if (w == 0) {
    float y = lane < T / 32 ? sh[lane] : 0.f;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) { const float z = __shfl_up_sync(0xffffffffu, y, o); if (lane >= o) y += z; }
    if (lane < T / 32) sh[lane] = y;
  }
  __syncthreads();
  if (w > 0) x += sh[w - 1];
  total = sh[T / 32 - 1];
  __syncthreads();
  return x;
}

)";

} // namespace
} // namespace cuda_gen

using namespace cuda_gen;

expected<cuda_program> generate_cuda(const task& t, const program& p) {
  if (t.type != dtype::float32)
    return error{string("cuda backend: dtype ") + to_string(t.type) +
                 " not supported (float32 only)"};
  if (auto st = check_program(p, t); !st) return st.err();
  gen g(t);
  for (const auto& name : t.outputs) {
    auto r = find_value(t, name);
    if (r.k != value_ref::kind::op)
      return error{"cuda backend: output '" + name + "' is not an op result"};
    g.is_output[r.index] = true;
  }
  for (std::size_t j = 0; j < t.ops.size(); ++j)
    for (const auto& a : t.ops[j].args) {
      auto r = find_value(t, a);
      if (r.k == value_ref::kind::none)
        return error{"cuda backend: op '" + t.ops[j].op + "' reads unknown value '" + a + "'"};
      if (r.k == value_ref::kind::op && t.ops[r.index].is_index)
        return error{"cuda backend: op '" + t.ops[j].op + "' reads the int64 result '" + a +
                     "' (not supported)"};
    }
  for (std::size_t i = 0; i < t.inputs.size(); ++i)
    g.buffers["I" + std::to_string(i)] = {{buffer_kind::input, static_cast<int32_t>(i)},
                                          std::max<int64_t>(1, numel(t.inputs[i].shape)),
                                          false};
  for (std::size_t i = 0; i < t.params.size(); ++i)
    g.buffers["P" + std::to_string(i)] = {{buffer_kind::param, static_cast<int32_t>(i)},
                                          std::max<int64_t>(1, numel(t.params[i].shape)),
                                          false};
  auto& plan = g.prog.plan;
  plan.num_inputs = static_cast<int32_t>(t.inputs.size());
  plan.num_params = static_cast<int32_t>(t.params.size());
  plan.num_outputs = static_cast<int32_t>(t.outputs.size());
  std::vector<int> first_slot(t.outputs.size());
  for (std::size_t k = 0; k < t.outputs.size(); ++k) {
    auto r = find_value(t, t.outputs[k]);
    const op_node& op = t.ops[r.index];
    int64_t elems = std::max<int64_t>(1, numel(op.shape));
    plan.output_bytes.push_back(elems * (op.is_index ? 8 : 4));
    first_slot[k] = static_cast<int>(std::find(t.outputs.begin(), t.outputs.end(), t.outputs[k]) -
                                     t.outputs.begin());
    if (first_slot[k] == static_cast<int>(k)) {
      string sym = "O" + std::to_string(k);
      g.buffers[sym] = {{buffer_kind::output, static_cast<int32_t>(k)}, elems, op.is_index};
      g.value_sym[r.index] = sym;
    }
  }
  bool any_precision = false, all_reduced = true;
  for (std::size_t gi = 0; gi < p.groups.size(); ++gi) {
    const group& grp = p.groups[gi];
    int64_t last = grp.first_op + grp.num_ops - 1;
    const op_node& anchor = t.ops[grp.first_op];
    const op_info* info = find_op(anchor.op);
    if (!info) return error{"cuda backend: unknown op '" + anchor.op + "'"};
    for (const auto& s : grp.knobs)
      if (s.k == knob::precision) {
        any_precision = true;
        all_reduced = all_reduced && s.value != 0;
      }
    bool view =
        grp.tmpl == kernel_template::layout && !g.is_output[last] && is_view_layout(info->family);
    if (view) { // reshape / flatten / dropout: the same buffer under a new shape
      g.value_sym[last] = g.sym_of(anchor.args[0]);
      continue;
    }
    if (g.value_sym[last].empty())
      g.value_sym[last] = g.scratch(numel(t.ops[last].shape), t.ops[last].is_index);
    string dst = g.value_sym[last], pfx = "k" + std::to_string(gi);
    switch (grp.tmpl) {
    case kernel_template::elementwise: emit_elementwise(g, grp, pfx + "_elementwise", dst); break;
    case kernel_template::gemm:
      emit_gemm(g, grp, pfx, gemm_shape_of(g.t, anchor, info->family, cuda_dialect), dst);
      break;
    case kernel_template::library:
      if (info->family == op_family::conv || info->family == op_family::conv_transpose)
        emit_library_conv(g, grp, pfx, anchor, dst);
      else
        emit_library(g, grp, pfx, gemm_shape_of(g.t, anchor, info->family, cuda_dialect), dst);
      break;
    case kernel_template::conv: emit_conv(g, grp, pfx, anchor, dst); break;
    case kernel_template::pool: emit_pool(g, grp, pfx, anchor, *info, dst); break;
    case kernel_template::norm: emit_norm(g, grp, pfx, anchor, *info, dst); break;
    case kernel_template::reduce:
      if (info->family == op_family::softmax || info->family == op_family::cumsum)
        emit_softmax_like(g, grp, pfx, anchor, *info, dst);
      else
        emit_reduce(g, grp, pfx, anchor, *info, dst);
      break;
    case kernel_template::layout: emit_layout(g, grp, pfx, anchor, *info, dst); break;
    }
    if (!g.errors.empty()) return error{g.errors.front()};
  }
  // The same value named twice in `outputs`: copy into the later slots.
  for (std::size_t k = 0; k < t.outputs.size(); ++k) {
    if (first_slot[k] == static_cast<int>(k)) continue;
    auto r = find_value(t, t.outputs[k]);
    string sym = "O" + std::to_string(k);
    const op_node& op = t.ops[r.index];
    int64_t elems = std::max<int64_t>(1, numel(op.shape));
    g.buffers[sym] = {
        {buffer_kind::output, static_cast<int32_t>(k)}, elems * (op.is_index ? 2 : 1), false};
    // int64 values copy as pairs of 32-bit words: the float path moves bits unchanged.
    string src = g.value_sym[r.index];
    if (op.is_index) {
      string alias = src + "w";
      g.buffers[alias] = g.buffers[src];
      g.buffers[alias].is_int = false;
      g.buffers[alias].elems = elems * 2;
      src = alias;
    }
    emit_copy(g, "copy_output" + std::to_string(k), sym, src, elems * (op.is_index ? 2 : 1));
  }
  if (!g.errors.empty()) return error{g.errors.front()};
  g.prog.fast_math = any_precision && all_reduced;
  g.prog.source = string(kPrelude) + g.kernels.str();
  return std::move(g.prog);
}

} // namespace kiln
