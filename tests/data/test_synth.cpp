#include "data/op_vocab.hpp"
#include "data/synth.hpp"
#include "data/task_check.hpp"
#include "data/task_hash.hpp"
#include "data/task_parse.hpp"

#include <doctest/doctest.h>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

using namespace kiln;

namespace {

// `count` tasks with the eager filters off (as `kiln synth --no-run`), as JSON Lines text.
std::vector<task> generate(synthesizer& gen, int64_t count) {
  std::vector<task> out;
  while (static_cast<int64_t>(out.size()) < count) {
    auto t = gen.next(static_cast<int64_t>(out.size()));
    REQUIRE_MESSAGE(t.has_value(), (t ? "" : t.message()));
    gen.accept(*t);
    out.push_back(std::move(*t));
  }
  return out;
}

std::vector<task> generate(uint64_t seed, int64_t count, int max_ops = 5) {
  synth_options o;
  o.seed = seed;
  o.max_ops = max_ops;
  synthesizer gen(o);
  return generate(gen, count);
}

std::string jsonl(const std::vector<task>& ts) {
  std::string s;
  for (const auto& t : ts) s += task_to_json(t).dump() + "\n";
  return s;
}

} // namespace

TEST_CASE("synthesis is deterministic for a seed") {
  auto a = jsonl(generate(7, 150));
  auto b = jsonl(generate(7, 150));
  auto c = jsonl(generate(8, 150));
  CHECK(a == b);
  CHECK(a != c);
}

TEST_CASE("generated tasks are well typed, named, levelled and round-trip through JSON") {
  auto tasks = generate(11, 400);
  std::set<std::string> names;
  std::set<uint64_t> structures;
  for (auto& t : tasks) {
    CAPTURE(t.name);
    task copy = t;
    REQUIRE(check_task(copy).has_value());
    CHECK(names.insert(t.name).second);
    CHECK(structures.insert(structure_hash(t)).second);
    CHECK(t.name.rfind("synth_", 0) == 0);
    CHECK(t.ops.size() >= 1);
    CHECK(t.ops.size() <= 5);
    CHECK(t.level == (t.ops.size() == 1 ? 1 : t.level));
    CHECK(t.level >= (t.ops.size() == 1 ? 1 : 2));
    CHECK(t.outputs == std::vector<std::string>{t.ops.back().out});
    for (const auto& op : t.ops)
      if (op.op == "dropout") CHECK(attr_real(op.attrs, "p", 1.0) == 0.0);
    auto back = task_from_json(task_to_json(t), "roundtrip");
    REQUIRE(back.has_value());
    REQUIRE(check_task(*back).has_value());
    CHECK(task_to_json(*back) == task_to_json(t));
    CHECK(content_hash(*back) == content_hash(t));
    CHECK(structure_hash(*back) == structure_hash(t));
  }
}

TEST_CASE("the vocabulary is covered: heads and epilogues of every family appear") {
  auto tasks = generate(3, 1500, 5);
  std::set<std::string> ops;
  std::map<int, int> levels, lengths;
  for (const auto& t : tasks) {
    ++levels[t.level];
    ++lengths[static_cast<int>(t.ops.size())];
    for (const auto& op : t.ops) ops.insert(op.op);
  }
  for (const char* op : {"linear",
                         "matmul",
                         "bmm",
                         "conv1d",
                         "conv2d",
                         "conv3d",
                         "conv_transpose2d",
                         "relu",
                         "gelu",
                         "sigmoid",
                         "add",
                         "mul",
                         "batch_norm",
                         "group_norm",
                         "layer_norm",
                         "instance_norm",
                         "rms_norm",
                         "max_pool2d",
                         "avg_pool2d",
                         "adaptive_avg_pool2d",
                         "softmax",
                         "log_softmax",
                         "logsumexp",
                         "sum",
                         "mean",
                         "amax",
                         "argmax",
                         "cumsum",
                         "transpose",
                         "permute",
                         "flatten",
                         "log",
                         "sqrt"})
    CHECK_MESSAGE(ops.count(op), std::string(op));
  CHECK(levels[1] > 0);
  CHECK(levels[2] > 0);
  CHECK(levels[3] > 0);
  for (int n = 1; n <= 5; ++n) CHECK(lengths[n] > 0);
}

TEST_CASE("a structure in a dedup suite is never produced") {
  auto first = generate(21, 1);
  synth_options o;
  o.seed = 21;
  synthesizer gen(o);
  gen.exclude(first);
  auto again = gen.next(0);
  REQUIRE(again.has_value());
  CHECK(structure_hash(*again) != structure_hash(first[0]));
  CHECK(gen.stats().rejected[static_cast<std::size_t>(reject_reason::duplicate_of_suite)] >= 1);
  CHECK(gen.stats().suite_structures == 1);
}

TEST_CASE("a structure already accepted is rejected, a filtered one stays available") {
  synth_options o;
  o.seed = 5;
  o.max_ops = 1; // a small space: repeats are certain
  synthesizer gen(o);
  auto tasks = generate(gen, 200);
  std::set<uint64_t> seen;
  for (const auto& t : tasks) CHECK(seen.insert(structure_hash(t)).second);
  CHECK(gen.stats().rejected[static_cast<std::size_t>(reject_reason::duplicate_in_set)] > 0);
  CHECK(gen.stats().accepted == 200);
  CHECK(gen.stats().by_length.at(1) == 200);

  auto t = gen.next(200);
  REQUIRE(t.has_value());
  gen.reject(*t, reject_reason::too_fast);
  CHECK(gen.stats().rejected[static_cast<std::size_t>(reject_reason::too_fast)] == 1);
  auto j = gen.stats().to_json();
  CHECK(j["accepted"] == 200);
  CHECK(j["rejected"]["too_fast"] == 1);
  CHECK(j["by_length"]["1"] == 200);
}
