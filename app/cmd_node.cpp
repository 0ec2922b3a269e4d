// kiln node: this machine's pool (compile workers, device actors, sandboxed executors) published
// over CAF's middleman, so that `kiln run` and `kiln eval` on other machines spread their jobs
// over it ([pool] remote / --remote). It serves until Ctrl-C or SIGTERM, with a stats line now and
// then. CAF's BASP has no authentication: bind to loopback (the default) or a trusted network.
//   kiln run --(evaluate job, program)--> middleman ==> this node's pool --> outcome back
#include "actors/actor_system_setup.hpp"
#include "actors/basp_guard.hpp"
#include "app/bench_probes.hpp"
#include "app/commands.hpp"
#include "app/eval_runner.hpp"
#include "pool/device_pool.hpp"

#include <atomic>
#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#ifdef KILN_HAVE_TLS
#include <caf/openssl/publish.hpp>
#endif
#include <caf/scoped_actor.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <thread>

namespace kiln {

namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_stop_signal(int) { g_stop = true; }

// "12 requests, 11 correct 1 wrong; busy 87%"
std::string stats_line(const std::string& json) {
  auto j = nlohmann::json::parse(json, nullptr, false);
  if (!j.is_object()) return "stats unavailable";
  std::string out = std::to_string(j.value("requests", int64_t{0})) + " requests";
  if (j.contains("outcomes") && j["outcomes"].is_object()) {
    std::string kinds;
    for (auto& [k, v] : j["outcomes"].items())
      kinds += (kinds.empty() ? "" : " ") + std::to_string(v.get<int64_t>()) + " " + k;
    if (!kinds.empty()) out += ", " + kinds;
  }
  if (j.contains("devices") && j["devices"].is_array() && !j["devices"].empty()) {
    double busy = 0;
    for (const auto& d : j["devices"]) busy += d.value("busy_share", 0.0);
    char buf[48];
    std::snprintf(buf, sizeof buf, "; busy %.0f%%", 100 * busy / j["devices"].size());
    out += buf;
  }
  return out;
}

std::string ask_stats(caf::actor_system& sys, const caf::actor& pool) {
  caf::scoped_actor self{sys};
  std::string out;
  self->request(pool, std::chrono::seconds(10), stats_atom::value)
      .receive([&](std::string& s) { out = std::move(s); }, [&](caf::error&) {});
  return out;
}

// Over mutual TLS when the actor system loaded caf::openssl (enable_tls), plain BASP otherwise.
caf::expected<uint16_t> publish_pool(caf::actor_system& sys, const caf::actor& pool, uint16_t port,
                                     const std::string& bind, bool tls) {
#ifdef KILN_HAVE_TLS
  if (tls) return caf::openssl::publish(pool, port, bind.c_str(), true);
#else
  (void)tls;
#endif
  return sys.middleman().publish(pool, port, bind.c_str(), true);
}

} // namespace

int cmd_node(const common_args& common, const node_args& args) {
  int threads = configure_threads(common.threads);
  // --backend null: a pool that answers at once (app/bench_probes.hpp), for `kiln bench router`.
  const bool null_backend = args.backend == "null";
  auto cfg = null_backend
                 ? expected<pool_config>(pool_config{})
                 : make_pool_config(args.backend,
                                    args.cache_dir.empty() ? default_cache_dir() : args.cache_dir,
                                    args.devices, args.compile_workers, args.first_device);
  if (!cfg) {
    spdlog::error("kiln node: {}", cfg.message());
    return 2;
  }
  if (null_backend) {
    cfg->devices = std::max(1, args.devices);
    cfg->device_name = "null";
  }
  caf::actor_system_config sc;
  configure_actor_system(
      sc, {threads, "sharing", true, common.peer_heartbeat_ms, common.peer_timeout_ms});
  const bool tls = !args.tls_dir.empty();
  if (tls)
    if (auto st = enable_tls(sc, args.tls_dir); !st) {
      spdlog::error("kiln node: --{}", st.message());
      return 2;
    }
  caf::actor_system sys{sc};
  auto pool = null_backend ? sys.spawn(null_node_pool, cfg->devices) : spawn_device_pool(sys, *cfg);
  // Plaintext: the middleman listens on loopback only, behind the frame guard on the public
  // address (actors/basp_guard.hpp). TLS: the handshake comes first, so CAF listens itself.
  auto port = tls ? publish_pool(sys, pool, static_cast<uint16_t>(args.port), args.bind, tls)
                  : publish_pool(sys, pool, 0, "127.0.0.1", false);
  if (!port) {
    spdlog::error("kiln node: cannot listen on {}:{}: {}", tls ? args.bind : "127.0.0.1",
                  tls ? args.port : 0, sys.render(port.error()));
    caf::anon_send_exit(pool, caf::exit_reason::user_shutdown);
    return 2;
  }
  basp_guard guard;
  uint16_t public_port = *port;
  if (!tls) {
    basp_guard_options go;
    go.bind = args.bind;
    go.port = static_cast<uint16_t>(args.port);
    go.upstream_port = *port;
    go.max_payload = static_cast<uint32_t>(args.max_frame_mib) << 20;
    go.max_connections = args.max_peers;
    go.max_per_host = args.max_peers_per_host;
    if (auto st = guard.start(go); !st) {
      spdlog::error("kiln node: {}", st.message());
      caf::anon_send_exit(pool, caf::exit_reason::user_shutdown);
      return 2;
    }
    public_port = guard.port();
  }
  if (!tls && args.bind != "127.0.0.1" && args.bind != "localhost" && args.bind != "::1")
    spdlog::warn("kiln node: listening on {} without --tls: CAF's protocol has no authentication, "
                 "so anyone who reaches this port can run jobs here",
                 args.bind);
  // One line on stdout that scripts can read the address from.
  std::printf("kiln node: %s pool, %d device%s (%s), published at %s:%u%s\n",
              null_backend ? "null" : to_string(cfg->backend), cfg->devices,
              cfg->devices == 1 ? "" : "s", cfg->device_name.c_str(), args.bind.c_str(),
              static_cast<unsigned>(public_port), tls ? " (mutual TLS)" : "");
  std::fflush(stdout);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  auto last = std::chrono::steady_clock::now();
  while (!g_stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (args.stats_s > 0 &&
        std::chrono::steady_clock::now() - last > std::chrono::duration<double>(args.stats_s)) {
      last = std::chrono::steady_clock::now();
      spdlog::info("kiln node: {}", stats_line(ask_stats(sys, pool)));
    }
  }
  // CAF 0.17.6's caf::openssl::unpublish does not compile: a TLS node's listener closes with the
  // actor system instead.
  std::string guarded;
  if (!tls) {
    guard.stop();
    (void)sys.middleman().unpublish(pool, *port);
    auto g = guard.stats();
    guarded = "; peers " + std::to_string(g.accepted) + " accepted, " + std::to_string(g.refused) +
              " refused (full), " + std::to_string(g.refused_host) +
              " refused (one address's share), " + std::to_string(g.oversize) +
              " oversize frames, " + std::to_string(g.over_budget) + " over the budget, " +
              std::to_string(g.too_slow) + " too slow to complete a frame";
  }
  std::printf("kiln node: stopped; %s%s\n", stats_line(ask_stats(sys, pool)).c_str(),
              guarded.c_str());
  std::fflush(stdout);
  caf::anon_send_exit(pool, caf::exit_reason::user_shutdown);
  return 0;
}

} // namespace kiln
