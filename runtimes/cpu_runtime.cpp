#include "runtimes/cpu_runtime.hpp"

#include "skills/kiln_abi.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <dlfcn.h>
#include <mutex>
#include <thread>

// The CBLAS entry point, declared here: its C ABI is fixed, while Debian's cblas.h is an
// alternatives link that an unpacked package kit lacks.
extern "C" void cblas_sgemm(int layout, int trans_a, int trans_b, int m, int n, int k, float alpha,
                            const float* a, int lda, const float* b, int ldb, float beta, float* c,
                            int ldc);
namespace {
constexpr int cblas_row_major = 101, cblas_no_trans = 111, cblas_trans = 112;
}

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

// Row-major GEMM from the system BLAS: the library LibTorch's own CPU GEMM calls, so a kernel's
// library GEMM runs the same code as the eager baseline's.
void host_sgemm(const kiln_host* host, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) { // BLAS leaves C untouched when k = 0 only if beta = 1: scale it here
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? 0.0f : c[i * ldc + j] * beta;
    return;
  }
  cblas_sgemm(cblas_row_major, trans_a ? cblas_trans : cblas_no_trans,
              trans_b ? cblas_trans : cblas_no_trans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
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

void start_cpu_host_threads(int threads) {
  {
    std::lock_guard<std::mutex> lock(pool_mu);
    pool_threads = threads;
    pool.reset();
  }
  host_pool(); // now: once the sandbox is in force no thread can be created
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
  if (rc != 0) return error{"kiln_run returned non-zero"};
  return ok();
}

} // namespace kiln
