// The cuda backend through real `kiln executor --cuda-device 0` processes and their kernel hosts:
// hand-written broken and hostile kernels (generated cubins and free-form nvcc sources) get their
// documented outcome and the client keeps serving; expert programs verify and time. Exits 77
// (ctest: skipped) where no CUDA device exists.
#define DOCTEST_CONFIG_IMPLEMENT
#define DOCTEST_CONFIG_NO_POSIX_SIGNALS
#include "compile/cuda_compiler.hpp"
#include "executor/cuda_runtime.hpp"
#include "executor/executor_client.hpp"

#include "data/task_check.hpp"
#include "data/task_parse.hpp"
#include "skills/codegen_cuda.hpp"
#include "skills/expert.hpp"
#include "tests/data/sample_tasks.hpp"
#include "tests/support/loopback_listener.hpp"

#include <arpa/inet.h>
#include <csignal>
#include <cstdio>
#include <dlfcn.h>
#include <doctest/doctest.h>
#include <execinfo.h>
#include <filesystem>
#include <string>
#include <sys/socket.h>
#include <ucontext.h>
#include <unistd.h>

using namespace kiln;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kN = 512 * 1024;

// add_relu at [512, 1024]: big enough that a kernel takes microseconds.
task the_task() {
  std::string text = test::kAddRelu;
  text.replace(text.find("[256, 1024]"), 11, "[512, 1024]");
  auto t = task_from_toml(text, "add_relu.toml");
  REQUIRE(t);
  REQUIRE(check_task(*t));
  return *t;
}

// Probed in a child: this process forks executors and must not hold CUDA state itself.
std::string the_arch() {
  static const std::string arch = [] {
    auto d = cuda_probe_devices();
    return d ? cuda_arch_of(d->front()) : std::string("sm_90");
  }();
  return arch;
}

std::string cache_dir() {
  auto d = fs::path(KILN_TEST_TMP) / "cuda_executor_cache";
  fs::create_directories(d / "scratch");
  return d.string();
}

// `body` computes element i (int64 i < n) of y from x and b; extra statements allowed.
std::string source(const std::string& body) {
  return R"(extern "C" __global__ void k(const float* x, const float* b, float* y, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
)" + body +
         "\n}\n";
}

artifact_ref build(const std::string& src) {
  cuda_program p;
  p.source = src;
  auto& plan = p.plan;
  plan.num_inputs = plan.num_params = plan.num_outputs = 1;
  plan.output_bytes = {kN * 4};
  plan_step st;
  st.kernel.kernel = "k";
  st.kernel.grid = {static_cast<uint32_t>(kN / 256), 1, 1};
  st.kernel.block = {256, 1, 1};
  kernel_arg x, b, y, n;
  x.buffer = {buffer_kind::input, 0};
  b.buffer = {buffer_kind::param, 0};
  y.buffer = {buffer_kind::output, 0};
  y.mode = access::write;
  n.k = kernel_arg::kind::i64;
  n.i64 = kN;
  st.kernel.args = {x, b, y, n};
  plan.steps.push_back(st);
  cuda_compile_options co;
  co.cache_dir = cache_dir();
  co.arch = the_arch();
  auto a = compile_cuda(p, co);
  REQUIRE_MESSAGE(a, a.message());
  artifact_ref r;
  r.loader = artifact_loader::cuda_cubin_plan;
  r.path = a->cubin_path;
  r.key = a->key;
  return r;
}

executor_options options() {
  executor_options o;
  o.kiln_path = KILN_BINARY;
  o.scratch_root = cache_dir() + "/scratch";
  o.cuda_device = 0;
  o.threads = 2;
  return o;
}

job make(const task& t, job_kind k, const artifact_ref& a) {
  job j;
  j.kind = k;
  j.spec = t;
  j.artifact = a;
  j.timeout_s = 30;
  j.timing.max_trials = 50;
  return j;
}

const char* kCorrect = "  float v = x[i] + b[i % 1024];\n  y[i] = v > 0.f ? v : 0.f;";

} // namespace

