#include "compile/torch_python.hpp"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <sys/wait.h>
#include <unistd.h>

namespace kiln {

namespace {

// Runs the probe in `python`: false when it fails (no such Python, or no torch in it).
bool probe(const std::string& python, std::string& out) {
  // -I: the interpreter as a kernel host will see it (no user site, no PYTHON* variables).
  std::string cmd = "'" + python +
                    "' -I -c 'import os, sys, sysconfig, torch\n"
                    "lib = sysconfig.get_config_var(\"INSTSONAME\") or \"\"\n"
                    "d = sysconfig.get_config_var(\"LIBDIR\") or \"\"\n"
                    "print(os.path.join(d, lib) if lib else \"\")\n"
                    "print(\"\\n\".join(p for p in sys.path if os.path.isabs(p)))\n"
                    "print(\"--\")\n"
                    "print(\"\\n\".join({sys.prefix, sys.base_prefix, sys.exec_prefix}))' "
                    "2>/dev/null";
  if (python.find('\'') != std::string::npos) return false;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return false;
  std::array<char, 4096> buf{};
  out.clear();
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  int status = pclose(p);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

} // namespace

torch_python discover_torch_python() {
  torch_python t;
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("KILN_PYTHON"); env && *env)
    candidates = {env};
  else
    candidates = {"python3", "/usr/bin/python3"};
  std::string out;
  for (const auto& c : candidates) {
    if (!probe(c, out)) continue;
    t.executable = c;
    size_t at = 0;
    bool prefixes = false;
    for (size_t line = 0; at <= out.size(); ++line) {
      size_t nl = out.find('\n', at);
      if (nl == std::string::npos) nl = out.size();
      std::string s = out.substr(at, nl - at);
      if (line == 0)
        t.library = s;
      else if (s == "--")
        prefixes = true;
      else if (!s.empty())
        (prefixes ? t.folders : t.sys_path).push_back(s);
      at = nl + 1;
    }
    t.folders.insert(t.folders.end(), t.sys_path.begin(), t.sys_path.end());
    break;
  }
  if (const char* env = std::getenv("KILN_PYTHON_LIBRARY"); env && *env) t.library = env;
  if (t.executable.empty()) {
    std::string tried;
    for (const auto& c : candidates) tried += (tried.empty() ? "" : ", ") + c;
    t.why_none = "no Python that imports torch (tried " + tried +
                 "; install python3-torch or set KILN_PYTHON)";
  } else if (t.library.empty() || access(t.library.c_str(), R_OK) != 0) {
    t.why_none = t.executable + " has no shared libpython" +
                 (t.library.empty() ? std::string() : " at " + t.library) +
                 " (a kernel host embeds it; set KILN_PYTHON_LIBRARY)";
    t.library.clear();
  }
  return t;
}

const torch_python& find_torch_python() {
  static const torch_python found = discover_torch_python();
  return found;
}

} // namespace kiln
