#include "channels/channel_guard.hpp"

#include "channels/curve_keys.hpp"

#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>
#include <spdlog/spdlog.h>
#include <thread>
#include <vector>
#include <zmq.hpp>

namespace kiln {

bool is_loopback_endpoint(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0) return true;
  if (endpoint.rfind("tcp://", 0) != 0) return false;
  std::string host = endpoint.substr(6);
  // tcp://[::1]:PORT, tcp://HOST:PORT; a connect may name its source (SRC;HOST:PORT): the
  // destination decides where the bytes go.
  if (auto semi = host.find(';'); semi != std::string::npos) host = host.substr(semi + 1);
  if (!host.empty() && host[0] == '[') {
    auto close = host.find(']');
    return close != std::string::npos && host.substr(1, close - 1) == "::1";
  }
  host = host.substr(0, host.rfind(':'));
  if (host == "localhost") return true;
  in_addr a{};
  return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

namespace {

using clock_type = std::chrono::steady_clock;

} // namespace

// Named, not anonymous: impl holds these and has external linkage (a unity build,
// which includes this file into another, warns of that).
namespace channel_guard_parts {

struct watched {
  std::unique_ptr<zmq::socket_t> events; // PAIR connected to the socket's monitor
  std::string endpoint;
  bool bind = false;
};

// At most one line a second; the lines in between are counted into the next one.
struct log_limiter {
  clock_type::time_point last{};
  int64_t suppressed = 0;
  bool allow() {
    auto now = clock_type::now();
    if (now - last < std::chrono::seconds(1)) {
      ++suppressed;
      return false;
    }
    last = now;
    return true;
  }
  std::string tail() {
    std::string t =
        suppressed ? " (" + std::to_string(suppressed) + " more since the last line)" : "";
    suppressed = 0;
    return t;
  }
};

} // namespace channel_guard_parts
using channel_guard_parts::log_limiter;
using channel_guard_parts::watched;

namespace {

std::string frame_text(const zmq::message_t& m) { return std::string(m.data<char>(), m.size()); }

} // namespace

struct channel_guard::impl {
  zmq::context_t* ctx = nullptr;
  curve_config cfg;
  std::string owner;
  curve_keypair self;
  std::string server_key;
  std::set<std::string> authorized;
  std::unique_ptr<zmq::socket_t> zap; // ROUTER on inproc://zeromq.zap.01: ZAP requests
  std::mutex mu;                      // guards `incoming`
  std::vector<watched> incoming;      // handed to the thread, which owns them from then on
  std::vector<watched> monitors;      // the thread's own
  int next_monitor = 0;
  std::atomic<int64_t> accepted{0}, refused_key{0}, failed{0}, refused_by_server{0};
  log_limiter refusal_log, failure_log;
  std::atomic<bool> stop{false};
  std::thread thread; // started with the ZAP handler, or by the first socket watched
  status set_curve(zmq::socket_t& s, const std::string& endpoint, bool bind);

