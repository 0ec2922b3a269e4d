// NVRTC path of the cuda backend: a generated translation unit -> PTX and cubin for one arch,
// through a content-addressed cache (key: source + options + NVRTC version), in memory and
// optionally on disk, so a program compiles once per machine.
//   cuda_program.source --compile_nvrtc(arch)--> cache hit | nvrtc -> {ptx, cubin} -->
//   cuModuleLoadData
#pragma once

#include "data/expected.hpp"

#include <string>
#include <vector>

namespace kiln {

struct nvrtc_options {
  std::string arch = "sm_90"; // a real arch: NVRTC then also returns a cubin
  bool fast_math = false;     // -use_fast_math: only for programs that ask for reduced precision
  bool line_info = false;     // -lineinfo, for profilers and compute-sanitizer
  std::string cache_dir;      // empty: memory cache only
};

struct nvrtc_artifact {
  std::string ptx;
  std::string cubin; // empty when the arch is virtual (compute_XX)
  std::string log;   // warnings, if any
  std::string key;   // 16 hex digits
  bool cache_hit = false;
  double compile_ms = 0; // 0 on a hit
};

// "13.0": the NVRTC library this process loaded (part of every cache key).
std::string nvrtc_version();
// The option list compile_nvrtc passes, in order.
std::vector<std::string> nvrtc_flags(const nvrtc_options& opts);

// On a compile error the message holds NVRTC's log (truncated to a few KiB). Thread-safe.
expected<nvrtc_artifact> compile_nvrtc(const std::string& source, const nvrtc_options& opts = {});

} // namespace kiln
