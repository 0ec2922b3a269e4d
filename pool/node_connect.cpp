#include "pool/node_connect.hpp"

#include "actors/basp_guard.hpp"
#include "pool/device_pool.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#ifdef KILN_HAVE_TLS
#include <caf/openssl/manager.hpp>
#include <openssl/err.h>
#include <openssl/ssl.h>
#endif
#include <caf/scoped_actor.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <netdb.h>
#include <poll.h>
#include <random>
#include <set>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace kiln {

status describe_member(caf::actor_system& sys, pool_member& m, std::chrono::seconds timeout) {
  caf::scoped_actor self{sys};
  status result = ok();
  self->request(m.pool, timeout, stats_atom::value)
      .receive(
          [&](std::string& s) {
            auto j = nlohmann::json::parse(s, nullptr, false);
            if (!j.is_object() || !j.contains("devices") || !j["devices"].is_array()) {
              result = error{"pool " + m.name + ": its stats are not a pool's"};
              return;
            }
            m.backend = j.value("backend", std::string());
            m.device_name = j.value("device_name", std::string());
            m.devices = std::max<int>(1, static_cast<int>(j["devices"].size()));
          },
          [&](caf::error& e) { result = error{"pool " + m.name + ": " + sys.render(e)}; });
  return result;
}

namespace {

// CAF 0.17 connects with a blocking connect(): to a host whose link is cut that waits out the
// kernel's SYN retries (about two minutes). A non-blocking probe bounds it; empty when a TCP
// connection to host:port opened within `timeout`, else why not.
std::string probe_tcp(const std::string& host, uint16_t port, std::chrono::milliseconds timeout,
                      int* keep_fd = nullptr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    return std::string("cannot resolve: ") + gai_strerror(rc);
  std::string why = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = poll(&p, 1, static_cast<int>(timeout.count()));
      if (rc == 0) {
        why = "no answer within " + std::to_string(timeout.count()) + " ms";
        rc = -1;
      } else if (rc > 0) {
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        rc = err ? -1 : 0;
        if (err) why = std::strerror(err);
      } else {
        why = std::strerror(errno); // poll failed (EINTR included): not connected
      }
    } else if (rc != 0) {
      why = std::strerror(errno);
    }
    if (rc == 0 && keep_fd) {
      *keep_fd = fd;
      freeaddrinfo(res);
      return {};
    }
    close(fd);
    if (rc == 0) {
      freeaddrinfo(res);
      return {};
    }
  }
  freeaddrinfo(res);
  return why;
}

#ifdef KILN_HAVE_TLS
std::string ssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out += (out.empty() ? "" : "; ") + std::string(buf);
  }
  return out.empty() ? "handshake failed" : out;
}

// A whole mutual-TLS handshake with the process's own certificate (the files caf::openssl was
// configured with), on a non-blocking socket with a deadline; empty when it completed.
std::string probe_tls(caf::actor_system& sys, const std::string& host, uint16_t port,
                      std::chrono::milliseconds timeout) {
  int fd = -1;
  if (auto why = probe_tcp(host, port, timeout, &fd); !why.empty()) return why;
  const auto& cfg = sys.config();
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = nullptr;
  std::string why;
  if (!ctx || SSL_CTX_use_certificate_chain_file(ctx, cfg.openssl_certificate.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, cfg.openssl_key.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_load_verify_locations(ctx, cfg.openssl_cafile.c_str(), nullptr) != 1) {
    why = "this process's certificate: " + ssl_errors();
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int rc = SSL_connect(ssl);
      if (rc == 1) break;
      int err = SSL_get_error(ssl, rc);
      if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) {
        why = "TLS handshake: " + ssl_errors();
        break;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{fd, static_cast<short>(err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT), 0};
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) {
        why = "no TLS handshake within " + std::to_string(timeout.count()) + " ms";
        break;
      }
    }
    if (why.empty()) SSL_shutdown(ssl);
  }
  if (ssl) SSL_free(ssl);
  if (ctx) SSL_CTX_free(ctx);
  close(fd);
  return why;
}
#endif

// Over TLS when this actor system loaded caf::openssl (actors/actor_system_setup.hpp). Both ask
// the manager's actor with a timeout: the blocking remote_actor waits for the peer's handshake
// without one (a stopped process, or one that never answers TLS, still accepts connections).
caf::expected<caf::actor> connect_actor(caf::actor_system& sys, const std::string& host,
                                        uint16_t port, std::chrono::seconds timeout) {
  caf::io::middleman_actor manager = sys.middleman().actor_handle();
#ifdef KILN_HAVE_TLS
  if (sys.has_openssl_manager()) manager = sys.openssl_manager().actor_handle();
#endif
  caf::expected<caf::actor> result{caf::sec::cannot_connect_to_node};
  caf::scoped_actor self{sys};
  self->request(manager, timeout, caf::connect_atom::value, host, port)
      .receive(
          [&](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
            if (ptr)
              result = caf::actor_cast<caf::actor>(std::move(ptr));
            else
              result = caf::make_error(caf::sec::no_actor_published_at_port);
          },
          [&](caf::error& e) { result = std::move(e); });
  return result;
}

