#include "rollout/eval_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace kiln {

const std::vector<double>& fast_p_thresholds() {
  static const std::vector<double> p = {0.0, 0.5, 0.8, 1.0, 1.5, 2.0};
  return p;
}

eval_summary summarize(const std::vector<eval_row>& all_rows) {
  eval_summary s;
  std::vector<eval_row> rows;
  for (const auto& r : all_rows) {
    if (r.outcome == "skipped")
      ++s.skipped;
    else
      rows.push_back(r);
  }
  s.tasks = static_cast<int>(rows.size());
  for (double p : fast_p_thresholds()) s.fast_eager[p] = 0; // every key, judged rows or none
  if (rows.empty()) return s;
  double log_eager = 0, log_compile = 0, turns = 0;
  int correct = 0, correct_with_compile = 0, faster_than_compile = 0;
  std::map<double, int> fe, fc;
  for (const auto& r : rows) {
    turns += r.turns;
    s.compile_tasks += r.compiled_ms.has_value();
    if (!r.correct || r.kernel_ms <= 0) continue;
    ++correct;
    s.beyond_roofline += r.beyond_roofline;
    s.throttled += r.throttled;
    if (r.sm_mhz > 0) {
      s.sm_mhz_min = s.sm_mhz_min ? std::min(s.sm_mhz_min, r.sm_mhz) : r.sm_mhz;
      s.sm_mhz_max = std::max(s.sm_mhz_max, r.sm_mhz);
    }
    double se = r.eager_ms / r.kernel_ms;
    // A flagged timing counts as no faster than the baselines (and is counted).
    bool suspect = r.beyond_roofline || r.throttled;
    s.suspect += suspect;
    if (suspect) se = std::min(se, 1.0);
    log_eager += std::log(se);
    for (double p : fast_p_thresholds())
      if (se > p) ++fe[p];
    if (r.compiled_ms) {
      ++correct_with_compile;
      double sc = *r.compiled_ms / r.kernel_ms;
      if (suspect) sc = std::min(sc, 1.0);
      log_compile += std::log(sc);
      if (sc > 1.0) ++faster_than_compile;
      for (double p : fast_p_thresholds())
        if (sc > p) ++fc[p];
    }
  }
  double n = static_cast<double>(rows.size());
  s.pass_rate = correct / n;
  s.mean_turns = turns / n;
  for (double p : fast_p_thresholds()) s.fast_eager[p] = fe[p] / n;
  s.geomean_eager = correct ? std::exp(log_eager / correct) : 0.0;
  if (s.compile_tasks > 0) {
    double nc = static_cast<double>(s.compile_tasks);
    std::map<double, double> m;
    for (double p : fast_p_thresholds()) m[p] = fc[p] / nc;
    s.fast_compile = m;
    s.geomean_compile = correct_with_compile ? std::exp(log_compile / correct_with_compile) : 0.0;
    s.share_faster_than_compile = faster_than_compile / nc;
  }
  return s;
}

eval_row best_of_samples(eval_row base, const std::vector<sample_result>& samples) {
  eval_row r = std::move(base);
  r.samples = static_cast<int>(samples.size());
  r.correct = false;
  r.kernel_ms = 0;
  r.turns = 0;
  const sample_result* best = nullptr;
  for (const auto& s : samples) {
    r.turns = std::max(r.turns, s.turns);
    if (s.correct && s.best_kernel_ms > 0 && (!best || s.best_kernel_ms < best->best_kernel_ms))
      best = &s;
  }
  if (best) {
    r.correct = true;
    r.kernel_ms = best->best_kernel_ms;
    r.turns = best->first_correct_turn + 1;
    r.outcome = "correct";
    if (!best->program.empty()) r.program = best->program;
  } else if (!samples.empty()) {
    r.outcome = samples.front().outcome;
    r.message = samples.front().message;
  }
  return r;
}

namespace {

std::string p_key(double p) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%g", p);
  std::string s = buf;
  for (auto& c : s)
    if (c == '.') c = '_';
  return s;
}

} // namespace

nlohmann::json to_json(const eval_summary& s) {
  nlohmann::json j;
  j["tasks"] = s.tasks;
  j["skipped"] = s.skipped;
  j["pass_rate"] = s.pass_rate;
  for (const auto& [p, v] : s.fast_eager) j["fast_" + p_key(p) + "_eager"] = v;
  for (double p : fast_p_thresholds()) {
    std::string key = "fast_" + p_key(p) + "_compile";
    if (s.fast_compile)
      j[key] = s.fast_compile->at(p);
    else
      j[key] = "n/a";
  }
  j["geomean_eager"] = s.geomean_eager;
  j["geomean_compile"] =
      s.geomean_compile ? nlohmann::json(*s.geomean_compile) : nlohmann::json("n/a");
  j["share_faster_than_compile"] = s.share_faster_than_compile
                                       ? nlohmann::json(*s.share_faster_than_compile)
                                       : nlohmann::json("n/a");
  j["compile_tasks"] = s.compile_tasks;
  j["mean_turns"] = s.mean_turns;
  j["beyond_roofline"] = s.beyond_roofline;
  j["throttled"] = s.throttled;
  j["suspect_timings"] = s.suspect;
  j["sm_mhz_min"] = s.sm_mhz_min;
  j["sm_mhz_max"] = s.sm_mhz_max;
  return j;
}

nlohmann::json to_json(const eval_row& r) {
  nlohmann::json j = {{"task", r.task},       {"level", r.level},         {"outcome", r.outcome},
                      {"correct", r.correct}, {"kernel_ms", r.kernel_ms}, {"eager_ms", r.eager_ms},
                      {"turns", r.turns},     {"program", r.program}};
  if (r.samples != 1) j["samples"] = r.samples;
  j["compiled_ms"] = r.compiled_ms ? nlohmann::json(*r.compiled_ms) : nlohmann::json("n/a");
  j["speedup_eager"] = r.correct && r.kernel_ms > 0 ? r.eager_ms / r.kernel_ms : 0.0;
  j["bytes"] = r.bytes;
  j["memory_bound"] = r.memory_bound;
  if (r.correct && r.kernel_ms > 0)
    j["achieved_gbps"] = static_cast<double>(r.bytes) / (r.kernel_ms * 1e6);
  if (r.roofline_ms > 0) j["roofline_ms"] = r.roofline_ms;
  if (r.beyond_roofline) j["beyond_roofline"] = true;
  if (r.sm_mhz > 0) j["sm_mhz"] = r.sm_mhz;
  if (r.throttled) j["throttled"] = true;
  if (!r.message.empty()) j["message"] = r.message;
  return j;
}

} // namespace kiln
