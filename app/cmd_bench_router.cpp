// kiln bench router: the pool router's own throughput across `kiln node`s, with no kernels in the
// way. Each node runs `--backend null` (every job decoded and answered at once), so the figures
// are Kiln's cost per job: the job's msgpack, BASP both ways, routing, the network. Prints jobs/s
// in all and per node, latency, and the CPU each process spent per job (this machine's cores are
// shared by every process of a farm in namespaces, so CPU per job is the figure that carries
// over to a real farm).
//   driver --K in flight--> router --(least loaded)--> node_i (null pool) --> outcome back
#include "actors/actor_system_setup.hpp"
#include "app/bench_probes.hpp"
#include "app/commands.hpp"
#include "data/task_set.hpp"
#include "pool/pool_router.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace kiln {

namespace {

using clock_type = std::chrono::steady_clock;
using run_atom = caf::atom_constant<caf::atom("run")>;

struct driver_state {
  int sent = 0, done = 0, failed = 0;
  std::vector<double> latency_ms;
  caf::typed_response_promise<std::string> rp;
  static inline const char* name = "kiln.bench_router_driver";
};

double pct(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

void finish(caf::stateful_actor<driver_state>* self) {
  auto& st = self->state;
  st.rp.deliver(nlohmann::json{{"failed", st.failed},
                               {"latency_ms_p50", pct(st.latency_ms, 0.5)},
                               {"latency_ms_p99", pct(st.latency_ms, 0.99)}}
                    .dump());
}

// Keeps `in_flight` jobs in the router until `total` are answered; replies with a JSON summary.
caf::behavior driver(caf::stateful_actor<driver_state>* self, caf::actor router, std::string job,
                     int total, int in_flight) {
  auto send_one = std::make_shared<std::function<void()>>();
  *send_one = [=] {
    auto& st = self->state;
    if (st.sent >= total) return;
    ++st.sent;
    auto t0 = clock_type::now();
    self->request(router, caf::infinite, evaluate_atom::value, job, std::string("null"))
        .then(
            [=](const std::string& reply) {
              auto& st = self->state;
              auto o = decode_outcome(reply);
              if (!o || o->kind != outcome_kind::correct) ++st.failed;
              st.latency_ms.push_back(
                  std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
              if (++st.done == total) return finish(self);
              (*send_one)();
            },
            [=](caf::error&) {
              auto& st = self->state;
              ++st.failed;
              if (++st.done == total) return finish(self);
              (*send_one)();
            });
  };
  return {
      [=](run_atom) {
        self->state.rp = self->make_response_promise<std::string>();
        for (int i = 0; i < in_flight; ++i) (*send_one)();
        return self->state.rp;
      },
  };
}

nlohmann::json ask_json(caf::scoped_actor& self, const caf::actor& a) {
  nlohmann::json out;
  self->request(a, std::chrono::seconds(10), stats_atom::value)
      .receive([&](std::string& s) { out = nlohmann::json::parse(s, nullptr, false); },
               [&](caf::error&) {});
  return out.is_object() ? out : nlohmann::json::object();
}

} // namespace

int cmd_bench_router(const common_args& common, const bench_args& args) {
  if (args.remote.empty()) {
    spdlog::error("kiln bench router: give the nodes with --remote HOST:PORT (start them with "
                  "`kiln node --backend null`)");
    return 2;
  }
  if (args.jobs < 1 || args.in_flight < 1) {
    spdlog::error("kiln bench router: --jobs and --in-flight must be >= 1");
    return 2;
  }
  auto set = load_tasks(args.suites);
  if (set.tasks.empty()) {
    spdlog::error("kiln bench router: no task to build the job from");
    return 2;
  }
  caf::actor_system_config sc;
  configure_actor_system(sc, {configure_threads(common.threads), "sharing", true,
                              common.peer_heartbeat_ms, common.peer_timeout_ms});
  caf::actor_system sys{sc};
  std::vector<pool_member> members;
  for (const auto& r : args.remote) {
    auto m = connect_pool(sys, r);
    if (!m) {
      spdlog::error("kiln bench router: {}", m.message());
      return 2;
    }
    if (m->backend != "null")
      spdlog::warn("kiln bench router: {} serves the {} backend, not null: its kernels are timed "
                   "in these figures",
                   r, m->backend);
    members.push_back(*m);
  }
  job j;
  j.id = 1;
  j.kind = job_kind::evaluate;
  j.spec = set.tasks.front();
  std::string job_bytes = encode(j);
  auto router = spawn_pool_router(sys, members);
  caf::scoped_actor self{sys};
  std::vector<double> node_cpu0;
  for (const auto& m : members) node_cpu0.push_back(ask_json(self, m.pool).value("cpu_s", 0.0));

  double cpu0 = cpu_seconds();
  auto t0 = clock_type::now();
  auto d = sys.spawn(driver, router, job_bytes, args.jobs, args.in_flight);
  nlohmann::json driven;
  self->request(d, caf::infinite, run_atom::value)
      .receive([&](std::string& s) { driven = nlohmann::json::parse(s, nullptr, false); },
               [&](caf::error& e) { spdlog::error("kiln bench router: {}", sys.render(e)); });
  if (!driven.is_object()) return 1;
  double wall = std::chrono::duration<double>(clock_type::now() - t0).count();
  double cpu = cpu_seconds() - cpu0;
  auto rstats = ask_json(self, router);

  nlohmann::json out = {{"bench", "router"},
                        {"nodes", members.size()},
                        {"jobs", args.jobs},
                        {"in_flight", args.in_flight},
                        {"job_bytes", job_bytes.size()},
                        {"wall_s", wall},
                        {"jobs_per_s", args.jobs / wall},
                        {"coordinator_cpu_us_per_job", 1e6 * cpu / args.jobs},
                        {"latency_ms_p50", driven["latency_ms_p50"]},
                        {"latency_ms_p99", driven["latency_ms_p99"]},
                        {"jobs_failed", driven["failed"]}};
  nlohmann::json per_node = nlohmann::json::array();
  for (size_t i = 0; i < members.size(); ++i) {
    int64_t routed = 0;
    for (const auto& n : rstats.value("nodes", nlohmann::json::array()))
      if (n.value("name", std::string()) == members[i].name) routed = n.value("routed", int64_t{0});
    double node_cpu = ask_json(self, members[i].pool).value("cpu_s", 0.0) - node_cpu0[i];
    per_node.push_back({{"node", members[i].name},
                        {"routed", routed},
                        {"jobs_per_s", routed / wall},
                        {"cpu_us_per_job", routed ? 1e6 * node_cpu / routed : 0.0}});
  }
  out["per_node"] = per_node;
  out["retries"] = rstats.value("retries", int64_t{0});
  out["failed"] = rstats.value("failed", int64_t{0});
  if (args.json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("router over %zu node(s): %d jobs, %d in flight: %.0f jobs/s, coordinator %.1f us "
                "CPU per job\n",
                members.size(), args.jobs, args.in_flight, args.jobs / wall, 1e6 * cpu / args.jobs);
    for (const auto& n : per_node)
      std::printf("  %-24s %8lld jobs  %8.0f jobs/s  %6.1f us CPU per job\n",
                  n["node"].get<std::string>().c_str(),
                  static_cast<long long>(n["routed"].get<int64_t>()), n["jobs_per_s"].get<double>(),
                  n["cpu_us_per_job"].get<double>());
  }
  caf::anon_send_exit(d, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
  return driven.value("failed", 1) == 0 ? 0 : 1;
}

} // namespace kiln
