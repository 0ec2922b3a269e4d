#include "data/op_vocab.hpp"

#include <doctest/doctest.h>
#include <limits>

using namespace kiln;

namespace {

shape_t infer(const char* op, std::vector<shape_t> args, attr_map attrs = {}) {
  const op_info* info = find_op(op);
  REQUIRE(info != nullptr);
  auto s = infer_shape(*info, args, attrs);
  REQUIRE_MESSAGE(s.has_value(), (s ? "" : s.message()));
  return *s;
}

std::string infer_error(const char* op, std::vector<shape_t> args, attr_map attrs = {}) {
  const op_info* info = find_op(op);
  REQUIRE(info != nullptr);
  auto s = infer_shape(*info, args, attrs);
  REQUIRE_FALSE(s.has_value());
  return s.message();
}

} // namespace

TEST_CASE("the vocabulary holds every v1 op") {
  for (auto name : {"relu",
                    "leaky_relu",
                    "sigmoid",
                    "tanh",
                    "gelu",
                    "silu",
                    "mish",
                    "hardswish",
                    "hardsigmoid",
                    "hardtanh",
                    "elu",
                    "selu",
                    "softplus",
                    "softsign",
                    "exp",
                    "log",
                    "abs",
                    "neg",
                    "sqrt",
                    "rsqrt",
                    "clamp",
                    "add",
                    "sub",
                    "mul",
                    "div",
                    "maximum",
                    "minimum",
                    "pow",
                    "linear",
                    "matmul",
                    "bmm",
                    "conv1d",
                    "conv2d",
                    "conv3d",
                    "conv_transpose1d",
                    "conv_transpose2d",
                    "conv_transpose3d",
                    "max_pool1d",
                    "max_pool2d",
                    "max_pool3d",
                    "avg_pool1d",
                    "avg_pool2d",
                    "avg_pool3d",
                    "adaptive_avg_pool1d",
                    "adaptive_avg_pool2d",
                    "adaptive_avg_pool3d",
                    "batch_norm",
                    "group_norm",
                    "layer_norm",
                    "instance_norm",
                    "rms_norm",
                    "softmax",
                    "log_softmax",
                    "logsumexp",
                    "sum",
                    "mean",
                    "amax",
                    "amin",
                    "prod",
                    "argmax",
                    "argmin",
                    "cumsum",
                    "reshape",
                    "permute",
                    "transpose",
                    "flatten",
                    "dropout",
                    "cat",
                    "slice",
                    "flip",
                    "pad"})
    CHECK_MESSAGE(find_op(name) != nullptr, name);
  CHECK(find_op("conv4d") == nullptr);
}

TEST_CASE("elementwise and broadcasting") {
  CHECK(infer("relu", {{2, 3}}) == shape_t{2, 3});
  CHECK(infer("add", {{4, 1, 3}, {5, 1}}) == shape_t{4, 5, 3});
  CHECK(infer("mul", {{2, 3}}, {{"scalar", 2.0}}) == shape_t{2, 3});
  CHECK(infer_error("add", {{2, 3}, {4, 3}}).find("do not broadcast") != std::string::npos);
  CHECK(infer_error("mul", {{2, 3}}).find("attrs.scalar") != std::string::npos);
  CHECK(infer_error("gelu", {{2}}, {{"approximate", std::string("fast")}})
            .find("attrs.approximate") != std::string::npos);
  CHECK(infer_error("leaky_relu", {{2}}, {{"slope", 0.1}}).find("unknown attribute") !=
        std::string::npos);
  CHECK(infer_error("leaky_relu", {{2}}, {{"negative_slope", std::string("x")}})
            .find("expected a number") != std::string::npos);
}

