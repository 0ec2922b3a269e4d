// Child side of the executor protocol. Order matters at start-up: the sandbox is applied before any
// thread exists (namespaces and landlock bind the calling thread and its future children only).
#include "gpu_pool/executor.hpp"

#include "data/reference.hpp"
#include "data/task_check.hpp"
#include "data/task_hash.hpp"
#include "gpu_pool/cpu_runtime.hpp"
#include "gpu_pool/frame.hpp"
#include "gpu_pool/sandbox.hpp"
#include "gpu_pool/timing.hpp"
#include "gpu_pool/verify.hpp"
#ifdef KILN_HAVE_CUDA
#include "gpu_pool/cuda_runtime.hpp"
#endif

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <list>
#include <unistd.h>

namespace kiln {

// Loaded programs, most recently used first; keyed by path + cache key (a rewritten path is a new
// program).
template <class Program>
class program_cache {
public:
  explicit program_cache(size_t size) : size_(size) {}
  expected<Program*> get(const artifact_ref& a) {
    std::string k = a.path + "#" + a.key;
    for (auto it = programs_.begin(); it != programs_.end(); ++it)
      if (it->first == k) {
        programs_.splice(programs_.begin(), programs_, it);
        return &programs_.front().second;
      }
    auto p = Program::load(a.path);
    if (!p) return p.err();
    programs_.emplace_front(k, std::move(*p));
    while (programs_.size() > size_) programs_.pop_back();
    return &programs_.front().second;
  }

private:
  size_t size_;
  std::list<std::pair<std::string, Program>> programs_;
};

struct job_runner::impl {
  int cuda_device = -1;
  std::unique_ptr<device_clocks> clocks;
  program_cache<cpu_program> cpu_programs;
  std::string params_key;
  std::vector<at::Tensor> params;
  std::unique_ptr<cache_flusher> flusher;
  run_device dev;
#ifdef KILN_HAVE_CUDA
  program_cache<cuda_executable> cuda_programs;
#endif

  impl(size_t cache_size, int cuda)
      : cuda_device(cuda), cpu_programs(cache_size)
#ifdef KILN_HAVE_CUDA
        ,
        cuda_programs(cache_size)
#endif
  {
#ifdef KILN_HAVE_CUDA
    if (cuda_device >= 0) {
      flusher = std::make_unique<cuda_cache_flusher>();
      dev.device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(cuda_device));
      dev.clock = cuda_timed;
    }
#endif
    if (!flusher) flusher = std::make_unique<cache_flusher>();
    dev.flusher = flusher.get();
  }

  const char* backend() const { return cuda_device >= 0 ? "cuda" : "cpu"; }

  // Params are fixed per task instance: drawn once, reused while jobs stay on the same task.
  const std::vector<at::Tensor>& params_for(const task& t) {
    uint64_t seed = default_param_seed(t);
    std::string k = hash_hex(content_hash(t)) + ":" + std::to_string(seed);
    if (k != params_key) {
      params = make_params(t, seed, dev.device);
      params_key = k;
    }
    return params;
  }

  // verify_call finishes the kernel's work before it returns; timed_call only enqueues it on
  // devices with a clock that waits (cuda).
  check_result run(const job& j) {
    task t = j.spec;
    if (auto st = check_task(t); !st) return failed("bad task: " + st.message());
    if (j.kind != job_kind::baseline && j.artifact.backend != backend())
      return failed("backend '" + j.artifact.backend + "' is not served by this executor (" +
                    backend() + ")");
    const auto& ps = params_for(t);
    if (j.kind == job_kind::baseline) {
      auto tm = time_reference(t, ps, j.timing, dev);
      note_clocks(tm);
      return tm;
    }

    kernel_call verify_call, timed_call;
    if (cuda_device < 0) {
      auto prog = cpu_programs.get(j.artifact);
      if (!prog) return failed(prog.message());
      const cpu_program* p = *prog;
      verify_call = [p](const std::vector<const void*>& in, const std::vector<const void*>& par,
                        const std::vector<void*>& out) { return p->run(in, par, out); };
      timed_call = verify_call;
    } else {
#ifdef KILN_HAVE_CUDA
      auto prog = cuda_programs.get(j.artifact);
      if (!prog) return failed(prog.message());
      cuda_executable* p = *prog;
      timed_call = [p](const std::vector<const void*>& in, const std::vector<const void*>& par,
                       const std::vector<void*>& out) { return p->run(in, par, out); };
      verify_call = [p](const std::vector<const void*>& in, const std::vector<const void*>& par,
                        const std::vector<void*>& out) -> status {
        auto st = p->run(in, par, out);
        auto sync = cuda_synchronize();
        return st ? sync : st;
      };
#endif
    }
    if (j.kind == job_kind::time) {
      auto tm = time_kernel(t, ps, timed_call, j.timing, dev);
      note_clocks(tm);
      check_roofline(t, ps, j, verify_call, tm);
      return tm;
    }
    if (j.verify.checks < 1)
      return failed("verify.checks must be at least 1"); // else nothing is checked
    auto v = verify_kernel(t, ps, verify_call, j.verify, dev.device);
    if (j.kind == job_kind::verify || v.kind != outcome_kind::correct) return v;
    auto tm = time_kernel(t, ps, timed_call, j.timing, dev);
    if (tm.kind == outcome_kind::correct) tm.message = v.message;
    note_clocks(tm);
    check_roofline(t, ps, j, verify_call, tm);
    return tm;
  }

