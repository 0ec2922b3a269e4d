// libcurl (Debian's libcurl4-openssl-dev): its multi interface is an event loop over non-blocking
// sockets with connection reuse, TLS, proxies and HTTP/1.1 keep-alive done right; writing that by
// hand (or pulling Boost.Beast's asio stack into an actor system that has its own threads) buys
// nothing. The loop drives it with curl_multi_socket_action over epoll: libcurl's own poll loop
// (curl_multi_perform + curl_multi_poll) walks every transfer and socket on each wake-up, which at
// thousands of requests in flight cost more CPU than the requests themselves. Transfers are spread
// over several multi handles (shards) in that one loop: a multi handle's connection cache keeps all
// connections to a host in one list that libcurl walks for every new request, so its cost grows
// with the connections open (at 10,000 requests in flight it was most of the client's CPU). An
// eventfd lets post() wake the loop from any thread.
#include "llm/http_client.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <thread>
#include <unistd.h>
#include <unordered_map>

namespace kiln {

namespace {

using clock_type = std::chrono::steady_clock;

double ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// One global init per process, before any thread uses curl.
void curl_once() {
  static const bool done = [] {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return true;
  }();
  (void)done;
}

} // namespace

struct http_client::transfer {
  std::string path, body, session;
  std::function<void(http_response)> done;
  clock_type::time_point submitted, not_before;
  int attempts = 0;
  int endpoint = -1; // index of the attempt in flight
  int shard = -1;    // the multi handle it runs on
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  std::string answer;
  double retry_after_s = -1; // from the last answer's Retry-After, -1 when absent
  bool too_large = false;
  int64_t max_body = 0;
};

// One multi handle and libcurl's timer for it (CURLMOPT_TIMERFUNCTION: when it wants
// socket_action(CURL_SOCKET_TIMEOUT)).
struct curl_shard {
  CURLM* multi = nullptr;
  int index = 0;
  int active = 0;
  int epoll_fd = -1;
  // The shard registered with epoll for each socket, shared by all shards (loop thread only):
  // a socket libcurl closed before its CURL_POLL_REMOVE may be reopened by another shard, whose
  // registration that late REMOVE must not delete.
  std::unordered_map<curl_socket_t, int>* owners = nullptr;
  bool timer_set = false;
  std::chrono::steady_clock::time_point timer_due;
};

struct http_client::impl {
  http_client_options opts;
  std::vector<std::unique_ptr<curl_shard>> shards;
  std::unordered_map<curl_socket_t, int> socket_owners; // see curl_shard::owners
  std::thread thread;
  mutable std::mutex mu;
  std::deque<std::unique_ptr<transfer>> incoming; // posted, not yet seen by the loop
  bool stopping = false;
  std::vector<int> load; // requests in flight per endpoint (loop thread only)
  // An endpoint that failed at the connection level or with 5xx rests a while before new work
  // goes to it (a dead one fails fast, so it would otherwise always look least loaded).
  std::vector<int> fail_streak;
  std::vector<clock_type::time_point> down_until;
  std::vector<std::unique_ptr<transfer>> waiting; // queued or backing off (loop thread only)
  std::unordered_map<CURL*, std::unique_ptr<transfer>> active;
  std::atomic<int64_t> requests{0}, completed{0}, failed{0}, retries{0}, in_flight{0}, queued{0};
  int epoll_fd = -1, wake_fd = -1;
  void wake() {
    uint64_t one = 1;
    if (::write(wake_fd, &one, sizeof one) < 0) {
    } // EAGAIN: a wake-up is pending already
  }
};

namespace {

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<http_client::transfer*>(user);
  size_t bytes = size * n;
  if (static_cast<int64_t>(t->answer.size() + bytes) > t->max_body) {
    t->too_large = true;
    return 0; // aborts the transfer (CURLE_WRITE_ERROR)
  }
  t->answer.append(data, bytes);
  return bytes;
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<http_client::transfer*>(user);
  size_t bytes = size * n;
  static const char key[] = "retry-after:";
  if (bytes > sizeof key - 1 && strncasecmp(data, key, sizeof key - 1) == 0) {
    // Seconds only; an HTTP date is rare from LLM servers and is treated as absent.
    std::string v(data + sizeof key - 1, bytes - (sizeof key - 1));
    char* end = nullptr;
    double s = std::strtod(v.c_str(), &end);
    if (end != v.c_str() && s >= 0) t->retry_after_s = s;
  }
  return bytes;
}

bool retryable_status(long status) { return status == 429 || (status >= 500 && status <= 599); }

// An epoll event's tag: the shard in the high half, the socket in the low half.
constexpr uint64_t kWakeTag = ~uint64_t{0};
uint64_t socket_tag(int shard, curl_socket_t s) {
  return (uint64_t(uint32_t(shard)) << 32) | uint32_t(s);
}

// CURLMOPT_SOCKETFUNCTION: keep epoll's interest in each socket as libcurl asks. socketp marks a
// socket already registered.
int on_socket(CURL*, curl_socket_t s, int what, void* user, void* socketp) {
  auto* sh = static_cast<curl_shard*>(user);
  if (what == CURL_POLL_REMOVE) {
    auto it = sh->owners->find(s);
    if (it != sh->owners->end() && it->second == sh->index) {
      ::epoll_ctl(sh->epoll_fd, EPOLL_CTL_DEL, s, nullptr);
      sh->owners->erase(it);
    }
    return 0;
  }
  epoll_event ev{};
  ev.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0u) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u);
  ev.data.u64 = socket_tag(sh->index, s);
  auto owner = sh->owners->try_emplace(s, -1).first;
  bool mine = socketp != nullptr && owner->second == sh->index;
  if (!mine || ::epoll_ctl(sh->epoll_fd, EPOLL_CTL_MOD, s, &ev) != 0) {
    // A registration under another shard's tag is stale (its socket was closed and this one
    // reuses the number): replace it.
    if (::epoll_ctl(sh->epoll_fd, EPOLL_CTL_ADD, s, &ev) != 0 && errno == EEXIST)
      ::epoll_ctl(sh->epoll_fd, EPOLL_CTL_MOD, s, &ev);
    curl_multi_assign(sh->multi, s, sh); // any non-null marker
  }
  owner->second = sh->index;
  return 0;
}

