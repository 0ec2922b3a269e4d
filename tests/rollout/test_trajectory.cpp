// Trajectory stream v1: the round trip keeps every field; each malformed message is rejected with
// an error naming what was wrong, and none throws.
#include "rollout/trajectory.hpp"

#include <cmath>
#include <cstring>
#include <doctest/doctest.h>
#include <functional>
#include <msgpack.hpp>

using namespace kiln;

namespace {

trajectory sample() {
  trajectory t;
  t.id = "ep-7";
  t.task = "gemm_relu";
  t.group = "g3";
  t.status = episode_status::truncated;
  t.policy_version = 4;
  t.tokens = {70, 71, 72, 1, 2, 3, 80, 81};
  t.loss_mask = {0, 0, 0, 1, 1, 1, 0, 0};
  t.logprobs = {0, 0, 0, -0.5f, -1.25f, 0, 0, 0};
  t.versions = {-1, -1, -1, 4, 5, 5, -1, -1};
  turn_record a;
  a.start = 3;
  a.end = 6;
  a.outcome = "correct";
  a.reward = 2;
  a.speedup_eager = 1.3;
  a.speedup_compile = 0.9;
  a.compile_ms = 410;
  a.run_ms = 12.5;
  turn_record b = a;
  b.outcome = "compile_error";
  b.reward = -1;
  b.speedup_eager = 0;
  b.speedup_compile.reset();
  t.turns = {a, b};
  t.reward = 2;
  t.timings = {1, 2, 3, 4, 10};
  return t;
}

using packer = msgpack::packer<msgpack::sbuffer>;
using field = std::pair<std::string, std::function<void(packer&)>>;

std::string bin(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

// The sample as an editable list of top-level fields.
std::vector<field> fields() {
  auto t = sample();
  auto pack_bin = [](std::string b) {
    return [b](packer& p) {
      p.pack_bin(static_cast<uint32_t>(b.size()));
      p.pack_bin_body(b.data(), static_cast<uint32_t>(b.size()));
    };
  };
  return {
      {"v", [](packer& p) { p.pack(1); }},
      {"id", [](packer& p) { p.pack(std::string("ep-7")); }},
      {"task", [](packer& p) { p.pack(std::string("gemm_relu")); }},
      {"group", [](packer& p) { p.pack(std::string("g3")); }},
      {"status", [](packer& p) { p.pack(std::string("completed")); }},
      {"policy_version", [](packer& p) { p.pack(4); }},
      {"tokens", pack_bin(bin(t.tokens.data(), t.tokens.size() * 4))},
      {"loss_mask", pack_bin(bin(t.loss_mask.data(), t.loss_mask.size()))},
      {"logprobs", pack_bin(bin(t.logprobs.data(), t.logprobs.size() * 4))},
      {"versions", pack_bin(bin(t.versions.data(), t.versions.size() * 4))},
      {"turns",
       [](packer& p) {
         p.pack_array(1);
         p.pack_map(8);
         p.pack(std::string("start")), p.pack(3);
         p.pack(std::string("end")), p.pack(6);
         p.pack(std::string("outcome")), p.pack(std::string("correct"));
         p.pack(std::string("reward")), p.pack(1.0);
         p.pack(std::string("speedup_eager")), p.pack(1.0);
         p.pack(std::string("speedup_compile")), p.pack_nil();
         p.pack(std::string("compile_ms")), p.pack(1.0);
         p.pack(std::string("run_ms")), p.pack(1.0);
       }},
      {"reward", [](packer& p) { p.pack(1.0); }},
      {"timings",
       [](packer& p) {
         p.pack_map(5);
         for (auto k : {"queue_ms", "policy_ms", "compile_ms", "device_ms", "total_ms"})
           p.pack(std::string(k)), p.pack(0.5);
       }},
  };
}

std::string build(const std::vector<field>& fs) {
  msgpack::sbuffer buf;
  packer p(buf);
  p.pack_map(static_cast<uint32_t>(fs.size()));
  for (const auto& [k, f] : fs) {
    p.pack(k);
    f(p);
  }
  return std::string(buf.data(), buf.size());
}

std::string with(const std::string& key, std::function<void(packer&)> f) {
  auto fs = fields();
  for (auto& [k, g] : fs)
    if (k == key) g = f;
  return build(fs);
}

std::string without(const std::string& key) {
  auto fs = fields();
  fs.erase(std::remove_if(fs.begin(), fs.end(), [&](const field& f) { return f.first == key; }),
           fs.end());
  return build(fs);
}

std::function<void(packer&)> bin_of(std::string b) {
  return [b](packer& p) {
    p.pack_bin(static_cast<uint32_t>(b.size()));
    p.pack_bin_body(b.data(), static_cast<uint32_t>(b.size()));
  };
}

std::string rejected(const std::string& bytes, const trajectory_limits& lim = {}) {
  auto r = decode_trajectory(bytes.data(), bytes.size(), lim);
  REQUIRE_FALSE(r.has_value());
  return r.message();
}

std::function<void(packer&)> turn_with(int64_t start, int64_t end) {
  return [=](packer& p) {
    p.pack_array(1);
    p.pack_map(8);
    p.pack(std::string("start")), p.pack(start);
    p.pack(std::string("end")), p.pack(end);
    p.pack(std::string("outcome")), p.pack(std::string("wrong"));
    p.pack(std::string("reward")), p.pack(-1.0);
    p.pack(std::string("speedup_eager")), p.pack(0.0);
    p.pack(std::string("speedup_compile")), p.pack_nil();
    p.pack(std::string("compile_ms")), p.pack(0.0);
    p.pack(std::string("run_ms")), p.pack(0.0);
  };
}

} // namespace

TEST_CASE("trajectory: round trip keeps every field") {
  auto t = sample();
  auto bytes = encode(t);
  auto r = decode_trajectory(bytes.data(), bytes.size());
  REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.message()));
  CHECK(r->id == t.id);
  CHECK(r->task == t.task);
  CHECK(r->group == t.group);
  CHECK(r->status == episode_status::truncated);
  CHECK(r->policy_version == 4);
  CHECK(r->tokens == t.tokens);
  CHECK(r->loss_mask == t.loss_mask);
  CHECK(r->logprobs == t.logprobs);
  CHECK(r->versions == t.versions);
  REQUIRE(r->turns.size() == 2);
  CHECK(r->turns[0].start == 3);
  CHECK(r->turns[0].end == 6);
  CHECK(r->turns[0].outcome == "correct");
  CHECK(r->turns[0].reward == 2);
  CHECK(r->turns[0].speedup_eager == doctest::Approx(1.3));
  REQUIRE(r->turns[0].speedup_compile.has_value());
  CHECK(*r->turns[0].speedup_compile == doctest::Approx(0.9));
  CHECK(r->turns[0].compile_ms == 410);
  CHECK(r->turns[0].run_ms == 12.5);
  CHECK_FALSE(r->turns[1].speedup_compile.has_value());
  CHECK(r->turns[1].outcome == "compile_error");
  CHECK(r->reward == 2);
  CHECK(r->timings.queue_ms == 1);
  CHECK(r->timings.policy_ms == 2);
  CHECK(r->timings.compile_ms == 3);
  CHECK(r->timings.device_ms == 4);
  CHECK(r->timings.total_ms == 10);
  for (auto s : {episode_status::completed, episode_status::aborted, episode_status::failed}) {
    t.status = s;
    auto b = encode(t);
    auto d = decode_trajectory(b.data(), b.size());
    REQUIRE(d.has_value());
    CHECK(d->status == s);
  }
}

