#include "app/eval_runner.hpp"

#include "app/phase_clock.hpp"

#include "data/op_vocab.hpp"
#include "data/task_check.hpp"
#include "data/task_hash.hpp"
#include "data/utf8.hpp"
#include "kiln/embedded_config.hpp"
#include "learner/model_policy.hpp"
#include "rollout/grammar_state.hpp"
#include "rollout/token_space.hpp"
#include "skills/expert.hpp"
#include "skills/grammar.hpp"
#include "submission/submission_kind.hpp"
#ifdef KILN_HAVE_CUDA
#include "executor/cuda_runtime.hpp"
#endif

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <spdlog/spdlog.h>
#include <sstream>
#include <thread>

namespace kiln {

namespace fs = std::filesystem;

std::string default_cache_dir() {
  if (const char* x = std::getenv("KILN_CACHE_DIR")) return x;
  if (const char* x = std::getenv("XDG_CACHE_HOME")) return std::string(x) + "/kiln";
  if (const char* h = std::getenv("HOME")) return std::string(h) + "/.cache/kiln";
  return "/tmp/kiln-cache";
}

expected<pool_config> make_pool_config(const std::string& backend, const std::string& cache_in,
                                       int devices, int compile_workers, int first_device) {
  // Absolute: kernel hosts and compilers run in folders of their own.
  std::error_code abs_ec;
  const std::string cache_dir = fs::absolute(cache_in, abs_ec).lexically_normal().string();
  if (abs_ec) return error{cache_in + ": cannot resolve the kernel cache: " + abs_ec.message()};
  pool_config cfg;
  cfg.compile_workers = compile_workers;
  if (backend == "cuda") {
#ifdef KILN_HAVE_CUDA
    auto found = cuda_probe_devices();
    if (!found) return error{"backend 'cuda': " + found.message()};
    int count = static_cast<int>(found->size());
    if (first_device < 0 || first_device >= count)
      return error{"backend 'cuda': first device " + std::to_string(first_device) + ", but " +
                   std::to_string(count) + " GPUs are visible"};
    if (first_device + devices > count)
      return error{"backend 'cuda': " + std::to_string(devices) + " devices from GPU " +
                   std::to_string(first_device) + " asked for, " + std::to_string(count) +
                   " visible"};
    cfg.backend = backend_kind::cuda;
    cfg.devices = devices > 0 ? devices : count - first_device;
    cfg.first_device = first_device;
    cfg.cuda_arch = cuda_arch_of((*found)[static_cast<size_t>(first_device)]);
    cfg.device_name = (*found)[static_cast<size_t>(first_device)].name;
#else
    return error{"backend 'cuda': this build has no cuda backend (configure with -DKILN_CUDA=ON "
                 "where the CUDA toolkit is installed)"};
#endif
  } else if (backend == "cpu") {
    cfg.backend = backend_kind::cpu;
    cfg.devices = std::max(1, devices);
  } else {
    return error{"backend '" + backend + "': expected cpu or cuda"};
  }
  std::error_code ec;
  fs::create_directories(fs::path(cache_dir) / "include", ec);
  if (!ec) fs::create_directories(fs::path(cache_dir) / "scratch", ec);
  if (ec) return error{cache_dir + ": cannot create the kernel cache: " + ec.message()};
  std::ofstream(fs::path(cache_dir) / "include" / "kiln_abi.h") << embedded_kiln_abi_h;
  std::ofstream(fs::path(cache_dir) / "include" / "kiln_cuda_abi.h") << embedded_kiln_cuda_abi_h;
  cfg.compile.cache_dir = (fs::path(cache_dir) / "kernels").string();
  cfg.compile.include_dir = (fs::path(cache_dir) / "include").string();
  cfg.executor.scratch_root = (fs::path(cache_dir) / "scratch").string();
  // A cpu device is a share of the host's cores: kernels and the eager baseline get the same
  // threads. A cuda executor's host threads only launch work.
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cfg.executor.threads =
      cfg.backend == backend_kind::cuda ? 2 : std::max(1, cores / std::max(1, cfg.devices));
  return cfg;
}

expected<caf::actor> make_pool_actor(caf::actor_system& sys, const pool_config& cfg,
                                     const std::vector<std::string>& remote, bool local) {
  if (remote.empty()) {
    if (!local) return error{"no pool: local is off and no remote pool is given"};
    return spawn_device_pool(sys, cfg);
  }
  std::vector<pool_member> members;
  for (const auto& addr : remote) {
    auto m = connect_pool(sys, addr);
    if (!m) return m.err();
    if (m->backend != to_string(cfg.backend))
      return error{"pool node " + addr + " serves the " + m->backend + " backend, this run uses " +
                   to_string(cfg.backend) + ": their timings do not mix"};
    spdlog::info("pool node {}: {} device{} ({})", addr, m->devices, m->devices == 1 ? "" : "s",
                 m->device_name);
    members.push_back(std::move(*m));
  }
  if (local) {
    pool_member m;
    m.pool = spawn_device_pool(sys, cfg);
    m.name = "local";
    m.devices = cfg.devices;
    m.local = true;
    m.backend = to_string(cfg.backend);
    m.device_name = cfg.device_name;
    members.insert(members.begin(), std::move(m));
  }
  return spawn_pool_router(sys, std::move(members));
}

void warn_if_other_device(const compile_baselines* b, const pool_config& pool) {
  static std::once_flag once;
  if (!b) return;
  // The baselines tool names a cpu "cpu: <model>", a GPU by its CUDA name.
  bool same = pool.backend == backend_kind::cuda ? b->device == pool.device_name
                                                 : b->device.rfind("cpu", 0) == 0;
  if (!same)
    std::call_once(once, [&] {
      spdlog::warn("baselines {} were measured on '{}', this pool times on '{}': speedups vs "
                   "torch.compile compare two different devices",
                   b->origin, b->device, pool.device_name);
    });
}

expected<policy_spec> parse_policy(const std::string& name) {
  if (name == "expert" || name == "random") return policy_spec{name, name == "random", "", ""};
  if (name == "llm") return policy_spec{name, false, "", "", true};
  if (name.rfind("sources:", 0) == 0) {
    std::string dir = name.substr(8);
    if (!fs::is_directory(dir)) return error{"policy " + name + ": " + dir + " is not a directory"};
    return policy_spec{name, false, "", dir};
  }
  if (fs::is_regular_file(name)) return policy_spec{name, false, name, ""};
  return error{"policy " + name +
               ": expected expert, random, sources:DIR, llm or a checkpoint file"};
}

namespace {

job make_job(const task& t, job_kind kind) {
  job j;
  j.kind = kind;
  j.spec = t;
  j.timeout_s = 120;
  return j;
}

bool is_memory_bound(const task& t) {
  for (const auto& op : t.ops) {
    const op_info* info = find_op(op.op);
    if (!info) return false;
    switch (info->family) {
    case op_family::linear:
    case op_family::matmul:
    case op_family::bmm:
    case op_family::conv:
    case op_family::conv_transpose: return false;
    default: break;
    }
  }
  return true;
}

// The checkpoint's program for `t`: greedy decoding of one turn under the grammar mask, from the
// same prompt an episode starts with. Serialized: one model, many evaluation threads.
expected<program> checkpoint_program(const task& t, const policy_spec& p) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<model_policy>> models;
  std::lock_guard<std::mutex> lock(mu);
  auto& m = models[p.checkpoint];
  if (!m) {
    model_policy_options o;
    o.checkpoint = p.checkpoint;
    o.temperature = 0; // greedy: evaluation is deterministic
    auto created = model_policy::create(o);
    if (!created) return error{"checkpoint " + p.checkpoint + ": " + created.message()};
    m = std::move(*created);
  }
  grammar_state g(std::make_shared<const grammar_tables>(t));
  std::vector<int32_t> context = {token_of(special_token::bos)};
  auto tt = task_tokens(t);
  context.insert(context.end(), tt.begin(), tt.end());
  context.push_back(token_of(special_token::task_end));
  context.push_back(token_of(special_token::program));
  std::vector<int> program_tokens;
  std::vector<uint8_t> mask(static_cast<std::size_t>(program_token_count()));
  std::mt19937_64 rng(1);
  static uint64_t next_seq = 1;
  uint64_t seq = next_seq++;
  int32_t turn_start = static_cast<int32_t>(context.size());
  while (!g.done() && program_tokens.size() < 512) {
    std::fill(mask.begin(), mask.end(), 0);
    if (g.fill_mask(mask) == 0) break;
    std::vector<decode_slot> batch(1);
    batch[0].seq_id = seq;
    batch[0].spec = &t;
    batch[0].context = &context;
    batch[0].turn_start = turn_start;
    batch[0].mask = &mask;
    m->step(batch, rng);
    int32_t tok = batch[0].token;
    if (tok < 0 || !g.advance(tok)) break;
    context.push_back(tok);
    program_tokens.push_back(tok);
  }
  m->release(seq);
  if (!g.done()) return error{"checkpoint " + p.checkpoint + ": no complete program for " + t.name};
  return parse_program(tokens_to_text(program_tokens));
}

eval_row evaluate_task(pool_handle& pool, const task& t, const policy_spec& p, uint64_t seed,
                       eager_times* eager, double job_timeout_s) {
  eval_row r = task_row(t);
  if (p.sources_dir.empty() && has_module_reference(t)) {
    r.outcome = "skipped";
    r.message = "the reference is the problem's PyTorch module (pytorch_module): " + p.name +
                " writes programs over an op graph, which this task has not";
    return r;
  }
  // The reference is trusted code: it may take what it takes (KernelBench's conv_transpose
  // problems run ~10 s per call on cpu even at batch 1). A submission then gets time in
  // proportion to the reference's cost: 60 calls' worth (checks, warm-up, trials) past the base.
  auto bj = make_job(t, job_kind::baseline);
  bj.timeout_s = 900;
  auto base = eager ? eager->get(t.name, [&] { return pool.run(bj); }) : pool.run(bj);
  if (base.kind != outcome_kind::correct || !base.time) {
    r.outcome = "baseline_failed";
    r.message = base.message;
    return r;
  }
  r.eager_ms = base.time->median_ms;
  std::string submission;
  program prog;
  if (!p.sources_dir.empty()) {
    // DIR/<task><ext> for each source kind this backend takes: exactly one must exist.
    std::vector<std::pair<fs::path, const submission_kind_info*>> found;
    std::string tried;
    for (const auto* k : source_kinds_for(pool.backend())) {
      auto path = fs::path(p.sources_dir) / (t.name + k->file_extension);
      tried += (tried.empty() ? "" : " or ") + path.string();
      if (fs::exists(path)) found.push_back({path, k});
    }
    if (found.size() != 1) {
      r.outcome = "policy_failed";
      r.message = found.empty() ? "no source " + tried
                                : "more than one source for the task: " + tried + " (keep one)";
      return r;
    }
    std::ifstream in(found[0].first, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in) {
      r.outcome = "policy_failed";
      r.message = "cannot read " + found[0].first.string();
      return r;
    }
    submission = as_submission(*found[0].second, text.str());
    r.program = std::string("source ") + found[0].second->name + " " + found[0].first.string();
  } else if (!p.checkpoint.empty()) {
    auto cp = checkpoint_program(t, p);
    if (!cp) {
      r.outcome = "policy_failed";
      r.message = cp.message();
      return r;
    }
    prog = *cp;
  } else if (p.random) {
    std::mt19937_64 rng(seed ^ fnv1a64(t.name));
    prog = *parse_program(tokens_to_text(sample_program(t, rng))); // masked: always parses
  } else {
    prog = expert_program(t, pool.backend());
  }
  if (submission.empty()) submission = r.program = print(prog);
  auto ej = make_job(t, job_kind::evaluate);
  ej.timeout_s = job_timeout_s > 0 ? job_timeout_s
                                   : std::max(ej.timeout_s, ej.timeout_s + 60 * r.eager_ms / 1000);
  auto o = pool.run(ej, submission);
  r.outcome = to_string(o.kind);
  r.correct = o.kind == outcome_kind::correct && o.time.has_value();
  if (r.correct) {
    r.kernel_ms = o.time->median_ms;
    r.roofline_ms = o.time->roofline_ms;
    r.beyond_roofline = o.time->beyond_roofline;
    r.sm_mhz = o.time->clocks.sm_mhz;
    r.throttled = o.time->clocks.throttled;
    if (r.beyond_roofline || r.throttled) r.message = utf8_middle_cut(utf8_valid(o.message), 600);
  } else
    r.message = utf8_middle_cut(utf8_valid(o.message), 600);
  return r;
}

} // namespace

