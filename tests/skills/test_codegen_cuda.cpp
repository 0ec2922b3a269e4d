// The cuda backend's compile side, without a GPU: every gpu suite task's expert program and a few
// hundred random masked programs go through generate_cuda -> check_plan -> NVRTC (sm_90), and the
// plan's kernels must exist in the PTX. Launch and correctness need the device (see the report).
#include "data/task_check.hpp"
#include "data/task_parse.hpp"
#include "data/task_set.hpp"
#include "skills/codegen_cuda.hpp"
#include "skills/expert.hpp"
#include "skills/grammar.hpp"
#include "skills/launch_plan.hpp"
#include "skills/nvrtc_compiler.hpp"

#include <algorithm>
#include <atomic>
#include <doctest/doctest.h>
#include <mutex>
#include <random>
#include <thread>

using namespace kiln;

namespace {

const task_set& suites() {
  static const task_set s = load_tasks({KILN_SOURCE_DIR "/data/suites/level1/gpu",
                                        KILN_SOURCE_DIR "/data/suites/level2/gpu",
                                        KILN_SOURCE_DIR "/data/suites/level3/gpu"});
  return s;
}

// Every kernel step of the plan names an .entry of the PTX.
std::string missing_entry(const cuda_program& cp, const std::string& ptx) {
  for (const auto& s : cp.plan.steps)
    if (s.k == plan_step::kind::kernel &&
        ptx.find(".entry " + s.kernel.kernel + "(") == std::string::npos)
      return s.kernel.kernel;
  return "";
}

struct outcome {
  enum class stage { generate, plan, compile, ok } at = stage::generate;
  std::string message;
};

outcome build(const task& t, const program& p) {
  outcome r;
  auto cp = generate_cuda(t, p);
  if (!cp) {
    r.message = cp.message();
    return r;
  }
  r.at = outcome::stage::plan;
  if (auto st = check_plan(cp->plan); !st) {
    r.message = st.message();
    return r;
  }
  auto back = plan_from_json(to_json(cp->plan));
  if (!back || to_json(*back) != to_json(cp->plan)) {
    r.message = "plan does not survive its JSON round trip";
    return r;
  }
  r.at = outcome::stage::compile;
  nvrtc_options o;
  o.fast_math = cp->fast_math;
  auto art = compile_nvrtc(cp->source, o);
  if (!art) {
    r.message = art.message();
    return r;
  }
  if (auto k = missing_entry(*cp, art->ptx); !k.empty()) {
    r.message = "kernel " + k + " is not in the PTX";
    return r;
  }
  r.at = outcome::stage::ok;
  return r;
}

// Runs f(i) for i in [0, n) on two threads (NVRTC is thread-safe; the machine has two cores).
template <class F>
void parallel(std::size_t n, F f) {
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i; (i = next++) < n;) f(i);
  };
  std::thread a(work);
  work();
  a.join();
}

void check_suite_level(int level) {
  std::vector<const task*> tasks;
  for (const auto& t : suites().tasks)
    if (t.level == level) tasks.push_back(&t);
  std::vector<outcome> results(tasks.size());
  parallel(tasks.size(), [&](std::size_t i) {
    results[i] = build(*tasks[i], expert_program(*tasks[i], backend_kind::cuda));
  });
  int good = 0;
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    CHECK_MESSAGE(results[i].at == outcome::stage::ok,
                  tasks[i]->name << ": " << results[i].message);
    good += results[i].at == outcome::stage::ok;
  }
  MESSAGE("level " << level << ": " << good << " / " << tasks.size()
                   << " expert programs generate, plan and compile for sm_90");
  CHECK(!tasks.empty());
}

task make_task(const std::string& body) {
  auto t = task_from_toml("level = 1\n" + body, "inline.toml");
  REQUIRE_MESSAGE(t.has_value(), (t ? "" : t.message()));
  auto st = check_task(*t);
  REQUIRE_MESSAGE(st.has_value(), (st ? "" : st.message()));
  return *t;
}

} // namespace

TEST_CASE("the suites load") {
  CHECK(suites().errors.empty());
  CHECK(suites().tasks.size() > 100);
}