  void serve_zap() {
    std::vector<zmq::message_t> f;
    do {
      zmq::message_t m;
      if (!zap->recv(m, zmq::recv_flags::dontwait)) return;
      f.push_back(std::move(m));
    } while (f.back().more());
    // [routing id][empty]["1.0"][request id][domain][address][routing id][mechanism][creds...]
    if (f.size() < 8) return;
    std::string mechanism = frame_text(f[7]), address = frame_text(f[5]);
    std::string code = "400", text = "unknown key", user;
    if (mechanism == "CURVE" && f.size() >= 9 && f[8].size() == 32) {
      char z85[41];
      zmq_z85_encode(z85, f[8].data<uint8_t>(), 32);
      user = z85;
      if (authorized.count(user)) code = "200", text = "OK";
    } else if (mechanism == "NULL") { // a plaintext socket the config allowed
      code = "200", text = "OK";
    }
    if (code != "200") {
      ++refused_key;
      if (refusal_log.allow())
        spdlog::warn("{}: refused a peer at {}: its {} key {} is not in curve.authorized{}", owner,
                     address, mechanism, user.empty() ? "(none)" : user, refusal_log.tail());
    }
    std::vector<std::string> reply = {
        frame_text(f[0]), "", "1.0", frame_text(f[3]), code, text, code == "200" ? user : "", ""};
    for (size_t i = 0; i < reply.size(); ++i)
      zap->send(zmq::buffer(reply[i]),
                i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }

  void read_event(watched& w) {
    zmq::message_t head, where;
    if (!w.events->recv(head, zmq::recv_flags::dontwait)) return;
    if (head.more()) (void)w.events->recv(where);
    if (where.size() > 0) w.endpoint = where.to_string(); // the bound address, not "tcp://...:*"
    if (head.size() < 6) return;
    uint16_t event;
    uint32_t value;
    std::memcpy(&event, head.data(), 2);
    std::memcpy(&value, static_cast<const char*>(head.data()) + 2, 4);
    if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      if (w.bind) ++accepted;
      return;
    }
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
      if (w.bind) return; // counted and logged by the ZAP handler, which knows the peer
      ++refused_by_server;
      if (refusal_log.allow())
        spdlog::error("{}: the server at {} refused this process's key {} (status {}): add its "
                      ".pub file to the server's curve.authorized{}",
                      owner, w.endpoint, self.public_key, value, refusal_log.tail());
      return;
    }
    if (event != ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
        event != ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
      return;
    if (w.bind) {
      ++failed;
      if (failure_log.allow())
        spdlog::warn("{}: a peer failed the handshake on {} (plaintext against CURVE or the "
                     "reverse, a wrong server key, or junk; protocol code {:#x}){}",
                     owner, w.endpoint, value, failure_log.tail());
      return;
    }
    // Our own connect: the server speaks another mechanism or holds another key; retrying the
    // same connection cannot succeed, so it counts as a refusal.
    ++refused_by_server;
    if (failure_log.allow())
      spdlog::error(
          "{}: the handshake with {} failed (protocol code {:#x}): {}{}", owner, w.endpoint, value,
          cfg.enabled() ? "a wrong curve.server_key, or a server without CURVE"
                        : "the server wants CURVE ([curve] keys) and this process has none",
          failure_log.tail());
  }

  void run() {
    while (!stop) {
      {
        std::lock_guard<std::mutex> lock(mu);
        for (auto& w : incoming) monitors.push_back(std::move(w));
        incoming.clear();
      }
      std::vector<zmq::pollitem_t> items;
      if (zap) items.push_back({zap->handle(), 0, ZMQ_POLLIN, 0});
      for (auto& w : monitors) items.push_back({w.events->handle(), 0, ZMQ_POLLIN, 0});
      try {
        if (zmq::poll(items.data(), items.size(), std::chrono::milliseconds(100)) <= 0) continue;
        size_t i = 0;
        if (zap && (items[i++].revents & ZMQ_POLLIN)) serve_zap();
        for (auto& w : monitors)
          if (items[i++].revents & ZMQ_POLLIN) read_event(w);
      } catch (const zmq::error_t& e) {
        if (e.num() == ETERM) break;
        spdlog::warn("{}: channel guard: {}", owner, e.what());
      }
    }
  }
};

channel_guard::channel_guard(std::unique_ptr<impl> p) : p_(std::move(p)) {}

channel_guard::~channel_guard() {
  p_->stop = true;
  if (p_->thread.joinable()) p_->thread.join();
  for (auto* v : {&p_->monitors, &p_->incoming})
    for (auto& w : *v) w.events->set(zmq::sockopt::linger, 0);
}

expected<std::unique_ptr<channel_guard>>
channel_guard::create(zmq::context_t& ctx, const curve_config& cfg, const std::string& owner) {
  auto p = std::make_unique<impl>();
  p->ctx = &ctx;
  p->cfg = cfg;
  p->owner = owner;
  if (cfg.enabled()) {
    auto self = read_secret_key(cfg.secret_key);
    if (!self) return error{"key 'curve.secret_key': " + self.message()};
    p->self = *self;
    if (!cfg.server_key.empty()) {
      auto k = read_public_key(cfg.server_key);
      if (!k) return error{"key 'curve.server_key': " + k.message()};
      p->server_key = *k;
    }
    if (!cfg.authorized.empty()) {
      auto keys = read_authorized_keys(cfg.authorized);
      if (!keys) return error{"key 'curve.authorized': " + keys.message()};
      p->authorized.insert(keys->begin(), keys->end());
      try { // bound before any server socket: a CURVE server with no ZAP handler admits anyone
        p->zap = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::router);
        p->zap->set(zmq::sockopt::linger, 0);
        p->zap->bind("inproc://zeromq.zap.01");
      } catch (const zmq::error_t& e) {
        return error{owner + ": cannot start the ZAP handler: " + e.what()};
      }
    }
  } else if (!cfg.server_key.empty() || !cfg.authorized.empty()) {
    return error{"key 'curve.secret_key': needed with curve.server_key or curve.authorized"};
  }
  auto* raw = p.get();
  std::unique_ptr<channel_guard> g(new channel_guard(std::move(p)));
  if (raw->zap) raw->thread = std::thread([raw] { raw->run(); });
  return g;
}

