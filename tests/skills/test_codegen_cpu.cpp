// The cpu backend end to end: program -> generate_cpu -> compile_cpu -> cpu_program::run, checked
// against the LibTorch reference on every cpu suite task and on small hand-made tasks whose shapes
// divide nothing.
#include "compile/cpu_compiler.hpp"
#include "data/op_vocab.hpp"
#include "data/reference.hpp"
#include "data/task_check.hpp"
#include "data/task_parse.hpp"
#include "data/task_set.hpp"
#include "runtimes/cpu_runtime.hpp"
#include "skills/codegen_cpu.hpp"
#include "skills/expert.hpp"
#include "skills/grammar.hpp"

#include <ATen/ATen.h>
#include <algorithm>
#include <cstdlib>
#include <doctest/doctest.h>
#include <functional>
#include <random>
#include <sstream>

using namespace kiln;

namespace {

const task_set& suites() {
  static const task_set s = load_tasks({KILN_SOURCE_DIR "/data/suites/level1/cpu",
                                        KILN_SOURCE_DIR "/data/suites/level2/cpu",
                                        KILN_SOURCE_DIR "/data/suites/level3/cpu"});
  return s;
}

cpu_compile_options compile_options() {
  cpu_compile_options o;
  o.cache_dir = KILN_KERNEL_CACHE;
  o.include_dir = KILN_SOURCE_DIR "/skills";
  return o;
}

struct outcome {
  enum class stage { generate, compile, load, run, wrong, correct } at = stage::generate;
  std::string message;
  double compile_ms = 0;
  bool cache_hit = false;
};

// Compares every element: |got - want| <= atol + rtol * |want|; NaN only where the reference has
// NaN; integer (argmax) outputs exactly.
std::string compare(const at::Tensor& got, const at::Tensor& want, const tolerance& tol) {
  if (got.sizes() != want.sizes()) return "shape differs";
  if (want.scalar_type() == at::kLong) {
    int64_t bad = got.ne(want).sum().item<int64_t>();
    return bad ? std::to_string(bad) + " indices differ" : "";
  }
  auto diff = (got - want).abs();
  auto bad = diff.gt(tol.atol + tol.rtol * want.abs()) | got.isnan().ne(want.isnan());
  int64_t n = bad.sum().item<int64_t>();
  if (!n) return "";
  std::ostringstream s;
  s << n << " of " << want.numel() << " elements off, max |diff| "
    << diff.masked_fill(diff.isnan(), 0).max().item<double>();
  return s.str();
}

outcome evaluate(const task& t, const program& p, uint64_t seed = 7) {
  outcome r;
  auto src = generate_cpu(t, p);
  if (!src) {
    r.message = src.message();
    return r;
  }
  r.at = outcome::stage::compile;
  auto art = compile_cpu(*src, compile_options());
  if (!art) {
    r.message = art.message();
    return r;
  }
  r.compile_ms = art->compile_ms;
  r.cache_hit = art->cache_hit;
  r.at = outcome::stage::load;
  auto prog = cpu_program::load(art->so_path);
  if (!prog) {
    r.message = prog.message();
    return r;
  }
  r.at = outcome::stage::run;
  auto cpu = c10::Device(c10::kCPU);
  auto inputs = make_inputs(t, seed, cpu);
  auto params = make_params(t, default_param_seed(t), cpu);
  auto want = run_reference(t, inputs, params);
  if (!want) {
    r.message = want.message();
    return r;
  }
  std::vector<at::Tensor> outs;
  std::vector<const void*> in_ptrs, param_ptrs;
  std::vector<void*> out_ptrs;
  for (auto& x : inputs) in_ptrs.push_back(x.data_ptr());
  for (auto& x : params) param_ptrs.push_back(x.data_ptr());
  for (const auto& w : *want) {
    outs.push_back(w.scalar_type() == at::kLong ? at::full_like(w, -7) : at::full_like(w, NAN));
    out_ptrs.push_back(outs.back().data_ptr());
  }
  if (auto st = prog->run(in_ptrs, param_ptrs, out_ptrs); !st) {
    r.message = st.message();
    return r;
  }
  r.at = outcome::stage::wrong;
  for (std::size_t i = 0; i < outs.size(); ++i)
    if (auto why = compare(outs[i], (*want)[i], t.tol); !why.empty()) {
      r.message = "output '" + t.outputs[i] + "': " + why;
      return r;
    }
  r.at = outcome::stage::correct;
  return r;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void check_suite_level(int level) {
  std::vector<double> compile_ms;
  int n = 0, good = 0;
  for (const auto& t : suites().tasks) {
    if (t.level != level) continue;
    ++n;
    auto r = evaluate(t, expert_program(t, backend_kind::cpu));
    CHECK_MESSAGE(r.at == outcome::stage::correct, t.name << ": " << r.message);
    if (r.at == outcome::stage::correct) ++good;
    if (!r.cache_hit && r.compile_ms > 0) compile_ms.push_back(r.compile_ms);
  }
  MESSAGE("level " << level << ": " << good << " / " << n << " expert programs correct; "
                   << compile_ms.size() << " compiled, median " << median(compile_ms) << " ms");
  CHECK(n > 0);
}

task make_task(const std::string& body) {
  std::string toml =
      "level = 1\n" +
      std::string(body.find("dtype") == std::string::npos ? "dtype = \"float32\"\n" : "") + body;
  auto t = task_from_toml(toml, "inline.toml");
  REQUIRE_MESSAGE(t.has_value(), (t ? "" : t.message()));
  auto st = check_task(*t);
  REQUIRE_MESSAGE(st.has_value(), (st ? "" : st.message()));
  return *t;
}

// A program like the expert's with every group changed by `f`.
program variant(const task& t, const std::function<void(group&)>& f) {
  program p = expert_program(t, backend_kind::cpu);
  for (auto& g : p.groups) f(g);
  return canonical(p);
}

void set(group& g, knob k, int64_t v) {
  for (auto& s : g.knobs)
    if (s.k == k) {
      s.value = v;
      return;
    }
  g.knobs.push_back({k, v});
}

void require_correct(const task& t, const program& p) {
  auto r = evaluate(t, p);
  CHECK_MESSAGE(r.at == outcome::stage::correct, t.name << " [" << print(p) << "]: " << r.message);
}

} // namespace

TEST_CASE("expert programs are correct on the level 1 cpu suite") { check_suite_level(1); }
TEST_CASE("expert programs are correct on the level 2 cpu suite") { check_suite_level(2); }
TEST_CASE("expert programs are correct on the level 3 cpu suite") { check_suite_level(3); }

namespace {

// Hand-made tasks: every family, shapes that no vec or tile divides.
const char* kUnary = R"(
name = "unary_all"
outputs = ["r0","r1","r2","r3","r4","r5","r6","r7","r8","r9","r10","r11","r12","r13","r14","r15","r16","r17","r18","r19","r20","r21","r22","r23","r24","r25","r26","r27"]
[[inputs]]
name = "x"
shape = [3, 37]
init = "normal"
[[inputs]]
name = "big"
shape = [5, 41]
init = "randint:-100:100"
[[inputs]]
name = "u"
shape = [3, 37]
init = "uniform"
[[ops]]
out = "r0"
op = "relu"
args = ["x"]
[[ops]]
out = "r1"
op = "leaky_relu"
args = ["x"]
attrs = { negative_slope = 0.2 }
[[ops]]
out = "r2"
op = "sigmoid"
args = ["x"]
[[ops]]
out = "r3"
op = "tanh"
args = ["x"]
[[ops]]
out = "r4"
op = "gelu"
args = ["x"]
[[ops]]
out = "r5"
op = "gelu"
args = ["x"]
attrs = { approximate = "tanh" }
[[ops]]
out = "r6"
op = "silu"
args = ["x"]
[[ops]]
out = "r7"
op = "mish"
args = ["x"]
[[ops]]
out = "r8"
op = "hardswish"
args = ["x"]
[[ops]]
out = "r9"
op = "hardsigmoid"
args = ["x"]
[[ops]]
out = "r10"
op = "hardtanh"
args = ["x"]
attrs = { min_val = -0.5, max_val = 0.7 }
[[ops]]
out = "r11"
op = "elu"
args = ["x"]
attrs = { alpha = 0.8 }
[[ops]]
out = "r12"
op = "selu"
args = ["x"]
[[ops]]
out = "r13"
op = "softplus"
args = ["x"]
attrs = { beta = 2.0, threshold = 1.0 }
[[ops]]
out = "r14"
op = "softsign"
args = ["x"]
[[ops]]
out = "r15"
op = "exp"
args = ["x"]
[[ops]]
out = "r16"
op = "log"
args = ["u"]
[[ops]]
out = "r17"
op = "abs"
args = ["x"]
[[ops]]
out = "r18"
op = "neg"
args = ["x"]
[[ops]]
out = "r19"
op = "sqrt"
args = ["u"]
[[ops]]
out = "r20"
op = "rsqrt"
args = ["u"]
[[ops]]
out = "r21"
op = "clamp"
args = ["x"]
attrs = { min = -0.3 }
[[ops]]
out = "r22"
op = "exp"
args = ["big"]
[[ops]]
out = "r23"
op = "tanh"
args = ["big"]
[[ops]]
out = "r24"
op = "sigmoid"
args = ["big"]
[[ops]]
out = "r25"
op = "gelu"
args = ["big"]
[[ops]]
out = "r26"
op = "mish"
args = ["big"]
[[ops]]
out = "r27"
op = "silu"
args = ["big"]
)";

const char* kBinary = R"(
name = "binary_all"
outputs = ["b0","b1","b2","b3","b4","b6","b7","b9"]
[[inputs]]
name = "x"
shape = [4, 5, 7]
init = "normal"
[[inputs]]
name = "y"
shape = [5, 1]
init = "normal"
[[inputs]]
name = "z"
shape = [7]
init = "uniform"
[[inputs]]
name = "w"
shape = [4, 1, 7]
init = "normal"
[[ops]]
out = "b0"
op = "add"
args = ["x", "y"]
[[ops]]
out = "b1"
op = "sub"
args = ["z", "x"]
[[ops]]
out = "b2"
op = "mul"
args = ["x", "w"]
[[ops]]
out = "b3"
op = "div"
args = ["x", "z"]
[[ops]]
out = "b4"
op = "maximum"
args = ["x", "w"]
[[ops]]
out = "b5"
op = "minimum"
args = ["x", "y"]
[[ops]]
out = "b6"
op = "pow"
args = ["b5"]
attrs = { scalar = 2.0 }
[[ops]]
out = "b7"
op = "pow"
args = ["z", "w"]
[[ops]]
out = "b8"
op = "div"
args = ["x"]
attrs = { scalar = 3.0 }
[[ops]]
out = "b9"
op = "maximum"
args = ["b8"]
attrs = { scalar = 0.1 }
)";

