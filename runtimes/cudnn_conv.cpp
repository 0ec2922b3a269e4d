// cuDNN is reached by dlopen with its C ABI declared here (handles are pointers, enums ints, the
// values below are cuDNN 9's): Kiln builds where cuDNN's headers are absent (this project's cpu
// machines), and where its headers are present the values are checked against them.
#include "runtimes/cudnn_conv.hpp"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <limits>
#include <vector>

#if __has_include(<cudnn.h>)
#include <cudnn.h>
#define KILN_CHECK_CUDNN_ABI 1
#endif

namespace kiln {

namespace {

using handle_t = void*;
constexpr int status_success = 0, data_float = 0, tensor_nchw = 0, cross_correlation = 1;
constexpr int math_tensor_op = 1, math_allow_conversion = 2, math_fma = 3;

struct algo_perf { // cudnnConvolutionFwdAlgoPerf_t and cudnnConvolutionBwdDataAlgoPerf_t
  int algo;
  int status;
  float time;
  size_t memory;
  int determinism;
  int math_type;
  int reserved[3];
};

#ifdef KILN_CHECK_CUDNN_ABI
static_assert(CUDNN_MAJOR == 9, "the declarations here are cuDNN 9's");
static_assert(CUDNN_STATUS_SUCCESS == status_success && CUDNN_DATA_FLOAT == data_float &&
                  CUDNN_TENSOR_NCHW == tensor_nchw && CUDNN_CROSS_CORRELATION == cross_correlation,
              "cuDNN enum values");
static_assert(CUDNN_TENSOR_OP_MATH == math_tensor_op &&
                  CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION == math_allow_conversion &&
                  CUDNN_FMA_MATH == math_fma,
              "cuDNN math types");
static_assert(sizeof(algo_perf) == sizeof(cudnnConvolutionFwdAlgoPerf_t) &&
                  sizeof(algo_perf) == sizeof(cudnnConvolutionBwdDataAlgoPerf_t) &&
                  offsetof(cudnnConvolutionFwdAlgoPerf_t, memory) == offsetof(algo_perf, memory) &&
                  offsetof(cudnnConvolutionFwdAlgoPerf_t, mathType) ==
                      offsetof(algo_perf, math_type),
              "cuDNN perf struct layout");
#endif

struct cudnn_api {
  int (*create)(handle_t*);
  const char* (*error_string)(int);
  int (*create_tensor)(handle_t*);
  int (*set_tensor)(handle_t, int, int, const int*, const int*);
  int (*destroy_tensor)(handle_t);
  int (*create_filter)(handle_t*);
  int (*set_filter)(handle_t, int, int, int, const int*);
  int (*destroy_filter)(handle_t);
  int (*create_conv)(handle_t*);
  int (*set_conv)(handle_t, int, const int*, const int*, const int*, int, int);
  int (*set_groups)(handle_t, int);
  int (*set_math)(handle_t, int);
  int (*destroy_conv)(handle_t);
  int (*fwd_algos)(handle_t, handle_t, handle_t, handle_t, handle_t, int, int*, algo_perf*);
  int (*fwd)(handle_t, const void*, handle_t, const void*, handle_t, const void*, handle_t, int,
             void*, size_t, const void*, handle_t, void*);
  int (*bwd_algos)(handle_t, handle_t, handle_t, handle_t, handle_t, int, int*, algo_perf*);
  int (*bwd)(handle_t, const void*, handle_t, const void*, handle_t, const void*, handle_t, int,
             void*, size_t, const void*, handle_t, void*);
  handle_t handle = nullptr; // one per process: the kernel host serves one job
  std::string failure;       // why cuDNN cannot be used here, or ""
};

template <typename F>
bool bind(void* lib, const char* name, F& fn, std::string& failure) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn && failure.empty()) failure = std::string("cuDNN has no ") + name;
  return fn != nullptr;
}

