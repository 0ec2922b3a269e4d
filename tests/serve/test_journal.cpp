#include "serve/journal.hpp"

#include <doctest/doctest.h>
#include <filesystem>
#include <unistd.h>

using namespace kiln;

TEST_CASE("journal: accepted rows survive a reopen until finished, results are kept, then purged") {
  auto path = std::filesystem::temp_directory_path() /
              ("kiln_journal_" + std::to_string(getpid()) + ".sqlite");
  std::filesystem::remove(path);
  {
    auto j = journal::open(path.string());
    REQUIRE_MESSAGE(j, j.message());
    REQUIRE((*j)->add({"a", "alice", "{\"task_id\":\"a\"}", 1.0}));
    REQUIRE((*j)->add({"b", "", "{\"task_id\":\"b\"}", 2.0}));
    REQUIRE((*j)->finish("a", "{\"status\":\"completed\"}"));
  }
  auto j = journal::open(path.string()); // as after a restart
  REQUIRE_MESSAGE(j, j.message());
  auto open_rows = (*j)->unfinished();
  REQUIRE(open_rows);
  REQUIRE(open_rows->size() == 1);
  CHECK((*open_rows)[0].id == "b");
  CHECK((*open_rows)[0].request == "{\"task_id\":\"b\"}");
  auto a = (*j)->result("a");
  REQUIRE(a);
  REQUIRE(*a);
  CHECK(**a == "{\"status\":\"completed\"}");
  auto b = (*j)->result("b");
  REQUIRE(b);
  CHECK_FALSE(*b); // not finished: no result
  auto kept = (*j)->purge(3600);
  REQUIRE(kept);
  CHECK(*kept == 0);
  auto purged = (*j)->purge(-1); // everything finished is older than "now + 1 s"
  REQUIRE(purged);
  CHECK(*purged == 1);
  CHECK_FALSE(*(*j)->result("a"));
  REQUIRE((*j)->forget("b"));
  CHECK((*j)->unfinished()->empty());
  j = error{""};
  std::filesystem::remove(path);
}

TEST_CASE("journal: a path that cannot be opened is named") {
  auto j = journal::open("/nonexistent-dir/journal.sqlite");
  REQUIRE_FALSE(j);
  CHECK(j.message().find("/nonexistent-dir/journal.sqlite") != std::string::npos);
}