TEST_CASE(
    "a correct kernel verifies and times, the hostile corpus fails and the client serves on") {
  task t = the_task();
  executor_client client(options());
  auto good = build(source(kCorrect));

  auto o = client.run(make(t, job_kind::evaluate, good));
  CHECK_MESSAGE(o.kind == outcome_kind::correct, o.message);
  REQUIRE(o.time);
  CHECK(o.time->median_ms > 0);
  CHECK(o.time->trials >= 5);

  struct hostile {
    const char* name;
    std::string body;
    outcome_kind expect;
  };
  std::vector<hostile> corpus = {
      {"writes nothing (poison stays)", "", outcome_kind::wrong},
      {"constant output", "  y[i] = 0.5f;", outcome_kind::wrong},
      {"writes its input", std::string(kCorrect) + "\n  ((float*)x)[i] = 0.f;",
       outcome_kind::input_mutated},
      {"out-of-bounds write into the guard zone",
       std::string(kCorrect) + "\n  if (i == n - 1) y[n + 7] = 1.f;", outcome_kind::runtime_error},
      {"illegal address", std::string(kCorrect) + "\n  if (i == 0) *(volatile float*)16 = 1.f;",
       outcome_kind::runtime_error},
      {"never finishes", "  while (true) { if (x[i] == 12345.f) break; }", outcome_kind::timeout},
  };
  for (const auto& h : corpus) {
    CAPTURE(h.name);
    auto j = make(t, job_kind::verify, build(source(h.body)));
    if (h.expect == outcome_kind::timeout) j.timeout_s = 5;
    auto bad = client.run(j);
    CHECK_MESSAGE(bad.kind == h.expect, bad.message);
    auto again = client.run(make(t, job_kind::verify, good));
    CHECK_MESSAGE(again.kind == outcome_kind::correct, again.message);
  }
  // A fault or a hang damages only the kernel host's context: the executor never restarted.
  CHECK(client.stats().starts == 1);
  REQUIRE(client.hello());
  MESSAGE("kernel hosts: " << client.hello()->kernel_host);
  CHECK(client.hello()->kernel_host.find("seccomp on") != std::string::npos);
}

TEST_CASE("the eager baseline is timed by the same clock") {
  task t = the_task();
  executor_client client(options());
  job j = make(t, job_kind::baseline, {});
  auto o = client.run(j);
  CHECK_MESSAGE(o.kind == outcome_kind::correct, o.message);
  REQUIRE(o.time);
  CHECK(o.time->median_ms > 0);
}

namespace {

// The cuda expert's program for t, compiled and verified through the executor.
outcome verify_expert(executor_client& client, const task& t) {
  auto gen = generate_cuda(t, expert_program(t, backend_kind::cuda));
  REQUIRE_MESSAGE(gen, gen.message());
  cuda_compile_options co;
  co.cache_dir = cache_dir();
  co.arch = the_arch();
  auto a = compile_cuda(*gen, co);
  REQUIRE_MESSAGE(a, a.message());
  return client.run(make(t, job_kind::verify,
                         artifact_ref{artifact_loader::cuda_cubin_plan, a->cubin_path, a->key, 0}));
}

} // namespace

TEST_CASE("expert programs of the gpu suite verify through the executor") {
  executor_client client(options());
  int tried = 0;
  for (const char* name :
       {"level1/gpu/relu.toml", "level1/gpu/softmax.toml", "level1/gpu/layer_norm.toml",
        "level1/gpu/matmul_transposed_b.toml", "level1/gpu/matmul_batched_broadcast.toml",
        "level2/gpu/conv2d_hardswish_relu.toml", "level2/gpu/bmm_softmax_bmm.toml",
        // library convolutions (cuDNN): 1d, grouped, 3d, transposed 2d / 3d with fused epilogues
        "level1/gpu/conv1d.toml", "level1/gpu/conv2d_grouped.toml", "level1/gpu/conv3d.toml",
        "level2/gpu/conv_transpose2d_add_min_gelu_multiply.toml",
        "level2/gpu/conv_transpose3d_add_hardswish.toml"}) {
    auto path = fs::path(KILN_SOURCE_DIR) / "data/suites" / name;
    if (!fs::exists(path)) continue;
    auto t = read_task_file(path.string());
    REQUIRE_MESSAGE(t, t.message());
    REQUIRE(check_task(*t));
    CAPTURE(name);
    auto o = verify_expert(client, *t);
    CHECK_MESSAGE(o.kind == outcome_kind::correct, o.message);
    ++tried;
  }
  CHECK(tried >= 12);
}

