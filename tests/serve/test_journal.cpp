#include "serve/journal.hpp"
#include "tests/support/journal_hold.hpp"

#include <atomic>
#include <condition_variable>
#include <doctest/doctest.h>
#include <filesystem>
#include <mutex>
#include <sqlite3.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace kiln;

namespace {

// The journal file of one test case, removed with its WAL files at the end of the case.
struct journal_file {
  std::filesystem::path path;
  explicit journal_file(const std::string& name)
      : path(std::filesystem::temp_directory_path() /
             ("kiln_journal_" + name + "_" + std::to_string(getpid()) + ".sqlite")) {
    remove();
  }
  ~journal_file() { remove(); }
  void remove() const {
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path.string() + suffix);
  }
};

} // namespace

TEST_CASE("journal: accepted rows survive a reopen until finished, results are kept, then purged") {
  journal_file file("reopen");
  const auto& path = file.path;
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
}

TEST_CASE("journal: a path that cannot be opened is named") {
  auto j = journal::open("/nonexistent-dir/journal.sqlite");
  REQUIRE_FALSE(j);
  CHECK(j.message().find("/nonexistent-dir/journal.sqlite") != std::string::npos);
}

TEST_CASE("journal: writes queued side by side share commits and each is told once") {
  journal_file file("group");
  const auto& path = file.path;
  auto j = journal::open(path.string());
  REQUIRE_MESSAGE(j, j.message());
  constexpr int threads = 4, per_thread = 500;
  std::atomic<int> told{0}, failed{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        auto id = std::to_string(t) + "-" + std::to_string(i);
        (*j)->add({id, "o", "{}", 1.0}, [&](const status& st) {
          ++told;
          if (!st) ++failed;
        });
        (*j)->finish(id, "{\"status\":\"completed\"}", {});
      }
    });
  for (auto& t : ts) t.join();
  (*j)->flush();
  CHECK(told == threads * per_thread);
  CHECK(failed == 0);
  auto c = (*j)->counts();
  CHECK(c.writes == 2 * threads * per_thread);
  CHECK(c.commits < c.writes); // grouped, not one transaction per write
  CHECK((*j)->unfinished()->empty());
  CHECK(*(*j)->result("3-499") == std::optional<std::string>("{\"status\":\"completed\"}"));
}

namespace {

void add_trigger(const std::string& path, const char* action) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  auto sql = std::string("CREATE TRIGGER refuse BEFORE INSERT ON evaluations WHEN NEW.id = "
                         "'bad' BEGIN SELECT RAISE(") +
             action + ", 'refused by the test'); END";
  REQUIRE(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
}

// Adds the ids while the writer is held, so that they commit in one transaction; what each was
// told.
std::vector<status> add_in_one_batch(journal& j, const std::vector<std::string>& ids) {
  kiln::testing::journal_hold h;
  h.hold(j);
  std::vector<status> told(ids.size(), ok());
  for (size_t i = 0; i < ids.size(); ++i)
    j.add({ids[i], "o", "{}", 1.0 + static_cast<double>(i)},
          [&told, i](const status& st) { told[i] = st; });
  h.release();
  j.flush();
  return told;
}

} // namespace

TEST_CASE("journal: a write SQLite refuses in a batch is told why and the others commit") {
  journal_file file("refused");
  auto j = journal::open(file.path.string());
  REQUIRE_MESSAGE(j, j.message());
  add_trigger(file.path.string(), "ABORT"); // fails its statement only
  auto told = add_in_one_batch(**j, {"a", "bad", "c"});
  CHECK((*j)->counts().commits == 2); // the hold's, then a, bad and c in one transaction
  CHECK(told[0]);
  REQUIRE_FALSE(told[1]);
  CHECK(told[1].message().find("add bad") != std::string::npos);
  CHECK(told[1].message().find("refused by the test") != std::string::npos);
  CHECK(told[2]);
  auto open_rows = (*j)->unfinished();
  REQUIRE(open_rows);
  CHECK(open_rows->size() == 3); // hold, a, c
}

TEST_CASE("journal: a batch SQLite rolls back fails every write in it and stores none") {
  journal_file file("rolled_back");
  auto j = journal::open(file.path.string());
  REQUIRE_MESSAGE(j, j.message());
  add_trigger(file.path.string(), "ROLLBACK"); // as a full disk does: the transaction goes
  auto told = add_in_one_batch(**j, {"a", "bad", "c"});
  for (const auto& st : told) REQUIRE_FALSE(st);
  CHECK(told[0].message().find("rolled back") != std::string::npos);
  CHECK(told[1].message().find("refused by the test") != std::string::npos);
  CHECK(told[2].message().find("rolled back") != std::string::npos);
  CHECK((*j)->unfinished()->size() == 1);        // the hold only
  REQUIRE((*j)->add({"after", "o", "{}", 9.0})); // the journal goes on
  CHECK((*j)->unfinished()->size() == 2);
}

TEST_CASE("journal: the WAL is checkpointed into the database beside the writer") {
  journal_file file("checkpoint");
  auto j = journal::open(file.path.string());
  REQUIRE_MESSAGE(j, j.message());
  const std::string request(400, 'x');
  for (int i = 0; i < 600; ++i) (*j)->add({std::to_string(i), "o", request, 1.0}, {});
  (*j)->flush();
  // The rows reach the database file only by a checkpoint (the writer makes none itself).
  bool checkpointed = false;
  for (int i = 0; i < 300 && !checkpointed; ++i) {
    checkpointed = std::filesystem::file_size(file.path) > 200 * 1024;
    if (!checkpointed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(checkpointed);
}
