// kiln report: sources load (bad lines counted, not fatal), the page carries the numbers and
// escapes what it shows, the Markdown summary has one row per policy and level.
#include "app/report.hpp"

#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

using namespace kiln;
namespace fs = std::filesystem;

namespace {

const char* kEval = R"([{"policy": "expert", "suite": "s", "backend": "cpu",
  "overall": {"tasks": 2, "pass_rate": 0.5, "fast_1_eager": 0.5, "fast_1_compile": "n/a",
              "geomean_eager": 1.5, "geomean_compile": "n/a"},
  "levels": {"1": {"tasks": 2, "pass_rate": 0.5, "fast_1_eager": 0.5, "fast_1_compile": "n/a",
                   "geomean_eager": 1.5, "geomean_compile": "n/a"}},
  "tasks": [{"task": "a<b>", "correct": true, "speedup_eager": 1.5},
            {"task": "c", "correct": false, "speedup_eager": 0}]}])";

fs::path make_run(const std::string& name) {
  auto d = fs::temp_directory_path() / ("kiln_report_test_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  std::ofstream(d / "eval.json") << kEval;
  std::ofstream(d / "summary.json") << R"({"name": "unit", "backend": "cpu"})";
  std::ofstream(d / "metrics.jsonl")
      << "{\"step\": 1, \"reward\": -1, \"pool\": {\"busy\": 0.5}}\n"
      << "garbage\n"
      << "{\"step\": 2, \"reward\": 0.5, \"pool\": {\"busy\": 0.9}}\n"
      << "{\"step\": 3, \"reward\": 2, \"pool\": {\"busy\": 0.9}}\n";
  std::ofstream(d / "tasks.jsonl") << "{\"task\": \"not a metric\", \"eager_ms\": 3}\n";
  return d;
}

} // namespace

TEST_CASE("a run directory loads evals, summary and metric series, bad lines are counted") {
  auto d = make_run("load");
  auto s = load_report_source(d.string());
  REQUIRE_MESSAGE(s, s.message());
  CHECK(s->evals.size() == 1);
  CHECK(s->summary["name"] == "unit");
  REQUIRE(s->warnings.size() == 1);
  CHECK(s->warnings[0].find("1 of 4 lines") != std::string::npos);
  bool reward = false, busy = false;
  for (const auto& m : s->series) {
    CHECK(m.file == "metrics.jsonl"); // tasks.jsonl is not a metrics file
    if (m.key == "reward") {
      reward = true;
      CHECK(m.x_key == "step");
      REQUIRE(m.points.size() == 3);
      CHECK(m.points[2].first == 3);
      CHECK(m.points[2].second == 2);
    }
    if (m.key == "pool.busy") busy = true;
  }
  CHECK(reward);
  CHECK(busy);
  CHECK(s->series.front().key == "reward"); // the metrics people look for come first
}

TEST_CASE("the page shows the numbers, escapes names and draws charts") {
  auto s = load_report_source(make_run("html").string());
  REQUIRE(s);
  auto html = render_html({*s});
  CHECK(html.find("<svg") != std::string::npos);
  CHECK(html.find("<polyline") != std::string::npos);
  CHECK(html.find("50.0%") != std::string::npos);
  CHECK(html.find("1.5x") != std::string::npos);
  CHECK(html.find("n/a") != std::string::npos);
  CHECK(html.find("1 correct tasks") != std::string::npos);
  CHECK(html.find("<script") == std::string::npos); // self-contained, nothing to execute
  // No task has a torch.compile baseline: no histogram against it.
  CHECK(html.find("speedup vs torch.compile") == std::string::npos);
}

TEST_CASE("with compile baselines the page also draws the speedups against torch.compile") {
  report_source src;
  src.label = "eval.json";
  src.evals = nlohmann::json::parse(R"([{"policy": "expert", "backend": "cuda",
    "overall": {"tasks": 2}, "levels": {},
    "tasks": [{"task": "a", "correct": true, "speedup_eager": 2, "kernel_ms": 1, "compiled_ms": 4},
              {"task": "b", "correct": true, "speedup_eager": 1, "kernel_ms": 1, "compiled_ms": "n/a"}]}])");
  auto html = render_html({src});
  CHECK(html.find("expert: speedup vs eager, 2 correct tasks") != std::string::npos);
  CHECK(html.find("expert: speedup vs torch.compile, 1 correct tasks") != std::string::npos);
}

TEST_CASE("markdown: one row per policy and level") {
  auto s = load_report_source(make_run("md").string());
  REQUIRE(s);
  auto md = render_markdown({*s});
  CHECK(md.find("| expert | cpu | all | 2 | 50.0% | 50.0% | n/a | 1.5x | n/a |") !=
        std::string::npos);
  CHECK(md.find("| expert | cpu | 1 |") != std::string::npos);
  CHECK(md.find("reward: -1 -> 2 over 3 points") != std::string::npos);
}

TEST_CASE("what is not a report source is an error naming the path") {
  auto missing = load_report_source("/nonexistent/kiln_run");
  CHECK_FALSE(missing);
  CHECK(missing.message().find("/nonexistent/kiln_run") != std::string::npos);
  auto d = fs::temp_directory_path() / "kiln_report_test_empty";
  fs::create_directories(d);
  auto empty = load_report_source(d.string());
  CHECK_FALSE(empty);
  std::ofstream(d / "x.json") << "{\"not\": \"an eval\"}";
  auto notev = load_report_source((d / "x.json").string());
  CHECK_FALSE(notev);
  CHECK(notev.message().find("not a kiln eval result") != std::string::npos);
}

