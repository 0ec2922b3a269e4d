// kiln report: loads every source (a bad one is reported and skipped), writes the HTML page and
// prints the Markdown summary.
#include "app/commands.hpp"
#include "app/report.hpp"

#include <cstdio>
#include <fstream>
#include <spdlog/spdlog.h>

namespace kiln {

int cmd_report(const common_args&, const report_args& args) {
  std::vector<report_source> sources;
  int bad = 0;
  for (const auto& path : args.sources) {
    auto s = load_report_source(path);
    if (!s) {
      spdlog::error("{}", s.message());
      ++bad;
      continue;
    }
    for (const auto& w : s->warnings) spdlog::warn("{}: {}", path, w);
    sources.push_back(std::move(*s));
  }
  if (sources.empty()) {
    spdlog::error("report: nothing to report");
    return 2;
  }
  std::ofstream html(args.out);
  html << render_html(sources);
  if (!html) {
    spdlog::error("{}: cannot write", args.out);
    return 2;
  }
  std::string md = render_markdown(sources);
  if (!args.markdown.empty()) {
    std::ofstream f(args.markdown);
    f << md;
    if (!f) {
      spdlog::error("{}: cannot write", args.markdown);
      return 2;
    }
  }
  std::printf("%s\nreport: %s (%zu sources)\n", md.c_str(), args.out.c_str(), sources.size());
  return bad == 0 ? 0 : 1;
}

} // namespace kiln
