#include "serve/journal.hpp"

#include <chrono>
#include <sqlite3.h>

namespace kiln {

double epoch_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {

// A cached prepared statement, reset and unbound when its use ends (on every path).
struct statement {
  sqlite3_stmt* s = nullptr;
  ~statement() {
    if (s) {
      sqlite3_reset(s);
      sqlite3_clear_bindings(s);
    }
  }
};

std::string db_error(sqlite3* db, const std::string& what) {
  return "journal: " + what + ": " + sqlite3_errmsg(db);
}

} // namespace

expected<std::unique_ptr<journal>> journal::open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, // mu_
                      nullptr) != SQLITE_OK) {
    std::string why = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return error{"journal: cannot open " + path + ": " + why};
  }
  std::unique_ptr<journal> j(new journal(db));
  sqlite3_busy_timeout(db, 5000);
  // WAL with synchronous=NORMAL: a committed row survives the process being killed (the case
  // a restart recovers from); only a power loss may drop the last commits.
  for (const char* sql : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL",
                          "CREATE TABLE IF NOT EXISTS evaluations (id TEXT PRIMARY KEY, owner "
                          "TEXT NOT NULL, request TEXT NOT NULL, accepted_at REAL NOT NULL, "
                          "result TEXT, finished_at REAL)"})
    if (auto st = j->exec(sql); !st) return error{st.message() + " (" + path + ")"};
  return j;
}

journal::~journal() {
  for (auto& [sql, st] : prepared_) sqlite3_finalize(st);
  sqlite3_close(db_);
}

// Prepared once per statement: preparing costs as much as a small insert.
bool journal::prepare(const char* sql, sqlite3_stmt** out) {
  auto& st = prepared_[sql];
  if (!st && sqlite3_prepare_v2(db_, sql, -1, &st, nullptr) != SQLITE_OK) {
    st = nullptr;
    return false;
  }
  *out = st;
  return true;
}

status journal::exec(const std::string& sql) {
  char* msg = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &msg) != SQLITE_OK) {
    std::string why = msg ? msg : "unknown error";
    sqlite3_free(msg);
    return error{"journal: " + why};
  }
  return ok();
}

status journal::add(const row& r) {
  std::lock_guard<std::mutex> lock(mu_);
  statement st;
  if (!prepare("INSERT OR REPLACE INTO evaluations (id, owner, request, accepted_at, "
               "result, finished_at) VALUES (?, ?, ?, ?, NULL, NULL)",
               &st.s))
    return error{db_error(db_, "prepare")};
  sqlite3_bind_text(st.s, 1, r.id.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 2, r.owner.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 3, r.request.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_double(st.s, 4, r.accepted_at);
  if (sqlite3_step(st.s) != SQLITE_DONE) return error{db_error(db_, "add " + r.id)};
  return ok();
}

status journal::finish(const std::string& id, const std::string& result_json) {
  std::lock_guard<std::mutex> lock(mu_);
  statement st;
  if (!prepare("UPDATE evaluations SET result = ?, finished_at = ? WHERE id = ?", &st.s))
    return error{db_error(db_, "prepare")};
  sqlite3_bind_text(st.s, 1, result_json.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_double(st.s, 2, epoch_seconds());
  sqlite3_bind_text(st.s, 3, id.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st.s) != SQLITE_DONE) return error{db_error(db_, "finish " + id)};
  return ok();
}

status journal::forget(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  statement st;
  if (!prepare("DELETE FROM evaluations WHERE id = ?", &st.s))
    return error{db_error(db_, "prepare")};
  sqlite3_bind_text(st.s, 1, id.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st.s) != SQLITE_DONE) return error{db_error(db_, "forget " + id)};
  return ok();
}

expected<std::vector<journal::row>> journal::unfinished() {
  std::lock_guard<std::mutex> lock(mu_);
  statement st;
  if (!prepare("SELECT id, owner, request, accepted_at FROM evaluations WHERE result IS "
               "NULL ORDER BY accepted_at",
               &st.s))
    return error{db_error(db_, "prepare")};
  std::vector<row> rows;
  int rc;
  auto text = [&](int c) {
    auto* p = sqlite3_column_text(st.s, c);
    return p ? std::string(reinterpret_cast<const char*>(p)) : std::string();
  };
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW)
    rows.push_back({text(0), text(1), text(2), sqlite3_column_double(st.s, 3)});
  if (rc != SQLITE_DONE) return error{db_error(db_, "read unfinished")};
  return rows;
}

expected<std::optional<std::string>> journal::result(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  statement st;
  if (!prepare("SELECT result FROM evaluations WHERE id = ? AND result IS NOT NULL", &st.s))
    return error{db_error(db_, "prepare")};
  sqlite3_bind_text(st.s, 1, id.c_str(), -1, SQLITE_TRANSIENT);
  int rc = sqlite3_step(st.s);
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return error{db_error(db_, "read " + id)};
  return std::optional<std::string>(
      std::string(reinterpret_cast<const char*>(sqlite3_column_text(st.s, 0))));
}

expected<int> journal::purge(double keep_s) {
  std::lock_guard<std::mutex> lock(mu_);
  statement st;
  if (!prepare("DELETE FROM evaluations WHERE finished_at IS NOT NULL AND "
               "finished_at < ?",
               &st.s))
    return error{db_error(db_, "prepare")};
  sqlite3_bind_double(st.s, 1, epoch_seconds() - keep_s);
  if (sqlite3_step(st.s) != SQLITE_DONE) return error{db_error(db_, "purge")};
  return sqlite3_changes(db_);
}

} // namespace kiln
