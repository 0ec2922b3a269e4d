#include "rollout/baselines.hpp"

#include "data/task_hash.hpp"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

namespace kiln {

expected<compile_baselines> load_baselines(const std::string& path) {
  std::ifstream in(path);
  if (!in) return error{path + ": cannot read the baselines file"};
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return error{path + ": not a JSON object"};
  if (j.value("kiln_baselines", 0) != 1)
    return error{path + ": not a Kiln baselines file (key 'kiln_baselines' must be 1)"};
  compile_baselines b;
  b.origin = path;
  b.device = j.value("device", std::string());
  b.torch = j.value("torch", std::string());
  b.mode = j.value("mode", std::string("default"));
  if (!j.contains("tasks") || !j["tasks"].is_object())
    return error{path + ": key 'tasks' must be an object"};
  for (const auto& [hash, entry] : j["tasks"].items()) {
    if (!entry.is_object() || !entry.contains("compile_ms") || !entry["compile_ms"].is_number())
      return error{path + ": tasks." + hash + ".compile_ms must be a number"};
    double ms = entry["compile_ms"].get<double>();
    if (!(ms > 0) || !std::isfinite(ms))
      return error{path + ": tasks." + hash + ".compile_ms must be > 0"};
    b.compile_ms[hash] = ms;
  }
  return b;
}

std::optional<double> lookup(const compile_baselines& b, const task& t) {
  auto it = b.compile_ms.find(hash_hex(content_hash(t)));
  if (it == b.compile_ms.end()) return std::nullopt;
  return it->second;
}

} // namespace kiln
