#include "data/degeneracy.hpp"
#include "data/reference.hpp"
#include "data/task_check.hpp"
#include "data/task_hash.hpp"
#include "data/task_parse.hpp"
#include "tests/data/sample_tasks.hpp"

#include <ATen/ATen.h>
#include <cmath>
#include <doctest/doctest.h>

using namespace kiln;

namespace {

// A one-op task whose args are inputs a0, a1, ... of the given shapes.
task one_op(const std::string& op, std::vector<shape_t> shapes, attr_map attrs = {}) {
  task t;
  t.name = "t_" + op;
  t.level = 1;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    tensor_decl d;
    d.name = "a" + std::to_string(i);
    d.shape = shapes[i];
    t.inputs.push_back(d);
  }
  op_node n;
  n.out = "y";
  n.op = op;
  for (std::size_t i = 0; i < shapes.size(); ++i) n.args.push_back("a" + std::to_string(i));
  n.attrs = std::move(attrs);
  t.ops.push_back(n);
  t.outputs = {"y"};
  auto st = check_task(t);
  REQUIRE_MESSAGE(st.has_value(), (st ? "" : st.message()));
  return t;
}

at::Tensor vec(std::vector<float> v, shape_t shape) {
  return at::tensor(at::ArrayRef<float>(v)).reshape(shape);
}

std::vector<float> run(const std::string& op, std::vector<at::Tensor> args, attr_map attrs = {}) {
  std::vector<shape_t> shapes;
  for (auto& a : args) shapes.push_back(a.sizes().vec());
  auto t = one_op(op, shapes, attrs);
  auto out = run_reference(t, args, {});
  REQUIRE_MESSAGE(out.has_value(), (out ? "" : out.message()));
  auto y = (*out)[0].to(at::kFloat).contiguous();
  return std::vector<float>(y.data_ptr<float>(), y.data_ptr<float>() + y.numel());
}

void near(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-4f) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(tol));
}

float scalar_op(const std::string& op, float x, attr_map attrs = {}) {
  return run(op, {vec({x}, {1})}, attrs)[0];
}

} // namespace

TEST_CASE("unary ops match hand-computed values") {
  near(run("relu", {vec({-1, 2}, {2})}), {0, 2});
  CHECK(scalar_op("leaky_relu", -1, {{"negative_slope", 0.1}}) == doctest::Approx(-0.1));
  CHECK(scalar_op("sigmoid", 0) == doctest::Approx(0.5));
  CHECK(scalar_op("tanh", 0) == doctest::Approx(0.0));
  CHECK(scalar_op("gelu", 1) == doctest::Approx(0.8413447));
  CHECK(scalar_op("gelu", 1, {{"approximate", std::string("tanh")}}) == doctest::Approx(0.8411920));
  CHECK(scalar_op("silu", 1) == doctest::Approx(0.7310586));
  CHECK(scalar_op("mish", 1) == doctest::Approx(0.8650984));
  CHECK(scalar_op("hardswish", 1) == doctest::Approx(4.0 / 6.0));
  CHECK(scalar_op("hardsigmoid", 1) == doctest::Approx(4.0 / 6.0));
  CHECK(scalar_op("hardtanh", 2, {{"min_val", -0.5}, {"max_val", 0.5}}) == doctest::Approx(0.5));
  CHECK(scalar_op("elu", -1, {{"alpha", 2.0}}) == doctest::Approx(2.0 * (std::exp(-1.0) - 1.0)));
  CHECK(scalar_op("selu", 1) == doctest::Approx(1.0507010));
  CHECK(scalar_op("softplus", 1) == doctest::Approx(std::log1p(std::exp(1.0))));
  CHECK(scalar_op("softplus", 30, {{"threshold", 20.0}}) == doctest::Approx(30.0));
  CHECK(scalar_op("softsign", 1) == doctest::Approx(0.5));
  CHECK(scalar_op("exp", 1) == doctest::Approx(std::exp(1.0)));
  CHECK(scalar_op("log", static_cast<float>(std::exp(2.0))) == doctest::Approx(2.0));
  CHECK(scalar_op("abs", -2) == doctest::Approx(2.0));
  CHECK(scalar_op("neg", 2) == doctest::Approx(-2.0));
  CHECK(scalar_op("sqrt", 4) == doctest::Approx(2.0));
  CHECK(scalar_op("rsqrt", 4) == doctest::Approx(0.5));
  CHECK(scalar_op("clamp", 5, {{"max", 3.0}}) == doctest::Approx(3.0));
  CHECK(scalar_op("clamp", -5, {{"min", -1.0}, {"max", 3.0}}) == doctest::Approx(-1.0));
}