const char* kGemm = R"(
name = "gemm_shapes"
outputs = ["g1", "g2", "g3", "g4", "g5", "g6", "g7"]
[[inputs]]
name = "x"
shape = [13, 37]
init = "normal"
[[inputs]]
name = "v"
shape = [37]
init = "normal"
[[inputs]]
name = "c"
shape = [3, 37, 11]
init = "normal"
[[inputs]]
name = "a4"
shape = [2, 1, 5, 7]
init = "normal"
[[inputs]]
name = "b3"
shape = [3, 7, 9]
init = "normal"
[[inputs]]
name = "p"
shape = [3, 5, 7]
init = "normal"
[[params]]
name = "w"
shape = [19, 37]
init = "kaiming_uniform"
[[params]]
name = "b"
shape = [19]
init = "bias_uniform"
of = "w"
[[ops]]
out = "g0"
op = "linear"
args = ["x", "w", "b"]
[[ops]]
out = "g1"
op = "relu"
args = ["g0"]
[[ops]]
out = "g2"
op = "matmul"
args = ["v", "v"]
[[ops]]
out = "g3"
op = "matmul"
args = ["x", "v"]
[[ops]]
out = "g4"
op = "matmul"
args = ["v", "c"]
[[ops]]
out = "g5"
op = "matmul"
args = ["a4", "b3"]
[[ops]]
out = "g6"
op = "bmm"
args = ["p", "b3"]
[[ops]]
out = "g7"
op = "matmul"
args = ["x", "c"]
)";

