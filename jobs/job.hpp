// Jobs and outcomes of a device executor, plus their msgpack wire form (device-agnostic).
//   device actor --job--> executor_client --msgpack frame--> executor --outcome frame--> back
#pragma once

#include "data/expected.hpp"
#include "data/task_spec.hpp"
#include "jobs/clock_sample.hpp"
#include "submission/artifact_loader.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace kiln {

enum class job_kind {
  verify,   // correctness only
  time,     // timing only (the caller vouches for correctness; final outputs are still checked)
  baseline, // eager reference timing of the task, same method as `time`
  evaluate, // verify, then time if correct
};
const char* to_string(job_kind k);

// A compiled submission as the executor sees it: `path` is what the kernel host loads, and
// `loader` says how (submission/artifact_loader.hpp); the submission's kind chose both.
struct artifact_ref {
  artifact_loader loader = artifact_loader::cpu_shared_object;
  std::string path;
  std::string key;       // cache key, for logs and the executor's program cache
  double compile_ms = 0; // copied into the outcome
};

struct verify_options {
  int checks = 5; // 1..100; fresh inputs from an unpredictable seed for each
  // Kept for the wire form: a second run on the same inputs would let a cache keyed on content
  // hit, so every call now gets fresh content and this no longer adds a run (docs/DESIGN.md).
  bool check_determinism = true;
};

struct timing_options {
  int warmup = 2;
  int min_trials = 5;
  int max_trials = 500;
  double cv_target = 0.01;   // stop once the coefficient of variation is below this ...
  double time_cap_ms = 1000; // ... or once this much time went into trials
  int64_t flush_bytes = int64_t{64} << 20; // cache flush before each trial (cpu: > LLC)
  // Bandwidth for the roofline check (GB/s): 0 = the device's copy bandwidth, measured once per
  // executor. A kernel timed faster than compulsory bytes / bandwidth is re-verified and flagged.
  double roofline_gbps = 0;
  // Timed trials whose outputs are kept and checked against references computed after the loop,
  // chosen uniformly (reservoir sampling) over all trials, plus the last trial always. A kernel
  // wrong on a fraction f of its trials passes with probability <= (1 - f)^checked_trials.
  int checked_trials = 8;
};

struct job {
  uint64_t id = 0;
  // Set by executor_client for every send; the outcome must echo it. Job ids are guessable, so
  // this keeps a kernel that writes a forged outcome frame onto the channel from being believed.
  uint64_t nonce = 0;
  job_kind kind = job_kind::evaluate;
  task spec;             // checked (shapes filled) by the executor on arrival
  artifact_ref artifact; // unused for baseline
  verify_options verify;
  timing_options timing;
  double timeout_s = 60; // wall clock for the whole job, enforced by the client
  double queue_ms = 0;   // time queued before the device took it (filled by the caller)
};

enum class outcome_kind {
  correct,       // verify / evaluate passed; time / baseline measured
  wrong,         // outputs outside tolerance (see mismatch)
  runtime_error, // kernel returned non-zero, crashed, wrote out of bounds, bad artifact ...
  timeout,
  compile_error,    // produced by the compile stage, never by the executor
  nondeterministic, // no longer produced: runs on the same inputs are not repeated (wire form)
  input_mutated,    // the kernel wrote into an input or param
};
const char* to_string(outcome_kind k);
bool is_failure(outcome_kind k); // everything but correct

struct mismatch {
  std::string output;           // output name
  int check = 0;                // which check (0-based); -1: the final timing run
  int64_t first_bad_index = -1; // flat index of the first element outside tolerance
  int64_t bad_count = 0;
  double max_abs_err = 0;
  double max_rel_err = 0; // over elements with |ref| > atol
};

struct timings {
  double median_ms = 0;
  double cv = 0; // stddev / mean of the trials
  int trials = 0;
  double min_ms = 0;
  double roofline_ms = 0;       // compulsory bytes / bandwidth: no honest kernel is faster
  bool beyond_roofline = false; // it was: re-verified on fresh inputs and kept, but flagged
  clock_sample clocks;          // the device's clocks right after the last trial
  // The process boundary (docs/DESIGN.md, threat model): overhead_ms is the protocol's own cost
  // per call (p10 of calls without the kernel), taken off the executor's clock on cpu; bound_ms is
  // the executor's own lower bound on the kernel's time (median), which the kernel host's
  // in-process events (cuda) may not undercut; checked is how many trials' outputs were checked.
  double overhead_ms = 0;
  double bound_ms = 0;
  int checked = 0;
};

// A timing that earns no speed: flagged beyond the bandwidth roofline, or taken while the device's
// clocks were held down. Rewards give it no speed tier and eval metrics count it as no faster
// than the baselines.
bool timing_suspect(const timings& t);

struct outcome {
  uint64_t job_id = 0;
  uint64_t nonce = 0; // the job's nonce
  outcome_kind kind = outcome_kind::runtime_error;
  std::string message;           // runtime_error reason, compile log, details
  std::optional<mismatch> error; // wrong, nondeterministic
  std::optional<timings> time;   // time / baseline / evaluate when correct
  double queue_ms = 0, compile_ms = 0, device_ms = 0;
  // Set by the executor when it will exit after this reply (its state may be damaged, e.g. an
  // out-of-bounds write hit a guard zone): the client reaps it and starts a fresh one.
  bool retire = false;
};

outcome make_outcome(const job& j, outcome_kind k, std::string message = {});

// What an executor reports once it is ready: the sandbox it managed to set up.
struct executor_hello {
  int64_t pid = 0;
  int64_t uid = 0;
  bool net_isolated = false;  // in its own network namespace
  bool fs_restricted = false; // landlock: writes only under the scratch directory
  int64_t landlock_abi = 0; // >= 4: TCP connect/bind denied, >= 6: no signals outside the executor
  std::string scratch;
  std::string warnings; // what could not be applied, '; '-separated
  std::string clocks;   // where clocks are read from (device, maximum clocks), or why not
  // Kept for the wire form (0): the drain slack is now measured per job with the kernel host.
  double drain_slack_ms = 0;
  // The sandbox of the kernel hosts ("kernel host uid 65534, landlock abi 7, seccomp on").
  std::string kernel_host;
};

// --- wire form: one msgpack map per frame, string keys, version field "v" = 1 ---
// Decoders walk the object tree and check every type; unknown keys are ignored (forward
// compatible), missing required keys are errors. Unpacking uses strict limits.
std::string encode(const job& j);
std::string encode(const outcome& o);
std::string encode(const executor_hello& h);
expected<job> decode_job(const std::string& bytes);
expected<outcome> decode_outcome(const std::string& bytes);
expected<executor_hello> decode_hello(const std::string& bytes);

} // namespace kiln
