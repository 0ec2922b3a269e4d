// The kind of a submission, as one type. Each kind is one entry in the table of
// submission_kind.cpp, defined in a file of its own (kind_program.cpp, kind_source.cpp): how it is
// recognised in a submission's text, which backends take it, how the pool turns it into something
// to compile (prepare, in the pool actor), how a compile worker builds it (build, blocking) and
// how a kernel host loads what was built (its artifact_loader). The pool, the kernel hosts,
// `kiln eval --policy sources:DIR` and the LLM policy ask this table; nothing else infers a kind.
//   text --recognise--> kind --prepare--> compile_request --build--> artifact {loader, path}
//   --kernel host (kernel_host/loaded_kernel.cpp, by loader)--> calls
#pragma once

#include "compile/cpu_compiler.hpp"
#include "data/expected.hpp"
#include "data/task_spec.hpp"
#include "skills/backend_kind.hpp"
#include "submission/artifact_loader.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

enum class submission_kind : uint8_t {
  program,     // the kernel language (skills/program.hpp), generated per backend
  cpu_source,  // C++ exporting kiln_run (skills/kiln_abi.h)
  cuda_source, // CUDA C++ exporting kiln_cuda_run (skills/kiln_cuda_abi.h)
  kernelbench, // a KernelBench ModelNew module (Python; load_inline extensions)
};

// What a compile worker builds: the pool's prepare step made it, the kind's build step takes it.
struct compile_request {
  submission_kind kind = submission_kind::program;
  backend_kind backend = backend_kind::cpu;
  std::string source;
  std::string plan_json; // program on cuda: the launch plan; kernelbench: the task's spec.json
  bool fast_math = false;
};

struct built_artifact {
  std::string path;
  std::string key; // 16 hex digits: the content-addressed cache key
  bool cache_hit = false;
  double compile_ms = 0; // 0 on a hit
};

struct build_options {
  cpu_compile_options host; // cache_dir serves every kind
  std::string cuda_arch = "sm_90";
};

struct submission_kind_info {
  submission_kind kind;
  const char* name; // "program", "cpu-source", "cuda-source": logs, eval JSON, messages
  // The only backend it runs on; nullopt: every backend (the kernel language is generated per
  // backend).
  std::optional<backend_kind> backend;
  const char* marker;         // its first line; nullptr: the default kind, recognised by no marker
  const char* file_extension; // `sources:DIR` reads DIR/<task><ext>; nullptr: not read from files
  artifact_loader loader_cpu, loader_cuda; // how a kernel host loads it, per backend
  // In the pool actor, cheap: the submission's text (checked against the task) -> what to compile.
  expected<compile_request> (*prepare)(const std::string& text, const task& spec,
                                       backend_kind backend);
  // In a compile worker, blocking: compile through the content-addressed cache.
  expected<built_artifact> (*build)(const compile_request& request, const build_options& opts);
};

// The registration table: every kind, the default (program) first.
const std::vector<const submission_kind_info*>& submission_kinds();
const submission_kind_info& info(submission_kind k);
const char* to_string(submission_kind k);
std::optional<submission_kind> submission_kind_from(const std::string& name);

// The kind whose marker starts `text` (markers open with "//!" or, for Python, "#!"); program
// where none does.
const submission_kind_info& recognise(const std::string& text);
bool serves(const submission_kind_info& k, backend_kind b);
artifact_loader loader_of(const submission_kind_info& k, backend_kind b); // none: not served

// The free-form source kinds a backend takes, for sources:DIR and the LLM policy.
std::vector<const submission_kind_info*> source_kinds_for(backend_kind b);
// The first of those: the kind an LLM's answer is taken as.
const submission_kind_info& default_source_kind(backend_kind b);
// `source` as a submission of kind k: its marker line first, unless the text starts with it.
std::string as_submission(const submission_kind_info& k, const std::string& source);

// recognise -> serves? -> prepare, with an error naming the kind and the backend where it does not
// serve this pool.
expected<compile_request> prepare_submission(const std::string& text, const task& spec,
                                             backend_kind backend);
// The request's kind builds it; its loader comes with the artifact.
expected<built_artifact> build_submission(const compile_request& r, const build_options& opts);

} // namespace kiln