// CURLMOPT_TIMERFUNCTION: -1 deletes the timer.
int on_timer(CURLM*, long timeout_ms, void* user) {
  auto* sh = static_cast<curl_shard*>(user);
  sh->timer_set = timeout_ms >= 0;
  if (sh->timer_set) sh->timer_due = clock_type::now() + std::chrono::milliseconds(timeout_ms);
  return 0;
}

// About this many requests in flight per multi handle at the configured caps.
constexpr int64_t kTransfersPerShard = 256;
constexpr int64_t kMaxShards = 64;

} // namespace

http_client::http_client(http_client_options opts) : impl_(std::make_unique<impl>()) {
  curl_once();
  impl_->opts = std::move(opts);
  impl_->load.assign(impl_->opts.endpoints.size(), 0);
  impl_->fail_streak.assign(impl_->opts.endpoints.size(), 0);
  impl_->down_until.assign(impl_->opts.endpoints.size(), clock_type::time_point{});
  impl_->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  impl_->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeTag;
  ::epoll_ctl(impl_->epoll_fd, EPOLL_CTL_ADD, impl_->wake_fd, &ev);
  const int64_t cap = std::max(1, impl_->opts.max_in_flight);
  const int64_t total = cap * std::max<int64_t>(1, int64_t(impl_->opts.endpoints.size()));
  const int64_t shards =
      std::clamp<int64_t>((total + kTransfersPerShard - 1) / kTransfersPerShard, 1, kMaxShards);
  for (int64_t i = 0; i < shards; ++i) {
    auto sh = std::make_unique<curl_shard>();
    sh->index = static_cast<int>(i);
    sh->epoll_fd = impl_->epoll_fd;
    sh->owners = &impl_->socket_owners;
    sh->multi = curl_multi_init();
    curl_multi_setopt(sh->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(sh->multi, CURLMOPT_SOCKETDATA, sh.get());
    curl_multi_setopt(sh->multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(sh->multi, CURLMOPT_TIMERDATA, sh.get());
    // Keep a connection per request slot alive between requests (the client's own caps bound
    // what is in flight; this bounds what one shard may open to a host).
    curl_multi_setopt(sh->multi, CURLMOPT_MAX_HOST_CONNECTIONS, static_cast<long>(cap));
    impl_->shards.push_back(std::move(sh));
  }
  impl_->thread = std::thread([this] { run(); });
}

http_client::~http_client() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->wake();
  impl_->thread.join();
  for (auto& sh : impl_->shards) curl_multi_cleanup(sh->multi);
  ::close(impl_->epoll_fd);
  ::close(impl_->wake_fd);
}

void http_client::post(std::string path, std::string body,
                       std::function<void(http_response)> done, std::string session) {
  auto t = std::make_unique<transfer>();
  t->path = std::move(path);
  t->session = std::move(session);
  t->body = std::move(body);
  t->done = std::move(done);
  t->submitted = clock_type::now();
  t->not_before = t->submitted;
  t->max_body = impl_->opts.max_body_bytes;
  impl_->requests++;
  impl_->queued++;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stopping) {
      http_response r;
      r.error = "client stopped";
      impl_->failed++;
      impl_->queued--;
      t->done(std::move(r));
      return;
    }
    impl_->incoming.push_back(std::move(t));
  }
  impl_->wake();
}

