#include "serve/journal.hpp"

#include <chrono>
#include <future>
#include <spdlog/spdlog.h>
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

namespace {

sqlite3* open_connection(const std::string& path, std::string& why) {
  sqlite3* db = nullptr;
  // NOMUTEX: each connection is used by one thread at a time (the writer's, or under read_mu_).
  if (sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    why = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return nullptr;
  }
  sqlite3_busy_timeout(db, 5000);
  return db;
}

} // namespace

expected<std::unique_ptr<journal>> journal::open(const std::string& path) {
  std::unique_ptr<journal> j(new journal());
  std::string why;
  if (!(j->writer_db_.db = open_connection(path, why)))
    return error{"journal: cannot open " + path + ": " + why};
  // WAL with synchronous=NORMAL: a committed row survives the process being killed (the case
  // a restart recovers from); only a power loss may drop the last commits.
  for (const char* sql : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL",
                          "CREATE TABLE IF NOT EXISTS evaluations (id TEXT PRIMARY KEY, owner "
                          "TEXT NOT NULL, request TEXT NOT NULL, accepted_at REAL NOT NULL, "
                          "result TEXT, finished_at REAL)"})
    if (auto st = j->writer_db_.exec(sql); !st) return error{st.message() + " (" + path + ")"};
  // Checkpoints (the WAL copied into the database, and synced) run on their own connection and
  // thread, beside the writer: inside a commit they would stall every write behind one sync.
  if (auto st = j->writer_db_.exec("PRAGMA wal_autocheckpoint=0"); !st)
    return error{st.message() + " (" + path + ")"};
  for (auto* c : {&j->reader_db_, &j->checkpoint_db_})
    if (!(c->db = open_connection(path, why)))
      return error{"journal: cannot open " + path + " again: " + why};
  // A connection that has not read the file yet does not know it is in WAL mode, and its
  // checkpoints do nothing.
  if (auto st = j->checkpoint_db_.exec("PRAGMA journal_mode=WAL"); !st)
    return error{st.message() + " (" + path + ")"};
  j->writer_ = std::thread([p = j.get()] { p->write_loop(); });
  j->checkpointer_ = std::thread([p = j.get()] { p->checkpoint_loop(); });
  return j;
}

// A passive checkpoint (it waits for no reader or writer) after every `every` writes, or each
// second when there were some.
void journal::checkpoint_loop() {
  constexpr int64_t every = 512;
  std::unique_lock<std::mutex> lock(mu_);
  while (!closing_) {
    checkpoint_cv_.wait_for(lock, std::chrono::seconds(1),
                            [&] { return closing_ || unchecked_writes_ >= every; });
    if (closing_ || unchecked_writes_ == 0) continue;
    unchecked_writes_ = 0;
    lock.unlock();
    int rc = sqlite3_wal_checkpoint_v2(checkpoint_db_.db, nullptr, SQLITE_CHECKPOINT_PASSIVE,
                                       nullptr, nullptr);
    if (rc != SQLITE_OK && rc != SQLITE_BUSY)
      spdlog::warn("{}", db_error(checkpoint_db_.db, "checkpoint"));
    lock.lock();
  }
}

journal::~journal() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  checkpoint_cv_.notify_all();
  if (writer_.joinable()) writer_.join(); // commits what was queued first
  if (checkpointer_.joinable()) checkpointer_.join();
}

journal::connection::~connection() {
  for (auto& [sql, st] : prepared) sqlite3_finalize(st);
  sqlite3_close(db);
}

// Prepared once per statement: preparing costs as much as a small insert.
sqlite3_stmt* journal::connection::prepare(const char* sql) {
  auto& st = prepared[sql];
  if (!st && sqlite3_prepare_v2(db, sql, -1, &st, nullptr) != SQLITE_OK) st = nullptr;
  return st;
}

status journal::connection::exec(const char* sql) {
  char* msg = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &msg) != SQLITE_OK) {
    std::string why = msg ? msg : "unknown error";
    sqlite3_free(msg);
    return error{"journal: " + why};
  }
  return ok();
}

void journal::enqueue(write w) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    w.seq = ++queued_seq_;
    queue_.push_back(std::move(w));
  }
  cv_.notify_one();
}

void journal::add(const row& r, committed_fn done) {
  enqueue({write::kind::add, r, std::move(done)});
}

void journal::finish(const std::string& id, const std::string& result_json, committed_fn done) {
  enqueue({write::kind::finish, row{id, "", result_json, epoch_seconds()}, std::move(done)});
}

void journal::forget(const std::string& id, committed_fn done) {
  enqueue({write::kind::forget, row{id, "", "", 0}, std::move(done)});
}

namespace {

// Queues a write through `start` and waits for its commit.
template <class Start>
status committed(Start start) {
  std::promise<status> p;
  auto f = p.get_future();
  start([&p](const status& st) { p.set_value(st); });
  return f.get();
}

} // namespace

status journal::add(const row& r) {
  return committed([&](committed_fn done) { add(r, std::move(done)); });
}

status journal::finish(const std::string& id, const std::string& result_json) {
  return committed([&](committed_fn done) { finish(id, result_json, std::move(done)); });
}

status journal::forget(const std::string& id) {
  return committed([&](committed_fn done) { forget(id, std::move(done)); });
}

expected<int> journal::purge(double keep_s) {
  int changed = 0;
  auto st = committed([&](committed_fn done) {
    write w{write::kind::purge, row{"", "", "", epoch_seconds() - keep_s}, std::move(done)};
    w.changed = &changed;
    enqueue(std::move(w));
  });
  if (!st) return st.err();
  return changed;
}

void journal::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = queued_seq_;
  idle_cv_.wait(lock, [&] { return done_seq_ >= target; });
}

