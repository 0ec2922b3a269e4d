// The records the trusted executor and an untrusted kernel host exchange on their SOCK_SEQPACKET
// channel (one record per message, so no framing). Fixed-size plain structs: the executor
// validates every field of a reply, since the kernel host runs code that may write anything.
//   kernel host --started--> executor --layout (+ memfd), load, empty, call--> kernel host
//   --reply--> executor
#pragma once

#include <cstdint>

namespace kiln {

constexpr uint32_t kh_magic = 0x484e4c4b; // "KLNH"
// 2: the cuda region travels as a VMM fd, not an IPC handle; 3: load names its artifact_loader;
// 4: the host says `started` once its device context exists
constexpr uint32_t kh_version = 5;

enum class kh_op : uint32_t {
  ready = 1,  // host -> executor once, after its sandbox is in force
  layout = 2, // where the job's buffers are (the memfd or device allocation's fd: SCM_RIGHTS)
  load = 3,   // load the artifact (a file name inside the host's scratch directory)
  empty = 4,  // the call path without the kernel: calibrates the protocol's own cost
  call = 5,   // call the kernel once on the buffers as they are
  // host -> executor once, unasked, before the layout: its device context exists, so starting
  // it no longer touches the device (spare hosts must not start beside a timed trial)
  started = 6,
};

// Inputs, params and outputs, in task declaration order, at these offsets of the shared region.
constexpr uint32_t kh_max_buffers = 1024;
struct kh_buffer {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

struct kh_command {
  uint32_t magic = kh_magic;
  uint32_t version = kh_version;
  uint32_t op = 0;
  uint32_t loader = 0; // load: an artifact_loader (submission/artifact_loader.hpp)
  uint64_t seq = 0;
  // layout
  uint32_t inputs = 0, params = 0, outputs = 0, cuda = 0;
  uint64_t region_bytes = 0;
  // load
  char artifact[128] = {}; // file name inside the scratch directory; '\0'-terminated
  // layout: inputs + params + outputs entries; other commands send only the part above
  kh_buffer buffers[kh_max_buffers] = {};
};
// Bytes of a command without its buffer table, and with n entries of it.
constexpr unsigned long kh_command_head = sizeof(kh_command) - sizeof(kh_buffer) * kh_max_buffers;
constexpr unsigned long kh_command_bytes(uint32_t n) {
  return kh_command_head + sizeof(kh_buffer) * n;
}

enum class kh_code : int32_t {
  ok = 0,
  // The entry point returned non-zero (its value is not reported: a channel); a ModelNew's
  // forward raised (text: the exception, what a KernelBench agent is told).
  kernel_failed = 1,
  load_failed = 2,  // text says why (dlopen's message, a plan that does not match)
  device_error = 3, // text names the CUDA error
  bad_command = 4,
};

// The host's own clock over a command: untrusted, so only for the executor's messages, which then
// say where a call's time went.
struct host_phases {
  double handler_ms = 0;                           // command .. reply
  double settle_ms = 0, call_ms = 0, drain_ms = 0; // cuda: to the settled start event, the call,
                                                   // the synchronize after it
};

struct kh_reply {
  uint32_t magic = kh_magic;
  uint32_t version = kh_version;
  uint32_t op = 0;
  int32_t code = 0;
  uint64_t seq = 0;
  int64_t pid = 0; // ready
  int64_t uid = 0; // ready
  int32_t landlock_abi = 0;
  int32_t seccomp = 0; // ready: 1 once the kernel_load profile is in force
  // cuda: the call's time on its stream by events, and how long the device stayed busy after
  // the stream's last event (work on streams never joined back). Reported by the untrusted
  // side, so the executor bounds them by its own clock.
  double stream_ms = 0;
  double residual_ms = 0;
  host_phases host;
  char text[240] = {};
};

} // namespace kiln