const char* kConv = R"(
name = "conv_shapes"
outputs = ["c0", "c1", "c2", "c3", "c4", "c5"]
[[inputs]]
name = "x2"
shape = [2, 6, 11, 13]
init = "normal"
[[inputs]]
name = "x1"
shape = [2, 6, 17]
init = "normal"
[[inputs]]
name = "x3"
shape = [1, 3, 5, 6, 7]
init = "normal"
[[params]]
name = "w2"
shape = [10, 3, 3, 2]
init = "kaiming_uniform"
[[params]]
name = "b2"
shape = [10]
init = "bias_uniform"
of = "w2"
[[params]]
name = "w1"
shape = [9, 2, 3]
init = "kaiming_uniform"
[[params]]
name = "w3"
shape = [5, 3, 2, 3, 2]
init = "kaiming_uniform"
[[params]]
name = "wt2"
shape = [6, 5, 3, 3]
init = "kaiming_uniform"
[[params]]
name = "bt2"
shape = [10]
init = "bias_uniform"
of = "wt2"
[[params]]
name = "wt1"
shape = [6, 4, 4]
init = "kaiming_uniform"
[[params]]
name = "wt3"
shape = [3, 2, 2, 3, 3]
init = "kaiming_uniform"
[[ops]]
out = "c0"
op = "conv2d"
args = ["x2", "w2", "b2"]
attrs = { stride = [2, 1], padding = [1, 2], dilation = [1, 2], groups = 2 }
[[ops]]
out = "c1"
op = "conv1d"
args = ["x1", "w1"]
attrs = { groups = 3, dilation = 2, padding = 1 }
[[ops]]
out = "c2"
op = "conv3d"
args = ["x3", "w3"]
attrs = { stride = 2, padding = 1 }
[[ops]]
out = "c3"
op = "conv_transpose2d"
args = ["x2", "wt2", "bt2"]
attrs = { stride = 2, padding = 1, output_padding = 1, groups = 2 }
[[ops]]
out = "c4"
op = "conv_transpose1d"
args = ["x1", "wt1"]
attrs = { stride = 3, padding = 2, dilation = 2 }
[[ops]]
out = "c5"
op = "conv_transpose3d"
args = ["x3", "wt3"]
attrs = { stride = [2, 1, 2], padding = [0, 1, 1] }
)";