TEST_CASE("binary ops broadcast or take a scalar") {
  near(run("add", {vec({1, 2, 3, 4}, {2, 2}), vec({10, 20}, {2})}), {11, 22, 13, 24});
  near(run("sub", {vec({1, 2}, {2})}, {{"scalar", 1.0}}), {0, 1});
  near(run("mul", {vec({1, 2}, {2}), vec({3, 4}, {2})}), {3, 8});
  near(run("div", {vec({1, 2}, {2})}, {{"scalar", 4.0}}), {0.25, 0.5});
  near(run("maximum", {vec({1, 5}, {2}), vec({3, 4}, {2})}), {3, 5});
  near(run("minimum", {vec({1, 5}, {2})}, {{"scalar", 2.0}}), {1, 2});
  near(run("pow", {vec({2, 3}, {2})}, {{"scalar", 2.0}}), {4, 9});
}

TEST_CASE("linear, matmul, bmm") {
  near(run("linear", {vec({1, 2}, {1, 2}), vec({1, 0, 0, 1, 1, 1}, {3, 2}), vec({1, 1, 1}, {3})}),
       {2, 3, 4});
  near(run("matmul", {vec({1, 2, 3, 4}, {2, 2}), vec({1, 1}, {2, 1})}), {3, 7});
  near(run("bmm", {vec({1, 2, 3, 4}, {2, 1, 2}), vec({1, 1, 2, 0}, {2, 2, 1})}), {3, 6});
}

TEST_CASE("convolutions and pooling") {
  near(run("conv1d", {vec({1, 2, 3, 4}, {1, 1, 4}), vec({1, 1}, {1, 1, 2})}), {3, 5, 7});
  near(run("conv1d", {vec({1, 2, 3, 4}, {1, 1, 4}), vec({1, 1}, {1, 1, 2}), vec({10}, {1})},
           {{"stride", int64_t{2}}, {"padding", int64_t{1}}}),
       {11, 15, 14});
  near(run("conv2d", {vec({1, 2, 3, 4}, {1, 1, 2, 2}), vec({1, 1, 1, 1}, {1, 1, 2, 2})}), {10});
  near(run("conv_transpose1d", {vec({1, 2}, {1, 1, 2}), vec({1, 1}, {1, 1, 2})}), {1, 3, 2});
  near(run("max_pool1d", {vec({1, 3, 2, 4}, {1, 1, 4})}, {{"kernel_size", int64_t{2}}}), {3, 4});
  near(run("avg_pool1d", {vec({1, 3, 2, 4}, {1, 1, 4})}, {{"kernel_size", int64_t{2}}}), {2, 3});
  near(run("avg_pool1d", {vec({2, 4}, {1, 1, 2})},
           {{"kernel_size", int64_t{2}}, {"padding", int64_t{1}}}),
       {1, 2}); // count_include_pad, as PyTorch's default
  near(run("adaptive_avg_pool1d", {vec({1, 2, 3, 4}, {1, 1, 4})}, {{"output_size", int64_t{1}}}),
       {2.5});
  near(run("max_pool2d", {vec({1, 5, 3, 2}, {1, 1, 2, 2})}, {{"kernel_size", int64_t{2}}}), {5});
}

TEST_CASE("norms use batch statistics and PyTorch defaults") {
  float s = 1.0f / std::sqrt(1.0f + 1e-5f);
  near(run("batch_norm", {vec({1, 3}, {2, 1})}), {-s, s});
  near(run("instance_norm", {vec({1, 3}, {1, 1, 2})}), {-s, s});
  near(run("group_norm", {vec({1, 3, 5, 7}, {1, 2, 2})}, {{"num_groups", int64_t{2}}}),
       {-s, s, -s, s});
  near(run("layer_norm", {vec({1, 3}, {1, 2})}, {{"normalized_shape", std::vector<int64_t>{2}}}),
       {-s, s});
  float rms = std::sqrt((9.0f + 16.0f) / 2.0f);
  near(run("rms_norm", {vec({3, 4}, {1, 2}), vec({1, 2}, {2})},
           {{"normalized_shape", std::vector<int64_t>{2}}}),
       {3 / rms, 8 / rms});
}

