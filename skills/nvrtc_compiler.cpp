#include "skills/nvrtc_compiler.hpp"

#include "data/task_hash.hpp"

#include <nvrtc.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <unistd.h>

namespace kiln {

namespace {

namespace fs = std::filesystem;

constexpr std::size_t max_log_bytes = 4096;
constexpr std::size_t max_memory_entries = 4096; // the memory cache forgets everything past this

std::mutex cache_mu;
std::map<std::string, nvrtc_artifact>& memory_cache() {
  static std::map<std::string, nvrtc_artifact> c;
  return c;
}

std::string truncate_log(std::string log) {
  if (log.size() > max_log_bytes) log = log.substr(0, max_log_bytes) + "\n... (log truncated)";
  return log;
}

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  out = s.str();
  return static_cast<bool>(in) || in.eof();
}

// Write-then-rename, so concurrent compiles of one key never expose a half-written file.
void write_atomically(const std::string& path, const std::string& bytes) {
  static std::atomic<uint64_t> counter{0};
  std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter++);
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::remove(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) std::remove(tmp.c_str());
}

std::string program_log(nvrtcProgram prog) {
  size_t n = 0;
  if (nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS || n <= 1) return "";
  std::string log(n, '\0');
  nvrtcGetProgramLog(prog, log.data());
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

} // namespace

std::string nvrtc_version() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<std::string> nvrtc_flags(const nvrtc_options& opts) {
  std::vector<std::string> f{"-arch=" + opts.arch, "--std=c++17", "-default-device"};
  if (opts.fast_math) f.push_back("-use_fast_math");
  if (opts.line_info) f.push_back("-lineinfo");
  return f;
}

expected<nvrtc_artifact> compile_nvrtc(const std::string& source, const nvrtc_options& opts) {
  auto flags = nvrtc_flags(opts);
  std::string keyed = source;
  keyed += '\0';
  keyed += "nvrtc " + nvrtc_version();
  for (const auto& f : flags) {
    keyed += '\0';
    keyed += f;
  }
  std::string key = hash_hex(fnv1a64(keyed));
  {
    std::lock_guard<std::mutex> lock(cache_mu);
    auto it = memory_cache().find(key);
    if (it != memory_cache().end()) {
      nvrtc_artifact hit = it->second;
      hit.cache_hit = true;
      hit.compile_ms = 0;
      return hit;
    }
  }
  bool real_arch = opts.arch.rfind("sm_", 0) == 0;
  std::string base = opts.cache_dir.empty() ? "" : (fs::path(opts.cache_dir) / key).string();
  if (!base.empty()) {
    nvrtc_artifact a;
    a.key = key;
    if (read_file(base + ".ptx", a.ptx) && (!real_arch || read_file(base + ".cubin", a.cubin)) &&
        !a.ptx.empty()) {
      a.cache_hit = true;
      std::lock_guard<std::mutex> lock(cache_mu);
      if (memory_cache().size() >= max_memory_entries) memory_cache().clear();
      memory_cache()[key] = a;
      return a;
    }
  }
  auto start = std::chrono::steady_clock::now();
  nvrtcProgram prog = nullptr;
  if (auto rc = nvrtcCreateProgram(&prog, source.c_str(), "kiln_kernels.cu", 0, nullptr, nullptr);
      rc != NVRTC_SUCCESS)
    return error{std::string("nvrtc: cannot create program: ") + nvrtcGetErrorString(rc)};
  std::vector<const char*> argv;
  for (const auto& f : flags) argv.push_back(f.c_str());
  nvrtcResult rc = nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
  nvrtc_artifact a;
  a.key = key;
  a.log = program_log(prog);
  if (rc != NVRTC_SUCCESS) {
    nvrtcDestroyProgram(&prog);
    if (!base.empty()) {
      std::error_code ec;
      fs::create_directories(opts.cache_dir, ec);
      write_atomically(base + ".log", a.log);
    }
    return error{std::string("nvrtc compile failed (") + nvrtcGetErrorString(rc) + ", key " + key +
                 "):\n" + truncate_log(a.log)};
  }
  size_t n = 0;
  if (nvrtcGetPTXSize(prog, &n) == NVRTC_SUCCESS && n > 0) {
    a.ptx.resize(n);
    nvrtcGetPTX(prog, a.ptx.data());
    while (!a.ptx.empty() && a.ptx.back() == '\0') a.ptx.pop_back();
  }
  if (real_arch && nvrtcGetCUBINSize(prog, &n) == NVRTC_SUCCESS && n > 0) {
    a.cubin.resize(n);
    nvrtcGetCUBIN(prog, a.cubin.data());
  }
  nvrtcDestroyProgram(&prog);
  if (a.ptx.empty() || (real_arch && a.cubin.empty()))
    return error{"nvrtc: compiled but produced no code (key " + key + ")"};
  a.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!base.empty()) {
    std::error_code ec;
    fs::create_directories(opts.cache_dir, ec);
    if (!ec) {
      if (real_arch) write_atomically(base + ".cubin", a.cubin);
      write_atomically(base + ".ptx", a.ptx); // last: its presence marks a complete entry
    }
  }
  std::lock_guard<std::mutex> lock(cache_mu);
  if (memory_cache().size() >= max_memory_entries) memory_cache().clear();
  memory_cache()[key] = a;
  return a;
}

} // namespace kiln
