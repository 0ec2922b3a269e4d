// The policy server: requests from many sequences share decode steps (continuous batching),
// sequences join and leave between steps, tokens carry the version that wrote them across a
// weight swap, and bad tokens or double requests are errors.
#include "caf_fixture.hpp"
#include "rollout/builtin_policies.hpp"
#include "rollout/episode.hpp"
#include "rollout/policy_server.hpp"
#include "rollout/token_space.hpp"
#include "rollout/trajectory.hpp"
#include "rollout_fixtures.hpp"

#include <atomic>
#include <doctest/doctest.h>
#include <set>
#include <thread>

using namespace kiln;
using namespace std::chrono_literals;

namespace {

// Deterministic: the first valid token; logs which sequences each step saw; optional weight
// swaps every `swap_every` steps; optional sleep per step (to let others join mid-program).
struct log_t {
  std::mutex m;
  std::vector<std::vector<uint64_t>> steps;
  int64_t version = 0;
  std::vector<int32_t> last_context; // what the policy last saw as a context
};
class scripted_policy final : public token_policy {
public:
  scripted_policy(std::shared_ptr<log_t> log, int swap_every = 0,
                  std::chrono::milliseconds sleep = 0ms, int32_t bad_token = -2)
      : log_(log), swap_every_(swap_every), sleep_(sleep), bad_(bad_token) {}
  std::string name() const override { return "scripted"; }
  int64_t version() const override { return version_; }
  void step(std::vector<decode_slot>& batch, std::mt19937_64&) override {
    std::vector<uint64_t> ids;
    for (auto& s : batch) {
      ids.push_back(s.seq_id);
      {
        std::lock_guard<std::mutex> l(log_->m);
        log_->last_context = *s.context;
      }
      s.token = -1;
      for (size_t i = 0; i < s.mask->size(); ++i)
        if ((*s.mask)[i]) {
          s.token = static_cast<int32_t>(i);
          break;
        }
      if (bad_ != -2) s.token = bad_;
      s.logprob = -0.5f;
    }
    {
      std::lock_guard<std::mutex> l(log_->m);
      log_->steps.push_back(ids);
    }
    ++steps_;
    if (sleep_ > 0ms) std::this_thread::sleep_for(sleep_);
    if (steps_ == 1 && first_sleep_ > 0ms) std::this_thread::sleep_for(first_sleep_);
  }
  bool refresh() override {
    if (bump_.exchange(false)) return ++version_, true; // new weights "arrived"
    if (swap_every_ == 0 || steps_ - swapped_at_ < swap_every_) return false;
    swapped_at_ = steps_;
    ++version_;
    std::lock_guard<std::mutex> l(log_->m);
    log_->version = version_;
    return true;
  }

private:
  std::shared_ptr<log_t> log_;
  int swap_every_;
  std::chrono::milliseconds sleep_;
  int32_t bad_;
  int64_t version_ = 0, steps_ = 0, swapped_at_ = 0;

public:
  std::atomic<bool> bump_{false};
  std::chrono::milliseconds first_sleep_ = 0ms; // lets every request queue behind step 1
};

gen_request request(uint64_t seq, const rollout_task_ptr& t) {
  gen_request r;
  r.seq_id = seq;
  r.task = t;
  r.append = t->prompt;
  r.append.push_back(token_of(special_token::program));
  return r;
}

} // namespace

TEST_CASE("policy server: concurrent requests share decode steps") {
  test::caf_fixture f;
  auto log = std::make_shared<log_t>();
  auto policy = std::make_unique<scripted_policy>(log);
  policy->first_sleep_ = 200ms;
  auto server = spawn_policy_server(*f.sys, std::move(policy));
  auto task = make_rollout_task(test::task_named("gemm_multiply_leakyrelu"));
  caf::scoped_actor self{*f.sys};
  constexpr int n = 64;
  for (int i = 0; i < n; ++i) self->send(server, generate_atom::value, request(uint64_t(i), task));
  size_t tokens = 0;
  std::vector<int32_t> first;
  for (int i = 0; i < n; ++i)
    self->receive(
        [&](gen_reply& r) {
          CHECK(r.complete);
          CHECK(r.packed.size() == 3 * r.size());
          CHECK(r.versions() == std::vector<int32_t>(r.size(), 0));
          CHECK(r.logprobs() == std::vector<float>(r.size(), -0.5f));
          if (first.empty()) first = r.tokens();
          CHECK(r.tokens() == first); // same task, deterministic policy
          tokens += r.size();
        },
        [&](caf::error& e) { FAIL(f.sys->render(e)); }, caf::after(10s) >> [] { FAIL("timeout"); });
  std::lock_guard<std::mutex> l(log->m);
  // 64 programs in one program's worth of steps (+1: the first request ran alone for a step).
  CHECK(log->steps.size() <= first.size() + 1);
  CHECK(tokens == n * first.size());
  size_t biggest = 0;
  for (auto& s : log->steps) biggest = std::max(biggest, s.size());
  CHECK(biggest >= n - 1);
  self->send_exit(server, caf::exit_reason::user_shutdown);
}

