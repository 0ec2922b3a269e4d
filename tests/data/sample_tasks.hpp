// Task texts shared by the data/ tests.
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

} // namespace kiln::test