TEST_CASE("reductions, softmax, cumsum and layout") {
  near(run("softmax", {vec({0, std::log(3.0f)}, {2})}, {{"dim", int64_t{0}}}), {0.25, 0.75});
  near(run("log_softmax", {vec({0, 0}, {2})}, {{"dim", int64_t{0}}}),
       {-std::log(2.0f), -std::log(2.0f)});
  near(run("logsumexp", {vec({0, 0}, {1, 2})}, {{"dim", int64_t{1}}}), {std::log(2.0f)});
  near(run("sum", {vec({1, 2, 3, 4}, {2, 2})}, {{"dim", int64_t{0}}}), {4, 6});
  near(run("sum", {vec({1, 2, 3, 4}, {2, 2})}), {10});
  near(run("mean", {vec({1, 2, 3, 4}, {2, 2})}, {{"dim", int64_t{1}}, {"keepdim", true}}),
       {1.5, 3.5});
  near(run("amax", {vec({1, 5, 3, 4}, {2, 2})}, {{"dim", int64_t{1}}}), {5, 4});
  near(run("amin", {vec({1, 5, 3, 4}, {2, 2})}), {1});
  near(run("prod", {vec({1, 2, 3, 4}, {2, 2})}, {{"dim", int64_t{1}}}), {2, 12});
  near(run("argmax", {vec({1, 5, 3, 4}, {2, 2})}, {{"dim", int64_t{1}}}), {1, 1});
  near(run("argmin", {vec({1, 5, 3, 0}, {2, 2})}), {3});
  near(run("cumsum", {vec({1, 2, 3}, {3})}, {{"dim", int64_t{0}}}), {1, 3, 6});
  near(run("permute", {vec({1, 2, 3, 4, 5, 6}, {2, 3})}, {{"dims", std::vector<int64_t>{1, 0}}}),
       {1, 4, 2, 5, 3, 6});
  near(run("transpose", {vec({1, 2, 3, 4, 5, 6}, {2, 3})},
           {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}}),
       {1, 4, 2, 5, 3, 6});
  near(run("reshape", {vec({1, 2, 3, 4}, {2, 2})}, {{"shape", std::vector<int64_t>{-1}}}),
       {1, 2, 3, 4});
  near(run("flatten", {vec({1, 2, 3, 4}, {1, 2, 2})}), {1, 2, 3, 4});
  near(run("dropout", {vec({1, 2}, {2})}, {{"p", 0.0}}), {1, 2});
  near(run("cat", {vec({1, 2, 3, 4}, {2, 2}), vec({5, 6}, {2, 1})}, {{"dim", int64_t{1}}}),
       {1, 2, 5, 3, 4, 6});
  near(run("cat", {vec({1, 2}, {1, 2}), vec({3, 4}, {1, 2}), vec({5, 6}, {1, 2})}),
       {1, 2, 3, 4, 5, 6});
  auto x = vec({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {2, 5});
  near(run("slice", {x}, {{"dim", int64_t{1}}, {"start", int64_t{-4}}, {"step", int64_t{2}}}),
       {1, 3, 6, 8});
  near(run("slice", {x}, {{"dim", int64_t{0}}, {"start", int64_t{1}}, {"end", int64_t{99}}}),
       {5, 6, 7, 8, 9});
  near(run("flip", {x}, {{"dims", int64_t{1}}}), {4, 3, 2, 1, 0, 9, 8, 7, 6, 5});
  auto y = vec({1, 2, 3, 4}, {2, 2});
  near(run("pad", {y}, {{"pad", std::vector<int64_t>{1, 0}}, {"value", -0.5}}),
       {-0.5, 1, 2, -0.5, 3, 4});
  near(run("pad", {y}, {{"pad", std::vector<int64_t>{0, 0, 0, 1}}}), {1, 2, 3, 4, 0, 0});
  // ceil_mode: a partial last window holds the max of its elements in range
  near(run("max_pool1d", {vec({1, 3, 2, 4, 9}, {1, 1, 5})},
           {{"kernel_size", int64_t{2}}, {"ceil_mode", true}}),
       {3, 4, 9});
}

