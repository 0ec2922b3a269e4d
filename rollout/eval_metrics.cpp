#include "rollout/eval_metrics.hpp"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace kiln {

const std::vector<double>& fast_p_thresholds() {
  static const std::vector<double> p = {0.0, 0.5, 0.8, 1.0, 1.5, 2.0};
  return p;
}

eval_summary summarize(const std::vector<eval_row>& rows) {
  eval_summary s;
  s.tasks = static_cast<int>(rows.size());
  if (rows.empty()) return s;
  bool have_compile = true;
  for (const auto& r : rows) have_compile = have_compile && r.compiled_ms.has_value();
  double log_eager = 0, log_compile = 0, turns = 0;
  int correct = 0, faster_than_compile = 0;
  std::map<double, int> fe, fc;
  for (const auto& r : rows) {
    turns += r.turns;
    if (!r.correct || r.kernel_ms <= 0) continue;
    ++correct;
    double se = r.eager_ms / r.kernel_ms;
    log_eager += std::log(se);
    for (double p : fast_p_thresholds())
      if (se > p) ++fe[p];
    if (have_compile) {
      double sc = *r.compiled_ms / r.kernel_ms;
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
  if (have_compile) {
    std::map<double, double> m;
    for (double p : fast_p_thresholds()) m[p] = fc[p] / n;
    s.fast_compile = m;
    s.geomean_compile = correct ? std::exp(log_compile / correct) : 0.0;
    s.share_faster_than_compile = faster_than_compile / n;
  }
  return s;
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
  j["mean_turns"] = s.mean_turns;
  return j;
}

nlohmann::json to_json(const eval_row& r) {
  nlohmann::json j = {{"task", r.task},       {"level", r.level},         {"outcome", r.outcome},
                      {"correct", r.correct}, {"kernel_ms", r.kernel_ms}, {"eager_ms", r.eager_ms},
                      {"turns", r.turns},     {"program", r.program}};
  j["compiled_ms"] = r.compiled_ms ? nlohmann::json(*r.compiled_ms) : nlohmann::json("n/a");
  j["speedup_eager"] = r.correct && r.kernel_ms > 0 ? r.eager_ms / r.kernel_ms : 0.0;
  j["bytes"] = r.bytes;
  j["memory_bound"] = r.memory_bound;
  if (r.correct && r.kernel_ms > 0)
    j["achieved_gbps"] = static_cast<double>(r.bytes) / (r.kernel_ms * 1e6);
  if (!r.message.empty()) j["message"] = r.message;
  return j;
}

} // namespace kiln
