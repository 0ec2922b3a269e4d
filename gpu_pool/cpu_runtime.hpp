// Runs a compiled cpu program (a shared object exporting kiln_run, see skills/kiln_abi.h) with
// the host services it expects: a thread pool, a library GEMM (LibTorch's) and scratch memory.
// Used inside the executor process only: a crashing kernel takes that process down, not the pool.
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

  // Returns kiln_run's code as an error when non-zero. Pointers in task declaration order.
  status run(const std::vector<const void*>& inputs, const std::vector<const void*>& params,
             const std::vector<void*>& outputs) const;

private:
  cpu_program() = default;
  struct impl;
  std::unique_ptr<impl> impl_;
};

// The process-wide host services (threads = 0: hardware cores).
void set_cpu_host_threads(int threads);

} // namespace kiln
