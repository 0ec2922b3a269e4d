// Free-form source submissions, beside kernel-language programs: a submission whose first line is
// "//! kiln-source cpu" or "//! kiln-source cuda" is source code for that backend's compiler
// (cpu: C++ exporting kiln_run, skills/kiln_abi.h; cuda: CUDA C++ exporting kiln_cuda_run,
// skills/kiln_cuda_abi.h), verified and timed exactly like a generated program.
//   text --parse_source_program--> {backend, source} --g++ / nvcc (cached)--> shared object
#pragma once

#include "data/expected.hpp"
#include "skills/expert.hpp"

#include <string>

namespace kiln {

inline constexpr const char* source_marker = "//! kiln-source";

struct source_program {
  backend_kind backend = backend_kind::cpu;
  std::string source; // the whole text, marker line included (line numbers stay right)
};

// True when `text` starts with the marker: it is then never parsed as a kernel-language program.
bool is_source_program(const std::string& text);
// The marker's backend and the source; an error naming the marker line when it is malformed.
expected<source_program> parse_source_program(const std::string& text);
// `source` as a submission for `backend`: the marker line first, unless the text has one already.
std::string make_source_program(backend_kind backend, const std::string& source);

} // namespace kiln
