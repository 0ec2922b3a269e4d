#include "serve/job_board.hpp"

#include "serve/tokens.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <spdlog/spdlog.h>

namespace kiln {

using json = nlohmann::json;

namespace {

json request_json(const evaluation_request& r, const std::string& submitted_at) {
  return json{{"task_id", r.task_id},
              {"reference_code", r.reference_code},
              {"kernel_code", r.kernel_code},
              {"backend", r.backend},
              {"entry_point", r.entry_point},
              {"reference_backend", r.reference_backend},
              {"priority", r.priority},
              {"num_correct_trials", r.num_correct_trials},
              {"num_perf_trials", r.num_perf_trials},
              {"num_warmup", r.num_warmup},
              {"timeout", r.timeout_s},
              {"submitted_at", submitted_at}};
}

// The journal's id of an owner's task_id (a token name has no control characters).
std::string job_key(const std::string& owner, const std::string& task_id) {
  return owner + '\x1f' + task_id;
}

std::string task_of(const std::string& key) { return key.substr(key.find('\x1f') + 1); }

} // namespace

job_board::job_board(job_board_options opts, journal& j, evaluate_fn evaluate)
    : opts_(opts), journal_(j), evaluate_(std::move(evaluate)) {
  for (int i = 0; i < std::max(1, opts_.workers); ++i) workers_.emplace_back([this] { work(); });
}

void job_board::stop() {
  std::unique_lock<std::mutex> lock(mu_);
  stopping_ = true;
  cv_.notify_all();
  // Callbacks already under way (results being delivered, jobs being journaled) finish before
  // this returns; none starts after it.
  cv_.wait(lock, [&] { return finishing_ == 0 && journaling_.empty(); });
}

job_board::~job_board() {
  stop();
  for (auto& w : workers_) w.join();
  journal_.flush(); // the journal's callbacks into this board have all run
}

// The queue's order: priority (high first), then arrival.
bool job_board::runs_before(const entry& a, const entry& b) {
  return a.priority != b.priority ? a.priority > b.priority : a.order < b.order;
}

expected<int> job_board::recover() {
  auto rows = journal_.unfinished();
  if (!rows) return rows.err();
  int n = 0;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& row : *rows) {
    auto body = json::parse(row.request, nullptr, false);
    auto r = body.is_discarded() ? expected<evaluation_request>(error{"not JSON"})
                                 : parse_evaluation_request(body);
    if (!r) {
      spdlog::warn("serve: journal entry {} is unreadable ({}); skipped", row.id, r.message());
      continue;
    }
    entry e{*r,       row.owner,
            row.id,   priority_rank(r->priority),
            order_++, body.value("submitted_at", std::string()),
            {}};
    queued_.insert(e.key);
    queue_.push_back(std::move(e));
    ++per_owner_[row.owner];
    ++counts_.pending;
    ++n;
  }
  std::stable_sort(queue_.begin(), queue_.end(), runs_before);
  cv_.notify_all();
  return n;
}

job_board::ticket job_board::submit(const evaluation_request& r, const std::string& owner,
                                    int owner_max_pending, done_fn on_done,
                                    journaled_fn on_journaled) {
  const std::string key = job_key(owner, r.task_id);
  std::unique_lock<std::mutex> lock(mu_);
  // The same id again (a client retrying after a lost answer) waits for the first one: for its
  // result, and, while that is being journaled, to be told whether the journal took it.
  auto joined = [&]() -> std::optional<ticket> {
    if (auto it = journaling_.find(key); it != journaling_.end()) {
      it->second.callers.emplace_back(std::move(on_done), std::move(on_journaled));
      return ticket{admission::accepted, std::nullopt};
    }
    if (!running_.count(key) && !queued_.count(key)) return std::nullopt;
    if (on_done) waiters_[key].push_back(std::move(on_done));
    return ticket{admission::running, std::nullopt};
  };
  if (auto t = joined()) return *t;
  // A stored result is read beside the board (the journal's read connection); a job of this id
  // that finished meanwhile (finished_ moved) means reading again.
  for (uint64_t seen = finished_ + 1; !r.force_refresh && seen != finished_;) {
    seen = finished_;
    lock.unlock();
    auto stored = journal_.result(key);
    if (stored && *stored) {
      auto j = json::parse(**stored, nullptr, false);
      if (!j.is_discarded())
        if (auto res = result_from_json(j)) {
          if (on_done) on_done(*res);
          return {admission::finished, *res};
        }
    }
    lock.lock();
    if (auto t = joined()) return *t;
  }
  if (counts_.pending + counts_.processing >= opts_.capacity) {
    ++counts_.refused_full;
    return {admission::full, std::nullopt};
  }
  if (per_owner_[owner] >= owner_max_pending) {
    ++counts_.refused_quota;
    return {admission::over_quota, std::nullopt};
  }
  entry e{r, owner, key, priority_rank(r.priority), order_++, iso_time_now(), {}};
  e.callers.emplace_back(std::move(on_done), std::move(on_journaled));
  auto row =
      journal::row{key, owner, request_json(r, e.submitted_at).dump(-1, ' ', false, utf8_replace),
                   epoch_seconds()};
  journaling_.emplace(key, std::move(e));
  ++per_owner_[owner];
  ++counts_.pending;
  lock.unlock();
  if (r.force_refresh) journal_.forget(key, {}); // committed before the add below
  journal_.add(row, [this, key](const status& st) { journaled(key, st); });
  return {admission::accepted, std::nullopt};
}

