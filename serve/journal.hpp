// The durable record of accepted evaluations (SQLite, WAL): a job is written before it is
// acknowledged and its result when it is done, so a `kiln serve` killed and restarted runs what
// it had accepted and still answers /results for what it finished. Thread-safe.
// Writes are group-committed: one writer thread takes every write queued since its last commit
// and commits them in one transaction, then tells each caller; reads use their own connection
// (WAL lets them run beside the writer) and see what is committed; a third thread checkpoints.
//   accept --add--> row (pending) --finish--> row (result JSON) ... restart --unfinished--> re-run
#pragma once

#include "data/expected.hpp"

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

struct sqlite3;
struct sqlite3_stmt;

namespace kiln {

class journal {
public:
  struct row {
    std::string id, owner, request; // owner: the token's name ("" without tokens)
    double accepted_at = 0;         // s since the epoch
  };
  // Called once, from the writer thread, when the write is committed (ok) or refused (the
  // error names the statement and SQLite's reason).
  using committed_fn = std::function<void(const status&)>;

  // Creates the file and its table if needed; the error names the file.
  static expected<std::unique_ptr<journal>> open(const std::string& path);
  ~journal(); // commits what is queued, then closes

  // Queued writes, committed in order; `done` may be empty.
  void add(const row& r, committed_fn done);
  void finish(const std::string& id, const std::string& result_json, committed_fn done);
  void forget(const std::string& id, committed_fn done); // a force_refresh drops the old result
  // The same, waiting for the commit.
  status add(const row& r);
  status finish(const std::string& id, const std::string& result_json);
  status forget(const std::string& id);
  // Returns when everything queued before the call is committed and its callbacks have run.
  // Not from a callback (they run on the writer thread, which this waits for).
  void flush();

  // Accepted and not finished, oldest first.
  expected<std::vector<row>> unfinished();
  // The finished result's JSON; nullopt when the id is unknown or not finished.
  expected<std::optional<std::string>> result(const std::string& id);
  // Drops finished rows whose result is older than `keep_s`; returns how many.
  expected<int> purge(double keep_s);

  // Transactions committed and writes in them, since open (for figures and tests).
  struct write_counts {
    int64_t commits = 0, writes = 0;
  };
  write_counts counts();

private:
  struct write {
    enum class kind { add, finish, forget, purge } what;
    row r; // add: the row; finish / forget: r.id (and finish's JSON in r.request); purge: the
           // cut-off time in r.accepted_at
    committed_fn done;
    int* changed = nullptr; // rows the statement changed, where asked
    uint64_t seq = 0;       // its place in the queue, for flush()
  };
  // One SQLite connection, its statements prepared once each.
  struct connection {
    sqlite3* db = nullptr;
    std::map<const char*, sqlite3_stmt*> prepared; // by the statement's literal
    ~connection();
    sqlite3_stmt* prepare(const char* sql); // nullptr on failure (sqlite3_errmsg says why)
    status exec(const char* sql);
  };

  journal() = default;
  void enqueue(write w);
  void write_loop();
  void checkpoint_loop();
  std::vector<status> commit(const std::vector<write>& batch);
  status apply(const write& w); // on the writer's connection, in its transaction

  connection writer_db_, reader_db_, checkpoint_db_;
  std::mutex read_mu_; // reader_db_

  std::mutex mu_; // the queue below
  std::condition_variable cv_, idle_cv_, checkpoint_cv_;
  std::deque<write> queue_;
  bool closing_ = false;
  uint64_t queued_seq_ = 0, done_seq_ = 0; // the last write queued, and the last committed
  write_counts counts_;
  int64_t unchecked_writes_ = 0; // committed since the last checkpoint
  std::thread writer_, checkpointer_;
};

double epoch_seconds();

} // namespace kiln
