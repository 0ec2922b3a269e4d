#include "llm/mock_endpoint.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nlohmann/json.hpp>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <tuple>
#include <unistd.h>
#include <unordered_map>

namespace kiln {

namespace {

using clock_type = std::chrono::steady_clock;
using json = nlohmann::json;

std::string http_ok(const std::string& body) {
  return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

} // namespace

// Named, not anonymous: impl holds them, and impl has external linkage.
namespace mock_endpoint_parts {

struct connection {
  uint64_t id = 0;
  std::string in, out;
  size_t out_off = 0;
  bool want_write = false;
};

struct due_answer {
  std::chrono::steady_clock::time_point due;
  int fd;
  uint64_t id;
  const std::string* response;
};

} // namespace mock_endpoint_parts
using mock_endpoint_parts::connection;
using mock_endpoint_parts::due_answer;

struct mock_endpoint::impl {
  mock_endpoint_options o;
  int listen_fd = -1, epoll_fd = -1, stop_fd = -1;
  std::string chat, completion, generate, not_found;
  json prompt_ids, answer_ids;
  std::map<std::tuple<int, int, bool>, std::string> tokenize; // by the request's messages
  const std::string& tokenized(const std::string& body);
  std::unordered_map<int, connection> conns;
  std::deque<due_answer> fifo; // the latency is fixed: answers fall due in arrival order
  uint64_t next_id = 1;
  std::atomic<int64_t> requests{0}, connections{0}, bad{0};
  std::atomic<double> cpu_s{0};
};

// A prefix-stable template over fixed ids: the system and first user message render as the
// prompt ids, an assistant message as its header 9 10, the answer's ids and the closing 7 8, a
// later user message as 16 ids, and the generation prompt as the header. Messages are counted in
// the body as the client serializes them ("role":"assistant"; quotes in contents are escaped).
const std::string& mock_endpoint::impl::tokenized(const std::string& body) {
  auto count = [&](const char* needle) {
    int n = 0;
    for (size_t p = body.find(needle); p != std::string::npos; p = body.find(needle, p + 1)) ++n;
    return n;
  };
  std::tuple<int, int, bool> key{count(R"("role":"assistant")"), count(R"("role":"user")"),
                                 body.find(R"("add_generation_prompt":true)") != std::string::npos};
  auto it = tokenize.find(key);
  if (it != tokenize.end()) return it->second;
  json t = prompt_ids;
  auto [assistants, users] = std::pair{std::get<0>(key), std::get<1>(key)};
  for (int i = 0; i < assistants; ++i) {
    t.push_back(9), t.push_back(10);
    for (const auto& id : answer_ids) t.push_back(id);
    t.push_back(7), t.push_back(8);
    if (i + 1 < users)
      for (int k = 0; k < 16; ++k) t.push_back(300 + k);
  }
  if (std::get<2>(key)) t.push_back(9), t.push_back(10);
  size_t n = t.size();
  return tokenize[key] = http_ok(json{{"tokens", std::move(t)}, {"count", n}}.dump());
}

expected<std::unique_ptr<mock_endpoint>> mock_endpoint::start(mock_endpoint_options o) {
  std::unique_ptr<mock_endpoint> m(new mock_endpoint());
  m->impl_ = std::make_unique<impl>();
  auto& im = *m->impl_;
  im.o = std::move(o);
  json ids = json::array(), lps = json::array(), triples = json::array(), prompt = json::array();
  for (int i = 0; i < im.o.answer_tokens; ++i) {
    ids.push_back(100 + i % 50000);
    lps.push_back(-0.125);
    triples.push_back(json::array({-0.125, 100 + i % 50000, nullptr}));
  }
  for (int i = 0; i < im.o.prompt_tokens; ++i) prompt.push_back(200 + i % 50000);
  json usage{{"prompt_tokens", im.o.prompt_tokens}, {"completion_tokens", im.o.answer_tokens}};
  im.chat = http_ok(json{
      {"id", "mock"},
      {"object", "chat.completion"},
      {"choices",
       json::array({json{{"index", 0},
                         {"finish_reason", "stop"},
                         {"message", {{"role", "assistant"}, {"content", im.o.answer_text}}}}})},
      {"usage", usage}}.dump());
  im.completion = http_ok(json{
      {"choices", json::array({json{{"index", 0},
                                    {"text", im.o.answer_text},
                                    {"token_ids", ids},
                                    {"logprobs", {{"token_logprobs", lps}}},
                                    {"finish_reason", "stop"}}})},
      {"usage", usage}}.dump());
  im.generate = http_ok(json{{"text", im.o.answer_text},
                             {"output_ids", ids},
                             {"meta_info",
                              {{"output_token_logprobs", triples},
                               {"finish_reason", {{"type", "stop"}}},
                               {"prompt_tokens", im.o.prompt_tokens},
                               {"completion_tokens", im.o.answer_tokens}}}}
                            .dump());
  im.prompt_ids = std::move(prompt);
  im.answer_ids = std::move(ids);
  im.not_found = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";

  auto fail = [&](const char* what) {
    std::string e = std::string("mock endpoint: ") + what + ": " + std::strerror(errno);
    if (im.listen_fd >= 0) ::close(im.listen_fd);
    if (im.epoll_fd >= 0) ::close(im.epoll_fd);
    if (im.stop_fd >= 0) ::close(im.stop_fd);
    return error{e};
  };
  im.listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (im.listen_fd < 0) return fail("socket");
  int one = 1;
  ::setsockopt(im.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(im.listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return fail("bind");
  if (::listen(im.listen_fd, 65535) != 0) return fail("listen");
  socklen_t len = sizeof addr;
  ::getsockname(im.listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  m->port_ = ntohs(addr.sin_port);
  im.epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (im.epoll_fd < 0) return fail("epoll_create1");
  im.stop_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (im.stop_fd < 0) return fail("eventfd");
  for (int fd : {im.listen_fd, im.stop_fd}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (::epoll_ctl(im.epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) return fail("epoll_ctl");
  }
  auto* raw = m.get();
  m->thread_ = std::thread([raw] { raw->run(); });
  return m;
}

mock_endpoint::~mock_endpoint() {
  if (!impl_) return;
  uint64_t one = 1;
  if (::write(impl_->stop_fd, &one, sizeof one) < 0) {
  }
  if (thread_.joinable()) thread_.join();
  for (auto& [fd, c] : impl_->conns) ::close(fd);
  ::close(impl_->listen_fd);
  ::close(impl_->epoll_fd);
  ::close(impl_->stop_fd);
}

mock_endpoint_stats mock_endpoint::stats() const {
  return {impl_->requests, impl_->connections, impl_->bad, impl_->cpu_s};
}

void mock_endpoint::run() {
  auto& im = *impl_;
  auto drop = [&](int fd) {
    ::epoll_ctl(im.epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
    ::close(fd);
    im.conns.erase(fd);
  };
  auto flush = [&](int fd, connection& c) {
    while (c.out_off < c.out.size()) {
      ssize_t n = ::send(fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
      if (n > 0) {
        c.out_off += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EAGAIN) break;
      drop(fd);
      return;
    }
    if (c.out_off == c.out.size()) c.out.clear(), c.out_off = 0;
    bool want = !c.out.empty();
    if (want != c.want_write) {
      c.want_write = want;
      epoll_event ev{};
      ev.events = EPOLLIN | (want ? EPOLLOUT : 0u);
      ev.data.fd = fd;
      ::epoll_ctl(im.epoll_fd, EPOLL_CTL_MOD, fd, &ev);
    }
  };
  // Complete requests at the front of the input: generation answers wait in the FIFO.
  auto parse = [&](int fd, connection& c) {
    for (;;) {
      size_t end = c.in.find("\r\n\r\n");
      if (end == std::string::npos) return;
      size_t body_len = 0;
      for (size_t p = c.in.find("\r\n"); p != std::string::npos && p < end;
           p = c.in.find("\r\n", p + 2)) {
        static const char key[] = "content-length:";
        if (strncasecmp(c.in.data() + p + 2, key, sizeof key - 1) == 0)
          body_len = std::strtoul(c.in.data() + p + 2 + sizeof key - 1, nullptr, 10);
      }
      if (c.in.size() < end + 4 + body_len) return;
      size_t sp1 = c.in.find(' '), sp2 = c.in.find(' ', sp1 + 1);
      std::string path =
          sp1 < end && sp2 < end ? c.in.substr(sp1 + 1, sp2 - sp1 - 1) : std::string();
      std::string body = c.in.substr(end + 4, body_len);
      c.in.erase(0, end + 4 + body_len);
      im.requests++;
      const std::string* r = nullptr;
      if (path == "/v1/chat/completions")
        r = &im.chat;
      else if (path == "/v1/completions")
        r = &im.completion;
      else if (path == "/generate")
        r = &im.generate;
      if (r) {
        im.fifo.push_back({clock_type::now() + std::chrono::microseconds(
                                                   static_cast<int64_t>(im.o.latency_ms * 1000)),
                           fd, c.id, r});
        continue;
      }
      if (path != "/tokenize") im.bad++;
      c.out += path == "/tokenize" ? im.tokenized(body) : im.not_found;
      flush(fd, c);
      if (!im.conns.count(fd)) return;
    }
  };
  std::vector<epoll_event> events(1024);
  char buf[65536];
  for (;;) {
    int timeout = -1;
    if (!im.fifo.empty()) {
      auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(im.fifo.front().due -
                                                                        clock_type::now());
      timeout = static_cast<int>(std::max<int64_t>(0, wait.count()));
    }
    int n = ::epoll_wait(im.epoll_fd, events.data(), static_cast<int>(events.size()), timeout);
    for (int i = 0; i < n; ++i) {
      int fd = events[static_cast<size_t>(i)].data.fd;
      uint32_t what = events[static_cast<size_t>(i)].events;
      if (fd == im.stop_fd) return;
      if (fd == im.listen_fd) {
        for (;;) {
          int c = ::accept4(im.listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (c < 0) break;
          int one = 1;
          ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          epoll_event ev{};
          ev.events = EPOLLIN;
          ev.data.fd = c;
          ::epoll_ctl(im.epoll_fd, EPOLL_CTL_ADD, c, &ev);
          im.conns[c].id = im.next_id++;
          im.connections++;
        }
        continue;
      }
      auto it = im.conns.find(fd);
      if (it == im.conns.end()) continue;
      if (what & EPOLLOUT) {
        flush(fd, it->second);
        it = im.conns.find(fd);
        if (it == im.conns.end()) continue;
      }
      if (what & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        bool closed = false;
        for (;;) {
          ssize_t r = ::recv(fd, buf, sizeof buf, 0);
          if (r > 0) {
            it->second.in.append(buf, static_cast<size_t>(r));
            continue;
          }
          closed = r == 0 || errno != EAGAIN;
          break;
        }
        if (closed) {
          drop(fd);
          continue;
        }
        parse(fd, it->second);
      }
    }
    auto now = clock_type::now();
    while (!im.fifo.empty() && im.fifo.front().due <= now) {
      auto a = im.fifo.front();
      im.fifo.pop_front();
      auto it = im.conns.find(a.fd);
      if (it == im.conns.end() || it->second.id != a.id) continue; // the client went away
      it->second.out += *a.response;
      flush(a.fd, it->second);
    }
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    im.cpu_s = double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
  }
}

} // namespace kiln
