// Trajectory stream v1 codec. Bins are written little-endian byte by byte so the wire form does not
// depend on the host; the decoder checks every type and every cross-field invariant, so a learner
// can count and skip a bad message instead of training on it.
#include "rollout/trajectory.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <msgpack.hpp>

namespace kiln {

const char* to_string(episode_status s) {
  switch (s) {
  case episode_status::completed: return "completed";
  case episode_status::truncated: return "truncated";
  case episode_status::aborted: return "aborted";
  case episode_status::failed: return "failed";
  }
  return "?";
}

namespace {

constexpr int64_t wire_version = 1;
using packer = msgpack::packer<msgpack::sbuffer>;

void key(packer& p, const char* k) { p.pack(std::string_view(k)); }

void put_u32(char* out, uint32_t v) {
  out[0] = static_cast<char>(v & 0xff);
  out[1] = static_cast<char>((v >> 8) & 0xff);
  out[2] = static_cast<char>((v >> 16) & 0xff);
  out[3] = static_cast<char>((v >> 24) & 0xff);
}
uint32_t get_u32(const char* in) {
  auto b = reinterpret_cast<const unsigned char*>(in);
  return uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
}

template <class T>
void pack_bin32(packer& p, const std::vector<T>& v) {
  static_assert(sizeof(T) == 4, "32-bit elements");
  std::string bytes(v.size() * 4, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    put_u32(&bytes[i * 4], u);
  }
  p.pack_bin(static_cast<uint32_t>(bytes.size()));
  p.pack_bin_body(bytes.data(), static_cast<uint32_t>(bytes.size()));
}

struct decode_error {
  std::string message;
};
[[noreturn]] void fail(const std::string& m) { throw decode_error{"trajectory: " + m}; }

const msgpack::object* find(const msgpack::object_map& m, std::string_view k) {
  for (uint32_t i = 0; i < m.size; ++i) {
    const auto& kv = m.ptr[i];
    if (kv.key.type == msgpack::type::STR &&
        std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == k)
      return &kv.val;
  }
  return nullptr;
}

const msgpack::object_map& as_map(const msgpack::object& o, const std::string& what) {
  if (o.type != msgpack::type::MAP) fail(what + " must be a map");
  return o.via.map;
}

const msgpack::object& need(const msgpack::object_map& m, std::string_view k,
                            const std::string& where) {
  auto* o = find(m, k);
  if (!o) fail("missing key '" + where + std::string(k) + "'");
  return *o;
}

std::string get_str(const msgpack::object_map& m, std::string_view k,
                    const std::string& where = {}) {
  const auto& o = need(m, k, where);
  if (o.type != msgpack::type::STR) fail("'" + where + std::string(k) + "' must be a string");
  return std::string(o.via.str.ptr, o.via.str.size);
}

int64_t get_int(const msgpack::object_map& m, std::string_view k, const std::string& where = {}) {
  const auto& o = need(m, k, where);
  if (o.type == msgpack::type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<uint64_t>(INT64_MAX))
      fail("'" + where + std::string(k) + "' is out of int64 range");
    return static_cast<int64_t>(o.via.u64);
  }
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return o.via.i64;
  fail("'" + where + std::string(k) + "' must be an integer");
}

double number(const msgpack::object& o, const std::string& name) {
  double v = 0;
  switch (o.type) {
  case msgpack::type::FLOAT32:
  case msgpack::type::FLOAT64: v = o.via.f64; break;
  case msgpack::type::POSITIVE_INTEGER: v = static_cast<double>(o.via.u64); break;
  case msgpack::type::NEGATIVE_INTEGER: v = static_cast<double>(o.via.i64); break;
  default: fail("'" + name + "' must be a number");
  }
  if (!std::isfinite(v)) fail("'" + name + "' must be finite");
  return v;
}

double get_num(const msgpack::object_map& m, std::string_view k, const std::string& where = {}) {
  return number(need(m, k, where), where + std::string(k));
}

std::string_view get_bin(const msgpack::object_map& m, std::string_view k) {
  const auto& o = need(m, k, {});
  if (o.type != msgpack::type::BIN) fail("'" + std::string(k) + "' must be bin");
  return {o.via.bin.ptr, o.via.bin.size};
}

template <class T>
std::vector<T> bin32(std::string_view b, size_t n, const char* name) {
  if (b.size() != n * 4)
    fail(std::string("'") + name + "' has " + std::to_string(b.size()) + " bytes, expected " +
         std::to_string(n * 4) + " (4 per token)");
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t u = get_u32(b.data() + i * 4);
    std::memcpy(&v[i], &u, 4);
  }
  return v;
}

