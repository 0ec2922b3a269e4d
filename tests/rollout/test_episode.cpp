// The episode actor's turn loop with fake pools and policy servers: turn limit, stop at the best
// reward, timeouts per turn (failed) and per episode (aborted), bad replies, and the trajectory it
// streams (layout, masks, versions, turns).
#include "caf_fixture.hpp"
#include "rollout/builtin_policies.hpp"
#include "rollout/episode.hpp"
#include "rollout/policy_server.hpp"
#include "rollout/token_space.hpp"
#include "rollout/trajectory.hpp"
#include "rollout_fixtures.hpp"

#include <doctest/doctest.h>

using namespace kiln;
using namespace std::chrono_literals;

namespace {

trajectory_limits vocab_limits() {
  trajectory_limits l;
  l.vocab_size = vocab_size();
  return l;
}

struct run_result {
  episode_summary summary;
  std::optional<trajectory> traj;
};

// Runs one episode of gemm_multiply_leakyrelu (eager baseline 2 ms) to its end.
run_result run_episode(test::caf_fixture& f, caf::actor pool, episode_config cfg,
                       caf::actor server = {}) {
  auto task = make_rollout_task(test::task_named("gemm_multiply_leakyrelu"));
  task->eager_ms = 2.0;
  auto kept = std::make_shared<test::kept_messages>();
  caf::scoped_actor self{*f.sys};
  bool own_server = !server;
  if (own_server) server = spawn_policy_server(*f.sys, make_expert_policy(backend_kind::cpu));
  episode_args a;
  a.id = 42;
  a.group = "g";
  a.task = task;
  a.cfg = std::make_shared<episode_config>(cfg);
  a.peers = {server, pool, test::spawn_keeping_sink(*f.sys, kept), self};
  auto sink = a.peers.sink;
  spawn_episode(*f.sys, a);
  run_result r;
  bool got = false;
  self->receive([&](episode_done_atom, const episode_summary& s) { r.summary = s, got = true; },
                caf::after(std::chrono::seconds(20)) >> [] {});
  REQUIRE(got);
  if (kept->size() == 1) {
    auto d = decode_trajectory(kept->msgs[0].data(), kept->msgs[0].size(), vocab_limits());
    REQUIRE_MESSAGE(d.has_value(), (d ? "" : d.message()));
    r.traj = *d;
  }
  if (own_server) self->send_exit(server, caf::exit_reason::user_shutdown);
  self->send_exit(sink, caf::exit_reason::user_shutdown);
  self->send_exit(pool, caf::exit_reason::user_shutdown);
  return r;
}

std::vector<std::string> words(const std::vector<int32_t>& ids, size_t from, size_t to) {
  std::vector<std::string> w;
  for (size_t i = from; i < to; ++i) w.push_back(token_word(ids[i]));
  return w;
}

} // namespace

