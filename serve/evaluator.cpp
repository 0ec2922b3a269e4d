#include "serve/evaluator.hpp"

#include "pool/device_pool.hpp"
#include "rollout/observation_text.hpp"
#include "rollout/reward.hpp"
#include "submission/submission_kind.hpp"

#include <algorithm>
#include <chrono>

namespace kiln {

using json = nlohmann::json;

expected<std::string> submission_text(const std::string& kernel_code) {
  const auto& kind = recognise(kernel_code);
  if (kind.kind != submission_kind::program) return kernel_code; // marked: taken as marked
  if (kernel_code.find("class ModelNew") != std::string::npos)
    return as_submission(info(submission_kind::kernelbench), kernel_code);
  return error{"'kernel_code' defines no class ModelNew and starts with no Kiln marker line "
               "(//! kiln-source cpu, //! kiln-source cuda, #! kiln-source kernelbench)"};
}

evaluator::evaluator(pool_handle& pool, std::vector<task> served, problem_importer& problems,
                     const compile_baselines* baselines)
    : pool_(pool), problems_(problems), baselines_(baselines) {
  for (auto& t : served) served_.emplace(t.name, std::move(t));
}

expected<task> evaluator::resolve_reference(const std::string& code) {
  // A served task's name: one word, no newline (a problem source has both).
  auto first = code.find_first_not_of(" \t\r\n");
  auto last = code.find_last_not_of(" \t\r\n");
  std::string word = code.substr(first, last - first + 1);
  if (word.find_first_of(" \t\r\n") == std::string::npos) {
    if (auto it = served_.find(word); it != served_.end()) return it->second;
    return error{"no served task is named '" + word +
                 "' (and it is no KernelBench problem source)"};
  }
  return problems_.get(code);
}

outcome evaluator::eager(const task& t) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = eager_.find(t.name); it != eager_.end()) return it->second;
  }
  job j;
  j.kind = job_kind::baseline;
  j.spec = t;
  j.timeout_s = 900; // trusted code: it takes what it takes
  auto o = pool_.run(j);
  if (o.kind == outcome_kind::correct && o.time) {
    std::lock_guard<std::mutex> lock(mu_);
    eager_.emplace(t.name, o);
  }
  return o;
}

namespace {

const char* error_code_of(outcome_kind k) {
  switch (k) {
  case outcome_kind::correct: return "";
  case outcome_kind::compile_error: return "COMPILATION_ERROR";
  case outcome_kind::runtime_error: return "RUNTIME_ERROR";
  case outcome_kind::timeout: return "TIMEOUT_ERROR";
  case outcome_kind::wrong:
  case outcome_kind::nondeterministic:
  case outcome_kind::input_mutated: return "CORRECTNESS_ERROR";
  }
  return "UNKNOWN_ERROR";
}

} // namespace

