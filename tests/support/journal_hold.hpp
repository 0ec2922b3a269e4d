// Test helper: holds a journal's writer thread inside a write's callback until released, so that
// writes queued meanwhile commit together (one batch) and jobs stay "being journaled".
#pragma once

#include "serve/journal.hpp"

#include <condition_variable>
#include <mutex>

namespace kiln::testing {

struct journal_hold {
  std::mutex mu;
  std::condition_variable cv;
  bool held = false, released = false;
  // Returns once the writer is held (its "hold" row committed, its callback waiting).
  void hold(journal& j) {
    j.add({"hold", "o", "{}", 0.5}, [this](const status&) {
      std::unique_lock<std::mutex> lock(mu);
      held = true;
      cv.notify_all();
      cv.wait(lock, [&] { return released; });
    });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return held; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
    cv.notify_all();
  }
};

} // namespace kiln::testing
