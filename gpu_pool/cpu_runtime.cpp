#include "gpu_pool/cpu_runtime.hpp"

#include "skills/kiln_abi.h"

#include <ATen/ATen.h>
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <dlfcn.h>
#include <mutex>
#include <thread>

namespace kiln {

namespace {

// A persistent pool: workers sleep on a condition variable between jobs; a job is a chunked range
// that workers and the caller drain through an atomic counter. One job at a time: a second caller
// (or a nested call) runs its range inline rather than waiting.
class thread_pool {
public:
  explicit thread_pool(int threads) : threads_(std::max(1, threads)) {
    for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { work(); });
  }
  ~thread_pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }
  int threads() const { return threads_; }

  void run(int64_t n, int64_t grain, kiln_range_fn fn, void* ctx) {
    if (n <= 0) return;
    grain = std::max<int64_t>(1, grain);
    int64_t chunk = std::max(grain, (n + threads_ * 4 - 1) / (threads_ * 4));
    int64_t chunks = (n + chunk - 1) / chunk;
    std::unique_lock<std::mutex> busy(job_mu_, std::try_to_lock);
    if (chunks <= 1 || threads_ == 1 || !busy.owns_lock()) {
      fn(ctx, 0, n);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = {fn, ctx, n, chunk, chunks};
      next_.store(0);
      pending_ = chunks;
      ++generation_;
    }
    wake_.notify_all();
    drain();
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return pending_ == 0; });
  }

private:
  struct job {
    kiln_range_fn fn = nullptr;
    void* ctx = nullptr;
    int64_t n = 0, chunk = 1, chunks = 0;
  };

  void drain() {
    int64_t finished = 0;
    for (int64_t c; (c = next_.fetch_add(1)) < job_.chunks;) {
      int64_t b = c * job_.chunk;
      job_.fn(job_.ctx, b, std::min(job_.n, b + job_.chunk));
      ++finished;
    }
    if (finished) {
      std::lock_guard<std::mutex> lock(mu_);
      pending_ -= finished;
      if (pending_ == 0) done_.notify_all();
    }
  }

  void work() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      drain();
    }
  }

  int threads_;
  std::vector<std::thread> workers_;
  std::mutex job_mu_, mu_;
  std::condition_variable wake_, done_;
  job job_;
  std::atomic<int64_t> next_{0};
  int64_t pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

std::mutex pool_mu;
int pool_threads = 0;
std::unique_ptr<thread_pool> pool;

thread_pool& host_pool() {
  std::lock_guard<std::mutex> lock(pool_mu);
  if (!pool) {
    int n = pool_threads > 0 ? pool_threads : static_cast<int>(std::thread::hardware_concurrency());
    pool = std::make_unique<thread_pool>(std::max(1, n));
  }
  return *pool;
}

// Scratch memory of one kiln_run call, freed when it returns.
struct arena {
  std::mutex mu;
  std::vector<void*> blocks;
  ~arena() {
    for (void* p : blocks) std::free(p);
  }
};

void host_parallel_for(const kiln_host* host, int64_t n, int64_t grain, kiln_range_fn fn,
                       void* ctx) {
  host_pool().run(n, grain, fn, ctx);
}

// Row-major GEMM on LibTorch: each operand is a strided view over the caller's memory.
void host_sgemm(const kiln_host* host, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  auto opts = at::TensorOptions().dtype(at::kFloat);
  auto view = [&](const float* p, int64_t rows, int64_t cols, int64_t ld, bool trans) {
    // Stored as [rows, cols] (or [cols, rows] when transposed) with row stride ld.
    if (!trans) return at::from_blob(const_cast<float*>(p), {rows, cols}, {ld, 1}, opts);
    return at::from_blob(const_cast<float*>(p), {cols, rows}, {ld, 1}, opts).t();
  };
  at::Tensor C = at::from_blob(c, {m, n}, {ldc, 1}, opts);
  if (k <= 0) {
    if (beta == 0)
      C.zero_();
    else
      C.mul_(beta);
    return;
  }
  at::Tensor A = view(a, m, k, lda, trans_a != 0);
  at::Tensor B = view(b, k, n, ldb, trans_b != 0);
  if (beta == 0) {
    at::mm_out(C, A, B);
    if (alpha != 1) C.mul_(alpha);
  } else {
    at::addmm_out(C, C, A, B, beta, alpha);
  }
}

void* host_alloc(const kiln_host* host, int64_t bytes) {
  auto* a = static_cast<arena*>(host->impl);
  std::size_t size = static_cast<std::size_t>(std::max<int64_t>(bytes, 1));
  size = (size + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, size);
  if (!p) return nullptr;
  std::lock_guard<std::mutex> lock(a->mu);
  a->blocks.push_back(p);
  return p;
}

} // namespace

void set_cpu_host_threads(int threads) {
  std::lock_guard<std::mutex> lock(pool_mu);
  pool_threads = threads;
  pool.reset(); // rebuilt at the next use with the new size
}

struct cpu_program::impl {
  void* handle = nullptr;
  kiln_run_fn entry = nullptr;
  ~impl() {
    if (handle) dlclose(handle);
  }
};

expected<cpu_program> cpu_program::load(const std::string& so_path) {
  void* h = dlopen(so_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    return error{"cpu program: dlopen " + so_path + ": " + (e ? e : "unknown error")};
  }
  void* sym = dlsym(h, KILN_ENTRY_NAME);
  if (!sym) {
    dlclose(h);
    return error{"cpu program: " + so_path + " does not export " KILN_ENTRY_NAME};
  }
  // Generated programs also export the ABI version they were built against; free-form source
  // may omit it (kiln_run then checks host->abi_version itself).
  if (auto* v = static_cast<const int*>(dlsym(h, "kiln_abi_version"));
      v && *v != KILN_ABI_VERSION) {
    dlclose(h);
    return error{"cpu program: " + so_path + " built for ABI " + std::to_string(*v) +
                 ", host has " + std::to_string(KILN_ABI_VERSION)};
  }
  cpu_program p;
  p.impl_ = std::make_unique<impl>();
  p.impl_->handle = h;
  p.impl_->entry = reinterpret_cast<kiln_run_fn>(sym);
  return p;
}

cpu_program::cpu_program(cpu_program&&) noexcept = default;
cpu_program& cpu_program::operator=(cpu_program&&) noexcept = default;
cpu_program::~cpu_program() = default;

status cpu_program::run(const std::vector<const void*>& inputs,
                        const std::vector<const void*>& params,
                        const std::vector<void*>& outputs) const {
  if (!impl_ || !impl_->entry) return error{"cpu program: not loaded"};
  arena scratch;
  kiln_host host{};
  host.abi_version = KILN_ABI_VERSION;
  host.num_threads = host_pool().threads();
  host.parallel_for = host_parallel_for;
  host.sgemm = host_sgemm;
  host.alloc = host_alloc;
  host.impl = &scratch;
  int rc = impl_->entry(&host, inputs.data(), params.data(), outputs.data());
  if (rc != 0) return error{"cpu program: kiln_run returned " + std::to_string(rc)};
  return ok();
}

} // namespace kiln