const char* kPool = R"(
name = "pool_shapes"
outputs = ["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9"]
[[inputs]]
name = "x"
shape = [2, 3, 11, 13]
init = "normal"
[[inputs]]
name = "v"
shape = [3, 17]
init = "normal"
[[inputs]]
name = "x3"
shape = [2, 2, 5, 7, 9]
init = "normal"
[[ops]]
out = "p0"
op = "max_pool2d"
args = ["x"]
attrs = { kernel_size = 3, stride = 2, padding = 1, dilation = 2 }
[[ops]]
out = "p1"
op = "avg_pool2d"
args = ["x"]
attrs = { kernel_size = [3, 2], padding = 1 }
[[ops]]
out = "p2"
op = "adaptive_avg_pool2d"
args = ["x"]
attrs = { output_size = [3, 5] }
[[ops]]
out = "p3"
op = "max_pool1d"
args = ["v"]
attrs = { kernel_size = 4, stride = 3 }
[[ops]]
out = "p4"
op = "avg_pool3d"
args = ["x3"]
attrs = { kernel_size = 2, padding = 1 }
[[ops]]
out = "p5"
op = "adaptive_avg_pool3d"
args = ["x3"]
attrs = { output_size = [2, 3, 4] }
[[ops]]
out = "p6"
op = "max_pool3d"
args = ["x3"]
attrs = { kernel_size = [2, 3, 2], stride = [1, 2, 3] }
[[ops]]
out = "p7"
op = "max_pool2d"
args = ["x"]
attrs = { kernel_size = 2, ceil_mode = true }
[[ops]]
out = "p8"
op = "max_pool1d"
args = ["v"]
attrs = { kernel_size = 4, stride = 3, ceil_mode = true }
[[ops]]
out = "p9"
op = "max_pool3d"
args = ["x3"]
attrs = { kernel_size = 2, padding = 1, ceil_mode = true }
)";

