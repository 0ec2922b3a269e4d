//! kiln-source cpu
// Free-form cpu source for data/suites/level1/cpu/relu.toml (x: [832, 16384] -> y0 = relu(x)):
// a C++ shared object exporting kiln_run (skills/kiln_abi.h). The host's threads come in through
// host->parallel_for, so the kernel gets the same cores as the eager baseline.
#include "kiln_abi.h"

namespace {

constexpr int64_t kElements = int64_t{832} * 16384;

struct relu_args {
  const float* x;
  float* y;
};

void relu_range(void* ctx, int64_t begin, int64_t end) {
  auto* a = static_cast<relu_args*>(ctx);
  for (int64_t i = begin; i < end; ++i) a->y[i] = a->x[i] > 0.f ? a->x[i] : 0.f;
}

} // namespace

extern "C" int kiln_run(const kiln_host* host, const void* const* inputs,
                        const void* const* /*params*/, void* const* outputs) {
  if (host->abi_version != KILN_ABI_VERSION) return 1;
  relu_args a{static_cast<const float*>(inputs[0]), static_cast<float*>(outputs[0])};
  host->parallel_for(host, kElements, 1 << 16, relu_range, &a);
  return 0;
}
