// Training samples: grammar masks replayed per model token, reward placement, expert (SFT)
// samples, and the smoke harness's proxy reward.
#include "data/task_set.hpp"
#include "learner/samples.hpp"
#include "learner/smoke.hpp"
#include "rollout/token_space.hpp"
#include "skills/grammar.hpp"

#include <doctest/doctest.h>
#include <random>

using namespace kiln;

namespace {
const std::vector<task>& some_tasks() {
  static task_set s = load_tasks({KILN_SOURCE_DIR "/data/suites/level2/cpu"});
  return s.tasks;
}
} // namespace

TEST_CASE("expert samples: prompt + program, one mask row per model token, the token allowed") {
  const auto& tasks = some_tasks();
  REQUIRE(tasks.size() > 5);
  auto samples = expert_samples(tasks, backend_kind::cpu);
  CHECK(samples.size() == tasks.size());
  const size_t pc = static_cast<size_t>(program_token_count());
  for (size_t i = 0; i < 5; ++i) {
    const auto& s = samples[i];
    const auto& t = tasks[i];
    auto prompt = first_turn_prompt(t);
    REQUIRE(s.model_pos.front() == static_cast<int32_t>(prompt.size()));
    REQUIRE(s.masks.size() == s.model_pos.size() * pc);
    grammar g(t);
    std::vector<int> prefix;
    for (size_t k = 0; k < s.model_pos.size(); ++k) {
      auto expect = g.mask(prefix);
      std::vector<uint8_t> row(s.masks.begin() + static_cast<std::ptrdiff_t>(k * pc),
                               s.masks.begin() + static_cast<std::ptrdiff_t>((k + 1) * pc));
      CHECK(row == expect);
      int32_t tok = s.tokens[static_cast<size_t>(s.model_pos[k])];
      CHECK(row[static_cast<size_t>(tok)] == 1);
      prefix.push_back(tok);
    }
    CHECK(g.complete(prefix));
  }
}

TEST_CASE("prepare_sample: rewards per placement, tokens outside the grammar are errors") {
  const auto& t = some_tasks()[0];
  auto prog = to_tokens(expert_program(t, backend_kind::cpu));
  trajectory tr;
  tr.id = "x";
  tr.task = t.name;
  tr.tokens = first_turn_prompt(t);
  for (int turn = 0; turn < 2; ++turn) {
    turn_record r;
    r.start = static_cast<int32_t>(tr.tokens.size());
    tr.tokens.insert(tr.tokens.end(), prog.begin(), prog.end());
    r.end = static_cast<int32_t>(tr.tokens.size());
    r.reward = turn == 0 ? -1 : 2;
    tr.turns.push_back(r);
    tr.tokens.push_back(token_of(special_token::obs));
    tr.tokens.push_back(token_of(special_token::obs_end));
    tr.tokens.push_back(token_of(special_token::program));
  }
  tr.loss_mask.assign(tr.tokens.size(), 0);
  for (const auto& r : tr.turns)
    for (int32_t i = r.start; i < r.end; ++i) tr.loss_mask[static_cast<size_t>(i)] = 1;
  tr.logprobs.assign(tr.tokens.size(), 0.0f);
  tr.versions.assign(tr.tokens.size(), 0);
  tr.reward = 2;
  auto ep = prepare_sample(tr, &t, reward_placement::episode);
  REQUIRE(ep);
  CHECK(ep->model_pos.size() == 2 * prog.size());
  double sum = 0;
  for (float r : ep->rewards) sum += r;
  CHECK(sum == doctest::Approx(2.0));
  CHECK(ep->rewards.back() == doctest::Approx(2.0));
  auto per_turn = prepare_sample(tr, &t, reward_placement::turn);
  REQUIRE(per_turn);
  CHECK(per_turn->rewards[prog.size() - 1] == doctest::Approx(-1.0));
  CHECK(per_turn->rewards.back() == doctest::Approx(2.0));
  // The second turn's grammar starts afresh: its first mask equals the first turn's.
  const size_t pc = static_cast<size_t>(program_token_count());
  CHECK(std::equal(ep->masks.begin(), ep->masks.begin() + static_cast<std::ptrdiff_t>(pc),
                   ep->masks.begin() + static_cast<std::ptrdiff_t>(prog.size() * pc)));
  auto bad = tr;
  bad.tokens[static_cast<size_t>(tr.turns[0].start)] = token_id("end"); // "end" cannot open
  CHECK_FALSE(prepare_sample(bad, &t, reward_placement::episode));
  CHECK(prepare_sample(bad, nullptr, reward_placement::episode)); // no grammar: any program token
}

TEST_CASE("proxy reward (smoke harness): expert structure passes, others score lower") {
  const auto& tasks = some_tasks();
  auto pts = proxy_tasks(tasks);
  REQUIRE(!pts.empty());
  size_t lower = 0;
  std::mt19937_64 rng(3);
  for (const auto& pt : pts) {
    auto ids = to_tokens(pt.expert);
    auto r = proxy_reward(pt.expert, std::vector<int32_t>(ids.begin(), ids.end()));
    CHECK(r.pass);
    CHECK(r.reward == doctest::Approx(1.0));
    auto rnd = sample_program(*pt.spec, rng);
    auto rr = proxy_reward(pt.expert, std::vector<int32_t>(rnd.begin(), rnd.end()));
    CHECK(rr.reward <= 1.0);
    CHECK(rr.reward >= -1.0);
    if (rr.reward < 1.0) ++lower;
  }
  CHECK(lower > 0);
  CHECK(proxy_reward(pts[0].expert, {}).reward == doctest::Approx(-1.0)); // unparsable
}

TEST_CASE("program samples: the chosen program where it checks, the expert's otherwise") {
  const auto& tasks = some_tasks();
  REQUIRE(tasks.size() > 3);
  std::vector<task> three(tasks.begin(), tasks.begin() + 3);
  std::mt19937_64 rng(7);
  auto sampled = sample_program(three[0], rng);
  std::vector<std::string> programs{tokens_to_text(sampled), "", "kernel ops 99 nonsense end"};
  auto s = program_samples(three, programs, backend_kind::cpu);
  REQUIRE(s.size() == 3);
  auto program_tokens = [](const sample& x) {
    std::vector<int> out;
    for (auto pos : x.model_pos) out.push_back(x.tokens[static_cast<size_t>(pos)]);
    return out;
  };
  CHECK(s[0].id == "chosen:" + three[0].name);
  CHECK(program_tokens(s[0]) == sampled);
  for (int i : {1, 2}) { // empty and unparsable: the expert's program
    CHECK(s[i].id == "expert:" + three[i].name);
    CHECK(program_tokens(s[i]) == to_tokens(expert_program(three[i], backend_kind::cpu)));
  }
}