const char* kNorm = R"(
name = "norm_shapes"
outputs = ["n0", "n1", "n2", "n3", "n4", "n5", "n6"]
[[inputs]]
name = "x"
shape = [3, 6, 5, 7]
init = "normal"
[[inputs]]
name = "y"
shape = [5, 6, 9]
init = "normal"
[[params]]
name = "w"
shape = [6]
init = "normal"
[[params]]
name = "b"
shape = [6]
init = "normal"
[[params]]
name = "lw"
shape = [5, 7]
init = "normal"
[[params]]
name = "lb"
shape = [5, 7]
init = "normal"
[[ops]]
out = "n0"
op = "batch_norm"
args = ["x", "w", "b"]
[[ops]]
out = "n1"
op = "group_norm"
args = ["x", "w", "b"]
attrs = { num_groups = 3, eps = 1e-3 }
[[ops]]
out = "n2"
op = "layer_norm"
args = ["x", "lw", "lb"]
attrs = { normalized_shape = [5, 7] }
[[ops]]
out = "n3"
op = "instance_norm"
args = ["y", "w", "b"]
[[ops]]
out = "n4"
op = "rms_norm"
args = ["x", "lw"]
attrs = { normalized_shape = [5, 7] }
[[ops]]
out = "n5"
op = "batch_norm"
args = ["y"]
[[ops]]
out = "n6"
op = "layer_norm"
args = ["y"]
attrs = { normalized_shape = 9 }
)";

const char* kReduce = R"(
name = "reduce_shapes"
outputs = ["r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10", "r11"]
[[inputs]]
name = "x"
shape = [3, 5, 7]
init = "normal"
[[inputs]]
name = "u"
shape = [3, 5, 7]
init = "uniform"
[[ops]]
out = "r0"
op = "softmax"
args = ["x"]
attrs = { dim = 1 }
[[ops]]
out = "r1"
op = "log_softmax"
args = ["x"]
attrs = { dim = 0 }
[[ops]]
out = "r2"
op = "logsumexp"
args = ["x"]
attrs = { dim = [0, 2], keepdim = true }
[[ops]]
out = "r3"
op = "sum"
args = ["x"]
attrs = { dim = [1], keepdim = true }
[[ops]]
out = "r4"
op = "mean"
args = ["x"]
[[ops]]
out = "r5"
op = "amax"
args = ["x"]
attrs = { dim = [0, 2] }
[[ops]]
out = "r6"
op = "amin"
args = ["x"]
attrs = { dim = -1 }
[[ops]]
out = "r7"
op = "prod"
args = ["u"]
attrs = { dim = 1 }
[[ops]]
out = "r8"
op = "argmax"
args = ["x"]
attrs = { dim = 1 }
[[ops]]
out = "r9"
op = "argmin"
args = ["x"]
[[ops]]
out = "r10"
op = "cumsum"
args = ["x"]
attrs = { dim = 1 }
[[ops]]
out = "r11"
op = "argmax"
args = ["x"]
attrs = { dim = 2, keepdim = true }
)";

const char* kLayout = R"(
name = "layout_shapes"
outputs = ["l0", "l2", "l3", "l4", "l5", "l6"]
[[inputs]]
name = "x"
shape = [3, 5, 7]
init = "normal"
[[ops]]
out = "l0"
op = "reshape"
args = ["x"]
attrs = { shape = [7, -1] }
[[ops]]
out = "l1"
op = "permute"
args = ["x"]
attrs = { dims = [2, 0, 1] }
[[ops]]
out = "l2"
op = "transpose"
args = ["l1"]
attrs = { dim0 = 0, dim1 = 2 }
[[ops]]
out = "l3"
op = "flatten"
args = ["l2"]
attrs = { start_dim = 1 }
[[ops]]
out = "l4"
op = "dropout"
args = ["x"]
attrs = { p = 0.0 }
[[ops]]
out = "l5"
op = "reshape"
args = ["l1"]
attrs = { shape = [35, 3] }
[[ops]]
out = "l6"
op = "relu"
args = ["l5"]
)";

