// The durable record of accepted evaluations (SQLite, WAL): a job is written before it is
// acknowledged and its result when it is done, so a `kiln serve` killed and restarted runs what
// it had accepted and still answers /results for what it finished. Thread-safe.
//   accept --add--> row (pending) --finish--> row (result JSON) ... restart --unfinished--> re-run
#pragma once

#include "data/expected.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
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

  // Creates the file and its table if needed; the error names the file.
  static expected<std::unique_ptr<journal>> open(const std::string& path);
  ~journal();

  status add(const row& r);
  status finish(const std::string& id, const std::string& result_json);
  status forget(const std::string& id); // a force_refresh drops the old result first
  // Accepted and not finished, oldest first.
  expected<std::vector<row>> unfinished();
  // The finished result's JSON; nullopt when the id is unknown or not finished.
  expected<std::optional<std::string>> result(const std::string& id);
  // Drops finished rows whose result is older than `keep_s`; returns how many.
  expected<int> purge(double keep_s);

private:
  explicit journal(sqlite3* db) : db_(db) {}
  status exec(const std::string& sql);
  bool prepare(const char* sql, sqlite3_stmt** out); // under mu_
  sqlite3* db_;
  std::mutex mu_;
  std::map<const char*, sqlite3_stmt*> prepared_; // by the statement's literal
};

double epoch_seconds();

} // namespace kiln
