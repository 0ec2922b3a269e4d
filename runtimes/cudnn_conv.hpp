// Library convolution steps of a launch plan (skills/launch_plan.hpp, conv_step) in the kernel
// host, by cuDNN's convolution API: descriptors and the algorithm are chosen when the program
// loads, and one warm-up call there brings in cuDNN's sub-libraries and kernels before the run
// seccomp filter forbids new executable memory.
//   conv_step --prepare (load)--> cudnn_conv --run (each call, default stream)--> y
#pragma once

#include "data/expected.hpp"
#include "skills/launch_plan.hpp"

#include <memory>
#include <string>

namespace kiln {

class cudnn_conv {
public:
  // Opens cuDNN on first use (libcudnn.so.9, found by the dynamic loader), builds the descriptors
  // and picks the heuristics' first algorithm whose workspace fits `max_workspace_bytes`.
  static expected<std::unique_ptr<cudnn_conv>> prepare(const conv_step& step,
                                                       int64_t max_workspace_bytes);
  ~cudnn_conv();
  cudnn_conv(const cudnn_conv&) = delete;
  cudnn_conv& operator=(const cudnn_conv&) = delete;

  // y = conv(x, w) (forward) or conv_transpose(x, w), on the legacy default stream.
  status run(const void* x, const void* w, void* y);
  // "fwd algo 1, workspace 0 B": what prepare chose.
  std::string description() const;

private:
  cudnn_conv() = default;
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace kiln
