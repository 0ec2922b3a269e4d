// Test helper: holds the journal's committing thread inside a write's callback until released, so
// writes queued meanwhile commit together (one batch) and jobs stay "being journaled".
#pragma once

#include "serve/journal.hpp"

#include <condition_variable>
#include <mutex>
#include <thread>

namespace kiln::testing {

struct journal_hold {
  std::mutex mu;
  std::condition_variable cv;
  bool held = false, released = false;
  std::thread holder; // commits the "hold" row, and waits in its callback
  // Returns once the writer is held (its "hold" row committed, its callback waiting).
  void hold(journal& j) {
    holder = std::thread([this, &j] {
      j.add({"hold", "o", "{}", 0.5}, [this](const status&) {
        std::unique_lock<std::mutex> lock(mu);
        held = true;
        cv.notify_all();
        cv.wait(lock, [&] { return released; });
      });
    });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return held; });
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu);
      released = true;
      cv.notify_all();
    }
    holder.join();
  }
  ~journal_hold() {
    if (holder.joinable()) release();
  }
};

} // namespace kiln::testing
