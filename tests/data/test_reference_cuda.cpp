// GPU test (ctest label "gpu"): the CUDA reference agrees with the CPU reference on every task of
// the cpu-profile suites, given the same inputs and params. Exits 77 (ctest: skipped) without CUDA.
#include "data/reference.hpp"
#include "data/task_set.hpp"

#include <ATen/ATen.h>
#include <cstdio>

using namespace kiln;

int main() {
  if (!at::hasCUDA()) {
    std::printf("SKIPPED: no CUDA device visible to LibTorch\n");
    return 77;
  }
  std::string root = KILN_SOURCE_DIR "/data/suites/";
  auto set = load_tasks({root + "level1/cpu", root + "level2/cpu", root + "level3/cpu"});
  if (!set.errors.empty() || set.tasks.empty()) {
    std::printf("FAIL: suites did not load (%zu errors)\n", set.errors.size());
    return 1;
  }
  c10::Device cpu(c10::kCPU), cuda(c10::kCUDA, 0);
  int bad = 0;
  double worst = 0;
  std::string worst_task;
  for (const auto& t : set.tasks) {
    auto params = make_params(t, default_param_seed(t), cpu);
    auto inputs = make_inputs(t, 3, cpu);
    std::vector<at::Tensor> params_gpu, inputs_gpu;
    for (auto& p : params) params_gpu.push_back(p.to(cuda));
    for (auto& x : inputs) inputs_gpu.push_back(x.to(cuda));
    auto want = run_reference(t, inputs, params);
    auto got = run_reference(t, inputs_gpu, params_gpu);
    if (!want || !got) {
      std::printf("FAIL %s: %s\n", t.name.c_str(),
                  (!want ? want.message() : got.message()).c_str());
      ++bad;
      continue;
    }
    for (std::size_t o = 0; o < want->size(); ++o) {
      auto w = (*want)[o].to(at::kDouble);
      auto g = (*got)[o].cpu().to(at::kDouble);
      // Relative to the output's scale: algorithms differ in summation order between devices.
      double scale = std::max(1.0, w.abs().max().item<double>());
      double err = (g - w).abs().max().item<double>() / scale;
      if (err > worst) {
        worst = err;
        worst_task = t.name;
      }
      if (err > 1e-3) {
        std::printf("FAIL %s output %zu: max error %.3g (relative to max |y|)\n", t.name.c_str(), o,
                    err);
        ++bad;
      }
    }
  }
  std::printf("%zu tasks compared on cpu and cuda; worst scaled error %.3g (%s); %d failed\n",
              set.tasks.size(), worst, worst_task.c_str(), bad);
  return bad == 0 ? 0 : 1;
}
