// The learner's intake: strict decode + consistency checks, counting and never crashing on
// hostile frames (a million random and mutated frames), and the ZeroMQ PULL thread.
#include "learner/intake.hpp"
#include "rollout/token_space.hpp"

#include <doctest/doctest.h>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include <chrono>
#include <random>
#include <thread>

using namespace kiln;

namespace {

trajectory valid_trajectory(int turns = 3, int program_len = 40) {
  trajectory t;
  t.id = "ep-1";
  t.task = "relu";
  t.group = "g";
  t.policy_version = 2;
  t.tokens = {token_of(special_token::bos), token_of(special_token::task_end)};
  for (int k = 0; k < turns; ++k) {
    t.tokens.push_back(token_of(special_token::program));
    turn_record r;
    r.start = static_cast<int32_t>(t.tokens.size());
    for (int i = 0; i < program_len; ++i) t.tokens.push_back(i % program_token_count());
    r.end = static_cast<int32_t>(t.tokens.size());
    r.outcome = "correct";
    r.reward = 1;
    r.speedup_eager = 1.2;
    t.turns.push_back(r);
    t.tokens.push_back(token_of(special_token::obs));
    t.tokens.push_back(token_of(special_token::obs_end));
  }
  t.loss_mask.assign(t.tokens.size(), 0);
  t.logprobs.assign(t.tokens.size(), 0.0f);
  t.versions.assign(t.tokens.size(), -1);
  for (const auto& r : t.turns)
    for (int32_t i = r.start; i < r.end; ++i) {
      t.loss_mask[static_cast<size_t>(i)] = 1;
      t.logprobs[static_cast<size_t>(i)] = -0.5f;
      t.versions[static_cast<size_t>(i)] = 3;
    }
  t.reward = 1;
  return t;
}

trajectory_limits limits() {
  trajectory_limits l;
  l.vocab_size = vocab_size();
  l.max_tokens = 4096;
  return l;
}

} // namespace

TEST_CASE("intake: a valid frame is accepted and equals what was sent") {
  auto q = std::make_shared<trajectory_queue>();
  intake in(limits(), q);
  auto t = valid_trajectory();
  auto bytes = encode(t);
  auto got = in.accept_frame(bytes.data(), bytes.size());
  REQUIRE(got);
  CHECK(got->tokens == t.tokens);
  CHECK(got->loss_mask == t.loss_mask);
  CHECK(in.stats().accepted == 1);
  CHECK(in.stats().rejected == 0);
}

TEST_CASE("intake: inconsistent frames are rejected and counted by reason") {
  spdlog::set_level(spdlog::level::err);
  auto q = std::make_shared<trajectory_queue>();
  intake in(limits(), q);
  auto send = [&](const trajectory& t) {
    auto b = encode(t);
    return in.accept_frame(b.data(), b.size()).has_value();
  };
  auto t = valid_trajectory();
  t.tokens[t.turns[0].start] = token_of(special_token::obs); // model token not a program token
  CHECK_FALSE(send(t));
  t = valid_trajectory();
  t.versions[static_cast<size_t>(t.turns[0].start)] = 1; // older than policy_version 2
  CHECK_FALSE(send(t));
  t = valid_trajectory();
  std::fill(t.loss_mask.begin(), t.loss_mask.end(), 0);
  std::fill(t.logprobs.begin(), t.logprobs.end(), 0.0f);
  std::fill(t.versions.begin(), t.versions.end(), -1);
  CHECK_FALSE(send(t)); // nothing to learn from
  t = valid_trajectory();
  t.turns[1].end = t.turns[1].start + 5; // model tokens outside every turn
  CHECK_FALSE(send(t));
  t = valid_trajectory();
  t.id.clear();
  CHECK_FALSE(send(t));
  CHECK(send(valid_trajectory()));
  auto st = in.stats();
  CHECK(st.frames == 6);
  CHECK(st.rejected == 5);
  CHECK(st.accepted == 1);
  CHECK(st.reasons.size() >= 4);
}

TEST_CASE("intake fuzz: a million malformed frames, no crash, every frame counted") {
  spdlog::set_level(spdlog::level::err);
  auto q = std::make_shared<trajectory_queue>();
  intake in(limits(), q);
  std::vector<std::string> seeds;
  for (int turns : {1, 3}) seeds.push_back(encode(valid_trajectory(turns, 12)));
  std::mt19937_64 rng(12345);
  const int n = 1000000;
  std::string buf;
  uint64_t accepted = 0;
  for (int i = 0; i < n; ++i) {
    switch (i % 4) {
    case 0: { // random bytes, sometimes starting like a msgpack map
      buf.resize(rng() % 96);
      for (auto& c : buf) c = static_cast<char>(rng());
      if (!buf.empty() && (rng() & 1)) buf[0] = static_cast<char>(0x80 | (rng() % 16));
      break;
    }
    case 1: { // a valid frame with a few bytes flipped
      buf = seeds[rng() % seeds.size()];
      for (int k = 0, m = 1 + static_cast<int>(rng() % 4); k < m; ++k)
        buf[rng() % buf.size()] = static_cast<char>(rng());
      break;
    }
    case 2: { // truncated or extended
      buf = seeds[rng() % seeds.size()];
      if (rng() & 1)
        buf.resize(rng() % buf.size());
      else
        buf.append(1 + rng() % 8, static_cast<char>(rng()));
      break;
    }
    default: { // a length / count byte blown up (huge claims must not allocate)
      buf = seeds[rng() % seeds.size()];
      auto at = rng() % buf.size();
      const char big[] = {'\xdd', '\x7f', '\xff', '\xff', '\xff'};
      buf.replace(at, std::min<size_t>(5, buf.size() - at), big, 5);
      break;
    }
    }
    if (in.accept_frame(buf.data(), buf.size())) ++accepted;
  }
  auto st = in.stats();
  CHECK(st.frames == static_cast<uint64_t>(n));
  CHECK(st.accepted + st.rejected == st.frames);
  CHECK(st.accepted == accepted);
  CHECK(st.rejected > static_cast<uint64_t>(n) * 9 / 10);
  // Still healthy afterwards.
  auto good = encode(valid_trajectory());
  CHECK(in.accept_frame(good.data(), good.size()));
}

TEST_CASE("intake: the PULL thread queues good frames and survives bad ones") {
  spdlog::set_level(spdlog::level::err);
  auto q = std::make_shared<trajectory_queue>(16);
  intake in(limits(), q);
  const std::string ep = "ipc:///tmp/kiln-test-intake-" + std::to_string(::getpid());
  REQUIRE(in.start(ep));
  zmq::context_t ctx;
  zmq::socket_t push(ctx, zmq::socket_type::push);
  push.connect(ep);
  auto t = valid_trajectory();
  for (int i = 0; i < 5; ++i) {
    t.id = "ep-" + std::to_string(i);
    auto b = encode(t);
    push.send(zmq::buffer(b));
    push.send(zmq::str_buffer("garbage"));
  }
  std::vector<trajectory> got;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (got.size() < 5 && std::chrono::steady_clock::now() < until)
    if (auto x = q->pop(std::chrono::milliseconds(50))) got.push_back(std::move(*x));
  REQUIRE(got.size() == 5);
  CHECK(got[4].id == "ep-4");
  until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (in.stats().rejected < 5 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(in.stats().rejected == 5);
  in.stop();
}