TEST_CASE("linear, matmul, bmm") {
  CHECK(infer("linear", {{8, 16}, {32, 16}, {32}}) == shape_t{8, 32});
  CHECK(infer("linear", {{2, 8, 16}, {32, 16}}) == shape_t{2, 8, 32});
  CHECK(infer_error("linear", {{8, 16}, {32, 15}}).find("in_features") != std::string::npos);
  CHECK(infer_error("linear", {{8, 16}, {32, 16}, {31}}).find("args[2]") != std::string::npos);
  CHECK(infer("matmul", {{3, 4}, {4, 5}}) == shape_t{3, 5});
  CHECK(infer("matmul", {{7, 1, 3, 4}, {2, 4, 5}}) == shape_t{7, 2, 3, 5});
  CHECK(infer("matmul", {{4}, {4, 5}}) == shape_t{5});
  CHECK(infer("matmul", {{3, 4}, {4}}) == shape_t{3});
  CHECK(infer("bmm", {{2, 3, 4}, {2, 4, 5}}) == shape_t{2, 3, 5});
  CHECK(infer_error("bmm", {{2, 3, 4}, {3, 4, 5}}).find("bmm") != std::string::npos);
}

TEST_CASE("convolutions follow PyTorch's output-size formulas") {
  CHECK(infer("conv2d", {{1, 3, 32, 32}, {16, 3, 3, 3}}) == shape_t{1, 16, 30, 30});
  CHECK(infer("conv2d", {{1, 3, 32, 32}, {16, 3, 3, 3}, {16}},
              {{"stride", int64_t{2}}, {"padding", int64_t{1}}}) == shape_t{1, 16, 16, 16});
  CHECK(infer("conv2d", {{1, 3, 32, 32}, {16, 3, 3, 3}}, {{"dilation", int64_t{2}}}) ==
        shape_t{1, 16, 28, 28});
  CHECK(infer("conv1d", {{2, 8, 100}, {8, 1, 5}}, {{"groups", int64_t{8}}}) == shape_t{2, 8, 96});
  CHECK(infer("conv3d", {{1, 2, 8, 9, 10}, {4, 2, 3, 3, 3}}) == shape_t{1, 4, 6, 7, 8});
  CHECK(infer("conv_transpose2d", {{1, 8, 16, 16}, {8, 4, 3, 3}},
              {{"stride", int64_t{2}}, {"padding", int64_t{1}}, {"output_padding", int64_t{1}}}) ==
        shape_t{1, 4, 32, 32});
  CHECK(infer("conv_transpose1d", {{1, 4, 10}, {4, 3, 3}}, {{"groups", int64_t{2}}}) ==
        shape_t{1, 6, 12});
  CHECK(infer_error("conv2d", {{1, 3, 32, 32}, {16, 4, 3, 3}}).find("input channels") !=
        std::string::npos);
  CHECK(infer_error("conv2d", {{1, 3, 2, 2}, {16, 3, 3, 3}}).find("output spatial size") !=
        std::string::npos);
  CHECK(infer_error("conv2d", {{1, 3, 32}, {16, 3, 3, 3}}).find("rank") != std::string::npos);
  CHECK(infer_error("conv2d", {{1, 4, 8, 8}, {4, 2, 3, 3}}, {{"groups", int64_t{3}}})
            .find("attrs.groups") != std::string::npos);
  CHECK(infer_error("conv2d", {{1, 3, 8, 8}, {4, 3, 3, 3}},
                    {{"stride", std::vector<int64_t>{1, 1, 1}}})
            .find("entries") != std::string::npos);
}