TEST_CASE("trajectory: bins are little-endian on the wire") {
  trajectory t;
  t.tokens = {0x01020304};
  t.loss_mask = {1};
  t.logprobs = {-1.0f}; // 0xbf800000
  t.versions = {0x0a0b0c0d};
  auto bytes = encode(t);
  CHECK(bytes.find(std::string("\x04\x03\x02\x01", 4)) != std::string::npos);
  CHECK(bytes.find(std::string("\x00\x00\x80\xbf", 4)) != std::string::npos);
  CHECK(bytes.find(std::string("\x0d\x0c\x0b\x0a", 4)) != std::string::npos);
  auto r = decode_trajectory(bytes.data(), bytes.size());
  REQUIRE(r.has_value());
  CHECK(r->tokens[0] == 0x01020304);
  CHECK(r->logprobs[0] == -1.0f);
  CHECK(r->versions[0] == 0x0a0b0c0d);
}

TEST_CASE("trajectory: the hand-built message decodes and unknown keys are ignored") {
  auto fs = fields();
  auto r0 = decode_trajectory(build(fs).data(), build(fs).size());
  REQUIRE_MESSAGE(r0.has_value(), (r0 ? "" : r0.message()));
  fs.push_back({"future_field", [](packer& p) { p.pack_array(2), p.pack(1), p.pack(2); }});
  auto b = build(fs);
  auto r = decode_trajectory(b.data(), b.size());
  REQUIRE(r.has_value());
  CHECK(r->tokens.size() == 8);
}

