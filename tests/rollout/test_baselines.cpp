// torch.compile baselines files: looked up by content hash (a renamed task keeps its baseline, a
// changed one loses it); malformed files are errors naming the file and the key.
#include "rollout/baselines.hpp"

#include "data/task_check.hpp"
#include "data/task_hash.hpp"
#include "data/task_parse.hpp"
#include "tests/data/sample_tasks.hpp"

#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>

using namespace kiln;
namespace fs = std::filesystem;

namespace {

task add_relu(const std::string& name = "add_relu", const std::string& shape = "[256, 1024]") {
  std::string text = test::kAddRelu;
  text.replace(text.find("[256, 1024]"), 11, shape);
  text.replace(text.find("\"add_relu\""), 10, "\"" + name + "\"");
  auto t = task_from_toml(text, "add_relu.toml");
  REQUIRE(t);
  REQUIRE(check_task(*t));
  return *t;
}

std::string write(const std::string& name, const std::string& text) {
  auto p = fs::temp_directory_path() / ("kiln_baselines_" + name + ".json");
  std::ofstream(p) << text;
  return p.string();
}

} // namespace

TEST_CASE("baselines are found by content hash, not by name") {
  task t = add_relu();
  auto path = write("ok", R"({"kiln_baselines": 1, "device": "NVIDIA H200", "torch": "2.11.0",
    "tasks": {")" + hash_hex(content_hash(t)) +
                              R"(": {"task": "add_relu", "eager_ms": 2.0,
    "compile_ms": 1.25}}})");
  auto b = load_baselines(path);
  REQUIRE_MESSAGE(b, b.message());
  CHECK(b->device == "NVIDIA H200");
  CHECK(b->torch == "2.11.0");
  CHECK(b->mode == "default");
  REQUIRE(lookup(*b, t).has_value());
  CHECK(*lookup(*b, t) == 1.25);
  CHECK(lookup(*b, add_relu("renamed")).value_or(0) == 1.25);
  CHECK_FALSE(lookup(*b, add_relu("add_relu", "[512, 1024]")).has_value()); // another computation
}

TEST_CASE("malformed baselines files are errors naming the file and key") {
  auto missing = load_baselines("/nonexistent/baselines.json");
  CHECK_FALSE(missing);
  CHECK(missing.message().find("/nonexistent/baselines.json") != std::string::npos);
  auto wrong = load_baselines(write("wrong", R"({"tasks": {}})"));
  CHECK_FALSE(wrong);
  CHECK(wrong.message().find("kiln_baselines") != std::string::npos);
  auto negative = load_baselines(
      write("negative", R"({"kiln_baselines": 1, "tasks": {"00ab": {"compile_ms": -1}}})"));
  CHECK_FALSE(negative);
  CHECK(negative.message().find("tasks.00ab.compile_ms") != std::string::npos);
  auto text = load_baselines(write("text", "not json"));
  CHECK_FALSE(text);
}