// Ops the KernelBench importer maps (constant pad with a fill, max pools whose ceil_mode adds a
// partial window) computed by the cuda generator and compared with the reference on the device.
TEST_CASE("pad and ceil_mode pools verify through the executor") {
  auto t = task_from_toml(R"(
name = "pad_ceil_pool"
level = 2
dtype = "float32"
outputs = ["g", "q", "r"]
[[inputs]]
name = "x"
shape = [4, 3, 10, 12]
init = "normal"
[[ops]]
out = "p"
op = "pad"
args = ["x"]
attrs = { pad = [1, 1, 2, 0], value = -0.5 }
[[ops]]
out = "g"
op = "max_pool2d"
args = ["p"]
attrs = { kernel_size = 3, stride = 2, ceil_mode = true }
[[ops]]
out = "f"
op = "flatten"
args = ["g"]
attrs = { start_dim = 2 }
[[ops]]
out = "q"
op = "max_pool1d"
args = ["f"]
attrs = { kernel_size = 4, stride = 3, padding = 1, ceil_mode = true }
[[ops]]
out = "r"
op = "pad"
args = ["q"]
attrs = { pad = [0, 3, 0, 0, 1, 0] }
)",
                          "inline.toml");
  REQUIRE_MESSAGE(t, t.message());
  REQUIRE(check_task(*t));
  executor_client client(options());
  auto o = verify_expert(client, *t);
  CHECK_MESSAGE(o.kind == outcome_kind::correct, o.message);
}

namespace {

// Free-form cuda source for the_task(): `relu` computes the task; `spin` keeps one thread busy for
// about `ms` milliseconds (work that someone might try to hide). `body` is kiln_cuda_run's.
std::string free_form(const std::string& body) {
  return R"(//! kiln-source cuda
#include "kiln_cuda_abi.h"
#include <cuda_runtime.h>
#include <cstdint>
#include <cstring>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
extern "C" int kiln_cuda_run(const void* const*, const void* const*, void* const*, void*);
__global__ void relu(const float* x, const float* b, float* y, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { float v = x[i] + b[i % 1024]; y[i] = v > 0.f ? v : 0.f; }
}
__global__ void spin(long long ns) {
  long long t0 = clock64();
  while (clock64() - t0 < ns * 2) {} // >= ns nanoseconds below 2 GHz
}
static cudaStream_t side() {
  static cudaStream_t s = nullptr;
  if (!s) cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  return s;
}
extern "C" int kiln_cuda_run(const void* const* in, const void* const* par, void* const* out,
                             void* stream_arg) {
  cudaStream_t stream = (cudaStream_t)stream_arg;
  const float* x = (const float*)in[0];
  const float* b = (const float*)par[0];
  float* y = (float*)out[0];
  const long long n = 512LL * 1024;
  (void)stream; (void)side;
)" + body +
         "\n  return cudaGetLastError() == cudaSuccess ? 0 : 1;\n}\n";
}

artifact_ref build_free_form(const std::string& src) {
  cpu_compile_options host;
  host.cache_dir = cache_dir() + "/kernels";
  host.include_dir = KILN_SOURCE_DIR "/skills";
  auto a = compile_cpu(src, nvcc_options(host, the_arch()));
  REQUIRE_MESSAGE(a, a.message());
  return artifact_ref{artifact_loader::cuda_shared_object, a->so_path, a->key, a->compile_ms};
}

const char* kLaunch = "  relu<<<n / 256, 256, 0, stream>>>(x, b, y, n);";

} // namespace

