// Runtime-API implementation of the kernel host's cuda side: cudaLibrary* loads a cubin,
// cudaKernel_t handles launch through cudaLaunchKernel, cuBLASLt computes the plan's GEMM steps.
// Free-form programs are nvcc shared objects linked against the same shared cudart, so they see
// this process's device and context.
#include "runtimes/cuda_program.hpp"

#include "runtimes/cudnn_conv.hpp"
#include "skills/kiln_cuda_abi.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <dlfcn.h>
#include <fstream>
#include <sstream>

namespace kiln {

namespace {

std::string cuda_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

error cuda_error(const std::string& what, cudaError_t e) {
  return error{what + ": " + cuda_text(e)};
}

std::string lt_text(cublasStatus_t s) {
  return "cuBLASLt status " + std::to_string(static_cast<int>(s));
}

// One device per kernel host process: the handle and workspace live as long as the process.
struct process_state {
  int ordinal = -1;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = size_t{32} << 20;
};

process_state& proc() {
  static process_state s;
  return s;
}

expected<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error{"cannot read " + path};
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t arg_bytes(const kernel_arg& a) { return a.k == kernel_arg::kind::f32 ? 4 : 8; }

} // namespace

// Named, not anonymous: impl holds these and has external linkage (a unity build,
// which includes this file into another, warns of that).
namespace cuda_program_parts {

// cuBLASLt state of one GEMM step, prepared at load (descriptor creation and the heuristic cost
// tens of microseconds: not something to pay inside a timed run).
struct gemm_prepared {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
  cublasLtMatmulAlgo_t algo{};

  ~gemm_prepared() {
    if (op) cublasLtMatmulDescDestroy(op);
    if (first) cublasLtMatrixLayoutDestroy(first);
    if (second) cublasLtMatrixLayoutDestroy(second);
    if (out) cublasLtMatrixLayoutDestroy(out);
  }
};

} // namespace cuda_program_parts
using cuda_program_parts::gemm_prepared;

namespace {

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the B buffer is cuBLASLt's
// first operand, A its second, and m / n swap (launch_plan.hpp).
expected<std::unique_ptr<gemm_prepared>> prepare_gemm(const gemm_step& g) {
  auto p = std::make_unique<gemm_prepared>();
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (g.precision == gemm_precision::tf32) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  if (g.precision == gemm_precision::fp16_accumulate) compute = CUBLAS_COMPUTE_32F_FAST_16F;
  auto check = [](cublasStatus_t s, const char* what) -> status {
    if (s != CUBLAS_STATUS_SUCCESS) return error{std::string(what) + ": " + lt_text(s)};
    return ok();
  };
  if (auto s = check(cublasLtMatmulDescCreate(&p->op, compute, CUDA_R_32F), "matmul desc"); !s)
    return s.err();
  cublasOperation_t first_op = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t second_op = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &first_op, sizeof first_op);
  cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &second_op, sizeof second_op);
  auto layout = [&](cublasLtMatrixLayout_t* l, int64_t rows, int64_t cols, int64_t ld,
                    int64_t stride) -> status {
    if (auto s = check(cublasLtMatrixLayoutCreate(l, CUDA_R_32F, static_cast<uint64_t>(rows),
                                                  static_cast<uint64_t>(cols), ld),
                       "matrix layout");
        !s)
      return s;
    if (g.batch > 1) {
      int32_t count = static_cast<int32_t>(g.batch);
      cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                       sizeof count);
      cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                       sizeof stride);
    }
    return ok();
  };
  if (auto s = layout(&p->first, g.trans_b ? g.k : g.n, g.trans_b ? g.n : g.k, g.ldb, g.stride_b);
      !s)
    return s.err();
  if (auto s = layout(&p->second, g.trans_a ? g.m : g.k, g.trans_a ? g.k : g.m, g.lda, g.stride_a);
      !s)
    return s.err();
  if (auto s = layout(&p->out, g.n, g.m, g.ldc, g.stride_c); !s) return s.err();

  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulPreferenceCreate(&pref);
  size_t ws = proc().workspace_bytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof ws);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  auto hs = cublasLtMatmulAlgoGetHeuristic(proc().lt, p->op, p->first, p->second, p->out, p->out,
                                           pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (hs != CUBLAS_STATUS_SUCCESS || found < 1)
    return error{"cuBLASLt has no algorithm for a " + std::to_string(g.m) + "x" +
                 std::to_string(g.n) + "x" + std::to_string(g.k) + " GEMM (batch " +
                 std::to_string(g.batch) + "): " + lt_text(hs)};
  p->algo = result.algo;
  return p;
}

} // namespace

