// How a kernel host loads a compiled submission: the one fact about a submission's kind that
// crosses into the untrusted side. Set by the compile stage (submission/submission_kind.hpp),
// carried in the job (jobs/job.hpp) and in the host's load command
// (kernel_host/kernel_host_protocol.hpp), acted on in one place (kernel_host/loaded_kernel.cpp). No
// dependencies: the hosts include it.
#pragma once

#include <cstdint>
#include <cstring>

namespace kiln {

enum class artifact_loader : uint32_t {
  none = 0,
  cpu_shared_object = 1,       // a shared object exporting kiln_run (skills/kiln_abi.h)
  cuda_cubin_plan = 2,         // an NVRTC cubin with its launch plan beside it (<path>.plan.json)
  cuda_shared_object = 3,      // a shared object exporting kiln_cuda_run (skills/kiln_cuda_abi.h)
  kernelbench_module = 4,      // a bundle: a ModelNew module and its built extensions (cpu, Python)
  kernelbench_module_cuda = 5, // the same bundle, its extensions built for the device (cuda)
};

inline const char* to_string(artifact_loader l) {
  switch (l) {
  case artifact_loader::cpu_shared_object: return "cpu-shared-object";
  case artifact_loader::cuda_cubin_plan: return "cuda-cubin-plan";
  case artifact_loader::cuda_shared_object: return "cuda-shared-object";
  case artifact_loader::kernelbench_module: return "kernelbench-module";
  case artifact_loader::kernelbench_module_cuda: return "kernelbench-module-cuda";
  case artifact_loader::none: break;
  }
  return "none";
}

// The inverse of to_string; none for a name no loader has.
inline artifact_loader artifact_loader_from(const char* name) {
  for (auto l : {artifact_loader::cpu_shared_object, artifact_loader::cuda_cubin_plan,
                 artifact_loader::cuda_shared_object, artifact_loader::kernelbench_module,
                 artifact_loader::kernelbench_module_cuda})
    if (std::strcmp(name, to_string(l)) == 0) return l;
  return artifact_loader::none;
}

// Whether the loader runs in a cuda kernel host (a device context) or a cpu one.
inline bool needs_cuda(artifact_loader l) {
  return l == artifact_loader::cuda_cubin_plan || l == artifact_loader::cuda_shared_object ||
         l == artifact_loader::kernelbench_module_cuda;
}

// Whether the loader runs in a kernel host started with Python (kernel_host/python_host.hpp).
inline bool needs_python(artifact_loader l) {
  return l == artifact_loader::kernelbench_module || l == artifact_loader::kernelbench_module_cuda;
}

} // namespace kiln