// From the journal's thread: a committed job joins the queue; a refused one is dropped. Its
// callers are told either way.
void job_board::journaled(const std::string& key, const status& committed) {
  const std::string task_id = task_of(key);
  status st = committed;
  if (!st) { // the journal names the row by its key: the caller knows it by owner / task_id
    std::string why = st.message();
    std::replace(why.begin(), why.end(), '\x1f', '/');
    st = error{why};
  }
  std::vector<std::pair<done_fn, journaled_fn>> callers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = journaling_.find(key);
    entry e = std::move(it->second);
    journaling_.erase(it);
    ++finishing_; // until its callers are told: stop() waits for that too
    callers = std::move(e.callers);
    if (st && !stopping_) {
      auto& waiting = waiters_[key];
      for (auto& c : callers)
        if (c.first) waiting.push_back(std::move(c.first));
      queue_.insert(std::upper_bound(queue_.begin(), queue_.end(), e, runs_before), std::move(e));
      queued_.insert(key);
    } else { // refused; or stopping, and then it runs at the next start
      --counts_.pending;
      --per_owner_[e.owner];
    }
  }
  if (st) cv_.notify_one(); // a worker for the job
  evaluation_result refused;
  if (!st) {
    spdlog::error("serve: the journal refused {}: {}", task_id, st.message());
    refused.task_id = task_id;
    refused.status = "failed";
    refused.error_code = "SYSTEM_ERROR";
    refused.error_message = "the journal refused the job: " + st.message();
  }
  for (auto& [done, told] : callers) {
    try {
      if (told)
        told(st);
      else if (!st && done)
        done(refused);
    } catch (const std::exception& ex) {
      spdlog::error("serve: {}: the journal's answer could not be delivered: {}", task_id,
                    ex.what());
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    --finishing_;
  }
  cv_.notify_all();
}

void job_board::work() {
  for (;;) {
    entry e;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      e = std::move(queue_.front());
      queue_.pop_front();
      queued_.erase(e.key);
      running_.insert(e.key);
      --counts_.pending;
      ++counts_.processing;
    }
    auto t0 = std::chrono::steady_clock::now();
    evaluation_result r;
    try {
      r = evaluate_(e.request);
    } catch (const std::exception& ex) {
      r.task_id = e.request.task_id;
      r.status = "failed";
      r.error_code = "SYSTEM_ERROR";
      r.error_message = std::string("internal error: ") + ex.what();
    }
    r.submitted_at = e.submitted_at;
    r.completed_at = iso_time_now();
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return; // the pool was stopped under it: run again at the next start
      mean_s_ = 0.9 * mean_s_ + 0.1 * took;
      ++finishing_;
    }
    try {
      finish(e, r); // finishing_ drops when its waiters have it
    } catch (const std::exception& ex) {
      finished(e.key, e.owner, r, error{std::string("not journaled: ") + ex.what()});
    }
  }
}

// The result is journaled; its waiters get it once that is committed (a retry meanwhile joins
// them, since the id is still running).
void job_board::finish(const entry& e, const evaluation_result& r) {
  auto text = to_json(r).dump(-1, ' ', false, utf8_replace);
  static std::atomic<double> last_purge{0};
  if (double now = epoch_seconds(); now - last_purge.load() > 60) {
    last_purge = now;
    (void)journal_.purge(opts_.keep_results_s);
  }
  journal_.finish(e.key, text, [this, key = e.key, owner = e.owner, r](const status& st) {
    finished(key, owner, r, st);
  });
}

void job_board::finished(const std::string& key, const std::string& owner,
                         const evaluation_result& r, const status& st) {
  if (!st)
    spdlog::error("serve: {} finished but could not be journaled: {}", r.task_id, st.message());
  std::vector<done_fn> waiting;
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_.erase(key);
    --counts_.processing;
    --per_owner_[owner];
    ++finished_;
    ++(r.status == "completed" ? counts_.completed : counts_.failed);
    if (auto it = waiters_.find(key); it != waiters_.end()) {
      waiting = std::move(it->second);
      waiters_.erase(it);
    }
  }
  for (auto& w : waiting) {
    try {
      w(r);
    } catch (const std::exception& ex) {
      spdlog::error("serve: {}: its result could not be delivered: {}", r.task_id, ex.what());
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    --finishing_;
  }
  cv_.notify_all();
}

std::optional<evaluation_result> job_board::find(const std::string& owner, const std::string& id) {
  const std::string key = job_key(owner, id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    evaluation_result r;
    r.task_id = id;
    if (running_.count(key)) {
      r.status = "processing";
      return r;
    }
    if (auto it = journaling_.find(key); it != journaling_.end()) {
      r.status = "pending";
      r.submitted_at = it->second.submitted_at;
      return r;
    }
    if (queued_.count(key))
      for (const auto& e : queue_)
        if (e.key == key) {
          r.status = "pending";
          r.submitted_at = e.submitted_at;
          return r;
        }
  }
  auto stored = journal_.result(key);
  if (!stored || !*stored) return std::nullopt;
  auto j = json::parse(**stored, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  auto r = result_from_json(j);
  if (!r) return std::nullopt;
  return *r;
}

int job_board::queue_position(const std::string& owner, const std::string& id) {
  const std::string key = job_key(owner, id);
  std::lock_guard<std::mutex> lock(mu_);
  if (!queued_.count(key)) return -1;
  for (size_t i = 0; i < queue_.size(); ++i)
    if (queue_[i].key == key) return static_cast<int>(i);
  return -1;
}

board_counts job_board::counts() {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

double job_board::retry_after_s() {
  std::lock_guard<std::mutex> lock(mu_);
  double per_worker = static_cast<double>(counts_.pending + counts_.processing) /
                      std::max<size_t>(1, workers_.size());
  return std::clamp(per_worker * mean_s_ / 4, 1.0, 300.0);
}

} // namespace kiln
