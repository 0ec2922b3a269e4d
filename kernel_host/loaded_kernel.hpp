// The submission a kernel host has loaded, by its artifact_loader: the one place on the untrusted
// side that knows per kind of artifact how it is loaded and called. Every loader a build can run
// is here; one this host cannot run (cuda in a cpu host, or the reverse) is a load error.
//   load command {loader, file} --load--> loaded_kernel --run(buffers)--> status
#pragma once

#include "data/expected.hpp"
#include "submission/artifact_loader.hpp"

#include <memory>
#include <string>
#include <vector>

namespace kiln {

class loaded_kernel {
public:
  // `cuda`: whether this host opened a device. The inputs, params and outputs are the job's
  // buffers: a loader may run trusted library code on them once (cuDNN's warm-up) before the
  // run seccomp filter is applied.
  static expected<loaded_kernel> load(artifact_loader loader, const std::string& path, bool cuda,
                                      const std::vector<const void*>& inputs,
                                      const std::vector<const void*>& params,
                                      const std::vector<void*>& outputs);
  loaded_kernel(loaded_kernel&&) noexcept;
  loaded_kernel& operator=(loaded_kernel&&) noexcept;
  ~loaded_kernel();

  // One call on the buffers; cuda enqueues and does not wait (the caller times it by events).
  status run(const std::vector<const void*>& inputs, const std::vector<const void*>& params,
             const std::vector<void*>& outputs);

private:
  loaded_kernel() = default;
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace kiln