status cuda_host_open(int ordinal) {
  auto& s = proc();
  if (s.ordinal == ordinal) return ok();
  if (s.ordinal >= 0) return error{"this process already uses device " + std::to_string(s.ordinal)};
  if (auto e = cudaSetDevice(ordinal); e != cudaSuccess)
    return cuda_error("cudaSetDevice(" + std::to_string(ordinal) + ")", e);
  if (auto e = cudaFree(nullptr); e != cudaSuccess) return cuda_error("CUDA context", e);
  if (auto st = cublasLtCreate(&s.lt); st != CUBLAS_STATUS_SUCCESS)
    return error{"cublasLtCreate: " + lt_text(st)};
  if (auto e = cudaMalloc(&s.workspace, s.workspace_bytes); e != cudaSuccess)
    return cuda_error("cuBLASLt workspace", e);
  s.ordinal = ordinal;
  return ok();
}

struct cuda_executable::impl {
  launch_plan plan;
  cudaLibrary_t lib = nullptr;
  std::vector<cudaKernel_t> kernels;                 // per step; null for GEMM steps
  std::vector<std::unique_ptr<gemm_prepared>> gemms; // per step; null for kernel steps
  std::vector<std::unique_ptr<cudnn_conv>> convs;    // per step; null but for conv steps
  std::vector<void*> scratch;
  void* shared_object = nullptr; // a free-form program: no plan, one entry point
  kiln_cuda_run_fn entry = nullptr;

  ~impl() {
    for (void* p : scratch) cudaFree(p);
    if (lib) cudaLibraryUnload(lib);
    if (shared_object) dlclose(shared_object);
  }
};

cuda_executable::cuda_executable(cuda_executable&&) noexcept = default;
cuda_executable& cuda_executable::operator=(cuda_executable&&) noexcept = default;
cuda_executable::~cuda_executable() = default;

expected<cuda_executable> cuda_executable::load_shared_object(const std::string& so_path) {
  if (proc().ordinal < 0) return error{"no CUDA device opened in this process"};
  void* h = dlopen(so_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    return error{"cuda program: dlopen " + so_path + ": " + (e ? e : "unknown error")};
  }
  void* sym = dlsym(h, KILN_CUDA_ENTRY_NAME);
  if (!sym) {
    dlclose(h);
    return error{"cuda program: " + so_path +
                 " does not export " KILN_CUDA_ENTRY_NAME " (extern \"C\", see kiln_cuda_abi.h)"};
  }
  cuda_executable prog;
  prog.impl_ = std::make_unique<impl>();
  prog.impl_->shared_object = h;
  prog.impl_->entry = reinterpret_cast<kiln_cuda_run_fn>(sym);
  return prog;
}

