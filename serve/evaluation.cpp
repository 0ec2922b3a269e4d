#include "serve/evaluation.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>

namespace kiln {

namespace {

using json = nlohmann::json;

status take_string(const json& b, const char* key, std::string& out, size_t max_len,
                   bool required) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) {
    if (required) return error{std::string("'") + key + "' is required"};
    return ok();
  }
  if (!it->is_string()) return error{std::string("'") + key + "' must be a string"};
  const auto& s = it->get_ref<const std::string&>();
  if (s.size() > max_len)
    return error{std::string("'") + key + "' is " + std::to_string(s.size()) +
                 " characters; at most " + std::to_string(max_len)};
  out = s;
  return ok();
}

status take_int(const json& b, const char* key, int& out, int lo, int hi) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return ok();
  if (!it->is_number_integer()) return error{std::string("'") + key + "' must be an integer"};
  auto v = it->get<int64_t>();
  if (v < lo || v > hi)
    return error{std::string("'") + key + "' is " + std::to_string(v) + "; it must be in [" +
                 std::to_string(lo) + ", " + std::to_string(hi) + "]"};
  out = static_cast<int>(v);
  return ok();
}

status take_bool(const json& b, const char* key, bool& out) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return ok();
  if (!it->is_boolean()) return error{std::string("'") + key + "' must be true or false"};
  out = it->get<bool>();
  return ok();
}

status one_of(const char* key, const std::string& v, std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (v == a) return ok();
    list += std::string(list.empty() ? "" : ", ") + a;
  }
  return error{std::string("'") + key + "' is '" + v + "'; it must be one of " + list};
}

} // namespace

expected<evaluation_request> parse_evaluation_request(const json& b) {
  if (!b.is_object()) return error{"the body must be a JSON object"};
  evaluation_request r;
  // KernelGYM's limits: ids up to 100 characters, sources under 100,000.
  for (auto st : {take_string(b, "task_id", r.task_id, 100, true),
                  take_string(b, "reference_code", r.reference_code, 100000, true),
                  take_string(b, "kernel_code", r.kernel_code, 100000, true),
                  take_string(b, "backend", r.backend, 16, false),
                  take_string(b, "entry_point", r.entry_point, 100, false),
                  take_string(b, "reference_backend", r.reference_backend, 32, false),
                  take_string(b, "priority", r.priority, 16, false),
                  take_int(b, "num_correct_trials", r.num_correct_trials, 1, 20),
                  take_int(b, "num_perf_trials", r.num_perf_trials, 1, 1000),
                  take_int(b, "num_warmup", r.num_warmup, 0, 100),
                  take_int(b, "timeout", r.timeout_s, 10, 3600),
                  take_bool(b, "force_refresh", r.force_refresh), take_bool(b, "wait", r.wait)})
    if (!st) return st.err();
  if (r.task_id.empty()) return error{"'task_id' is empty"};
  for (char c : r.task_id)
    if (static_cast<unsigned char>(c) < ' ' || c == '/' || c == '\\')
      return error{"'task_id' may not hold '/', '\\' or control characters"};
  if (r.reference_code.find_first_not_of(" \t\r\n") == std::string::npos)
    return error{"'reference_code' is empty"};
  if (r.kernel_code.find_first_not_of(" \t\r\n") == std::string::npos)
    return error{"'kernel_code' is empty"};
  if (auto st = one_of("backend", r.backend, {"cuda", "triton", "cpu"}); !st) return st.err();
  if (auto st = one_of("priority", r.priority, {"low", "normal", "high"}); !st) return st.err();
  // "torch_compile" is a spelling KernelGYM's own docs use for "compile".
  if (r.reference_backend == "torch_compile") r.reference_backend = "compile";
  if (auto st = one_of("reference_backend", r.reference_backend, {"pytorch", "compile"}); !st)
    return st.err();
  if (r.entry_point != "Model")
    return error{"'entry_point' is '" + r.entry_point +
                 "'; Kiln runs KernelBench's Model / ModelNew pair only"};
  return r;
}

json to_json(const evaluation_result& r) {
  auto opt = [](const auto& o) -> json { return o ? json(*o) : json(nullptr); };
  auto str = [](const std::string& s) -> json { return s.empty() ? json(nullptr) : json(s); };
  return json{{"task_id", r.task_id},
              {"status", r.status},
              {"compiled", opt(r.compiled)},
              {"correctness", opt(r.correctness)},
              {"decoy_kernel", nullptr}, // not judged by Kiln (metadata.kiln says so)
              {"reference_runtime", opt(r.reference_runtime)},
              {"kernel_runtime", opt(r.kernel_runtime)},
              {"speedup", opt(r.speedup)},
              {"metadata", r.metadata},
              {"error_message", str(r.error_message)},
              {"error_code", str(r.error_code)},
              {"submitted_at", str(r.submitted_at)},
              {"completed_at", str(r.completed_at)},
              {"processing_time", r.processing_time}};
}

expected<evaluation_result> result_from_json(const json& j) {
  if (!j.is_object() || !j.contains("task_id") || !j.contains("status"))
    return error{"not an evaluation result"};
  evaluation_result r;
  auto get_s = [&](const char* k) {
    return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string();
  };
  auto get_b = [&](const char* k) -> std::optional<bool> {
    if (j.contains(k) && j[k].is_boolean()) return j[k].get<bool>();
    return std::nullopt;
  };
  auto get_d = [&](const char* k) -> std::optional<double> {
    if (j.contains(k) && j[k].is_number()) return j[k].get<double>();
    return std::nullopt;
  };
  r.task_id = get_s("task_id");
  r.status = get_s("status");
  r.compiled = get_b("compiled");
  r.correctness = get_b("correctness");
  r.reference_runtime = get_d("reference_runtime");
  r.kernel_runtime = get_d("kernel_runtime");
  r.speedup = get_d("speedup");
  r.error_code = get_s("error_code");
  r.error_message = get_s("error_message");
  r.submitted_at = get_s("submitted_at");
  r.completed_at = get_s("completed_at");
  r.processing_time = get_d("processing_time").value_or(0);
  if (j.contains("metadata") && j["metadata"].is_object()) r.metadata = j["metadata"];
  return r;
}

std::string iso_time_now() {
  auto now = std::chrono::system_clock::now();
  auto t = std::chrono::system_clock::to_time_t(now);
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[96];
  std::snprintf(b, sizeof b, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return b;
}

} // namespace kiln