TEST_CASE("pooling") {
  CHECK(infer("max_pool2d", {{1, 3, 32, 32}}, {{"kernel_size", int64_t{2}}}) ==
        shape_t{1, 3, 16, 16});
  CHECK(infer("max_pool2d", {{1, 3, 32, 32}},
              {{"kernel_size", int64_t{3}}, {"stride", int64_t{2}}, {"padding", int64_t{1}}}) ==
        shape_t{1, 3, 16, 16});
  CHECK(infer("avg_pool1d", {{2, 4, 10}}, {{"kernel_size", int64_t{3}}, {"stride", int64_t{1}}}) ==
        shape_t{2, 4, 8});
  CHECK(infer("max_pool3d", {{1, 2, 8, 8, 8}}, {{"kernel_size", int64_t{2}}}) ==
        shape_t{1, 2, 4, 4, 4});
  CHECK(infer("adaptive_avg_pool2d", {{2, 3, 17, 9}}, {{"output_size", int64_t{1}}}) ==
        shape_t{2, 3, 1, 1});
  CHECK(infer_error("max_pool2d", {{1, 3, 8, 8}},
                    {{"kernel_size", int64_t{2}}, {"padding", int64_t{2}}})
            .find("attrs.padding") != std::string::npos);
  CHECK(infer_error("max_pool2d", {{1, 3, 8, 8}}).find("attrs.kernel_size") != std::string::npos);
}

// PyTorch's rule: ceil_mode adds a partial last window, unless it would start in the right padding.
TEST_CASE("max pools with ceil_mode") {
  auto pool = [](shape_t x, int64_t k, int64_t s, int64_t p) {
    return infer("max_pool1d", {std::move(x)},
                 {{"kernel_size", k}, {"stride", s}, {"padding", p}, {"ceil_mode", true}});
  };
  CHECK(pool({1, 2, 11}, 2, 2, 0) == shape_t{1, 2, 6}); // floor: 5
  CHECK(pool({1, 2, 10}, 2, 2, 0) == shape_t{1, 2, 5}); // no partial window
  CHECK(pool({1, 2, 17}, 4, 3, 0) == shape_t{1, 2, 6});
  CHECK(pool({1, 2, 17}, 2, 2, 1) == shape_t{1, 2, 9}); // a 10th window would start in the padding
  CHECK(infer("max_pool2d", {{1, 3, 11, 13}}, {{"kernel_size", int64_t{2}}, {"ceil_mode", true}}) ==
        shape_t{1, 3, 6, 7});
  CHECK(infer("max_pool2d", {{1, 3, 11, 13}},
              {{"kernel_size", int64_t{2}}, {"ceil_mode", false}}) == shape_t{1, 3, 5, 6});
}

TEST_CASE("constant pad: F.pad's order, last dim first") {
  using V = std::vector<int64_t>;
  CHECK(infer("pad", {{2, 3, 4}}, {{"pad", V{1, 2}}}) == shape_t{2, 3, 7});
  CHECK(infer("pad", {{2, 3, 4}}, {{"pad", V{1, 2, 0, 3}}, {"value", -0.5}}) == shape_t{2, 6, 7});
  CHECK(infer("pad", {{2, 3, 4}}, {{"pad", V{0, 0, 0, 0, 1, 0}}}) == shape_t{3, 3, 4});
  auto w = pad_widths_of({{"pad", V{1, 2, 0, 3}}}, {2, 3, 4});
  REQUIRE(w.has_value());
  CHECK((w->before == V{0, 0, 1} && w->after == V{0, 3, 2}));
  auto err = [](attr_map a) { return infer_error("pad", {{2, 3, 4}}, std::move(a)); };
  CHECK(err({}).find("attrs.pad: required") != std::string::npos);
  CHECK(err({{"pad", V{1}}}).find("even number of widths") != std::string::npos);
  CHECK(err({{"pad", V{0, 0, 0, 0, 0, 0, 1, 1}}}).find("at most two per dim") != std::string::npos);
  CHECK(err({{"pad", V{1, -1}}}).find("attrs.pad[1]") != std::string::npos); // crop: slice
  CHECK(err({{"pad", V{int64_t{1} << 40, 0}}}).find("attrs.pad[0]") != std::string::npos);
  CHECK(err({{"pad", V{1, 1}}, {"value", std::numeric_limits<double>::infinity()}})
            .find("attrs.value: must be finite") != std::string::npos);
}