TEST_CASE("policy server: a sequence joins a running batch and each leaves when done") {
  test::caf_fixture f;
  auto log = std::make_shared<log_t>();
  auto server = spawn_policy_server(*f.sys, std::make_unique<scripted_policy>(log, 0, 5ms));
  auto big = make_rollout_task(test::task_named("gemm_multiply_leakyrelu"));
  caf::scoped_actor self{*f.sys};
  self->send(server, generate_atom::value, request(1, big));
  std::this_thread::sleep_for(20ms); // seq 1 is a few steps in
  self->send(server, generate_atom::value, request(2, big));
  for (int i = 0; i < 2; ++i)
    self->receive([](gen_reply& r) { CHECK(r.complete); },
                  caf::after(10s) >> [] { FAIL("timeout"); });
  std::lock_guard<std::mutex> l(log->m);
  REQUIRE(!log->steps.empty());
  CHECK(log->steps.front() == std::vector<uint64_t>{1});
  bool together = false;
  for (auto& s : log->steps) together |= s.size() == 2;
  CHECK(together);
  CHECK(log->steps.back() == std::vector<uint64_t>{2}); // 1 left first, 2 kept going
  self->send_exit(server, caf::exit_reason::user_shutdown);
}

TEST_CASE("policy server: weights swap between steps, every token carries its version") {
  test::caf_fixture f;
  auto log = std::make_shared<log_t>();
  auto server = spawn_policy_server(*f.sys, std::make_unique<scripted_policy>(log, 4));
  auto task = make_rollout_task(test::task_named("gemm_multiply_leakyrelu"));
  caf::scoped_actor self{*f.sys};
  self->send(server, subscribe_atom::value, caf::actor_cast<caf::actor>(self));
  self->send(server, generate_atom::value, request(7, task));
  std::vector<int64_t> announced;
  bool done = false;
  gen_reply reply;
  while (!done)
    self->receive([&](gen_reply& r) { reply = r, done = true; },
                  [&](version_atom, int64_t v) { announced.push_back(v); },
                  caf::after(10s) >>
                      [&] {
                        done = true;
                        FAIL("timeout");
                      });
  REQUIRE(reply.size() > 8);
  auto versions = reply.versions();
  for (size_t i = 0; i < versions.size(); ++i)
    CHECK(versions[i] == static_cast<int32_t>(i / 4)); // swap after every 4th step
  CHECK(!announced.empty());
  CHECK(announced.front() == 1);
  self->send_exit(server, caf::exit_reason::user_shutdown);
}

TEST_CASE("policy server: weight swap mid-episode is recorded per token in the trajectory") {
  test::caf_fixture f;
  auto log = std::make_shared<log_t>();
  auto server = spawn_policy_server(*f.sys, std::make_unique<scripted_policy>(log, 5));
  auto task = make_rollout_task(test::task_named("gemm_multiply_leakyrelu"));
  task->eager_ms = 1.0;
  auto pool = test::spawn_fake_pool(
      *f.sys, [](int, const std::string&) { return test::outcome_bytes(outcome_kind::wrong); });
  auto kept = std::make_shared<test::kept_messages>();
  auto sink = test::spawn_keeping_sink(*f.sys, kept);
  caf::scoped_actor self{*f.sys};
  episode_config cfg;
  cfg.max_turns = 2;
  episode_args a;
  a.id = 5;
  a.task = task;
  a.cfg = std::make_shared<episode_config>(cfg);
  a.peers = {server, pool, sink, self};
  spawn_episode(*f.sys, a);
  self->receive([](episode_done_atom, const episode_summary&) {},
                caf::after(10s) >> [] { FAIL("timeout"); });
  REQUIRE(kept->size() == 1);
  auto t = decode_trajectory(kept->msgs[0].data(), kept->msgs[0].size());
  REQUIRE(t.has_value());
  CHECK(t->policy_version == 0);
  std::set<int32_t> seen;
  int32_t last = 0;
  for (size_t i = 0; i < t->tokens.size(); ++i) {
    if (!t->loss_mask[i]) {
      CHECK(t->versions[i] == -1);
      continue;
    }
    CHECK(t->versions[i] >= last); // never goes back
    last = t->versions[i];
    seen.insert(t->versions[i]);
    CHECK(t->logprobs[i] == -0.5f);
  }
  CHECK(seen.size() >= 3); // several versions within one episode
  // The server's context is the trajectory's: prompt, programs and observations, each once.
  std::lock_guard<std::mutex> l(log->m);
  REQUIRE(log->last_context.size() < t->tokens.size());
  CHECK(std::equal(log->last_context.begin(), log->last_context.end(), t->tokens.begin()));
  CHECK(t->tokens[log->last_context.size()] != token_of(special_token::obs)); // a program token
  for (auto& x : {server, pool, sink}) self->send_exit(x, caf::exit_reason::user_shutdown);
}

