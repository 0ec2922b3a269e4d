#include "app/run_config.hpp"

#include "channels/curve_config.hpp"
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
  c.shuffle_seed = static_cast<uint64_t>(r.integer("tasks.shuffle_seed", 0, 0));
  c.memory_budget_mib = r.integer("tasks.memory_budget_mib", c.memory_budget_mib, 1);
  c.max_ops = static_cast<int>(r.integer("tasks.max_ops", c.max_ops, 1, 65536));
  c.threads = static_cast<int>(r.integer("system.threads", 0, 0, 4096));
  c.timing_runs = static_cast<int>(r.integer("validate.timing_runs", 3, 1, 1000));
  c.degeneracy_seeds = static_cast<int>(r.integer("validate.degeneracy_seeds", 3, 2, 100));
  c.eval_policies = r.strings("eval.policies", {});
  c.eval_suites = r.paths("eval.suites", c.suites);
  c.eval_max_tasks = r.integer("eval.max_tasks", 0, 0);
  c.eval_seed = static_cast<uint64_t>(r.integer("eval.seed", 1, 0));
  c.eval_parallel = static_cast<int>(r.integer("eval.parallel", 0, 0, 1024));
  c.cache_dir = r.path("pool.cache_dir", "");
  c.devices = static_cast<int>(r.integer("pool.devices", 1, 0, 1024)); // cuda: 0 = every GPU
  c.first_device = static_cast<int>(r.integer("pool.first_device", 0, 0, 1023));
  c.compile_workers = static_cast<int>(r.integer("pool.compile_workers", 2, 1, 1024));
  if (c.eval_parallel == 0) c.eval_parallel = c.compile_workers + c.devices;
  c.baselines = r.path("pool.baselines", "");
  c.remote = r.strings("pool.remote", {});
  c.local_pool = r.boolean("pool.local", true);
  c.tls_dir = r.path("pool.tls", "");
  c.peer_heartbeat_ms = static_cast<int>(r.integer("pool.peer_heartbeat_ms", 1000, 0, 600000));
  c.peer_timeout_ms = static_cast<int>(r.integer("pool.peer_timeout_ms", 5000, 0, 3600000));
  c.learner.seed = c.seed;
  c.learner.backend = c.backend;
  read_learner_config(r, c.learner);
  c.rollout_episodes = r.integer("rollout.episodes", 0, 0);
  c.rollout_policy =
      r.choice("rollout.policy", c.rollout_policy, {"model", "expert", "random", "llm"});
  c.rollout_policy_device = r.string("rollout.policy_device", c.learner.device);
  c.rollout_max_concurrent = r.integer("rollout.max_concurrent", c.rollout_max_concurrent, 1);
  c.rollout_group_size = r.integer("rollout.group_size", c.rollout_group_size, 1, 1024);
  c.rollout_max_turns = static_cast<int>(r.integer("rollout.max_turns", 2, 1, 64));
  c.rollout_max_tasks = r.integer("rollout.max_tasks", 0, 0);
  c.rollout_progress_s = r.real("rollout.progress_s", c.rollout_progress_s);
  c.metrics_tensorboard = r.boolean("metrics.tensorboard", c.metrics_tensorboard);
  c.rollout_verify_checks = static_cast<int>(r.integer("rollout.verify_checks", 5, 1, 100));
  c.rollout_timing_cap_ms = r.real("rollout.timing_cap_ms", c.rollout_timing_cap_ms);
  c.rollout_reward =
      r.choice("rollout.reward", c.rollout_reward, {"tiers", "speedup", "log_speedup"});
  c.rollout_reward_cap = r.real("rollout.reward_cap", c.rollout_reward_cap);
  c.rollout_sink = r.string("rollout.sink", "");
  c.rollout_sink_bind = r.boolean("rollout.sink_bind", c.rollout_sink_bind);
  c.rollout_sink_hwm =
      static_cast<int>(r.integer("rollout.sink_hwm", c.rollout_sink_hwm, 1, 1 << 24));
  auto& l = c.llm;
  l.api = r.choice("llm.api", l.api, {"chat", "vllm", "sglang"});
  l.answer_format = *llm_answer_format_from(
      r.choice("llm.answer_format", to_string(l.answer_format), {"kiln", "kernelbench"}));
  l.endpoints = r.strings("llm.endpoints", {});
  l.model = r.string("llm.model", "");
  c.llm_key_env = r.string("llm.api_key_env", c.llm_key_env);
  l.max_tokens = static_cast<int>(r.integer("llm.max_tokens", l.max_tokens, 1, 1 << 22));
  l.temperature = r.real("llm.temperature", 1.0); // sampling: rollouts explore
  l.max_in_flight = static_cast<int>(r.integer("llm.max_in_flight", l.max_in_flight, 1, 1 << 20));
  l.timeout_s = r.real("llm.timeout_s", l.timeout_s);
  l.max_attempts = static_cast<int>(r.integer("llm.max_attempts", l.max_attempts, 1, 100));
  l.backoff_s = r.real("llm.backoff_s", l.backoff_s);
  l.version_endpoint = r.string("llm.version_endpoint", "");
  c.llm_eta = static_cast<int>(r.integer("llm.eta", c.llm_eta, -1, 1 << 20));
  // [curve]: one set of keys for every ZeroMQ channel this process binds or connects.
  c.curve.secret_key = r.path("curve.secret_key", "");
  c.curve.server_key = r.path("curve.server_key", "");
  c.curve.authorized = r.path("curve.authorized", "");
  c.curve.allow_plaintext = r.boolean("curve.allow_plaintext", false);
  c.learner.curve = c.curve;
  l.curve = c.curve;
  c.eval_after_training = r.boolean("eval.after_training", c.eval_after_training);
  c.eval_held_out = r.paths("eval.held_out_suites", {});
  c.eval_after_max_tasks = r.integer("eval.after_max_tasks", 0, 0);
  if (auto st = r.finish(); !st) return st.err();
  if (c.suites.empty())
    return error{c.origin + ": key 'tasks.suites': at least one suite path is required"};
  if (c.name.empty()) return error{c.origin + ": key 'run.name': must not be empty"};
  if (c.rollout_policy == "llm" && c.rollout_episodes > 0 &&
      (c.llm.endpoints.empty() || c.llm.model.empty()))
    return error{c.origin + ": rollout.policy = \"llm\" needs llm.endpoints and llm.model"};
  if (c.llm_eta >= 0 && c.llm.version_endpoint.empty())
    return error{c.origin + ": key 'llm.eta': a staleness bound needs llm.version_endpoint (where "
                            "the trainer announces the versions it serves)"};
  if (c.llm.temperature < 0 || c.llm.timeout_s <= 0 || c.llm.backoff_s < 0)
    return error{c.origin + ": [llm]: temperature and backoff_s must be >= 0, timeout_s > 0"};
  if (c.peer_timeout_ms > 0 && c.peer_timeout_ms <= c.peer_heartbeat_ms)
    return error{c.origin + ": key 'pool.peer_timeout_ms': must exceed pool.peer_heartbeat_ms "
                            "(or be 0), else every quiet peer times out"};
  if (!c.curve.enabled() && (!c.curve.server_key.empty() || !c.curve.authorized.empty()))
    return error{c.origin + ": key 'curve.secret_key': needed with curve.server_key or "
                            "curve.authorized (this process's own key)"};
  if (!c.curve.enabled() && !c.curve.allow_plaintext)
    for (const auto& [key, endpoint] :
         {std::pair<const char*, const std::string&>{"rollout.sink", c.rollout_sink},
          {"llm.version_endpoint", c.llm.version_endpoint},
          {"learner.pull_endpoint", c.learner.pull_endpoint},
          {"learner.pub_endpoint", c.learner.pub_endpoint}})
      if (!endpoint.empty() && !is_loopback_endpoint(endpoint))
        return error{c.origin + ": key '" + key + "': " + endpoint +
                     " would carry plaintext off this host: set the [curve] keys (make them with "
                     "`kiln keys`), or curve.allow_plaintext = true on a trusted network"};
  if (!c.local_pool && c.remote.empty())
    return error{c.origin +
                 ": key 'pool.local': false needs pool.remote (some pool must run jobs)"};
  return c;
}

