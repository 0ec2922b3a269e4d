// Free-form source as submission kinds: the whole text, marker line included (so compiler line
// numbers stay right), compiled as it is. cpu: C++ exporting kiln_run (skills/kiln_abi.h) by the
// host compiler; cuda: CUDA C++ exporting kiln_cuda_run (skills/kiln_cuda_abi.h) by nvcc, to a
// shared object on the shared cudart, so it uses the kernel host's runtime and current device.
#include "submission/submission_kind.hpp"

#ifdef KILN_HAVE_CUDA
#include "compile/cuda_compiler.hpp"
#endif

#include <string>

namespace kiln {

namespace {

constexpr std::size_t max_source_bytes = std::size_t{1} << 20;

expected<compile_request> prepare(submission_kind kind, const std::string& text,
                                  backend_kind backend) {
  if (text.size() > max_source_bytes)
    return error{"free-form source of " + std::to_string(text.size()) + " bytes; the limit is " +
                 std::to_string(max_source_bytes)};
  compile_request r;
  r.kind = kind;
  r.backend = backend;
  r.source = text;
  return r;
}

expected<built_artifact> build_with(const std::string& source, const cpu_compile_options& o) {
  auto a = compile_cpu(source, o);
  if (!a) return a.err();
  return built_artifact{a->so_path, a->key, a->cache_hit, a->compile_ms};
}

expected<compile_request> prepare_cpu(const std::string& text, const task&, backend_kind b) {
  return prepare(submission_kind::cpu_source, text, b);
}

expected<built_artifact> build_cpu(const compile_request& r, const build_options& opts) {
  return build_with(r.source, opts.host);
}

expected<compile_request> prepare_cuda(const std::string& text, const task&, backend_kind b) {
  return prepare(submission_kind::cuda_source, text, b);
}

expected<built_artifact> build_cuda(const compile_request& r, const build_options& opts) {
#ifdef KILN_HAVE_CUDA
  return build_with(r.source, nvcc_options(opts.host, opts.cuda_arch));
#else
  (void)r;
  (void)opts;
  return error{"this build has no cuda backend"};
#endif
}

} // namespace

extern const submission_kind_info cpu_source_kind = {
    submission_kind::cpu_source, "cpu-source", backend_kind::cpu,
    "//! kiln-source cpu",       ".cpp",       artifact_loader::cpu_shared_object,
    artifact_loader::none,       prepare_cpu,  build_cpu,
};

extern const submission_kind_info cuda_source_kind = {
    submission_kind::cuda_source,
    "cuda-source",
    backend_kind::cuda,
    "//! kiln-source cuda",
    ".cu",
    artifact_loader::none,
    artifact_loader::cuda_shared_object,
    prepare_cuda,
    build_cuda,
};

} // namespace kiln
