// check_task's memory budget: the peak of live tensors, as the reference frees intermediates.
#include "data/task_check.hpp"
#include "data/task_parse.hpp"

#include <doctest/doctest.h>

using namespace kiln;

namespace {

// x (1 Mi floats, 4 MiB) -> a -> b -> c (the output); `dead` is read by nothing.
const char* kChain = R"(
name = "chain"
level = 2
outputs = ["c"]
[[inputs]]
name = "x"
shape = [1024, 1024]
init = "normal"
[[ops]]
out = "a"
op = "relu"
args = ["x"]
[[ops]]
out = "dead"
op = "exp"
args = ["a"]
[[ops]]
out = "b"
op = "tanh"
args = ["a"]
[[ops]]
out = "c"
op = "sigmoid"
args = ["b"]
)";

task checked(const char* text, check_limits lim = {}) {
  auto t = task_from_toml(text, "chain.toml");
  REQUIRE_MESSAGE(t.has_value(), (t ? "" : t.message()));
  auto st = check_task(*t, lim);
  REQUIRE_MESSAGE(st.has_value(), (st ? "" : st.message()));
  return *t;
}

} // namespace

TEST_CASE("last uses: the last reader, the end for outputs, at once for results no one reads") {
  task t = checked(kChain);
  CHECK(last_uses(t) == std::vector<std::size_t>{2, 1, 3, 4});
}

TEST_CASE("the memory budget is the peak of live tensors, not their sum") {
  constexpr int64_t mib = int64_t{1} << 20;
  task t = checked(kChain);
  // Sum of all tensors: 5 x 4 MiB. Peak: x, a and dead (op 1), or x, a and b (op 2): 12 MiB.
  CHECK(peak_bytes(t) == 12 * mib);
  check_limits fits;
  fits.memory_budget_bytes = 12 * mib;
  checked(kChain, fits); // 20 MiB in all would not fit
  check_limits tight;
  tight.memory_budget_bytes = 12 * mib - 1;
  auto again = task_from_toml(kChain, "chain.toml");
  REQUIRE(again.has_value());
  auto st = check_task(*again, tight);
  REQUIRE_FALSE(st.has_value());
  CHECK(st.message().find("live tensors peak at 12 MiB") != std::string::npos);
}