void read_learner_config(config_reader& r, learner_config& out) {
  auto i32 = [&](const std::string& k, int fallback, int lo, int hi) {
    return static_cast<int>(r.integer("learner." + k, fallback, lo, hi));
  };
  auto& m = out.model;
  m.d_model = i32("model.d_model", m.d_model, 8, 65536);
  m.n_layers = i32("model.n_layers", m.n_layers, 1, 1024);
  m.n_heads = i32("model.n_heads", m.n_heads, 1, 1024);
  m.d_ff = i32("model.d_ff", m.d_ff, 0, 1 << 20);
  m.max_len = i32("model.max_len", m.max_len, 2, 1 << 20);
  m.tied = r.boolean("learner.model.tied", m.tied);
  auto& p = out.ppo;
  p.gamma = r.real("learner.ppo.gamma", p.gamma);
  p.lambda = r.real("learner.ppo.lambda", p.lambda);
  p.eps_low = r.real("learner.ppo.eps_low", p.eps_low);
  p.eps_high = r.real("learner.ppo.eps_high", p.eps_high);
  p.vf_coef = r.real("learner.ppo.vf_coef", p.vf_coef);
  p.ent_coef = r.real("learner.ppo.ent_coef", p.ent_coef);
  p.behav_cap = r.real("learner.ppo.behav_cap", p.behav_cap);
  p.behav_mask = r.boolean("learner.ppo.behav_mask", p.behav_mask);
  p.normalize_adv = r.boolean("learner.ppo.normalize_adv", p.normalize_adv);
  p.advantage = r.choice("learner.ppo.advantage", p.advantage, {"gae", "group"});
  out.lr = r.real("learner.lr", out.lr);
  out.lr_schedule =
      r.choice("learner.lr_schedule", out.lr_schedule, {"constant", "linear", "cosine"});
  out.warmup_steps = r.integer("learner.warmup_steps", out.warmup_steps, 0);
  out.total_steps = r.integer("learner.total_steps", out.total_steps, 0);
  out.lr_min_ratio = r.real("learner.lr_min_ratio", out.lr_min_ratio);
  out.grad_clip = r.real("learner.grad_clip", out.grad_clip);
  out.weight_decay = r.real("learner.weight_decay", out.weight_decay);
  out.batch_size = i32("batch_size", out.batch_size, 1, 1 << 20);
  out.epochs = i32("epochs", out.epochs, 1, 1000);
  out.minibatches = i32("minibatches", out.minibatches, 1, 1 << 20);
  out.device = r.string("learner.device", out.device);
  out.chunk_tokens = r.integer("learner.chunk_tokens", out.chunk_tokens, 1);
  out.kl_every = i32("kl_every", out.kl_every, 0, 1 << 20);
  out.eta = i32("eta", out.eta, 0, 1 << 20);
  out.reward_placement =
      r.choice("learner.reward_placement", out.reward_placement, {"episode", "turn"});
  out.temperature = r.real("learner.temperature", out.temperature);
  out.stage = r.choice("learner.stage", out.stage, {"sft", "value", "ppo", "all"});
  out.sft_steps = r.integer("learner.sft_steps", out.sft_steps, 0);
  out.sft_batch = i32("sft_batch", out.sft_batch, 1, 1 << 20);
  out.sft_source = r.choice("learner.sft_source", out.sft_source, {"expert", "best_of_k"});
  out.sft_candidates = i32("sft_candidates", out.sft_candidates, 1, 4096);
  out.value_updates = r.integer("learner.value_updates", out.value_updates, 0);
  out.max_updates = r.integer("learner.max_updates", out.max_updates, 0);
  out.checkpoint_dir = r.path("learner.checkpoint_dir", out.checkpoint_dir);
  out.checkpoint_every = r.integer("learner.checkpoint_every", out.checkpoint_every, 0);
  out.keep_checkpoints = i32("keep_checkpoints", out.keep_checkpoints, 1, 1 << 20);
  out.resume = r.string("learner.resume", out.resume);
  out.metrics_path = r.path("learner.metrics_path", out.metrics_path);
  out.pull_endpoint = r.string("learner.pull_endpoint", out.pull_endpoint);
  out.pub_endpoint = r.string("learner.pub_endpoint", out.pub_endpoint);
  out.queue_capacity = i32("queue_capacity", out.queue_capacity, 1, 1 << 24);
  out.seed = static_cast<uint64_t>(r.integer("learner.seed", static_cast<int64_t>(out.seed), 0));
  out.threads = i32("threads", out.threads, 0, 4096);
}

expected<config_reader> open_config(const std::string& path) {
  if (!path.empty()) return config_reader::load(path);
  return config_reader::parse(embedded_quickstart_toml, "<embedded configs/quickstart.toml>",
                              embedded_config_dir);
}

expected<run_config> load_run_config(const std::string& path,
                                     const std::vector<std::string>& overrides) {
  auto reader = open_config(path);
  if (!reader) return reader.err();
  for (const auto& o : overrides)
    if (auto st = reader->set(o); !st) return st.err();
  return read_run_config(*reader);
}

} // namespace kiln
