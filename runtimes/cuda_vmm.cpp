// The driver's VMM calls are reached through the runtime's entry-point query, so neither the
// executor nor the kernel host links libcuda itself (a cpu-only machine runs the same binaries).
#include "runtimes/cuda_vmm.hpp"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <unistd.h>

namespace kiln {

namespace {

struct vmm_api {
  CUresult (*get_granularity)(size_t*, const CUmemAllocationProp*,
                              CUmemAllocationGranularity_flags) = nullptr;
  CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                     unsigned long long) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*address_free)(CUdeviceptr, size_t) = nullptr;
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long) = nullptr;
  CUresult (*unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*export_handle)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                            unsigned long long) = nullptr;
  CUresult (*import_handle)(CUmemGenericAllocationHandle*, void*,
                            CUmemAllocationHandleType) = nullptr;
  std::string missing; // the first entry point the driver did not give
};

const vmm_api& api() {
  static const vmm_api a = [] {
    vmm_api v;
    auto get = [&v](const char* name, auto& fn) {
      void* p = nullptr;
      cudaDriverEntryPointQueryResult q{};
      if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
          q != cudaDriverEntryPointSuccess || !p) {
        cudaGetLastError();
        if (v.missing.empty()) v.missing = name;
        return;
      }
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    get("cuMemGetAllocationGranularity", v.get_granularity);
    get("cuMemCreate", v.create);
    get("cuMemRelease", v.release);
    get("cuMemAddressReserve", v.reserve);
    get("cuMemAddressFree", v.address_free);
    get("cuMemMap", v.map);
    get("cuMemUnmap", v.unmap);
    get("cuMemSetAccess", v.set_access);
    get("cuMemExportToShareableHandle", v.export_handle);
    get("cuMemImportFromShareableHandle", v.import_handle);
    return v;
  }();
  return a;
}

error driver_error(const std::string& what, CUresult r) {
  return error{what + ": CUDA driver error " + std::to_string(static_cast<int>(r))};
}

CUmemAllocationProp prop_for(int device) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device;
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return p;
}

expected<int> current_device() {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) {
    cudaGetLastError();
    return error{"no current CUDA device"};
  }
  return d;
}

// Reserves an address range for `bytes` of `h` and maps it read-write for `device`.
status map_region(cuda_vmm_region& r, CUmemGenericAllocationHandle h, int device) {
  const auto& a = api();
  CUdeviceptr va = 0;
  auto bytes = static_cast<size_t>(r.bytes);
  if (auto e = a.reserve(&va, bytes, 0, 0, 0); e != CUDA_SUCCESS)
    return driver_error("cuMemAddressReserve of " + std::to_string(bytes) + " bytes", e);
  if (auto e = a.map(va, bytes, 0, h, 0); e != CUDA_SUCCESS) {
    a.address_free(va, bytes);
    return driver_error("cuMemMap", e);
  }
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = device;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (auto e = a.set_access(va, bytes, &d, 1); e != CUDA_SUCCESS) {
    a.unmap(va, bytes);
    a.address_free(va, bytes);
    return driver_error("cuMemSetAccess", e);
  }
  r.ptr = reinterpret_cast<void*>(va);
  r.handle = static_cast<uint64_t>(h);
  return ok();
}

} // namespace

expected<cuda_vmm_region> cuda_vmm_create(int64_t bytes) {
  const auto& a = api();
  if (!a.missing.empty()) return error{"the CUDA driver has no " + a.missing};
  auto dev = current_device();
  if (!dev) return dev.err();
  auto prop = prop_for(*dev);
  size_t g = 0;
  if (auto e = a.get_granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
      e != CUDA_SUCCESS || g == 0)
    return driver_error("cuMemGetAllocationGranularity", e);
  cuda_vmm_region r;
  r.bytes = (std::max<int64_t>(bytes, 1) + static_cast<int64_t>(g) - 1) / static_cast<int64_t>(g) *
            static_cast<int64_t>(g);
  CUmemGenericAllocationHandle h = 0;
  if (auto e = a.create(&h, static_cast<size_t>(r.bytes), &prop, 0); e != CUDA_SUCCESS)
    return driver_error("device buffers of " + std::to_string(r.bytes) + " bytes (cuMemCreate)", e);
  if (auto st = map_region(r, h, *dev); !st) {
    a.release(h);
    return st.err();
  }
  int fd = -1;
  if (auto e = a.export_handle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
      e != CUDA_SUCCESS || fd < 0) {
    cuda_vmm_release(r);
    return driver_error("cuMemExportToShareableHandle", e);
  }
  r.fd = fd;
  return r;
}

expected<cuda_vmm_region> cuda_vmm_import(int fd, int64_t bytes) {
  const auto& a = api();
  if (!a.missing.empty()) return error{"the CUDA driver has no " + a.missing};
  auto dev = current_device();
  if (!dev) return dev.err();
  CUmemGenericAllocationHandle h = 0;
  if (auto e = a.import_handle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      e != CUDA_SUCCESS)
    return driver_error("cuMemImportFromShareableHandle", e);
  cuda_vmm_region r;
  r.bytes = bytes;
  if (auto st = map_region(r, h, *dev); !st) {
    a.release(h);
    return st.err();
  }
  return r;
}

void cuda_vmm_release(cuda_vmm_region& r) {
  const auto& a = api();
  if (r.ptr) {
    auto va = reinterpret_cast<CUdeviceptr>(r.ptr);
    a.unmap(va, static_cast<size_t>(r.bytes));
    a.address_free(va, static_cast<size_t>(r.bytes));
  }
  if (r.handle) a.release(static_cast<CUmemGenericAllocationHandle>(r.handle));
  if (r.fd >= 0) close(r.fd);
  r = cuda_vmm_region{};
}

} // namespace kiln
