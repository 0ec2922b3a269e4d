// The frame guard in front of a real middleman: a remote actor works through it; an oversize
// header, a peer that never finishes a frame, connections past the cap and past one address's
// share are cut, and the middleman keeps serving; outbound, a node's frames are held the same way.
#include "actors/actor_system_setup.hpp"
#include "actors/basp_guard.hpp"
#include "tests/support/loopback_listener.hpp"

#include <arpa/inet.h>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <chrono>
#include <doctest/doctest.h>
#include <memory>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

using namespace kiln;

namespace {

caf::behavior echo(caf::event_based_actor*) {
  return {[](const std::string& s) { return "echo " + s; }};
}

int dial(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Reads until the guard closes the connection (0) or 5 s pass (-1); what the middleman sent
// first (its handshake) is skipped.
int read_until_closed(int fd) {
  char buf[4096];
  for (;;) {
    ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r == 0) return 0;
    if (r < 0) return -1;
  }
}

std::string ask(caf::actor_system& sys, uint16_t port) {
  auto a = sys.middleman().remote_actor("127.0.0.1", port);
  if (!a) return "connect failed: " + sys.render(a.error());
  caf::scoped_actor self{sys};
  std::string out;
  self->request(*a, std::chrono::seconds(5), std::string("hi"))
      .receive([&](std::string& s) { out = s; },
               [&](caf::error& e) { out = "error: " + sys.render(e); });
  return out;
}

// An actor system configured as Kiln's: one side of a test.
struct test_system {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  test_system() {
    configure_actor_system(cfg, {1, "sharing", true});
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

// A middleman serving the echo actor on loopback: what a guard fronts (a node's listener) or
// connects out to (a node, seen from a coordinator).
struct echo_node : test_system {
  caf::actor e;
  uint16_t port = 0;
  echo_node() {
    e = sys->spawn(echo);
    auto p = sys->middleman().publish(e, 0, "127.0.0.1", true);
    REQUIRE(p);
    port = *p;
  }
  ~echo_node() { caf::anon_send_exit(e, caf::exit_reason::user_shutdown); }
};

} // namespace

TEST_CASE("the BASP header's payload length is read in network byte order") {
  unsigned char h[basp_header_size] = {1, 0, 0, 0, 0xff, 0xff, 0xff, 0xf0};
  CHECK(basp_payload_len(h) == 0xfffffff0u);
  h[4] = 0;
  h[5] = 0;
  h[6] = 1;
  h[7] = 2;
  CHECK(basp_payload_len(h) == 258u);
}

TEST_CASE("the guard relays a middleman and cuts hostile peers") {
  echo_node server;
  test_system client;
  basp_guard guard;
  basp_guard_options o;
  o.upstream_port = server.port;
  o.max_payload = 1 << 20;
  o.max_first_payload = 64 << 10;
  o.budget_bytes = 64 << 10;
  o.max_connections = 3;
  o.handshake_ms = 300;
  REQUIRE(guard.start(o));
  REQUIRE(guard.port() != 0);
  CHECK(ask(*client.sys, guard.port()) == "echo hi");

  SUBCASE("a header claiming 4 GiB closes the connection before the middleman reads it") {
    int fd = dial(guard.port());
    unsigned char h[basp_header_size] = {1, 0, 0, 0, 0xff, 0xff, 0xff, 0xf0};
    REQUIRE(send(fd, h, sizeof h, 0) == static_cast<ssize_t>(sizeof h));
    CHECK(read_until_closed(fd) == 0);
    close(fd);
    CHECK(guard.stats().oversize == 1);
  }
  SUBCASE("before its handshake a peer may announce a small frame only") {
    int fd = dial(guard.port());
    unsigned char h[basp_header_size] = {1, 0, 0, 0, 0, 0x10, 0, 0}; // 1 MiB: past 64 KiB
    REQUIRE(send(fd, h, sizeof h, 0) == static_cast<ssize_t>(sizeof h));
    CHECK(read_until_closed(fd) == 0);
    close(fd);
    CHECK(guard.stats().oversize == 1);
  }
  SUBCASE("partial frames held for all peers stay within the budget") {
    // two peers each announce 48 KiB and send nothing more: the second passes the 64 KiB budget
    int a = dial(guard.port()), b = dial(guard.port());
    unsigned char h[basp_header_size] = {1, 0, 0, 0, 0, 0, 0xc0, 0};
    REQUIRE(send(a, h, sizeof h, 0) == static_cast<ssize_t>(sizeof h));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    REQUIRE(send(b, h, sizeof h, 0) == static_cast<ssize_t>(sizeof h));
    CHECK(read_until_closed(b) == 0);
    close(a);
    close(b);
    CHECK(guard.stats().over_budget == 1);
  }
  SUBCASE("a peer that never finishes its first frame is cut after handshake_ms") {
    int fd = dial(guard.port());
    REQUIRE(send(fd, "\0\0\0\0\0\0\0", 7, 0) == 7);
    CHECK(read_until_closed(fd) == 0);
    close(fd);
    CHECK(guard.stats().too_slow == 1);
  }
  SUBCASE("connections past the cap are refused") {
    // four at once against a cap of 3 (the remote actor above may hold a fifth)
    int fds[4];
    for (int& fd : fds) fd = dial(guard.port());
    for (int fd : fds) CHECK(read_until_closed(fd) == 0); // refused, or cut when slow
    for (int fd : fds) close(fd);
    CHECK(guard.stats().refused >= 1);
  }
  // Whatever a stranger did, the middleman still answers through the guard.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  test_system again;
  CHECK(ask(*again.sys, guard.port()) == "echo hi");
  CHECK(guard.stats().accepted >= 2);
  guard.stop();
}

TEST_CASE("one address cannot take every slot: past max_per_host it is refused, others are not") {
  echo_node server;
  basp_guard guard;
  basp_guard_options o;
  o.upstream_port = server.port;
  o.max_connections = 100;
  o.max_per_host = 2;
  o.handshake_ms = 2000;
  REQUIRE(guard.start(o));

  auto dial_from = [&](const char* source) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in src{};
    src.sin_family = AF_INET;
    inet_pton(AF_INET, source, &src.sin_addr);
    REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) == 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(guard.port());
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0);
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
  };
  int a = dial_from("127.0.0.1"), b = dial_from("127.0.0.1");
  std::this_thread::sleep_for(std::chrono::milliseconds(200)); // both accepted first
  int c = dial_from("127.0.0.1");
  CHECK(read_until_closed(c) == 0); // the third from the same address: refused at once
  CHECK(guard.stats().refused_host == 1);
  int other = dial_from("127.0.0.2"); // another address still gets in
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(guard.stats().accepted == 3);
  for (int fd : {a, b, c, other}) close(fd);
  // The slots come back when the connections close: the same address is served again.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  test_system client;
  CHECK(ask(*client.sys, guard.port()) == "echo hi");
  guard.stop();
}

