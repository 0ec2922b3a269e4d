// The report's pictures as inline SVG (no scripts, no network): a metric against its x column, a
// speedup histogram of an eval, and what a run learned as bars (untrained, trained, expert).
//   series / eval entry / summary "learned" --*_chart--> <svg> text
#pragma once

#include "app/report.hpp"

#include <nlohmann/json.hpp>
#include <string>

namespace kiln {

std::string esc(const std::string& s); // HTML text
std::string num(double v, int digits = 3);

std::string line_chart(const metric_series& s, const std::string& title = {});
// log2(speedup) of the correct tasks against eager or torch.compile (the tasks with a compile
// baseline), in half-octave bins from 1/32x to 32x; empty when no task has that baseline.
std::string speedup_histogram(const nlohmann::json& eval, bool vs_compile);
// summary.json's "learned": per set (train, held_out) the untrained model's, the trained one's
// and the expert's paired speed vs the expert, as bars with their pass rates; "" when absent.
std::string learned_chart(const nlohmann::json& learned);

} // namespace kiln