TEST_CASE("a run's after-training evaluation shows what was learned, set by set") {
  auto d = make_run("learned");
  std::ofstream(d / "summary.json") << R"({"name": "unit", "learned": {
    "train": {"tasks": 2,
      "untrained": {"pass_rate": 0.5, "geomean_eager": 0.8, "speed_vs_expert": 0.7, "paired_tasks": 1},
      "trained": {"pass_rate": 1.0, "geomean_eager": 1.3, "speed_vs_expert": 1.25, "paired_tasks": 2},
      "expert": {"pass_rate": 1.0, "geomean_eager": 1.04, "speed_vs_expert": 1.0, "paired_tasks": 2}},
    "held_out": {"tasks": 2,
      "trained": {"pass_rate": 0.5, "geomean_eager": 1.1, "speed_vs_expert": 1.06, "paired_tasks": 1}}}})";
  std::ofstream(d / "eval.json") << R"([{"policy": "trained", "suite": "held_out", "backend": "cpu",
    "overall": {"tasks": 1, "pass_rate": 1}, "tasks": []}])";
  auto s = load_report_source(d.string());
  REQUIRE(s);
  auto md = render_markdown({*s});
  CHECK(md.find("what was learned (kiln_report_test_learned)") != std::string::npos);
  CHECK(md.find("| train | trained | 100% | 1.3x | 1.25x | 2 |") != std::string::npos);
  CHECK(md.find("| held_out | trained | 50% | 1.1x | 1.06x | 1 |") != std::string::npos);
  CHECK(md.find("| trained (held_out) |") != std::string::npos); // the eval entry names its set
  auto html = render_html({*s});
  CHECK(html.find("What was learned: kiln_report_test_learned") != std::string::npos);
  CHECK(html.find("<td>untrained</td><td>50%</td><td>0.8x</td><td>0.7x</td>") != std::string::npos);
}

TEST_CASE("several runs' learning side by side, with the worst run last") {
  std::vector<report_source> runs;
  const char* ratios[][3] = {{"a", "1.5", "1.3"}, {"b", "2.0", "0.9"}};
  for (const auto& r : ratios) {
    auto d = make_run(std::string("seed_") + r[0]);
    std::ofstream(d / "summary.json") << std::string(R"({"learned": {
      "train": {"trained_over_expert": )") + r[1] +
                                             R"(, "trained": {"pass_rate": 1.0},
                "expert": {"pass_rate": 1.0}},
      "held_out": {"trained_over_expert": )" +
                                             r[2] + R"(, "trained": {"pass_rate": )" +
                                             (r[0][0] == 'a' ? "1.0" : "0.9375") + R"(},
                   "expert": {"pass_rate": 1.0}}}})";
    auto s = load_report_source(d.string());
    REQUIRE(s);
    runs.push_back(*s);
  }
  auto md = render_markdown(runs);
  CHECK(md.find("what was learned, run by run") != std::string::npos);
  CHECK(md.find("| kiln_report_test_seed_a | 1.5x | 1.3x | 100% / 100% | 100% / 100% |") !=
        std::string::npos);
  CHECK(md.find("| kiln_report_test_seed_b | 2x | 0.9x | 100% / 100% | 93.8% / 100% |") !=
        std::string::npos);
  CHECK(md.find("| worst of 2 | 1.5x | 0.9x | 100% / 100% | 93.8% / 100% |") != std::string::npos);
  CHECK(render_html(runs).find("What was learned, run by run") != std::string::npos);
  // One run alone has no side-by-side table.
  CHECK(render_markdown({runs[0]}).find("run by run") == std::string::npos);
}

TEST_CASE("a multi-turn run shows whether revisions beat the turn before them") {
  auto d = make_run("turns");
  std::ofstream(d / "summary.json") << R"({"name": "unit", "rollout": {"by_turn": [
    {"turn": 1, "episodes": 8, "pass": 0.75, "mean_reward": 1.5},
    {"turn": 2, "episodes": 8, "pass": 0.875, "mean_reward": 1.75, "better": 0.5, "worse": 0.25,
     "mean_gain": 0.25}]}})";
  std::ofstream(d / "eval.json") << R"([{"policy": "expert", "backend": "cpu",
    "overall": {"tasks": 1, "pass_rate": 1}, "tasks": []}])";
  auto s = load_report_source(d.string());
  REQUIRE(s);
  auto md = render_markdown({*s});
  CHECK(md.find("revisions (kiln_report_test_turns)") != std::string::npos);
  CHECK(md.find("| 1 | 8 | 75% | 1.5 | - | - | - |") != std::string::npos);
  CHECK(md.find("| 2 | 8 | 87.5% | 1.75 | 50% | 25% | 0.25 |") != std::string::npos);
  CHECK(render_html({*s}).find("Revisions: kiln_report_test_turns") != std::string::npos);

  std::ofstream(d / "summary.json") << R"({"name": "unit", "rollout": {"by_turn": [
    {"turn": 1, "episodes": 8, "pass": 0.75, "mean_reward": 1.5}]}})";
  auto one = load_report_source(d.string());
  REQUIRE(one);
  CHECK(render_markdown({*one}).find("revisions") == std::string::npos); // one turn: nothing to say
}
