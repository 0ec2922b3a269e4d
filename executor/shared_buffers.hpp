// A job's inputs, params and outputs in one region both sides map: sealed memfd pages (cpu) or one
// device allocation exported as a file descriptor (cuda, runtimes/cuda_vmm.hpp). Each buffer lies
// between guard zones filled with a canary, so a small out-of-bounds write is seen; the executor
// reads and writes the buffers as LibTorch tensors, the kernel host gets offsets.
//   specs --create--> region + tensor views --layout()--> kh_command for the kernel host
#pragma once

#include "data/expected.hpp"
#include "kernel_host/kernel_host_protocol.hpp"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

struct buffer_spec {
  std::string name;
  std::vector<int64_t> shape;
  at::ScalarType type = at::kFloat;
};

// [guard | data | guard]; `data` is what the kernel is given.
struct guarded_buffer {
  at::Tensor storage;
  at::Tensor data;
};

class shared_buffers {
public:
  static expected<std::unique_ptr<shared_buffers>> create(const std::vector<buffer_spec>& inputs,
                                                          const std::vector<buffer_spec>& params,
                                                          const std::vector<buffer_spec>& outputs,
                                                          c10::Device device);
  ~shared_buffers();
  shared_buffers(const shared_buffers&) = delete;
  shared_buffers& operator=(const shared_buffers&) = delete;

  std::vector<guarded_buffer>& inputs() { return in_; }
  std::vector<guarded_buffer>& params() { return par_; }
  std::vector<guarded_buffer>& outputs() { return out_; }
  const std::vector<guarded_buffer>& inputs() const { return in_; }
  const std::vector<guarded_buffer>& params() const { return par_; }
  const std::vector<guarded_buffer>& outputs() const { return out_; }

  // The layout command for the kernel host; memfd() travels with it (cpu: the memfd; cuda: the
  // device allocation's fd).
  const kh_command& layout() const { return *layout_; }
  int memfd() const { return memfd_; }
  int64_t bytes() const { return bytes_; }

  // Names the first buffer whose guard zone was overwritten ("output 'y'"), or "".
  std::string first_broken_guard(const std::vector<std::string>& in_names,
                                 const std::vector<std::string>& par_names,
                                 const std::vector<std::string>& out_names) const;
  // Refills every guard zone with its canary.
  void reset_guards();

private:
  shared_buffers() = default;
  std::vector<guarded_buffer> in_, par_, out_;
  std::unique_ptr<kh_command> layout_;
  int memfd_ = -1;
  void* base_ = nullptr;
  int64_t bytes_ = 0;
  bool cuda_ = false;
  uint64_t cuda_handle_ = 0; // the region's allocation (cuda_vmm.hpp); memfd_ is its exported fd
};

// Guard zone size in elements, each side of every buffer.
constexpr int64_t guard_elems = 1024;

} // namespace kiln
