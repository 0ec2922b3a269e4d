#include "serve/job_board.hpp"
#include "tests/support/journal_hold.hpp"

#include <atomic>
#include <chrono>
#include <doctest/doctest.h>
#include <filesystem>
#include <future>
#include <sqlite3.h>
#include <thread>
#include <unistd.h>

using namespace kiln;

namespace {

evaluation_request req(const std::string& id, const std::string& priority = "normal") {
  evaluation_request r;
  r.task_id = id;
  r.reference_code = "relu";
  r.kernel_code = "class ModelNew: pass";
  r.backend = "cpu";
  r.priority = priority;
  return r;
}

// An evaluator held closed until the test opens it; it records the order it ran ids in.
struct gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::vector<std::string> order;
  evaluation_result operator()(const evaluation_request& r) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return open; });
    order.push_back(r.task_id);
    evaluation_result out;
    out.task_id = r.task_id;
    out.status = "completed";
    out.correctness = true;
    return out;
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
};

// A journal file of this process, removed with its WAL files when the test case ends (declared
// before the journal and the board, so destroyed after them).
struct board_journal_file {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("kiln_board_" + std::to_string(getpid()) + ".sqlite"))
                         .string();
  board_journal_file() { remove(); }
  ~board_journal_file() { remove(); }
  void remove() const {
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  }
};