TEST_CASE("expert programs compile on the level 1 gpu suite") { check_suite_level(1); }
TEST_CASE("expert programs compile on the level 2 gpu suite") { check_suite_level(2); }
TEST_CASE("expert programs compile on the level 3 gpu suite") { check_suite_level(3); }

TEST_CASE("random masked programs never crash the generator") {
  const auto& ts = suites().tasks;
  REQUIRE(!ts.empty());
  constexpr std::size_t n = 300;
  std::vector<std::pair<const task*, program>> progs;
  std::mt19937_64 rng(20260417);
  for (std::size_t i = 0; i < n; ++i) {
    const task& t = ts[rng() % ts.size()];
    auto p = parse_program(tokens_to_text(sample_program(t, rng)));
    REQUIRE_MESSAGE(p.has_value(), t.name);
    progs.emplace_back(&t, *p);
  }
  std::vector<outcome> results(n);
  parallel(n, [&](std::size_t i) { results[i] = build(*progs[i].first, progs[i].second); });
  int generated = 0, compiled = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& r = results[i];
    if (r.at != outcome::stage::generate) ++generated;
    if (r.at == outcome::stage::ok) ++compiled;
    // A checked program must always generate and plan; only resource limits may stop NVRTC.
    CHECK_MESSAGE(r.at != outcome::stage::generate,
                  progs[i].first->name << " [" << print(progs[i].second) << "]: " << r.message);
    CHECK_MESSAGE(r.at != outcome::stage::plan,
                  progs[i].first->name << " [" << print(progs[i].second) << "]: " << r.message);
    if (r.at == outcome::stage::compile)
      MESSAGE("compile failed: " << progs[i].first->name << " [" << print(progs[i].second)
                                 << "]: " << r.message.substr(0, 600));
  }
  MESSAGE(n << " random programs: " << generated << " generated (" << 100.0 * generated / n
            << "%), " << compiled << " compiled (" << 100.0 * compiled / n << "%)");
}

TEST_CASE("non-float32 tasks are refused with the dtype named") {
  task t = make_task(R"(
name = "half_relu"
dtype = "float16"
outputs = ["y"]
[[inputs]]
name = "x"
shape = [4, 8]
[[ops]]
out = "y"
op = "relu"
args = ["x"]
)");
  auto cp = generate_cuda(t, expert_program(t, backend_kind::cuda));
  REQUIRE(!cp);
  CHECK(cp.message().find("float16") != std::string::npos);
}

TEST_CASE("plans: views and int64 results") {
  task t = make_task(R"(
name = "mixed"
dtype = "float32"
outputs = ["r", "m", "s"]
[[inputs]]
name = "x"
shape = [6, 10]
[[ops]]
out = "v"
op = "reshape"
args = ["x"]
attrs = { shape = [10, 6] }
[[ops]]
out = "r"
op = "relu"
args = ["v"]
[[ops]]
out = "m"
op = "argmax"
args = ["r"]
attrs = { dim = 1 }
[[ops]]
out = "s"
op = "softmax"
args = ["r"]
attrs = { dim = 0 }
)");
  auto cp = generate_cuda(t, expert_program(t, backend_kind::cuda));
  REQUIRE_MESSAGE(cp.has_value(), (cp ? "" : cp.message()));
  CHECK(check_plan(cp->plan).has_value());
  CHECK(cp->plan.output_bytes == std::vector<int64_t>{240, 80, 240});
  auto art = compile_nvrtc(cp->source);
  REQUIRE_MESSAGE(art.has_value(), (art ? "" : art.message()));
  CHECK(missing_entry(*cp, art->ptx).empty());
  // The reshape is a view: the relu reads input 0 directly.
  CHECK(cp->plan.steps.front().kernel.args.at(1).buffer == buffer_ref{buffer_kind::input, 0});
}

