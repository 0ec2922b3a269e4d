// Child side of the executor protocol. Order matters at start-up: the sandbox is applied before any
// thread exists (namespaces and landlock bind the calling thread and its future children only).
#include "executor/executor.hpp"

#include "compile/torch_python.hpp"
#include "data/reference.hpp"
#include "data/task_check.hpp"
#include "data/task_hash.hpp"
#include "executor/kernel_host_client.hpp"
#include "executor/shared_buffers.hpp"
#include "executor/timing.hpp"
#include "executor/verify.hpp"
#include "jobs/frame.hpp"
#include "sandbox/executor_sandbox.hpp"
#ifdef KILN_HAVE_CUDA
#include "executor/cuda_runtime.hpp"
#endif

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

namespace kiln {

struct job_runner::impl {
  kernel_host_options host_opts;
  int cuda_device = -1;
  std::unique_ptr<device_clocks> clocks;
  std::string params_key;
  std::vector<at::Tensor> params, params_k;
  std::unique_ptr<cache_flusher> flusher;
  run_device dev;
  // Hosts started ahead, oldest first, none of which ran code: a host's start (a CUDA context,
  // ~0.3 s) outlasts a short job, so one spare started after a job is still starting when the
  // next job wants it. Several are an option (--spare-hosts), not yet a measured gain.
  std::deque<std::unique_ptr<kernel_host>> spares;
  int spare_count = 1;

  impl(kernel_host_options ho) : host_opts(std::move(ho)), cuda_device(host_opts.cuda_device) {
#ifdef KILN_HAVE_CUDA
    if (cuda_device >= 0) {
      flusher = std::make_unique<cuda_cache_flusher>();
      dev.device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(cuda_device));
      dev.clock = cuda_timed;
      if (auto info = cuda_device_query(cuda_device))
        dev.keep_budget_bytes = info->memory_bytes / 3;
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
      params_k = kernel_form(params);
      params_key = k;
    }
    return params;
  }

  // A ModelNew submission needs a host started with Python: started for its job, since a
  // spare is started before its job's kind is known.
  expected<std::unique_ptr<kernel_host>> take_host(artifact_loader loader) {
    if (needs_python(loader)) {
      const auto& py = find_torch_python();
      if (py.library.empty())
        return error{"this executor cannot run ModelNew submissions: " + py.why_none};
      auto o = host_opts;
      o.python = true;
      o.python_library = py.library;
      o.python_path = py.sys_path;
      return kernel_host::start(o);
    }
    if (spares.empty()) return kernel_host::start(host_opts);
    auto h = std::move(spares.front());
    spares.pop_front();
    return h;
  }

  void top_up_spares() {
    while (static_cast<int>(spares.size()) < spare_count) {
      auto next = kernel_host::start(host_opts);
      if (!next) return; // the next job starts its own host and reports why that fails
      spares.push_back(std::move(*next));
    }
  }

  // Before anything is timed: every spare's start (its device context) is over, so none
  // touches the device beside a timed trial. A spare that failed to start is dropped.
  void settle_spares() {
    for (auto it = spares.begin(); it != spares.end();)
      it = (*it)->wait_started(monotonic_ms()) ? std::next(it) : spares.erase(it);
  }

  // Output buffers from shape inference; argmax / argmin results are int64 (kiln_abi.h).
  static std::vector<buffer_spec> output_specs(const task& t) {
    std::vector<buffer_spec> outs;
    for (const auto& name : t.outputs) {
      auto ref = find_value(t, name);
      bool integer = ref.k == value_ref::kind::op && t.ops[ref.index].is_index;
      outs.push_back({name, value_shape(t, ref), integer ? at::kLong : at::kFloat});
    }
    return outs;
  }

  check_result run(const job& j) {
    task t = j.spec;
    if (auto st = check_task(t); !st)
      return failure(outcome_kind::runtime_error, "bad task: " + st.message());
    if (j.kind != job_kind::baseline && needs_cuda(j.artifact.loader) != (cuda_device >= 0))
      return failure(outcome_kind::runtime_error,
                     std::string("artifact loader '") + to_string(j.artifact.loader) +
                         "' is not served by this executor (" + backend() + ")");
    const auto& ps = params_for(t);
    if (j.kind == job_kind::baseline) {
      settle_spares();
      auto tm = time_reference(t, ps, j.timing, dev);
      note_clocks(tm);
      return tm;
    }
    if (j.verify.checks < 1)
      return failure(outcome_kind::runtime_error, "verify.checks must be at least 1");
    int64_t deadline = monotonic_ms() + static_cast<int64_t>(j.timeout_s * 1000);

    auto host = take_host(j.artifact.loader);
    if (!host) return failure(outcome_kind::runtime_error, host.message());
    auto result = run_in(**host, t, ps, j, deadline);
    if (int alive = (*host)->kill_all(); alive > 0 && result.kind == outcome_kind::correct)
      result = failure(outcome_kind::runtime_error,
                       "a process of the kernel's outlived its job (killed)");
    // The next jobs' hosts start now, while this outcome travels back.
    top_up_spares();
    return result;
  }

