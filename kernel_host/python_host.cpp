#include "kernel_host/python_host.hpp"

#include "kernel_host/kernelbench_compat_py.hpp" // generated: tools/kernelbench/compat.py
#include "kernel_host/kernelbench_host_py.hpp"   // generated: the script's text

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <optional>

namespace kiln {

namespace {

// The only two entry points of libpython used: the host never touches Python objects itself,
// it runs statements and reads a status buffer the script writes.
using initialize_fn = void (*)(int);
using run_string_fn = int (*)(const char*, void*);

struct python_state {
  run_string_fn run = nullptr;
  char status[240] = {};
  std::string call; // the call statement, made once at load
};
python_state py;

std::string hex(const void* p) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%jx", static_cast<uintmax_t>(reinterpret_cast<uintptr_t>(p)));
  return b;
}

template <class T>
std::string address_list(const std::vector<T>& ptrs) {
  std::string s = "[";
  for (const auto* p : ptrs) s += hex(p) + ",";
  return s + "]";
}

// Runs `statement`; the script reports failures in py.status, and an exception that escapes it
// (there should be none) is reported as such.
status run(const std::string& statement, const char* what) {
  py.status[0] = '\0';
  if (py.run(statement.c_str(), nullptr) != 0)
    return error{std::string(what) + ": an exception escaped the host script"};
  if (py.status[0] != '\0') return error{std::string(what) + ": " + py.status};
  return ok();
}

std::string status_args() { return hex(py.status) + ", " + std::to_string(sizeof py.status); }

} // namespace

// `sys.path[:] = [...]` for a ':'-separated list; nullopt for a folder a literal cannot hold.
static std::optional<std::string> sys_path_statement(const std::string& dirs) {
  std::string list;
  for (size_t at = 0; at <= dirs.size();) {
    size_t end = dirs.find(':', at);
    if (end == std::string::npos) end = dirs.size();
    std::string d = dirs.substr(at, end - at);
    at = end + 1;
    if (d.empty()) continue;
    for (char c : d)
      if (c == '\'' || c == '\\' || static_cast<unsigned char>(c) < ' ') return std::nullopt;
    list += "'" + d + "',";
  }
  return "import sys\nsys.path[:] = [" + list + "]\n";
}

status start_python_host(const std::string& library, const std::string& sys_path, int threads,
                         int cuda_device) {
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!lib) return error{"cannot open the Python library " + library + ": " + dlerror()};
  auto init = reinterpret_cast<initialize_fn>(dlsym(lib, "Py_InitializeEx"));
  py.run = reinterpret_cast<run_string_fn>(dlsym(lib, "PyRun_SimpleStringFlags"));
  if (!init || !py.run) return error{library + " lacks Py_InitializeEx / PyRun_SimpleStringFlags"};
  // The environment must not steer the interpreter: no user site, no PYTHONPATH or startup file.
  for (const char* v : {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONINSPECT"}) unsetenv(v);
  setenv("PYTHONNOUSERSITE", "1", 1);
  setenv("PYTHONDONTWRITEBYTECODE", "1", 1);
  // OpenMP workers that spin after a parallel region would burn CPU outside the call, which
  // the executor refuses as work after the reply.
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  init(0); // no signal handlers: the host's own stay
  if (!sys_path.empty()) {
    auto set_path = sys_path_statement(sys_path);
    if (!set_path || py.run(set_path->c_str(), nullptr) != 0)
      return error{"cannot set the interpreter's sys.path to " + sys_path};
  }
  // The shims first, as the importer had them when it traced the problem's Model.
  if (py.run(kernelbench_compat_py, nullptr) != 0 || py.run("provide()", nullptr) != 0)
    return error{"the KernelBench shims (tools/kernelbench/compat.py) fail to start (is torch "
                 "importable by " +
                 library + "?)"};
  if (py.run(kernelbench_host_py, nullptr) != 0)
    return error{"the host script fails to start (is torch importable by " + library + "?)"};
  return run("_kiln_start(" + std::to_string(threads) + ", " + std::to_string(cuda_device) + ")",
             cuda_device >= 0 ? "starting torch on cuda" : "starting torch");
}

std::vector<std::string> python_host_read_paths() {
  std::vector<std::string> out;
  if (!py.run) return out;
  static char buffer[8192];
  buffer[0] = '\0';
  if (py.run(
          ("_kiln_read_paths(" + hex(buffer) + ", " + std::to_string(sizeof buffer) + ")").c_str(),
          nullptr) != 0)
    return out;
  std::string all = buffer;
  for (size_t at = 0; at < all.size();) {
    size_t nl = all.find('\n', at);
    if (nl == std::string::npos) nl = all.size();
    if (nl > at) out.push_back(all.substr(at, nl - at));
    at = nl + 1;
  }
  return out;
}

bool python_host_started() { return py.run != nullptr; }

status python_host_load(const std::string& bundle, const std::vector<const void*>& inputs,
                        const std::vector<const void*>& params, const std::vector<void*>& outputs) {
  if (!py.run) return error{"this kernel host was not started with Python (--python)"};
  std::string quoted;
  for (char c : bundle) {
    if (c == '\'' || c == '\\' || c < ' ') return error{"unusable bundle path"};
    quoted += c;
  }
  auto st =
      run("_kiln_load('" + quoted + "', " + address_list(inputs) + ", " + address_list(params) +
              ", " + address_list(outputs) + ", " + status_args() + ")",
          "loading ModelNew");
  if (st) py.call = "_kiln_call(" + status_args() + ")";
  return st;
}

status python_host_call() {
  if (py.call.empty()) return error{"no ModelNew loaded in this kernel host"};
  return run(py.call, "ModelNew's forward");
}

} // namespace kiln