status channel_guard::secure(zmq::socket_t& s, const std::string& endpoint, bool bind) {
  auto& p = *p_;
  if (!p.cfg.enabled() && !is_loopback_endpoint(endpoint) && !p.cfg.allow_plaintext)
    return error{endpoint + " would carry plaintext off this host: set the [curve] keys (make "
                            "them with `kiln keys`), or curve.allow_plaintext = true on a "
                            "trusted network"};
  try {
    if (p.cfg.enabled())
      if (auto st = p.set_curve(s, endpoint, bind); !st) return st;
    std::string monitor = "inproc://kiln-guard-" + std::to_string(reinterpret_cast<uintptr_t>(&p)) +
                          "-" + std::to_string(p.next_monitor++);
    constexpr int events = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                           ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                           ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    if (zmq_socket_monitor(s.handle(), monitor.c_str(), events) != 0)
      return error{endpoint + ": cannot monitor the socket: " + zmq_strerror(zmq_errno())};
    watched w;
    w.events = std::make_unique<zmq::socket_t>(*p.ctx, zmq::socket_type::pair);
    w.events->connect(monitor);
    w.endpoint = endpoint;
    w.bind = bind;
    std::lock_guard<std::mutex> lock(p.mu);
    p.incoming.push_back(std::move(w));
    if (!p.thread.joinable()) p.thread = std::thread([&p] { p.run(); });
  } catch (const zmq::error_t& e) {
    return error{endpoint + ": CURVE options: " + e.what()};
  }
  return ok();
}

// The CURVE options of one socket: a server (bind) admitted through the ZAP handler, or a client
// (connect) that insists on the server's key.
status channel_guard::impl::set_curve(zmq::socket_t& s, const std::string& endpoint, bool bind) {
  s.set(zmq::sockopt::curve_secretkey, self.secret_key);
  s.set(zmq::sockopt::curve_publickey, self.public_key);
  if (bind) {
    if (!zap)
      return error{"key 'curve.authorized': needed to bind " + endpoint +
                   " (the public keys that may connect)"};
    s.set(zmq::sockopt::curve_server, true);
    s.set(zmq::sockopt::zap_domain, "kiln");
  } else {
    if (server_key.empty())
      return error{"key 'curve.server_key': needed to connect to " + endpoint +
                   " (the server's public key)"};
    s.set(zmq::sockopt::curve_serverkey, server_key);
  }
  return ok();
}

bool channel_guard::curve() const { return p_->cfg.enabled(); }

channel_counters channel_guard::counters() const {
  return {p_->accepted, p_->refused_key, p_->failed, p_->refused_by_server};
}

std::string channel_guard::summary() const {
  auto c = counters();
  return std::string(curve() ? "curve" : "plaintext") + ": " + std::to_string(c.accepted) +
         " accepted, " + std::to_string(c.refused_key) + " refused (unknown key), " +
         std::to_string(c.failed_handshakes) + " failed handshakes, " +
         std::to_string(c.refused_by_server) + " refused by a server";
}

} // namespace kiln
