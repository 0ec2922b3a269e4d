// Task texts shared by the tests.
#pragma once

namespace kiln::test {

// The example of DESIGN.md's task spec v1.
inline const char* kGemm = R"(
name = "gemm_multiply_leakyrelu"
level = 2
dtype = "float32"
outputs = ["y2"]
[tolerance]
atol = 1e-4
rtol = 1e-4
[[inputs]]
name = "x"
shape = [128, 1024]
init = "uniform"
[[params]]
name = "w"
shape = [512, 1024]
init = "kaiming_uniform"
[[params]]
name = "b"
shape = [512]
init = "bias_uniform"
of = "w"
[[ops]]
out = "y0"
op = "linear"
args = ["x", "w", "b"]
[[ops]]
out = "y1"
op = "mul"
args = ["y0"]
attrs = { scalar = 2.0 }
[[ops]]
out = "y2"
op = "leaky_relu"
args = ["y1"]
attrs = { negative_slope = 0.01 }
)";

// y = relu(x + b), x [256, 1024], b [1024]: the pool's executor tests (cpu and cuda).
inline const char* kAddRelu = R"(
name = "add_relu"
level = 1
dtype = "float32"
outputs = ["y"]
[tolerance]
atol = 1e-5
rtol = 1e-5
[[inputs]]
name = "x"
shape = [256, 1024]
init = "normal"
[[params]]
name = "b"
shape = [1024]
init = "uniform"
[[ops]]
out = "y0"
op = "add"
args = ["x", "b"]
[[ops]]
out = "y"
op = "relu"
args = ["y0"]
)";

} // namespace kiln::test
