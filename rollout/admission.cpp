#include "rollout/admission.hpp"

#include <algorithm>

namespace kiln {

int64_t admission_control::capacity() const {
  int64_t cap = cfg_.max_concurrent - running_;
  if (cfg_.eta >= 0)
    cap =
        std::min(cap, (cfg_.eta + version_ + 1) * cfg_.batch - (accepted_ - discarded_ + running_));
  if (cfg_.total > 0) cap = std::min(cap, cfg_.total - started_);
  return std::max<int64_t>(0, cap);
}

} // namespace kiln
