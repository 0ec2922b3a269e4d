// The one choice of the Python with PyTorch (importer, ModelNew builds, Python kernel hosts).
#include "compile/torch_python.hpp"

#include <cstdlib>
#include <doctest/doctest.h>
#include <filesystem>
#include <string>

using namespace kiln;

TEST_CASE("the Python with torch is found, with its libpython and the sys.path that holds torch") {
  unsetenv("KILN_PYTHON");
  unsetenv("KILN_PYTHON_LIBRARY");
  auto py = discover_torch_python();
  if (py.executable.empty()) {
    MESSAGE("SKIP: no Python with torch here: " << py.why_none);
    return;
  }
  CHECK_MESSAGE(!py.library.empty(), py.why_none);
  CHECK(std::filesystem::exists(py.library));
  bool has_torch = false;
  for (const auto& d : py.sys_path) {
    CHECK(d.front() == '/');
    has_torch = has_torch || std::filesystem::exists(std::filesystem::path(d) / "torch");
  }
  CHECK(has_torch);
  // What a sandbox must let it read: its sys.path and its prefix.
  CHECK(py.folders.size() > py.sys_path.size());
}

TEST_CASE("KILN_PYTHON names the Python, and one without torch is refused with the reason") {
  setenv("KILN_PYTHON", "/nonexistent/python3", 1);
  auto py = discover_torch_python();
  unsetenv("KILN_PYTHON");
  CHECK(py.executable.empty());
  CHECK(py.library.empty());
  CHECK(py.why_none.find("/nonexistent/python3") != std::string::npos);
  CHECK(py.why_none.find("KILN_PYTHON") != std::string::npos);
}
