// A TCP listener on 127.0.0.1 at a port the kernel picks: what a test's fake peer or escape target
// listens on.
#pragma once

#include <arpa/inet.h>
#include <cstdint>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace kiln::test {

struct loopback_listener {
  int fd = -1;
  uint16_t port = 0;
};

inline loopback_listener listen_on_loopback(int backlog = 4) {
  loopback_listener l;
  l.fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(l.fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  REQUIRE(bind(l.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(listen(l.fd, backlog) == 0);
  REQUIRE(getsockname(l.fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  l.port = ntohs(a.sin_port);
  return l;
}

} // namespace kiln::test
