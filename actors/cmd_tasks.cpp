// kiln tasks validate: load tasks (bad ones reported, others kept), run each reference, print a
// table.
#include "actors/commands.hpp"
#include "actors/task_table.hpp"
#include "data/reference.hpp"
#include "data/task_set.hpp"
#include "data/task_validate.hpp"

#include <spdlog/spdlog.h>

namespace kiln {

int cmd_tasks_validate(const common_args& common, const tasks_validate_args& args) {
  configure_threads(common.threads);
  check_limits limits;
  limits.memory_budget_bytes = args.memory_budget_mib << 20;
  auto set = load_tasks(args.paths, limits);
  for (const auto& e : set.errors) spdlog::error("{}", e.message);

  validate_options opts;
  auto device = parse_device(args.device);
  if (!device) {
    spdlog::error("{}", device.message());
    return 2;
  }
  opts.device = *device;
  opts.timing_runs = args.timing_runs;
  opts.min_eager_ms = args.min_ms;
  opts.max_eager_ms = args.max_ms;
  opts.digest_samples = args.digest;
  if (args.digest > 0 && (args.json_out.empty() || args.shapes_only)) {
    spdlog::error("--digest needs --json (the digests go into its rows) and reference runs (not "
                  "--shapes-only)");
    return 2;
  }

  task_table table(args.json_out, args.shapes_only);
  if (!table.open()) return 2;
  int bad = static_cast<int>(set.errors.size());
  for (const auto& t : set.tasks) {
    validation v;
    if (args.shapes_only) {
      v = shape_only_validation(t);
    } else {
      v = validate_task(t, opts);
    }
    if (!v.ok) ++bad;
    table.row(v);
  }
  table.summary(set.tasks.size() + set.errors.size(), bad, args.device);
  return bad == 0 ? 0 : 1;
}

} // namespace kiln
