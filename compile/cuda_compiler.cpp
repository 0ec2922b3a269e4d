// Files are written under a temporary name and renamed: an executor never loads half a cubin,
// and concurrent compiles of the same program (two pools on one node) are harmless.
#include "compile/cuda_compiler.hpp"

#include "data/task_hash.hpp"
#include "skills/nvrtc_compiler.hpp"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace kiln {

namespace {

namespace fs = std::filesystem;

status write_atomically(const fs::path& path, const std::string& bytes) {
  static std::atomic<uint64_t> counter{0};
  fs::path tmp = path;
  tmp += ".tmp" + std::to_string(getpid()) + "." + std::to_string(counter++);
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return error{"cannot write " + tmp.string()};
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return error{"cannot rename " + tmp.string() + ": " + ec.message()};
  return ok();
}

} // namespace

expected<cuda_artifact> compile_cuda(const cuda_program& p, const cuda_compile_options& opts) {
  if (opts.cache_dir.empty()) return error{"cuda compile: no cache directory"};
  nvrtc_options no;
  no.arch = opts.arch;
  no.fast_math = p.fast_math;
  no.cache_dir = (fs::path(opts.cache_dir) / "nvrtc").string();
  auto a = compile_nvrtc(p.source, no);
  if (!a) return a.err();
  if (a->cubin.empty()) return error{"NVRTC gave no cubin for arch " + opts.arch};
  std::string plan = to_json(p.plan);
  cuda_artifact out;
  out.key = hash_hex(fnv1a64(a->key + "\n" + plan));
  out.cache_hit = a->cache_hit;
  out.compile_ms = a->compile_ms;
  fs::path dir = fs::path(opts.cache_dir) / "cuda";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return error{"cannot create " + dir.string() + ": " + ec.message()};
  fs::path cubin = dir / (out.key + ".cubin");
  fs::path plan_path = cubin;
  plan_path += ".plan.json";
  out.cubin_path = cubin.string();
  if (fs::exists(cubin) && fs::exists(plan_path)) return out;
  // Plan first: an executor finding the cubin expects its plan beside it.
  if (auto st = write_atomically(plan_path, plan); !st) return st.err();
  if (auto st = write_atomically(cubin, a->cubin); !st) return st.err();
  return out;
}

cpu_compile_options nvcc_options(const cpu_compile_options& host, const std::string& arch) {
  cpu_compile_options o = host;
  o.compiler = KILN_NVCC;
  o.source_extension = ".cu";
  o.flags = "-x cu -O3 -std=c++17 -arch=" + arch + " -shared -Xcompiler -fPIC -cudart shared";
  o.cache_dir = host.cache_dir + "/nvcc";
  o.timeout_s = std::max(host.timeout_s, 120.0); // nvcc takes seconds where g++ takes one
  return o;
}

} // namespace kiln
