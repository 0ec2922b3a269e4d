// A job's device region shared between the executor and its kernel host through the CUDA VMM API:
// the executor creates physical memory (cuMemCreate) and exports it as a POSIX file descriptor,
// which travels with the layout command like the cpu backend's memfd; both sides map it at the
// driver's recommended granularity (2 MiB on the H200). A cudaMalloc allocation imported by
// cudaIpcOpenMemHandle ran memory-bound kernels 1.2-3.5x slower on the H200 in the kernel host
// (docs/BENCHMARKS.md, session 8); memory mapped this way runs at the speed of a native one.
//   executor: create --fd--> kernel host: import --> same physical pages, own mapping
#pragma once

#include "data/expected.hpp"

#include <cstdint>

namespace kiln {

struct cuda_vmm_region {
  void* ptr = nullptr;
  int64_t bytes = 0;   // a multiple of the granularity
  int fd = -1;         // the exported handle (the creator's; the importer closes its copy)
  uint64_t handle = 0; // CUmemGenericAllocationHandle
};

// At least `bytes` on the current device, mapped read-write for it, with its fd exported.
expected<cuda_vmm_region> cuda_vmm_create(int64_t bytes);
// Maps `bytes` of the allocation behind `fd` on the current device; the fd may be closed after.
expected<cuda_vmm_region> cuda_vmm_import(int fd, int64_t bytes);
// Unmaps and releases; closes the fd it holds.
void cuda_vmm_release(cuda_vmm_region& r);

} // namespace kiln
