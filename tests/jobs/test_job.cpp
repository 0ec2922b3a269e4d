#include "jobs/job.hpp"

#include "data/task_parse.hpp"
#include "tests/data/sample_tasks.hpp"

#include <doctest/doctest.h>
#include <msgpack.hpp>
#include <random>

using namespace kiln;

namespace {

const char* kTask = test::kAddRelu; // shapes do not matter to the wire form

job sample_job() {
  job j;
  j.id = 42;
  j.nonce = 0x1234567890abcdefull;
  j.kind = job_kind::evaluate;
  auto t = task_from_toml(kTask, "t.toml");
  REQUIRE(t.has_value());
  j.spec = *t;
  j.artifact = {artifact_loader::cuda_shared_object, "/cache/ab.so", "00000000000000ab", 412.5};
  j.verify.checks = 3;
  j.verify.check_determinism = false;
  j.timing.cv_target = 0.02;
  j.timing.flush_bytes = 1 << 20;
  j.timeout_s = 12.5;
  j.queue_ms = 7;
  return j;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A msgpack map built by hand, for wrong-type cases.
template <class F>
std::string packed(F&& f) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> p(buf);
  f(p);
  return std::string(buf.data(), buf.size());
}

} // namespace

TEST_CASE("jobs round trip through msgpack") {
  auto j = sample_job();
  auto d = decode_job(encode(j));
  REQUIRE_MESSAGE(d.has_value(), (d ? "" : d.message()));
  CHECK(d->id == 42);
  CHECK(d->nonce == 0x1234567890abcdefull);
  CHECK(d->kind == job_kind::evaluate);
  CHECK(d->spec.name == "add_relu");
  CHECK(d->spec.ops.size() == 2);
  CHECK(d->artifact.loader == artifact_loader::cuda_shared_object);
  CHECK(d->artifact.path == "/cache/ab.so");
  CHECK(d->artifact.key == "00000000000000ab");
  CHECK(d->artifact.compile_ms == 412.5);
  CHECK(d->verify.checks == 3);
  CHECK_FALSE(d->verify.check_determinism);
  CHECK(d->timing.cv_target == 0.02);
  CHECK(d->timing.flush_bytes == (1 << 20));
  CHECK(d->timing.roofline_gbps == 0);
  CHECK(d->timeout_s == 12.5);
  j.timing.roofline_gbps = 123.5;
  CHECK(decode_job(encode(j))->timing.roofline_gbps == 123.5);
  CHECK(d->queue_ms == 7);
}

TEST_CASE("outcomes round trip, with and without mismatch and timings") {
  outcome o;
  o.job_id = 9;
  o.kind = outcome_kind::wrong;
  o.message = "output 'y': 3 elements outside tolerance";
  o.error = mismatch{"y", 2, 17, 3, 0.5, 1e9};
  o.queue_ms = 1;
  o.compile_ms = 2;
  o.device_ms = 3;
  auto d = decode_outcome(encode(o));
  REQUIRE(d.has_value());
  CHECK(d->kind == outcome_kind::wrong);
  REQUIRE(d->error.has_value());
  CHECK(d->error->output == "y");
  CHECK(d->error->check == 2);
  CHECK(d->error->first_bad_index == 17);
  CHECK(d->error->max_rel_err == 1e9);
  CHECK_FALSE(d->time.has_value());
  CHECK(d->device_ms == 3);

  outcome t;
  t.kind = outcome_kind::correct;
  t.time = timings{
      1.25, 0.01, 40, 1.2, 2.5, true, clock_sample{1980, 3201, 61, 412.5, "sw_power_cap", true}};
  t.retire = true;
  auto e = decode_outcome(encode(t));
  REQUIRE(e.has_value());
  REQUIRE(e->time.has_value());
  CHECK(e->time->median_ms == 1.25);
  CHECK(e->time->trials == 40);
  CHECK(e->time->roofline_ms == 2.5);
  CHECK(e->time->beyond_roofline);
  CHECK(e->time->clocks.sm_mhz == 1980);
  CHECK(e->time->clocks.mem_mhz == 3201);
  CHECK(e->time->clocks.temperature_c == 61);
  CHECK(e->time->clocks.power_w == 412.5);
  CHECK(e->time->clocks.throttle == "sw_power_cap");
  CHECK(e->time->clocks.throttled);
  CHECK(e->retire);
  CHECK_FALSE(e->error.has_value());

  for (auto k : {outcome_kind::correct, outcome_kind::wrong, outcome_kind::runtime_error,
                 outcome_kind::timeout, outcome_kind::compile_error, outcome_kind::nondeterministic,
                 outcome_kind::input_mutated}) {
    outcome x;
    x.kind = k;
    auto y = decode_outcome(encode(x));
    REQUIRE(y.has_value());
    CHECK(y->kind == k);
  }
}

