// kiln bench rollout --policy llm-mock: the LLM policy path at scale. N concurrent episodes, each
// turn a request through the LLM policy server and its HTTP client to a mock endpoint that answers
// after a fixed latency (llm/mock_endpoint.hpp), then the null pool. The mock runs in a child
// process forked before any thread exists, so its sockets and CPU are its own: what is left in
// this process (actor system, HTTP client, JSON, episodes) is Kiln's cost per request.
//   episodes --generate--> llm server --HTTP--> [child: mock, latency] --> episode --> null pool
#include "actors/actor_system_setup.hpp"
#include "app/bench_probes.hpp"
#include "app/commands.hpp"
#include "data/task_spec.hpp"
#include "rollout/coordinator.hpp"

#ifdef KILN_HAVE_LLM
#include "llm/llm_policy_server.hpp"
#include "llm/mock_endpoint.hpp"
#endif

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <csignal>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/wait.h>

namespace kiln {

#ifdef KILN_HAVE_LLM
namespace {

struct mock_child {
  pid_t pid = -1;
  int to_child = -1, from_child = -1;
  int port = 0;
};

// The answer every turn gets: a fenced block (the episode's submission) padded to about four
// bytes per answer token, as an LLM's kernel with its explanation would be.
std::string answer_text(int tokens) {
  std::string code = "```cpp\n//! kiln-source cpu\nextern \"C\" int kiln_run() { return 0; }\n";
  std::string pad = "// the kernel fuses the elementwise chain into one pass over the rows\n";
  while (static_cast<int>(code.size()) < 4 * tokens - 8) code += pad;
  return code + "```\n";
}

// Forks the mock; the child serves until its stdin pipe closes, then writes its figures.
expected<mock_child> fork_mock(const mock_endpoint_options& o) {
  int down[2], up[2];
  if (::pipe(down) != 0 || ::pipe(up) != 0) return error{"bench: pipe failed"};
  pid_t pid = ::fork();
  if (pid < 0) return error{"bench: fork failed"};
  if (pid == 0) {
    ::close(down[1]);
    ::close(up[0]);
    auto m = mock_endpoint::start(o);
    std::string line = m ? "port " + std::to_string((*m)->port()) + "\n" : "error\n";
    if (::write(up[1], line.data(), line.size()) < 0) _exit(1);
    char c;
    while (::read(down[0], &c, 1) > 0) {
    }
    if (m) {
      auto s = (*m)->stats();
      nlohmann::json j{{"requests", s.requests},
                       {"connections", s.connections},
                       {"bad_requests", s.bad_requests},
                       {"cpu_s", s.cpu_s}};
      line = j.dump() + "\n";
      if (::write(up[1], line.data(), line.size()) < 0) _exit(1);
    }
    _exit(0);
  }
  ::close(down[0]);
  ::close(up[1]);
  mock_child c{pid, down[1], up[0], 0};
  char buf[64] = {};
  ssize_t n = ::read(c.from_child, buf, sizeof buf - 1);
  if (n <= 0 || std::sscanf(buf, "port %d", &c.port) != 1)
    return error{"bench: the mock endpoint did not start"};
  return c;
}

nlohmann::json stop_mock(mock_child& c) {
  ::close(c.to_child);
  std::string text;
  char buf[512];
  for (ssize_t n; (n = ::read(c.from_child, buf, sizeof buf)) > 0;)
    text.append(buf, static_cast<size_t>(n));
  ::close(c.from_child);
  ::waitpid(c.pid, nullptr, 0);
  return nlohmann::json::parse(text, nullptr, false);
}

} // namespace
#endif

int bench_llm_mock(const common_args& common, const std::vector<task>& spec,
                   const bench_args& args) {
#ifndef KILN_HAVE_LLM
  (void)common, (void)spec, (void)args;
  spdlog::error("bench rollout --policy llm-mock: this build has no LLM policies (no libcurl)");
  return 2;
#else
  // Every in-flight request holds a connection; lift the descriptor limit to what is allowed.
  rlimit fd_limit{};
  ::getrlimit(RLIMIT_NOFILE, &fd_limit);
  fd_limit.rlim_cur = fd_limit.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &fd_limit);
  if (static_cast<rlim_t>(args.episodes) + 256 > fd_limit.rlim_cur) {
    spdlog::error("bench rollout: {} concurrent requests need as many sockets; the descriptor "
                  "limit is {} (ulimit -n)",
                  args.episodes, fd_limit.rlim_cur);
    return 2;
  }
  mock_endpoint_options mo;
  mo.latency_ms = args.llm_latency_ms;
  mo.prompt_tokens = args.llm_prompt_tokens;
  mo.answer_tokens = args.llm_answer_tokens;
  mo.answer_text = answer_text(args.llm_answer_tokens);
  auto child = fork_mock(mo); // before the actor system starts a thread
  if (!child) {
    spdlog::error("{}", child.message());
    return 2;
  }
  nlohmann::json out;
  {
    caf::actor_system_config cfg;
    int threads = configure_actor_system(cfg, {common.threads, args.scheduler});
    register_rollout_messages(cfg);
    caf::actor_system sys{cfg};
    if (!args.json)
      spdlog::info("bench rollout --policy llm-mock: {} episodes x {} turns, {} api, latency {} "
                   "ms, {} scheduler threads; mock in pid {} on port {}",
                   args.episodes, args.turns, args.llm_api, args.llm_latency_ms, threads,
                   child->pid, child->port);
    llm_policy_config lc;
    lc.api = args.llm_api;
    lc.endpoints = {"http://127.0.0.1:" + std::to_string(child->port)};
    lc.model = "mock";
    lc.max_in_flight = args.episodes;
    lc.max_tokens = args.llm_answer_tokens;
    lc.timeout_s = 60 + args.llm_latency_ms / 1000 * 4;
    lc.max_attempts = 1; // a failure is a finding here, not something to retry away
    auto server = spawn_llm_policy_server(sys, lc);
    if (!server) {
      spdlog::error("{}", server.message());
      stop_mock(*child);
      return 2;
    }
    std::vector<std::shared_ptr<rollout_task>> tasks;
    for (const auto& t : spec) tasks.push_back(make_rollout_task(t));
    auto pool = sys.spawn(null_pool, correct_outcome(1.0));
    coordinator_config cc = all_in_flight(args.episodes, args.turns);
    cc.episode.text_policy = true;
    cc.episode.policy_timeout = std::chrono::seconds(600);
    episode_peers peers{*server, pool, {}, {}};
    int64_t rss0 = rss_bytes();
    rss_sampler sampler;
    auto coord = spawn_coordinator(sys, tasks, cc, peers);
    caf::scoped_actor self{sys};
    double cpu0 = cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
    std::string summary = "{}", server_stats = "{}";
    self->request(coord, std::chrono::seconds(3600), run_atom::value)
        .receive([&](const std::string& s) { summary = s; },
                 [&](caf::error& e) { spdlog::error("{}", sys.render(e)); });
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double cpu = cpu_seconds() - cpu0;
    int64_t peak = sampler.finish();
    self->request(*server, std::chrono::seconds(10), server_stats_atom::value)
        .receive([&](const std::string& s) { server_stats = s; }, [](caf::error&) {});
    for (auto& a : {coord, *server, pool}) self->send_exit(a, caf::exit_reason::user_shutdown);
    auto ro = nlohmann::json::parse(summary, nullptr, false);
    auto st = nlohmann::json::parse(server_stats, nullptr, false);
    double requests = st.value("requests", 0.0), answers = st.value("answers", 0.0);
    out = {{"policy", "llm-mock"},
           {"api", args.llm_api},
           {"episodes", args.episodes},
           {"turns", args.turns},
           {"latency_ms", args.llm_latency_ms},
           {"context_tokens", args.llm_prompt_tokens + args.llm_answer_tokens},
           {"threads", threads},
           {"seconds", wall},
           {"http_requests", requests},
           {"requests_per_s", requests / wall},
           {"answers_per_s", answers / wall},
           {"failed", st.value("failed", 0.0)},
           {"kiln_cpu_s", cpu},
           {"kiln_cores_busy", cpu / wall},
           {"kiln_cpu_us_per_request", requests > 0 ? cpu * 1e6 / requests : 0.0},
           {"bytes_per_episode", double(peak - rss0) / args.episodes},
           {"rollout", ro},
           {"llm_server", st}};
    // Above the endpoint's latency, what a turn waits on Kiln (client, actors, JSON).
    if (ro.is_object() && ro.contains("mean_ms"))
      out["policy_overhead_ms"] =
          ro["mean_ms"].value("policy", 0.0) / std::max(1, args.turns) - args.llm_latency_ms;
  }
  out["mock"] = stop_mock(*child);
  if (args.json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("%s\n", out.dump(2).c_str());
    std::printf("llm-mock: %.0f requests/s (%.0f answers/s), Kiln %.1f us CPU per request on %.2f "
                "cores, %.0f KiB per episode at %d-token contexts\n",
                out["requests_per_s"].get<double>(), out["answers_per_s"].get<double>(),
                out["kiln_cpu_us_per_request"].get<double>(), out["kiln_cores_busy"].get<double>(),
                out["bytes_per_episode"].get<double>() / 1024,
                args.llm_prompt_tokens + args.llm_answer_tokens);
  }
  return 0;
#endif
}

} // namespace kiln
