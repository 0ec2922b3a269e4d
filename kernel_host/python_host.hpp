// The kernel host's embedded Python, for KernelBench ModelNew submissions (the kernelbench-module
// loaders, cpu and cuda). libpython is opened with dlopen only in a host started with --python, so
// hosts that run C ABI kernels never map it. Started before the sandbox (torch imported, its thread
// pool made), loaded and called inside it; the Python side is kernel_host/kernelbench_host.py.
//   --python LIB --start--> interpreter + torch --load(bundle, buffers)--> model --call--> status
#pragma once

#include "data/expected.hpp"

#include <string>
#include <vector>

namespace kiln {

// Before the sandbox: dlopen `library`, start the interpreter (no user site, no bytecode
// written) with `sys_path` (':'-separated: a venv's site-packages reach an embedded interpreter
// only this way; "" keeps its own), import torch with `threads` threads and, for
// cuda_device >= 0, start its CUDA state on that device (in the primary context the host opened).
status start_python_host(const std::string& library, const std::string& sys_path, int threads,
                         int cuda_device);
bool python_host_started();
// The folders the interpreter reads (its prefix, sys.path): landlock must allow them.
std::vector<std::string> python_host_read_paths();

// Inside the sandbox: unpack the bundle beside `bundle`, build ModelNew, give it the params.
status python_host_load(const std::string& bundle, const std::vector<const void*>& inputs,
                        const std::vector<const void*>& params, const std::vector<void*>& outputs);
// One forward on the buffers as they are; outputs written into theirs.
status python_host_call();

} // namespace kiln
