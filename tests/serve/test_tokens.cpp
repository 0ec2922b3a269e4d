#include "serve/tokens.hpp"

#include <doctest/doctest.h>

using namespace kiln;

TEST_CASE("tokens: a file of tokens, names and limits, a bearer header finds its entry") {
  auto t = parse_tokens(
      "# trainers\n0123456789abcdef-one alice priority=high max_pending=3 max_sessions=2\n"
      "\n0123456789abcdef-two bob\n",
      "tokens");
  REQUIRE_MESSAGE(t, t.message());
  REQUIRE(t->entries.size() == 2);
  auto a = t->find("Bearer 0123456789abcdef-one");
  REQUIRE(a);
  CHECK(a->name == "alice");
  CHECK(a->priority == 2);
  CHECK(a->max_pending == 3);
  CHECK(a->max_sessions == 2);
  auto b = t->find("Bearer 0123456789abcdef-two");
  REQUIRE(b);
  CHECK(b->priority == 1);
  CHECK(b->max_pending == 64);
  CHECK_FALSE(t->find("Bearer 0123456789abcdef-on"));   // a prefix is not the token
  CHECK_FALSE(t->find("Bearer 0123456789abcdef-one2")); // nor is a longer one
  CHECK_FALSE(t->find("0123456789abcdef-one"));         // the scheme is required
  CHECK_FALSE(t->find(""));
}

TEST_CASE("tokens: a bad line is named by file and line") {
  auto short_token = parse_tokens("short alice\n", "f");
  REQUIRE_FALSE(short_token);
  CHECK(short_token.message() == "f:1: a token must be at least 16 characters");
  auto no_name = parse_tokens("\n0123456789abcdef-one\n", "f");
  REQUIRE_FALSE(no_name);
  CHECK(no_name.message() == "f:2: a token needs a name after it");
  auto bad_opt = parse_tokens("0123456789abcdef-one a priority=urgent\n", "f");
  REQUIRE_FALSE(bad_opt);
  CHECK(bad_opt.message().find("'priority=urgent'") != std::string::npos);
  auto twice = parse_tokens("0123456789abcdef-one a\n0123456789abcdef-one b\n", "f");
  REQUIRE_FALSE(twice);
  CHECK(twice.message() == "f:2: this token is already listed");
  CHECK_FALSE(parse_tokens("# nothing\n", "f"));
}
