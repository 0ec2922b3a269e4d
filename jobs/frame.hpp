// Length-prefixed frames on file descriptors: 4-byte little-endian payload length, then payload.
//   encode(job) --write_frame--> fd (socket / pipe) --read_frame--> bytes --decode_*--> values
#pragma once

#include "data/expected.hpp"

#include <cstdint>
#include <string>

namespace kiln {

// Larger frames are rejected before anything is allocated (a hostile length costs nothing).
constexpr uint32_t max_frame_bytes = uint32_t{32} << 20;

// Monotonic milliseconds, the clock of every deadline below.
int64_t monotonic_ms();

enum class frame_status { ok, eof, timeout, error };

struct frame_result {
  frame_status status = frame_status::error;
  std::string payload; // ok
  std::string error;   // error: "truncated frame (got 3 of 4 length bytes)", "frame too large ..."
};

// Reads one frame. deadline_ms: monotonic_ms() value after which it gives up (-1: wait forever).
// eof: the peer closed cleanly between frames; a close inside a frame is an error.
frame_result read_frame(int fd, int64_t deadline_ms = -1, uint32_t max_bytes = max_frame_bytes);

// Writes one frame, all of it or an error. On sockets it never raises SIGPIPE (MSG_NOSIGNAL).
status write_frame(int fd, const std::string& payload, int64_t deadline_ms = -1);

} // namespace kiln