template <class F>
bool eventually(F f) {
  for (int i = 0; i < 500; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

} // namespace

TEST_CASE("job board: priority then arrival, capacity and per-token limits, one run per id") {
  board_journal_file file;
  const auto& path = file.path;
  auto j = journal::open(path);
  REQUIRE(j);
  gate g;
  job_board_options o;
  o.capacity = 4;
  o.workers = 1;
  job_board board(o, **j, [&](const evaluation_request& r) { return g(r); });
  std::promise<evaluation_result> first_done;
  using A = job_board::admission;
  CHECK(board
            .submit(req("first"), "a", 10,
                    [&](const evaluation_result& r) { first_done.set_value(r); })
            .what == A::accepted);
  REQUIRE(eventually([&] { return board.counts().processing == 1; })); // held in the gate
  CHECK(board.submit(req("low", "low"), "a", 10, {}).what == A::accepted);
  CHECK(board.submit(req("high", "high"), "b", 1, {}).what == A::accepted);
  CHECK(board.submit(req("b-again"), "b", 1, {}).what == A::over_quota);
  int waited = 0;
  CHECK(board.submit(req("first"), "a", 10, [&](const evaluation_result&) { ++waited; }).what ==
        A::running); // a retry of a running id waits for it
  CHECK(board.submit(req("normal"), "a", 10, {}).what == A::accepted);
  CHECK(board.submit(req("over"), "a", 10, {}).what == A::full);
  (*j)->flush(); // accepted jobs join the queue once journaled (when a caller hears "accepted")
  CHECK(board.queue_position("b", "high") == 0);
  CHECK(board.queue_position("a", "low") == 2);
  CHECK(board.find("a", "low")->status == "pending");
  CHECK(board.find("a", "first")->status == "processing");
  CHECK_FALSE(board.find("a", "never"));
  CHECK_FALSE(board.find("b", "low")); // another caller's id is not b's
  g.release();
  CHECK(first_done.get_future().get().correctness == true);
  REQUIRE(eventually([&] { return board.counts().completed == 4; }));
  CHECK(g.order == std::vector<std::string>{"first", "high", "normal", "low"});
  CHECK(waited == 1);
  // Finished: answered from the journal, and a resubmission gets the stored result.
  auto done = board.submit(req("low"), "a", 10, {});
  CHECK(done.what == A::finished);
  CHECK(done.result->status == "completed");
  auto c = board.counts();
  CHECK(c.refused_full == 1);
  CHECK(c.refused_quota == 1);
}

TEST_CASE("job board: stopped with work accepted, the next board runs it from the journal") {
  board_journal_file file;
  const auto& path = file.path;
  {
    auto j = journal::open(path);
    REQUIRE(j);
    gate never; // never opened: the job is running when the board stops
    job_board_options o;
    o.workers = 1;
    auto board =
        std::make_unique<job_board>(o, **j, [&](const evaluation_request& r) { return never(r); });
    REQUIRE(board->submit(req("running"), "a", 10, {}).what == job_board::admission::accepted);
    REQUIRE(board->submit(req("queued"), "a", 10, {}).what == job_board::admission::accepted);
    REQUIRE(eventually([&] { return board->counts().processing == 1; }));
    board->stop();
    never.release(); // the evaluation returns after the stop: its result is not journaled
    board.reset();
  }
  auto j = journal::open(path);
  REQUIRE(j);
  gate g;
  g.release();
  job_board board({}, **j, [&](const evaluation_request& r) { return g(r); });
  auto n = board.recover();
  REQUIRE(n);
  CHECK(*n == 2);
  REQUIRE(eventually([&] { return board.counts().completed == 2; }));
  CHECK(board.find("a", "running")->status == "completed");
  CHECK(board.find("a", "queued")->status == "completed");
}

TEST_CASE("job board: an id is its caller's and another caller's same id runs its own code") {
  // A caller who guesses (or sends first) another's task_id neither reads that caller's result
  // nor has its own result handed to that caller.
  board_journal_file file;
  const auto& path = file.path;
  auto j = journal::open(path);
  REQUIRE(j);
  gate g;
  g.release();
  job_board board({}, **j, [&](const evaluation_request& r) {
    auto out = g(r);
    out.error_message = r.kernel_code; // which submission this result is of
    return out;
  });
  auto with_code = [](const std::string& code) {
    auto r = req("shared-id");
    r.kernel_code = code;
    return r;
  };
  std::promise<evaluation_result> mallory_done, alice_done;
  REQUIRE(board
              .submit(with_code("mallory's"), "mallory", 10,
                      [&](const evaluation_result& r) { mallory_done.set_value(r); })
              .what == job_board::admission::accepted);
  CHECK(mallory_done.get_future().get().error_message == "mallory's");
  CHECK_FALSE(board.find("alice", "shared-id"));
  auto t = board.submit(with_code("alice's"), "alice", 10,
                        [&](const evaluation_result& r) { alice_done.set_value(r); });
  CHECK(t.what == job_board::admission::accepted); // not mallory's stored result
  CHECK(alice_done.get_future().get().error_message == "alice's");
  CHECK(board.find("alice", "shared-id")->error_message == "alice's");
  CHECK(board.find("mallory", "shared-id")->error_message == "mallory's");
}

TEST_CASE("job board: a job the journal refuses does not run and its callers are told why") {
  board_journal_file file;
  const auto& path = file.path;
  auto j = journal::open(path);
  REQUIRE(j);
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db,
                       "CREATE TRIGGER refuse BEFORE INSERT ON evaluations WHEN NEW.id LIKE "
                       "'%refused' BEGIN SELECT RAISE(ABORT, 'disk full (test)'); END",
                       nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  std::atomic<int> ran{0};
  gate g;
  g.release();
  job_board board({}, **j, [&](const evaluation_request& r) {
    ++ran;
    return g(r);
  });
  // With on_journaled: that callback gets the error, on_done is not called.
  std::promise<status> journaled;
  int done_calls = 0;
  auto t = board.submit(
      req("refused"), "a", 1, [&](const evaluation_result&) { ++done_calls; },
      [&](const status& st) { journaled.set_value(st); });
  CHECK(t.what == job_board::admission::accepted);
  auto st = journaled.get_future().get();
  REQUIRE_FALSE(st);
  CHECK(st.message().find("disk full (test)") != std::string::npos);
  // Without it (a batch's member): on_done gets a failed result naming the journal.
  std::promise<evaluation_result> failed;
  board.submit(req("also-refused"), "a", 1,
               [&](const evaluation_result& r) { failed.set_value(r); });
  auto r = failed.get_future().get();
  CHECK(r.status == "failed");
  CHECK(r.error_code == "SYSTEM_ERROR");
  CHECK(r.error_message.find("the journal refused the job") != std::string::npos);
  // A job the journal takes runs as before.
  std::promise<evaluation_result> ok_done;
  // (a limit of 1: the refused ones no longer count against the token)
  CHECK(board.submit(req("fine"), "a", 1, [&](const evaluation_result& r) { ok_done.set_value(r); })
            .what == job_board::admission::accepted);
  CHECK(ok_done.get_future().get().status == "completed");
  CHECK(ran == 1);
  CHECK(done_calls == 0);
  CHECK(board.counts().pending == 0);
  CHECK_FALSE(board.find("a", "refused"));
}

TEST_CASE("job board: a retry while the id is being journaled is told with the first") {
  board_journal_file file;
  auto j = journal::open(file.path);
  REQUIRE(j);
  gate g;
  g.release();
  std::atomic<int> ran{0};
  job_board board({}, **j, [&](const evaluation_request& r) {
    ++ran;
    return g(r);
  });
  kiln::testing::journal_hold h;
  h.hold(**j);
  std::atomic<int> told{0}, done{0};
  auto on_told = [&](const status& st) { told += st ? 1 : 100; };
  auto on_done = [&](const evaluation_result&) { ++done; };
  CHECK(board.submit(req("x"), "a", 10, on_done, on_told).what == job_board::admission::accepted);
  CHECK(board.submit(req("x"), "a", 10, on_done, on_told).what == job_board::admission::accepted);
  CHECK(board.find("a", "x")->status == "pending");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(told == 0); // not acknowledged before the journal has it
  CHECK(ran == 0);  // nor run
  h.release();
  REQUIRE(eventually([&] { return done == 2; }));
  CHECK(told == 2);
  CHECK(ran == 1); // one run for both
}

TEST_CASE("job board: stop waits for the jobs being journaled, which then run at the next start") {
  board_journal_file file;
  auto j = journal::open(file.path);
  REQUIRE(j);
  kiln::testing::journal_hold h;
  std::atomic<int> told{0};
  {
    gate g;
    g.release();
    job_board board({}, **j, [&](const evaluation_request& r) { return g(r); });
    h.hold(**j);
    CHECK(
        board.submit(req("y"), "a", 10, {}, [&](const status& st) { told += st ? 1 : 100; }).what ==
        job_board::admission::accepted);
    auto stopped = std::async(std::launch::async, [&] { board.stop(); });
    CHECK(stopped.wait_for(std::chrono::milliseconds(100)) == std::future_status::timeout);
    h.release();
    stopped.get(); // returns once y is journaled (and told)
    CHECK(told == 1);
  }
  gate g;
  g.release();
  job_board next({}, **j, [&](const evaluation_request& r) { return g(r); });
  auto n = next.recover();
  REQUIRE(n);
  CHECK(*n == 1); // y: accepted, acknowledged, not run (the hold row is no request: skipped)
  REQUIRE(eventually([&] { return next.counts().completed == 1; }));
  CHECK(next.find("a", "y")->status == "completed");
}