TEST_CASE("hello round trips") {
  executor_hello h{1234,     65534,
                   true,     true,
                   6,        "/tmp/kiln-exec-x",
                   "w1; w2", "nvml: H200",
                   0,        "kernel host uid 65534, landlock abi 7, seccomp on"};
  auto d = decode_hello(encode(h));
  REQUIRE(d.has_value());
  CHECK(d->pid == 1234);
  CHECK(d->uid == 65534);
  CHECK(d->net_isolated);
  CHECK(d->landlock_abi == 6);
  CHECK(d->scratch == "/tmp/kiln-exec-x");
  CHECK(d->clocks == "nvml: H200");
  CHECK(d->kernel_host == h.kernel_host);
}

TEST_CASE("an artifact with a loader no kernel host knows is refused, naming the key") {
  auto bytes = encode(sample_job());
  auto at = bytes.find("cuda-shared-object");
  REQUIRE(at != std::string::npos);
  bytes.replace(at, std::string("cuda-shared-object").size(), "cuda-shared-objecx");
  auto d = decode_job(bytes);
  REQUIRE_FALSE(d.has_value());
  CHECK(contains(d.message(), "artifact"));
  CHECK(contains(d.message(), "unknown loader"));
}

TEST_CASE("truncated messages are errors") {
  auto bytes = encode(sample_job());
  for (size_t n : {size_t(0), size_t(1), bytes.size() / 2, bytes.size() - 1}) {
    auto d = decode_job(bytes.substr(0, n));
    CHECK_FALSE(d.has_value());
  }
  CHECK(contains(decode_job(bytes.substr(0, bytes.size() / 2)).message(), "truncated"));
}

TEST_CASE("trailing bytes, wrong message types and wrong field types are errors") {
  auto bytes = encode(sample_job());
  CHECK(contains(decode_job(bytes + "x").message(), "trailing bytes"));
  CHECK(contains(decode_outcome(bytes).message(), "not an outcome"));
  CHECK(contains(decode_job(encode(outcome{})).message(), "not a job"));

  auto not_map = packed([](auto& p) {
    p.pack_array(2);
    p.pack(1);
    p.pack(2);
  });
  CHECK(contains(decode_job(not_map).message(), "expected a map"));

  auto id_as_string = packed([](auto& p) {
    p.pack_map(4);
    p.pack(std::string("v"));
    p.pack(1);
    p.pack(std::string("type"));
    p.pack(std::string("outcome"));
    p.pack(std::string("job_id"));
    p.pack(std::string("seven"));
    p.pack(std::string("kind"));
    p.pack(std::string("correct"));
  });
  CHECK(
      contains(decode_outcome(id_as_string).message(), "key 'job_id' must be an unsigned integer"));

  auto bad_kind = packed([](auto& p) {
    p.pack_map(3);
    p.pack(std::string("v"));
    p.pack(1);
    p.pack(std::string("type"));
    p.pack(std::string("outcome"));
    p.pack(std::string("job_id"));
    p.pack(1);
  });
  CHECK(contains(decode_outcome(bad_kind).message(), "missing key 'kind'"));

  auto bad_version = packed([](auto& p) {
    p.pack_map(1);
    p.pack(std::string("v"));
    p.pack(2);
  });
  CHECK(contains(decode_outcome(bad_version).message(), "unsupported version 2"));

  auto j = sample_job();
  j.verify.checks = 1000;
  CHECK(contains(decode_job(encode(j)).message(), "verify.checks out of range"));
}

TEST_CASE("hostile sizes are refused without allocating") {
  // array32 claiming 2^31 elements, map32 claiming 2^31 pairs.
  CHECK(contains(decode_job(std::string("\xdd\x80\x00\x00\x00", 5)).message(), "size limit"));
  CHECK(contains(decode_job(std::string("\xdf\x80\x00\x00\x00", 5)).message(), "size limit"));
  // A string is checked against the bytes present first (no allocation either way).
  auto big_str = decode_job(std::string("\xdb\xff\xff\xff\xff", 5)).message();
  CHECK_MESSAGE(contains(big_str, "truncated"), big_str);
  // Deep nesting: 100 nested one-element arrays.
  CHECK(contains(decode_job(std::string(100, '\x91') + "\x01").message(), "size limit"));
}

TEST_CASE("random garbage never crashes the decoders") {
  std::mt19937 rng(7);
  auto base = encode(sample_job());
  int decoded = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string s;
    if (i % 2 == 0) {
      s.resize(rng() % 64);
      for (auto& c : s) c = static_cast<char>(rng());
    } else {
      s = base; // flip a few bytes of a valid message
      for (int k = 0; k < 3; ++k) s[rng() % s.size()] = static_cast<char>(rng());
    }
    decoded += decode_job(s).has_value();
    decoded += decode_outcome(s).has_value();
    decoded += decode_hello(s).has_value();
  }
  CHECK(decoded < 2000); // most are rejected; the point is that none crashed
}
