// Reference executor: (task, seed, device) -> params, inputs -> outputs, with LibTorch eager ops.
// It is the ground truth for verification and the eager baseline for timing.
#pragma once

#include "data/expected.hpp"
#include "data/task_spec.hpp"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <cstdint>
#include <vector>

namespace kiln {

// Params are fixed per task instance (like module weights); this seed draws them unless the
// caller picks another: the task's param_seed where it has one, else a hash of its name.
uint64_t default_param_seed(const task& t);

// Tensors on `device` in the task dtype. Deterministic for a seed on a given device type.
std::vector<at::Tensor> make_params(const task& t, uint64_t seed, c10::Device device);
std::vector<at::Tensor> make_inputs(const task& t, uint64_t seed, c10::Device device);

// Runs the op graph; returns the task outputs in `outputs` order (contiguous; argmax/argmin as
// int64). On CPU, float16/bfloat16 tasks compute in float32 and round the results to the dtype.
// TF32 is disabled: the reference is exact fp32. Errors (a LibTorch exception) name the op.
expected<std::vector<at::Tensor>> run_reference(const task& t,
                                                const std::vector<at::Tensor>& inputs,
                                                const std::vector<at::Tensor>& params);

// Blocks until queued work on `device` is done (a no-op on CPU).
void synchronize(c10::Device device);

// Parses "cpu", "cuda", "cuda:N"; error if CUDA is requested but not available.
expected<c10::Device> parse_device(const std::string& name);

} // namespace kiln
