// KernelBench problem sources as tasks for `kiln serve`: imported on first use by `kiln tasks
// import` (the trusted importer, in its own process), cached under the state folder by the
// source's hash, so each distinct reference is traced and checked once across requests and
// restarts. Concurrent requests for one source wait for one import.
//   reference_code --hash--> state/problems/<hash>/ --kiln tasks import--> task (or the reason)
#pragma once

#include "data/expected.hpp"
#include "data/task_spec.hpp"

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace kiln {

struct problem_import_options {
  // A problem source is Python that the importer runs as this server's user, outside the kernel
  // sandbox (it is the reference: trusted code). Off unless the operator trusts every caller.
  bool enabled = false;
  std::string state_dir;    // problems/<hash>/ under it
  double scale_batch = 1.0; // the importer's --scale-batch
  int timeout_s = 600;      // the importer's --timeout, per problem
};

class problem_importer {
public:
  explicit problem_importer(problem_import_options opts) : opts_(std::move(opts)) {}
  // The task for this problem source, or why the importer refused it.
  expected<task> get(const std::string& source);

private:
  struct slot {
    std::string source;
    bool done = false;
    std::shared_ptr<expected<task>> result;
  };
  expected<task> import(const std::string& source, const std::string& hash);
  problem_import_options opts_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<slot>> by_hash_; // an import done or under way
};

} // namespace kiln