TEST_CASE("norms check their parameter shapes") {
  CHECK(infer("batch_norm", {{4, 3, 8, 8}, {3}, {3}}) == shape_t{4, 3, 8, 8});
  CHECK(infer("group_norm", {{4, 8, 5}, {8}, {8}}, {{"num_groups", int64_t{4}}}) ==
        shape_t{4, 8, 5});
  CHECK(infer("layer_norm", {{2, 5, 16}, {16}, {16}},
              {{"normalized_shape", std::vector<int64_t>{16}}}) == shape_t{2, 5, 16});
  CHECK(infer("rms_norm", {{2, 5, 16}}, {{"normalized_shape", std::vector<int64_t>{5, 16}}}) ==
        shape_t{2, 5, 16});
  CHECK(infer_error("group_norm", {{4, 8, 5}}, {{"num_groups", int64_t{3}}}).find("num_groups") !=
        std::string::npos);
  CHECK(infer_error("layer_norm", {{2, 5, 16}}, {{"normalized_shape", std::vector<int64_t>{5}}})
            .find("normalized_shape") != std::string::npos);
  CHECK(infer_error("batch_norm", {{4, 3, 8, 8}, {4}, {4}}).find("args[1]") != std::string::npos);
  CHECK(infer_error("batch_norm", {{4, 3}, {3}}).find("weight and bias") != std::string::npos);
}

TEST_CASE("reductions, softmax and layout") {
  CHECK(infer("sum", {{2, 3, 4}}, {{"dim", int64_t{1}}}) == shape_t{2, 4});
  CHECK(infer("mean", {{2, 3, 4}}, {{"dim", std::vector<int64_t>{-1, 0}}, {"keepdim", true}}) ==
        shape_t{1, 3, 1});
  CHECK(infer("amax", {{2, 3}}) == shape_t{});
  CHECK(infer("argmax", {{2, 3}}, {{"dim", int64_t{1}}}) == shape_t{2});
  CHECK(infer("logsumexp", {{2, 3}}, {{"dim", int64_t{1}}, {"keepdim", true}}) == shape_t{2, 1});
  CHECK(infer("softmax", {{2, 3}}, {{"dim", int64_t{-1}}}) == shape_t{2, 3});
  CHECK(infer("cumsum", {{2, 3}}, {{"dim", int64_t{0}}}) == shape_t{2, 3});
  CHECK(infer("reshape", {{2, 3, 4}}, {{"shape", std::vector<int64_t>{6, -1}}}) == shape_t{6, 4});
  CHECK(infer("permute", {{2, 3, 4}}, {{"dims", std::vector<int64_t>{2, 0, 1}}}) ==
        shape_t{4, 2, 3});
  CHECK(infer("transpose", {{2, 3, 4}}, {{"dim0", int64_t{0}}, {"dim1", int64_t{-1}}}) ==
        shape_t{4, 3, 2});
  CHECK(infer("flatten", {{2, 3, 4, 5}}, {{"start_dim", int64_t{1}}}) == shape_t{2, 60});
  CHECK(infer("dropout", {{2, 3}}, {{"p", 0.0}}) == shape_t{2, 3});
  CHECK(infer_error("sum", {{2, 3}}, {{"dim", int64_t{2}}}).find("out of range") !=
        std::string::npos);
  CHECK(infer_error("sum", {{2, 3}}, {{"dim", std::vector<int64_t>{1, -1}}}).find("repeated") !=
        std::string::npos);
  CHECK(infer_error("softmax", {{2, 3}}).find("attrs.dim: required") != std::string::npos);
  CHECK(infer_error("reshape", {{2, 3, 4}}, {{"shape", std::vector<int64_t>{5, -1}}})
            .find("does not fit") != std::string::npos);
  CHECK(infer_error("reshape", {{2, 3}}, {{"shape", std::vector<int64_t>{-1, -1}}})
            .find("more than one") != std::string::npos);
  CHECK(infer_error("permute", {{2, 3, 4}}, {{"dims", std::vector<int64_t>{0, 0, 1}}})
            .find("permutation") != std::string::npos);
  CHECK(infer_error("dropout", {{2, 3}}, {{"p", 0.5}}).find("p = 0") != std::string::npos);
}