evaluation_result evaluator::run(const evaluation_request& r) {
  auto t0 = std::chrono::steady_clock::now();
  evaluation_result res;
  res.task_id = r.task_id;
  auto& kiln_meta = res.metadata["kiln"];
  kiln_meta["decoy_kernel"] = "not judged";
  res.metadata["backend"] = r.backend;
  res.metadata["num_correct_trials"] = r.num_correct_trials;
  res.metadata["num_perf_trials"] = r.num_perf_trials;
  auto finish = [&](const char* status) {
    res.status = status;
    res.processing_time =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
  };
  auto refuse = [&](const char* code, const std::string& why) {
    res.compiled = false;
    res.correctness = false;
    res.reference_runtime = res.kernel_runtime = -1.0;
    res.speedup = 0.0;
    res.error_code = code;
    res.error_message = why;
    return finish("failed");
  };

  bool cpu_pool = pool_.backend() == backend_kind::cpu;
  if (cpu_pool != (r.backend == "cpu"))
    return refuse("VALIDATION_ERROR", "'backend' is '" + r.backend +
                                          "' but this server's pool runs " +
                                          to_string(pool_.backend()));
  auto submission = submission_text(r.kernel_code);
  if (!submission) return refuse("VALIDATION_ERROR", submission.message());
  auto ref = resolve_reference(r.reference_code);
  if (!ref) return refuse("VALIDATION_ERROR", "reference_code: " + ref.message());
  kiln_meta["task"] = ref->name;

  auto base = eager(*ref);
  if (base.kind != outcome_kind::correct || !base.time)
    return refuse("SYSTEM_ERROR", "the reference failed on this pool: " + base.message);
  double eager_ms = base.time->median_ms;
  kiln_meta["eager_ms"] = eager_ms;
  std::optional<double> compile_ms;
  if (baselines_) compile_ms = lookup(*baselines_, *ref);
  if (compile_ms) kiln_meta["torch_compile_ms"] = *compile_ms;
  if (r.reference_backend == "compile" && !compile_ms)
    return refuse("VALIDATION_ERROR",
                  "reference_backend 'compile': this server has no torch.compile time for the task "
                  "(start it with --baselines FILE from tools/torch_baselines.py)");

  job j;
  j.kind = job_kind::evaluate;
  j.spec = *ref;
  j.verify.checks = r.num_correct_trials;
  j.timing.warmup = r.num_warmup;
  j.timing.max_trials = std::max(1, r.num_perf_trials);
  j.timing.min_trials = std::min(j.timing.min_trials, j.timing.max_trials);
  j.timeout_s = r.timeout_s;
  auto o = pool_.run(j, *submission);

  kiln_meta["outcome"] = to_string(o.kind);
  kiln_meta["message"] = o.message;
  kiln_meta["compile_ms"] = o.compile_ms;
  kiln_meta["queue_ms"] = o.queue_ms;
  res.compiled = o.kind != outcome_kind::compile_error;
  res.correctness = o.kind == outcome_kind::correct && o.time.has_value();
  // What Kiln's own episodes feed back and reward, so a multi-turn agent can use the same.
  {
    double se = *res.correctness ? eager_ms / o.time->median_ms : 0.0;
    std::optional<double> sc;
    if (*res.correctness && compile_ms) sc = *compile_ms / o.time->median_ms;
    bool suspect = *res.correctness && timing_suspect(*o.time);
    kiln_meta["feedback"] = observation_text(o, se, sc);
    kiln_meta["reward"] =
        turn_reward(reward_config{}, *res.correctness, suspect ? std::min(se, 1.0) : se,
                    suspect ? std::nullopt : sc);
  }
  if (!*res.correctness) {
    res.reference_runtime = res.kernel_runtime = -1.0;
    res.speedup = 0.0;
    res.error_code = error_code_of(o.kind);
    if (res.error_code.empty()) res.error_code = "RUNTIME_ERROR"; // correct without a time
    res.error_message = o.message;
    return finish(*res.compiled ? "completed" : "failed");
  }
  const auto& tm = *o.time;
  double reference_ms = r.reference_backend == "compile" ? *compile_ms : eager_ms;
  double speedup = reference_ms / tm.median_ms;
  kiln_meta["timing"] = json{{"median_ms", tm.median_ms},
                             {"min_ms", tm.min_ms},
                             {"cv", tm.cv},
                             {"trials", tm.trials},
                             {"checked_trials", tm.checked},
                             {"bound_ms", tm.bound_ms},
                             {"roofline_ms", tm.roofline_ms},
                             {"beyond_roofline", tm.beyond_roofline},
                             {"sm_mhz", tm.clocks.sm_mhz},
                             {"throttled", tm.clocks.throttled}};
  kiln_meta["speedup_vs_eager"] = eager_ms / tm.median_ms;
  if (compile_ms) kiln_meta["speedup_vs_compile"] = *compile_ms / tm.median_ms;
  // A time faster than the memory roofline, or taken while the clocks throttled, is not believed:
  // the speedup reported is capped at 1 (as Kiln's own reward does) and the measured one is kept.
  if (timing_suspect(tm)) {
    kiln_meta["timing_suspect"] = true;
    kiln_meta["speedup_measured"] = speedup;
    speedup = std::min(speedup, 1.0);
  }
  res.reference_runtime = reference_ms;
  res.kernel_runtime = tm.median_ms;
  res.speedup = speedup;
  return finish("completed");
}

} // namespace kiln
