// Median-of-trials timing with a CV stopping rule; median because a 2-core shared machine has
// outliers (other compiles, interrupts) that would drag a mean.
#include "executor/timing.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <new>
#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#endif

namespace kiln {

void cache_flusher::flush(int64_t bytes) {
  if (bytes <= 0) return;
  if (bytes != size_) {
    buf_.reset(new (std::nothrow) unsigned char[static_cast<size_t>(bytes)]);
    size_ = buf_ ? bytes : 0;
    if (!buf_) return;
  }
  // Plain stores (not memset: glibc uses non-temporal stores for big sizes, which bypass the
  // cache).
  volatile unsigned char* p = buf_.get();
  unsigned char v = ++tick_;
  for (int64_t i = 0; i < size_; i += 64) p[i] = v;
}

void evict_from_cache(const void* p, int64_t bytes) {
#if defined(__x86_64__) || defined(__i386__)
  if (!p || bytes <= 0) return;
  auto first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  auto last = reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes);
  for (uintptr_t a = first; a < last; a += 64) _mm_clflush(reinterpret_cast<const void*>(a));
  _mm_mfence();
#else
  (void)p;
  (void)bytes;
#endif
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  double hi = v[mid];
  if (v.size() % 2) return hi;
  double lo = *std::max_element(v.begin(), v.begin() + mid);
  return (lo + hi) / 2;
}

double cv_of(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  double mean = 0;
  for (double x : v) mean += x;
  mean /= v.size();
  if (mean <= 0) return 0;
  double var = 0;
  for (double x : v) var += (x - mean) * (x - mean);
  var /= (v.size() - 1);
  return std::sqrt(var) / mean;
}

expected<timing_summary> measure(const timing_options& opts, cache_flusher& flusher,
                                 const untimed_fn& prepare, const timed_fn& run) {
  for (int i = 0; i < opts.warmup; ++i) {
    if (prepare)
      if (auto st = prepare(); !st) return st.err();
    auto r = run();
    if (!r) return r.err();
  }
  timing_summary s;
  // The cap is on the loop's wall time (prepare and flush included): it bounds the job's cost.
  auto start = std::chrono::steady_clock::now();
  while (static_cast<int>(s.samples_ms.size()) < opts.max_trials) {
    if (prepare)
      if (auto st = prepare(); !st) return st.err();
    flusher.flush(opts.flush_bytes);
    auto r = run();
    if (!r) return r.err();
    s.samples_ms.push_back(*r);
    double spent =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    int n = static_cast<int>(s.samples_ms.size());
    if (n >= opts.min_trials &&
        (cv_of(s.samples_ms) <= opts.cv_target || spent >= opts.time_cap_ms))
      break;
  }
  s.t.trials = static_cast<int>(s.samples_ms.size());
  s.t.median_ms = median_of(s.samples_ms);
  s.t.cv = cv_of(s.samples_ms);
  s.t.min_ms =
      s.samples_ms.empty() ? 0 : *std::min_element(s.samples_ms.begin(), s.samples_ms.end());
  return s;
}

timed_fn wall_timed(std::function<status()> call) {
  return [call = std::move(call)]() -> expected<double> {
    auto t0 = std::chrono::steady_clock::now();
    auto st = call();
    auto t1 = std::chrono::steady_clock::now();
    if (!st) return st.err();
    return std::chrono::duration<double, std::milli>(t1 - t0).count();
  };
}

} // namespace kiln
