// GPU test (ctest label "gpu"): the CUDA reference agrees with the CPU reference on every task of
// the cpu-profile suites, given the same inputs and params, and draws with modifiers (scale,
// shift, random_scale, structure) hold their properties when drawn on the device. Exits 77
// (ctest: skipped) without CUDA.
#include "data/reference.hpp"
#include "data/task_check.hpp"
#include "data/task_parse.hpp"
#include "data/task_set.hpp"

#include <ATen/ATen.h>
#include <cstdio>

using namespace kiln;

namespace {

// Inputs drawn on the device, as the cuda executor draws them: each modifier's property.
int check_device_draws(c10::Device cuda) {
  auto t = task_from_toml(R"(name = "draws"
level = 1
dtype = "float32"
outputs = ["y"]
[[inputs]]
name = "pm"
shape = [64, 64]
init = "randint:0:2"
scale = 2.0
shift = -1.0
[[inputs]]
name = "up"
shape = [64, 64]
structure = "triu"
[[inputs]]
name = "sym"
shape = [2, 64, 64]
init = "normal"
structure = "symmetric"
[[inputs]]
name = "rs"
shape = [64, 64]
random_scale = true
[[ops]]
out = "y"
op = "add"
args = ["pm", "up"]
)",
                          "draws.toml");
  if (!t || !check_task(*t)) {
    std::printf("FAIL draws: the task does not load\n");
    return 1;
  }
  auto x = make_inputs(*t, 9, cuda);
  int bad = 0;
  auto fail = [&](const char* what) { std::printf("FAIL device draws: %s\n", what), ++bad; };
  if (!at::equal(x[0].abs().cpu(), at::ones({64, 64}))) fail("randint * 2 - 1 is not +-1");
  if (!at::equal(x[1].cpu(), x[1].cpu().triu()) || x[1].sum().item<double>() <= 0)
    fail("triu has values below the diagonal (or none at all)");
  if (!at::equal(x[2].cpu(), x[2].cpu().transpose(-2, -1))) fail("symmetric is not symmetric");
  double hi = x[3].max().item<double>();
  if (!(hi > 0 && hi < 1)) fail("random_scale is out of [0, 1)");
  std::printf("device draws with modifiers: %d failed\n", bad);
  return bad;
}

} // namespace

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
  bad += check_device_draws(cuda);
  return bad == 0 ? 0 : 1;
}
