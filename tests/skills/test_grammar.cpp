#include "data/task_set.hpp"
#include "skills/expert.hpp"
#include "skills/grammar.hpp"
#include "skills/program.hpp"

#include <algorithm>
#include <doctest/doctest.h>
#include <random>

using namespace kiln;

namespace {

const task_set& suites() {
  static const task_set s = load_tasks({KILN_SOURCE_DIR "/data/suites/level1/cpu",
                                        KILN_SOURCE_DIR "/data/suites/level2/cpu",
                                        KILN_SOURCE_DIR "/data/suites/level3/cpu"});
  return s;
}

const task& suite_task(const char* name) {
  for (const auto& t : suites().tasks)
    if (t.name == name) return t;
  FAIL("no suite task " << name);
  return suites().tasks.front();
}

} // namespace

TEST_CASE("print and parse round-trip") {
  auto p = parse_program(
      "kernel ops 3 gemm tile_m 64 tile_n 32 tile_k 16 split_k 2 precision tf32 stage 1 bounds 0 "
      "kernel ops 1 reduce threads 256 vec 4 end");
  REQUIRE_MESSAGE(p.has_value(), (p ? "" : p.message()));
  REQUIRE(p->groups.size() == 2);
  CHECK(p->groups[0].num_ops == 3);
  CHECK(p->groups[0].tmpl == kernel_template::gemm);
  CHECK(p->groups[0].get(knob::precision, 0) == 1);
  CHECK(p->groups[1].first_op == 3);
  auto again = parse_program(print(*p));
  REQUIRE(again);
  CHECK(print(*again) == print(*p));
}

TEST_CASE("parse errors name the token") {
  CHECK(parse_program("kernel ops 2 elementwise").message().find("missing 'end'") !=
        std::string::npos);
  CHECK(parse_program("kernel ops 9 elementwise end").message().find("op count") !=
        std::string::npos);
  CHECK(parse_program("kernel ops 1 magic end").message().find("unknown template") !=
        std::string::npos);
  CHECK(parse_program("kernel ops 1 reduce threads 7x end").message().find("bad value") !=
        std::string::npos);
  CHECK(parse_program("kernel ops 1 reduce vec 2 vec 4 end").message().find("twice") !=
        std::string::npos);
  CHECK(parse_program("end").message().find("no kernels") != std::string::npos);
}

TEST_CASE("canonical form orders knobs and fills defaults") {
  auto a = parse_program("kernel ops 1 reduce vec 2 threads 64 end");
  auto b = parse_program("kernel ops 1 reduce threads 64 vec 2 end");
  REQUIRE(a);
  REQUIRE(b);
  CHECK(print(canonical(*a)) == print(canonical(*b)));
  CHECK(print(canonical(*parse_program("kernel ops 1 reduce end"))) ==
        "kernel ops 1 reduce threads 128 vec 1 end");
}

TEST_CASE("fusion follows the graph") {
  const task& t = suite_task("gemm_multiply_leakyrelu"); // linear -> mul -> leaky_relu
  CHECK(fitting_templates(t, 0, 3) ==
        std::vector<kernel_template>{kernel_template::gemm, kernel_template::library});
  CHECK(fitting_templates(t, 1, 2) == std::vector<kernel_template>{kernel_template::elementwise});
  CHECK(fitting_templates(t, 0, 4).empty());
  auto bad = parse_program("kernel ops 1 elementwise kernel ops 2 elementwise end");
  REQUIRE(bad);
  CHECK(check_program(*bad, t).message().find("template elementwise does not fit op 'linear'") !=
        std::string::npos);
  auto short_prog = parse_program("kernel ops 2 library end");
  CHECK(check_program(*short_prog, t).message().find("covers 2 of 3 ops") != std::string::npos);
}

