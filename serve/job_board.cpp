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

} // namespace

job_board::job_board(job_board_options opts, journal& j, evaluate_fn evaluate)
    : opts_(opts), journal_(j), evaluate_(std::move(evaluate)) {
  for (int i = 0; i < std::max(1, opts_.workers); ++i) workers_.emplace_back([this] { work(); });
}

void job_board::stop() {
  std::unique_lock<std::mutex> lock(mu_);
  stopping_ = true;
  cv_.notify_all();
  // Callbacks already under way finish before this returns; none starts after it.
  cv_.wait(lock, [&] { return finishing_ == 0; });
}

job_board::~job_board() {
  stop();
  for (auto& w : workers_) w.join();
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
            order_++, body.value("submitted_at", std::string())};
    queued_.insert(e.key);
    queue_.push_back(std::move(e));
    ++per_owner_[row.owner];
    ++counts_.pending;
    ++n;
  }
  std::stable_sort(queue_.begin(), queue_.end(), [](const entry& a, const entry& b) {
    return a.priority != b.priority ? a.priority > b.priority : a.order < b.order;
  });
  cv_.notify_all();
  return n;
}

job_board::ticket job_board::submit(const evaluation_request& r, const std::string& owner,
                                    int owner_max_pending, done_fn on_done) {
  const std::string key = job_key(owner, r.task_id);
  std::unique_lock<std::mutex> lock(mu_);
  if (running_.count(key) || queued_.count(key)) {
    // The same id again (a client retrying after a lost answer): it waits for the first one.
    if (on_done) waiters_[key].push_back(std::move(on_done));
    return {admission::running, std::nullopt, ""};
  }
  if (!r.force_refresh) {
    auto stored = journal_.result(key);
    if (stored && *stored) {
      auto j = json::parse(**stored, nullptr, false);
      if (!j.is_discarded())
        if (auto res = result_from_json(j)) {
          lock.unlock();
          if (on_done) on_done(*res);
          return {admission::finished, *res, ""};
        }
    }
  }
  if (counts_.pending + counts_.processing >= opts_.capacity) {
    ++counts_.refused_full;
    return {admission::full, std::nullopt, ""};
  }
  if (per_owner_[owner] >= owner_max_pending) {
    ++counts_.refused_quota;
    return {admission::over_quota, std::nullopt, ""};
  }
  entry e{r, owner, key, priority_rank(r.priority), order_++, iso_time_now()};
  if (r.force_refresh) (void)journal_.forget(key);
  if (auto st = journal_.add({key, owner,
                              request_json(r, e.submitted_at).dump(-1, ' ', false, utf8_replace),
                              epoch_seconds()});
      !st)
    return {admission::journal_failed, std::nullopt, st.message()};
  auto at = std::upper_bound(queue_.begin(), queue_.end(), e, [](const entry& a, const entry& b) {
    return a.priority != b.priority ? a.priority > b.priority : a.order < b.order;
  });
  queue_.insert(at, std::move(e));
  queued_.insert(key);
  ++per_owner_[owner];
  ++counts_.pending;
  if (on_done) waiters_[key].push_back(std::move(on_done));
  lock.unlock();
  cv_.notify_one();
  return {admission::accepted, std::nullopt, ""};
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
      finish(e, r);
    } catch (const std::exception& ex) {
      spdlog::error("serve: {}: its result could not be delivered: {}", r.task_id, ex.what());
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      --finishing_;
    }
    cv_.notify_all();
  }
}

void job_board::finish(const entry& e, const evaluation_result& r) {
  auto text = to_json(r).dump(-1, ' ', false, utf8_replace);
  if (auto st = journal_.finish(e.key, text); !st)
    spdlog::error("serve: {} finished but could not be journaled: {}", r.task_id, st.message());
  static std::atomic<double> last_purge{0};
  if (double now = epoch_seconds(); now - last_purge.load() > 60) {
    last_purge = now;
    (void)journal_.purge(opts_.keep_results_s);
  }
  std::vector<done_fn> waiting;
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_.erase(e.key);
    --counts_.processing;
    --per_owner_[e.owner];
    ++(r.status == "completed" ? counts_.completed : counts_.failed);
    if (auto it = waiters_.find(e.key); it != waiters_.end()) {
      waiting = std::move(it->second);
      waiters_.erase(it);
    }
  }
  for (auto& w : waiting) w(r);
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