// cat, slice, flip and pad: copies, never views (a slice that no output holds still gets its own
// buffer).
const char* kCatSlice = R"(
name = "cat_slice_shapes"
outputs = ["c0", "c1", "s1", "s3", "c2", "f0", "f1", "g0", "g1", "g2"]
[[inputs]]
name = "x"
shape = [3, 5, 7]
init = "normal"
[[inputs]]
name = "y"
shape = [3, 2, 7]
init = "normal"
[[ops]]
out = "c0"
op = "cat"
args = ["x", "y", "x"]
attrs = { dim = 1 }
[[ops]]
out = "s0"
op = "slice"
args = ["x"]
attrs = { dim = 1, start = -4, step = 2 }
[[ops]]
out = "c1"
op = "cat"
args = ["s0", "y"]
attrs = { dim = -2 }
[[ops]]
out = "s1"
op = "slice"
args = ["x"]
attrs = { dim = 2, start = 1, end = 100, step = 3 }
[[ops]]
out = "s2"
op = "slice"
args = ["x"]
attrs = { dim = 0, start = 1, end = 2 }
[[ops]]
out = "s3"
op = "reshape"
args = ["s2"]
attrs = { shape = [5, 7] }
[[ops]]
out = "c2"
op = "cat"
args = ["s1", "s1"]
attrs = { dim = -1 }
[[ops]]
out = "f0"
op = "flip"
args = ["x"]
attrs = { dims = [0, -1] }
[[ops]]
out = "f1"
op = "flip"
args = ["s1"]
attrs = { dims = 1 }
[[ops]]
out = "g0"
op = "pad"
args = ["x"]
attrs = { pad = [1, 2, 0, 1], value = -0.5 }
[[ops]]
out = "g1"
op = "pad"
args = ["s1"]
attrs = { pad = [0, 0, 0, 0, 2, 1] }
[[ops]]
out = "g2"
op = "pad"
args = ["f1"]
attrs = { pad = [3, 0] }
)";

const char* kFused = R"(
name = "fused_epilogues"
outputs = ["f3", "e2", "h2", "s2"]
[[inputs]]
name = "x"
shape = [2, 3, 9, 10]
init = "normal"
[[inputs]]
name = "r"
shape = [2, 5, 9, 10]
init = "normal"
[[params]]
name = "w"
shape = [5, 3, 3, 3]
init = "kaiming_uniform"
[[params]]
name = "cb"
shape = [5, 1, 1]
init = "normal"
[[ops]]
out = "f0"
op = "conv2d"
args = ["x", "w"]
attrs = { padding = 1 }
[[ops]]
out = "f1"
op = "add"
args = ["f0", "cb"]
[[ops]]
out = "f2"
op = "sub"
args = ["r", "f1"]
[[ops]]
out = "f3"
op = "mish"
args = ["f2"]
[[ops]]
out = "e0"
op = "group_norm"
args = ["f3"]
attrs = { num_groups = 5 }
[[ops]]
out = "e1"
op = "mul"
args = ["e0", "e0"]
[[ops]]
out = "e2"
op = "hardswish"
args = ["e1"]
[[ops]]
out = "h0"
op = "max_pool2d"
args = ["e2"]
attrs = { kernel_size = 2 }
[[ops]]
out = "h1"
op = "tanh"
args = ["h0"]
[[ops]]
out = "h2"
op = "mul"
args = ["h1"]
attrs = { scalar = 1.5 }
[[ops]]
out = "s0"
op = "softmax"
args = ["r"]
attrs = { dim = 1 }
[[ops]]
out = "s1"
op = "add"
args = ["s0", "cb"]
[[ops]]
out = "s2"
op = "gelu"
args = ["s1"]
)";

} // namespace

TEST_CASE("hand-made tasks with non-divisible shapes: every family") {
  for (const char* toml :
       {kUnary, kBinary, kGemm, kConv, kPool, kNorm, kReduce, kLayout, kCatSlice, kFused}) {
    task t = make_task(toml);
    require_correct(t, expert_program(t, backend_kind::cpu));
  }
}

