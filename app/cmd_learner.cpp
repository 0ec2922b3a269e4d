// kiln learner: the PPO learner as its own process. Trajectories arrive on a ZeroMQ PULL socket,
// weights leave on a PUB socket; checkpoints and metrics go to a stable directory so that
// `--resume latest` continues where the last process stopped (SIGINT / SIGTERM stop it cleanly).
//   rollouts --PUSH==> [PULL] learner [PUB] ==> policy servers (SUB)
#include "app/commands.hpp"
#include "app/run_config.hpp"
#include "data/task_set.hpp"
#include "learner/learner.hpp"

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <spdlog/spdlog.h>
#include <thread>

namespace kiln {

namespace {
std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) { g_stop = true; }
} // namespace

int cmd_learner(const common_args& common, const learner_args& args) {
  auto cfg = load_run_config(args.config, args.overrides);
  if (!cfg) {
    spdlog::error("{}", cfg.message());
    return 2;
  }
  learner_config lc = cfg->learner;
  if (!args.pull.empty()) lc.pull_endpoint = args.pull;
  if (!args.pub.empty()) lc.pub_endpoint = args.pub;
  if (!args.resume.empty()) lc.resume = args.resume;
  if (lc.pull_endpoint.empty()) lc.pull_endpoint = "tcp://127.0.0.1:5557";
  if (lc.pub_endpoint.empty()) lc.pub_endpoint = "tcp://127.0.0.1:5558";
  // A stable directory (no timestamp), so a restarted learner finds its checkpoints.
  auto home = std::filesystem::path(cfg->out_dir) / (cfg->name + "-learner");
  if (lc.checkpoint_dir.empty()) lc.checkpoint_dir = (home / "checkpoints").string();
  if (lc.metrics_path.empty()) lc.metrics_path = (home / "metrics.jsonl").string();
  lc.threads = configure_threads(common.threads > 0 ? common.threads : cfg->threads);

  auto set = load_tasks(cfg->suites);
  for (const auto& e : set.errors) spdlog::error("{}", e.message);
  spdlog::info("learner: {} tasks for grammar masks; stage {}; PULL {} PUB {}", set.tasks.size(),
               lc.stage, lc.pull_endpoint, lc.pub_endpoint);
  auto l = learner::create(lc, std::move(set.tasks));
  if (!l) {
    spdlog::error("{}", l.message());
    return 2;
  }
  (*l)->on_metrics([](const update_metrics& m) {
    spdlog::info("learner: {} v{} step {} trajectories {} tokens {} reward {:.3f} loss {:.4f} "
                 "kl {:.2e} lag {:.2f} ({:.2f}s)",
                 m.stage, m.version, m.step, m.trajectories, m.tokens, m.reward_mean, m.loss,
                 m.approx_kl, m.lag_mean, m.seconds);
  });
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  if (auto st = (*l)->start(); !st) {
    spdlog::error("{}", st.message());
    return 2;
  }
  auto last = std::chrono::steady_clock::now();
  while (!g_stop && !(*l)->finished()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (std::chrono::steady_clock::now() - last > std::chrono::seconds(30)) {
      last = std::chrono::steady_clock::now();
      auto st = (*l)->intake_counters();
      spdlog::info("learner: version {}, {} trajectories trained; intake {} frames, {} rejected",
                   (*l)->version(), (*l)->trajectories_trained(), st.frames, st.rejected);
    }
  }
  (*l)->stop();
  auto st = (*l)->intake_counters();
  spdlog::info("learner: stopped at version {} ({} trajectories trained, {} frames, {} rejected); "
               "checkpoints in {}",
               (*l)->version(), (*l)->trajectories_trained(), st.frames, st.rejected,
               lc.checkpoint_dir);
  return 0;
}

} // namespace kiln