TEST_CASE("free-form source (nvcc): side-stream work is refused unless joined back, then counted") {
  task t = the_task();
  executor_client client(options());
  auto honest = client.run(make(t, job_kind::evaluate, build_free_form(free_form(kLaunch))));
  CHECK_MESSAGE(honest.kind == outcome_kind::correct, honest.message);
  REQUIRE(honest.time);
  MESSAGE("honest relu " << honest.time->median_ms << " ms (bound " << honest.time->bound_ms
                         << " ms, protocol " << honest.time->overhead_ms << " ms per call)");

  // 2 ms of work on a non-blocking stream, never joined: the stream's events see none of it.
  auto hidden = client.run(make(t, job_kind::evaluate,
                                build_free_form(free_form("  spin<<<1, 1, 0, side()>>>(2000000);\n"
                                                          "  relu<<<n / 256, 256, 0, side()>>>(x, "
                                                          "b, y, n);"))));
  CHECK(hidden.kind == outcome_kind::runtime_error);
  CHECK_MESSAGE(hidden.message.find("outlived the job's stream") != std::string::npos,
                hidden.message);
  auto timed_only =
      client.run(make(t, job_kind::time,
                      build_free_form(free_form("  spin<<<1, 1, 0, side()>>>(2000000);\n" +
                                                std::string(kLaunch)))));
  CHECK_MESSAGE(timed_only.kind == outcome_kind::runtime_error, timed_only.message);
  // Hiding the work on two calls of three never makes three over-slack trials in a row, but it
  // would make the median: refused all the same (counted over the trials, or by the clock).
  auto two_of_three = client.run(make(t, job_kind::evaluate, build_free_form(free_form(R"(
  static int calls = 0;
  if (++calls % 3 != 0) {
    spin<<<1, 1, 0, side()>>>(2000000);
    relu<<<n / 256, 256, 0, side()>>>(x, b, y, n);
  } else {
    relu<<<n / 256, 256, 0, stream>>>(x, b, y, n);
  })"))));
  CHECK_MESSAGE(two_of_three.kind == outcome_kind::runtime_error, two_of_three.message);
  CHECK_MESSAGE(two_of_three.message.find("two timings in a row") != std::string::npos,
                two_of_three.message);

  // The same work joined back into the stream by events is honest, and all of it is timed.
  auto joined = client.run(make(t, job_kind::evaluate, build_free_form(free_form(R"(
  static cudaEvent_t fork = nullptr, join = nullptr;
  if (!fork) { cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
               cudaEventCreateWithFlags(&join, cudaEventDisableTiming); }
  cudaEventRecord(fork, stream);
  cudaStreamWaitEvent(side(), fork, 0);
  spin<<<1, 1, 0, side()>>>(2000000);
  relu<<<n / 256, 256, 0, side()>>>(x, b, y, n);
  cudaEventRecord(join, side());
  cudaStreamWaitEvent(stream, join, 0);)"))));
  CHECK_MESSAGE(joined.kind == outcome_kind::correct, joined.message);
  REQUIRE(joined.time);
  CHECK(joined.time->median_ms >= 1.0); // the spin is counted (>= 1 ms at any clock <= 2 GHz)
  MESSAGE("joined side stream with 2 ms of spin: " << joined.time->median_ms << " ms");

  auto failing = client.run(make(t, job_kind::verify, build_free_form(free_form("  return 3;"))));
  CHECK(failing.kind == outcome_kind::runtime_error);
  CHECK_MESSAGE(failing.message == "the entry point returned non-zero", failing.message);
  auto no_entry = client.run(
      make(t, job_kind::verify,
           build_free_form("//! kiln-source cuda\nextern \"C\" int other() { return 0; }\n")));
  CHECK(no_entry.kind == outcome_kind::runtime_error);
  CHECK_MESSAGE(no_entry.message.find("does not export kiln_cuda_run") != std::string::npos,
                no_entry.message);
  auto after = client.run(make(t, job_kind::verify, build_free_form(free_form(kLaunch))));
  CHECK_MESSAGE(after.kind == outcome_kind::correct, after.message);
}

TEST_CASE("free-form host code in a cuda kernel host is sandboxed: no network, no writes outside "
          "scratch") {
  auto [ls, ls_port] = test::listen_on_loopback();
  auto outside = fs::temp_directory_path() / ("kiln_cuda_escape_" + std::to_string(getpid()));
  fs::remove(outside);
  // Returns 7 when the connection succeeds and 9 when the file opens; else computes the task.
  std::string src = free_form(R"(
  { int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s >= 0) {
      struct sockaddr_in a; memset(&a, 0, sizeof a);
      a.sin_family = AF_INET; a.sin_port = htons()" +
                              std::to_string(ls_port) + R"();
      a.sin_addr.s_addr = htonl(0x7f000001);
      int r = connect(s, (struct sockaddr*)&a, sizeof a);
      close(s);
      if (r == 0) return 7;
    }
    FILE* g = fopen(")" + outside.string() +
                              R"(", "w");
    if (g) { fclose(g); return 9; } }
)" + std::string(kLaunch));
  src.insert(src.find('\n') + 1, "#include <arpa/inet.h>\n#include <cstdio>\n#include <cstring>\n"
                                 "#include <sys/socket.h>\n#include <unistd.h>\n");
  auto art = build_free_form(src);
  // Control: without the sandbox the connection works, so the test is meaningful.
  auto open_opts = options();
  open_opts.isolate_network = false;
  open_opts.restrict_fs = false;
  open_opts.kernel_landlock = false;
  open_opts.kernel_seccomp = false;
  executor_client open(open_opts);
  auto ctl = open.run(make(the_task(), job_kind::verify, art));
  CHECK_MESSAGE(ctl.kind == outcome_kind::runtime_error, ctl.message);
  CHECK_MESSAGE(ctl.message == "the entry point returned non-zero", ctl.message);
  open.stop();

  executor_client client(options());
  auto o = client.run(make(the_task(), job_kind::verify, art));
  CHECK_MESSAGE(o.kind == outcome_kind::correct, o.message);
  CHECK_FALSE(fs::exists(outside));
  fs::remove(outside);
  close(ls);
}

namespace {

// A compute-bound free-form kernel: y = relu(x + b) recomputed `reps` times per element, so that
// a remembered answer would be far faster than computing.
std::string heavy(const std::string& globals, const std::string& before, int reps = 4000) {
  return R"(//! kiln-source cuda
#include "kiln_cuda_abi.h"
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <sys/mman.h>
__global__ void relu_heavy(const float* x, const float* b, float* y, long long n, int reps) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i] + b[i % 1024], acc = 0.f;
  for (int r = 0; r < reps; ++r) acc += (v > 0.f ? v : 0.f) * (r == 0 ? 1.f : 0.f) + 0.f * acc;
  y[i] = acc;
}
)" + globals +
         R"(
extern "C" int kiln_cuda_run(const void* const* in, const void* const* par, void* const* out,
                             void* stream_arg) {
  cudaStream_t stream = (cudaStream_t)stream_arg;
  const float* x = (const float*)in[0];
  const float* b = (const float*)par[0];
  float* y = (float*)out[0];
  const long long n = 512LL * 1024;
)" + before +
         R"(
  relu_heavy<<<n / 256, 256, 0, stream>>>(x, b, y, n, )" +
         std::to_string(reps) + R"();
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
)";
}

// The hostile sources, named for the attack they try.
// Hashes a strided sample of x on the host; on a hit copies the remembered y and returns.
std::string cache_src() {
  return heavy(R"(
static uint64_t keys[64]; static void* vals[64]; static int used;)",
               R"(
  float probe[64]; cudaMemcpy(probe, x, sizeof probe, cudaMemcpyDeviceToHost);
  uint64_t k = 1469598103934665603ull;
  for (int i = 0; i < 64; ++i) { uint32_t v; memcpy(&v, &probe[i], 4); k = (k ^ v) * 1099511628211ull; }
  for (int i = 0; i < used; ++i)
    if (keys[i] == k) { cudaMemcpyAsync(y, vals[i], n * 4, cudaMemcpyDeviceToDevice, stream); return 0; }
  if (used < 64) { keys[used] = k; cudaMalloc(&vals[used], n * 4); }
  relu_heavy<<<n / 256, 256, 0, stream>>>(x, b, y, n, 4000);
  if (used < 64) cudaMemcpyAsync(vals[used++], y, n * 4, cudaMemcpyDeviceToDevice, stream);
  return 0;)");
}
// Computes on the verification calls, then launches nothing on most timed trials.
std::string lazy_src() {
  return heavy("static int calls;", "  if (++calls > 5 && calls % 40 != 0) return 0;");
}
// Reads device memory far beyond its buffers, where the executor's reference would be if the two
// shared an address space.
std::string peek_src() {
  return heavy("", R"(
  { float* far = (float*)((uintptr_t)y + (uintptr_t(1) << 34));
    cudaMemcpy(y, far, 4096, cudaMemcpyDeviceToDevice);
    if (cudaGetLastError() == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess) return 0; })");
}
// Makes its own code writable and executable (the step before patching): returns 5 if it can.
std::string patch_src() {
  return free_form(R"(
  { uintptr_t page = (uintptr_t)(void*)&kiln_cuda_run & ~(uintptr_t)4095;
    if (mprotect((void*)page, 4096, PROT_READ | PROT_WRITE | PROT_EXEC) == 0) return 5; }
)" + std::string(kLaunch));
}
// A well-formed reply written on the kernel host's channel before computing.
std::string forge_src() {
  return free_form(R"(
  { struct { uint32_t magic, version, op; int32_t code; uint64_t seq; int64_t pid, uid;
             int32_t ll, sc; double stream, residual; char text[240]; } r;
    memset(&r, 0, sizeof r); r.magic = 0x484e4c4b; r.version = 1; r.op = 5;
    for (uint64_t s = 0; s < 64; ++s) { r.seq = s; send(3, &r, sizeof r, MSG_NOSIGNAL); } }
)" + std::string(kLaunch));
}
// A child that leaves the session and stays.
std::string orphan_src() {
  return free_form(R"(
  { pid_t p = fork();
    if (p == 0) { if (fork() == 0) { setsid(); for (;;) pause(); } _exit(0); }
    if (p > 0) waitpid(p, 0, 0); }
)" + std::string(kLaunch));
}

executor_options unsandboxed() {
  auto o = options();
  o.isolate_network = false;
  o.restrict_fs = false;
  o.kernel_landlock = false;
  o.kernel_seccomp = false;
  return o;
}

} // namespace