trajectory decode_map(const msgpack::object& root, const trajectory_limits& lim) {
  const auto& m = as_map(root, "the message");
  int64_t v = get_int(m, "v");
  if (v != wire_version) fail("unsupported version v=" + std::to_string(v));
  trajectory t;
  t.id = get_str(m, "id");
  t.task = get_str(m, "task");
  t.group = get_str(m, "group");
  std::string st = get_str(m, "status");
  bool known = false;
  for (auto s : {episode_status::completed, episode_status::truncated, episode_status::aborted,
                 episode_status::failed})
    if (st == to_string(s)) t.status = s, known = true;
  if (!known) fail("unknown status '" + st + "'");
  t.policy_version = get_int(m, "policy_version");

  auto tok = get_bin(m, "tokens");
  if (tok.size() % 4 != 0)
    fail("'tokens' has " + std::to_string(tok.size()) + " bytes, not a multiple of 4");
  size_t n = tok.size() / 4;
  if (n > lim.max_tokens)
    fail("'tokens' has " + std::to_string(n) + " tokens, limit " + std::to_string(lim.max_tokens));
  t.tokens = bin32<int32_t>(tok, n, "tokens");
  auto mask = get_bin(m, "loss_mask");
  if (mask.size() != n)
    fail("'loss_mask' has " + std::to_string(mask.size()) + " bytes, expected " +
         std::to_string(n) + " (one per token)");
  t.loss_mask.assign(mask.begin(), mask.end());
  t.logprobs = bin32<float>(get_bin(m, "logprobs"), n, "logprobs");
  t.versions = bin32<int32_t>(get_bin(m, "versions"), n, "versions");
  for (size_t i = 0; i < n; ++i) {
    auto at = [&](const char* f) { return std::string(f) + "[" + std::to_string(i) + "]"; };
    if (lim.vocab_size > 0 && (t.tokens[i] < 0 || t.tokens[i] >= lim.vocab_size))
      fail(at("tokens") + " = " + std::to_string(t.tokens[i]) + " is outside the vocabulary [0, " +
           std::to_string(lim.vocab_size) + ")");
    uint8_t lm = t.loss_mask[i];
    if (lm > 1) fail(at("loss_mask") + " = " + std::to_string(lm) + ", expected 0 or 1");
    float lp = t.logprobs[i];
    if (lm == 1) {
      if (!std::isfinite(lp) || lp > 0)
        fail(at("logprobs") + " = " + std::to_string(lp) +
             " on a model token: must be finite and <= 0");
      if (t.versions[i] < 0)
        fail(at("versions") + " = " + std::to_string(t.versions[i]) +
             " on a model token: must be >= 0");
    } else {
      if (lp != 0) fail(at("logprobs") + " = " + std::to_string(lp) + " where loss_mask is 0");
      if (t.versions[i] != -1)
        fail(at("versions") + " = " + std::to_string(t.versions[i]) +
             " where loss_mask is 0 (expected -1)");
    }
  }

  const auto& turns = need(m, "turns", {});
  if (turns.type != msgpack::type::ARRAY) fail("'turns' must be an array");
  if (turns.via.array.size > lim.max_turns)
    fail("'turns' has " + std::to_string(turns.via.array.size) + " entries, limit " +
         std::to_string(lim.max_turns));
  t.turns.reserve(turns.via.array.size);
  for (uint32_t i = 0; i < turns.via.array.size; ++i) {
    std::string where = "turns[" + std::to_string(i) + "].";
    const auto& tm = as_map(turns.via.array.ptr[i], "turns[" + std::to_string(i) + "]");
    turn_record r;
    int64_t s = get_int(tm, "start", where), e = get_int(tm, "end", where);
    if (s < 0 || e < s || e > static_cast<int64_t>(n))
      fail(where + "start/end = [" + std::to_string(s) + ", " + std::to_string(e) +
           ") is outside the context of " + std::to_string(n) + " tokens");
    r.start = static_cast<int32_t>(s);
    r.end = static_cast<int32_t>(e);
    r.outcome = get_str(tm, "outcome", where);
    if (r.outcome.size() > lim.max_string)
      fail("'" + where + "outcome' has " + std::to_string(r.outcome.size()) + " bytes, limit " +
           std::to_string(lim.max_string));
    r.reward = get_num(tm, "reward", where);
    r.speedup_eager = get_num(tm, "speedup_eager", where);
    const auto& sc = need(tm, "speedup_compile", where);
    if (sc.type != msgpack::type::NIL) r.speedup_compile = number(sc, where + "speedup_compile");
    r.compile_ms = get_num(tm, "compile_ms", where);
    r.run_ms = get_num(tm, "run_ms", where);
    t.turns.push_back(std::move(r));
  }
  t.reward = get_num(m, "reward");
  const auto& tim = as_map(need(m, "timings", {}), "'timings'");
  t.timings.queue_ms = get_num(tim, "queue_ms", "timings.");
  t.timings.policy_ms = get_num(tim, "policy_ms", "timings.");
  t.timings.compile_ms = get_num(tim, "compile_ms", "timings.");
  t.timings.device_ms = get_num(tim, "device_ms", "timings.");
  t.timings.total_ms = get_num(tim, "total_ms", "timings.");
  if (const auto* msgs = find(m, "messages")) {
    if (msgs->type != msgpack::type::ARRAY) fail("'messages' must be an array");
    for (uint32_t i = 0; i < msgs->via.array.size; ++i) {
      std::string where = "messages[" + std::to_string(i) + "].";
      const auto& mm = as_map(msgs->via.array.ptr[i], "messages[" + std::to_string(i) + "]");
      message_record r{get_str(mm, "role", where), get_str(mm, "content", where)};
      if (r.content.size() > lim.max_text)
        fail(where + "content has " + std::to_string(r.content.size()) + " bytes, limit " +
             std::to_string(lim.max_text));
      if (r.role != "system" && r.role != "user" && r.role != "assistant")
        fail("'" + where + "role' = '" + r.role + "': expected system, user or assistant");
      t.messages.push_back(std::move(r));
    }
  }
  if (find(m, "model")) t.model = get_str(m, "model");
  if (find(m, "api")) t.api = get_str(m, "api");
  if (find(m, "answer_format")) t.answer_format = get_str(m, "answer_format");
  for (const auto* s : {&t.id, &t.task, &t.group, &t.model, &t.api, &t.answer_format})
    if (s->size() > lim.max_string)
      fail("a name of " + std::to_string(s->size()) + " bytes, limit " +
           std::to_string(lim.max_string));
  return t;
}

} // namespace