TEST_CASE("episode: turn limit -> truncated, the trajectory's layout") {
  test::caf_fixture f;
  episode_config cfg;
  cfg.max_turns = 3;
  auto pool = test::spawn_fake_pool(
      *f.sys, [](int, const std::string&) { return test::outcome_bytes(outcome_kind::wrong); });
  auto r = run_episode(f, pool, cfg);
  CHECK(r.summary.status == static_cast<int32_t>(episode_status::truncated));
  CHECK(r.summary.handed_on);
  CHECK(r.summary.turns == 3);
  REQUIRE(r.traj);
  const auto& t = *r.traj;
  CHECK(t.id == "42");
  CHECK(t.task == "gemm_multiply_leakyrelu");
  CHECK(t.group == "g");
  CHECK(t.status == episode_status::truncated);
  CHECK(t.reward == -1);
  REQUIRE(t.turns.size() == 3);
  auto prompt = task_tokens(test::task_named("gemm_multiply_leakyrelu"));
  CHECK(t.tokens[0] == token_of(special_token::bos));
  CHECK(t.tokens[prompt.size() + 1] == token_of(special_token::task_end));
  size_t prev_end = 0;
  for (const auto& turn : t.turns) {
    CHECK(turn.outcome == "wrong");
    CHECK(turn.reward == -1);
    CHECK(turn.speedup_eager == 0);
    CHECK(turn.compile_ms == 2);
    // [PROGRAM] right before the program; observation tokens right after it.
    REQUIRE(turn.start >= 1);
    CHECK(t.tokens[static_cast<size_t>(turn.start - 1)] == token_of(special_token::program));
    CHECK(static_cast<size_t>(turn.start) > prev_end);
    auto obs = words(t.tokens, static_cast<size_t>(turn.end), static_cast<size_t>(turn.end) + 4);
    CHECK(obs == std::vector<std::string>{"<obs>", "obs:wrong", "err:1e-1", "<obs_end>"});
    for (int32_t i = turn.start; i < turn.end; ++i) {
      CHECK(t.loss_mask[static_cast<size_t>(i)] == 1);
      CHECK(is_program_token(t.tokens[static_cast<size_t>(i)]));
      CHECK(t.versions[static_cast<size_t>(i)] == 0);
    }
    prev_end = static_cast<size_t>(turn.end);
  }
  size_t model = 0;
  for (auto m : t.loss_mask) model += m;
  size_t in_turns = 0;
  for (const auto& turn : t.turns) in_turns += static_cast<size_t>(turn.end - turn.start);
  CHECK(model == in_turns); // loss_mask is 1 exactly on the programs
  CHECK(t.timings.total_ms > 0);
  CHECK(t.timings.device_ms == 9); // 3 per outcome
}

TEST_CASE("episode: stops once a turn earns the best reachable reward -> completed") {
  test::caf_fixture f;
  episode_config cfg;
  cfg.max_turns = 5;
  // Turn 0 compile error, turn 1 correct at 1.95 ms (eager 2 ms: 1.03x, tier 1), turn 2 at 1 ms
  // (2x faster: tier 2 = the best without a compile baseline).
  auto pool = test::spawn_fake_pool(*f.sys, [](int n, const std::string& program) {
    CHECK(program.rfind("kernel ops", 0) == 0);
    if (n == 0) return test::outcome_bytes(outcome_kind::compile_error);
    return test::outcome_bytes(outcome_kind::correct, n == 1 ? 1.95 : 1.0);
  });
  auto r = run_episode(f, pool, cfg);
  CHECK(r.summary.status == static_cast<int32_t>(episode_status::completed));
  REQUIRE(r.traj);
  REQUIRE(r.traj->turns.size() == 3);
  CHECK(r.traj->turns[0].reward == -1);
  CHECK(r.traj->turns[1].reward == 1);
  CHECK(r.traj->turns[1].speedup_eager == doctest::Approx(2.0 / 1.95));
  CHECK(r.traj->turns[2].reward == 2);
  CHECK(r.traj->turns[2].speedup_eager == doctest::Approx(2.0));
  CHECK(r.traj->turns[2].run_ms == 1.0);
  CHECK_FALSE(r.traj->turns[2].speedup_compile.has_value());
  CHECK(r.traj->reward == 2);
  CHECK(r.summary.correct_turns == 2);
}

TEST_CASE("episode: a flagged timing earns no speed tier, whatever its speedup") {
  test::caf_fixture f;
  episode_config cfg;
  cfg.max_turns = 2;
  // Both turns 2x faster than eager; the first beyond the bandwidth roofline (suspect).
  auto pool = test::spawn_fake_pool(*f.sys, [](int n, const std::string&) {
    return test::outcome_bytes(outcome_kind::correct, 1.0, n == 0);
  });
  auto r = run_episode(f, pool, cfg);
  REQUIRE(r.traj);
  REQUIRE(r.traj->turns.size() == 2);
  CHECK(r.traj->turns[0].reward == 1);                           // correct, no speed tier
  CHECK(r.traj->turns[0].speedup_eager == doctest::Approx(2.0)); // the figure stays visible
  CHECK(r.traj->turns[1].reward == 2);
}

