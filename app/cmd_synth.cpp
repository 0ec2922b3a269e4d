// kiln synth: seed -> synthesizer candidates -> eager filters -> JSON Lines dataset + statistics.
#include "app/commands.hpp"
#include "data/reference.hpp"
#include "data/synth.hpp"
#include "data/synth_filter.hpp"
#include "data/task_parse.hpp"
#include "data/task_set.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <vector>

namespace kiln {

namespace {

using steady = std::chrono::steady_clock;

double seconds_since(steady::time_point t0) {
  return std::chrono::duration<double>(steady::now() - t0).count();
}

void print_summary(const synth_stats& s, bool ran) {
  spdlog::info(
      "synth: {} tasks from {} candidates in {:.1f} s: {:.1f} tasks/s, {:.1f} candidates/s",
      s.accepted, s.candidates, s.seconds, s.seconds > 0 ? s.accepted / s.seconds : 0.0,
      s.seconds > 0 ? s.candidates / s.seconds : 0.0);
  spdlog::info("  rejected {}: {}", s.rejected_total(), s.rejections_line());
  std::string len, lvl;
  for (const auto& [k, v] : s.by_length)
    len += (len.empty() ? "" : ", ") + std::to_string(k) + ": " + std::to_string(v);
  for (const auto& [k, v] : s.by_level)
    lvl += (lvl.empty() ? "" : ", ") + std::to_string(k) + ": " + std::to_string(v);
  spdlog::info("  by length (ops) {{{}}}, by level {{{}}}", len, lvl);
  std::vector<std::pair<int64_t, std::string>> ops;
  for (const auto& [k, v] : s.by_op) ops.emplace_back(-v, k);
  std::sort(ops.begin(), ops.end());
  std::string line;
  for (const auto& [v, k] : ops) line += (line.empty() ? "" : ", ") + k + " " + std::to_string(-v);
  spdlog::info("  by op ({} distinct): {}", ops.size(), line);
  if (ran) {
    auto j = s.to_json();
    if (j.contains("eager_ms"))
      spdlog::info("  eager ms: p10 {:.3f}, median {:.3f}, p90 {:.3f}, max {:.3f}",
                   j["eager_ms"]["p10"].get<double>(), j["eager_ms"]["median"].get<double>(),
                   j["eager_ms"]["p90"].get<double>(), j["eager_ms"]["max"].get<double>());
  }
}

} // namespace

int cmd_synth(const common_args& common, const synth_args& args) {
  configure_threads(common.threads);
  if (args.out.empty() || args.count < 1 || args.max_ops < 1 || args.max_ops > 8 ||
      args.min_ms < 0 || (args.max_ms > 0 && args.max_ms <= args.min_ms)) {
    spdlog::error(
        "synth: need --out, --count >= 1, --max-ops in 1..8 and 0 <= --min-ms < --max-ms");
    return 2;
  }
  filter_options fopts;
  if (!args.no_run) {
    auto device = parse_device(args.device);
    if (!device) {
      spdlog::error("{}", device.message());
      return 2;
    }
    fopts.device = *device;
  }
  fopts.min_ms = args.min_ms;
  fopts.max_ms = args.max_ms;

  synth_options opts;
  opts.seed = args.seed;
  opts.max_ops = args.max_ops;
  synthesizer gen(opts);
  if (!args.dedup_against.empty()) {
    for (const auto& p : args.dedup_against)
      if (std::error_code ec; !std::filesystem::exists(p, ec)) {
        spdlog::error("synth: --dedup-against {}: no such file or directory", p);
        return 2;
      }
    auto suite = load_tasks(args.dedup_against);
    // A suite task that does not load cannot be deduplicated against: say so, keep going.
    for (const auto& e : suite.errors) spdlog::warn("synth: dedup suite: {}", e.message);
    gen.exclude(suite.tasks);
    spdlog::info("synth: deduplicating against {} suite tasks ({} distinct structures)",
                 gen.stats().suite_tasks, gen.stats().suite_structures);
    if (suite.tasks.empty()) spdlog::warn("synth: the --dedup-against suites hold no tasks");
  }

  std::ofstream out(args.out, std::ios::binary | std::ios::trunc);
  if (!out) {
    spdlog::error("synth: cannot write {}", args.out);
    return 2;
  }

  auto start = steady::now();
  auto last_report = start;
  bool exhausted = false;
  while (gen.stats().accepted < args.count) {
    auto cand = gen.next(gen.stats().accepted);
    if (!cand) {
      spdlog::error("{}", cand.message());
      exhausted = true;
      break;
    }
    double eager_ms = -1;
    if (!args.no_run) {
      auto v = filter_task(*cand, fopts);
      if (!v.ok) {
        spdlog::debug("synth: {} rejected: {}: {}", cand->name, to_string(v.reason), v.detail);
        gen.reject(*cand, v.reason);
        continue;
      }
      eager_ms = v.eager_ms;
    }
    out << task_to_json(*cand).dump() << '\n';
    gen.accept(*cand, eager_ms);
    if (seconds_since(last_report) >= 2.0) {
      last_report = steady::now();
      const auto& s = gen.stats();
      double secs = seconds_since(start);
      spdlog::info("synth: {}/{} tasks, {} candidates, {:.1f} tasks/s; rejected {}: {}", s.accepted,
                   args.count, s.candidates, s.accepted / secs, s.rejected_total(),
                   s.rejections_line());
    }
  }
  out.flush();
  if (!out) {
    spdlog::error("synth: write to {} failed", args.out);
    return 1;
  }
  gen.stats().seconds = seconds_since(start);
  print_summary(gen.stats(), !args.no_run);
  spdlog::info("synth: wrote {} tasks to {}", gen.stats().accepted, args.out);

  if (!args.stats_out.empty()) {
    auto j = gen.stats().to_json();
    j["seed"] = args.seed;
    j["max_ops"] = args.max_ops;
    j["requested"] = args.count;
    j["no_run"] = args.no_run;
    j["device"] = args.no_run ? std::string("none") : args.device;
    j["window_ms"] = {args.min_ms, args.max_ms};
    std::ofstream sj(args.stats_out, std::ios::binary | std::ios::trunc);
    if (!(sj << j.dump(2) << '\n')) {
      spdlog::error("synth: cannot write {}", args.stats_out);
      return 1;
    }
  }
  return exhausted ? 1 : 0;
}

} // namespace kiln
