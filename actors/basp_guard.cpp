#include "actors/basp_guard.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <unordered_map>
#include <vector>

namespace kiln {

uint32_t basp_payload_len(const unsigned char* h) {
  return (uint32_t{h[4]} << 24) | (uint32_t{h[5]} << 16) | (uint32_t{h[6]} << 8) | uint32_t{h[7]};
}

namespace {

using clock_type = std::chrono::steady_clock;
constexpr std::size_t pending_cap = std::size_t{1} << 20; // stop reading a side past this

} // namespace

// Named, not anonymous: impl holds these and has external linkage (a unity build,
// which includes this file into another, warns of that).
namespace basp_guard_parts {

struct conn {
  int peer = -1, up = -1;
  std::string name;             // the peer's address, for logs
  std::string host;             // the peer's address without the port: its share of the slots
  std::string to_up, to_peer;   // bytes not yet written
  std::string frame;            // the peer's frame being received (header, then payload)
  uint64_t frame_size = 0;      // header + payload once the header is whole; 0 before
  bool first_frame = false;     // a whole frame arrived (the peer's handshake)
  clock_type::time_point since; // accepted, or when the frame being received began
};

} // namespace basp_guard_parts
using basp_guard_parts::conn;

namespace {

std::string peer_host(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, host, sizeof host);
  else if (a.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, host, sizeof host);
  return host;
}

std::string peer_name(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &v4.sin_addr, host, sizeof host);
    port = ntohs(v4.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &v6.sin6_addr, host, sizeof host);
    port = ntohs(v6.sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

} // namespace

struct basp_guard::impl {
  basp_guard_options opts;
  sockaddr_storage upstream{};
  socklen_t upstream_len = 0;
  std::string upstream_name; // host:port, for logs
  int listen_fd = -1, epoll_fd = -1, wake_fd = -1;
  std::unordered_map<int, std::shared_ptr<conn>> by_fd;
  std::unordered_map<std::string, int> per_host; // open connections per peer address
  std::vector<std::shared_ptr<conn>> conns;
  mutable std::mutex stats_mu;
  basp_guard_stats st;
  uint64_t held = 0; // payload bytes promised by the headers of partial frames
  clock_type::time_point accept_paused_until;
  std::atomic<bool> stopping{false};
  // Outbound: an upstream dialed ahead of the middleman's connect, whose first frame (the node's
  // handshake) is already held, so the middleman gets it the moment it connects.
  std::mutex prep_mu;
  std::condition_variable prep_cv;
  bool prep_wanted = false; // prepare() asks; the relay thread dials
  int prep_state = 0;       // 0 none, 1 dialing, 2 ready, -1 failed
  std::shared_ptr<conn> prepared;

  void count(int64_t basp_guard_stats::*field) {
    std::lock_guard<std::mutex> g(stats_mu);
    ++(st.*field);
  }

  void watch(int fd, bool in, bool out, bool add) {
    epoll_event ev{};
    ev.events = (in ? EPOLLIN : 0u) | (out ? EPOLLOUT : 0u) | EPOLLRDHUP;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd, add ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev);
  }

  // Reads each fd while the other side's pending bytes are under the cap; asks to write where
  // bytes wait.
  void rearm(conn& c) {
    if (c.peer >= 0) watch(c.peer, c.to_up.size() < pending_cap, !c.to_peer.empty(), false);
    watch(c.up, c.to_peer.size() < pending_cap, !c.to_up.empty(), false);
  }

  void set_prep_state(int state) {
    std::lock_guard<std::mutex> g(prep_mu);
    prep_state = state;
    prep_cv.notify_all();
  }