outcome eager_times::get(const std::string& task, const std::function<outcome()>& measure) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = by_task_.find(task); it != by_task_.end()) return it->second;
  }
  outcome o = measure(); // two policies asking at once both measure; the first kept wins
  std::lock_guard<std::mutex> lock(mu_);
  return by_task_.emplace(task, o).first->second;
}

eval_row task_row(const task& t) {
  eval_row r;
  r.task = t.name;
  r.level = t.level;
  r.bytes = compulsory_bytes(t);
  r.memory_bound = is_memory_bound(t);
  return r;
}

std::vector<eval_row> evaluate_policy(pool_handle& pool, const std::vector<task>& tasks,
                                      const policy_spec& p, uint64_t seed, int parallel,
                                      const compile_baselines* baselines, eager_times* eager,
                                      double job_timeout_s) {
  std::vector<eval_row> rows(tasks.size());
  std::atomic<std::size_t> next{0}, done{0};
  std::mutex log_mutex;
  phase_clock clock(static_cast<int64_t>(tasks.size()));
  auto worker = [&] {
    for (std::size_t i; (i = next++) < tasks.size();) {
      rows[i] = evaluate_task(pool, tasks[i], p, seed, eager, job_timeout_s);
      if (baselines) rows[i].compiled_ms = lookup(*baselines, tasks[i]);
      std::size_t n = ++done;
      std::lock_guard<std::mutex> lock(log_mutex);
      const auto& r = rows[i];
      double sp = r.correct && r.kernel_ms > 0 ? r.eager_ms / r.kernel_ms : 0;
      spdlog::info("[{} {}] {:<44} {:<16} eager {:8.3f} ms  kernel {:8.3f} ms  speedup {:.2f}x",
                   p.name, clock.status(static_cast<int64_t>(n)), r.task, r.outcome, r.eager_ms,
                   r.kernel_ms, sp);
      if (!r.correct) spdlog::debug("  {}: {}", r.task, r.message);
    }
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < std::max(1, parallel); ++w) threads.emplace_back(worker);
  for (auto& th : threads) th.join();
  return rows;
}

