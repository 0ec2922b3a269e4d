// expected<T>: a value or an error, and message() that is safe to ask either way.
#include "data/expected.hpp"

#include <doctest/doctest.h>

using namespace kiln;

TEST_CASE("expected holds a value or an error, and message() is empty for a value") {
  expected<int> v = 7;
  REQUIRE(v);
  CHECK(*v == 7);
  CHECK(v.message().empty());
  expected<int> e = error{"no such task"};
  REQUIRE_FALSE(e);
  CHECK(e.message() == "no such task");
  CHECK(e.err().message == "no such task");
  status s = ok();
  CHECK(s);
  CHECK(s.message().empty());
}