  // A non-blocking connect to the upstream: the socket, or -1 (counted) when it cannot start.
  int dial_upstream() {
    int up = socket(upstream.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (up >= 0 && (connect(up, reinterpret_cast<sockaddr*>(&upstream), upstream_len) == 0 ||
                    errno == EINPROGRESS))
      return up;
    if (up >= 0) ::close(up);
    count(&basp_guard_stats::upstream);
    return -1;
  }

  // Dials the upstream with no peer yet (prepare()); serve() marks it ready once its first frame
  // is whole.
  void dial_prepared() {
    if (prepared) { // a stale one (the node may have dropped it): replaced, not reported
      auto stale = prepared;
      prepared.reset();
      close_conn(stale);
    }
    int up = dial_upstream();
    if (up < 0) return set_prep_state(-1);
    auto c = std::make_shared<conn>();
    c->up = up;
    c->name = upstream_name;
    c->since = clock_type::now();
    conns.push_back(c);
    by_fd[up] = c;
    watch(up, true, false, true);
    prepared = c;
  }

  void close_conn(const std::shared_ptr<conn> c) { // by value: callers pass map entries
    if (c->frame_size > 0) held -= c->frame_size - basp_header_size;
    c->frame_size = 0;
    for (int fd : {c->peer, c->up})
      if (fd >= 0) {
        epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
        by_fd.erase(fd);
        ::close(fd);
      }
    c->peer = c->up = -1;
    if (auto it = per_host.find(c->host);
        !c->host.empty() && it != per_host.end() && --it->second <= 0)
      per_host.erase(it);
    if (c == prepared) {
      prepared.reset();
      set_prep_state(-1);
    }
    conns.erase(std::remove(conns.begin(), conns.end(), c), conns.end());
  }

  // Takes the guarded side's bytes: whole frames go to `out`, a partial one waits in c.frame.
  // False (counted, logged) when a header claims too much or the held bytes would pass the budget.
  bool take(conn& c, const char* p, std::size_t n, std::string& out) {
    while (n > 0) {
      if (c.frame.empty()) c.since = clock_type::now();
      if (c.frame_size == 0) { // the header
        std::size_t k = std::min(n, basp_header_size - c.frame.size());
        c.frame.append(p, k);
        p += k;
        n -= k;
        if (c.frame.size() < basp_header_size) break;
        uint32_t len = basp_payload_len(reinterpret_cast<const unsigned char*>(c.frame.data()));
        uint32_t limit = c.first_frame ? opts.max_payload : opts.max_first_payload;
        if (len > limit) {
          spdlog::warn("basp guard: {} sent a frame claiming {} bytes (limit {}): closed", c.name,
                       len, limit);
          count(&basp_guard_stats::oversize);
          return false;
        }
        if (held + len > opts.budget_bytes) {
          spdlog::warn("basp guard: {}'s frame of {} bytes would pass the {} bytes held for all "
                       "peers: closed",
                       c.name, len, opts.budget_bytes);
          count(&basp_guard_stats::over_budget);
          return false;
        }
        c.frame_size = basp_header_size + len;
        held += len;
      }
      std::size_t k = std::min<std::size_t>(n, c.frame_size - c.frame.size());
      c.frame.append(p, k);
      p += k;
      n -= k;
      if (c.frame.size() == c.frame_size) {
        held -= c.frame_size - basp_header_size;
        out += c.frame;
        c.frame.clear();
        c.frame_size = 0;
        c.first_frame = true;
      }
    }
    return true;
  }

  // Writes what waits for fd; false when the connection broke.
  static bool flush(int fd, std::string& pending) {
    while (!pending.empty()) {
      ssize_t w = ::send(fd, pending.data(), pending.size(), MSG_NOSIGNAL);
      if (w < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      pending.erase(0, static_cast<std::size_t>(w));
    }
    return true;
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage addr{};
      socklen_t len = sizeof addr;
      int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // out of descriptors: the listener stays readable, so stop watching it a moment
          spdlog::warn("basp guard: cannot accept ({}): pausing 100 ms", std::strerror(errno));
          watch(listen_fd, false, false, false);
          accept_paused_until = clock_type::now() + std::chrono::milliseconds(100);
        }
        return;
      }
      if (static_cast<int>(conns.size()) >= opts.max_connections) {
        count(&basp_guard_stats::refused); // before the close a test (or a peer) can see
        ::close(fd);
        continue;
      }
      std::string host = peer_host(addr);
      if (auto it = per_host.find(host); it != per_host.end() && it->second >= opts.max_per_host) {
        count(&basp_guard_stats::refused_host);
        ::close(fd);
        continue;
      }
      if (prepared && prepared->first_frame) { // its handshake is held: the middleman gets it now
        auto c = prepared;
        prepared.reset();
        attach_peer(c, fd, host);
        if (!flush(fd, c->to_peer)) {
          close_conn(c);
          continue;
        }
        rearm(*c);
        set_prep_state(0);
        continue;
      }
      int up = dial_upstream();
      if (up < 0) {
        ::close(fd);
        continue;
      }
      auto c = std::make_shared<conn>();
      c->up = up;
      c->name = opts.guard_upstream ? upstream_name : peer_name(addr);
      c->since = clock_type::now();
      conns.push_back(c);
      by_fd[up] = c;
      watch(up, true, false, true);
      attach_peer(c, fd, host);
    }
  }

  // An accepted peer joins c (fresh, or the prepared upstream): counted against its address.
  void attach_peer(const std::shared_ptr<conn>& c, int fd, const std::string& host) {
    c->peer = fd;
    c->host = host;
    ++per_host[host];
    by_fd[fd] = c;
    watch(fd, true, false, true);
    count(&basp_guard_stats::accepted);
  }

  // One readiness event on fd (either side of c).
  void serve(const std::shared_ptr<conn>& c, int fd, uint32_t events) {
    const bool from_peer = fd == c->peer;
    const bool from_guarded = from_peer != opts.guard_upstream;
    std::string& out = from_peer ? c->to_up : c->to_peer;
    const int other = from_peer ? c->up : c->peer;
    if (events & EPOLLOUT) {
      if (!flush(fd, from_peer ? c->to_peer : c->to_up)) return close_conn(c);
    }
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
      unsigned char buf[65536];
      ssize_t r = ::recv(fd, buf, sizeof buf, 0);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        if (!from_peer && r < 0) count(&basp_guard_stats::upstream);
        if (other >= 0) (void)flush(other, out); // the last bytes, best effort
        return close_conn(c);
      }
      if (r > 0) {
        const char* bytes = reinterpret_cast<const char*>(buf);
        if (!from_guarded)
          out.append(bytes, static_cast<std::size_t>(r));
        else if (!take(*c, bytes, static_cast<std::size_t>(r), out))
          return close_conn(c);
        if (other >= 0 && !flush(other, out)) return close_conn(c);
        if (c == prepared && c->first_frame) set_prep_state(2);
      }
    }
    rearm(*c);
  }

  // A peer gets handshake_ms for its first frame, frame_ms for each later one once it began.
  void expire_slow() {
    const auto now = clock_type::now();
    std::vector<std::shared_ptr<conn>> slow;
    for (const auto& c : conns) {
      int limit = c->first_frame ? opts.frame_ms : opts.handshake_ms;
      bool waiting = !c->first_frame || !c->frame.empty();
      if (waiting && now - c->since > std::chrono::milliseconds(limit)) slow.push_back(c);
    }
    for (const auto& c : slow) {
      spdlog::warn("basp guard: {} did not complete a frame within {} ms: closed", c->name,
                   c->first_frame ? opts.frame_ms : opts.handshake_ms);
      count(&basp_guard_stats::too_slow);
      close_conn(c);
    }
    if (accept_paused_until != clock_type::time_point{} && now >= accept_paused_until) {
      accept_paused_until = {};
      watch(listen_fd, true, false, false);
    }
  }

  void run() {
    epoll_event events[64];
    while (!stopping) {
      int n = epoll_wait(epoll_fd, events, 64, 200);
      for (int i = 0; i < n; ++i) {
        int fd = events[i].data.fd;
        if (fd == wake_fd) {
          uint64_t drained = 0;
          (void)!::read(wake_fd, &drained, sizeof drained);
          bool want = false;
          {
            std::lock_guard<std::mutex> g(prep_mu);
            std::swap(want, prep_wanted);
          }
          if (want) dial_prepared();
          continue;
        }
        if (fd == listen_fd) {
          accept_all();
          continue;
        }
        auto it = by_fd.find(fd);
        if (it == by_fd.end()) continue; // closed by an earlier event of this batch
        auto c = it->second;             // a copy: serve may erase the map entry
        serve(c, fd, events[i].events);
      }
      expire_slow();
    }
    while (!conns.empty()) close_conn(conns.back());
  }
};