TEST_CASE("trajectory: every missing key is named") {
  for (auto k : {"v", "id", "task", "group", "status", "policy_version", "tokens", "loss_mask",
                 "logprobs", "versions", "turns", "reward", "timings"}) {
    CAPTURE(k);
    CHECK(rejected(without(k)).find(std::string("missing key '") + k + "'") != std::string::npos);
  }
}

TEST_CASE("trajectory: rejections name the field") {
  struct bad {
    std::string bytes, needle;
  };
  auto pack_str = [](std::string s) { return [s](packer& p) { p.pack(s); }; };
  auto f32 = [](std::vector<float> v) { return bin(v.data(), v.size() * 4); };
  auto i32 = [](std::vector<int32_t> v) { return bin(v.data(), v.size() * 4); };
  std::vector<bad> cases = {
      {with("v", [](packer& p) { p.pack(2); }), "unsupported version v=2"},
      {with("id", [](packer& p) { p.pack(7); }), "'id' must be a string"},
      {with("status", pack_str("done")), "unknown status 'done'"},
      {with("policy_version", [](packer& p) { p.pack(1.5); }),
       "'policy_version' must be an integer"},
      {with("tokens", pack_str("abc")), "'tokens' must be bin"},
      {with("tokens", bin_of(std::string(7, '\0'))), "not a multiple of 4"},
      {with("loss_mask", bin_of(std::string(7, '\0'))), "'loss_mask' has 7 bytes, expected 8"},
      {with("logprobs", bin_of(std::string(28, '\0'))), "'logprobs' has 28 bytes, expected 32"},
      {with("versions", bin_of(std::string(36, '\0'))), "'versions' has 36 bytes, expected 32"},
      {with("loss_mask", bin_of(std::string("\0\0\0\1\1\2\0\0", 8))), "loss_mask[5] = 2"},
      {with("logprobs", bin_of(f32({0, 0, 0, -0.5f, 0.25f, 0, 0, 0}))),
       "logprobs[4] = 0.250000 on a model token"},
      {with("logprobs", bin_of(f32({0, 0, 0, -0.5f, NAN, 0, 0, 0}))), "logprobs[4]"},
      {with("logprobs", bin_of(f32({0, -0.5f, 0, -0.5f, -1, 0, 0, 0}))),
       "logprobs[1] = -0.500000 where loss_mask is 0"},
      {with("versions", bin_of(i32({-1, -1, 0, 4, 5, 5, -1, -1}))),
       "versions[2] = 0 where loss_mask is 0"},
      {with("versions", bin_of(i32({-1, -1, -1, -1, 5, 5, -1, -1}))),
       "versions[3] = -1 on a model token"},
      {with("turns", turn_with(3, 9)), "turns[0].start/end = [3, 9) is outside the context"},
      {with("turns", turn_with(5, 4)), "outside the context"},
      {with("turns", turn_with(-1, 4)), "outside the context"},
      {with("turns", [](packer& p) { p.pack(1); }), "'turns' must be an array"},
      {with("turns", [](packer& p) { p.pack_array(1), p.pack(1); }), "turns[0] must be a map"},
      {with("reward", pack_str("high")), "'reward' must be a number"},
      {with("reward", [](packer& p) { p.pack(std::nan("")); }), "'reward' must be finite"},
      {with("timings", [](packer& p) { p.pack_map(0); }), "missing key 'timings.queue_ms'"},
      {build({}), "missing key 'v'"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.needle);
    auto m = rejected(c.bytes);
    CHECK_MESSAGE(m.find(c.needle) != std::string::npos, m);
    CHECK(m.rfind("trajectory: ", 0) == 0);
  }
}

