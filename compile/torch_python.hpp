// The Python with PyTorch that Kiln runs, chosen in one place for its three uses: the KernelBench
// importer (`kiln tasks import`), ModelNew builds (submission/kind_kernelbench.cpp) and the
// interpreter a Python kernel host embeds (kernel_host/python_host.hpp). KILN_PYTHON, else the
// first of `python3` on PATH (an activated venv's, as on the GPU machine, where /usr/bin/python3
// has no torch) and Debian's /usr/bin/python3 that imports torch.
//   PATH / KILN_PYTHON --probe once--> {executable, libpython, sys.path}
#pragma once

#include <string>
#include <vector>

namespace kiln {

struct torch_python {
  std::string executable; // "" when no Python imports torch
  // The shared libpython it runs on (KILN_PYTHON_LIBRARY overrides): what a kernel host dlopens.
  // "" for a Python built without one (pyenv's default): ModelNew then cannot run.
  std::string library;
  // Its sys.path: an embedded interpreter knows nothing of a venv, so it is given this.
  std::vector<std::string> sys_path;
  // What it reads: sys.path and its prefixes (a venv's pyvenv.cfg, bin/): a sandbox allows them.
  std::vector<std::string> folders;
  std::string why_none; // when executable or library is "": what was looked for
};

// Probed on first use (a subprocess or two), then cached for the process.
const torch_python& find_torch_python();
// The probe itself, uncached (the environment as it is now).
torch_python discover_torch_python();

} // namespace kiln