namespace {

// host:port as addresses getaddrinfo accepts (numeric port); the error names them.
expected<std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>> resolve(const std::string& host,
                                                                     uint16_t port, int flags) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res))
    return error{"basp guard: cannot resolve " + host + ":" + std::to_string(port) + ": " +
                 gai_strerror(rc)};
  return std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>(res, &freeaddrinfo);
}

} // namespace

basp_guard::basp_guard() = default;
basp_guard::~basp_guard() { stop(); }

status basp_guard::start(const basp_guard_options& opts) {
  stop(); // a second start replaces the first
  impl_ = std::make_unique<impl>();
  impl_->opts = opts;
  const std::string where = opts.bind + ":" + std::to_string(opts.port);
  auto res = resolve(opts.bind, opts.port, AI_PASSIVE);
  if (!res) return res.err();
  const addrinfo* a = res->get();
  int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
    std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return error{"cannot listen on " + where + ": " + why};
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(bound).sin6_port
                                            : reinterpret_cast<sockaddr_in&>(bound).sin_port);
  auto up = resolve(opts.upstream_host, opts.upstream_port, 0);
  if (!up) {
    ::close(fd);
    return up.err();
  }
  std::memcpy(&impl_->upstream, (*up)->ai_addr, (*up)->ai_addrlen);
  impl_->upstream_len = static_cast<socklen_t>((*up)->ai_addrlen);
  impl_->upstream_name = opts.upstream_host + ":" + std::to_string(opts.upstream_port);
  impl_->listen_fd = fd;
  impl_->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  impl_->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl_->epoll_fd < 0 || impl_->wake_fd < 0) {
    std::string why = std::strerror(errno);
    for (int f : {fd, impl_->epoll_fd, impl_->wake_fd})
      if (f >= 0) ::close(f);
    impl_.reset();
    return error{"basp guard: epoll / eventfd: " + why};
  }
  impl_->watch(fd, true, false, true);
  impl_->watch(impl_->wake_fd, true, false, true);
  thread_ = std::thread([i = impl_.get()] { i->run(); });
  return ok();
}

