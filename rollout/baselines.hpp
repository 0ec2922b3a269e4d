// torch.compile baselines, measured where PyTorch lives (tools/torch_baselines.py on the GPU
// machine) and read by Kiln for reward tier 3 and eval's compile metrics. Keyed by the task's
// content hash, so a renamed task keeps its baseline and a changed one loses it.
//   baselines.json --load_baselines--> compile_baselines --lookup(task)--> compile ms | none
#pragma once

#include "data/expected.hpp"
#include "data/task_spec.hpp"

#include <map>
#include <optional>
#include <string>

namespace kiln {

// File format (docs/DESIGN.md): {"kiln_baselines": 1, "device": "...", "torch": "2.11.0",
// "mode": "default", "tasks": {"<content hash, 16 hex>": {"task": "relu", "eager_ms": 1.9,
// "compile_ms": 1.7}, ...}}
struct compile_baselines {
  std::string origin, device, torch, mode;
  std::map<std::string, double> compile_ms; // content hash -> median ms
};

expected<compile_baselines> load_baselines(const std::string& path);

// The task's torch.compile median, if the file has it (never a guess).
std::optional<double> lookup(const compile_baselines& b, const task& t);

} // namespace kiln