nlohmann::json summary_json(const std::string& policy, const std::string& suite,
                            const std::string& backend, const std::vector<eval_row>& rows) {
  nlohmann::json j;
  j["policy"] = policy;
  j["suite"] = suite;
  j["backend"] = backend;
  j["overall"] = to_json(summarize(rows));
  std::map<int, std::vector<eval_row>> by_level;
  for (const auto& r : rows) by_level[r.level].push_back(r);
  for (const auto& [level, lr] : by_level)
    j["levels"][std::to_string(level)] = to_json(summarize(lr));
  j["tasks"] = nlohmann::json::array();
  for (const auto& r : rows) j["tasks"].push_back(to_json(r));
  return j;
}

void print_summary(const nlohmann::json& j) {
  const auto& o = j["overall"];
  std::printf("%-8s tasks %d  pass %.1f%%  fast_1 %.1f%%  geomean vs eager %.3fx",
              j["policy"].get<std::string>().c_str(), o["tasks"].get<int>(),
              100 * o["pass_rate"].get<double>(), 100 * o["fast_1_eager"].get<double>(),
              o["geomean_eager"].get<double>());
  if (o.value("skipped", 0) > 0)
    std::printf("  (%d skipped: a PyTorch-module reference, no op graph)", o.value("skipped", 0));
  if (o["geomean_compile"].is_number())
    std::printf("  vs torch.compile (%d tasks): fast_1 %.1f%%  geomean %.3fx\n",
                o.value("compile_tasks", 0), 100 * o["fast_1_compile"].get<double>(),
                o["geomean_compile"].get<double>());
  else
    std::printf("  (compile baselines: n/a)\n");
  for (auto& [level, lj] : j["levels"].items()) {
    std::printf("  level %s: tasks %d  pass %.1f%%  fast_1 %.1f%%  geomean %.3fx", level.c_str(),
                lj["tasks"].get<int>(), 100 * lj["pass_rate"].get<double>(),
                100 * lj["fast_1_eager"].get<double>(), lj["geomean_eager"].get<double>());
    if (lj["geomean_compile"].is_number())
      std::printf("  vs compile: fast_1 %.1f%%  geomean %.3fx",
                  100 * lj["fast_1_compile"].get<double>(), lj["geomean_compile"].get<double>());
    std::printf("\n");
  }
  // Timings an honest reader should look at twice.
  if (o.value("beyond_roofline", 0) > 0 || o.value("throttled", 0) > 0)
    std::printf(
        "  flagged: %d beyond the bandwidth roofline (re-verified), %d timed while throttled\n",
        o.value("beyond_roofline", 0), o.value("throttled", 0));
  if (o.value("sm_mhz_max", 0) > 0)
    std::printf("  clocks after timing: %d-%d MHz\n", o.value("sm_mhz_min", 0),
                o.value("sm_mhz_max", 0));
  std::fflush(stdout);
}

} // namespace kiln
