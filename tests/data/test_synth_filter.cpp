#include "data/synth.hpp"
#include "data/synth_filter.hpp"
#include "data/task_check.hpp"
#include "data/task_parse.hpp"

#include <doctest/doctest.h>

using namespace kiln;

namespace {

// One elementwise op on a [256, 1024] input.
task unary(const std::string& op, attr_map attrs = {}, init_kind init = init_kind::normal) {
  task t;
  t.name = "t_" + op;
  tensor_decl x;
  x.name = "x";
  x.shape = {256, 1024};
  x.init = init;
  t.inputs.push_back(x);
  op_node n;
  n.out = "y";
  n.op = op;
  n.args = {"x"};
  n.attrs = std::move(attrs);
  t.ops.push_back(n);
  t.outputs = {"y"};
  REQUIRE(check_task(t).has_value());
  return t;
}

filter_options loose() {
  filter_options o;
  o.min_ms = 0;
  o.max_ms = 0; // no window
  return o;
}

} // namespace

TEST_CASE("filter: a plain task passes and reports its eager time") {
  auto v = filter_task(unary("gelu"), loose());
  CHECK(v.ok);
  CHECK(v.eager_ms > 0);
}

TEST_CASE("filter: NaN outputs, constant outputs and the time window reject") {
  auto v = filter_task(unary("log"), loose()); // log of normal inputs: NaN
  CHECK_FALSE(v.ok);
  CHECK(v.reason == reject_reason::non_finite);

  v = filter_task(unary("mul", {{"scalar", 0.0}}), loose()); // all zeros
  CHECK_FALSE(v.ok);
  CHECK(v.reason == reject_reason::degenerate);

  v = filter_task(unary("minimum", {{"scalar", -5.0}}, init_kind::uniform), loose()); // constant -5
  CHECK_FALSE(v.ok);
  CHECK(v.reason == reject_reason::degenerate);

  auto o = loose();
  o.min_ms = 1e6;
  v = filter_task(unary("relu"), o);
  CHECK(v.reason == reject_reason::too_fast);
  o = loose();
  o.max_ms = 1e-6;
  v = filter_task(unary("relu"), o);
  CHECK(v.reason == reject_reason::too_slow);
}

TEST_CASE("filter: synthesized tasks mostly pass the eager filters") {
  synth_options so;
  so.seed = 2;
  synthesizer gen(so);
  filter_options fo = loose();
  int ok = 0;
  for (int i = 0; i < 20; ++i) {
    auto t = gen.next(i);
    REQUIRE(t.has_value());
    auto v = filter_task(*t, fo);
    CHECK_MESSAGE((v.ok || v.reason != reject_reason::reference_error), v.detail);
    if (v.ok) {
      ++ok;
      gen.accept(*t, v.eager_ms);
    } else {
      gen.reject(*t, v.reason);
    }
  }
  CHECK(ok >= 15);
  CHECK(gen.stats().eager_ms.size() == static_cast<std::size_t>(ok));
}