std::string encode(const trajectory& t) {
  size_t text = 0;
  for (const auto& m : t.messages) text += m.content.size() + 32;
  msgpack::sbuffer buf(64 + t.tokens.size() * 13 + t.turns.size() * 160 + text);
  packer p(buf);
  bool llm = !t.messages.empty() || !t.model.empty() || !t.api.empty();
  p.pack_map(llm ? 17 : 13);
  key(p, "v");
  p.pack(wire_version);
  key(p, "id");
  p.pack(t.id);
  key(p, "task");
  p.pack(t.task);
  key(p, "group");
  p.pack(t.group);
  key(p, "status");
  p.pack(std::string_view(to_string(t.status)));
  key(p, "policy_version");
  p.pack(t.policy_version);
  key(p, "tokens");
  pack_bin32(p, t.tokens);
  key(p, "loss_mask");
  p.pack_bin(static_cast<uint32_t>(t.loss_mask.size()));
  p.pack_bin_body(reinterpret_cast<const char*>(t.loss_mask.data()),
                  static_cast<uint32_t>(t.loss_mask.size()));
  key(p, "logprobs");
  pack_bin32(p, t.logprobs);
  key(p, "versions");
  pack_bin32(p, t.versions);
  key(p, "turns");
  p.pack_array(static_cast<uint32_t>(t.turns.size()));
  for (const auto& r : t.turns) {
    p.pack_map(8);
    key(p, "start");
    p.pack(r.start);
    key(p, "end");
    p.pack(r.end);
    key(p, "outcome");
    p.pack(r.outcome);
    key(p, "reward");
    p.pack(r.reward);
    key(p, "speedup_eager");
    p.pack(r.speedup_eager);
    key(p, "speedup_compile");
    if (r.speedup_compile)
      p.pack(*r.speedup_compile);
    else
      p.pack_nil();
    key(p, "compile_ms");
    p.pack(r.compile_ms);
    key(p, "run_ms");
    p.pack(r.run_ms);
  }
  key(p, "reward");
  p.pack(t.reward);
  key(p, "timings");
  p.pack_map(5);
  key(p, "queue_ms");
  p.pack(t.timings.queue_ms);
  key(p, "policy_ms");
  p.pack(t.timings.policy_ms);
  key(p, "compile_ms");
  p.pack(t.timings.compile_ms);
  key(p, "device_ms");
  p.pack(t.timings.device_ms);
  key(p, "total_ms");
  p.pack(t.timings.total_ms);
  if (llm) {
    key(p, "messages");
    p.pack_array(static_cast<uint32_t>(t.messages.size()));
    for (const auto& m : t.messages) {
      p.pack_map(2);
      key(p, "role");
      p.pack(m.role);
      key(p, "content");
      p.pack(m.content);
    }
    key(p, "model");
    p.pack(t.model);
    key(p, "api");
    p.pack(t.api);
    key(p, "answer_format");
    p.pack(t.answer_format);
  }
  return std::string(buf.data(), buf.size());
}

