#include "rollout/observation_text.hpp"

#include "data/utf8.hpp"

#include <cstdio>

namespace kiln {

namespace {

std::string num(double v, const char* fmt = "%.4g") {
  char b[48];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

} // namespace

std::string observation_text(const outcome& o, double speedup_eager,
                             std::optional<double> speedup_compile, size_t max_log_chars) {
  std::string s = "Outcome: " + std::string(to_string(o.kind)) + ".\n";
  switch (o.kind) {
  case outcome_kind::correct:
    if (o.time) {
      s += "Your kernel: " + num(o.time->median_ms) + " ms (median of " +
           std::to_string(o.time->trials) + " timed calls).";
      if (speedup_eager > 0)
        s += " Speedup over PyTorch eager: " + num(speedup_eager, "%.3f") + "x.";
      if (speedup_compile)
        s += " Speedup over torch.compile: " + num(*speedup_compile, "%.3f") + "x.";
      s += "\n";
    }
    if (!o.message.empty())
      s += "Note: " + utf8_middle_cut(utf8_valid(o.message), max_log_chars) + "\n";
    s += "Make it faster if you can; answer with the whole program again.\n";
    return s;
  case outcome_kind::wrong:
  case outcome_kind::nondeterministic:
    if (o.error) {
      const auto& e = *o.error;
      s += "Output '" + e.output + "': " + std::to_string(e.bad_count) +
           " elements outside the tolerance, the first at flat index " +
           std::to_string(e.first_bad_index) + "; max abs error " + num(e.max_abs_err) +
           ", max rel error " + num(e.max_rel_err) + ".\n";
    }
    break;
  default: break;
  }
  if (!o.message.empty()) s += utf8_middle_cut(utf8_valid(o.message), max_log_chars) + "\n";
  s += "Fix the program; answer with the whole program again.\n";
  return s;
}

} // namespace kiln
