// The timing method shared by kernels and baselines (same code, same process, same flush).
//   prepare (untimed) -> cache flush (untimed) -> run (timed) ... until CV target / cap -> median,
//   CV
#pragma once

#include "data/expected.hpp"
#include "jobs/job.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace kiln {

// Evicts the last-level cache by writing one byte per cache line of a buffer larger than it.
// The buffer is allocated once (first flush) and kept: executors time many jobs.
// The cuda backend overrides flush (executor/cuda_runtime.hpp).
class cache_flusher {
public:
  virtual ~cache_flusher() = default;
  virtual void flush(int64_t bytes);

private:
  std::unique_ptr<unsigned char[]> buf_;
  int64_t size_ = 0;
  unsigned char tick_ = 0;
};

// Writes back and evicts every cache line of [p, p + bytes) from all cache levels (x86 clflush; a
// no-op elsewhere). A buffer flush smaller than the last-level cache does not evict a task's
// inputs (this machine's L3 is 300 MiB): the timing loop evicts the buffers a call reads instead,
// which costs one pass over them rather than one over the whole cache.
void evict_from_cache(const void* p, int64_t bytes);

// A timed region: returns elapsed milliseconds. The cpu backend uses the monotonic clock around a
// synchronous call; the cuda backend will use events and a device synchronize.
using timed_fn = std::function<expected<double>()>;
using untimed_fn = std::function<status()>;

struct timing_summary {
  timings t;
  std::vector<double> samples_ms;
};

double median_of(std::vector<double> v);
double cv_of(const std::vector<double>& v); // stddev / mean; 0 for fewer than 2 samples

// warmup runs, then trials: each one calls prepare (e.g. refresh inputs), flushes, calls run.
// Stops after min_trials once cv <= cv_target, or once the loop ran time_cap_ms (wall), or at
// max_trials.
expected<timing_summary> measure(const timing_options& opts, cache_flusher& flusher,
                                 const untimed_fn& prepare, const timed_fn& run);

// Work a cuda kernel leaves on a stream never joined back shows as device time after its stream
// was done (the drain residual). Hiding work moves the median only on more than half of the
// trials, so the timing is refused once at least 3 trials, and a quarter of all of them, were
// beyond the slack. Counting them, not runs of them, catches a kernel that hides its work on two
// calls of three; a scheduling hiccup that strikes a few trials in a row is for time_kernel's
// second timing to tell apart (it does not strike again).
struct drain_count {
  int over = 0;
  int trials = 0;
  void add(bool beyond_slack) {
    ++trials;
    over += beyond_slack ? 1 : 0;
  }
  bool refuses() const { return over >= 3 && 4 * over >= trials; }
};

// Wraps a synchronous call in the monotonic clock.
timed_fn wall_timed(std::function<status()> call);

} // namespace kiln
