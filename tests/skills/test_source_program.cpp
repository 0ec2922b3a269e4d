// Free-form source submissions: the marker line decides, and a bad marker is named.
#include "skills/grammar.hpp"
#include "skills/program.hpp"
#include "skills/source_program.hpp"

#include <doctest/doctest.h>

using namespace kiln;

TEST_CASE("the marker line picks the backend and keeps the text whole") {
  auto cpu = parse_source_program("//! kiln-source cpu\nint x;\n");
  REQUIRE(cpu);
  CHECK(cpu->backend == backend_kind::cpu);
  CHECK(cpu->source == "//! kiln-source cpu\nint x;\n");
  auto cuda = parse_source_program("//! kiln-source   cuda \r\n__global__ void k() {}");
  REQUIRE(cuda);
  CHECK(cuda->backend == backend_kind::cuda);
}

TEST_CASE("a bad marker is an error that names the line") {
  auto bad = parse_source_program("//! kiln-source rocm\n");
  REQUIRE_FALSE(bad);
  CHECK(bad.message().find("'//! kiln-source rocm'") != std::string::npos);
  CHECK(bad.message().find("expected cpu or cuda") != std::string::npos);
  CHECK_FALSE(parse_source_program("//! kiln-source\n"));
  CHECK_FALSE(parse_source_program("int main() {}"));
}

TEST_CASE("kernel-language programs are never taken for source, and the marker is added once") {
  CHECK_FALSE(is_source_program("kernel ops 1 elementwise end"));
  CHECK_FALSE(is_source_program(" //! kiln-source cpu\n")); // the marker must open the text
  CHECK_FALSE(parse_program("//! kiln-source cpu\nkernel ops 1 elementwise end"));
  std::string s = make_source_program(backend_kind::cuda, "int x;\n");
  CHECK(s == "//! kiln-source cuda\nint x;\n");
  CHECK(make_source_program(backend_kind::cuda, s) == s);
}