// A plaintext node's frames reach this process's middleman through a guard on loopback: CAF 0.17
// allocates whatever payload a BASP header claims, and a coordinator on an open network must not
// trust an address it was told to connect to more than a node trusts its peers. One guard per
// node address, reused by reconnects. They stop with the process's statics, after main returned
// (the actor systems, whose connections pass through them, are gone by then; spdlog, which their
// threads log to, was set up before the first of them and outlives them).
expected<basp_guard*> outbound_guard(const std::string& host, uint16_t port) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<basp_guard>> guards;
  std::lock_guard<std::mutex> lock(mu);
  const std::string key = host + ":" + std::to_string(port);
  if (auto it = guards.find(key); it != guards.end()) return it->second.get();
  basp_guard_options o;
  o.upstream_host = host;
  o.upstream_port = port;
  o.guard_upstream = true;
  o.max_per_host = o.max_connections; // the accepted side is this process
  auto g = std::make_unique<basp_guard>();
  if (auto st = g->start(o); !st) return st.err();
  return (guards[key] = std::move(g)).get();
}

} // namespace

expected<pool_member> connect_pool(caf::actor_system& sys, const std::string& host_port,
                                   std::chrono::seconds timeout) {
  auto colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == host_port.size())
    return error{"pool node '" + host_port + "': expected HOST:PORT"};
  std::string host = host_port.substr(0, colon);
  long port = 0;
  try {
    size_t used = 0;
    port = std::stol(host_port.substr(colon + 1), &used);
    if (used != host_port.size() - colon - 1) port = 0;
  } catch (...) {
    port = 0;
  }
  if (port < 1 || port > 65535) return error{"pool node '" + host_port + "': bad port"};
#ifdef KILN_HAVE_TLS
  if (sys.has_openssl_manager()) {
    if (auto why = probe_tls(sys, host, static_cast<uint16_t>(port), timeout); !why.empty())
      return error{"pool node " + host_port + ": cannot connect over TLS: " + why};
  } else
#endif
      if (auto why = probe_tcp(host, static_cast<uint16_t>(port), timeout); !why.empty())
    return error{"pool node " + host_port + ": cannot connect: " + why};
  std::string via_host = host;
  uint16_t via_port = static_cast<uint16_t>(port);
  basp_guard* guard = nullptr;
  if (!sys.has_openssl_manager()) {
    auto g = outbound_guard(host, static_cast<uint16_t>(port));
    if (!g) return error{"pool node " + host_port + ": " + g.message()};
    guard = *g;
    via_host = "127.0.0.1";
    via_port = guard->port();
  }
  expected<caf::actor> a = error{"not connected"};
  // A lossy link can stall the BASP handshake past the middleman's connection timeout (a lost
  // segment waits out TCP's retransmission timer): a timed-out handshake is tried again while the
  // step's time lasts. A refusal is final at once.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int attempt = 1;; ++attempt) {
    if (guard) { // the node's handshake held before the middleman connects: no tick can beat it
      auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (auto st = guard->prepare(std::max(wait, std::chrono::milliseconds(100))); !st)
        return error{"pool node " + host_port + ": cannot connect: " + st.message()};
    }
    auto left = std::chrono::duration_cast<std::chrono::seconds>(
        deadline - std::chrono::steady_clock::now() + std::chrono::milliseconds(999));
    auto r = connect_actor(sys, via_host, via_port, std::max(left, std::chrono::seconds(1)));
    if (r) {
      a = *r;
      break;
    }
    a = error{sys.render(r.error())};
    bool timed_out =
        r.error() == caf::sec::connection_timeout || r.error() == caf::sec::request_timeout;
    if (!timed_out || std::chrono::steady_clock::now() + std::chrono::milliseconds(500) > deadline)
      break;
    spdlog::warn("pool node {}: handshake attempt {} timed out ({}): trying again", host_port,
                 attempt, a.message());
    // A random pause: attempts a fixed interval apart can fall in step with the middleman's
    // heartbeat tick and meet the same timing on every try.
    static thread_local std::mt19937 jitter{std::random_device{}()};
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(100, 700)(jitter)));
  }
  if (!a)
    return error{"pool node " + host_port + ": cannot connect" +
                 (sys.has_openssl_manager() ? " over TLS: " : ": ") + a.message()};
  pool_member m;
  m.pool = *a;
  m.name = host_port;
  if (auto st = describe_member(sys, m, timeout); !st) return st.err();
  return m;
}

} // namespace kiln
