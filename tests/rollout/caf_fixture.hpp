// A small actor system for the rollout actor tests (2 threads, rollout messages registered), plus
// fakes: a pool that answers from a function, and a sink that keeps what it is given.
#pragma once

#include "actors/actor_system_setup.hpp"
#include "actors/messages.hpp"
#include "jobs/job.hpp"
#include "pool/device_pool.hpp"

#include <atomic>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <functional>
#include <mutex>

namespace kiln::test {

struct caf_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf_fixture() {
    configure_actor_system(cfg, {2, "sharing"});
    register_rollout_messages(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

inline std::string outcome_bytes(outcome_kind k, double median_ms = 1.0,
                                 bool beyond_roofline = false) {
  outcome o;
  o.kind = k;
  if (k == outcome_kind::correct) {
    timings t;
    t.median_ms = median_ms;
    t.beyond_roofline = beyond_roofline;
    o.time = t;
  }
  if (k == outcome_kind::wrong) o.error = mismatch{"y", 0, 3, 10, 0.5, 0.02};
  o.compile_ms = 2;
  o.device_ms = 3;
  return encode(o);
}

// A pool whose answer to the n-th evaluate job (0-based; baselines excluded) comes from `f`;
// an empty answer means: never answer (the promise is dropped). Baselines: correct in 2 ms.
using pool_script = std::function<std::string(int n, const std::string& program)>;
inline caf::actor spawn_fake_pool(caf::actor_system& sys, pool_script f,
                                  std::shared_ptr<std::atomic<int>> baselines = nullptr) {
  auto count = std::make_shared<int>(0);
  return sys.spawn([=](caf::event_based_actor* self) -> caf::behavior {
    return {[=](evaluate_atom, const std::string& job_bytes,
                const std::string& program) -> caf::result<std::string> {
      auto j = decode_job(job_bytes);
      if (j && j->kind == job_kind::baseline) {
        if (baselines) ++*baselines;
        return outcome_bytes(outcome_kind::correct, 2.0);
      }
      auto out = f((*count)++, program);
      if (out.empty()) {
        auto rp = self->make_response_promise<std::string>();
        return rp; // dropped: never delivered
      }
      return out;
    }};
  });
}

// A sink that answers true at once and keeps every message.
struct kept_messages {
  std::mutex m;
  std::vector<std::string> msgs;
  size_t size() {
    std::lock_guard<std::mutex> l(m);
    return msgs.size();
  }
};
inline caf::actor spawn_keeping_sink(caf::actor_system& sys, std::shared_ptr<kept_messages> kept) {
  return sys.spawn([=](caf::event_based_actor*) -> caf::behavior {
    return {[=](push_atom, const std::string& bytes) {
      std::lock_guard<std::mutex> l(kept->m);
      kept->msgs.push_back(bytes);
      return true;
    }};
  });
}

} // namespace kiln::test