TEST_CASE("params follow torch.nn init, inputs are deterministic per seed") {
  task t = one_op("relu", {{4, 64}});
  t.ops.clear();
  tensor_decl w, bias;
  w.name = "w";
  w.shape = {32, 64};
  w.init = init_kind::kaiming_uniform;
  bias.name = "b";
  bias.shape = {32};
  bias.init = init_kind::bias_uniform;
  bias.of = "w";
  t.params = {w, bias};
  op_node lin;
  lin.out = "y";
  lin.op = "linear";
  lin.args = {"a0", "w", "b"};
  t.ops.push_back(lin);
  REQUIRE(check_task(t));
  auto p = make_params(t, 5, c10::Device(c10::kCPU));
  double bound = 1.0 / std::sqrt(64.0);
  CHECK(p[0].abs().max().item<double>() <= bound);
  CHECK(p[0].abs().max().item<double>() > 0.9 * bound);
  CHECK(p[1].abs().max().item<double>() <= bound);
  auto a = make_inputs(t, 11, c10::Device(c10::kCPU));
  auto b = make_inputs(t, 11, c10::Device(c10::kCPU));
  auto c = make_inputs(t, 12, c10::Device(c10::kCPU));
  CHECK(at::equal(a[0], b[0]));
  CHECK_FALSE(at::equal(a[0], c[0]));
  CHECK(a[0].min().item<double>() >= 0.0);
  CHECK(a[0].max().item<double>() < 1.0);
}

TEST_CASE("draw modifiers: scale and shift, one random scalar, triangles and symmetry") {
  task t = one_op("relu", {{6, 6}});
  for (int i = 1; i < 5; ++i) {
    tensor_decl d;
    d.name = "a" + std::to_string(i);
    d.shape = i == 4 ? shape_t{3, 5} : shape_t{6, 6};
    t.inputs.push_back(d);
    op_node n;
    n.out = "y" + std::to_string(i);
    n.op = "relu";
    n.args = {d.name};
    t.ops.push_back(n);
    t.outputs.push_back(n.out);
  }
  t.inputs[0].init = init_kind::randint; // randint(0, 2) * 2 - 1: +-1 targets
  t.inputs[0].lo = 0, t.inputs[0].hi = 2;
  t.inputs[0].scale = 2, t.inputs[0].shift = -1;
  t.inputs[1].structure = structure_kind::triu;
  t.inputs[2].structure = structure_kind::symmetric;
  t.inputs[3].init = init_kind::normal; // randn * 0.02
  t.inputs[3].scale = 0.02;
  t.inputs[4].random_scale = true; // rand(...) * rand(())
  REQUIRE(check_task(t));
  auto x = make_inputs(t, 3, c10::Device(c10::kCPU));
  CHECK(at::equal(x[0].abs(), at::ones({6, 6})));
  CHECK(x[0].min().item<float>() == -1.f);
  CHECK(at::equal(x[1], x[1].triu()));
  CHECK(x[1].triu(0).sum().item<double>() > 0);
  CHECK(at::equal(x[2], x[2].transpose(0, 1)));
  CHECK(x[3].abs().max().item<double>() < 0.2);
  CHECK(x[3].abs().max().item<double>() > 0.01);
  // The random scalar comes after the tensor in the stream: the same seed without the modifier
  // gives the same values divided by one scalar in [0, 1).
  task plain = t;
  plain.inputs[4].random_scale = false;
  auto y = make_inputs(plain, 3, c10::Device(c10::kCPU));
  auto ratio = x[4] / y[4];
  CHECK(ratio.max().item<double>() - ratio.min().item<double>() < 1e-5);
  CHECK(ratio.max().item<double>() < 1.0);

  // softmax after the random scale: each row a distribution (KernelBench's KL divergence inputs)
  task dist = t;
  dist.inputs[4].softmax = true;
  REQUIRE(check_task(dist));
  auto p = make_inputs(dist, 3, c10::Device(c10::kCPU));
  CHECK(at::allclose(p[4].sum(-1), at::ones({3})));
  CHECK(at::allclose(p[4], x[4].softmax(-1)));
  dist.inputs[2].softmax = true; // symmetric: a softmax of a triangle or a symmetric matrix
  auto e = check_task(dist);
  REQUIRE_FALSE(e);
  CHECK(e.message().find("softmax and structure together") != std::string::npos);

  task bad = t;
  bad.inputs[4].structure = structure_kind::tril;
  e = check_task(bad);
  REQUIRE_FALSE(e);
  CHECK(e.message().find("needs square matrices") != std::string::npos);
  bad = t;
  bad.inputs[0].init = init_kind::ones;
  e = check_task(bad);
  REQUIRE_FALSE(e);
  CHECK(e.message().find("apply to uniform, normal and randint") != std::string::npos);
  bad.inputs[0].scale = 1, bad.inputs[0].shift = 0;
  bad.inputs[0].structure = structure_kind::tril; // tril(ones) is a mask: allowed
  CHECK(check_task(bad));
  bad.inputs[0].init = init_kind::zeros;
  CHECK_FALSE(check_task(bad));
  bad = t;
  bad.inputs[3].scale = 0;
  CHECK_FALSE(check_task(bad));
  bad.inputs[3].scale = 1e-50; // zero in float32
  CHECK_FALSE(check_task(bad));
  bad.inputs[3].scale = 1e39; // inf in float32
  CHECK_FALSE(check_task(bad));
}