TEST_CASE("check_plan rejects broken plans") {
  launch_plan p;
  p.num_inputs = 1;
  p.num_outputs = 1;
  p.output_bytes = {16};
  plan_step s;
  s.kernel.kernel = "k";
  s.kernel.block.x = 256;
  kernel_arg in, out;
  in.buffer = {buffer_kind::input, 0};
  out.buffer = {buffer_kind::output, 0};
  out.mode = access::write;
  s.kernel.args = {out, in};
  p.steps = {s};
  CHECK(check_plan(p).has_value());
  auto bad = p;
  bad.steps[0].kernel.block.x = 2048;
  CHECK(!check_plan(bad));
  bad = p;
  bad.steps[0].kernel.args[1].buffer.index = 3;
  CHECK(!check_plan(bad));
  bad = p;
  bad.steps[0].kernel.args[0].mode = access::read;
  CHECK(!check_plan(bad)); // nothing writes the output
  bad = p;
  bad.steps[0].kernel.shared_bytes = 300 * 1024;
  CHECK(!check_plan(bad));
  bad = p;
  bad.scratch_bytes = {64};
  bad.steps[0].kernel.args[1].buffer = {buffer_kind::scratch, 0};
  CHECK(!check_plan(bad)); // scratch read before written
  CHECK(!plan_from_json("{"));
  CHECK(!plan_from_json(R"({"version": 1})"));
  auto r = plan_from_json(
      R"({"version":1,"num_inputs":0,"num_params":0,"num_outputs":0,"output_bytes":[],
    "scratch_bytes":[],"steps":[{"kernel":{"name":"k","grid":[1,1,1],"block":[32,1,1],"shared_bytes":0,
    "args":[{"buffer":{"kind":"weird","index":0},"access":"read"}]}}]})");
  REQUIRE(!r);
  CHECK(r.message().find("steps[0].kernel.args[0].buffer.kind") != std::string::npos);
}

// The expert's cuda programs run convolutions by the library: a conv step (cuDNN in the kernel
// host) and, for bias and the fused chain, an epilogue kernel; the step survives the wire.
TEST_CASE("plans: library convolutions, forward and transposed, through JSON and check_plan") {
  int forward = 0, transposed = 0;
  for (const auto& t : suites().tasks) {
    if (t.level != 2) continue;
    auto cp = generate_cuda(t, expert_program(t, backend_kind::cuda));
    REQUIRE_MESSAGE(cp.has_value(), t.name << ": " << (cp ? "" : cp.message()));
    for (std::size_t s = 0; s < cp->plan.steps.size(); ++s) {
      const auto& st = cp->plan.steps[s];
      if (st.k != plan_step::kind::conv) continue;
      (st.conv.transposed ? transposed : forward)++;
      CHECK(st.conv.x.kind != buffer_kind::output);
      CHECK(st.conv.w.kind == buffer_kind::param);
      if (t.ops[0].args.size() > 2) { // a bias: the next step is the epilogue kernel adding it
        REQUIRE(s + 1 < cp->plan.steps.size());
        CHECK(cp->plan.steps[s + 1].k == plan_step::kind::kernel);
      }
    }
    auto back = plan_from_json(to_json(cp->plan));
    REQUIRE_MESSAGE(back.has_value(), (back ? "" : back.message()));
    CHECK(to_json(*back) == to_json(cp->plan));
  }
  CHECK(forward >= 20);
  CHECK(transposed >= 10);

  launch_plan p;
  p.num_inputs = 1, p.num_params = 1, p.num_outputs = 1;
  p.output_bytes = {4 * 2 * 4 * 8 * 8};
  plan_step s;
  s.k = plan_step::kind::conv;
  auto& c = s.conv;
  c.spatial = 2, c.batch = 2, c.ci = 3, c.co = 4;
  c.in = {1, 10, 10}, c.ker = {1, 3, 3}, c.out = {1, 8, 8};
  c.stride = {1, 1, 1}, c.pad = {0, 0, 0}, c.dilation = {1, 1, 1};
  c.x = {buffer_kind::input, 0}, c.w = {buffer_kind::param, 0}, c.y = {buffer_kind::output, 0};
  p.steps = {s};
  CHECK(check_plan(p).has_value());
  auto bad = p;
  bad.steps[0].conv.out = {1, 9, 8}; // not what a 3x3 kernel makes of 10x10
  CHECK(check_plan(bad).message().find("does not match its geometry") != std::string::npos);
  bad = p;
  bad.steps[0].conv.y = {buffer_kind::input, 0}; // a library step may not write an input
  CHECK(!check_plan(bad));
  bad = p;
  bad.steps[0].conv.groups = 2; // 3 input channels do not split into 2 groups
  CHECK(!check_plan(bad));
  bad = p;
  bad.steps[0].conv.transposed = true; // transposed: the forward conv of out must give in
  CHECK(!check_plan(bad));
  bad.steps[0].conv.in = {1, 8, 8}, bad.steps[0].conv.out = {1, 10, 10};
  CHECK(check_plan(bad).has_value());
  auto r = plan_from_json(
      R"({"version":1,"num_inputs":0,"num_params":0,"num_outputs":0,"output_bytes":[],
    "scratch_bytes":[],"steps":[{"conv":{"spatial":2,"transposed":"no"}}]})");
  REQUIRE(!r);
  CHECK(r.message().find("steps[0].conv.transposed") != std::string::npos);
}