TEST_CASE(
    "trajectory: hostile and malformed bytes are errors, not exceptions or huge allocations") {
  auto good = build(fields());
  CHECK(rejected(good + "x").find("1 trailing bytes") != std::string::npos);
  CHECK(rejected(good.substr(0, good.size() / 2)).find("truncated") != std::string::npos);
  CHECK(rejected("").find("truncated") != std::string::npos);
  // An array header claiming 2^28 elements in 5 bytes.
  CHECK(rejected(std::string("\xdd\x10\x00\x00\x00", 5)).find("over the decoder's limits") !=
        std::string::npos);
  // A map nested far deeper than the schema.
  CHECK(rejected(std::string(64, '\x81')).size() > 0);
  CHECK(rejected(std::string("\x93\x01\x02\x03", 4)).find("must be a map") != std::string::npos);
  CHECK(rejected(std::string("\xc1", 1)).find("malformed") != std::string::npos);
  trajectory_limits small;
  small.max_bytes = 16;
  CHECK(rejected(good, small).find("exceeds the limit of 16") != std::string::npos);
  trajectory_limits few;
  few.max_tokens = 4;
  CHECK(rejected(good, few).find("over the decoder's limits") != std::string::npos);
  CHECK(rejected(good, few).find("max_tokens") !=
        std::string::npos); // names the knob // bins over 16 bytes
  trajectory_limits vocab;
  vocab.vocab_size = 75;
  CHECK(rejected(good, vocab).find("tokens[6] = 80 is outside the vocabulary [0, 75)") !=
        std::string::npos);
  trajectory_limits turns;
  turns.max_turns = 0;
  CHECK(rejected(good, turns).find("entries, limit 0") != std::string::npos);
  // Random corruption never throws.
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < 2000; ++i) {
    auto b = good;
    for (int k = 0; k < 3; ++k) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      b[x % b.size()] = static_cast<char>(x >> 32);
    }
    CHECK_NOTHROW(decode_trajectory(b.data(), b.size()));
  }
}

TEST_CASE("trajectory: an LLM episode's messages, model and endpoint kind round trip") {
  auto t = sample();
  t.messages = {
      {"system", "the skill"}, {"user", "Task `relu`"}, {"assistant", std::string(9000, 'x')}};
  t.model = "qwen3-8b";
  t.api = "vllm";
  auto bytes = encode(t);
  auto r = decode_trajectory(bytes.data(), bytes.size());
  REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.message()));
  REQUIRE(r->messages.size() == 3);
  CHECK(r->messages[0].role == "system");
  CHECK(r->messages[1].content == "Task `relu`");
  CHECK(r->messages[2].content.size() == 9000); // past max_string: contents have max_text
  CHECK(r->model == "qwen3-8b");
  CHECK(r->api == "vllm");
  CHECK(r->tokens == t.tokens);
  // A token-policy trajectory carries none of the three keys.
  auto plain = encode(sample());
  auto m = msgpack::unpack(plain.data(), plain.size());
  CHECK(m.get().via.map.size == 13);
}

TEST_CASE("trajectory: an LLM message with a bad role or an oversized name is refused") {
  auto t = sample();
  t.messages = {{"tool", "x"}};
  auto b = encode(t);
  auto r = decode_trajectory(b.data(), b.size());
  REQUIRE_FALSE(r.has_value());
  CHECK(r.message().find("messages[0].role") != std::string::npos);
  t.messages = {{"user", "x"}};
  t.model = std::string(5000, 'm');
  b = encode(t);
  r = decode_trajectory(b.data(), b.size());
  REQUIRE_FALSE(r.has_value());
  CHECK(r.message().find("limit 4096") != std::string::npos);
  trajectory_limits lim;
  lim.max_text = 100;
  t.model = "m";
  t.messages = {{"user", std::string(200, 'y')}};
  b = encode(t);
  r = decode_trajectory(b.data(), b.size(), lim);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.message().find("messages[0].content has 200 bytes, limit 100") != std::string::npos);
}