TEST_CASE("episode: a pool that never answers -> failed after the turn timeout") {
  test::caf_fixture f;
  episode_config cfg;
  cfg.pool_timeout = 100ms;
  cfg.watchdog_interval = 10ms;
  auto pool = test::spawn_fake_pool(*f.sys, [](int, const std::string&) { return std::string(); });
  auto t0 = std::chrono::steady_clock::now();
  auto r = run_episode(f, pool, cfg);
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(r.summary.status == static_cast<int32_t>(episode_status::failed));
  CHECK(r.summary.error.find("pool: no reply within the turn timeout") != std::string::npos);
  CHECK(took >= 100ms);
  CHECK(took < 5s);
  REQUIRE(r.traj); // streamed anyway, with the program it wrote and no finished turn
  CHECK(r.traj->status == episode_status::failed);
  CHECK(r.traj->turns.empty());
  CHECK(r.traj->reward == 0);
}

TEST_CASE("episode: the episode deadline -> aborted") {
  test::caf_fixture f;
  episode_config cfg;
  cfg.max_turns = 100;
  cfg.pool_timeout = 60s;
  cfg.episode_timeout = 150ms;
  cfg.watchdog_interval = 10ms;
  cfg.stop_at_best = false;
  // Answers the first two jobs, then never again: the deadline ends the wait.
  auto pool = test::spawn_fake_pool(*f.sys, [](int n, const std::string&) {
    return n < 2 ? test::outcome_bytes(outcome_kind::correct) : std::string();
  });
  auto r = run_episode(f, pool, cfg);
  CHECK(r.summary.status == static_cast<int32_t>(episode_status::aborted));
  CHECK(r.summary.error.find("episode deadline") != std::string::npos);
  REQUIRE(r.traj);
  CHECK(r.traj->turns.size() == 2);
  CHECK(r.traj->reward == 2); // best of the finished turns (2x faster than eager)
}

TEST_CASE("episode: a policy server that never answers -> failed") {
  test::caf_fixture f;
  episode_config cfg;
  cfg.policy_timeout = 50ms;
  cfg.watchdog_interval = 10ms;
  auto mute = f.sys->spawn([](caf::event_based_actor* self) -> caf::behavior {
    return {[=](generate_atom, const gen_request&) -> caf::result<gen_reply> {
              return self->make_response_promise<gen_reply>(); // dropped
            },
            [](release_atom, uint64_t) {}};
  });
  auto pool = test::spawn_fake_pool(
      *f.sys, [](int, const std::string&) { return test::outcome_bytes(outcome_kind::correct); });
  auto r = run_episode(f, pool, cfg, mute);
  CHECK(r.summary.status == static_cast<int32_t>(episode_status::failed));
  CHECK(r.summary.error.find("policy: no reply") != std::string::npos);
  caf::anon_send_exit(mute, caf::exit_reason::user_shutdown);
}

TEST_CASE("episode: an undecodable outcome or an error reply -> failed, naming the pool") {
  test::caf_fixture f;
  episode_config cfg;
  auto garbage = test::spawn_fake_pool(
      *f.sys, [](int, const std::string&) { return std::string("\xc1 not msgpack"); });
  auto r = run_episode(f, garbage, cfg);
  CHECK(r.summary.status == static_cast<int32_t>(episode_status::failed));
  CHECK(r.summary.error.rfind("pool: ", 0) == 0);
  auto erroring = f.sys->spawn([](caf::event_based_actor*) -> caf::behavior {
    return {[](evaluate_atom, const std::string&, const std::string&) -> caf::result<std::string> {
      return caf::make_error(caf::sec::runtime_error, "device lost");
    }};
  });
  auto r2 = run_episode(f, erroring, cfg);
  CHECK(r2.summary.status == static_cast<int32_t>(episode_status::failed));
  CHECK(r2.summary.error.find("pool") != std::string::npos);
}