TEST_CASE(
    "hostile cuda: a content cache never hits, lazy trials are caught, no reference to read") {
  task t = the_task();
  executor_client client(options());
  auto honest = client.run(make(t, job_kind::evaluate, build_free_form(heavy("", ""))));
  REQUIRE_MESSAGE(honest.kind == outcome_kind::correct, honest.message);
  // Hashes a strided sample of x on the host; on a hit copies the remembered y and returns.
  auto cache = build_free_form(cache_src());
  auto c = client.run(make(t, job_kind::evaluate, cache));
  CHECK_MESSAGE(c.kind == outcome_kind::correct, c.message);
  if (c.time && honest.time) {
    MESSAGE("content cache " << c.time->median_ms << " ms vs honest " << honest.time->median_ms);
    CHECK(c.time->median_ms > 0.6 * honest.time->median_ms);
  }
  // Computes on the verification calls, then launches nothing on most timed trials.
  auto lazy = build_free_form(lazy_src());
  auto l = client.run(make(t, job_kind::evaluate, lazy));
  CHECK(l.kind == outcome_kind::wrong);
  CHECK_MESSAGE(l.message.find("checked after timing") != std::string::npos, l.message);
  // Reads device memory beyond its buffers, where the executor's reference would be if the
  // two shared an address space: an illegal address in its own context.
  auto peek = build_free_form(peek_src());
  auto p = client.run(make(t, job_kind::verify, peek));
  // Correct means the read failed and it computed; had it read something it would have returned
  // without computing (wrong). Either way its context, not the executor's, took the error.
  CHECK_MESSAGE(p.kind == outcome_kind::correct, p.message);
  auto after = client.run(make(t, job_kind::verify, build_free_form(free_form(kLaunch))));
  CHECK_MESSAGE(after.kind == outcome_kind::correct, after.message);
}

