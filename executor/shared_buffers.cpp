// Offsets are 256-byte aligned (what cudaMalloc gives, and more than float4 kernels need); the
// memfd is sealed against shrinking, so the kernel host cannot truncate pages under the executor.
#include "executor/shared_buffers.hpp"

#ifdef KILN_HAVE_CUDA
#include "runtimes/cuda_vmm.hpp"
#endif

#include <ATen/ATen.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace kiln {

namespace {

constexpr float canary_f = -1.2345678e-37f;
constexpr int64_t canary_i = std::numeric_limits<int64_t>::min() + 0x5eed;

int64_t numel(const buffer_spec& s) {
  int64_t n = 1;
  for (auto d : s.shape) n *= d;
  return n;
}

int64_t align(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

void fill_canary(const at::Tensor& t) {
  if (t.scalar_type() == at::kLong)
    t.fill_(canary_i);
  else
    t.fill_(canary_f);
}

bool canary_intact(const at::Tensor& t) {
  if (t.scalar_type() == at::kLong) return t.eq(canary_i).all().item<bool>();
  return t.eq(canary_f).all().item<bool>();
}

at::Tensor head_of(const guarded_buffer& g) { return g.storage.narrow(0, 0, guard_elems); }
at::Tensor tail_of(const guarded_buffer& g) {
  return g.storage.narrow(0, guard_elems + g.data.numel(), guard_elems);
}

} // namespace

expected<std::unique_ptr<shared_buffers>>
shared_buffers::create(const std::vector<buffer_spec>& inputs,
                       const std::vector<buffer_spec>& params,
                       const std::vector<buffer_spec>& outputs, c10::Device device) {
  std::unique_ptr<shared_buffers> b(new shared_buffers());
  size_t n = inputs.size() + params.size() + outputs.size();
  if (n > kh_max_buffers)
    return error{"a task with " + std::to_string(n) + " tensors; the limit is " +
                 std::to_string(kh_max_buffers)};
  b->layout_ = std::make_unique<kh_command>();
  auto& lay = *b->layout_;
  lay.op = static_cast<uint32_t>(kh_op::layout);
  lay.inputs = static_cast<uint32_t>(inputs.size());
  lay.params = static_cast<uint32_t>(params.size());
  lay.outputs = static_cast<uint32_t>(outputs.size());
  std::vector<int64_t> offsets;
  int64_t off = 0;
  size_t k = 0;
  for (const auto* group : {&inputs, &params, &outputs})
    for (const auto& s : *group) {
      int64_t elem = s.type == at::kLong ? 8 : 4;
      int64_t storage = (numel(s) + 2 * guard_elems) * elem;
      offsets.push_back(off);
      lay.buffers[k].offset = static_cast<uint64_t>(off + guard_elems * elem);
      lay.buffers[k].bytes = static_cast<uint64_t>(numel(s) * elem);
      ++k;
      off = align(off + storage, 256);
    }
  b->bytes_ = align(std::max<int64_t>(off, 4096), 4096);
  lay.region_bytes = static_cast<uint64_t>(b->bytes_);
  if (device.is_cpu()) {
    int fd = static_cast<int>(
        syscall(SYS_memfd_create, "kiln-job-buffers", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (fd < 0) return error{std::string("memfd_create: ") + std::strerror(errno)};
    if (ftruncate(fd, b->bytes_) != 0) {
      close(fd);
      return error{"job buffers of " + std::to_string(b->bytes_) +
                   " bytes: " + std::strerror(errno)};
    }
    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    void* p =
        mmap(nullptr, static_cast<size_t>(b->bytes_), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      close(fd);
      return error{std::string("mmap of the job buffers: ") + std::strerror(errno)};
    }
    b->memfd_ = fd;
    b->base_ = p;
  } else {
#ifdef KILN_HAVE_CUDA
    auto r = cuda_vmm_create(b->bytes_);
    if (!r) return r.err();
    b->base_ = r->ptr;
    b->bytes_ = r->bytes; // rounded up to the mapping granularity
    b->memfd_ = r->fd;
    b->cuda_handle_ = r->handle;
    b->cuda_ = true;
    lay.cuda = 1;
    lay.region_bytes = static_cast<uint64_t>(b->bytes_);
#else
    return error{"this build has no cuda backend"};
#endif
  }
  k = 0;
  auto* base = static_cast<char*>(b->base_);
  for (auto [group, dst] :
       {std::pair{&inputs, &b->in_}, std::pair{&params, &b->par_}, std::pair{&outputs, &b->out_}})
    for (const auto& s : *group) {
      auto opts = at::TensorOptions().dtype(s.type).device(device);
      guarded_buffer g;
      g.storage = at::from_blob(base + offsets[k++], {numel(s) + 2 * guard_elems}, opts);
      g.data = g.storage.narrow(0, guard_elems, numel(s)).view(s.shape);
      dst->push_back(std::move(g));
    }
  b->reset_guards(); // the data between them is written before every call
  return b;
}

shared_buffers::~shared_buffers() {
  in_.clear();
  par_.clear();
  out_.clear();
#ifdef KILN_HAVE_CUDA
  if (cuda_) {
    cuda_vmm_region r{base_, bytes_, memfd_, cuda_handle_};
    cuda_vmm_release(r);
    return;
  }
#endif
  if (memfd_ >= 0) {
    munmap(base_, static_cast<size_t>(bytes_));
    close(memfd_);
  }
}

std::string shared_buffers::first_broken_guard(const std::vector<std::string>& in_names,
                                               const std::vector<std::string>& par_names,
                                               const std::vector<std::string>& out_names) const {
  auto check = [](const std::vector<guarded_buffer>& v, const std::vector<std::string>& names,
                  const char* what) -> std::string {
    for (size_t i = 0; i < v.size(); ++i)
      if (!canary_intact(head_of(v[i])) || !canary_intact(tail_of(v[i])))
        return std::string(what) + " '" + (i < names.size() ? names[i] : "?") + "'";
    return {};
  };
  for (auto s : {check(out_, out_names, "output"), check(in_, in_names, "input"),
                 check(par_, par_names, "param")})
    if (!s.empty()) return s;
  return {};
}

void shared_buffers::reset_guards() {
  for (const auto* v : {&in_, &par_, &out_})
    for (const auto& g : *v) {
      fill_canary(head_of(g));
      fill_canary(tail_of(g));
    }
}

} // namespace kiln
