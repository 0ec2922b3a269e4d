// Runtime-API implementation of the executor's (trusted) cuda side: device facts, the context
// the reference and the flush run in, and the event clock of eager baselines. Generated or
// free-form code never runs in this process (runtimes/cuda_program.hpp is the kernel host's side).
#include "executor/cuda_runtime.hpp"

#include <cuda_runtime.h>
// Debian's LibTorch is cpu-only but ships c10/cuda headers that cannot be included; a CUDA
// LibTorch has them whole.
#if __has_include(<c10/cuda/impl/cuda_cmake_macros.h>)
#include <c10/cuda/CUDACachingAllocator.h>
#define KILN_TORCH_CUDA 1
#endif

#include <algorithm>
#include <cstring>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

namespace kiln {

namespace {

std::string cuda_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

error cuda_error(const std::string& what, cudaError_t e) {
  return error{what + ": " + cuda_text(e)};
}

int& opened_device() {
  static int ordinal = -1;
  return ordinal;
}

} // namespace

expected<int> cuda_device_count() {
  int n = 0;
  if (auto e = cudaGetDeviceCount(&n); e != cudaSuccess) return cuda_error("no CUDA device", e);
  if (n < 1) return error{"no CUDA device"};
  return n;
}

expected<cuda_device_info> cuda_device_query(int ordinal) {
  cuda_device_info d;
  d.ordinal = ordinal;
  cudaDeviceProp prop{};
  if (auto e = cudaGetDeviceProperties(&prop, ordinal); e != cudaSuccess)
    return cuda_error("device " + std::to_string(ordinal), e);
  d.name = prop.name;
  d.sm_major = prop.major;
  d.sm_minor = prop.minor;
  d.l2_bytes = prop.l2CacheSize;
  d.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  int v = 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, ordinal) == cudaSuccess) d.sm_clock_khz = v;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMemoryClockRate, ordinal) == cudaSuccess)
    d.memory_clock_khz = v;
  cudaGetLastError();
  return d;
}

expected<std::vector<cuda_device_info>> cuda_probe_devices() {
  int fds[2];
  if (pipe(fds) != 0) return error{"cuda probe: pipe failed"};
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return error{"cuda probe: fork failed"};
  }
  if (pid == 0) {
    close(fds[0]);
    std::string out;
    auto n = cuda_device_count();
    if (!n) {
      out = "E\t" + n.message() + "\n";
    } else {
      for (int i = 0; i < *n; ++i) {
        auto d = cuda_device_query(i);
        if (!d) {
          out = "E\t" + d.message() + "\n";
          break;
        }
        out += "D\t" + std::to_string(d->ordinal) + "\t" + std::to_string(d->sm_major) + "\t" +
               std::to_string(d->sm_minor) + "\t" + std::to_string(d->l2_bytes) + "\t" +
               std::to_string(d->memory_bytes) + "\t" + std::to_string(d->sm_clock_khz) + "\t" +
               std::to_string(d->memory_clock_khz) + "\t" + d->name + "\n";
      }
    }
    for (size_t off = 0; off < out.size();) {
      ssize_t w = write(fds[1], out.data() + off, out.size() - off);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t r; (r = read(fds[0], buf, sizeof buf)) > 0;)
    text.append(buf, static_cast<size_t>(r));
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  std::vector<cuda_device_info> devices;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("E\t", 0) == 0) return error{line.substr(2)};
    std::istringstream f(line);
    std::string tag;
    cuda_device_info d;
    f >> tag >> d.ordinal >> d.sm_major >> d.sm_minor >> d.l2_bytes >> d.memory_bytes >>
        d.sm_clock_khz >> d.memory_clock_khz;
    std::getline(f >> std::ws, d.name);
    if (tag == "D" && f) devices.push_back(d);
  }
  if (devices.empty())
    return error{"cuda probe: no device reported" +
                 (WIFSIGNALED(st)
                      ? " (the probe died of signal " + std::to_string(WTERMSIG(st)) + ")"
                      : std::string())};
  return devices;
}

std::string cuda_arch_of(const cuda_device_info& d) {
  return "sm_" + std::to_string(d.sm_major) + std::to_string(d.sm_minor);
}

std::string cuda_pci_bus_id(int ordinal) {
  char buf[32] = "";
  if (cudaDeviceGetPCIBusId(buf, sizeof buf, ordinal) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return buf;
}

status cuda_open_device(int ordinal) {
  int& d = opened_device();
  if (d == ordinal) return ok();
  if (d >= 0) return error{"this process already uses device " + std::to_string(d)};
  if (auto e = cudaSetDevice(ordinal); e != cudaSuccess)
    return cuda_error("cudaSetDevice(" + std::to_string(ordinal) + ")", e);
  if (auto e = cudaFree(nullptr); e != cudaSuccess) return cuda_error("CUDA context", e);
  d = ordinal;
  return ok();
}

void cuda_trim_cached_memory() {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return;
#ifdef KILN_TORCH_CUDA
  if (free_bytes < total_bytes / 4) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

status cuda_synchronize(bool* sticky) {
  if (sticky) *sticky = false;
  cudaError_t e = cudaGetLastError();
  cudaError_t s = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = s;
  if (e == cudaSuccess) return ok();
  // A second synchronize fails again only when the context itself is broken.
  cudaGetLastError();
  if (sticky) *sticky = cudaDeviceSynchronize() != cudaSuccess;
  return cuda_error("kernel", e);
}

timed_fn cuda_timed(std::function<status()> call) {
  struct events {
    cudaEvent_t start = nullptr, stop = nullptr;
    events() {
      cudaEventCreate(&start);
      cudaEventCreate(&stop);
    }
    ~events() {
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
    }
  };
  auto ev = std::make_shared<events>();
  return [call = std::move(call), ev]() -> expected<double> {
    cudaEventRecord(ev->start, nullptr);
    auto st = call();
    cudaEventRecord(ev->stop, nullptr);
    auto sync = cuda_synchronize();
    if (!st) return st.err();
    if (!sync) return sync.err();
    float ms = 0;
    if (auto e = cudaEventElapsedTime(&ms, ev->start, ev->stop); e != cudaSuccess)
      return cuda_error("event timing", e);
    return static_cast<double>(ms);
  };
}

void cuda_cache_flusher::flush(int64_t bytes) {
  if (opened_device() < 0) return;
  if (size_ == 0) {
    auto info = cuda_device_query(opened_device());
    int64_t want = std::max<int64_t>(bytes, info ? 2 * info->l2_bytes : int64_t{256} << 20);
    if (cudaMalloc(&buf_, static_cast<size_t>(want)) != cudaSuccess) {
      cudaGetLastError();
      buf_ = nullptr;
      size_ = -1; // no flush rather than a failure per trial
      return;
    }
    size_ = want;
  }
  if (size_ > 0) cudaMemsetAsync(buf_, ++tick_, static_cast<size_t>(size_), nullptr);
}

cuda_cache_flusher::~cuda_cache_flusher() {
  if (buf_) cudaFree(buf_);
}

} // namespace kiln
