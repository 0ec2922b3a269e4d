#include "app/task_table.hpp"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace kiln {

namespace {

// JSON has no NaN or infinity: a non-finite sample is written as its name ("nan", "inf", "-inf").
nlohmann::json sample_json(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}

nlohmann::json digests_json(const std::vector<tensor_digest>& ds) {
  auto arr = nlohmann::json::array();
  for (const auto& d : ds) {
    auto samples = nlohmann::json::array();
    for (double x : d.samples) samples.push_back(sample_json(x));
    arr.push_back({{"name", d.name},
                   {"shape", d.shape},
                   {"dtype", d.dtype},
                   {"sum", d.sum},
                   {"abs_sum", d.abs_sum},
                   {"nonfinite", d.nonfinite},
                   {"samples", samples}});
  }
  return arr;
}

} // namespace

validation shape_only_validation(const task& t) {
  validation v;
  v.name = t.name;
  v.origin = t.origin;
  v.level = t.level;
  v.ops = t.ops.size();
  for (const auto& o : t.outputs)
    v.output_shape +=
        (v.output_shape.empty() ? "" : " ") + to_string(value_shape(t, find_value(t, o)));
  v.ok = true;
  v.verdict = "ok (shapes)";
  return v;
}

task_table::task_table(std::string json_path, bool shapes_only)
    : json_path_(std::move(json_path)), shapes_only_(shapes_only) {}

bool task_table::open() {
  if (!json_path_.empty()) {
    json_.open(json_path_);
    if (!json_) {
      spdlog::error("{}: cannot write", json_path_);
      return false;
    }
  }
  std::printf("%-44s %5s %4s  %-22s %10s  %s\n", "name", "level", "ops", "output shape",
              shapes_only_ ? "" : "eager ms", "verdict");
  std::fflush(stdout);
  return true;
}

void task_table::row(const validation& v) {
  ++rows_;
  eager_total_ms_ += v.eager_ms;
  char ms[32] = "";
  if (!shapes_only_) std::snprintf(ms, sizeof ms, "%.3f", v.eager_ms);
  std::printf(
      "%-44s %5d %4zu  %-22s %10s  %s%s%s\n", v.name.c_str(), v.level, v.ops,
      v.output_shape.c_str(), ms, v.verdict.c_str(),
      v.warning.empty() ? "" : "  (warning: ", v.warning.empty() ? "" : (v.warning + ")").c_str());
  std::fflush(stdout);
  if (json_) {
    nlohmann::json j = {{"name", v.name},
                        {"origin", v.origin},
                        {"level", v.level},
                        {"ops", v.ops},
                        {"output_shape", v.output_shape},
                        {"content_hash", v.content_hash},
                        {"eager_ms", v.eager_ms},
                        {"ok", v.ok},
                        {"verdict", v.verdict}};
    if (!v.warning.empty()) j["warning"] = v.warning;
    if (!v.digest_outputs.empty())
      j["digest"] = {{"input_seed", digest_input_seed},
                     {"params", digests_json(v.digest_params)},
                     {"inputs", digests_json(v.digest_inputs)},
                     {"outputs", digests_json(v.digest_outputs)}};
    json_ << j.dump() << "\n";
    json_.flush();
  }
}

void task_table::summary(std::size_t total, int bad, const std::string& device) {
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::printf("%zu tasks, %zu ok, %d bad; device %s; %.1f s (eager total %.1f ms)\n", total,
              total - static_cast<std::size_t>(bad), bad, device.c_str(), secs, eager_total_ms_);
  std::fflush(stdout);
}

} // namespace kiln
