#include "serve/job_board.hpp"

#include <atomic>
#include <chrono>
#include <doctest/doctest.h>
#include <filesystem>
#include <future>
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

std::string temp_journal() {
  auto p = std::filesystem::temp_directory_path() /
           ("kiln_board_" + std::to_string(getpid()) + ".sqlite");
  std::filesystem::remove(p);
  return p.string();
}

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
  auto path = temp_journal();
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
  std::filesystem::remove(path);
}

TEST_CASE("job board: stopped with work accepted, the next board runs it from the journal") {
  auto path = temp_journal();
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
  std::filesystem::remove(path);
}

TEST_CASE("job board: an id is its caller's and another caller's same id runs its own code") {
  // A caller who guesses (or sends first) another's task_id neither reads that caller's result
  // nor has its own result handed to that caller.
  auto path = temp_journal();
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
  std::filesystem::remove(path);
}
