// `kiln report`: run directories and eval results -> one self-contained HTML page (inline SVG
// charts, no scripts, no network) and a Markdown summary for terminals and PRs.
//   RUN_DIR | eval.json --load_report_source--> source --render_html / render_markdown--> text
#pragma once

#include "data/expected.hpp"

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

// One numeric column of a metrics JSON Lines file, against its x column (step / version / time,
// else the line number).
struct metric_series {
  std::string file; // file name inside the run directory
  std::string key;  // "reward", "pool.busy_share" (nested objects flattened one level)
  std::string x_key;
  std::vector<std::pair<double, double>> points;
};

struct report_source {
  std::string label;      // the run directory's or file's name
  nlohmann::json summary; // summary.json of a run, or null
  nlohmann::json evals;   // array of kiln eval entries (policy, suite, overall, ...)
  std::vector<metric_series> series;
  std::vector<std::string> warnings; // unreadable lines and files, counted, never fatal
};

// A run directory (summary.json, eval.json, every other *.jsonl but tasks.jsonl as metrics) or
// one eval JSON file (`kiln eval --json`). An error only when nothing usable is there.
expected<report_source> load_report_source(const std::string& path);

std::string render_html(const std::vector<report_source>& sources);
std::string render_markdown(const std::vector<report_source>& sources);

} // namespace kiln
