// Measures how fast a kernel reads and writes device memory that another process allocated,
// against memory its own process allocated: the question behind the honest pool's slower
// memory-bound kernels on the H200 (docs/BENCHMARKS.md, session 6). Three ways to share:
// cudaMalloc + CUDA IPC (what the executor does), and the VMM API (cuMemCreate, a POSIX file
// descriptor inherited by the child) at the allocation granularity the driver recommends.
//   nvcc -O2 -std=c++17 -o probe tools/probe_cuda_sharing.cu -lcuda && ./probe
// Prints one line per (sharing, size): median ms of 10 timed copies and the GB/s they reach.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
void check(CUresult e, const char* what) {
  if (e != CUDA_SUCCESS) {
    const char* s = "?";
    cuGetErrorString(e, &s);
    std::fprintf(stderr, "%s: %s\n", what, s);
    std::exit(1);
  }
}

__global__ void abs_copy(const float4* __restrict__ x, float4* __restrict__ y, size_t n4) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n4;
       i += size_t{gridDim.x} * blockDim.x) {
    float4 v = x[i];
    y[i] = make_float4(fabsf(v.x), fabsf(v.y), fabsf(v.z), fabsf(v.w));
  }
}

const size_t sizes_mb[] = {64, 512, 4096}; // per buffer; 4096 is the abs task's size

// Median over 10 timed copies of `bytes` from base to base + bytes, after 2 untimed ones.
double time_copy(char* base, size_t bytes, const char* label, double flush_ms = 0) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  size_t n4 = bytes / 16;
  std::vector<float> ms;
  for (int r = 0; r < 12; ++r) {
    cudaEventRecord(a);
    abs_copy<<<132 * 16, 256>>>(reinterpret_cast<float4*>(base),
                                reinterpret_cast<float4*>(base + bytes), n4);
    cudaEventRecord(b);
    check(cudaEventSynchronize(b), label);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    if (r >= 2) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  double med = ms[ms.size() / 2];
  std::printf("%-34s %6zu MB  %8.3f ms  %7.0f GB/s%s\n", label, bytes >> 20, med,
              2.0 * bytes / med / 1e6, flush_ms > 0 ? "  (interleaved)" : "");
  std::fflush(stdout);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return med;
}

size_t vmm_granularity() {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = 0;
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t g = 0;
  check(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "granularity");
  return g;
}

char* vmm_map(CUmemGenericAllocationHandle h, size_t bytes) {
  CUdeviceptr va = 0;
  check(cuMemAddressReserve(&va, bytes, 0, 0, 0), "cuMemAddressReserve");
  check(cuMemMap(va, bytes, 0, h, 0), "cuMemMap");
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = 0;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check(cuMemSetAccess(va, bytes, &d, 1), "cuMemSetAccess");
  return reinterpret_cast<char*>(va);
}

int child(const std::string& ipc_hex, int vmm_fd, int rfd, int wfd, size_t region) {
  check(cudaSetDevice(0), "child device");
  check(cudaFree(nullptr), "child context");
  char* own = nullptr;
  check(cudaMalloc(&own, region), "child cudaMalloc");
  for (size_t mb : sizes_mb) time_copy(own, mb << 20, "child, own cudaMalloc");
  cudaFree(own);

  cudaIpcMemHandle_t h;
  for (size_t i = 0; i < sizeof h; ++i)
    reinterpret_cast<unsigned char*>(&h)[i] =
        static_cast<unsigned char>(std::stoi(ipc_hex.substr(2 * i, 2), nullptr, 16));
  char* ipc = nullptr;
  check(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&ipc), h, cudaIpcMemLazyEnablePeerAccess),
        "cudaIpcOpenMemHandle");
  for (size_t mb : sizes_mb) time_copy(ipc, mb << 20, "child, parent's cudaMalloc via IPC");

  CUmemGenericAllocationHandle vh;
  check(cuMemImportFromShareableHandle(&vh, reinterpret_cast<void*>(static_cast<intptr_t>(vmm_fd)),
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
        "cuMemImportFromShareableHandle");
  char* vmm = vmm_map(vh, region);
  for (size_t mb : sizes_mb) time_copy(vmm, mb << 20, "child, parent's cuMemCreate via fd");

  // Interleaved with the parent: it runs a 512 MB memset and synchronizes before each round.
  for (int r = 0; r < 3; ++r) {
    char go = 0;
    if (read(rfd, &go, 1) != 1) return 1;
    time_copy(ipc, size_t{512} << 20, "child, IPC, after parent's work", 1);
    time_copy(vmm, size_t{512} << 20, "child, VMM, after parent's work", 1);
    if (write(wfd, "d", 1) != 1) return 1;
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  size_t region = 2 * (sizes_mb[2] << 20);
  if (argc == 6 && std::string(argv[1]) == "child")
    return child(argv[2], std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]), region);

  check(cuInit(0), "cuInit");
  check(cudaSetDevice(0), "device");
  size_t g = vmm_granularity();
  region = (region + g - 1) / g * g;
  std::printf("VMM recommended granularity: %zu KiB\n", g >> 10);
  char* mine = nullptr;
  check(cudaMalloc(&mine, region), "cudaMalloc");
  check(cudaMemset(mine, 1, region), "memset");
  for (size_t mb : sizes_mb) time_copy(mine, mb << 20, "parent, own cudaMalloc");

  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = 0;
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle vh;
  check(cuMemCreate(&vh, region, &p, 0), "cuMemCreate");
  char* vmm = vmm_map(vh, region);
  check(cudaMemset(vmm, 1, region), "memset vmm");
  for (size_t mb : sizes_mb) time_copy(vmm, mb << 20, "parent, own cuMemCreate");
  int fd = -1;
  check(cuMemExportToShareableHandle(&fd, vh, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
        "export fd");

  cudaIpcMemHandle_t h;
  check(cudaIpcGetMemHandle(&h, mine), "cudaIpcGetMemHandle");
  std::string hex;
  char two[3];
  for (size_t i = 0; i < sizeof h; ++i) {
    std::snprintf(two, sizeof two, "%02x", reinterpret_cast<unsigned char*>(&h)[i]);
    hex += two;
  }
  int to_child[2], from_child[2];
  if (pipe(to_child) || pipe(from_child)) return 1;
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    for (int f : {fd, to_child[0], from_child[1]}) fcntl(f, F_SETFD, 0); // inherited
    std::string a = std::to_string(fd), r = std::to_string(to_child[0]),
                w = std::to_string(from_child[1]);
    execl("/proc/self/exe", argv[0], "child", hex.c_str(), a.c_str(), r.c_str(), w.c_str(),
          nullptr);
    _exit(127);
  }
  char* flush = nullptr;
  check(cudaMalloc(&flush, size_t{512} << 20), "flush buffer");
  for (int r = 0; r < 3; ++r) {
    // The child's first phases take a while; the handshake waits for them.
    cudaMemsetAsync(flush, r, size_t{512} << 20);
    cudaDeviceSynchronize();
    if (write(to_child[1], "g", 1) != 1) break;
    char done = 0;
    if (read(from_child[0], &done, 1) != 1) break;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