cudnn_api& api() {
  static cudnn_api a = [] {
    cudnn_api v{};
    void* lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = dlerror();
      v.failure =
          std::string("cuDNN 9 is not installed (libcudnn.so.9: ") + (e ? e : "not found") + ")";
      return v;
    }
    std::string& f = v.failure;
    bind(lib, "cudnnCreate", v.create, f);
    bind(lib, "cudnnGetErrorString", v.error_string, f);
    bind(lib, "cudnnCreateTensorDescriptor", v.create_tensor, f);
    bind(lib, "cudnnSetTensorNdDescriptor", v.set_tensor, f);
    bind(lib, "cudnnDestroyTensorDescriptor", v.destroy_tensor, f);
    bind(lib, "cudnnCreateFilterDescriptor", v.create_filter, f);
    bind(lib, "cudnnSetFilterNdDescriptor", v.set_filter, f);
    bind(lib, "cudnnDestroyFilterDescriptor", v.destroy_filter, f);
    bind(lib, "cudnnCreateConvolutionDescriptor", v.create_conv, f);
    bind(lib, "cudnnSetConvolutionNdDescriptor", v.set_conv, f);
    bind(lib, "cudnnSetConvolutionGroupCount", v.set_groups, f);
    bind(lib, "cudnnSetConvolutionMathType", v.set_math, f);
    bind(lib, "cudnnDestroyConvolutionDescriptor", v.destroy_conv, f);
    bind(lib, "cudnnGetConvolutionForwardAlgorithm_v7", v.fwd_algos, f);
    bind(lib, "cudnnConvolutionForward", v.fwd, f);
    bind(lib, "cudnnGetConvolutionBackwardDataAlgorithm_v7", v.bwd_algos, f);
    bind(lib, "cudnnConvolutionBackwardData", v.bwd, f);
    if (f.empty())
      if (int s = v.create(&v.handle); s != status_success)
        f = "cudnnCreate: " + std::string(v.error_string(s));
    return v;
  }();
  return a;
}

error cudnn_error(const std::string& what, int s) {
  return error{what + ": " + std::string(api().error_string(s))};
}

} // namespace

struct cudnn_conv::impl {
  conv_step step;
  handle_t x_desc = nullptr, y_desc = nullptr, w_desc = nullptr, conv_desc = nullptr;
  int algo = 0, math = math_fma;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  ~impl() {
    auto& a = api();
    if (workspace) cudaFree(workspace);
    if (x_desc) a.destroy_tensor(x_desc);
    if (y_desc) a.destroy_tensor(y_desc);
    if (w_desc) a.destroy_filter(w_desc);
    if (conv_desc) a.destroy_conv(conv_desc);
  }
};