TEST_CASE("outbound: a node's frames reach the middleman whole, a node's 4 GiB header does not") {
  echo_node node;
  test_system client;
  basp_guard honest;
  basp_guard_options o;
  o.upstream_port = node.port;
  o.guard_upstream = true;
  REQUIRE(honest.start(o));
  CHECK(ask(*client.sys, honest.port()) == "echo hi");
  REQUIRE(honest.prepare(std::chrono::milliseconds(5000))); // the node's handshake held first
  CHECK(ask(*client.sys, honest.port()) == "echo hi");
  CHECK(honest.stats().oversize == 0);

  // A "node" that answers a connection with a header claiming 4 GiB.
  auto [ls, hostile_port] = test::listen_on_loopback();
  std::thread hostile([ls] {
    for (int i = 0; i < 2; ++i) {
      int c = accept(ls, nullptr, nullptr);
      if (c < 0) return;
      unsigned char h[basp_header_size] = {0, 0, 0, 0, 0xff, 0xff, 0xff, 0xf0};
      (void)!send(c, h, sizeof h, MSG_NOSIGNAL);
      char buf[256];
      while (recv(c, buf, sizeof buf, 0) > 0) {
      }
      close(c);
    }
  });
  basp_guard guarded;
  o.upstream_port = hostile_port;
  REQUIRE(guarded.start(o));
  auto refused = guarded.prepare(std::chrono::milliseconds(5000));
  REQUIRE_FALSE(refused);
  CHECK_MESSAGE(refused.message().find("closed before its handshake") != std::string::npos,
                refused.message());
  auto answer = ask(*client.sys, guarded.port());
  CHECK_MESSAGE(answer.rfind("connect failed", 0) == 0, answer);
  CHECK(guarded.stats().oversize == 2); // prepare's connection, then the middleman's
  guarded.stop();
  hostile.join();
  close(ls);
  honest.stop();
}
