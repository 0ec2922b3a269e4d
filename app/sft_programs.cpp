#include "app/sft_programs.hpp"

#include <cmath>
#include <spdlog/spdlog.h>

namespace kiln {

expected<sft_programs> choose_sft_programs(caf::actor_system& sys, const caf::actor& pool,
                                           backend_kind backend, const std::vector<task>& tasks,
                                           int candidates, episode_eval_options o) {
  auto expert = parse_policy("expert");
  auto random = parse_policy("random");
  if (!expert || !random) return error{"sft programs: the built-in policies are missing"};
  spdlog::info("sft programs: {} random programs per task and the expert's, on {} tasks",
               candidates, tasks.size());
  o.samples = 1;
  auto er = evaluate_policy_episodes(sys, pool, backend, tasks, *expert, o, nullptr);
  if (!er) return error{"sft programs (expert): " + er.message()};
  o.samples = candidates;
  auto rr = evaluate_policy_episodes(sys, pool, backend, tasks, *random, o, nullptr);
  if (!rr) return error{"sft programs (random): " + rr.message()};
  sft_programs out;
  out.programs.assign(tasks.size(), "");
  auto rows = nlohmann::json::array();
  int faster = 0, compared = 0;
  double log_sum = 0;
  for (size_t i = 0; i < tasks.size() && i < er->size() && i < rr->size(); ++i) {
    const auto &e = (*er)[i], &r = (*rr)[i];
    bool take_random = r.correct && !r.program.empty() && (!e.correct || r.kernel_ms < e.kernel_ms);
    double chosen_ms = take_random ? r.kernel_ms : (e.correct ? e.kernel_ms : 0.0);
    if (take_random) out.programs[i] = r.program;
    if (e.correct && chosen_ms > 0) {
      ++compared;
      log_sum += std::log(e.kernel_ms / chosen_ms);
      faster += take_random;
    }
    rows.push_back({{"task", tasks[i].name},
                    {"expert_ms", e.correct ? e.kernel_ms : 0.0},
                    {"best_random_ms", r.correct ? r.kernel_ms : 0.0},
                    {"chosen", take_random ? "random" : "expert"},
                    {"program", take_random ? r.program : e.program}});
  }
  double geo = compared ? std::exp(log_sum / compared) : 1.0;
  out.summary = {{"candidates", candidates},
                 {"tasks", tasks.size()},
                 {"random_faster", faster},
                 {"geomean_over_expert", geo},
                 {"rows", rows}};
  spdlog::info("sft programs: a random program beat the expert's on {} of {} tasks; the chosen "
               "programs run {:.3f}x the expert's speed (geomean)",
               faster, compared, geo);
  return out;
}

} // namespace kiln