  check_result run_in(kernel_host& host, const task& t, const std::vector<at::Tensor>& ps,
                      const job& j, int64_t deadline) {
    // Inputs and params reach kernels as float32 (kernel_form), in their declared shapes.
    auto specs = [](const std::vector<tensor_decl>& decls) {
      std::vector<buffer_spec> out;
      for (const auto& d : decls) out.push_back({d.name, d.shape, at::kFloat});
      return out;
    };
    auto outs = output_specs(t);
#ifdef KILN_HAVE_CUDA
    if (dev.device.is_cuda()) cuda_trim_cached_memory();
#endif
    auto bufs = shared_buffers::create(specs(t.inputs), specs(t.params), outs, dev.device);
    if (!bufs) return failure(outcome_kind::runtime_error, bufs.message());
    for (size_t i = 0; i < params_k.size(); ++i) (*bufs)->params()[i].data.copy_(params_k[i]);
    if (auto st = host.set_layout(**bufs, deadline); !st)
      return failure(outcome_kind::runtime_error, st.message());
    job_context c;
    c.t = &t;
    c.ref_params = &ps;
    c.params = &params_k;
    c.host = &host;
    c.buffers = bufs->get();
    c.dev = &dev;
    c.deadline_ms = deadline;
    c.threads = host_opts.cuda_device >= 0 ? 1 : std::max(1, host_opts.threads);
    bool times = j.kind == job_kind::time || j.kind == job_kind::evaluate;
    if (auto bad = calibrate(c, times ? 16 : 12, times ? j.timing.flush_bytes : 0)) return *bad;
    auto loaded = host.load(j.artifact, deadline);
    if (loaded.failure != call_failure::none)
      return failure(loaded.failure == call_failure::timeout ? outcome_kind::timeout
                                                             : outcome_kind::runtime_error,
                     "loading the kernel: " + loaded.why);
    if (loaded.code != kh_code::ok) return failure(outcome_kind::runtime_error, loaded.text);

    if (j.kind == job_kind::time) {
      settle_spares();
      auto tm = time_kernel(c, j.timing);
      note_clocks(tm);
      check_roofline(c, j, tm);
      return tm;
    }
    auto v = verify_kernel(c, j.verify);
    if (j.kind == job_kind::verify || v.kind != outcome_kind::correct) return v;
    settle_spares();
    auto tm = time_kernel(c, j.timing);
    if (tm.kind == outcome_kind::correct) tm.message = v.message;
    note_clocks(tm);
    check_roofline(c, j, tm);
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
  void check_roofline(job_context& c, const job& j, check_result& tm) {
    if (tm.kind != outcome_kind::correct || !tm.time) return;
    double gbps = bandwidth_gbps(j);
    if (gbps <= 0) return;
    double bound_ms = static_cast<double>(compulsory_bytes(*c.t)) / (gbps * 1e6);
    tm.time->roofline_ms = bound_ms;
    if (tm.time->median_ms >= 0.5 * bound_ms) return;
    char what[160];
    std::snprintf(what, sizeof what,
                  "timed at %.4g ms, beyond the bandwidth roofline of %.4g ms (%.0f GB/s)",
                  tm.time->median_ms, bound_ms, gbps);
    verify_options again;
    again.checks = std::max(5, j.verify.checks);
    auto v = verify_kernel(c, again);
    if (v.kind != outcome_kind::correct) {
      v.message = std::string(what) + ", and re-verification failed: " + v.message;
      tm = v;
      return;
    }
    tm.time->beyond_roofline = true;
    tm.message += (tm.message.empty() ? "" : "; ") + std::string(what) +
                  ": re-verified on fresh inputs, flagged";
  }
};

job_runner::job_runner(kernel_host_options host, std::unique_ptr<device_clocks> clocks,
                       int spare_hosts)
    : impl_(std::make_unique<impl>(std::move(host))) {
  impl_->clocks = std::move(clocks);
  impl_->spare_count = std::max(0, spare_hosts);
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
  } catch (const std::exception& e) {
    // c10::Error from a LibTorch call (bad shapes, out of memory) lands here.
    o.kind = outcome_kind::runtime_error;
    std::string what = e.what();
    o.message = "exception: " + what.substr(0, what.find('\n'));
  }
  o.device_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return o;
}

