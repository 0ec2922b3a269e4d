// Accepted evaluations between the HTTP front and the evaluator: a bounded queue ordered by
// priority then arrival, a limit per token, each id's state, and callbacks waiting for results.
// A task_id is its caller's (the token's owner): two callers' ids never meet, so none can read
// or pre-empt another's results by naming its ids.
// An accepted job runs, and is acknowledged, only once the journal has committed it, so a restart
// loses none; its result reaches its waiters once the journal has committed that too. Worker
// threads take jobs in order and run them.
//   submit --journal.add--> queue --worker: evaluate--> result --journal.finish--> waiters, store
#pragma once

#include "serve/evaluation.hpp"
#include "serve/journal.hpp"

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

namespace kiln {

struct job_board_options {
  int capacity = 256;            // accepted and unfinished, all callers together
  int workers = 8;               // evaluations in flight towards the pool
  double keep_results_s = 86400; // finished results answered this long
};

struct board_counts {
  int pending = 0, processing = 0;
  int64_t completed = 0, failed = 0, refused_full = 0, refused_quota = 0;
};

class job_board {
public:
  using evaluate_fn = std::function<evaluation_result(const evaluation_request&)>;
  using done_fn = std::function<void(const evaluation_result&)>;
  using journaled_fn = std::function<void(const status&)>;

  job_board(job_board_options opts, journal& j, evaluate_fn evaluate);
  ~job_board(); // stop(), then joins the workers and waits for the journal's callbacks
  // No job starts after this, and a result that arrives after it is not journaled: what was
  // accepted and not finished stays in the journal for the next start.
  void stop();
  job_board(const job_board&) = delete;
  job_board& operator=(const job_board&) = delete;

  // Re-queues what the journal holds unfinished (at a start, before any submit); returns how many.
  expected<int> recover();

  enum class admission { accepted, finished, running, full, over_quota };
  struct ticket {
    admission what;
    std::optional<evaluation_result> result; // finished: the stored result
  };
  // `on_done` (may be empty) is called once with the result, from the journal's thread, or at
  // once when the id is already finished (and force_refresh is off). A running id gets the
  // waiter. An accepted job is journaled after this returns: `on_journaled` (may be empty) is
  // then called once, from the journal's thread, with whether the journal took it (a retry of
  // an id still being journaled is also `accepted`, and told the same). A job the journal
  // refused does not run: a caller's `on_done` is not called when its `on_journaled` is given,
  // and otherwise gets a failed result naming the journal's error.
  ticket submit(const evaluation_request& r, const std::string& owner, int owner_max_pending,
                done_fn on_done, journaled_fn on_journaled = {});

  // `owner`'s id: pending | processing (no result yet), or the finished result; nullopt: unknown.
  std::optional<evaluation_result> find(const std::string& owner, const std::string& id);
  // 0-based among pending; -1 when not pending
  int queue_position(const std::string& owner, const std::string& id);
  board_counts counts();
  double retry_after_s(); // a guess for 429's Retry-After: the queue's expected drain time

private:
  struct entry {
    evaluation_request request;
    std::string owner;
    std::string key; // job_key(owner, task_id): the journal's id
    int priority = 1;
    uint64_t order = 0;
    std::string submitted_at;
    // While journaling: who submitted the id (the first, then retries), told when it commits.
    std::vector<std::pair<done_fn, journaled_fn>> callers;
  };
  static bool runs_before(const entry& a, const entry& b);
  void work();
  void journaled(const std::string& key, const status& committed);
  void finish(const entry& e, const evaluation_result& r);
  void finished(const std::string& key, const std::string& owner, const evaluation_result& r,
                const status& st);

  job_board_options opts_;
  journal& journal_;
  evaluate_fn evaluate_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<entry> queue_;                 // kept sorted: priority (high first), then order
  std::map<std::string, entry> journaling_; // accepted, not yet committed
  std::unordered_set<std::string> queued_, running_;    // keys
  std::map<std::string, std::vector<done_fn>> waiters_; // by key
  std::map<std::string, int> per_owner_;
  board_counts counts_;
  uint64_t order_ = 0;
  double mean_s_ = 10; // running mean of an evaluation's time, for Retry-After
  bool stopping_ = false;
  int finishing_ = 0;     // results, and journal answers, being delivered to their callers
  uint64_t finished_ = 0; // jobs finished so far (a stored result may have appeared)
  std::vector<std::thread> workers_;
};

} // namespace kiln
