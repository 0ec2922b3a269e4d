// kiln tasks validate: load tasks (bad ones reported, others kept), run each reference, print a
// table. kiln tasks import: hands over to tools/kernelbench_import.py.
#include "app/commands.hpp"
#include "app/task_table.hpp"
#include "compile/torch_python.hpp"
#include "data/reference.hpp"
#include "data/task_set.hpp"
#include "data/task_validate.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <unistd.h>

namespace kiln {

int cmd_tasks_validate(const common_args& common, const tasks_validate_args& args) {
  configure_threads(common.threads);
  check_limits limits;
  limits.memory_budget_bytes = args.memory_budget_mib << 20;
  limits.max_ops = args.max_ops;
  auto set = load_tasks(args.paths, limits);
  for (const auto& e : set.errors) spdlog::error("{}", e.message);

  validate_options opts;
  auto device = parse_device(args.device);
  if (!device) {
    spdlog::error("{}", device.message());
    return 2;
  }
  opts.device = *device;
  opts.timing_runs = args.timing_runs;
  opts.min_eager_ms = args.min_ms;
  opts.max_eager_ms = args.max_ms;
  opts.digest_samples = args.digest;
  if (args.digest > 0 && (args.json_out.empty() || args.shapes_only)) {
    spdlog::error("--digest needs --json (the digests go into its rows) and reference runs (not "
                  "--shapes-only)");
    return 2;
  }

  task_table table(args.json_out, args.shapes_only);
  if (!table.open()) return 2;
  int bad = static_cast<int>(set.errors.size());
  for (const auto& t : set.tasks) {
    validation v;
    if (args.shapes_only) {
      v = shape_only_validation(t);
    } else {
      v = validate_task(t, opts);
    }
    if (!v.ok) ++bad;
    table.row(v);
  }
  table.summary(set.tasks.size() + set.errors.size(), bad, args.device);
  return bad == 0 ? 0 : 1;
}

namespace {

std::filesystem::path self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : p;
}

// The checkout's tools/ beside a build folder (build/kiln -> tools/), else the source tree kiln
// was built from.
std::filesystem::path importer_script(const std::filesystem::path& exe) {
  const char* name = "kernelbench_import.py";
  std::error_code ec;
  auto beside = exe.parent_path().parent_path() / "tools" / name;
  if (!exe.empty() && std::filesystem::is_regular_file(beside, ec)) return beside;
  return std::filesystem::path(KILN_SOURCE_DIR) / "tools" / name;
}

// The Python with PyTorch (compile/torch_python.hpp); with none, Debian's, whose importer then
// says what is missing.
std::string importer_python() {
  const auto& py = find_torch_python();
  return py.executable.empty() ? "/usr/bin/python3" : py.executable;
}

} // namespace

int cmd_tasks_import(const std::vector<std::string>& args) {
  // A Python with PyTorch: its PyTorch is the one imports are checked against.
  std::string python = importer_python();
  auto exe = self_exe();
  auto script = importer_script(exe);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(script, ec)) {
    spdlog::error("tasks import: the importer {} is missing (it ships in the checkout's tools/)",
                  script.string());
    return 2;
  }
  std::vector<std::string> argv = {python, script.string()};
  argv.insert(argv.end(), args.begin(), args.end());
  bool has_kiln = std::any_of(args.begin(), args.end(), [](const std::string& a) {
    return a == "--kiln" || a.rfind("--kiln=", 0) == 0;
  });
  if (!has_kiln && !exe.empty()) {
    argv.push_back("--kiln");
    argv.push_back(exe.string());
  }
  setenv("KILN_IMPORT_PROG", "kiln tasks import", 1); // its usage and errors name the command
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  execvp(python.c_str(), cargv.data());
  spdlog::error("tasks import: cannot run {}: {} (install python3-torch, or set KILN_PYTHON)",
                python, std::strerror(errno));
  return 2;
}

} // namespace kiln
