// msgpack wire form of jobs, outcomes and the executor's hello. Strings for enums so a Python
// client can read frames; strict unpack limits and type checks so a bad frame is an error value.
#include "jobs/job.hpp"

#include "data/task_parse.hpp"
#include "jobs/frame.hpp"

#include <msgpack.hpp>
#include <nlohmann/json.hpp>

namespace kiln {

const char* to_string(job_kind k) {
  switch (k) {
  case job_kind::verify: return "verify";
  case job_kind::time: return "time";
  case job_kind::baseline: return "baseline";
  case job_kind::evaluate: return "evaluate";
  }
  return "?";
}

const char* to_string(outcome_kind k) {
  switch (k) {
  case outcome_kind::correct: return "correct";
  case outcome_kind::wrong: return "wrong";
  case outcome_kind::runtime_error: return "runtime_error";
  case outcome_kind::timeout: return "timeout";
  case outcome_kind::compile_error: return "compile_error";
  case outcome_kind::nondeterministic: return "nondeterministic";
  case outcome_kind::input_mutated: return "input_mutated";
  }
  return "?";
}

bool is_failure(outcome_kind k) { return k != outcome_kind::correct; }

bool timing_suspect(const timings& t) { return t.beyond_roofline || t.clocks.throttled; }

outcome make_outcome(const job& j, outcome_kind k, std::string message) {
  outcome o;
  o.job_id = j.id;
  o.nonce = j.nonce;
  o.kind = k;
  o.message = std::move(message);
  o.queue_ms = j.queue_ms;
  o.compile_ms = j.artifact.compile_ms;
  return o;
}

namespace {

constexpr int64_t wire_version = 1;

using packer = msgpack::packer<msgpack::sbuffer>;

void key(packer& p, const char* k) { p.pack(std::string_view(k)); }

struct decode_error {
  std::string message;
};

// A checked view of a msgpack map with string keys.
class map_view {
public:
  map_view(const msgpack::object& o, std::string what) : what_(std::move(what)) {
    if (o.type != msgpack::type::MAP) fail("expected a map");
    map_ = &o.via.map;
  }

  const msgpack::object* find(std::string_view k) const {
    for (uint32_t i = 0; i < map_->size; ++i) {
      const auto& kv = map_->ptr[i];
      if (kv.key.type == msgpack::type::STR &&
          std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == k)
        return &kv.val;
    }
    return nullptr;
  }
  const msgpack::object& need(std::string_view k) const {
    auto* o = find(k);
    if (!o) fail("missing key '" + std::string(k) + "'");
    return *o;
  }

  std::string str(std::string_view k, bool required = true, std::string fallback = {}) const {
    auto* o = required ? &need(k) : find(k);
    if (!o) return fallback;
    if (o->type != msgpack::type::STR) fail_type(k, "a string");
    return std::string(o->via.str.ptr, o->via.str.size);
  }
  int64_t i64(std::string_view k, bool required = true, int64_t fallback = 0) const {
    auto* o = required ? &need(k) : find(k);
    if (!o) return fallback;
    if (o->type == msgpack::type::POSITIVE_INTEGER) {
      if (o->via.u64 > static_cast<uint64_t>(INT64_MAX)) fail_type(k, "an int64");
      return static_cast<int64_t>(o->via.u64);
    }
    if (o->type == msgpack::type::NEGATIVE_INTEGER) return o->via.i64;
    fail_type(k, "an integer");
    return 0;
  }
  uint64_t u64(std::string_view k, bool required = true) const {
    auto* o = required ? &need(k) : find(k);
    if (!o) return 0;
    if (o->type != msgpack::type::POSITIVE_INTEGER) fail_type(k, "an unsigned integer");
    return o->via.u64;
  }
  int i32(std::string_view k, bool required = true, int fallback = 0) const {
    int64_t v = i64(k, required, fallback);
    if (v < INT32_MIN || v > INT32_MAX) fail_type(k, "an int32");
    return static_cast<int>(v);
  }
  double f64(std::string_view k, bool required = true, double fallback = 0) const {
    auto* o = required ? &need(k) : find(k);
    if (!o) return fallback;
    switch (o->type) {
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: return o->via.f64;
    case msgpack::type::POSITIVE_INTEGER: return static_cast<double>(o->via.u64);
    case msgpack::type::NEGATIVE_INTEGER: return static_cast<double>(o->via.i64);
    default: fail_type(k, "a number");
    }
    return 0;
  }
  bool boolean(std::string_view k, bool required = true, bool fallback = false) const {
    auto* o = required ? &need(k) : find(k);
    if (!o) return fallback;
    if (o->type != msgpack::type::BOOLEAN) fail_type(k, "a boolean");
    return o->via.boolean;
  }
  map_view sub(std::string_view k) const { return map_view(need(k), what_ + "." + std::string(k)); }
  bool has(std::string_view k) const {
    auto* o = find(k);
    return o && o->type != msgpack::type::NIL;
  }

