#include "data/task_check.hpp"
#include "data/task_hash.hpp"
#include "data/task_parse.hpp"
#include "data/task_set.hpp"
#include "tests/data/sample_tasks.hpp"

#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

using namespace kiln;
using test::kGemm;

namespace {

std::string checked_error(const std::string& text) {
  auto t = task_from_toml(text, "t.toml");
  if (!t) return t.message();
  auto st = check_task(*t);
  REQUIRE_FALSE(st.has_value());
  return st.message();
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  auto pos = s.find(from);
  REQUIRE(pos != std::string::npos);
  return s.replace(pos, from.size(), to);
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("the DESIGN.md example parses and checks") {
  auto t = task_from_toml(kGemm, "gemm.toml");
  REQUIRE_MESSAGE(t.has_value(), (t ? "" : t.message()));
  REQUIRE(check_task(*t).has_value());
  CHECK(t->name == "gemm_multiply_leakyrelu");
  CHECK(t->level == 2);
  CHECK(t->params[1].init == init_kind::bias_uniform);
  CHECK(t->params[1].of == "w");
  CHECK(t->ops[0].shape == shape_t{128, 512});
  CHECK(t->ops[2].shape == shape_t{128, 512});
  CHECK(std::get<double>(t->ops[1].attrs.at("scalar")) == 2.0);
}

TEST_CASE("round trips through JSON and TOML keep the task") {
  auto t = task_from_toml(kGemm, "gemm.toml");
  REQUIRE(t);
  auto j = task_to_json(*t);
  auto back = task_from_json(j, "mem");
  REQUIRE(back);
  CHECK(task_to_json(*back) == j);
  auto again = task_from_toml(task_to_toml(*t), "mem.toml");
  REQUIRE_MESSAGE(again.has_value(), (again ? "" : again.message()));
  CHECK(task_to_json(*again) == j);
}

TEST_CASE("draw modifiers parse, round trip, and move the hash only when present") {
  auto plain = task_from_toml(kGemm, "gemm.toml");
  REQUIRE(plain);
  auto t = task_from_toml(replace(kGemm, "init = \"uniform\"",
                                  "init = \"uniform\"\nscale = 2.0\nshift = -1.0\n"
                                  "random_scale = true"),
                          "t.toml");
  REQUIRE_MESSAGE(t.has_value(), (t ? "" : t.message()));
  REQUIRE(check_task(*t));
  CHECK(t->inputs[0].scale == 2.0);
  CHECK(t->inputs[0].shift == -1.0);
  CHECK(t->inputs[0].random_scale);
  auto j = task_to_json(*t);
  CHECK(j["inputs"][0]["scale"] == 2.0);
  CHECK_FALSE(task_to_json(*plain)["inputs"][0].contains("scale")); // defaults stay unwritten
  auto again = task_from_toml(task_to_toml(*t), "mem.toml");
  REQUIRE_MESSAGE(again.has_value(), (again ? "" : again.message()));
  CHECK(task_to_json(*again) == j);
  CHECK(content_hash(*t) != content_hash(*plain));
  auto dist = task_from_toml(
      replace(kGemm, "init = \"uniform\"", "init = \"uniform\"\nsoftmax = true"), "t.toml");
  REQUIRE_MESSAGE(dist.has_value(), (dist ? "" : dist.message()));
  CHECK(dist->inputs[0].softmax);
  CHECK(task_to_json(*dist)["inputs"][0]["softmax"] == true);
  auto dist_again = task_from_toml(task_to_toml(*dist), "mem.toml");
  REQUIRE(dist_again);
  CHECK(dist_again->inputs[0].softmax);
  CHECK(content_hash(*dist) != content_hash(*plain));
  auto not_bool = task_from_toml(
      replace(kGemm, "init = \"uniform\"", "init = \"uniform\"\nsoftmax = 1"), "t.toml");
  REQUIRE_FALSE(not_bool);
  CHECK(contains(not_bool.message(), "inputs[0].softmax: expected a boolean"));
  auto bad = task_from_toml(
      replace(kGemm, "init = \"uniform\"", "init = \"uniform\"\nstructure = \"diagonal\""),
      "t.toml");
  REQUIRE_FALSE(bad);
  CHECK(contains(bad.message(), "inputs[0].structure: unknown structure 'diagonal'"));
  auto not_square = checked_error(
      replace(kGemm, "init = \"uniform\"", "init = \"uniform\"\nstructure = \"triu\""));
  CHECK(contains(not_square, "needs square matrices in the last two dimensions"));
}

TEST_CASE("param_seed: parsed, round tripped and hashed") {
  auto plain = task_from_toml(kGemm, "gemm.toml");
  REQUIRE(plain);
  CHECK_FALSE(plain->param_seed);
  CHECK_FALSE(task_to_json(*plain).contains("param_seed"));
  auto t = task_from_toml(replace(kGemm, "level = 2\n", "level = 2\nparam_seed = 2\n"), "t.toml");
  REQUIRE_MESSAGE(t.has_value(), (t ? "" : t.message()));
  CHECK(t->param_seed == uint64_t{2});
  CHECK(task_to_json(*t)["param_seed"] == 2);
  auto again = task_from_toml(task_to_toml(*t), "mem.toml");
  REQUIRE(again);
  CHECK(again->param_seed == uint64_t{2});
  CHECK(structure_hash(*t) == structure_hash(*plain));
  CHECK(content_hash(*t) != content_hash(*plain)); // other numbers: another stored baseline
  for (const char* bad : {"param_seed = -1", "param_seed = 140737488355328", "param_seed = 1.5"}) {
    auto b = task_from_toml(replace(kGemm, "level = 2\n", "level = 2\n" + std::string(bad) + "\n"),
                            "t.toml");
    REQUIRE_FALSE(b);
    CHECK(contains(b.message(), "param_seed"));
  }
}

TEST_CASE("every validation error names file, task, op and field") {
  SUBCASE("TOML syntax error carries the line") {
    auto msg = checked_error(replace(kGemm, "level = 2", "level = = 2"));
    CHECK(contains(msg, "t.toml:3:"));
    CHECK(contains(msg, "TOML syntax error"));
  }
  SUBCASE("unknown op") {
    auto msg = checked_error(replace(kGemm, "op = \"leaky_relu\"", "op = \"leaky_relux\""));
    CHECK(contains(msg, "t.toml: task 'gemm_multiply_leakyrelu': ops[2]"));
    CHECK(contains(msg, "unknown op 'leaky_relux'"));
  }
  SUBCASE("shape mismatch") {
    auto msg = checked_error(replace(kGemm, "shape = [512, 1024]", "shape = [512, 1000]"));
    CHECK(contains(msg, "ops[0] (linear -> 'y0')"));
    CHECK(contains(msg, "in_features"));
  }
  SUBCASE("undefined name") {
    auto msg = checked_error(replace(kGemm, "args = [\"y1\"]", "args = [\"y9\"]"));
    CHECK(contains(msg, "ops[2]"));
    CHECK(contains(msg, "args[0]: 'y9' is not defined"));
  }
  SUBCASE("use before definition") {
    auto msg = checked_error(replace(kGemm, "args = [\"y0\"]", "args = [\"y2\"]"));
    CHECK(contains(msg, "'y2' is not defined before this op"));
  }
  SUBCASE("missing output") {
    auto msg = checked_error(replace(kGemm, "outputs = [\"y2\"]", "outputs = [\"z\"]"));
    CHECK(contains(msg, "outputs[0]: 'z' is not the result of any op"));
  }
  SUBCASE("negative size") {
    auto msg = checked_error(replace(kGemm, "shape = [128, 1024]", "shape = [-128, 1024]"));
    CHECK(contains(msg, "inputs[0] ('x'): shape: dimension -128"));
  }
  SUBCASE("absurd size beyond the memory budget") {
    auto msg = checked_error(
        replace(kGemm, "shape = [128, 1024]\ninit", "shape = [128000000, 1024]\ninit"));
    CHECK(contains(msg, "over the memory budget"));
  }
  SUBCASE("unknown key") {
    auto msg = checked_error(replace(kGemm, "shape = [512]", "shap = [512]"));
    CHECK(contains(msg, "params[1].shap: unknown key"));
  }
  SUBCASE("wrong type") {
    auto msg = checked_error(replace(kGemm, "level = 2", "level = \"two\""));
    CHECK(contains(msg, "level: expected an integer, got string"));
  }
  SUBCASE("bad init") {
    auto msg = checked_error(replace(kGemm, "init = \"uniform\"", "init = \"randint:5:1\""));
    CHECK(contains(msg, "inputs[0].init"));
  }
  SUBCASE("bias_uniform without its weight") {
    auto msg = checked_error(replace(kGemm, "of = \"w\"", "of = \"q\""));
    CHECK(contains(msg, "params[1] ('b'): of: 'q' is not a param"));
  }
  SUBCASE("duplicate name") {
    auto msg = checked_error(replace(kGemm, "out = \"y1\"", "out = \"y0\""));
    CHECK(contains(msg, "'y0' defined twice"));
  }
  SUBCASE("unknown dtype") {
    auto msg = checked_error(replace(kGemm, "dtype = \"float32\"", "dtype = \"float64\""));
    CHECK(contains(msg, "dtype: unknown dtype 'float64'"));
  }
}

TEST_CASE("argmax results may only be outputs") {
  auto text = std::string(kGemm) +
              "[[ops]]\nout = \"i\"\nop = \"argmax\"\nargs = [\"y2\"]\nattrs = { dim = 1 }\n"
              "[[ops]]\nout = \"j\"\nop = \"relu\"\nargs = [\"i\"]\n";
  CHECK(contains(checked_error(text), "index tensor"));
}

TEST_CASE("a bad line in a JSON Lines dataset does not stop the others") {
  auto good = task_from_toml(kGemm, "gemm.toml");
  REQUIRE(good);
  auto j = task_to_json(*good);
  auto j2 = j;
  j2["name"] = "second";
  auto bad = j;
  bad["name"] = "broken";
  bad["ops"][0]["op"] = "nope";
  std::string text =
      j.dump() + "\n{not json\n" + bad.dump() + "\n\n" + j2.dump() + "\n" + j.dump() + "\n";
  auto set = parse_jsonl(text, "d.jsonl");
  REQUIRE(set.tasks.size() == 2);
  CHECK(set.tasks[0].name == "gemm_multiply_leakyrelu");
  CHECK(set.tasks[1].name == "second");
  REQUIRE(set.errors.size() == 3);
  CHECK(contains(set.errors[0].message, "d.jsonl:2: JSON syntax error"));
  CHECK(contains(set.errors[1].message, "d.jsonl:3: task 'broken': ops[0]"));
  CHECK(contains(set.errors[2].message, "d.jsonl:6"));
  CHECK(contains(set.errors[2].message, "already used"));
}

TEST_CASE("directories load recursively, bad files are reported, good ones kept") {
  namespace fs = std::filesystem;
  auto dir = fs::temp_directory_path() / "kiln_test_task_set";
  fs::remove_all(dir);
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "a.toml") << kGemm;
  std::ofstream(dir / "sub" / "b.toml") << replace(kGemm, "gemm_multiply_leakyrelu", "b");
  std::ofstream(dir / "sub" / "c.toml") << "name = \n";
  std::ofstream(dir / "notes.txt") << "ignored";
  auto set = load_tasks({dir.string(), (dir / "missing.toml").string()});
  CHECK(set.tasks.size() == 2);
  REQUIRE(set.errors.size() == 2);
  CHECK(contains(set.errors[0].message, "c.toml:1"));
  CHECK(contains(set.errors[1].message, "no such file"));
  fs::remove_all(dir);
}

TEST_CASE("shuffle_tasks: one order per seed whatever the input order, and 0 leaves the order") {
  std::vector<task> a;
  for (int i = 0; i < 12; ++i) {
    task t;
    t.name = "t" + std::to_string(i);
    a.push_back(t);
  }
  auto names = [](const std::vector<task>& v) {
    std::vector<std::string> n;
    for (const auto& t : v) n.push_back(t.name);
    return n;
  };
  auto kept = a;
  shuffle_tasks(kept, 0);
  CHECK(names(kept) == names(a));
  auto x = a, y = a;
  std::reverse(y.begin(), y.end());
  shuffle_tasks(x, 7);
  shuffle_tasks(y, 7);
  CHECK(names(x) == names(y)); // the input order does not matter
  CHECK(names(x) != names(a)); // it did reorder
  auto z = a;
  shuffle_tasks(z, 8);
  CHECK(names(z) != names(x)); // another seed, another order
  auto sorted = names(x);
  std::sort(sorted.begin(), sorted.end());
  auto expect = names(a);
  std::sort(expect.begin(), expect.end());
  CHECK(sorted == expect); // a permutation: nothing lost or repeated
}

TEST_CASE("a [kernelbench] table is checked, kept, and written back by both writers") {
  std::string kb = std::string(kGemm) + R"(
[kernelbench]
source = '''
class Model(nn.Module):
    pass
'''
init_inputs = [1024, 512, 2.0, true]
forward = [{ input = "x" }, { value = 0.5 }]
bool_inputs = []
state_dict = { w = "gemm.weight", b = "gemm.bias" }
model_keys = ["gemm.weight", "gemm.bias"]
)";
  auto t = task_from_toml(kb, "kb.toml");
  REQUIRE_MESSAGE(t, t.message());
  auto table = nlohmann::json::parse(t->kernelbench_json);
  CHECK(table["init_inputs"] == nlohmann::json::parse("[1024, 512, 2.0, true]"));
  CHECK(table["state_dict"]["w"] == "gemm.weight");
  CHECK(table["source"].get<std::string>().find("class Model") == 0);
  // Not hashed: where a task came from is not what it computes.
  auto plain = task_from_toml(kGemm, "plain.toml");
  REQUIRE(plain);
  CHECK(content_hash(*t) == content_hash(*plain));
  auto again = task_from_toml(task_to_toml(*t), "again.toml");
  REQUIRE_MESSAGE(again, again.message());
  CHECK(again->kernelbench_json == t->kernelbench_json);
  auto from_json = task_from_json(task_to_json(*t), "t.json");
  REQUIRE(from_json);
  CHECK(from_json->kernelbench_json == t->kernelbench_json);

