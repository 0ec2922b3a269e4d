// The device's clocks as read right after a timing (executor/device_clocks.hpp reads them): part of
// every timing an outcome carries.
#pragma once

#include <string>

namespace kiln {

struct clock_sample {
  int sm_mhz = 0, mem_mhz = 0; // 0: not readable
  int temperature_c = 0;
  double power_w = 0;
  std::string throttle;   // active slowdown reasons, '|'-separated ("" = none or unknown)
  bool throttled = false; // a reason that lowers clocks under load (power, thermal, hw slowdown)
};

} // namespace kiln
