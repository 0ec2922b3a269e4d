// The host-compiler path: content-addressed cache, compiler logs as errors, and the limits that
// keep a hostile source (free-form, written by a policy) from taking the node down.
#include "gpu_pool/cpu_compiler.hpp"

#include <doctest/doctest.h>
#include <filesystem>

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