TEST_CASE("policy server: a token off the grammar and a double request are errors") {
  test::caf_fixture f;
  auto log = std::make_shared<log_t>();
  auto task = make_rollout_task(test::task_named("gemm_multiply_leakyrelu"));
  caf::scoped_actor self{*f.sys};
  auto bad = spawn_policy_server(*f.sys, std::make_unique<scripted_policy>(log, 0, 0ms, 0));
  std::string err;
  self->request(bad, 10s, generate_atom::value, request(1, task))
      .receive([](gen_reply&) { FAIL("accepted a bad token"); },
               [&](caf::error& e) { err = f.sys->render(e); });
  CHECK(err.find("grammar does not allow") != std::string::npos);
  auto slow = spawn_policy_server(*f.sys, std::make_unique<scripted_policy>(log, 0, 5ms));
  self->send(slow, generate_atom::value, request(3, task));
  err.clear();
  self->request(slow, 10s, generate_atom::value, request(3, task))
      .receive([](gen_reply&) { FAIL("second request accepted"); },
               [&](caf::error& e) { err = f.sys->render(e); });
  CHECK(err.find("already generating") != std::string::npos);
  self->receive([](gen_reply& r) { CHECK(r.complete); },
                caf::after(10s) >> [] { FAIL("timeout"); });
  for (auto& x : {bad, slow}) self->send_exit(x, caf::exit_reason::user_shutdown);
}

TEST_CASE("policy server: an idle server still picks up new weights and announces them") {
  test::caf_fixture f;
  auto log = std::make_shared<log_t>();
  auto policy = std::make_unique<scripted_policy>(log);
  auto* raw = policy.get();
  policy_server_config cfg;
  cfg.idle_refresh = 10ms;
  auto server = spawn_policy_server(*f.sys, std::move(policy), cfg);
  caf::scoped_actor self{*f.sys};
  self->send(server, subscribe_atom::value, caf::actor_cast<caf::actor>(self));
  std::this_thread::sleep_for(50ms);
  raw->bump_ = true; // no request in sight: only the idle poll can see it
  int64_t got = -1;
  self->receive([&](version_atom, int64_t v) { got = v; },
                caf::after(5s) >> [] { FAIL("no version announced"); });
  CHECK(got == 1);
  self->request(server, 5s, version_atom::value)
      .receive([](int64_t v) { CHECK(v == 1); }, [](caf::error&) { FAIL("no answer"); });
  self->send_exit(server, caf::exit_reason::user_shutdown);
}

TEST_CASE("policy server: a policy that throws fails its sequences, not the server") {
  struct throwing final : token_policy {
    std::string name() const override { return "throwing"; }
    int64_t version() const override { return 3; }
    void step(std::vector<decode_slot>&, std::mt19937_64&) override {
      throw std::runtime_error("device lost");
    }
  };
  test::caf_fixture f;
  auto server = spawn_policy_server(*f.sys, std::make_unique<throwing>());
  auto task = make_rollout_task(test::task_named("gemm_multiply_leakyrelu"));
  caf::scoped_actor self{*f.sys};
  std::string err;
  self->request(server, 10s, generate_atom::value, request(1, task))
      .receive([](gen_reply&) { FAIL("no error"); },
               [&](caf::error& e) { err = f.sys->render(e); });
  CHECK(err.find("step failed") != std::string::npos);
  self->request(server, 5s, version_atom::value)
      .receive([](int64_t v) { CHECK(v == 3); }, [](caf::error&) { FAIL("server died"); });
  self->send_exit(server, caf::exit_reason::user_shutdown);
}
