#include "data/module_reference.hpp"
#include "data/reference.hpp"
#include "data/task_check.hpp"
#include "data/task_set.hpp"

#include <ATen/ATen.h>
#include <doctest/doctest.h>

using namespace kiln;

namespace {

task lstm_task() {
  auto set = load_tasks({KILN_SOURCE_DIR "/tests/data/module/level3/kb_l3_lstm_module.toml"});
  REQUIRE(set.errors.empty());
  REQUIRE(set.tasks.size() == 1);
  return set.tasks[0];
}

op_node& module_op(task& t) {
  REQUIRE(t.ops.size() == 1);
  return t.ops[0];
}

} // namespace

TEST_CASE("module reference: the traced module runs with the task's params in its placeholders") {
  auto t = lstm_task();
  auto cpu = c10::Device(c10::kCPU);
  auto inputs = make_inputs(t, 7, cpu);
  auto a = run_reference(t, inputs, make_params(t, 1, cpu));
  REQUIRE_MESSAGE(a, a.message());
  CHECK((*a)[0].sizes().vec() == std::vector<int64_t>{8, 16});
  auto again = run_reference(t, inputs, make_params(t, 1, cpu));
  REQUIRE(again);
  CHECK(at::equal((*a)[0], (*again)[0]));
  // Other params, other outputs: the module computes with what the task gives it, not with
  // weights of its own (it holds none: placeholders).
  auto b = run_reference(t, inputs, make_params(t, 2, cpu));
  REQUIRE(b);
  CHECK_FALSE(at::allclose((*a)[0], (*b)[0]));
  CHECK(at::isfinite((*a)[0]).all().item<bool>());
}

TEST_CASE("module reference: what is wrong with a module op is named") {
  auto t = lstm_task();
  auto cpu = c10::Device(c10::kCPU);
  auto inputs = make_inputs(t, 7, cpu);
  auto params = make_params(t, 1, cpu);
  SUBCASE("not a TorchScript module") {
    module_op(t).attrs["torchscript"] = std::string("bm90IGEgbW9kdWxl"); // "not a module"
    auto r = run_reference(t, inputs, params);
    REQUIRE_FALSE(r);
    CHECK(r.message().find("does not load as a TorchScript module") != std::string::npos);
  }
  SUBCASE("a key the module does not hold") {
    auto keys = std::get<std::string>(module_op(t).attrs["state_dict"]);
    module_op(t).attrs["state_dict"] = "lstm.no_such_weight" + keys.substr(keys.find(' '));
    auto r = run_reference(t, inputs, params);
    REQUIRE_FALSE(r);
    CHECK(r.message().find("holds no tensor 'lstm.no_such_weight'") != std::string::npos);
  }
  SUBCASE("keys and params disagree in number, at check time") {
    auto keys = std::get<std::string>(module_op(t).attrs["state_dict"]);
    module_op(t).attrs["state_dict"] = keys.substr(keys.find(' ') + 1);
    auto st = check_task(t);
    REQUIRE_FALSE(st);
    CHECK(st.message().find("attrs.state_dict") != std::string::npos);
  }
  SUBCASE("a shape the module does not give") {
    module_op(t).attrs["shape"] = std::vector<int64_t>{8, 15};
    REQUIRE(check_task(t));
    auto r = run_reference(t, inputs, params);
    REQUIRE_FALSE(r);
    CHECK(r.message().find("has shape [8, 16], the task says [8, 15]") != std::string::npos);
  }
}

TEST_CASE("module reference: two module ops on other args each run their own forward") {
  auto t = lstm_task();
  op_node swapped = module_op(t);
  swapped.out = "y2";
  std::swap(swapped.args[1], swapped.args[2]); // h0 and c0 trade places
  t.ops.push_back(swapped);
  t.outputs.push_back("y2");
  REQUIRE(check_task(t));
  auto cpu = c10::Device(c10::kCPU);
  auto out = run_reference(t, make_inputs(t, 7, cpu), make_params(t, 1, cpu));
  REQUIRE_MESSAGE(out, out.message());
  REQUIRE(out->size() == 2);
  CHECK_FALSE(at::allclose((*out)[0], (*out)[1])); // not the first forward's output again
}