expected<cuda_executable> cuda_executable::load_cubin(const std::string& cubin_path) {
  if (proc().ordinal < 0) return error{"no CUDA device opened in this process"};
  auto cubin = read_file(cubin_path);
  if (!cubin) return cubin.err();
  auto plan_text = read_file(cubin_path + ".plan.json");
  if (!plan_text) return plan_text.err();
  auto plan = plan_from_json(*plan_text);
  if (!plan) return error{"launch plan: " + plan.message()};
  if (auto st = check_plan(*plan); !st) return st.err();

  cuda_executable prog;
  prog.impl_ = std::make_unique<impl>();
  auto& im = *prog.impl_;
  im.plan = std::move(*plan);
  if (auto e =
          cudaLibraryLoadData(&im.lib, cubin->data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
      e != cudaSuccess)
    return cuda_error("loading the cubin", e);
  for (std::size_t s = 0; s < im.plan.steps.size(); ++s) {
    const auto& step = im.plan.steps[s];
    im.kernels.push_back(nullptr);
    im.gemms.emplace_back();
    im.convs.emplace_back();
    std::string at = "plan step " + std::to_string(s);
    if (step.k == plan_step::kind::conv) {
      auto c = cudnn_conv::prepare(step.conv, int64_t{1} << 30);
      if (!c) return error{at + ": " + c.message()};
      im.convs.back() = std::move(*c);
      continue;
    }
    if (step.k == plan_step::kind::gemm) {
      auto g = prepare_gemm(step.gemm);
      if (!g) return error{at + ": " + g.message()};
      im.gemms.back() = std::move(*g);
      continue;
    }
    const auto& k = step.kernel;
    cudaKernel_t fn = nullptr;
    if (auto e = cudaLibraryGetKernel(&fn, im.lib, k.kernel.c_str()); e != cudaSuccess)
      return cuda_error(at + ": kernel '" + k.kernel + "'", e);
    // A plan whose arguments disagree with the kernel's parameters would pass garbage: refuse.
    const void* f = reinterpret_cast<const void*>(fn);
    for (std::size_t a = 0; a <= k.args.size(); ++a) {
      size_t offset = 0, size = 0;
      cudaError_t e = cudaFuncGetParamInfo(f, a, &offset, &size);
      if (a == k.args.size()) {
        if (e == cudaSuccess)
          return error{at + ": kernel '" + k.kernel + "' takes more than the plan's " +
                       std::to_string(k.args.size()) + " arguments"};
        cudaGetLastError();
        break;
      }
      if (e != cudaSuccess) {
        cudaGetLastError();
        return error{at + ": kernel '" + k.kernel + "' takes " + std::to_string(a) +
                     " arguments, the plan passes " + std::to_string(k.args.size())};
      }
      if (size != arg_bytes(k.args[a]))
        return error{at + ": kernel '" + k.kernel + "' argument " + std::to_string(a) + " is " +
                     std::to_string(size) + " bytes, the plan passes " +
                     std::to_string(arg_bytes(k.args[a]))};
    }
    if (k.shared_bytes > 48 * 1024) {
      if (auto e = cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(k.shared_bytes));
          e != cudaSuccess)
        return cuda_error(
            at + ": " + std::to_string(k.shared_bytes) + " bytes of dynamic shared memory", e);
    }
    im.kernels.back() = fn;
  }
  for (int64_t bytes : im.plan.scratch_bytes) {
    void* p = nullptr;
    if (auto e = cudaMalloc(&p, static_cast<size_t>(bytes)); e != cudaSuccess)
      return cuda_error("scratch buffer of " + std::to_string(bytes) + " bytes", e);
    im.scratch.push_back(p);
  }
  return prog;
}

status cuda_executable::run(const std::vector<const void*>& inputs,
                            const std::vector<const void*>& params,
                            const std::vector<void*>& outputs) {
  auto& im = *impl_;
  if (im.entry) {
    int rc = im.entry(inputs.data(), params.data(), outputs.data(), nullptr);
    if (rc != 0) return error{KILN_CUDA_ENTRY_NAME " returned non-zero"};
    return ok();
  }
  return run_plan(inputs, params, outputs, false);
}

status cuda_executable::warm_library_steps(const std::vector<const void*>& inputs,
                                           const std::vector<const void*>& params,
                                           const std::vector<void*>& outputs) {
  if (impl_->entry) return ok();
  if (std::none_of(impl_->convs.begin(), impl_->convs.end(), [](const auto& c) { return !!c; }))
    return ok();
  if (auto st = run_plan(inputs, params, outputs, true); !st) return st;
  if (auto e = cudaDeviceSynchronize(); e != cudaSuccess) return cuda_error("library warm-up", e);
  return ok();
}