  [[noreturn]] void fail(const std::string& m) const { throw decode_error{what_ + ": " + m}; }

private:
  [[noreturn]] void fail_type(std::string_view k, const char* type) const {
    fail("key '" + std::string(k) + "' must be " + type);
  }
  const msgpack::object_map* map_ = nullptr;
  std::string what_;
};

// Unpacks with limits sized to our messages: small maps, no big arrays, strings up to a frame.
template <class T, class F>
expected<T> decode_with(const std::string& bytes, const char* what, F&& f) {
  try {
    msgpack::unpack_limit limits(/*array*/ 1024, /*map*/ 64, /*str*/ max_frame_bytes,
                                 /*bin*/ 1 << 20,
                                 /*ext*/ 0, /*depth*/ 8);
    std::size_t off = 0;
    // One zone per thread, cleared (its first chunk kept) per message: a fresh zone costs a
    // malloc / free pair per decode, and episodes decode an outcome per turn.
    static thread_local msgpack::zone zone;
    zone.clear();
    msgpack::object obj =
        msgpack::unpack(zone, bytes.data(), bytes.size(), off, nullptr, nullptr, limits);
    if (off != bytes.size())
      return error{std::string(what) + ": " + std::to_string(bytes.size() - off) +
                   " trailing bytes after the message"};
    map_view m(obj, what);
    if (m.i64("v") != wire_version) m.fail("unsupported version " + std::to_string(m.i64("v")));
    return f(m);
  } catch (const decode_error& e) {
    return error{e.message};
  } catch (const msgpack::insufficient_bytes&) {
    return error{std::string(what) + ": truncated msgpack"};
  } catch (const msgpack::size_overflow& e) {
    return error{std::string(what) + ": msgpack size limit exceeded (" + e.what() + ")"};
  } catch (const msgpack::unpack_error& e) {
    return error{std::string(what) + ": malformed msgpack (" + e.what() + ")"};
  } catch (const std::bad_alloc&) {
    return error{std::string(what) + ": out of memory while unpacking"};
  } catch (const std::exception& e) {
    return error{std::string(what) + ": " + e.what()};
  }
}

template <class E>
E enum_from(const map_view& m, std::string_view k, std::initializer_list<E> values) {
  auto s = m.str(k);
  for (E v : values)
    if (s == to_string(v)) return v;
  m.fail("unknown " + std::string(k) + " '" + s + "'");
}

} // namespace

std::string encode(const job& j) {
  msgpack::sbuffer buf;
  packer p(buf);
  p.pack_map(11);
  key(p, "v");
  p.pack(wire_version);
  key(p, "type");
  p.pack(std::string_view("job"));
  key(p, "id");
  p.pack(j.id);
  key(p, "nonce");
  p.pack(j.nonce);
  key(p, "kind");
  p.pack(std::string_view(to_string(j.kind)));
  key(p, "task");
  p.pack(task_to_json(j.spec).dump());
  key(p, "artifact");
  p.pack_map(5);
  key(p, "backend"); // kept for the wire form: the loader says it
  p.pack(std::string_view(needs_cuda(j.artifact.loader) ? "cuda" : "cpu"));
  key(p, "loader");
  p.pack(std::string_view(to_string(j.artifact.loader)));
  key(p, "path");
  p.pack(j.artifact.path);
  key(p, "key");
  p.pack(j.artifact.key);
  key(p, "compile_ms");
  p.pack(j.artifact.compile_ms);
  key(p, "verify");
  p.pack_map(2);
  key(p, "checks");
  p.pack(j.verify.checks);
  key(p, "determinism");
  p.pack(j.verify.check_determinism);
  key(p, "timing");
  p.pack_map(8);
  key(p, "warmup");
  p.pack(j.timing.warmup);
  key(p, "min_trials");
  p.pack(j.timing.min_trials);
  key(p, "max_trials");
  p.pack(j.timing.max_trials);
  key(p, "cv_target");
  p.pack(j.timing.cv_target);
  key(p, "time_cap_ms");
  p.pack(j.timing.time_cap_ms);
  key(p, "flush_bytes");
  p.pack(j.timing.flush_bytes);
  key(p, "roofline_gbps");
  p.pack(j.timing.roofline_gbps);
  key(p, "checked_trials");
  p.pack(j.timing.checked_trials);
  key(p, "timeout_s");
  p.pack(j.timeout_s);
  key(p, "queue_ms");
  p.pack(j.queue_ms);
  return std::string(buf.data(), buf.size());
}

expected<job> decode_job(const std::string& bytes) {
  return decode_with<job>(bytes, "job", [](const map_view& m) -> expected<job> {
    if (m.str("type") != "job") m.fail("not a job message");
    job j;
    j.id = m.u64("id");
    j.nonce = m.u64("nonce");
    j.kind = enum_from(m, "kind",
                       {job_kind::verify, job_kind::time, job_kind::baseline, job_kind::evaluate});
    auto json = nlohmann::json::parse(m.str("task"), nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded() || !json.is_object()) m.fail("key 'task' is not a JSON object");
    auto t = task_from_json(json, "job " + std::to_string(j.id));
    if (!t) m.fail(t.message());
    j.spec = std::move(*t);
    auto a = m.sub("artifact");
    j.artifact.loader = artifact_loader_from(a.str("loader").c_str());
    if (j.artifact.loader == artifact_loader::none) a.fail("unknown loader");
    j.artifact.path = a.str("path");
    j.artifact.key = a.str("key");
    j.artifact.compile_ms = a.f64("compile_ms");
    auto v = m.sub("verify");
    j.verify.checks = v.i32("checks");
    j.verify.check_determinism = v.boolean("determinism");
    auto t2 = m.sub("timing");
    j.timing.warmup = t2.i32("warmup");
    j.timing.min_trials = t2.i32("min_trials");
    j.timing.max_trials = t2.i32("max_trials");
    j.timing.cv_target = t2.f64("cv_target");
    j.timing.time_cap_ms = t2.f64("time_cap_ms");
    j.timing.flush_bytes = t2.i64("flush_bytes");
    j.timing.roofline_gbps = t2.f64("roofline_gbps", false);
    j.timing.checked_trials = t2.i32("checked_trials", false, timing_options{}.checked_trials);
    if (!(j.timing.roofline_gbps >= 0)) m.fail("timing.roofline_gbps must be >= 0");
    j.timeout_s = m.f64("timeout_s");
    j.queue_ms = m.f64("queue_ms");
    // Ranges: a job must not be able to make the executor loop forever or allocate wildly.
    if (j.verify.checks < 1 || j.verify.checks > 100) m.fail("verify.checks out of range [1, 100]");
    if (j.timing.warmup < 0 || j.timing.warmup > 100) m.fail("timing.warmup out of range [0, 100]");
    if (j.timing.min_trials < 1 || j.timing.max_trials < j.timing.min_trials ||
        j.timing.max_trials > 100000)
      m.fail("timing trials out of range (1 <= min_trials <= max_trials <= 100000)");
    if (j.timing.flush_bytes < 0 || j.timing.flush_bytes > (int64_t{1} << 32))
      m.fail("timing.flush_bytes out of range");
    if (j.timing.checked_trials < 1 || j.timing.checked_trials > 64)
      m.fail("timing.checked_trials out of range [1, 64]");
    if (!(j.timing.time_cap_ms >= 0) || !(j.timing.cv_target >= 0))
      m.fail("timing cap / cv target must be >= 0");
    return j;
  });
}

std::string encode(const outcome& o) {
  msgpack::sbuffer buf;
  packer p(buf);
  p.pack_map(12);
  key(p, "v");
  p.pack(wire_version);
  key(p, "type");
  p.pack(std::string_view("outcome"));
  key(p, "job_id");
  p.pack(o.job_id);
  key(p, "nonce");
  p.pack(o.nonce);
  key(p, "kind");
  p.pack(std::string_view(to_string(o.kind)));
  key(p, "message");
  p.pack(o.message);
  key(p, "error");
  if (o.error) {
    p.pack_map(6);
    key(p, "output");
    p.pack(o.error->output);
    key(p, "check");
    p.pack(o.error->check);
    key(p, "first_bad_index");
    p.pack(o.error->first_bad_index);
    key(p, "bad_count");
    p.pack(o.error->bad_count);
    key(p, "max_abs_err");
    p.pack(o.error->max_abs_err);
    key(p, "max_rel_err");
    p.pack(o.error->max_rel_err);
  } else {
    p.pack_nil();
  }
  key(p, "time");
  if (o.time) {
    p.pack_map(10);
    key(p, "median_ms");
    p.pack(o.time->median_ms);
    key(p, "cv");
    p.pack(o.time->cv);
    key(p, "trials");
    p.pack(o.time->trials);
    key(p, "min_ms");
    p.pack(o.time->min_ms);
    key(p, "roofline_ms");
    p.pack(o.time->roofline_ms);
    key(p, "beyond_roofline");
    p.pack(o.time->beyond_roofline);
    key(p, "overhead_ms");
    p.pack(o.time->overhead_ms);
    key(p, "bound_ms");
    p.pack(o.time->bound_ms);
    key(p, "checked");
    p.pack(o.time->checked);
    const auto& c = o.time->clocks;
    key(p, "clocks");
    p.pack_map(6);
    key(p, "sm_mhz");
    p.pack(c.sm_mhz);
    key(p, "mem_mhz");
    p.pack(c.mem_mhz);
    key(p, "temperature_c");
    p.pack(c.temperature_c);
    key(p, "power_w");
    p.pack(c.power_w);
    key(p, "throttle");
    p.pack(c.throttle);
    key(p, "throttled");
    p.pack(c.throttled);
  } else {
    p.pack_nil();
  }
  key(p, "queue_ms");
  p.pack(o.queue_ms);
  key(p, "compile_ms");
  p.pack(o.compile_ms);
  key(p, "device_ms");
  p.pack(o.device_ms);
  key(p, "retire");
  p.pack(o.retire);
  return std::string(buf.data(), buf.size());
}

expected<outcome> decode_outcome(const std::string& bytes) {
  return decode_with<outcome>(bytes, "outcome", [](const map_view& m) -> expected<outcome> {
    if (m.str("type") != "outcome") m.fail("not an outcome message");
    outcome o;
    o.job_id = m.u64("job_id");
    o.nonce = m.u64("nonce", false);
    o.kind = enum_from(m, "kind",
                       {outcome_kind::correct, outcome_kind::wrong, outcome_kind::runtime_error,
                        outcome_kind::timeout, outcome_kind::compile_error,
                        outcome_kind::nondeterministic, outcome_kind::input_mutated});
    o.message = m.str("message");
    if (m.has("error")) {
      auto e = m.sub("error");
      mismatch mm;
      mm.output = e.str("output");
      mm.check = e.i32("check");
      mm.first_bad_index = e.i64("first_bad_index");
      mm.bad_count = e.i64("bad_count");
      mm.max_abs_err = e.f64("max_abs_err");
      mm.max_rel_err = e.f64("max_rel_err");
      o.error = mm;
    }
    if (m.has("time")) {
      auto t = m.sub("time");
      timings tm;
      tm.median_ms = t.f64("median_ms");
      tm.cv = t.f64("cv");
      tm.trials = t.i32("trials");
      tm.min_ms = t.f64("min_ms");
      tm.roofline_ms = t.f64("roofline_ms", false);
      tm.beyond_roofline = t.boolean("beyond_roofline", false);
      tm.overhead_ms = t.f64("overhead_ms", false);
      tm.bound_ms = t.f64("bound_ms", false);
      tm.checked = t.i32("checked", false);
      if (t.has("clocks")) {
        auto c = t.sub("clocks");
        tm.clocks.sm_mhz = c.i32("sm_mhz", false);
        tm.clocks.mem_mhz = c.i32("mem_mhz", false);
        tm.clocks.temperature_c = c.i32("temperature_c", false);
        tm.clocks.power_w = c.f64("power_w", false);
        tm.clocks.throttle = c.str("throttle", false);
        tm.clocks.throttled = c.boolean("throttled", false);
      }
      o.time = tm;
    }
    o.queue_ms = m.f64("queue_ms");
    o.compile_ms = m.f64("compile_ms");
    o.device_ms = m.f64("device_ms");
    o.retire = m.boolean("retire", false);
    return o;
  });
}

std::string encode(const executor_hello& h) {
  msgpack::sbuffer buf;
  packer p(buf);
  p.pack_map(12);
  key(p, "v");
  p.pack(wire_version);
  key(p, "type");
  p.pack(std::string_view("hello"));
  key(p, "kernel_host");
  p.pack(h.kernel_host);
  key(p, "clocks");
  p.pack(h.clocks);
  key(p, "drain_slack_ms");
  p.pack(h.drain_slack_ms);
  key(p, "landlock_abi");
  p.pack(h.landlock_abi);
  key(p, "pid");
  p.pack(h.pid);
  key(p, "uid");
  p.pack(h.uid);
  key(p, "net_isolated");
  p.pack(h.net_isolated);
  key(p, "fs_restricted");
  p.pack(h.fs_restricted);
  key(p, "scratch");
  p.pack(h.scratch);
  key(p, "warnings");
  p.pack(h.warnings);
  return std::string(buf.data(), buf.size());
}

expected<executor_hello> decode_hello(const std::string& bytes) {
  return decode_with<executor_hello>(bytes, "hello",
                                     [](const map_view& m) -> expected<executor_hello> {
                                       if (m.str("type") != "hello") m.fail("not a hello message");
                                       executor_hello h;
                                       h.pid = m.i64("pid");
                                       h.uid = m.i64("uid");
                                       h.net_isolated = m.boolean("net_isolated");
                                       h.fs_restricted = m.boolean("fs_restricted");
                                       h.landlock_abi = m.i64("landlock_abi", false);
                                       h.scratch = m.str("scratch");
                                       h.warnings = m.str("warnings");
                                       h.clocks = m.str("clocks", false);
                                       h.drain_slack_ms = m.f64("drain_slack_ms", false);
                                       h.kernel_host = m.str("kernel_host", false);
                                       return h;
                                     });
}

} // namespace kiln