TEST_CASE("cat joins along one dim, the others must agree") {
  using I = int64_t;
  CHECK(infer("cat", {{2, 3, 4}, {2, 5, 4}, {2, 1, 4}}, {{"dim", I{1}}}) == shape_t{2, 9, 4});
  CHECK(infer("cat", {{2, 3}, {2, 3}}, {{"dim", I{-1}}}) == shape_t{2, 6});
  CHECK(infer("cat", {{2, 3}, {4, 3}}) == shape_t{6, 3}); // dim defaults to 0, as torch.cat
  CHECK(infer_error("cat", {{2, 3}}).find("takes 2 to 64") != std::string::npos);
  CHECK(infer_error("cat", {{2, 3}, {3, 3}}, {{"dim", I{1}}}).find("args[1]: cat on dim 1") !=
        std::string::npos);
  CHECK(infer_error("cat", {{2, 3}, {2, 3, 1}}, {{"dim", I{0}}}).find("args[1]") !=
        std::string::npos);
  CHECK(infer_error("cat", {{2, 3}, {2, 3}}, {{"dim", I{2}}}).find("attrs.dim: out of range") !=
        std::string::npos);
  CHECK(infer_error("cat", {{}, {}}).find("rank >= 1") != std::string::npos);
}

TEST_CASE("slice clamps its bounds as Python does") {
  using I = int64_t;
  auto s = [](attr_map a) { return infer("slice", {{4, 10}}, std::move(a)); };
  CHECK(s({{"dim", I{1}}, {"start", I{2}}, {"end", I{8}}, {"step", I{3}}}) == shape_t{4, 2});
  CHECK(s({{"dim", I{1}}, {"start", I{-4}}, {"end", I{100}}, {"step", I{2}}}) == shape_t{4, 2});
  CHECK(s({{"dim", I{-1}}, {"start", I{-100}}}) == shape_t{4, 10});
  CHECK(s({{"dim", I{0}}, {"end", I{-1}}}) == shape_t{3, 10});
  auto w = slice_window_of({{"dim", I{1}}, {"start", I{-4}}, {"step", I{3}}}, {4, 10});
  REQUIRE(w.has_value());
  CHECK((w->dim == 1 && w->start == 6 && w->step == 3 && w->len == 2));
  CHECK(infer_error("slice", {{4, 10}}, {{"dim", I{1}}, {"start", I{7}}, {"end", I{3}}})
            .find("selects no element") != std::string::npos);
  CHECK(infer_error("slice", {{4, 10}}, {{"dim", I{1}}, {"step", I{0}}}).find("attrs.step") !=
        std::string::npos);
  CHECK(infer_error("slice", {{4, 10}}, {{"dim", I{2}}}).find("attrs.dim: out of range") !=
        std::string::npos);
  CHECK(infer_error("slice", {{4, 10}}, {{"start", I{1}}}).find("attrs.dim: required") !=
        std::string::npos);
  CHECK(infer_error("slice", {{}}, {{"dim", I{0}}}).find("rank >= 1") != std::string::npos);
  CHECK(infer("flip", {{4, 10}}, {{"dims", std::vector<int64_t>{0, -1}}}) == shape_t{4, 10});
  CHECK(infer_error("flip", {{4, 10}}, {{"dims", std::vector<int64_t>{1, -1}}})
            .find("not distinct") != std::string::npos);
  CHECK(is_view_layout(op_family::reshape));
  CHECK_FALSE(is_view_layout(op_family::slice));
  CHECK_FALSE(is_view_layout(op_family::cat));
}
