// The pool as CAF actors, the service every episode calls:
//   (evaluate, job, program) --> pool --codegen--> compile worker (parallel, cached, merged)
//     --artifact--> least-loaded device actor (one job at a time, disposable executor) --> outcome
// Payloads travel as msgpack strings (jobs/job.hpp), so a remote node can call a pool as is.
#pragma once

#include "compile/cpu_compiler.hpp"
#include "executor/executor_client.hpp"
#include "jobs/job.hpp"
#include "skills/expert.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <string>

namespace kiln {

using evaluate_atom = caf::atom_constant<caf::atom("evaluate")>;
using run_job_atom = caf::atom_constant<caf::atom("run_job")>;
using compile_atom = caf::atom_constant<caf::atom("compile")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;

struct pool_config {
  backend_kind backend = backend_kind::cpu;
  int devices = 1;             // cpu: executors sharing the host; cuda: GPUs first_device ..
  int first_device = 0;        // cuda: the pool's first GPU (others may host learner and policy)
  int compile_workers = 2;     // parallel host-compiler processes / NVRTC threads
  cpu_compile_options compile; // cache_dir serves both backends
  std::string cuda_arch = "sm_90";
  std::string device_name = "cpu"; // cuda: the first GPU's name ("NVIDIA H200")
  executor_options executor;
};

// Spawns the pool with its compile workers and device actors (linked: they end with it). A cuda
// pool needs a build with the cuda backend (KILN_HAVE_CUDA); each device actor's executor then
// serves one GPU.
// Messages:
//   (evaluate_atom, std::string job, std::string program) -> std::string outcome
//       job.kind decides: evaluate / verify / time compile `program` first; baseline ignores it.
//       An invalid program or a generator error comes back as a compile_error outcome.
//   (stats_atom) -> std::string (JSON: jobs, per-device busy share, compile cache hits / misses,
//                                compile_ms_p50, recoveries)
caf::actor spawn_device_pool(caf::actor_system& sys, const pool_config& cfg);

// Blocking access for command-line tools; ends the pool when destroyed.
class pool_handle {
public:
  pool_handle(caf::actor_system& sys, const pool_config& cfg);
  // An existing pool or router (pool/pool_router.hpp); ended with the handle.
  pool_handle(caf::actor_system& sys, caf::actor pool, backend_kind backend);
  ~pool_handle();
  pool_handle(const pool_handle&) = delete;
  pool_handle& operator=(const pool_handle&) = delete;

  outcome run(const job& j, const std::string& program = {});
  std::string stats();
  const caf::actor& actor() const { return pool_; }
  backend_kind backend() const { return backend_; }

private:
  caf::actor_system& sys_;
  caf::actor pool_;
  backend_kind backend_;
};

} // namespace kiln