journal::write_counts journal::counts() {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

// Everything queued since the last commit goes in one transaction: under load a commit (the
// WAL's write and its locks, most of a write's cost) is shared by many writes.
void journal::write_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return closing_ || !queue_.empty(); });
    if (queue_.empty()) return; // closing, and all committed
    std::vector<write> batch(std::make_move_iterator(queue_.begin()),
                             std::make_move_iterator(queue_.end()));
    queue_.clear();
    lock.unlock();
    auto results = commit(batch);
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!batch[i].done) continue;
      try {
        batch[i].done(results[i]);
      } catch (const std::exception& ex) { // a caller's bug must not stop the journal
        spdlog::error("journal: a write's callback threw: {}", ex.what());
      }
    }
    const uint64_t last = batch.back().seq;
    const auto writes = static_cast<int64_t>(batch.size());
    batch.clear(); // the callbacks' captures go before flush() can return
    lock.lock();
    done_seq_ = last;
    ++counts_.commits;
    counts_.writes += writes;
    unchecked_writes_ += writes;
    if (unchecked_writes_ >= 512) checkpoint_cv_.notify_one();
    idle_cv_.notify_all();
  }
}

// One transaction for the batch; each write's status. A write SQLite refuses is told why and the
// others commit; a transaction SQLite rolled back (a full disk), or a failed commit, fails all.
std::vector<status> journal::commit(const std::vector<write>& batch) {
  std::vector<status> results(batch.size(), ok());
  // A transaction left open by a failed rollback would make every later BEGIN fail.
  if (!sqlite3_get_autocommit(writer_db_.db)) (void)writer_db_.exec("ROLLBACK");
  // IMMEDIATE: the write lock is taken (or waited for) once, not by each statement.
  status outcome = writer_db_.exec("BEGIN IMMEDIATE");
  for (size_t i = 0; i < batch.size() && outcome; ++i) {
    results[i] = apply(batch[i]);
    if (sqlite3_get_autocommit(writer_db_.db)) // rolled back: the rest is not run outside it
      outcome = error{"journal: the transaction was rolled back: " +
                      (results[i] ? std::string("by SQLite") : results[i].message())};
  }
  if (outcome) outcome = writer_db_.exec("COMMIT");
  if (!outcome) {
    if (!sqlite3_get_autocommit(writer_db_.db)) (void)writer_db_.exec("ROLLBACK");
    for (auto& r : results)
      if (r) r = outcome;
  }
  return results;
}

status journal::apply(const write& w) {
  static const char* const sql[] = {
      "INSERT OR REPLACE INTO evaluations (id, owner, request, accepted_at, result, finished_at) "
      "VALUES (?, ?, ?, ?, NULL, NULL)",
      "UPDATE evaluations SET result = ?, finished_at = ? WHERE id = ?",
      "DELETE FROM evaluations WHERE id = ?",
      "DELETE FROM evaluations WHERE finished_at IS NOT NULL AND finished_at < ?"};
  static const char* const verb[] = {"add ", "finish ", "forget ", "purge"};
  auto k = static_cast<int>(w.what);
  statement st;
  if (!(st.s = writer_db_.prepare(sql[k]))) return error{db_error(writer_db_.db, "prepare")};
  switch (w.what) {
  case write::kind::add:
    sqlite3_bind_text(st.s, 1, w.r.id.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st.s, 2, w.r.owner.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st.s, 3, w.r.request.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st.s, 4, w.r.accepted_at);
    break;
  case write::kind::finish:
    sqlite3_bind_text(st.s, 1, w.r.request.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st.s, 2, w.r.accepted_at);
    sqlite3_bind_text(st.s, 3, w.r.id.c_str(), -1, SQLITE_TRANSIENT);
    break;
  case write::kind::forget: sqlite3_bind_text(st.s, 1, w.r.id.c_str(), -1, SQLITE_TRANSIENT); break;
  case write::kind::purge: sqlite3_bind_double(st.s, 1, w.r.accepted_at); break;
  }
  if (sqlite3_step(st.s) != SQLITE_DONE) return error{db_error(writer_db_.db, verb[k] + w.r.id)};
  if (w.changed) *w.changed = sqlite3_changes(writer_db_.db);
  return ok();
}

expected<std::vector<journal::row>> journal::unfinished() {
  std::lock_guard<std::mutex> lock(read_mu_);
  statement st;
  if (!(st.s = reader_db_.prepare("SELECT id, owner, request, accepted_at FROM evaluations "
                                  "WHERE result IS NULL ORDER BY accepted_at")))
    return error{db_error(reader_db_.db, "prepare")};
  std::vector<row> rows;
  int rc;
  auto text = [&](int c) {
    auto* p = sqlite3_column_text(st.s, c);
    return p ? std::string(reinterpret_cast<const char*>(p)) : std::string();
  };
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW)
    rows.push_back({text(0), text(1), text(2), sqlite3_column_double(st.s, 3)});
  if (rc != SQLITE_DONE) return error{db_error(reader_db_.db, "read unfinished")};
  return rows;
}

expected<std::optional<std::string>> journal::result(const std::string& id) {
  std::lock_guard<std::mutex> lock(read_mu_);
  statement st;
  if (!(st.s = reader_db_.prepare(
            "SELECT result FROM evaluations WHERE id = ? AND result IS NOT NULL")))
    return error{db_error(reader_db_.db, "prepare")};
  sqlite3_bind_text(st.s, 1, id.c_str(), -1, SQLITE_TRANSIENT);
  int rc = sqlite3_step(st.s);
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return error{db_error(reader_db_.db, "read " + id)};
  return std::optional<std::string>(
      std::string(reinterpret_cast<const char*>(sqlite3_column_text(st.s, 0))));
}

} // namespace kiln
