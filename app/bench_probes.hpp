// What `kiln bench rollout` measures with: process CPU time, peak RSS, and the null pool that
// answers every job at once, shared by the engine bench and the LLM-endpoint bench.
#pragma once

#include "actors/messages.hpp"
#include "jobs/job.hpp"
#include "pool/device_pool.hpp"
#include "rollout/coordinator.hpp"

#include <algorithm>
#include <atomic>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace kiln {

struct bench_args;
struct common_args;
struct task;

// CPU time of the whole process: steadier than wall time when other work shares the cores.
inline double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

inline int64_t rss_bytes() {
  long pages = 0, rss = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
    std::fclose(f);
  }
  return static_cast<int64_t>(rss) * sysconf(_SC_PAGESIZE);
}

// Samples RSS every few ms on its own thread; keeps the peak.
class rss_sampler {
public:
  rss_sampler()
      : th_([this] {
          while (!stop_) {
            peak_ = std::max(peak_.load(), rss_bytes());
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
          }
        }) {}
  ~rss_sampler() { finish(); }
  int64_t finish() {
    stop_ = true;
    if (th_.joinable()) th_.join();
    return peak_;
  }

private:
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> peak_{0};
  std::thread th_;
};

inline std::string correct_outcome(double median_ms) {
  outcome o;
  o.kind = outcome_kind::correct;
  timings t;
  t.median_ms = median_ms;
  t.trials = 5;
  o.time = t;
  return encode(o);
}

// The null pool: every job is correct in 1 ms at once (the eager baseline too: speedup 1).
// A bench's coordinator: every episode in flight at once, no staleness bound, every turn run.
inline coordinator_config all_in_flight(int episodes, int turns) {
  coordinator_config cc;
  cc.admission.max_concurrent = episodes;
  cc.admission.total = episodes;
  cc.admission.eta = -1;
  cc.episode.max_turns = turns;
  cc.episode.stop_at_best = false;
  return cc;
}

inline caf::behavior null_pool(caf::event_based_actor*, std::string reply) {
  return {[=](evaluate_atom, const std::string&, const std::string&) { return reply; }};
}

// The pool of `kiln node --backend null`: every job is decoded and answered at once as correct
// (1 ms), so a router bench measures Kiln's own cost per job (BASP, routing, the job's msgpack)
// and the network, not kernels. Its stats carry the process's CPU seconds (cpu_s).
struct null_node_state {
  int64_t requests = 0, undecodable = 0;
  static inline const char* name = "kiln.null_node_pool";
};
inline caf::behavior null_node_pool(caf::stateful_actor<null_node_state>* self, int devices) {
  return {
      [=](evaluate_atom, const std::string& job_bytes, const std::string&) {
        ++self->state.requests;
        auto j = decode_job(job_bytes);
        if (!j) {
          ++self->state.undecodable;
          outcome bad;
          bad.message = "null pool: " + j.message();
          return encode(bad);
        }
        outcome o = make_outcome(*j, outcome_kind::correct, "");
        timings t;
        t.median_ms = t.min_ms = 1;
        t.trials = 1;
        o.time = t;
        return encode(o);
      },
      [=](stats_atom) {
        auto& st = self->state;
        auto rows = nlohmann::json::array(); // one per device: the router weighs by their count
        for (int d = 0; d < devices; ++d) rows.push_back({{"device", d}});
        return nlohmann::json{{"backend", "null"},
                              {"device_name", "null"},
                              {"devices", rows},
                              {"requests", st.requests},
                              {"outcomes", {{"correct", st.requests - st.undecodable}}},
                              {"cpu_s", cpu_seconds()}}
            .dump();
      },
  };
}

// `kiln bench rollout --policy llm-mock` (app/cmd_bench_rollout_llm.cpp).
int bench_llm_mock(const common_args& common, const std::vector<task>& tasks,
                   const bench_args& args);

} // namespace kiln
