// Runs a compiled cpu program (a shared object exporting kiln_run, see skills/kiln_abi.h) with
// the host services it expects: a thread pool, a library GEMM (the system BLAS) and scratch memory.
// Used inside the kernel host only (no LibTorch there): a crashing kernel takes that process down.
//   .so --dlopen--> kiln_run(host, inputs, params, outputs)
#pragma once

#include "data/expected.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

class cpu_program {
public:
  static expected<cpu_program> load(const std::string& so_path);
  cpu_program(cpu_program&&) noexcept;
  cpu_program& operator=(cpu_program&&) noexcept;
  ~cpu_program();

  // An error when kiln_run returns non-zero; its value is not reported (it would be a channel
  // out of the sandbox). Pointers in task declaration order.
  status run(const std::vector<const void*>& inputs, const std::vector<const void*>& params,
             const std::vector<void*>& outputs) const;

private:
  cpu_program() = default;
  struct impl;
  std::unique_ptr<impl> impl_;
};

// Starts the process-wide host thread pool (threads = 0: hardware cores). Call before seccomp
// forbids new threads.
void start_cpu_host_threads(int threads);

} // namespace kiln