status cuda_executable::run_plan(const std::vector<const void*>& inputs,
                                 const std::vector<const void*>& params,
                                 const std::vector<void*>& outputs, bool convs_only) {
  auto& im = *impl_;
  const auto& p = im.plan;
  if (static_cast<int32_t>(inputs.size()) != p.num_inputs ||
      static_cast<int32_t>(params.size()) != p.num_params ||
      static_cast<int32_t>(outputs.size()) != p.num_outputs)
    return error{"the task's buffers do not match the launch plan"};
  auto ptr = [&](const buffer_ref& r) -> void* {
    switch (r.kind) {
    case buffer_kind::input: return const_cast<void*>(inputs[r.index]);
    case buffer_kind::param: return const_cast<void*>(params[r.index]);
    case buffer_kind::output: return outputs[r.index];
    case buffer_kind::scratch: return im.scratch[r.index];
    }
    return nullptr;
  };
  std::vector<uint64_t> storage;
  std::vector<void*> argv;
  for (std::size_t s = 0; s < p.steps.size(); ++s) {
    const auto& step = p.steps[s];
    if (step.k == plan_step::kind::conv) {
      const auto& c = step.conv;
      if (auto st = im.convs[s]->run(ptr(c.x), ptr(c.w), ptr(c.y)); !st)
        return error{"plan step " + std::to_string(s) + ": " + st.message()};
      continue;
    }
    if (convs_only) continue;
    if (step.k == plan_step::kind::gemm) {
      const auto& g = step.gemm;
      const auto& gp = *im.gemms[s];
      auto st = cublasLtMatmul(proc().lt, gp.op, &g.alpha, ptr(g.b), gp.first, ptr(g.a), gp.second,
                               &g.beta, ptr(g.c), gp.out, ptr(g.c), gp.out, &gp.algo,
                               proc().workspace, proc().workspace_bytes, nullptr);
      if (st != CUBLAS_STATUS_SUCCESS)
        return error{"plan step " + std::to_string(s) + ": cublasLtMatmul: " + lt_text(st)};
      continue;
    }
    const auto& k = step.kernel;
    storage.assign(k.args.size(), 0);
    argv.resize(k.args.size());
    for (std::size_t a = 0; a < k.args.size(); ++a) {
      const auto& arg = k.args[a];
      if (arg.k == kernel_arg::kind::buffer) {
        void* q = ptr(arg.buffer);
        std::memcpy(&storage[a], &q, sizeof q);
      } else if (arg.k == kernel_arg::kind::i64) {
        std::memcpy(&storage[a], &arg.i64, sizeof arg.i64);
      } else {
        std::memcpy(&storage[a], &arg.f32, sizeof arg.f32);
      }
      argv[a] = &storage[a];
    }
    dim3 grid(k.grid.x, k.grid.y, k.grid.z), block(k.block.x, k.block.y, k.block.z);
    auto e = cudaLaunchKernel(reinterpret_cast<const void*>(im.kernels[s]), grid, block,
                              argv.data(), k.shared_bytes, nullptr);
    if (e != cudaSuccess)
      return cuda_error("plan step " + std::to_string(s) + " (" + k.kernel + "): launch", e);
  }
  return ok();
}

namespace {

struct timing_events {
  cudaEvent_t start = nullptr, stop = nullptr, drained = nullptr;
  timing_events() {
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventCreate(&drained);
  }
  ~timing_events() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaEventDestroy(drained);
  }
  timing_events(const timing_events&) = delete;
  timing_events& operator=(const timing_events&) = delete;
};

} // namespace

expected<cuda_call_time> cuda_timed_call(const std::function<status()>& call, bool* sticky,
                                         bool settle_start) {
  static timing_events ev;
  using clock = std::chrono::steady_clock;
  if (sticky) *sticky = false;
  auto t0 = clock::now();
  cudaEventRecord(ev.start, nullptr);
  if (settle_start) cudaEventSynchronize(ev.start);
  auto t1 = clock::now();
  auto st = call();
  auto t2 = clock::now();
  cudaEventRecord(ev.stop, nullptr);
  cudaError_t launch = cudaGetLastError();
  cudaError_t sync = cudaDeviceSynchronize();
  cudaEventRecord(ev.drained, nullptr);
  cudaEventSynchronize(ev.drained);
  auto t3 = clock::now();
  auto ms = [](clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  if (launch == cudaSuccess) launch = sync;
  if (launch != cudaSuccess) {
    // A second synchronize fails again only when the context itself is broken.
    cudaGetLastError();
    if (sticky) *sticky = cudaDeviceSynchronize() != cudaSuccess;
    return cuda_error("kernel", launch);
  }
  if (!st) return st.err();
  float stream = 0, whole = 0;
  if (auto e = cudaEventElapsedTime(&stream, ev.start, ev.stop); e != cudaSuccess)
    return cuda_error("event timing", e);
  if (auto e = cudaEventElapsedTime(&whole, ev.start, ev.drained); e != cudaSuccess)
    return cuda_error("event timing", e);
  return cuda_call_time{stream, static_cast<double>(whole) - stream, ms(t1 - t0), ms(t2 - t1),
                        ms(t3 - t2)};
}

} // namespace kiln