TEST_CASE("hostile cuda: no code patching, no forged replies, no processes outliving the job") {
  task t = the_task();
  // Makes its own code writable and executable (the step before patching): returns 5 if it can.
  auto patch = build_free_form(patch_src());
  // A well-formed reply written on the host's channel before computing.
  auto forge = build_free_form(forge_src());
  // A child that leaves the session and stays.
  auto orphan = build_free_form(orphan_src());
  for (const auto& [name, art] :
       std::vector<std::pair<const char*, artifact_ref>>{{"patch", patch}, {"orphan", orphan}}) {
    executor_client open(unsandboxed());
    auto ctl = open.run(make(t, job_kind::verify, art));
    CAPTURE(name);
    CHECK_MESSAGE(ctl.kind == outcome_kind::runtime_error, ctl.message); // the attack works there
  }
  executor_client client(options());
  auto pa = client.run(make(t, job_kind::verify, patch));
  CHECK_MESSAGE(pa.kind == outcome_kind::correct, pa.message);
  auto fo = client.run(make(t, job_kind::evaluate, forge));
  CHECK(fo.kind == outcome_kind::runtime_error);
  CHECK_MESSAGE(fo.message.find("broke the protocol") != std::string::npos, fo.message);
  auto orp = client.run(make(t, job_kind::verify, orphan));
  CHECK_MESSAGE(orp.kind == outcome_kind::correct, orp.message); // fork failed; it computed
  auto after = client.run(make(t, job_kind::verify, build_free_form(free_form(kLaunch))));
  CHECK_MESSAGE(after.kind == outcome_kind::correct, after.message);
}

// Builds every free-form source above with nvcc (no device needed): run where no GPU is.
TEST_CASE("hostile sources compile") {
  for (const auto& src : {heavy("", ""), heavy("", "", 100000), free_form(kLaunch), cache_src(),
                          lazy_src(), peek_src(), patch_src(), forge_src(), orphan_src()})
    build_free_form(src);
}

