// kiln serve: the honest pool as an HTTP service (serve/): KernelGYM's reward calls and OpenEnv's
// episodes for RL frameworks, a durable journal, bearer tokens, a bounded queue. Runs until SIGINT
// / SIGTERM; accepted work not finished by then runs at the next start with the same --state
// folder.
#include "actors/actor_system_setup.hpp"
#include "actors/messages.hpp"
#include "app/commands.hpp"
#include "app/eval_runner.hpp"
#include "data/task_set.hpp"
#include "serve/episodes.hpp"
#include "serve/evaluator.hpp"
#include "serve/http_server.hpp"
#include "serve/job_board.hpp"
#include "serve/journal.hpp"
#include "serve/problem_import.hpp"
#include "serve/service.hpp"
#include "serve/tokens.hpp"

#include <atomic>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/send.hpp>
#include <csignal>
#include <filesystem>
#include <spdlog/spdlog.h>
#include <thread>

namespace kiln {

namespace {

std::atomic<bool> g_serve_stop{false};
extern "C" void on_serve_signal(int) { g_serve_stop = true; }

bool loopback(const std::string& bind) {
  return bind == "127.0.0.1" || bind == "::1" || bind.rfind("127.", 0) == 0;
}

} // namespace

int cmd_serve(const common_args& common, const serve_args& args) {
  std::optional<token_table> tokens;
  if (!args.tokens_file.empty()) {
    auto t = load_tokens(args.tokens_file);
    if (!t) {
      spdlog::error("--tokens: {}", t.message());
      return 2;
    }
    tokens = std::move(*t);
  } else if (!loopback(args.bind)) {
    spdlog::error("--bind {}: serving beyond loopback needs --tokens FILE (anyone who reaches the "
                  "port could run code on this pool)",
                  args.bind);
    return 2;
  }
  std::error_code ec;
  std::filesystem::create_directories(args.state_dir, ec);
  if (ec) {
    spdlog::error("--state {}: {}", args.state_dir, ec.message());
    return 2;
  }
  auto jr = journal::open((std::filesystem::path(args.state_dir) / "journal.sqlite").string());
  if (!jr) {
    spdlog::error("{}", jr.message());
    return 2;
  }
  auto set = load_tasks(args.suites);
  for (const auto& e : set.errors) spdlog::error("{}", e.message);
  if (!set.errors.empty()) return 2;
  auto cfg =
      make_pool_config(args.backend, args.cache_dir.empty() ? default_cache_dir() : args.cache_dir,
                       args.devices, args.compile_workers);
  if (!cfg) {
    spdlog::error("--backend: {}", cfg.message());
    return 2;
  }
  std::optional<compile_baselines> baselines;
  if (!args.baselines.empty()) {
    auto b = load_baselines(args.baselines);
    if (!b) {
      spdlog::error("--baselines: {}", b.message());
      return 2;
    }
    baselines = std::move(*b);
    warn_if_other_device(&*baselines, *cfg);
  }
  caf::actor_system_config sys_cfg;
  configure_actor_system(sys_cfg, {common.threads, "sharing", !args.remote.empty(),
                                   common.peer_heartbeat_ms, common.peer_timeout_ms});
  if (!args.tls_dir.empty())
    if (auto st = enable_tls(sys_cfg, args.tls_dir); !st) {
      spdlog::error("--{}", st.message());
      return 2;
    }
  register_rollout_messages(sys_cfg);
  caf::actor_system sys{sys_cfg};
  auto pool_actor = make_pool_actor(sys, *cfg, args.remote, !args.no_local);
  if (!pool_actor) {
    spdlog::error("{}", pool_actor.message());
    return 2;
  }
  pool_handle pool(sys, *pool_actor, cfg->backend);
  // Declared here, destroyed between the board and the actor system: the board's waiters answer
  // through the server's connections, so it outlives them; and its io thread (which asks the
  // pool for /metrics) holds CAF's logger until it ends, which the actor system waits for.
  std::unique_ptr<http_server> server;
  problem_importer problems(
      {args.import_references, args.state_dir, args.scale_batch, args.import_timeout_s});
  evaluator eval(pool, set.tasks, problems, baselines ? &*baselines : nullptr);
  job_board_options bo;
  bo.capacity = args.capacity;
  // Enough evaluations in flight to keep every device and compile worker busy.
  bo.workers = args.workers > 0 ? args.workers : 2 * (cfg->devices + cfg->compile_workers);
  bo.keep_results_s = args.keep_results_h * 3600;
  job_board board(bo, **jr, [&](const evaluation_request& r) { return eval.run(r); });
  auto recovered = board.recover();
  if (!recovered) {
    spdlog::error("{}", recovered.message());
    return 2;
  }
  if (*recovered > 0)
    spdlog::info("kiln serve: {} accepted evaluation{} from the journal run again", *recovered,
                 *recovered == 1 ? "" : "s");
  episode_options eo;
  eo.max_turns = args.max_turns;
  eo.max_sessions = args.max_sessions;
  eo.ttl_s = args.session_ttl_s;
  episodes eps(eo, board, eval, cfg->backend);
  service svc(board, eps, tokens ? &*tokens : nullptr, args.capacity,
              {to_string(cfg->backend), [&] { return pool.stats(); }});
  http_options ho;
  ho.bind = args.bind;
  ho.port = static_cast<uint16_t>(args.port);
  ho.max_body_bytes = static_cast<size_t>(args.max_request_mib * (1 << 20));
  auto started = http_server::start(
      ho, [&](http_request r, respond_fn done) { svc.route(std::move(r), done); },
      svc.websocket_routes());
  if (!started) {
    spdlog::error("{}", started.message());
    return 2;
  }
  server = std::move(*started);
  // One line on stdout that scripts can read the address from.
  std::printf("kiln serve: %s pool, %d device%s (%s), %zu served task%s, listening on "
              "http://%s:%u%s\n",
              to_string(cfg->backend), cfg->devices, cfg->devices == 1 ? "" : "s",
              cfg->device_name.c_str(), set.tasks.size(), set.tasks.size() == 1 ? "" : "s",
              args.bind.c_str(), static_cast<unsigned>(server->port()),
              tokens ? "" : " (no tokens: loopback only)");
  std::fflush(stdout);
  std::signal(SIGINT, on_serve_signal);
  std::signal(SIGTERM, on_serve_signal);
  while (!g_serve_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto c = board.counts();
  spdlog::info("kiln serve: stopping; {} completed, {} failed, {} pending and {} running kept in "
               "the journal",
               c.completed, c.failed, c.pending, c.processing);
  // Nothing is routed after the server stops, no reset answers after the episodes stop, and no
  // callback runs after the board stops: the objects those reach may then go, in any order.
  server->stop();
  eps.stop();
  board.stop();
  caf::anon_send_exit(pool.actor(), caf::exit_reason::user_shutdown);
  return 0;
}

} // namespace kiln