expected<std::unique_ptr<cudnn_conv>> cudnn_conv::prepare(const conv_step& c,
                                                          int64_t max_workspace_bytes) {
  auto& a = api();
  if (!a.failure.empty()) return error{a.failure};
  if (auto st = check_conv(c, "conv step"); !st) return st.err();
  std::unique_ptr<cudnn_conv> conv(new cudnn_conv);
  conv->impl_ = std::make_unique<impl>();
  auto& im = *conv->impl_;
  im.step = c;
  // cuDNN wants 4-d tensors at least: a 1d conv runs as 2d over a unit height.
  const int nd = std::max(2, c.spatial), lead = 3 - nd;
  auto dims_of = [&](int64_t channels, const std::vector<int64_t>& sp,
                     const char* what) -> expected<std::vector<int>> {
    std::vector<int64_t> d{c.batch, channels};
    for (int i = lead; i < 3; ++i) d.push_back(sp[i]);
    int64_t total = 1;
    for (auto x : d) total *= x;
    if (total > std::numeric_limits<int>::max())
      return error{std::string("conv step: the ") + what + " tensor has more than 2^31 elements"};
    std::vector<int> out(d.begin(), d.end());
    return out;
  };
  auto set_tensor = [&](handle_t& desc, const std::vector<int>& d, const char* what) -> status {
    if (int s = a.create_tensor(&desc); s != status_success) return cudnn_error(what, s);
    std::vector<int> stride(d.size(), 1);
    for (int i = static_cast<int>(d.size()) - 2; i >= 0; --i) stride[i] = stride[i + 1] * d[i + 1];
    if (int s = a.set_tensor(desc, data_float, static_cast<int>(d.size()), d.data(), stride.data());
        s != status_success)
      return cudnn_error(std::string(what) + " descriptor", s);
    return ok();
  };
  auto xd = dims_of(c.ci, c.in, "input");
  if (!xd) return xd.err();
  auto yd = dims_of(c.co, c.out, "output");
  if (!yd) return yd.err();
  if (auto st = set_tensor(im.x_desc, *xd, "input"); !st) return st.err();
  if (auto st = set_tensor(im.y_desc, *yd, "output"); !st) return st.err();

  // The filter as the forward conv sees it: [co, ci / g, k] forward; [ci, co / g, k] transposed.
  std::vector<int> wd{static_cast<int>(c.transposed ? c.ci : c.co),
                      static_cast<int>((c.transposed ? c.co : c.ci) / c.groups)};
  std::vector<int> pad, stride, dilation;
  for (int i = lead; i < 3; ++i) {
    wd.push_back(static_cast<int>(c.ker[i]));
    pad.push_back(static_cast<int>(c.pad[i]));
    stride.push_back(static_cast<int>(c.stride[i]));
    dilation.push_back(static_cast<int>(c.dilation[i]));
  }
  if (int s = a.create_filter(&im.w_desc); s != status_success) return cudnn_error("filter", s);
  if (int s =
          a.set_filter(im.w_desc, data_float, tensor_nchw, static_cast<int>(wd.size()), wd.data());
      s != status_success)
    return cudnn_error("filter descriptor", s);
  if (int s = a.create_conv(&im.conv_desc); s != status_success)
    return cudnn_error("convolution", s);
  if (int s = a.set_conv(im.conv_desc, nd, pad.data(), stride.data(), dilation.data(),
                         cross_correlation, data_float);
      s != status_success)
    return cudnn_error("convolution descriptor", s);
  if (int s = a.set_groups(im.conv_desc, static_cast<int>(c.groups)); s != status_success)
    return cudnn_error("convolution groups", s);
  // fp32 is exact only with FMA math: cuDNN's default math lets TF32 tensor cores in.
  int want = c.precision == gemm_precision::fp32   ? math_fma
             : c.precision == gemm_precision::tf32 ? math_tensor_op
                                                   : math_allow_conversion;
  if (int s = a.set_math(im.conv_desc, want); s != status_success)
    return cudnn_error("convolution math type", s);

  std::array<algo_perf, 16> perf{};
  int found = 0;
  int s = c.transposed ? a.bwd_algos(a.handle, im.w_desc, im.x_desc, im.conv_desc, im.y_desc,
                                     static_cast<int>(perf.size()), &found, perf.data())
                       : a.fwd_algos(a.handle, im.x_desc, im.w_desc, im.conv_desc, im.y_desc,
                                     static_cast<int>(perf.size()), &found, perf.data());
  if (s != status_success) return cudnn_error("algorithm heuristics", s);
  const algo_perf* pick = nullptr;
  for (int i = 0; i < found && !pick; ++i) {
    const auto& p = perf[static_cast<size_t>(i)];
    bool exact_enough = want != math_fma || p.math_type == math_fma;
    if (p.status == status_success && exact_enough &&
        p.memory <= static_cast<size_t>(max_workspace_bytes))
      pick = &p;
  }
  if (!pick)
    return error{"conv step: cuDNN offers no algorithm for this convolution at this precision "
                 "within a workspace of " +
                 std::to_string(max_workspace_bytes) + " bytes"};
  im.algo = pick->algo;
  im.math = pick->math_type;
  if (int s2 = a.set_math(im.conv_desc, im.math); s2 != status_success)
    return cudnn_error("convolution math type", s2);
  im.workspace_bytes = pick->memory;
  if (im.workspace_bytes > 0 && cudaMalloc(&im.workspace, im.workspace_bytes) != cudaSuccess) {
    cudaGetLastError();
    return error{"conv step: a cuDNN workspace of " + std::to_string(im.workspace_bytes) +
                 " bytes"};
  }
  return conv;
}

cudnn_conv::~cudnn_conv() = default;

status cudnn_conv::run(const void* x, const void* w, void* y) {
  auto& a = api();
  auto& im = *impl_;
  const float one = 1.f, zero = 0.f;
  int s = im.step.transposed
              ? a.bwd(a.handle, &one, im.w_desc, w, im.x_desc, x, im.conv_desc, im.algo,
                      im.workspace, im.workspace_bytes, &zero, im.y_desc, y)
              : a.fwd(a.handle, &one, im.x_desc, x, im.w_desc, w, im.conv_desc, im.algo,
                      im.workspace, im.workspace_bytes, &zero, im.y_desc, y);
  if (s != status_success)
    return cudnn_error(
        im.step.transposed ? "cudnnConvolutionBackwardData" : "cudnnConvolutionForward", s);
  return ok();
}

std::string cudnn_conv::description() const {
  char b[96];
  std::snprintf(b, sizeof b, "%s algo %d, math %d, workspace %zu B",
                impl_->step.transposed ? "bwd-data" : "fwd", impl_->algo, impl_->math,
                impl_->workspace_bytes);
  return b;
}

} // namespace kiln
