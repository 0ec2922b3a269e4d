#include "actors/actor_system_setup.hpp"

#include <caf/atom.hpp>
#include <caf/io/middleman.hpp>
#ifdef KILN_HAVE_TLS
#include <caf/openssl/manager.hpp>
#endif
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

namespace kiln {

int configure_actor_system(caf::actor_system_config& cfg, const actor_settings& s) {
  int threads = s.threads > 0 ? s.threads
                              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cfg.set("scheduler.max-threads", static_cast<size_t>(threads));
  cfg.set("scheduler.policy",
          s.policy == "stealing" ? caf::atom("stealing") : caf::atom("sharing"));
  cfg.set("logger.console", caf::atom("none"));
  if (s.middleman) {
    cfg.load<caf::io::middleman>();
    using ms = std::chrono::milliseconds;
    cfg.set("middleman.heartbeat-interval", caf::timespan{ms{std::max(0, s.peer_heartbeat_ms)}});
    cfg.set("middleman.connection-timeout", caf::timespan{ms{std::max(0, s.peer_timeout_ms)}});
  }
  return threads;
}

status enable_tls(caf::actor_system_config& cfg, const std::string& dir) {
#ifdef KILN_HAVE_TLS
  namespace fs = std::filesystem;
  std::string files[3];
  const char* names[3] = {"cert.pem", "key.pem", "ca.pem"};
  for (int i = 0; i < 3; ++i) {
    files[i] = (fs::path(dir) / names[i]).string();
    if (!fs::is_regular_file(files[i]))
      return error{"tls: " + files[i] +
                   " is missing (a TLS directory holds cert.pem, key.pem and "
                   "ca.pem)"};
  }
  cfg.openssl_certificate = files[0];
  cfg.openssl_key = files[1];
  cfg.openssl_cafile = files[2];
  cfg.load<caf::openssl::manager>();
  return ok();
#else
  (void)cfg;
  return error{"tls " + dir +
               ": this build has no TLS (caf_openssl or OpenSSL's headers were "
               "missing at configure time)"};
#endif
}

} // namespace kiln
