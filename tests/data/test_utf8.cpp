// utf8: untrusted bytes become valid UTF-8, and cuts fall between code points.
#include "data/utf8.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

using namespace kiln;

namespace {
const std::string fffd = "\xEF\xBF\xBD";
}

TEST_CASE("utf8_valid keeps well-formed text and replaces each bad byte") {
  CHECK(utf8_valid("plain ascii") == "plain ascii");
  std::string good = "\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"; // e-acute, euro, emoji
  CHECK(utf8_valid(good) == good);
  CHECK(utf8_valid("a\xFF"
                   "b") == "a" + fffd + "b");
  CHECK(utf8_valid("\xC0\xAF") == fffd + fffd);                       // overlong '/'
  CHECK(utf8_valid("\xED\xA0\x80") == fffd + fffd + fffd);            // a surrogate
  CHECK(utf8_valid("\xF4\x90\x80\x80") == fffd + fffd + fffd + fffd); // past U+10FFFF
  CHECK(utf8_valid("x\xE2\x82") == "x" + fffd + fffd);                // truncated at the end
  // What nlohmann would have thrown on now serializes.
  std::string hostile = "int broken = \"\xFF\xFE\"; \xE2\x82";
  CHECK_THROWS(nlohmann::json(hostile).dump());
  CHECK_NOTHROW(nlohmann::json(utf8_valid(hostile)).dump());
}

TEST_CASE("utf8_head and utf8_tail never split a code point") {
  std::string s = "ab\xE2\x82\xAC"
                  "cd"; // a b EURO c d: the euro is bytes 2..4
  CHECK(utf8_floor(s, 3) == 2);
  CHECK(utf8_floor(s, 5) == 5);
  CHECK(utf8_floor(s, 99) == s.size());
  CHECK(utf8_head(s, 4) == "ab");
  CHECK(utf8_head(s, 5) == "ab\xE2\x82\xAC");
  CHECK(utf8_tail(s, 4) == "cd");
  CHECK(utf8_tail(s, 5) == "\xE2\x82\xAC"
                           "cd");
  CHECK(utf8_tail(s, 99) == s);
  for (size_t n = 0; n <= s.size(); ++n) {
    CHECK_NOTHROW(nlohmann::json(utf8_head(s, n)).dump());
    CHECK_NOTHROW(nlohmann::json(utf8_tail(s, n)).dump());
  }
}

TEST_CASE(
    "utf8_middle_cut keeps the head and the tail (a traceback's reason) and says how much went") {
  CHECK(utf8_middle_cut("short", 10) == "short");
  std::string trace = "Traceback (most recent call last):\n" + std::string(500, 'x') +
                      "\nPermissionError: [Errno 13] Permission denied";
  auto cut = utf8_middle_cut(trace, 120);
  CHECK(cut.rfind("Traceback", 0) == 0);
  CHECK(cut.find("Permission denied") != std::string::npos);
  CHECK(cut.find("characters cut") != std::string::npos);
  // A cut never splits a code point: 3-byte characters either side.
  std::string wide;
  for (int i = 0; i < 100; ++i) wide += "\xE2\x82\xAC";
  CHECK(utf8_valid(utf8_middle_cut(wide, 50)) == utf8_middle_cut(wide, 50));
}
