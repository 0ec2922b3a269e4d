#include "kernel_host/loaded_kernel.hpp"

#include "kernel_host/python_host.hpp"
#include "runtimes/cpu_runtime.hpp"
#ifdef KILN_HAVE_CUDA
#include "runtimes/cuda_program.hpp"
#endif

#include <optional>

namespace kiln {

struct loaded_kernel::impl {
  std::optional<cpu_program> cpu;
  bool python = false; // the module lives in the interpreter (python_host.cpp)
#ifdef KILN_HAVE_CUDA
  std::optional<cuda_executable> cuda;
#endif
};

loaded_kernel::loaded_kernel(loaded_kernel&&) noexcept = default;
loaded_kernel& loaded_kernel::operator=(loaded_kernel&&) noexcept = default;
loaded_kernel::~loaded_kernel() = default;

expected<loaded_kernel> loaded_kernel::load(artifact_loader loader, const std::string& path,
                                            bool cuda, const std::vector<const void*>& inputs,
                                            const std::vector<const void*>& params,
                                            const std::vector<void*>& outputs) {
  if (loader == artifact_loader::none) return error{"the load command names no artifact loader"};
  if (needs_cuda(loader) != cuda)
    return error{std::string("a ") + to_string(loader) + " artifact cannot run in a " +
                 (cuda ? "cuda" : "cpu") + " kernel host"};
  loaded_kernel k;
  k.impl_ = std::make_unique<impl>();
  switch (loader) {
  case artifact_loader::cpu_shared_object: {
    auto p = cpu_program::load(path);
    if (!p) return p.err();
    k.impl_->cpu.emplace(std::move(*p));
    return k;
  }
  case artifact_loader::kernelbench_module:
  case artifact_loader::kernelbench_module_cuda: {
    if (auto st = python_host_load(path, inputs, params, outputs); !st) return st.err();
    k.impl_->python = true;
    return k;
  }
#ifdef KILN_HAVE_CUDA
  case artifact_loader::cuda_cubin_plan:
  case artifact_loader::cuda_shared_object: {
    auto p = loader == artifact_loader::cuda_cubin_plan ? cuda_executable::load_cubin(path)
                                                        : cuda_executable::load_shared_object(path);
    if (!p) return p.err();
    if (auto st = p->warm_library_steps(inputs, params, outputs); !st) return st.err();
    k.impl_->cuda.emplace(std::move(*p));
    return k;
  }
#endif
  default: break;
  }
  return error{std::string("this build cannot load a ") + to_string(loader) + " artifact"};
}

status loaded_kernel::run(const std::vector<const void*>& inputs,
                          const std::vector<const void*>& params,
                          const std::vector<void*>& outputs) {
  if (impl_->cpu) return impl_->cpu->run(inputs, params, outputs);
  if (impl_->python) return python_host_call();
#ifdef KILN_HAVE_CUDA
  if (impl_->cuda) return impl_->cuda->run(inputs, params, outputs);
#endif
  return error{"nothing loaded"};
}

} // namespace kiln