  // Clocks right after the last trial, while the device still runs at its loaded clocks; a
  // throttled timing is kept (it is what the device did) but said so.
  void note_clocks(check_result& tm) {
    if (!clocks || !tm.time) return;
    tm.time->clocks = clocks->sample();
    if (tm.time->clocks.throttled)
      tm.message += (tm.message.empty() ? "" : "; ") +
                    std::string("timed while clocks were held down (") + tm.time->clocks.throttle +
                    ", SM " + std::to_string(tm.time->clocks.sm_mhz) + " MHz)";
  }

  // Streaming bandwidth of this device (read + write of one buffer in place: no write-allocate
  // or non-temporal-store artefacts of a copy), by the same clock the kernels get.
  double copy_gbps = -1;
  double bandwidth_gbps(const job& j) {
    if (j.timing.roofline_gbps > 0) return j.timing.roofline_gbps;
    if (copy_gbps >= 0) return copy_gbps;
    copy_gbps = 0;
    const int64_t n = int64_t{64} << 20; // 256 MiB of floats: far beyond any cache
    auto opts = at::TensorOptions().dtype(at::kFloat).device(dev.device);
    auto buf = at::ones({n}, opts);
    timing_options o;
    o.warmup = 1;
    o.min_trials = 3;
    o.max_trials = 10;
    o.cv_target = 0.02;
    o.time_cap_ms = 500;
    o.flush_bytes = 0;
    auto run = dev.clock([&]() -> status {
      buf.add_(1.0f);
      return ok();
    });
    // A host's last-level cache can hold much of the buffer (300 MiB of L3 here): from memory.
    auto prepare = [&]() -> status {
      if (buf.is_cpu()) evict_from_cache(buf.data_ptr(), n * 4);
      return ok();
    };
    if (auto m = measure(o, *dev.flusher, prepare, run); m && m->t.median_ms > 0)
      copy_gbps = 2.0 * static_cast<double>(n) * 4 / (m->t.median_ms * 1e6);
    return copy_gbps;
  }

  // A kernel timed at more than twice the copy bandwidth over its compulsory bytes is physically
  // implausible: something is cached or skipped. Re-verify on fresh inputs; keep but flag it.
  void check_roofline(const task& t, const std::vector<at::Tensor>& ps, const job& j,
                      const kernel_call& verify_call, check_result& tm) {
    if (tm.kind != outcome_kind::correct || !tm.time) return;
    double gbps = bandwidth_gbps(j);
    if (gbps <= 0) return;
    double bound_ms = static_cast<double>(compulsory_bytes(t)) / (gbps * 1e6);
    tm.time->roofline_ms = bound_ms;
    if (tm.time->median_ms >= 0.5 * bound_ms) return;
    char what[160];
    std::snprintf(what, sizeof what,
                  "timed at %.4g ms, beyond the bandwidth roofline of %.4g ms (%.0f GB/s)",
                  tm.time->median_ms, bound_ms, gbps);
    verify_options again;
    again.checks = std::max(5, j.verify.checks);
    auto v = verify_kernel(t, ps, verify_call, again, dev.device);
    if (v.kind != outcome_kind::correct) {
      v.message = std::string(what) + ", and re-verification failed: " + v.message;
      tm = v;
      return;
    }
    tm.time->beyond_roofline = true;
    tm.message += (tm.message.empty() ? "" : "; ") + std::string(what) +
                  ": re-verified on fresh inputs, flagged";
  }

  // A kernel fault (illegal address, launch failure) leaves the CUDA context unusable.
  bool device_damaged() {
#ifdef KILN_HAVE_CUDA
    if (cuda_device >= 0) {
      bool sticky = false;
      (void)cuda_synchronize(&sticky);
      return sticky;
    }
#endif
    return false;
  }

  static check_result failed(std::string m) {
    check_result r;
    r.kind = outcome_kind::runtime_error;
    r.message = std::move(m);
    return r;
  }
};

job_runner::job_runner(int program_cache, int cuda_device, std::unique_ptr<device_clocks> clocks)
    : impl_(std::make_unique<impl>(static_cast<size_t>(std::max(1, program_cache)), cuda_device)) {
  impl_->clocks = std::move(clocks);
}
job_runner::~job_runner() = default;