// Every conv and conv_transpose task of the suites (1d / 2d / 3d, strided, dilated, grouped,
// depthwise, with and without bias, fused epilogues) with its conv group by the library GEMM.
TEST_CASE("library convolutions (im2col / col2im + GEMM) are correct on every suite conv task") {
  int n = 0;
  for (const auto& t : suites().tasks) {
    bool conv = false;
    program p = variant(t, [&](group& g) {
      auto f = find_op(t.ops[g.first_op].op)->family;
      if (f != op_family::conv && f != op_family::conv_transpose) return;
      conv = true;
      g.tmpl = kernel_template::library;
      g.knobs = {{knob::precision, 0}, {knob::block, 256}, {knob::vec, 4}};
    });
    if (!conv || t.level == 3) continue; // level 3 repeats the same convolutions, larger
    ++n;
    require_correct(t, p);
  }
  MESSAGE(n << " conv tasks by the library");
  CHECK(n >= 40);
  task conv = make_task(kConv);
  require_correct(conv, variant(conv, [](group& g) {
                    if (g.tmpl == kernel_template::conv) g.tmpl = kernel_template::library;
                  }));
}

TEST_CASE("safe knob variants stay correct") {
  task gemm = make_task(kGemm);
  for (auto [tm, tn, tk, sk, stage] :
       {std::array<int64_t, 5>{8, 16, 8, 2, 1}, {32, 8, 16, 1, 0}, {16, 32, 64, 4, 0}}) {
    require_correct(gemm, variant(gemm, [&](group& g) {
                      if (g.tmpl == kernel_template::library) g.tmpl = kernel_template::gemm;
                      set(g, knob::tile_m, tm), set(g, knob::tile_n, tn), set(g, knob::tile_k, tk),
                          set(g, knob::split_k, sk), set(g, knob::stage, stage);
                    }));
  }
  task conv = make_task(kConv);
  require_correct(conv, variant(conv, [](group& g) {
                    set(g, knob::tile_m, 8), set(g, knob::tile_n, 32), set(g, knob::unroll, 4);
                  }));
  task fused = make_task(kFused);
  require_correct(fused, variant(fused, [](group& g) {
                    set(g, knob::vec, 8), set(g, knob::unroll, 2), set(g, knob::block, 64);
                  }));
  task norm = make_task(kNorm);
  require_correct(norm, variant(norm, [](group& g) { set(g, knob::vec, 4); }));
}

TEST_CASE("bounds 0 drops the edge checks only where the shapes divide: never a wrong result") {
  auto source = [](const task& t, const program& p) {
    auto src = generate_cpu(t, p);
    REQUIRE_MESSAGE(src, src.message());
    return *src;
  };
  task ew = make_task(kBinary); // 140 elements: vec 8 leaves a remainder of 4, vec 4 none
  auto with = [&](int64_t vec, int64_t b) {
    return variant(ew, [&](group& g) { set(g, knob::vec, vec), set(g, knob::bounds, b); });
  };
  // Ragged: the generator keeps the checks the shapes need, whatever the program asks.
  CHECK(source(ew, with(8, 0)) == source(ew, with(8, 1)));
  CHECK(evaluate(ew, with(8, 0)).at == outcome::stage::correct);
  // Divisible: bounds 0 is leaner code, and still correct.
  CHECK(source(ew, with(4, 0)) != source(ew, with(4, 1)));
  CHECK(evaluate(ew, with(4, 0)).at == outcome::stage::correct);

  task gemm = make_task(kGemm); // m = 13, n = 19, k = 37 against 8 x 8 x 8 tiles
  auto tiles = [&](int64_t b) {
    return variant(gemm, [&](group& g) {
      if (g.tmpl == kernel_template::library) g.tmpl = kernel_template::gemm;
      set(g, knob::tile_m, 8), set(g, knob::tile_n, 8), set(g, knob::tile_k, 8),
          set(g, knob::bounds, b);
    });
  };
  CHECK(source(gemm, tiles(0)) == source(gemm, tiles(1)));
  CHECK(evaluate(gemm, tiles(0)).at == outcome::stage::correct);
}

