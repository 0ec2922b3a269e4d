// The incremental grammar agrees with skills/grammar.hpp on every prefix, for every suite task.
#include "rollout/builtin_policies.hpp"
#include "rollout/grammar_state.hpp"
#include "rollout/token_space.hpp"
#include "rollout_fixtures.hpp"
#include "skills/grammar.hpp"

#include <cmath>
#include <doctest/doctest.h>

using namespace kiln;

TEST_CASE("grammar state: masks equal grammar::mask along random programs of every task") {
  std::mt19937_64 rng(7);
  REQUIRE(test::suite_tasks().size() > 50);
  for (const auto& t : test::suite_tasks()) {
    CAPTURE(t.name);
    grammar g(t);
    grammar_state s(std::make_shared<grammar_tables>(t));
    std::vector<int> prefix;
    for (int step = 0; step < 300; ++step) {
      std::vector<uint8_t> m(static_cast<size_t>(program_token_count()), 0);
      int n = s.fill_mask(m);
      auto want = g.mask(prefix);
      REQUIRE(m == want);
      if (n == 0) break;
      std::vector<int> valid;
      for (size_t i = 0; i < m.size(); ++i)
        if (m[i]) valid.push_back(static_cast<int>(i));
      REQUIRE(static_cast<int>(valid.size()) == n);
      int tok = valid[rng() % valid.size()];
      REQUIRE(s.advance(tok));
      prefix.push_back(tok);
    }
    CHECK(s.done());
    CHECK(g.complete(prefix));
  }
}

TEST_CASE("grammar state: a token off the grammar is rejected and the state stays invalid") {
  const auto& t = test::task_named("gemm_multiply_leakyrelu");
  grammar_state s(std::make_shared<grammar_tables>(t));
  CHECK_FALSE(s.advance(token_id("end"))); // ops remain: only "kernel" may start
  CHECK(s.invalid());
  CHECK_FALSE(s.advance(token_id("kernel")));
  std::vector<uint8_t> m(static_cast<size_t>(program_token_count()), 0);
  CHECK(s.fill_mask(m) == 0);
  s.reset();
  CHECK(s.advance(token_id("kernel")));
  CHECK_FALSE(s.advance(-5));
  s.reset();
  CHECK(s.advance(token_id("kernel")));
  CHECK_FALSE(s.advance(program_token_count() + 3)); // a non-program token
}

TEST_CASE(
    "builtin policies: random samples in the mask with logprob -log(#valid), expert replays") {
  const auto& t = test::task_named("gemm_multiply_leakyrelu");
  auto tables = std::make_shared<grammar_tables>(t);
  std::mt19937_64 rng(3);
  auto random = make_random_policy();
  auto expert = make_expert_policy(backend_kind::cpu);
  CHECK(random->uses_mask());
  CHECK_FALSE(expert->uses_mask());
  for (auto* p : {random.get(), expert.get()}) {
    grammar_state s(tables);
    std::vector<int32_t> context = {token_of(special_token::program)};
    std::vector<uint8_t> mask(static_cast<size_t>(program_token_count()));
    std::vector<int32_t> program;
    while (!s.done()) {
      std::fill(mask.begin(), mask.end(), 0);
      int n = s.fill_mask(mask);
      std::vector<decode_slot> batch(1);
      batch[0].seq_id = 9;
      batch[0].spec = &t;
      batch[0].context = &context;
      batch[0].turn_start = 1;
      batch[0].mask = &mask;
      p->step(batch, rng);
      auto tok = batch[0].token;
      REQUIRE(tok >= 0);
      REQUIRE(mask[static_cast<size_t>(tok)] == 1);
      if (p == random.get())
        CHECK(batch[0].logprob == doctest::Approx(-std::log(double(n))));
      else
        CHECK(batch[0].logprob == 0);
      REQUIRE(s.advance(tok));
      context.push_back(tok);
      program.push_back(tok);
      REQUIRE(program.size() < 300);
    }
    if (p == expert.get()) {
      auto want = to_tokens(expert_program(t, backend_kind::cpu));
      CHECK(program == std::vector<int32_t>(want.begin(), want.end()));
    }
    p->release(9);
  }
}
