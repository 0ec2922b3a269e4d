// KernelBench ModelNew modules as a submission kind: one Python file defining
// `class ModelNew(nn.Module)` with the problem's constructor, whose kernels come from
// torch.utils.cpp_extension.load_inline / load (C++ on cpu, CUDA C++ on cuda). Only for tasks
// imported from KernelBench (their [kernelbench] table: the problem's source, init inputs, forward
// arguments and state_dict names). The compile worker runs submission/kernelbench_build.py in the
// compile sandbox with the system's Python: the extensions are compiled there, and ModelNew is
// built and checked against the task; the bundle it writes is loaded by a kernel host started with
// Python. On cuda the compile stage sees no device (compile workers run beside timed trials): the
// extensions are built for the pool's arch, and the checks that need the device (construction
// where ModelNew asks for cuda, the first forward) are made by the kernel host at load.
//   text + task --prepare: spec.json--> compile request --build (python, sandboxed)--> kernel.kb
#include "submission/submission_kind.hpp"

#include "compile/torch_python.hpp"
#include "submission/kernelbench_build_py.hpp"  // generated: the build script's text
#include "submission/kernelbench_compat_py.hpp" // generated: tools/kernelbench/compat.py

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace kiln {

namespace {

using json = nlohmann::json;

constexpr std::size_t max_source_bytes = std::size_t{1} << 20;
constexpr const char* kernelbench_marker = "#! kiln-source kernelbench";

json shapes(const std::vector<tensor_decl>& decls) {
  json out = json::array();
  for (const auto& d : decls) out.push_back({{"name", d.name}, {"shape", d.shape}});
  return out;
}

expected<compile_request> prepare(const std::string& text, const task& spec, backend_kind b) {
  if (spec.kernelbench_json.empty())
    return error{"a kernelbench submission needs a task imported from KernelBench (its "
                 "[kernelbench] table); task '" +
                 spec.name + "' has none"};
  if (text.size() > max_source_bytes)
    return error{"ModelNew source of " + std::to_string(text.size()) + " bytes; the limit is " +
                 std::to_string(max_source_bytes)};
  json s = {{"task", spec.name},
            {"device", to_string(b)},
            {"kernelbench", json::parse(spec.kernelbench_json)},
            {"inputs", shapes(spec.inputs)},
            {"params", shapes(spec.params)},
            {"outputs", json::array()}};
  for (const auto& name : spec.outputs) {
    auto ref = find_value(spec, name);
    bool index = ref.k == value_ref::kind::op && spec.ops[ref.index].is_index;
    s["outputs"].push_back({{"name", name},
                            {"shape", value_shape(spec, ref)},
                            {"dtype", index ? "int64" : "float32"}});
  }
  compile_request r;
  r.kind = submission_kind::kernelbench;
  r.backend = b;
  // Without the marker line, so Python's line numbers are those of the file the policy wrote
  // (sources:DIR and LLM answers come without it; as_submission added it).
  r.source = text.rfind(kernelbench_marker, 0) == 0
                 ? text.substr(std::min(text.size(), text.find('\n') + 1))
                 : text;
  r.plan_json = s.dump();
  return r;
}

expected<built_artifact> build(const compile_request& r, const build_options& opts) {
  const auto& py = find_torch_python();
  if (py.executable.empty()) return error{"ModelNew build: " + py.why_none};
  const std::string& python = py.executable;
  cpu_compile_options o = opts.host;
  o.compiler = python;
  o.identity_args = {"-c", "import sys, torch; print('python', sys.version.split()[0], 'torch', "
                           "torch.__version__)"};
  // -I: isolated (no user site, no PYTHON* variables); -B: no bytecode files.
  o.command = {python, "-I", "-B", "build.py"};
  o.read_paths = py.folders; // a venv's torch (the GPU machine's) lies outside the system's
  // load_inline compiles with $CC / $CXX (nvcc: -ccbin $CC): a toolchain outside /usr (the GPU
  // machine's /opt/gcc) is read from its prefix.
  for (const char* var : {"CC", "CXX", "CUDAHOSTCXX"})
    if (const char* v = std::getenv(var); v && v[0] == '/')
      o.read_paths.push_back(std::filesystem::path(v).parent_path().parent_path().string());
  o.source_extension = ".py";
  std::string spec_json = r.plan_json;
  if (r.backend == backend_kind::cuda) {
    // "sm_90" -> "9.0", as TORCH_CUDA_ARCH_LIST says it; part of the cache key with spec.json.
    json s = json::parse(r.plan_json);
    std::string arch = opts.cuda_arch.substr(opts.cuda_arch.find('_') + 1);
    if (arch.size() < 2 || arch.find_first_not_of("0123456789") != std::string::npos)
      return error{"ModelNew build: cannot read the cuda arch '" + opts.cuda_arch + "'"};
    s["cuda_arch"] = arch.substr(0, arch.size() - 1) + "." + arch.substr(arch.size() - 1);
    spec_json = s.dump();
    // Importing a CUDA build of torch maps its device libraries (several GiB of address space).
    o.memory_mib = std::max<int64_t>(o.memory_mib, 32768);
  }
  o.job_files = {{"build.py", kernelbench_build_py},
                 {"compat.py", kernelbench_compat_py},
                 {"spec.json", spec_json}};
  o.artifact_extension = ".kb";
  o.flags.clear();
  o.timeout_s = 300; // torch's headers alone take ~20 s per extension on a 2-core machine
  auto a = compile_cpu(r.source, o);
  if (!a) {
    // compile_cpu says "<python> failed (exit 1, key K):\n<log>": the log is the reason.
    std::string m = a.message();
    auto nl = m.find(":\n");
    if (m.find(" failed (exit 1") != std::string::npos && nl != std::string::npos)
      return error{"ModelNew build: " + m.substr(nl + 2)};
    return error{"ModelNew build: " + m};
  }
  return built_artifact{a->so_path, a->key, a->cache_hit, a->compile_ms};
}

} // namespace

extern const submission_kind_info kernelbench_kind = {
    submission_kind::kernelbench,
    "kernelbench",
    std::nullopt, // both backends: load_inline builds C++ on cpu, CUDA C++ on cuda
    kernelbench_marker,
    ".py",
    artifact_loader::kernelbench_module,
    artifact_loader::kernelbench_module_cuda,
    prepare,
    build,
};

} // namespace kiln