outcome job_runner::run(const job& j) {
  auto t0 = std::chrono::steady_clock::now();
  outcome o = make_outcome(j, outcome_kind::runtime_error);
  try {
    auto r = impl_->run(j);
    o.kind = r.kind;
    o.message = std::move(r.message);
    o.error = r.error;
    o.time = r.time;
    o.retire = r.retire;
  } catch (const std::exception& e) {
    // c10::Error from a LibTorch call (bad shapes, out of memory) lands here.
    o.kind = outcome_kind::runtime_error;
    std::string what = e.what();
    o.message = "exception: " + what.substr(0, what.find('\n'));
  }
  if (impl_->device_damaged()) {
    o.retire = true;
    o.message += " (the CUDA context is damaged: this executor retires)";
  }
  o.device_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return o;
}

namespace {

int count_threads() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  return -1;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& w : v) s += (s.empty() ? "" : "; ") + w;
  return s;
}

} // namespace

int executor_main(const executor_args& args) {
  // Generated code may print: stdout must never share the protocol channel.
  fflush(stdout);
  dup2(STDERR_FILENO, STDOUT_FILENO);

  int threads_before = count_threads();
  sandbox_options so;
  so.scratch_dir = args.scratch;
  so.address_space_mib = args.address_space_mib;
  so.file_size_mib = args.file_size_mib;
  so.isolate_network = args.isolate_network;
  so.restrict_fs = args.restrict_fs;
  so.drop_privileges = args.drop_privileges;
  std::vector<std::string> notes;
  std::unique_ptr<device_clocks> clocks =
      args.cuda_device >= 0 ? nullptr : device_clocks::open_cpu();
  if (args.cuda_device >= 0) {
#ifdef KILN_HAVE_CUDA
    // The driver reserves far more virtual address space than any RLIMIT_AS that still bounds a
    // host kernel; generated cuda code runs on the device, so the limit protects nothing here.
    if (so.address_space_mib > 0) notes.push_back("no RLIMIT_AS on a cuda executor");
    so.address_space_mib = 0;
    so.open_devices = [&]() -> status {
      if (auto st = cuda_open_device(args.cuda_device); !st) return st;
      // LibTorch's CUDA state (its allocator, the reference's libraries) starts here too.
      at::empty({1}, at::TensorOptions().device(
                         c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(args.cuda_device))));
      // NVML opens the driver's control devices: before landlock, like the rest.
      clocks = device_clocks::open_nvml(cuda_pci_bus_id(args.cuda_device));
      return ok();
    };
#else
    std::fprintf(stderr, "kiln executor: this build has no cuda backend\n");
    return 3;
#endif
  }
  auto sb = apply_sandbox(so);
  if (!sb) {
    std::fprintf(stderr, "kiln executor: %s\n", sb.message().c_str());
    return 3;
  }
  if (threads_before > 1)
    sb->warnings.push_back(
        std::to_string(threads_before) +
        " threads existed before the sandbox: namespaces / landlock cover the main thread only");
  for (auto& n : notes) sb->warnings.push_back(std::move(n));
  for (const auto& w : sb->warnings)
    std::fprintf(stderr, "kiln executor: warning: %s\n", w.c_str());

  at::set_num_threads(std::max(1, args.threads));
  set_cpu_host_threads(std::max(1, args.threads));

  executor_hello hello;
  hello.pid = getpid();
  hello.uid = sb->uid;
  hello.net_isolated = sb->net_isolated;
  hello.fs_restricted = sb->fs_restricted;
  hello.landlock_abi = sb->landlock_abi;
  hello.scratch = args.scratch;
  hello.warnings = join(sb->warnings);
  if (clocks) hello.clocks = clocks->describe();
#ifdef KILN_HAVE_CUDA
  if (args.cuda_device >= 0) hello.drain_slack_ms = cuda_drain_slack_ms();
#endif
  if (auto st = write_frame(args.fd, encode(hello)); !st) {
    std::fprintf(stderr, "kiln executor: cannot send hello: %s\n", st.message().c_str());
    return 4;
  }

  job_runner runner(args.program_cache, args.cuda_device, std::move(clocks));
  for (;;) {
    auto f = read_frame(args.fd);
    if (f.status == frame_status::eof) return 0; // the client is done with us
    if (f.status != frame_status::ok) {
      std::fprintf(stderr, "kiln executor: bad frame: %s\n", f.error.c_str());
      return 4; // the stream is out of sync: only a fresh process can recover
    }
    outcome o;
    auto j = decode_job(f.payload);
    if (!j) {
      o.kind = outcome_kind::runtime_error;
      o.message = "executor: " + j.message();
    } else {
      // CPU time sums over threads: allow the wall-clock budget on every thread, plus slack.
      set_cpu_budget(j->timeout_s * std::max(1, args.threads) + 5);
      o = runner.run(*j);
    }
    if (auto st = write_frame(args.fd, encode(o)); !st) {
      std::fprintf(stderr, "kiln executor: cannot send outcome: %s\n", st.message().c_str());
      return 4;
    }
    if (o.retire) return 0;
  }
}

} // namespace kiln
