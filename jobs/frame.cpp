// Frame I/O with poll() deadlines; EINTR-safe, partial reads/writes handled.
#include "jobs/frame.hpp"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace kiln {

int64_t monotonic_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1000000;
}

namespace {

enum class wait_result { ready, timeout, error };

wait_result wait_fd(int fd, short events, int64_t deadline_ms) {
  for (;;) {
    int ms = -1;
    if (deadline_ms >= 0) {
      int64_t left = deadline_ms - monotonic_ms();
      if (left <= 0) return wait_result::timeout;
      ms = left > 1000000 ? 1000000 : static_cast<int>(left);
    }
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, ms);
    if (r > 0) return wait_result::ready; // POLLHUP / POLLERR: the read/write reports it
    if (r == 0) continue;                 // re-check the deadline
    if (errno != EINTR) return wait_result::error;
  }
}

// Reads exactly n bytes; returns bytes read before EOF/timeout/error in `got`.
frame_status read_exact(int fd, char* buf, size_t n, int64_t deadline_ms, size_t& got,
                        std::string& err) {
  got = 0;
  while (got < n) {
    auto w = wait_fd(fd, POLLIN, deadline_ms);
    if (w == wait_result::timeout) return frame_status::timeout;
    if (w == wait_result::error) {
      err = std::string("poll: ") + std::strerror(errno);
      return frame_status::error;
    }
    ssize_t r = ::read(fd, buf + got, n - got);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (r == 0) {
      return frame_status::eof;
    } else if (errno != EINTR && errno != EAGAIN) {
      err = std::string("read: ") + std::strerror(errno);
      return frame_status::error;
    }
  }
  return frame_status::ok;
}

} // namespace

frame_result read_frame(int fd, int64_t deadline_ms, uint32_t max_bytes) {
  frame_result res;
  unsigned char hdr[4];
  size_t got = 0;
  auto st = read_exact(fd, reinterpret_cast<char*>(hdr), 4, deadline_ms, got, res.error);
  if (st == frame_status::eof && got > 0) {
    res.error = "truncated frame (got " + std::to_string(got) + " of 4 length bytes)";
    return res;
  }
  if (st != frame_status::ok) {
    res.status = st;
    return res;
  }
  uint32_t len =
      uint32_t{hdr[0]} | uint32_t{hdr[1]} << 8 | uint32_t{hdr[2]} << 16 | uint32_t{hdr[3]} << 24;
  if (len > max_bytes) {
    res.error = "frame too large: " + std::to_string(len) + " bytes (limit " +
                std::to_string(max_bytes) + ")";
    return res;
  }
  res.payload.resize(len);
  st = read_exact(fd, res.payload.data(), len, deadline_ms, got, res.error);
  if (st == frame_status::eof) {
    res.error = "truncated frame (got " + std::to_string(got) + " of " + std::to_string(len) +
                " payload bytes)";
    res.payload.clear();
    return res;
  }
  if (st != frame_status::ok) {
    res.status = st;
    res.payload.clear();
    return res;
  }
  res.status = frame_status::ok;
  return res;
}

status write_frame(int fd, const std::string& payload, int64_t deadline_ms) {
  if (payload.size() > max_frame_bytes)
    return error{"frame too large to send: " + std::to_string(payload.size()) + " bytes"};
  uint32_t len = static_cast<uint32_t>(payload.size());
  std::string buf;
  buf.reserve(4 + payload.size());
  for (int i = 0; i < 4; ++i) buf.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  buf += payload;
  size_t done = 0;
  bool is_socket = true;
  while (done < buf.size()) {
    auto w = wait_fd(fd, POLLOUT, deadline_ms);
    if (w == wait_result::timeout) return error{"write timed out"};
    if (w == wait_result::error) return error{std::string("poll: ") + std::strerror(errno)};
    ssize_t r = is_socket ? ::send(fd, buf.data() + done, buf.size() - done, MSG_NOSIGNAL)
                          : ::write(fd, buf.data() + done, buf.size() - done);
    if (r >= 0) {
      done += static_cast<size_t>(r);
    } else if (errno == ENOTSOCK && is_socket) {
      is_socket = false; // a pipe: the caller owns SIGPIPE handling
    } else if (errno != EINTR && errno != EAGAIN) {
      return error{std::string("write: ") + std::strerror(errno)};
    }
  }
  return ok();
}

} // namespace kiln
