#include "serve/evaluation.hpp"

#include <doctest/doctest.h>

using namespace kiln;
using json = nlohmann::json;

namespace {
json minimal() {
  return json{
      {"task_id", "t1"}, {"reference_code", "relu"}, {"kernel_code", "class ModelNew: pass"}};
}
} // namespace

TEST_CASE("evaluation request: KernelGYM's defaults, and its fields taken") {
  auto r = parse_evaluation_request(minimal());
  REQUIRE_MESSAGE(r, r.message());
  CHECK(r->backend == "cuda");
  CHECK(r->num_correct_trials == 5);
  CHECK(r->num_perf_trials == 100);
  CHECK(r->timeout_s == 300);
  CHECK(r->priority == "normal");
  CHECK(r->wait);
  auto j = minimal();
  j["backend"] = "cpu";
  j["num_perf_trials"] = 7;
  j["reference_backend"] = "torch_compile";
  j["detect_decoy_kernel"] = true; // fields Kiln does not use are ignored, as KernelGYM does
  auto r2 = parse_evaluation_request(j);
  REQUIRE_MESSAGE(r2, r2.message());
  CHECK(r2->num_perf_trials == 7);
  CHECK(r2->reference_backend == "compile");
}

TEST_CASE("evaluation request: each bad field is named") {
  auto bad = [](const char* key, json value) {
    auto j = minimal();
    j[key] = value;
    auto r = parse_evaluation_request(j);
    REQUIRE_FALSE(r);
    return r.message();
  };
  CHECK(bad("task_id", 7) == "'task_id' must be a string");
  CHECK(bad("task_id", "a/b").find("'task_id' may not hold") == 0);
  CHECK(bad("task_id", std::string(101, 'x')) == "'task_id' is 101 characters; at most 100");
  CHECK(bad("kernel_code", "  \n") == "'kernel_code' is empty");
  CHECK(bad("num_correct_trials", 0) == "'num_correct_trials' is 0; it must be in [1, 20]");
  CHECK(bad("timeout", 1.5) == "'timeout' must be an integer");
  CHECK(bad("backend", "metal").find("'backend' is 'metal'; it must be one of cuda, triton, cpu") ==
        0);
  CHECK(bad("entry_point", "Net").find("KernelBench's Model / ModelNew pair only") !=
        std::string::npos);
  CHECK(bad("wait", "yes") == "'wait' must be true or false");
  auto j = minimal();
  j.erase("reference_code");
  CHECK(parse_evaluation_request(j).message() == "'reference_code' is required");
  CHECK(parse_evaluation_request(json::array()).message() == "the body must be a JSON object");
}

TEST_CASE("evaluation result: every KernelGYM key present, null when unset, read back whole") {
  evaluation_result r;
  r.task_id = "t1";
  r.status = "completed";
  r.correctness = true;
  r.speedup = 2.5;
  r.metadata["kiln"]["outcome"] = "correct";
  auto j = to_json(r);
  for (const char* k :
       {"task_id", "status", "compiled", "correctness", "decoy_kernel", "reference_runtime",
        "kernel_runtime", "speedup", "metadata", "error_message", "error_code", "submitted_at",
        "completed_at", "processing_time"})
    CHECK_MESSAGE(j.contains(k), k);
  CHECK(j["compiled"].is_null());
  CHECK(j["error_code"].is_null());
  auto back = result_from_json(j);
  REQUIRE(back);
  CHECK(back->speedup == 2.5);
  CHECK(back->correctness == true);
  CHECK_FALSE(back->compiled);
  CHECK(back->metadata["kiln"]["outcome"] == "correct");
}
