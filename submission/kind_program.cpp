// The kernel language as a submission kind: a program (skills/program.hpp) checked against the
// task, generated per backend (cpu: C++ for the host compiler; cuda: NVRTC source and a launch
// plan) and compiled through the cache.
#include "submission/submission_kind.hpp"

#include "skills/codegen_cpu.hpp"
#include "skills/grammar.hpp"
#ifdef KILN_HAVE_CUDA
#include "compile/cuda_compiler.hpp"
#include "skills/codegen_cuda.hpp"
#endif

#include <string>

namespace kiln {

namespace {

// A text that opens like a marker but matches none: say which markers exist, rather than
// failing it as a kernel-language program.
std::string unknown_marker(const std::string& text) {
  std::string msg = "marker line '" + text.substr(0, text.find('\n')) +
                    "' names no submission kind; the markers are:";
  for (const auto* e : submission_kinds())
    if (e->marker) msg += std::string(" '") + e->marker + "'";
  return msg;
}

expected<compile_request> prepare(const std::string& text, const task& spec, backend_kind backend) {
  if (text.rfind("//!", 0) == 0 || text.rfind("#! kiln-source", 0) == 0)
    return error{unknown_marker(text)};
  auto prog = parse_program(text);
  if (!prog) return prog.err();
  if (auto st = check_program(*prog, spec); !st) return st.err();
  compile_request r;
  r.kind = submission_kind::program;
  r.backend = backend;
  // The generator must not take the pool down, whatever the program.
  try {
    if (backend == backend_kind::cpu) {
      auto src = generate_cpu(spec, *prog);
      if (!src) return src.err();
      r.source = std::move(*src);
      return r;
    }
#ifdef KILN_HAVE_CUDA
    auto cp = generate_cuda(spec, *prog);
    if (!cp) return cp.err();
    r.source = cp->source;
    r.plan_json = to_json(cp->plan);
    r.fast_math = cp->fast_math;
    return r;
#else
    return error{"this build has no cuda backend"};
#endif
  } catch (const std::exception& e) {
    return error{std::string(to_string(backend)) + " generator failed: " + e.what()};
  }
}

expected<built_artifact> build(const compile_request& r, const build_options& opts) {
  if (r.backend == backend_kind::cpu) {
    auto a = compile_cpu(r.source, opts.host);
    if (!a) return a.err();
    return built_artifact{a->so_path, a->key, a->cache_hit, a->compile_ms};
  }
#ifdef KILN_HAVE_CUDA
  auto plan = plan_from_json(r.plan_json);
  if (!plan) return error{"launch plan: " + plan.message()};
  cuda_compile_options co;
  co.cache_dir = opts.host.cache_dir;
  co.arch = opts.cuda_arch;
  auto a = compile_cuda(cuda_program{r.source, std::move(*plan), r.fast_math}, co);
  if (!a) return a.err();
  return built_artifact{a->cubin_path, a->key, a->cache_hit, a->compile_ms};
#else
  return error{"this build has no cuda backend"};
#endif
}

} // namespace

extern const submission_kind_info program_kind = {
    submission_kind::program,
    "program",
    std::nullopt,
    nullptr,
    nullptr,
    artifact_loader::cpu_shared_object,
    artifact_loader::cuda_cubin_plan,
    prepare,
    build,
};

} // namespace kiln