std::string job_runner::clocks_description() const {
  return impl_->clocks ? impl_->clocks->describe() : std::string();
}

// A throwaway host with one small buffer: what the sandbox gives kernels here (for the hello),
// and a start-up failure seen now rather than on every job.
expected<std::string> job_runner::prepare_host() {
  auto& im = *impl_;
  auto bufs = shared_buffers::create({}, {}, {{"probe", {16}, at::kFloat}}, im.dev.device);
  if (!bufs) return bufs.err();
  auto h = kernel_host::start(im.host_opts);
  if (!h) return h.err();
  if (auto st = (*h)->set_layout(**bufs, monotonic_ms()); !st) return st.err();
  std::string facts = describe((*h)->ready());
  (*h)->kill_all();
  im.top_up_spares();
  return facts;
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
  // The job buffers are a memfd, a file as far as RLIMIT_FSIZE goes; the limit protects against
  // kernels, and they run in the kernel host, which keeps it.
  so.file_size_mib = 0;
  so.isolate_network = args.isolate_network;
  so.restrict_fs = args.restrict_fs;
  so.drop_privileges = args.drop_privileges;
  if (!args.cgroup.empty()) so.writable.push_back(args.cgroup);
  if (!args.kernel_scratch.empty()) so.writable.push_back(args.kernel_scratch);
  std::vector<std::string> notes;
  // Kernel hosts start inside this landlock domain, and the CUDA driver's start-up in them writes
  // where a write-restricted domain refuses (cudaErrorOperatingSystem on the H200): a cuda
  // executor, which runs no kernel code itself, leaves the restriction to its kernel hosts.
  if (args.cuda_device >= 0 && so.restrict_fs) {
    so.restrict_fs = false;
    notes.push_back("no landlock on a cuda executor itself (its kernel hosts have theirs)");
  }
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

  kernel_host_options ho;
  ho.binary = args.kernel_host.empty()
                  ? default_kernel_host_binary("/proc/self/exe", args.cuda_device >= 0)
                  : args.kernel_host;
  ho.scratch_root = args.kernel_scratch.empty() ? args.scratch : args.kernel_scratch;
  ho.threads = std::max(1, args.threads);
  ho.cuda_device = args.cuda_device;
  ho.drop_privileges = args.kernel_drop_privileges;
  ho.landlock = args.kernel_landlock;
  ho.seccomp = args.kernel_seccomp;
  ho.address_space_mib = args.address_space_mib;
  ho.file_size_mib = args.file_size_mib;
  ho.cgroup_parent = args.cgroup;
  // One spare unless asked: three on the H100 gave no more verify jobs per second than one
  // had (docs/BENCHMARKS.md, session 20), and each cuda spare holds a context's memory.
  int spares = args.spare_hosts > 0 ? args.spare_hosts : 1;
  job_runner runner(ho, std::move(clocks), spares);
  // A kernel host that cannot start would fail every job: fail the executor's start instead.
  auto facts = runner.prepare_host();
  if (!facts) {
    std::fprintf(stderr, "kiln executor: %s\n", facts.message().c_str());
    return 3;
  }

  executor_hello hello;
  hello.pid = getpid();
  hello.uid = sb->uid;
  hello.net_isolated = sb->net_isolated;
  hello.fs_restricted = sb->fs_restricted;
  hello.landlock_abi = sb->landlock_abi;
  hello.scratch = args.scratch;
  hello.warnings = join(sb->warnings);
  hello.clocks = runner.clocks_description();
  hello.kernel_host = *facts;
  if (auto st = write_frame(args.fd, encode(hello)); !st) {
    std::fprintf(stderr, "kiln executor: cannot send hello: %s\n", st.message().c_str());
    return 4;
  }

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
      // No RLIMIT_CPU backstop here: a kernel host would inherit it, and an armed process CPU
      // timer makes its CPU clock read stale by up to a tick (the outside-a-call check needs it
      // exact). The client's wall-clock deadline bounds the job.
      o = runner.run(*j);
    }
    if (auto st = write_frame(args.fd, encode(o)); !st) {
      std::fprintf(stderr, "kiln executor: cannot send outcome: %s\n", st.message().c_str());
      return 4;
    }
  }
}

} // namespace kiln