TEST_CASE("low-precision tasks round inputs and outputs to their dtype") {
  task t = one_op("relu", {{8}});
  t.type = dtype::bfloat16;
  auto in = make_inputs(t, 1, c10::Device(c10::kCPU));
  auto out = run_reference(t, in, {});
  REQUIRE(out);
  CHECK(bool((*out)[0].scalar_type() == at::kBFloat16));
  CHECK(at::equal(in[0].to(at::kBFloat16).to(at::kFloat), in[0]));
}

TEST_CASE("params are drawn from the task's param_seed where it has one, else its name's") {
  auto plain = task_from_toml(test::kGemm, "gemm.toml");
  REQUIRE(plain);
  auto seeded = *plain;
  seeded.param_seed = 2;
  CHECK(default_param_seed(*plain) == (fnv1a64(plain->name) & 0x7fffffffffffull));
  CHECK(default_param_seed(seeded) == 2);
  c10::Device cpu(c10::kCPU);
  auto drawn = make_params(seeded, default_param_seed(seeded), cpu);
  CHECK(at::equal(drawn[0], make_params(*plain, 2, cpu)[0]));
  CHECK_FALSE(at::equal(drawn[0], make_params(*plain, default_param_seed(*plain), cpu)[0]));
}

TEST_CASE("degenerate tasks are flagged") {
  c10::Device cpu(c10::kCPU);
  SUBCASE("a healthy task passes") {
    auto r = check_degeneracy(one_op("relu", {{64, 64}}), cpu);
    REQUIRE(r);
    CHECK_FALSE(r->degenerate);
  }
  SUBCASE("softmax over a size-1 dim is all ones") {
    auto r = check_degeneracy(one_op("softmax", {{64, 1}}, {{"dim", int64_t{1}}}), cpu);
    REQUIRE(r);
    CHECK(r->degenerate);
    CHECK(r->reason.find("does not change with the inputs") != std::string::npos);
  }
  SUBCASE("outputs within tolerance of zero") {
    auto r = check_degeneracy(one_op("mul", {{64, 64}}, {{"scalar", 1e-6}}), cpu);
    REQUIRE(r);
    CHECK(r->degenerate);
    CHECK(r->reason.find("all-zeros output is within tolerance on 100.00%") != std::string::npos);
  }
  SUBCASE("zeros within tolerance on all but a few elements: refused, naming an atol that works") {
    // KernelBench's softmax over 16,384 columns: almost every probability is below 1e-3.
    auto t = one_op("softmax", {{4, 16384}}, {{"dim", int64_t{1}}});
    t.inputs[0].init = init_kind::normal;
    auto ok = check_degeneracy(t, cpu);
    REQUIRE(ok);
    CHECK_FALSE(ok->degenerate); // at the default 1e-4 zeros miss on a good share
    t.tol.atol = t.tol.rtol = 1e-3;
    auto r = check_degeneracy(t, cpu);
    REQUIRE(r);
    CHECK(r->degenerate);
    CHECK(r->reason.find("all-zeros output is within tolerance on 99.") != std::string::npos);
    CHECK(r->reason.find("would need atol below") != std::string::npos);
  }
  SUBCASE("one constant within tolerance on all but a few elements") {
    // exp of inputs in [0, 1e-3): every value is 1 + a little, nearly one constant.
    auto t = one_op("exp", {{64, 64}});
    t.inputs[0].scale = 1e-3;
    t.tol.atol = t.tol.rtol = 4e-4;
    auto r = check_degeneracy(t, cpu);
    REQUIRE(r);
    CHECK(r->degenerate);
    CHECK(r->reason.find("constant-fill kernel") != std::string::npos);
  }
  SUBCASE("a constant must pass every seed, not only the one it is closest to") {
    // One element that moves between seeds: with atol between the nearest and the farthest
    // seed's distance from the seeds' mean, that mean passes one seed and fails another.
    auto t = one_op("sum", {{1, 64}}, {{"dim", int64_t{1}}, {"keepdim", true}});
    std::vector<double> v;
    for (int s = 0; s < 3; ++s)
      v.push_back((*run_reference(t, make_inputs(t, 1000 + s, cpu), {}))[0].item<double>());
    double mean = (v[0] + v[1] + v[2]) / 3, near = 1e30, far = 0;
    for (double x : v) {
      near = std::min(near, std::abs(x - mean));
      far = std::max(far, std::abs(x - mean));
    }
    REQUIRE(near < far);
    t.tol.rtol = 0;
    t.tol.atol = (near + far) / 2;
    REQUIRE(std::max(std::abs(v[1] - v[0]), std::abs(v[2] - v[0])) > t.tol.atol); // seeds differ
    auto r = check_degeneracy(t, cpu, 3);
    REQUIRE(r);
    CHECK_FALSE(r->degenerate);
  }
  SUBCASE("a slice at a time gives the verdict and figures of the whole output") {
    // Slices of 1000 elements (not a divisor of 4 x 16384): every branch sums across slices.
    auto sm = one_op("softmax", {{4, 16384}}, {{"dim", int64_t{1}}});
    sm.inputs[0].init = init_kind::normal;
    auto ex = one_op("exp", {{64, 64}});
    ex.inputs[0].scale = 1e-3;
    ex.tol.atol = ex.tol.rtol = 4e-4;
    auto mx = one_op("argmax", {{64, 64}}, {{"dim", int64_t{1}}});
    for (int k = 0; k < 4; ++k) {
      auto t = k == 3 ? mx : k == 2 ? ex : sm;
      if (k == 1) t.tol.atol = t.tol.rtol = 1e-3;
      auto whole = check_degeneracy(t, cpu, 3);
      auto sliced = check_degeneracy(t, cpu, 3, 1000);
      REQUIRE(whole);
      REQUIRE(sliced);
      CHECK(sliced->degenerate == whole->degenerate);
      CHECK(sliced->reason == whole->reason);
      CHECK(sliced->max_abs == doctest::Approx(whole->max_abs));
      CHECK(sliced->zero_pass_share == doctest::Approx(whole->zero_pass_share));
    }
    // log of an upper-triangular draw: its first zero (-inf) is at flat index 64, past the first
    // slice of 63 elements, and is still seen
    auto inf = one_op("log", {{64, 64}});
    inf.inputs[0].structure = structure_kind::triu;
    auto n = check_degeneracy(inf, cpu, 3, 63);
    REQUIRE(n);
    CHECK(n->reason.find("NaN or Inf") != std::string::npos);
  }
  SUBCASE("the max of many uniform samples is near-constant") {
    auto r = check_degeneracy(one_op("amax", {{4, 1 << 16}}, {{"dim", int64_t{1}}}), cpu);
    REQUIRE(r);
    CHECK(r->degenerate);
  }
  SUBCASE("NaN outputs") {
    auto r = check_degeneracy(one_op("log", {{8, 8}}), cpu); // log of uniform [0,1) stays finite...
    REQUIRE(r);
    CHECK_FALSE(r->degenerate);
    auto t = one_op("log", {{8, 8}});
    t.inputs[0].init = init_kind::normal; // ...log of normal samples is NaN for negatives
    auto n = check_degeneracy(t, cpu);
    REQUIRE(n);
    CHECK(n->degenerate);
    CHECK(n->reason.find("NaN") != std::string::npos);
  }
}