expected<trajectory> decode_trajectory(const char* data, size_t size,
                                       const trajectory_limits& limits) {
  if (size > limits.max_bytes)
    return error{"trajectory: message of " + std::to_string(size) + " bytes exceeds the limit of " +
                 std::to_string(limits.max_bytes)};
  try {
    // Sized to the schema: the top map has 13 keys, 16 with an LLM's (64 allows forward-compatible
    // extras), arrays are `turns` and `messages` (two per turn and the prompt's two), bins are at
    // most 4 bytes per token, nesting is map > turns / messages > map. Strings may be message
    // contents; names are checked against max_string after unpacking.
    size_t max_bin = limits.max_tokens > (SIZE_MAX / 4) ? SIZE_MAX : limits.max_tokens * 4;
    size_t max_array = limits.max_turns > (SIZE_MAX - 2) / 2 ? SIZE_MAX : 2 * limits.max_turns + 2;
    msgpack::unpack_limit lim(/*array*/ max_array, /*map*/ 64,
                              /*str*/ std::max(limits.max_string, limits.max_text),
                              /*bin*/ max_bin, /*ext*/ 0, /*depth*/ 4);
    size_t off = 0;
    auto handle = msgpack::unpack(data, size, off, nullptr, nullptr, lim);
    if (off != size)
      return error{"trajectory: " + std::to_string(size - off) +
                   " trailing bytes after the message"};
    return decode_map(handle.get(), limits);
  } catch (const decode_error& e) {
    return error{e.message};
  } catch (const msgpack::insufficient_bytes&) {
    return error{"trajectory: truncated msgpack"};
  } catch (const msgpack::size_overflow& e) {
    // Name the limits: a context longer than the learner's model (max_tokens = model.max_len)
    // lands here, and "bin size overflow" alone does not tell a user which knob to turn.
    return error{std::string("trajectory: over the decoder's limits (") + e.what() +
                 "; max_tokens " + std::to_string(limits.max_tokens) + ", max_turns " +
                 std::to_string(limits.max_turns) + ", max_string " +
                 std::to_string(limits.max_string) + ")"};
  } catch (const msgpack::unpack_error& e) {
    return error{std::string("trajectory: malformed msgpack (") + e.what() + ")"};
  } catch (const msgpack::type_error&) {
    return error{"trajectory: msgpack type error"};
  } catch (const std::bad_alloc&) {
    return error{"trajectory: out of memory while unpacking"};
  } catch (const std::exception& e) {
    return error{std::string("trajectory: ") + e.what()};
  }
}

} // namespace kiln