TEST_CASE("a value read outside its group cannot be fused away") {
  const task& t = suite_task("resnet_basic_block"); // the block input feeds the residual add
  for (int64_t i = 0; i < static_cast<int64_t>(t.ops.size()); ++i)
    for (int64_t n = 2; i + n <= static_cast<int64_t>(t.ops.size()); ++n)
      if (!fitting_templates(t, i, n).empty())
        for (int64_t j = i; j < i + n - 1; ++j)
          for (int64_t k = i + n; k < static_cast<int64_t>(t.ops.size()); ++k)
            for (const auto& a : t.ops[k].args) CHECK(a != t.ops[j].out);
}

TEST_CASE("the expert writes a valid program for every suite task") {
  REQUIRE(suites().errors.empty());
  REQUIRE(suites().tasks.size() > 100);
  for (const auto& t : suites().tasks)
    for (auto b : {backend_kind::cpu, backend_kind::cuda}) {
      auto p = expert_program(t, b);
      auto st = check_program(p, t);
      CHECK_MESSAGE(st.has_value(), t.name << ": " << (st ? "" : st.message()));
      auto tokens = to_tokens(p);
      grammar g(t);
      std::vector<int> prefix;
      for (int tok : tokens) { // the expert's tokens are all allowed by the mask
        auto next = g.valid_next(prefix);
        CHECK_MESSAGE(std::find(next.begin(), next.end(), tok) != next.end(),
                      t.name << " at " << prefix.size());
        prefix.push_back(tok);
      }
      CHECK(g.complete(prefix));
    }
}

TEST_CASE("random programs sampled under the mask always parse and check") {
  std::mt19937_64 rng(42);
  int programs = 0;
  for (const auto& t : suites().tasks)
    for (int i = 0; i < 20; ++i) {
      auto tokens = sample_program(t, rng);
      auto p = parse_program(tokens_to_text(tokens));
      REQUIRE_MESSAGE(p.has_value(), t.name << ": " << tokens_to_text(tokens));
      auto st = check_program(*p, t);
      REQUIRE_MESSAGE(st.has_value(), t.name << ": " << st.message());
      CHECK(to_tokens(*p) == tokens); // sampled programs are canonical
      ++programs;
    }
  CHECK(programs == 20 * static_cast<int>(suites().tasks.size()));
}

TEST_CASE("the mask rejects off-grammar prefixes") {
  const task& t = suite_task("relu");
  grammar g(t);
  CHECK(g.valid_next({}) == std::vector<int>{token_id("kernel")});
  CHECK(g.valid_next({token_id("end")}).empty());
  auto after_ops = g.valid_next({token_id("kernel"), token_id("ops")});
  CHECK(after_ops == std::vector<int>{token_id("1")});
  auto m = g.mask({token_id("kernel")});
  CHECK(m.size() == program_vocab().size());
  CHECK(m[token_id("ops")] == 1);
  CHECK(m[token_id("end")] == 0);
}

TEST_CASE("reduced precision only where the task allows it: the mask and the check agree") {
  for (const auto& t : suites().tasks) {
    auto p = expert_program(t, backend_kind::cuda);
    bool has_precision = false;
    for (auto& g : p.groups)
      for (auto& s : g.knobs)
        if (s.k == knob::precision) {
          s.value = 2; // fp16
          has_precision = true;
        }
    if (!has_precision) continue;
    auto st = check_program(p, t);
    if (t.tol.reduced_precision) {
      CHECK_MESSAGE(st.has_value(), t.name);
      continue;
    }
    REQUIRE_FALSE(st.has_value());
    CHECK(st.message().find("needs a task with tolerance.reduced_precision") != std::string::npos);
    // The mask offers fp32 alone after "precision".
    grammar g(t);
    auto toks = to_tokens(p);
    std::vector<int> prefix;
    for (int tok : toks) {
      if (tok == token_id("fp16")) break;
      prefix.push_back(tok);
    }
    auto mask = g.mask(prefix);
    CHECK(mask[static_cast<size_t>(token_id("fp32"))] == 1);
    CHECK(mask[static_cast<size_t>(token_id("fp16"))] == 0);
    CHECK(mask[static_cast<size_t>(token_id("tf32"))] == 0);
    return;
  }
  FAIL("no suite task has a precision knob on a fp32 tolerance");
}
