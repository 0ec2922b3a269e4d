// A task's reference as the problem's own PyTorch module (issue #34): the op `pytorch_module`
// holds the module traced to TorchScript (base64, its weights left out), the count of its
// tensor inputs and the state_dict key each task param is loaded into. The reference executor
// runs it in place of an op graph, with the task's drawn params, in this (trusted) process.
//   op attrs --decode, load once--> module --params by key, inputs--> forward --> outputs
#pragma once

#include "data/expected.hpp"
#include "data/task_spec.hpp"

#include <ATen/core/Tensor.h>
#include <vector>

namespace kiln {

// Runs the module of `op` on its args (the module's tensor inputs, then the params in the order of
// attrs.state_dict); returns every output of its forward, in order. The error names what failed:
// the decoding, a key the module does not hold, the forward's exception.
expected<std::vector<at::Tensor>> run_module(const op_node& op,
                                             const std::vector<at::Tensor>& args);

} // namespace kiln
