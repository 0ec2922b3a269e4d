// The token space: program tokens keep their ids, every other word has one id, task and
// observation tokens say what they should.
#include "jobs/job.hpp"
#include "rollout/token_space.hpp"
#include "rollout_fixtures.hpp"
#include "skills/grammar.hpp"

#include <doctest/doctest.h>
#include <set>

using namespace kiln;

TEST_CASE("token space: program tokens first, then one id per word") {
  const auto& pv = program_vocab();
  REQUIRE(program_token_count() == static_cast<int32_t>(pv.size()));
  for (size_t i = 0; i < pv.size(); ++i) {
    CHECK(token_word(static_cast<int32_t>(i)) == pv[i]);
    CHECK(is_program_token(static_cast<int32_t>(i)));
  }
  CHECK_FALSE(is_program_token(program_token_count()));
  CHECK_FALSE(is_program_token(-1));
  CHECK(token_of(special_token::pad) == program_token_count());
  CHECK(token_word(token_of(special_token::bos)) == "<bos>");
  CHECK(token_word(token_of(special_token::obs_end)) == "<obs_end>");
  std::set<std::string> words;
  for (int32_t i = 0; i < vocab_size(); ++i) words.insert(token_word(i));
  CHECK(static_cast<int32_t>(words.size()) == vocab_size()); // no word twice
  CHECK(words.count("op:conv2d") == 1);
  CHECK(words.count("speedup_compile:n/a") == 1);
  CHECK(token_word(vocab_size()).rfind("<?", 0) == 0);
}

TEST_CASE("token space: task tokens give level, ops with sizes, inputs") {
  const auto& t = test::task_named("gemm_multiply_leakyrelu");
  auto ids = task_tokens(t);
  REQUIRE(ids.size() == 1 + 2 * t.ops.size() + t.inputs.size());
  CHECK(token_word(ids[0]) == "level:" + std::to_string(t.level));
  CHECK(token_word(ids[1]) == "op:" + t.ops[0].op);
  // Output of op 0 has numel(shape) elements: its bucket is floor(log2).
  int64_t n = numel(t.ops[0].shape);
  int k = 0;
  while ((int64_t{2} << k) <= n) ++k;
  CHECK(token_word(ids[2]) == "size:2^" + std::to_string(k));
  CHECK(ids == task_tokens(t)); // deterministic
  for (const auto& task : test::suite_tasks()) {
    auto tt = task_tokens(task);
    CHECK(tt.size() <= static_cast<size_t>(max_task_tokens));
    for (auto id : tt) CHECK((id >= program_token_count() && id < vocab_size()));
  }
}

TEST_CASE("token space: observations carry outcome, error bucket, speedup buckets") {
  outcome o;
  o.kind = outcome_kind::compile_error;
  auto w = [](const std::vector<int32_t>& ids) {
    std::vector<std::string> out;
    for (auto i : ids) out.push_back(token_word(i));
    return out;
  };
  CHECK(w(observation_tokens(o, 0, std::nullopt)) ==
        std::vector<std::string>{"<obs>", "obs:compile_error", "<obs_end>"});
  o.kind = outcome_kind::wrong;
  mismatch m;
  m.max_rel_err = 0.003;
  o.error = m;
  CHECK(w(observation_tokens(o, 0, std::nullopt))[2] == "err:1e-2");
  o.error->max_rel_err = 1e9;
  CHECK(w(observation_tokens(o, 0, std::nullopt))[2] == "err:1e3");
  o.error.reset();
  CHECK(w(observation_tokens(o, 0, std::nullopt))[2] == "err:nan");
  o.kind = outcome_kind::correct;
  CHECK(w(observation_tokens(o, 1.2, std::nullopt)) ==
        std::vector<std::string>{"<obs>", "obs:correct", "speedup_eager:1.05-1.5",
                                 "speedup_compile:n/a", "<obs_end>"});
  CHECK(w(observation_tokens(o, 0.1, 5.0))[2] == "speedup_eager:<0.5");
  CHECK(w(observation_tokens(o, 0.1, 5.0))[3] == "speedup_compile:>=4");
  CHECK(w(observation_tokens(o, 1.0, 0.97))[2] == "speedup_eager:0.95-1.05");
}