status basp_guard::prepare(std::chrono::milliseconds timeout) {
  if (!impl_ || !impl_->opts.guard_upstream)
    return error{"basp guard: prepare needs an outbound guard"};
  {
    std::lock_guard<std::mutex> g(impl_->prep_mu);
    impl_->prep_wanted = true;
    impl_->prep_state = 1;
  }
  uint64_t one = 1;
  (void)!::write(impl_->wake_fd, &one, sizeof one);
  std::unique_lock<std::mutex> lock(impl_->prep_mu);
  if (!impl_->prep_cv.wait_for(lock, timeout, [&] { return impl_->prep_state != 1; }))
    return error{"no BASP handshake from " + impl_->upstream_name + " within " +
                 std::to_string(timeout.count()) +
                 " ms (a node started with --tls answers TLS clients only)"};
  if (impl_->prep_state != 2)
    return error{"the connection to " + impl_->upstream_name + " closed before its handshake"};
  return ok();
}

void basp_guard::stop() {
  if (!impl_) return;
  impl_->stopping = true;
  uint64_t one = 1;
  (void)!::write(impl_->wake_fd, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  for (int fd : {impl_->listen_fd, impl_->epoll_fd, impl_->wake_fd})
    if (fd >= 0) ::close(fd);
  final_ = stats();
  impl_.reset();
}

// From the thread that starts and stops the guard (the relay thread only counts).
basp_guard_stats basp_guard::stats() const {
  if (!impl_) return final_;
  std::lock_guard<std::mutex> g(impl_->stats_mu);
  return impl_->st;
}

} // namespace kiln
