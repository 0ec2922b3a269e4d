#include "actors/run_config.hpp"

#include "kiln/embedded_config.hpp"

namespace kiln {

expected<run_config> read_run_config(config_reader& r) {
  run_config c;
  c.origin = r.origin();
  c.name = r.string("run.name", c.name);
  c.out_dir = r.path("run.out_dir", "runs");
  c.seed = static_cast<uint64_t>(r.integer("run.seed", 1, 0));
  c.backend = r.choice("run.backend", c.backend, {"cpu", "cuda"});
  c.suites = r.paths("tasks.suites", {});
  c.max_tasks = r.integer("tasks.max_tasks", 0, 0);
  c.memory_budget_mib = r.integer("tasks.memory_budget_mib", c.memory_budget_mib, 1);
  c.threads = static_cast<int>(r.integer("system.threads", 0, 0, 4096));
  c.timing_runs = static_cast<int>(r.integer("validate.timing_runs", 3, 1, 1000));
  c.degeneracy_seeds = static_cast<int>(r.integer("validate.degeneracy_seeds", 3, 2, 100));
  c.eval_policies = r.strings("eval.policies", {});
  c.eval_suites = r.paths("eval.suites", c.suites);
  c.eval_max_tasks = r.integer("eval.max_tasks", 0, 0);
  c.eval_seed = static_cast<uint64_t>(r.integer("eval.seed", 1, 0));
  c.cache_dir = r.path("pool.cache_dir", "");
  c.devices = static_cast<int>(r.integer("pool.devices", 1, 1, 1024));
  c.compile_workers = static_cast<int>(r.integer("pool.compile_workers", 2, 1, 1024));
  if (auto st = r.finish(); !st) return st.err();
  if (c.suites.empty())
    return error{c.origin + ": key 'tasks.suites': at least one suite path is required"};
  if (c.name.empty()) return error{c.origin + ": key 'run.name': must not be empty"};
  return c;
}

expected<config_reader> open_config(const std::string& path) {
  if (!path.empty()) return config_reader::load(path);
  return config_reader::parse(embedded_quickstart_toml, "<embedded configs/quickstart.toml>",
                              embedded_config_dir);
}

} // namespace kiln
