// Emits a trajectory stream for tests/rollout/read_stream.py: N episodes of the real engine
// (coordinator, episodes, policy server with the random policy, ZeroMQ sink bound at ENDPOINT)
// over a fake pool whose outcomes rotate through correct / wrong / compile_error. One task has a
// torch.compile baseline, so speedup_compile is both nil and a number in the stream.
//   usage: kiln_rollout_stream ENDPOINT EPISODES
#include "caf_fixture.hpp"
#include "rollout/builtin_policies.hpp"
#include "rollout/coordinator.hpp"
#include "rollout/policy_server.hpp"
#include "rollout/trajectory_sink.hpp"
#include "rollout_fixtures.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>

using namespace kiln;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s ENDPOINT EPISODES\n", argv[0]);
    return 2;
  }
  test::caf_fixture f;
  sink_config sc;
  sc.outputs = {{argv[1], true, 4}};
  sc.linger_ms = 5000;
  auto sink = spawn_trajectory_sink(*f.sys, sc);
  if (!sink.error.empty()) {
    std::fprintf(stderr, "%s\n", sink.error.c_str());
    return 1;
  }
  auto pool = test::spawn_fake_pool(*f.sys, [](int n, const std::string&) {
    switch (n % 3) {
    case 0: return test::outcome_bytes(outcome_kind::compile_error);
    case 1: return test::outcome_bytes(outcome_kind::wrong);
    default: return test::outcome_bytes(outcome_kind::correct, 1.0 + (n % 5) * 0.5);
    }
  });
  auto server = spawn_policy_server(*f.sys, make_random_policy());
  std::vector<std::shared_ptr<rollout_task>> tasks;
  for (size_t i = 0; i < 3 && i < test::suite_tasks().size(); ++i)
    tasks.push_back(make_rollout_task(test::suite_tasks()[i * 7]));
  tasks[0]->compile_ms = 1.5;
  coordinator_config cc;
  cc.admission.total = std::atoi(argv[2]);
  cc.admission.max_concurrent = 8;
  cc.admission.group_size = 2;
  cc.episode.max_turns = 3;
  auto coord = spawn_coordinator(*f.sys, tasks, cc, {server, pool, sink.actor, {}});
  caf::scoped_actor self{*f.sys};
  int rc = 1;
  self->request(coord, std::chrono::seconds(60), run_atom::value)
      .receive(
          [&](const std::string& s) {
            auto j = nlohmann::json::parse(s);
            std::printf("%s\n", s.c_str());
            rc = j["accepted"] == cc.admission.total ? 0 : 1;
          },
          [&](caf::error& e) { std::fprintf(stderr, "%s\n", f.sys->render(e).c_str()); });
  for (auto& a : {coord, server, pool, sink.actor})
    self->send_exit(a, caf::exit_reason::user_shutdown);
  return rc;
}
