#include "jobs/frame.hpp"

#include <doctest/doctest.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>

using namespace kiln;

namespace {

struct sock_pair {
  int a = -1, b = -1;
  sock_pair() {
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    a = sv[0];
    b = sv[1];
  }
  ~sock_pair() {
    if (a >= 0) close(a);
    if (b >= 0) close(b);
  }
  void close_b() {
    close(b);
    b = -1;
  }
  void raw(const std::string& bytes) {
    REQUIRE(write(b, bytes.data(), bytes.size()) == ssize_t(bytes.size()));
  }
};

std::string le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = char((v >> (8 * i)) & 0xff);
  return s;
}

} // namespace

TEST_CASE("frames round trip, including empty and binary payloads") {
  sock_pair p;
  std::string bin("a\0b\xff", 4);
  REQUIRE(write_frame(p.b, "hello").has_value());
  REQUIRE(write_frame(p.b, "").has_value());
  REQUIRE(write_frame(p.b, bin).has_value());
  auto f1 = read_frame(p.a, monotonic_ms() + 1000);
  auto f2 = read_frame(p.a, monotonic_ms() + 1000);
  auto f3 = read_frame(p.a, monotonic_ms() + 1000);
  CHECK(f1.status == frame_status::ok);
  CHECK(f1.payload == "hello");
  CHECK(f2.status == frame_status::ok);
  CHECK(f2.payload.empty());
  CHECK(f3.payload == bin);
  p.close_b();
  CHECK(read_frame(p.a, monotonic_ms() + 1000).status == frame_status::eof);
}

TEST_CASE("the length is 4 bytes little-endian") {
  sock_pair p;
  p.raw(le32(3) + "abc");
  auto f = read_frame(p.a, monotonic_ms() + 1000);
  CHECK(f.status == frame_status::ok);
  CHECK(f.payload == "abc");
}

TEST_CASE("a truncated header or payload is an error, not EOF") {
  {
    sock_pair p;
    p.raw(std::string("\x05\x00", 2));
    p.close_b();
    auto f = read_frame(p.a, monotonic_ms() + 1000);
    CHECK(f.status == frame_status::error);
    CHECK(f.error.find("truncated frame (got 2 of 4 length bytes)") != std::string::npos);
  }
  {
    sock_pair p;
    p.raw(le32(10) + "abc");
    p.close_b();
    auto f = read_frame(p.a, monotonic_ms() + 1000);
    CHECK(f.status == frame_status::error);
    CHECK(f.error.find("got 3 of 10 payload bytes") != std::string::npos);
  }
}

TEST_CASE("an oversized length is rejected before any allocation") {
  sock_pair p;
  p.raw(le32(0xffffffffu));
  auto f = read_frame(p.a, monotonic_ms() + 1000);
  CHECK(f.status == frame_status::error);
  CHECK(f.error.find("frame too large: 4294967295 bytes") != std::string::npos);
  sock_pair q;
  q.raw(le32(101) + std::string(101, 'x'));
  CHECK(read_frame(q.a, monotonic_ms() + 1000, 100).status == frame_status::error);
}

TEST_CASE("a silent peer times out at the deadline") {
  sock_pair p;
  int64_t t0 = monotonic_ms();
  auto f = read_frame(p.a, t0 + 100);
  CHECK(f.status == frame_status::timeout);
  CHECK(monotonic_ms() - t0 >= 100);
  // A partial frame that stalls is a timeout too.
  p.raw(le32(8) + "abc");
  CHECK(read_frame(p.a, monotonic_ms() + 100).status == frame_status::timeout);
}

TEST_CASE("writing to a closed peer is an error, not SIGPIPE") {
  sock_pair p;
  close(p.a);
  p.a = -1;
  auto st = write_frame(p.b, std::string(1 << 20, 'x'));
  CHECK_FALSE(st.has_value());
}