TEST_CASE("nvrtc: errors carry the log, the cache answers the second time") {
  auto bad =
      compile_nvrtc("extern \"C\" __global__ void k(float* p) { p[0] = undefined_thing; }\n");
  REQUIRE(!bad);
  CHECK(bad.message().find("undefined_thing") != std::string::npos);
  const std::string src = "extern \"C\" __global__ void k(float* p) { p[threadIdx.x] = 1.f; }\n";
  auto a = compile_nvrtc(src);
  REQUIRE(a.has_value());
  CHECK(!a->cubin.empty());
  auto b = compile_nvrtc(src);
  REQUIRE(b.has_value());
  CHECK(b->cache_hit);
  CHECK(b->key == a->key);
  nvrtc_options fast;
  fast.fast_math = true;
  auto c = compile_nvrtc(src, fast);
  REQUIRE(c.has_value());
  CHECK(c->key != a->key);
  CHECK(!nvrtc_version().empty());
}

TEST_CASE("plans: cat reads every input, a slice is a copy of its window") {
  task t = make_task(R"(
name = "cat_slice"
dtype = "float32"
outputs = ["c", "r", "f", "g"]
[[inputs]]
name = "x"
shape = [6, 10]
[[inputs]]
name = "y"
shape = [6, 3]
[[ops]]
out = "c"
op = "cat"
args = ["x", "y", "x"]
attrs = { dim = -1 }
[[ops]]
out = "s"
op = "slice"
args = ["x"]
attrs = { dim = 1, start = -7, step = 2 }
[[ops]]
out = "r"
op = "relu"
args = ["s"]
[[ops]]
out = "f"
op = "flip"
args = ["x"]
attrs = { dims = [0, 1] }
[[ops]]
out = "g"
op = "pad"
args = ["x"]
attrs = { pad = [1, 2, 0, 1], value = -0.5 }
)");
  auto cp = generate_cuda(t, expert_program(t, backend_kind::cuda));
  REQUIRE_MESSAGE(cp.has_value(), (cp ? "" : cp.message()));
  CHECK(check_plan(cp->plan).has_value());
  CHECK(cp->plan.output_bytes ==
        std::vector<int64_t>{6 * 23 * 4, 6 * 4 * 4, 6 * 10 * 4, 7 * 13 * 4});
  auto art = compile_nvrtc(cp->source);
  REQUIRE_MESSAGE(art.has_value(), (art ? "" : art.message()));
  CHECK(missing_entry(*cp, art->ptx).empty());
  const auto& cat = cp->plan.steps.front().kernel;
  auto reads = [](const kernel_step& k, buffer_ref b) {
    return std::count_if(k.args.begin(), k.args.end(),
                         [&](const kernel_arg& a) { return a.buffer == b; });
  };
  CHECK(reads(cat, buffer_ref{buffer_kind::input, 0}) == 1); // x once, though cat names it twice
  CHECK(reads(cat, buffer_ref{buffer_kind::input, 1}) == 1);
  // The slice is not a view: the relu reads its own copy, not input 0.
  const auto& relu = cp->plan.steps.at(2).kernel;
  CHECK(reads(relu, buffer_ref{buffer_kind::input, 0}) == 0);
  CHECK(cp->source.find("(c - 13)") != std::string::npos); // the third input starts at 13
  CHECK(cp->source.find("[59 + ") != std::string::npos);   // the flip starts at the last element
  CHECK(cp->source.find("-0.5f") != std::string::npos);    // the pad's fill, outside its window
}
