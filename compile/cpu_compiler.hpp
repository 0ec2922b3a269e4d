// Host-compiler path of the cpu backend (and nvcc's, for free-form cuda source): C++ source ->
// shared object, through a content-addressed cache (key: source + compiler identity + flags), so
// a program compiles once; the compiler runs in a folder of its own under memory and file-size
// limits, landlock and seccomp.
//   source --cache lookup--> hit: .so path | miss: g++ -O3 -march=native -shared -> .so path
#pragma once

#include "data/expected.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

struct cpu_compile_options {
  std::string cache_dir;                 // where sources, objects and logs live; created if missing
  std::string compiler = "g++";          // host compiler
  std::string source_extension = ".cpp"; // what the compiler takes the source for (nvcc: ".cu")
  std::string flags = "-O3 -march=native -fPIC -shared -std=c++17 -fno-exceptions";
  std::string include_dir; // holds kiln_abi.h (the project's skills/ directory)
  double timeout_s = 60;   // a compile running longer is killed and reported
  // Limits of the compiler process and its children (the source may be free-form, written by a
  // policy): a template bomb or a gigabyte of static data is a compile error, not a lost node.
  int64_t memory_mib = 8192; // RLIMIT_AS; 0: none
  int64_t output_mib = 1024; // RLIMIT_FSIZE: the largest file the compiler may write; 0: none
  // Landlock (reads: the toolchain and the job's folder; writes: that folder) and seccomp (no
  // sockets) around the compiler: `#include "/etc/passwd"` and `.incbin` of a secret fail.
  bool sandbox = true;
  // Another builder than `compiler flags -I. -o kernel.so kernel<ext>` (a ModelNew submission's
  // Python): its argv, run in the job's folder; it must leave kernel<artifact_extension> there.
  // `compiler` stays the program whose identity keys the cache.
  std::vector<std::string> command;
  std::vector<std::string> identity_args = {"--version"};     // compiler + these: the identity line
  std::vector<std::pair<std::string, std::string>> job_files; // name -> text, also keyed
  std::string artifact_extension = ".so";
  // Folders the builder reads beyond the system's (a Python's venv): landlock allows them.
  std::vector<std::string> read_paths;
};

struct cpu_artifact {
  std::string so_path;
  std::string key; // 16 hex digits: the cache key
  bool cache_hit = false;
  double compile_ms = 0; // 0 on a hit
};

// On a compile error the error message holds the compiler's log (truncated to a few KiB).
expected<cpu_artifact> compile_cpu(const std::string& source, const cpu_compile_options& opts);

} // namespace kiln