http_client_stats http_client::stats() const {
  http_client_stats s;
  s.requests = impl_->requests, s.completed = impl_->completed, s.failed = impl_->failed;
  s.retries = impl_->retries, s.in_flight = impl_->in_flight, s.queued = impl_->queued;
  return s;
}

void http_client::run() {
  auto& im = *impl_;
  const auto& o = im.opts;
  auto finish = [&](std::unique_ptr<transfer> t, http_response r) {
    r.attempts = t->attempts;
    r.ms = ms_between(t->submitted, clock_type::now());
    (r.ok() ? im.completed : im.failed)++;
    t->done(std::move(r));
  };
  auto start = [&](std::unique_ptr<transfer> t, int ep) {
    t->endpoint = ep;
    t->attempts++;
    t->answer.clear();
    t->retry_after_s = -1;
    t->too_large = false;
    CURL* e = curl_easy_init();
    std::string url = o.endpoints[static_cast<size_t>(ep)];
    // "{session}" in an endpoint: a trainer's gateway that keeps each episode's tokens.
    for (size_t at; (at = url.find("{session}")) != std::string::npos;)
      url.replace(at, 9, t->session);
    url += t->path;
    curl_easy_setopt(e, CURLOPT_URL, url.c_str());
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, t->body.data());
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(t->body.size()));
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(o.timeout_s * 1000));
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(std::min(o.timeout_s, 10.0) * 1000));
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
    curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
    if (!t->headers) {
      t->headers = curl_slist_append(nullptr, "Content-Type: application/json");
      t->headers = curl_slist_append(t->headers, "Expect:"); // no 100-continue round trip
      if (!o.bearer_token.empty())
        t->headers =
            curl_slist_append(t->headers, ("Authorization: Bearer " + o.bearer_token).c_str());
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
    t->easy = e;
    // The least busy shard: its connection list stays short.
    curl_shard* sh = im.shards.front().get();
    for (auto& c : im.shards)
      if (c->active < sh->active) sh = c.get();
    t->shard = sh->index;
    sh->active++;
    im.load[static_cast<size_t>(ep)]++;
    im.in_flight++;
    im.queued--;
    curl_multi_add_handle(sh->multi, e);
    im.active[e] = std::move(t);
  };
  // The least-loaded endpoint with room, resting ones only when none other has room, and not the
  // one a retry just failed on when another will do.
  auto least_loaded = [&](int avoid = -1) -> int {
    auto now = clock_type::now();
    int best = -1;
    int best_rank = 0;
    for (size_t i = 0; i < im.load.size(); ++i) {
      if (im.load[i] >= o.max_in_flight) continue;
      int rank = (im.down_until[i] > now ? 2 : 0) + (static_cast<int>(i) == avoid ? 1 : 0);
      if (best < 0 || rank < best_rank || (rank == best_rank && im.load[i] < im.load[size_t(best)]))
        best = static_cast<int>(i), best_rank = rank;
    }
    return best;
  };

  for (;;) {
    bool stop = false;
    {
      std::lock_guard<std::mutex> lock(im.mu);
      stop = im.stopping;
      while (!im.incoming.empty()) {
        im.waiting.push_back(std::move(im.incoming.front()));
        im.incoming.pop_front();
      }
    }
    if (stop) break;
    if (o.endpoints.empty()) {
      for (auto& t : im.waiting) {
        im.queued--;
        http_response r;
        r.error = "no endpoint configured";
        finish(std::move(t), std::move(r));
      }
      im.waiting.clear();
    }
    // Start what may start, oldest first.
    auto now = clock_type::now();
    int wait_ms = 1000;
    if (!im.waiting.empty() && least_loaded() >= 0) {
      std::vector<std::unique_ptr<transfer>> still; // kept in order, without erasing one by one
      still.reserve(im.waiting.size());
      bool full = false;
      for (auto& t : im.waiting) {
        if (full) {
          still.push_back(std::move(t));
          continue;
        }
        if (t->not_before > now) {
          wait_ms = std::min<int>(wait_ms, static_cast<int>(ms_between(now, t->not_before)) + 1);
          still.push_back(std::move(t));
          continue;
        }
        int ep = least_loaded(t->endpoint);
        if (ep < 0) { // every endpoint full: wait for a completion
          full = true;
          still.push_back(std::move(t));
          continue;
        }
        start(std::move(t), ep);
      }
      im.waiting.swap(still);
    }
    int running = 0;
    std::vector<std::pair<CURL*, CURLcode>> done;
    for (auto& sh : im.shards) {
      if (sh->timer_set && clock_type::now() >= sh->timer_due) {
        sh->timer_set = false;
        curl_multi_socket_action(sh->multi, CURL_SOCKET_TIMEOUT, 0, &running);
      }
      int left = 0;
      while (CURLMsg* m = curl_multi_info_read(sh->multi, &left)) {
        if (m->msg != CURLMSG_DONE) continue;
        done.emplace_back(m->easy_handle, m->data.result);
      }
    }
    for (auto [e, code] : done) {
      auto node = im.active.extract(e);
      auto t = std::move(node.mapped());
      curl_shard& sh = *im.shards[static_cast<size_t>(t->shard)];
      curl_multi_remove_handle(sh.multi, e);
      sh.active--;
      long status = 0;
      curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
      curl_easy_cleanup(e);
      t->easy = nullptr;
      im.load[static_cast<size_t>(t->endpoint)]--;
      im.in_flight--;
      http_response r;
      r.status = static_cast<int>(status);
      r.endpoint = o.endpoints[static_cast<size_t>(t->endpoint)];
      bool retry = false;
      if (code != CURLE_OK) {
        r.status = 0;
        r.error = t->too_large ? "answer larger than " + std::to_string(t->max_body) + " bytes"
                               : std::string(curl_easy_strerror(code));
        retry = !t->too_large;
      } else if (retryable_status(status)) {
        r.error = "HTTP " + std::to_string(status);
        retry = true;
      } else if (status < 200 || status >= 300) {
        r.error = "HTTP " + std::to_string(status);
      }
      r.body = std::move(t->answer);
      auto ep = static_cast<size_t>(t->endpoint);
      if (retry && (status == 0 || status >= 500)) {
        int streak = std::min(++im.fail_streak[ep], 6);
        im.down_until[ep] = clock_type::now() + std::chrono::milliseconds(std::min<int64_t>(
                                                    5000, int64_t(o.backoff_s * 1000) << streak));
      } else if (!retry) {
        im.fail_streak[ep] = 0;
      }
      if (retry && t->attempts < o.max_attempts) {
        double delay =
            std::min(o.backoff_max_s, std::ldexp(o.backoff_s, std::min(t->attempts - 1, 30)));
        if (t->retry_after_s >= 0) delay = std::min(o.backoff_max_s, t->retry_after_s);
        t->not_before = clock_type::now() + std::chrono::microseconds(int64_t(delay * 1e6));
        im.retries++;
        im.queued++;
        im.waiting.push_back(std::move(t));
        continue;
      }
      if (!r.error.empty() && t->attempts > 1)
        r.error += " (after " + std::to_string(t->attempts) + " attempts)";
      curl_slist_free_all(t->headers);
      t->headers = nullptr;
      finish(std::move(t), std::move(r));
    }
    if (!im.waiting.empty() && least_loaded() >= 0)
      wait_ms = std::min(wait_ms, 50); // a backoff may end, or a slot just freed
    for (auto& sh : im.shards)
      if (sh->timer_set)
        wait_ms = std::min<int>(wait_ms, std::max<int>(0, static_cast<int>(std::ceil(ms_between(
                                                              clock_type::now(), sh->timer_due)))));
    epoll_event events[256];
    int n = ::epoll_wait(im.epoll_fd, events, 256, wait_ms);
    for (int i = 0; i < n; ++i) {
      uint64_t tag = events[i].data.u64;
      if (tag == kWakeTag) {
        uint64_t v;
        if (::read(im.wake_fd, &v, sizeof v) < 0) {
        }
        continue;
      }
      int flags = ((events[i].events & EPOLLIN) ? CURL_CSELECT_IN : 0) |
                  ((events[i].events & EPOLLOUT) ? CURL_CSELECT_OUT : 0) |
                  ((events[i].events & (EPOLLERR | EPOLLHUP)) ? CURL_CSELECT_ERR : 0);
      curl_multi_socket_action(im.shards[static_cast<size_t>(tag >> 32)]->multi,
                               static_cast<curl_socket_t>(uint32_t(tag)), flags, &running);
    }
  }
  // Stopping: everything still owned fails once.
  for (auto& [e, t] : im.active) {
    curl_multi_remove_handle(im.shards[static_cast<size_t>(t->shard)]->multi, e);
    curl_easy_cleanup(e);
    curl_slist_free_all(t->headers);
    http_response r;
    r.error = "client stopped";
    finish(std::move(t), std::move(r));
  }
  im.active.clear();
  std::deque<std::unique_ptr<transfer>> rest;
  {
    std::lock_guard<std::mutex> lock(im.mu);
    rest.swap(im.incoming);
  }
  for (auto& t : rest) im.waiting.push_back(std::move(t));
  for (auto& t : im.waiting) {
    curl_slist_free_all(t->headers);
    http_response r;
    r.error = "client stopped";
    finish(std::move(t), std::move(r));
  }
  im.waiting.clear();
}

} // namespace kiln
