// Progress of a phase a person waits on (validation, evaluation, training): how far, how long so
// far, and how long is left at the rate so far.
//   start --status(done)--> "3/12, 4 s, ~12 s left"
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace kiln {

class phase_clock {
public:
  explicit phase_clock(int64_t total) : total_(total), start_(std::chrono::steady_clock::now()) {}

  double elapsed_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

  // Seconds left at the rate so far; negative while nothing is done (no rate yet).
  double left_s(int64_t done) const {
    if (done <= 0 || total_ <= 0) return -1;
    return elapsed_s() * static_cast<double>(total_ - done) / static_cast<double>(done);
  }

  std::string status(int64_t done) const {
    char b[96];
    double left = left_s(done);
    if (left < 0)
      std::snprintf(b, sizeof b, "%lld/%lld, %s", static_cast<long long>(done),
                    static_cast<long long>(total_), span(elapsed_s()).c_str());
    else
      std::snprintf(b, sizeof b, "%lld/%lld, %s, ~%s left", static_cast<long long>(done),
                    static_cast<long long>(total_), span(elapsed_s()).c_str(), span(left).c_str());
    return b;
  }

  // "42 s", "3 min 05 s"
  static std::string span(double s) {
    char b[32];
    if (s < 60)
      std::snprintf(b, sizeof b, "%.0f s", s);
    else
      std::snprintf(b, sizeof b, "%d min %02d s", static_cast<int>(s / 60),
                    static_cast<int>(s) % 60);
    return b;
  }

private:
  int64_t total_;
  std::chrono::steady_clock::time_point start_;
};

} // namespace kiln
