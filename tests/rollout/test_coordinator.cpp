// The coordinator with real episodes and policy server: baselines measured once per task, the
// staleness bound under eta = 0 (admission waits for new versions), backpressure from a ZeroMQ
// sink nobody reads (episodes wait, none is dropped).
#include "caf_fixture.hpp"
#include "rollout/builtin_policies.hpp"
#include "rollout/coordinator.hpp"
#include "rollout/policy_server.hpp"
#include "rollout/trajectory.hpp"
#include "rollout/trajectory_sink.hpp"
#include "rollout_fixtures.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <unistd.h>
#include <zmq.hpp>

using namespace kiln;
using namespace std::chrono_literals;

namespace {

nlohmann::json stats(caf::scoped_actor& self, const caf::actor& a) {
  std::string s = "{}";
  self->request(a, 5s, server_stats_atom::value)
      .receive([&](const std::string& x) { s = x; }, [](caf::error&) {});
  return nlohmann::json::parse(s);
}

// Polls until pred(stats) holds or 10 s passed.
bool wait_for(caf::scoped_actor& self, const caf::actor& a,
              const std::function<bool(const nlohmann::json&)>& pred) {
  for (int i = 0; i < 1000; ++i) {
    if (pred(stats(self, a))) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

caf::actor instant_pool(caf::actor_system& sys, std::shared_ptr<std::atomic<int>> baselines = {}) {
  return test::spawn_fake_pool(
      sys, [](int, const std::string&) { return test::outcome_bytes(outcome_kind::correct, 1.0); },
      baselines);
}

} // namespace

TEST_CASE("coordinator: eta = 0 admits one batch per policy version, baselines once per task") {
  test::caf_fixture f;
  auto baselines = std::make_shared<std::atomic<int>>(0);
  auto pool = instant_pool(*f.sys, baselines);
  auto server = spawn_policy_server(*f.sys, make_expert_policy(backend_kind::cpu));
  auto kept = std::make_shared<test::kept_messages>();
  auto sink = test::spawn_keeping_sink(*f.sys, kept);
  std::vector<std::shared_ptr<rollout_task>> tasks = {
      make_rollout_task(test::task_named("gemm_multiply_leakyrelu")),
      make_rollout_task(test::suite_tasks().front())};
  coordinator_config cc;
  cc.admission = {100, /*eta*/ 0, /*batch*/ 4, /*group*/ 2, /*total*/ 12};
  auto coord = spawn_coordinator(*f.sys, tasks, cc, {server, pool, sink, {}});
  caf::scoped_actor self{*f.sys};
  REQUIRE(wait_for(self, coord, [](auto& j) { return j["accepted"] == 4; }));
  std::this_thread::sleep_for(100ms);
  auto j = stats(self, coord);
  CHECK(j["started"] == 4); // no more until the version moves
  CHECK(j["running"] == 0);
  self->send(coord, version_atom::value, int64_t{1});
  REQUIRE(wait_for(self, coord, [](auto& j) { return j["accepted"] == 8; }));
  std::this_thread::sleep_for(100ms);
  CHECK(stats(self, coord)["started"] == 8);
  self->send(coord, version_atom::value, int64_t{2});
  std::string summary;
  self->request(coord, 10s, run_atom::value)
      .receive([&](const std::string& s) { summary = s; }, [](caf::error&) {});
  auto s = nlohmann::json::parse(summary);
  CHECK(s["episodes"] == 12);
  CHECK(s["accepted"] == 12);
  CHECK(s["status"]["completed"] == 12); // 2x faster than the 2 ms baseline: best tier at once
  CHECK(baselines->load() == 2);         // one per task, not per episode
  REQUIRE(kept->size() == 12);
  // Groups of 2 consecutive episodes share a task and a group name.
  std::map<std::string, std::set<std::string>> group_tasks;
  for (auto& m : kept->msgs) {
    auto t = decode_trajectory(m.data(), m.size());
    REQUIRE(t.has_value());
    group_tasks[t->group].insert(t->task);
  }
  CHECK(group_tasks.size() == 6);
  for (auto& [g, ts] : group_tasks) CHECK(ts.size() == 1);
  for (auto& x : {coord, server, pool, sink}) self->send_exit(x, caf::exit_reason::user_shutdown);
}

TEST_CASE("coordinator: backpressure from a sink nobody reads, nothing is dropped") {
  test::caf_fixture f;
  std::string endpoint = "ipc:///tmp/kiln-test-sink-" + std::to_string(::getpid());
  sink_config sc;
  sc.outputs = {{endpoint, true, 1}};
  sc.linger_ms = 0;
  auto sink = spawn_trajectory_sink(*f.sys, sc);
  REQUIRE_MESSAGE(sink.error.empty(), sink.error);
  auto pool = instant_pool(*f.sys);
  auto server = spawn_policy_server(*f.sys, make_expert_policy(backend_kind::cpu));
  coordinator_config cc;
  cc.admission.max_concurrent = 5;
  cc.admission.total = 20;
  auto tasks = std::vector<std::shared_ptr<rollout_task>>{
      make_rollout_task(test::task_named("gemm_multiply_leakyrelu"))};
  auto coord = spawn_coordinator(*f.sys, tasks, cc, {server, pool, sink.actor, {}});
  caf::scoped_actor self{*f.sys};
  REQUIRE(wait_for(self, sink.actor, [](auto& j) { return j["queued"] == 5; }));
  std::this_thread::sleep_for(200ms);
  auto j = stats(self, coord);
  CHECK(j["started"] == 5); // the 5 running episodes wait for the sink; no new ones start
  CHECK(j["running"] == 5);
  CHECK(j["episodes"] == 0);
  CHECK(stats(self, sink.actor)["sent"] == 0);
  // A reader arrives: everything flows, in full.
  zmq::context_t ctx;
  zmq::socket_t pull(ctx, zmq::socket_type::pull);
  pull.set(zmq::sockopt::rcvhwm, 1);
  pull.set(zmq::sockopt::rcvtimeo, 10000);
  pull.connect(endpoint);
  std::set<std::string> ids;
  for (int i = 0; i < 20; ++i) {
    zmq::message_t m;
    REQUIRE(pull.recv(m));
    auto t = decode_trajectory(static_cast<const char*>(m.data()), m.size());
    REQUIRE_MESSAGE(t.has_value(), (t ? "" : t.message()));
    ids.insert(t->id);
  }
  CHECK(ids.size() == 20);
  std::string summary;
  self->request(coord, 10s, run_atom::value)
      .receive([&](const std::string& s) { summary = s; }, [](caf::error&) {});
  auto s = nlohmann::json::parse(summary);
  CHECK(s["accepted"] == 20);
  CHECK(s["episodes"] == 20);
  auto sink_stats = stats(self, sink.actor);
  CHECK(sink_stats["sent"] == 20);
  CHECK(sink_stats["bytes"].get<int64_t>() > 20 * 100);
  CHECK(sink_stats["queued"] == 0);
  for (auto& x : {coord, server, pool, sink.actor})
    self->send_exit(x, caf::exit_reason::user_shutdown);
}

TEST_CASE("trajectory sink: a bad endpoint is an error naming it") {
  test::caf_fixture f;
  sink_config sc;
  sc.outputs = {{"nonsense://x", true, 1000}};
  auto sink = spawn_trajectory_sink(*f.sys, sc);
  CHECK_FALSE(sink.actor);
  CHECK(sink.error.find("nonsense://x") != std::string::npos);
}

TEST_CASE("trajectory sink: a tee gives every output every trajectory, and a slow one holds both") {
  test::caf_fixture f;
  std::string base = "ipc:///tmp/kiln-test-tee-" + std::to_string(::getpid());
  sink_config sc;
  sc.outputs = {{base + "-a", true, 1}, {base + "-b", true, 1}};
  sc.linger_ms = 0;
  auto sink = spawn_trajectory_sink(*f.sys, sc);
  REQUIRE_MESSAGE(sink.error.empty(), sink.error);
  caf::scoped_actor self{*f.sys};
  zmq::context_t ctx;
  zmq::socket_t a(ctx, zmq::socket_type::pull);
  a.set(zmq::sockopt::rcvtimeo, 10000);
  a.connect(base + "-a");
  std::this_thread::sleep_for(100ms);
  for (int i = 0; i < 6; ++i) {
    trajectory t;
    t.id = std::to_string(i);
    self->send(sink.actor, push_atom::value, encode(t));
  }
  // Output b has no reader: after its high-water mark nothing more is answered, for a as well.
  REQUIRE(wait_for(self, sink.actor, [](auto& j) { return j["queued"].template get<int>() >= 1; }));
  std::this_thread::sleep_for(200ms);
  CHECK(stats(self, sink.actor)["sent"].get<int>() < 6);
  zmq::socket_t b(ctx, zmq::socket_type::pull);
  b.set(zmq::sockopt::rcvtimeo, 10000);
  b.connect(base + "-b");
  for (auto* sock : {&a, &b}) {
    std::set<std::string> ids;
    for (int i = 0; i < 6; ++i) {
      zmq::message_t m;
      REQUIRE(sock->recv(m));
      auto t = decode_trajectory(static_cast<const char*>(m.data()), m.size());
      REQUIRE_MESSAGE(t.has_value(), (t ? "" : t.message()));
      ids.insert(t->id);
    }
    CHECK(ids.size() == 6);
  }
  REQUIRE(wait_for(self, sink.actor, [](auto& j) { return j["sent"] == 6; }));
  auto j = stats(self, sink.actor);
  CHECK(j["outputs"].size() == 2);
  CHECK(j["queued"] == 0);
  self->send_exit(sink.actor, caf::exit_reason::user_shutdown);
}

TEST_CASE("trajectory sink: no output is an error") {
  test::caf_fixture f;
  sink_config sc;
  sc.outputs.clear();
  auto sink = spawn_trajectory_sink(*f.sys, sc);
  CHECK_FALSE(sink.actor);
  CHECK(sink.error.find("no output") != std::string::npos);
}

TEST_CASE("coordinator: stopping it ends its waiting episodes, shutdown does not hang") {
  auto t0 = std::chrono::steady_clock::now();
  {
    test::caf_fixture f;
    auto pool =
        test::spawn_fake_pool(*f.sys, [](int, const std::string&) { return std::string(); });
    auto server = spawn_policy_server(*f.sys, make_expert_policy(backend_kind::cpu));
    coordinator_config cc;
    cc.admission.max_concurrent = 50;
    cc.admission.total = 50;
    cc.measure_baselines = false;
    auto tasks = std::vector<std::shared_ptr<rollout_task>>{
        make_rollout_task(test::task_named("gemm_multiply_leakyrelu"))};
    auto coord = spawn_coordinator(*f.sys, tasks, cc, {server, pool, {}, {}});
    caf::scoped_actor self{*f.sys};
    REQUIRE(wait_for(self, coord, [](auto& j) { return j["running"] == 50; }));
    for (auto& x : {coord, server, pool}) self->send_exit(x, caf::exit_reason::user_shutdown);
  } // ~actor_system waits for every actor: the 50 episodes (waiting up to an hour) must be gone
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
}