  auto err = [&](const std::string& from, const std::string& to) {
    auto bad = task_from_toml(replace(kb, from, to), "kb.toml");
    REQUIRE_FALSE(bad);
    return bad.message();
  };
  CHECK(err(R"({ input = "x" })", R"({ input = "nope" })")
            .find("kernelbench.forward[0].input: 'nope' is not an input") != std::string::npos);
  CHECK(err(R"(w = "gemm.weight")", R"(q = "gemm.weight")")
            .find("kernelbench.state_dict.q: not a param of the task") != std::string::npos);
  CHECK(err("model_keys", "model_names").find("kernelbench.model_names: unknown key") !=
        std::string::npos);
  CHECK(err(R"({ value = 0.5 })", R"({ value = 0.5, input = "x" })")
            .find("expected exactly one of input, value") != std::string::npos);
  // inputs drawn as float and given to the Model as int64 (class indices): inputs by name
  REQUIRE(task_from_toml(replace(kb, "bool_inputs = []", R"(int64_inputs = ["x"])"), "kb.toml"));
  CHECK(err("bool_inputs = []", R"(int64_inputs = ["nope"])")
            .find("kernelbench.int64_inputs: 'nope' is not an input") != std::string::npos);
  // a param given by attribute path (a random plain tensor of the Model), not by state_dict key
  auto by_attr = replace(kb, R"(state_dict = { w = "gemm.weight", b = "gemm.bias" })",
                         R"(state_dict = { w = "gemm.weight" })"
                         "\n"
                         R"(attributes = { b = "h0" })");
  auto with_attr = task_from_toml(by_attr, "kb.toml");
  REQUIRE_MESSAGE(with_attr, with_attr.message());
  CHECK(nlohmann::json::parse(with_attr->kernelbench_json)["attributes"]["b"] == "h0");
  auto twice = task_from_toml(replace(kb, "model_keys",
                                      R"(attributes = { b = "h0" })"
                                      "\nmodel_keys"),
                              "kb.toml");
  REQUIRE_FALSE(twice);
  CHECK(twice.message().find("kernelbench.attributes.b: also in state_dict") != std::string::npos);
  CHECK(err("model_keys", R"(attributes = { q = "h0" })"
                          "\nmodel_keys")
            .find("kernelbench.attributes.q: not a param of the task") != std::string::npos);
}