TEST_CASE("hostile cuda: in-process times that undercut the executor's clock are refused") {
  task t = the_task();
  // ~5 ms per call: far above the window's jitter (tenths of a millisecond on the H200).
  auto art = build_free_form(heavy("", "", 100000));
  // A kernel host that reports a tenth of its events' time, as a compromised one would.
  setenv("KILN_FAULT_SCALE_EVENTS", "0.1", 1);
  executor_client lying(options());
  auto o = lying.run(make(t, job_kind::evaluate, art));
  unsetenv("KILN_FAULT_SCALE_EVENTS");
  CHECK(o.kind == outcome_kind::runtime_error);
  CHECK_MESSAGE(o.message.find("contradicts the trusted one") != std::string::npos, o.message);
  // Where the time went, for whoever reads the refusal: the round trip and the host's own clock.
  CHECK_MESSAGE(o.message.find("round trip") != std::string::npos, o.message);
  CHECK_MESSAGE(o.message.find("the host's own clock") != std::string::npos, o.message);
  lying.stop();
  executor_client honest(options());
  auto h = honest.run(make(t, job_kind::evaluate, art));
  CHECK_MESSAGE(h.kind == outcome_kind::correct, h.message);
  if (h.time)
    MESSAGE("heavy relu: events " << h.time->median_ms << " ms, bound " << h.time->bound_ms
                                  << " ms, protocol " << h.time->overhead_ms << " ms");
}

// A crash of the test process itself (not of an executor) says who sent it and where.
void on_crash(int sig, siginfo_t* si, void* uc) {
  char buf[256];
  auto* ctx = static_cast<ucontext_t*>(uc);
  int n = std::snprintf(
      buf, sizeof buf, "signal %d code %d addr %p sender pid %d (self %d, parent %d) rip %p\n", sig,
      si->si_code, si->si_addr, static_cast<int>(si->si_pid), static_cast<int>(getpid()),
      static_cast<int>(getppid()), reinterpret_cast<void*>(ctx->uc_mcontext.gregs[REG_RIP]));
  ssize_t w = write(STDERR_FILENO, buf, static_cast<size_t>(n));
  (void)w;
  // A call through a null pointer leaves rip = 0: the caller's return address is on the stack.
  void* ret = *reinterpret_cast<void**>(ctx->uc_mcontext.gregs[REG_RSP]);
  Dl_info ri{};
  if (dladdr(ret, &ri) && ri.dli_fname) {
    n = std::snprintf(
        buf, sizeof buf, "return address %p in %s (%s+%#lx), base %p\n", ret, ri.dli_fname,
        ri.dli_sname ? ri.dli_sname : "?",
        static_cast<unsigned long>(static_cast<char*>(ret) - static_cast<char*>(ri.dli_saddr)),
        ri.dli_fbase);
    w = write(STDERR_FILENO, buf, static_cast<size_t>(n));
  }
  Dl_info di{};
  if (dladdr(reinterpret_cast<void*>(ctx->uc_mcontext.gregs[REG_RIP]), &di) && di.dli_fname) {
    n = std::snprintf(buf, sizeof buf, "rip in %s (%s)\n", di.dli_fname,
                      di.dli_sname ? di.dli_sname : "?");
    w = write(STDERR_FILENO, buf, static_cast<size_t>(n));
  }
  void* frames[64];
  int k = backtrace(frames, 64);
  backtrace_symbols_fd(frames, k, STDERR_FILENO);
  signal(sig, SIG_DFL);
  raise(sig);
}

int main(int argc, char** argv) {
  static char altstack[1 << 16];
  stack_t ss{};
  ss.ss_sp = altstack;
  ss.ss_size = sizeof altstack;
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = on_crash;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
  auto n = cuda_probe_devices();
  if (!n) {
    // nvcc works without a device: the sources still compile (the arch is the H200's).
    doctest::Context only(argc, argv);
    only.setOption("test-case", "hostile sources compile");
    int rc = only.run();
    std::printf("skipped: %s\n", n.message().c_str());
    return rc != 0 ? rc : 77;
  }
  doctest::Context ctx(argc, argv);
  ctx.setOption("no-breaks", true);
  ctx.setOption("no-crash-handling", true);
  return ctx.run();
}
