// The host-compiler path: content-addressed cache, compiler logs as errors, and the limits that
// keep a hostile source (free-form, written by a policy) from taking the node down.
#include "compile/cpu_compiler.hpp"
#ifdef KILN_HAVE_CUDA
#include "compile/cuda_compiler.hpp"
#endif

#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>

using namespace kiln;
namespace fs = std::filesystem;

namespace {

cpu_compile_options options(const std::string& name) {
  cpu_compile_options o;
  o.cache_dir = (fs::path(KILN_TEST_TMP) / ("cpu_compiler_" + name)).string();
  fs::remove_all(o.cache_dir);
  o.include_dir = KILN_SOURCE_DIR "/skills";
  o.flags = "-O1 -fPIC -shared -std=c++17";
  return o;
}

const char* kTiny = "extern \"C\" int kiln_tiny() { return 1; }\n";

} // namespace

TEST_CASE("a source compiles once, the second compile is a cache hit on the same object") {
  auto o = options("cache");
  auto first = compile_cpu(kTiny, o);
  REQUIRE_MESSAGE(first, first.message());
  CHECK_FALSE(first->cache_hit);
  CHECK(fs::exists(first->so_path));
  auto second = compile_cpu(kTiny, o);
  REQUIRE(second);
  CHECK(second->cache_hit);
  CHECK(second->so_path == first->so_path);
  o.flags += " -DOTHER"; // other flags, other key
  auto third = compile_cpu(kTiny, o);
  REQUIRE(third);
  CHECK(third->key != first->key);
}

TEST_CASE("a compile error carries the compiler's log") {
  auto r = compile_cpu("int f() { return undeclared_name; }\n", options("error"));
  REQUIRE_FALSE(r);
  CHECK(r.message().find("g++ failed (exit 1") != std::string::npos);
  CHECK(r.message().find("undeclared_name") != std::string::npos);
  CHECK(r.message().find("limits:") == std::string::npos); // an ordinary error names no limit
}

TEST_CASE("a gigabyte of static data stops at the file-size limit, named in the error") {
  auto o = options("fsize");
  o.output_mib = 16;
  auto r = compile_cpu("extern \"C\" { char kiln_big[64 << 20] = {1}; }\n", o);
  REQUIRE_FALSE(r);
  CHECK_MESSAGE(r.message().find("16 MiB per file written") != std::string::npos, r.message());
  o.output_mib = 0; // the control: without the limit the same source builds
  o.flags += " -DCONTROL";
  auto ok = compile_cpu("extern \"C\" { char kiln_big[64 << 20] = {1}; }\n", o);
  CHECK_MESSAGE(ok, ok.message());
}

TEST_CASE("the address-space limit reaches the compiler's children") {
  auto o = options("memory");
  o.memory_mib = 48;
  auto r = compile_cpu(kTiny, o);
  REQUIRE_FALSE(r);
  CHECK_MESSAGE(r.message().find("48 MiB of address space") != std::string::npos, r.message());
}

TEST_CASE("a missing compiler and a compile past its timeout are errors that say so") {
  auto o = options("missing");
  o.compiler = "kiln-no-such-compiler";
  auto missing = compile_cpu(kTiny, o);
  REQUIRE_FALSE(missing);
  CHECK(missing.message().find("'kiln-no-such-compiler'") != std::string::npos);
  auto slow = options("timeout");
  slow.timeout_s = 0.05;
  auto r = compile_cpu("#include <map>\n#include <regex>\nstd::regex kiln_r(\"a+\");\n", slow);
  REQUIRE_FALSE(r);
  CHECK_MESSAGE(r.message().find("killed after") != std::string::npos, r.message());
}

TEST_CASE("the compiler works in a folder of its own: the log says kernel.cpp, the cache is shut") {
  auto o = options("sandbox");
  auto first = compile_cpu(kTiny, o);
  REQUIRE_MESSAGE(first, first.message());
  auto r = compile_cpu("int f() { return undeclared_name; }\n", o);
  REQUIRE_FALSE(r);
  CHECK_MESSAGE(r.message().find("kernel.cpp:1") != std::string::npos, r.message());
  CHECK(r.message().find(o.cache_dir) == std::string::npos);
  // Another program's source sits in the cache; a submission cannot include it.
  std::string other = fs::path(first->so_path).replace_extension(".cpp").string();
  auto peek = compile_cpu("#include \"" + other + "\"\n", o);
  REQUIRE_FALSE(peek);
  CHECK_MESSAGE(peek.message().find("kiln_tiny") == std::string::npos, peek.message());
  auto open = o;
  open.sandbox = false; // the control: unsandboxed the include works
  CHECK(compile_cpu("#include \"" + other + "\"\n// control\n", open));
}

#ifdef KILN_HAVE_CUDA
TEST_CASE("nvcc builds free-form cuda source inside the same sandbox, and quotes no secret") {
  auto o = nvcc_options(options("nvcc"), "sm_90");
  const char* src = R"(#include "kiln_cuda_abi.h"
__global__ void k(float* y) { y[threadIdx.x] = 1.f; }
extern "C" int kiln_cuda_run(const void* const*, const void* const*, void* const* out, void* s) {
  k<<<1, 32, 0, (cudaStream_t)s>>>((float*)out[0]);
  return 0;
})";
  auto a = compile_cpu(src, o);
  REQUIRE_MESSAGE(a, a.message()); // nvcc, cicc, ptxas, fatbinary and g++ all ran sandboxed
  CHECK(fs::file_size(a->so_path) > 0);
  auto secret = fs::path(KILN_TEST_TMP) / "nvcc_secret.txt";
  { std::ofstream(secret) << "KILNNVCCSECRET\n"; }
  auto leak = compile_cpu("#include \"" + secret.string() + "\"\n", o);
  REQUIRE_FALSE(leak);
  CHECK_MESSAGE(leak.message().find("KILNNVCCSECRET") == std::string::npos, leak.message());
  CHECK(leak.message().find("kernel.cu") != std::string::npos);
}
#endif