TEST_CASE("reduced precision fails for real on a long reduction") {
  // The task admits reduced precision (else check_program refuses it, below) but keeps an fp32
  // tolerance: fp16 / tf32 math must really be reduced to fail it.
  task t = make_task(R"(
name = "long_k"
outputs = ["y"]
[tolerance]
atol = 1e-4
rtol = 1e-4
reduced_precision = true
[[inputs]]
name = "x"
shape = [16, 4096]
init = "normal"
[[params]]
name = "w"
shape = [16, 4096]
init = "normal"
[[ops]]
out = "y"
op = "linear"
args = ["x", "w"]
)");
  auto prec = [&](kernel_template tm, int64_t p) {
    return variant(t, [&](group& g) { g.tmpl = tm, set(g, knob::precision, p); });
  };
  CHECK(evaluate(t, prec(kernel_template::gemm, 0)).at == outcome::stage::correct);
  CHECK(evaluate(t, prec(kernel_template::gemm, 2)).at == outcome::stage::wrong);
  CHECK(evaluate(t, prec(kernel_template::gemm, 1)).at == outcome::stage::wrong);
  CHECK(evaluate(t, prec(kernel_template::library, 2)).at == outcome::stage::wrong);
  task fp32 = t;
  fp32.tol.reduced_precision = false;
  auto st = check_program(prec(kernel_template::gemm, 2), fp32);
  REQUIRE_FALSE(st.has_value());
  CHECK(st.message().find("reduced_precision") != std::string::npos);
}

TEST_CASE("unsupported dtypes are errors, not crashes") {
  task t = make_task(R"(
name = "half"
dtype = "float16"
outputs = ["y"]
[[inputs]]
name = "x"
shape = [4]
[[ops]]
out = "y"
op = "relu"
args = ["x"]
)");
  auto src = generate_cpu(t, expert_program(t, backend_kind::cpu));
  REQUIRE_FALSE(src.has_value());
  CHECK(src.message() == "cpu backend: dtype float16 not supported");
}

TEST_CASE("random masked programs never crash the generator") {
  std::mt19937_64 rng(1234);
  const auto& tasks = suites().tasks;
  int generated = 0, errors = 0, compiled = 0, correct = 0, tried = 0;
  std::vector<std::string> notes;
  // KILN_CODEGEN_FUZZ_COMPILE=N compiles and verifies up to N sampled programs (default 8).
  const char* env = std::getenv("KILN_CODEGEN_FUZZ_COMPILE");
  const int budget = env ? std::atoi(env) : 8;
  int wrong_shown = 0, safe_wrong = 0;
  // Safe knobs only: any wrong result is a generator bug, not the agent's risk.
  auto safe = [](const program& p) {
    for (const auto& g : p.groups)
      if (g.get(knob::precision, 0) != 0 || g.get(knob::onepass, 0) != 0) return false;
    return true;
  };
  for (std::size_t i = 0; i < tasks.size() && i < 30 * 6; i += 6) {
    const task& t = tasks[i];
    for (int k = 0; k < 10; ++k) {
      auto parsed = parse_program(tokens_to_text(sample_program(t, rng)));
      REQUIRE(parsed.has_value());
      auto src = generate_cpu(t, *parsed);
      src ? ++generated : ++errors;
      if (src && (k == 0 || env) && tried < budget) { // compile and verify a handful
        ++tried;
        auto r = evaluate(t, *parsed);
        if (r.at >= outcome::stage::load) ++compiled;
        if (r.at == outcome::stage::correct) ++correct;
        if (r.at < outcome::stage::load)
          notes.push_back(t.name + ": " + r.message.substr(0, 300));
        else if (r.at != outcome::stage::correct && safe(*parsed)) {
          ++safe_wrong;
          if (wrong_shown++ < 20)
            MESSAGE("fuzz: safe program wrong: " << t.name << " [" << print(*parsed)
                                                 << "]: " << r.message);
        }
      }
    }
  }
  MESSAGE("fuzz: " << generated << " generated, " << errors << " generator errors; of " << tried
                   << " compiled: " << compiled << " built, " << correct << " verified correct");
  for (const auto& n : notes) MESSAGE("fuzz compile failure: " << n);
  CHECK(compiled == tried); // generated source always builds
  CHECK(safe_wrong == 0);
}
