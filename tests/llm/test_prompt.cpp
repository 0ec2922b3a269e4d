#include "data/task_check.hpp"
#include "data/task_parse.hpp"
#include "llm/prompt.hpp"

#include <doctest/doctest.h>

using namespace kiln;

TEST_CASE(
    "the task prompt states inputs, params, ops with attrs and shapes, tolerance, baselines") {
  auto t = task_from_toml(R"(
name = "conv_relu"
level = 2
dtype = "float32"
outputs = ["y"]
[[inputs]]
name = "x"
shape = [2, 3, 8, 8]
init = "normal"
[[params]]
name = "w"
shape = [4, 3, 3, 3]
init = "kaiming_uniform"
[[ops]]
out = "c"
op = "conv2d"
args = ["x", "w"]
attrs = { stride = 1, padding = 1 }
[[ops]]
out = "y"
op = "relu"
args = ["c"]
)",
                          "inline.toml");
  REQUIRE_MESSAGE(t, t.message());
  REQUIRE(check_task(*t));
  auto p = llm_task_prompt(*t, backend_kind::cpu, llm_answer_format::kiln, 2.5, 1.25);
  CHECK(p.find("Task `conv_relu` (level 2), backend cpu") != std::string::npos);
  CHECK(p.find("- x: [2, 3, 8, 8], normal(0, 1)") != std::string::npos);
  CHECK(p.find("- w: [4, 3, 3, 3], kaiming_uniform") != std::string::npos);
  CHECK(p.find("c = conv2d(x, w, padding=1, stride=1)  # [2, 4, 8, 8]") != std::string::npos);
  CHECK(p.find("y = relu(c)  # [2, 4, 8, 8]") != std::string::npos);
  CHECK(p.find("not allowed") != std::string::npos);
  CHECK(p.find("PyTorch eager 2.5 ms, torch.compile 1.25 ms") != std::string::npos);
  CHECK(llm_task_prompt(*t, backend_kind::cuda, llm_answer_format::kiln, std::nullopt, std::nullopt)
            .find("Baselines") == std::string::npos);

  auto cpu = llm_system_prompt(backend_kind::cpu, llm_answer_format::kiln),
       cuda = llm_system_prompt(backend_kind::cuda, llm_answer_format::kiln);
  CHECK(cpu.find("Writing kernels for Kiln") != std::string::npos);
  CHECK(cpu.find("typedef struct kiln_host") != std::string::npos); // the cpu ABI header
  CHECK(cuda.find("kiln_cuda_run_fn") != std::string::npos);        // the cuda one
}

TEST_CASE("the task prompt states draw modifiers: a kernel may rely on a triangle or symmetry") {
  auto t = task_from_toml(R"(
name = "tri"
level = 1
dtype = "float32"
outputs = ["y"]
[[inputs]]
name = "a"
shape = [8, 8]
structure = "triu"
[[inputs]]
name = "t"
shape = [8, 8]
init = "randint:0:2"
scale = 2.0
shift = -1.0
[[ops]]
out = "y"
op = "matmul"
args = ["a", "t"]
)",
                          "inline.toml");
  REQUIRE_MESSAGE(t, t.message());
  REQUIRE(check_task(*t));
  auto p =
      llm_task_prompt(*t, backend_kind::cpu, llm_answer_format::kiln, std::nullopt, std::nullopt);
  CHECK(p.find("- a: [8, 8], uniform in [0, 1), upper triangle kept (triu)") != std::string::npos);
  CHECK(p.find("- t: [8, 8], integers in [0, 2), times 2.0, plus -1.0") != std::string::npos);
}

TEST_CASE("the kernelbench answer format asks with the problem's Model source, for ModelNew") {
  auto t = task_from_toml(R"(
name = "kb_relu"
level = 1
outputs = ["y"]
[[inputs]]
name = "x"
shape = [4, 8]
init = "normal"
[[ops]]
out = "y"
op = "relu"
args = ["x"]
[kernelbench]
source = "class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
init_inputs = []
forward = [{ input = "x" }]
state_dict = {}
model_keys = []
)",
                          "inline.toml");
  REQUIRE_MESSAGE(t, t.message());
  REQUIRE(check_task(*t));
  auto p = llm_task_prompt(*t, backend_kind::cpu, llm_answer_format::kernelbench, 0.5, {});
  CHECK(p.find("Task `kb_relu`") != std::string::npos); // scripted servers key on it
  CHECK(p.find("```python\nclass Model(nn.Module):\n    def forward(self, x):\n        return "
               "torch.relu(x)\n") != std::string::npos);
  CHECK(p.find("name your optimized architecture ModelNew") != std::string::npos);
  CHECK(p.find("PyTorch eager 0.5 ms") != std::string::npos);
  CHECK(p.find("in this order in `inputs`") == std::string::npos); // not the ops form
  auto sys = llm_system_prompt(backend_kind::cuda, llm_answer_format::kernelbench);
  CHECK(sys.find("custom CUDA kernels") != std::string::npos);
  CHECK(sys.find("kiln_run") == std::string::npos); // Kiln's ABI is not part of this format
}

TEST_CASE("a PyTorch-module reference is stated by the module's source, never its TorchScript") {
  auto t = task_from_toml(R"(
name = "mod"
level = 3
outputs = ["y"]
[[inputs]]
name = "x"
shape = [4, 8]
init = "normal"
[[params]]
name = "fc_weight"
shape = [2, 8]
init = "kaiming_uniform"
[[params]]
name = "h0"
shape = [4, 2]
init = "normal"
[[ops]]
out = "y"
op = "pytorch_module"
args = ["x", "fc_weight", "h0"]
attrs = { inputs = 1, state_dict = "fc.weight h0", shape = [4, 2], torchscript = "UEsDBAAAAAAAAA==" }
[kernelbench]
source = "class Model(nn.Module):\n    def forward(self, x):\n        return self.fc(x)\n"
init_inputs = []
forward = [{ input = "x" }]
state_dict = { fc_weight = "fc.weight" }
attributes = { h0 = "h0" }
model_keys = ["fc.weight"]
)",
                          "inline.toml");
  REQUIRE_MESSAGE(t, t.message());
  REQUIRE(check_task(*t));
  auto p = llm_task_prompt(*t, backend_kind::cpu, llm_answer_format::kiln, 0.5, {});
  CHECK(p.find("the forward of this PyTorch module") != std::string::npos);
  CHECK(p.find("        return self.fc(x)\n") != std::string::npos);
  CHECK(p.find("# params: fc_weight is fc.weight") != std::string::npos);
  CHECK(p.find("# params: h0 is the plain tensor attribute h0 (not in the state_dict)") !=
        std::string::npos);
  CHECK(p.find("# y: [4, 2]") != std::string::npos);
  CHECK(p.find("UEsDB") == std::string::npos);
  CHECK(p.find("pytorch_module") == std::string::npos);
}
