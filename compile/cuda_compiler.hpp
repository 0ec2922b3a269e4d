// Compile stage of the cuda backend: a generated program (source + launch plan) -> NVRTC cubin
// for the pool's arch, written with its plan where executors can load it.
//   cuda_program --compile_nvrtc (cached)--> <cache>/cuda/<key>.cubin + <key>.cubin.plan.json
#pragma once

#include "compile/cpu_compiler.hpp"
#include "data/expected.hpp"
#include "skills/codegen_cuda.hpp"

#include <string>

namespace kiln {

struct cuda_compile_options {
  std::string cache_dir;      // required: executors read artifacts from here
  std::string arch = "sm_90"; // the devices' arch (cuda_arch_of)
};

struct cuda_artifact {
  std::string cubin_path; // the plan lies beside it (cuda_runtime.hpp)
  std::string key;        // 16 hex digits over cubin key + plan
  bool cache_hit = false;
  double compile_ms = 0; // 0 on a hit
};

// On a compile error the message holds NVRTC's log. Thread-safe.
expected<cuda_artifact> compile_cuda(const cuda_program& p, const cuda_compile_options& opts);

// Free-form cuda source (submission/source_program.hpp) goes through compile_cpu with these
// options: nvcc to a shared object linked against the shared cudart, so the program uses the
// executor's runtime and its current device. Cache under host.cache_dir/nvcc, headers from
// host.include_dir.
cpu_compile_options nvcc_options(const cpu_compile_options& host, const std::string& arch);

} // namespace kiln
