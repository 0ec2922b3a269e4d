#include "data/synth.hpp"

#include "data/op_vocab.hpp"
#include "data/task_check.hpp"
#include "data/task_hash.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace kiln {

namespace {

// Draws from mt19937_64 with our own mapping: std::uniform_int_distribution and friends differ
// between standard libraries, and a seed must give the same dataset everywhere. Sizes are drawn
// with integer arithmetic only, for the same reason.
class rng_t {
public:
  explicit rng_t(std::mt19937_64& g) : g_(g) {}

  // Uniform in [lo, hi]; rejection sampling, no modulo bias.
  int64_t range(int64_t lo, int64_t hi) {
    if (hi <= lo) return lo;
    uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    uint64_t limit = UINT64_MAX - UINT64_MAX % span;
    uint64_t x;
    do x = g_();
    while (x >= limit);
    return lo + static_cast<int64_t>(x % span);
  }
  double real() { return static_cast<double>(g_() >> 11) * 0x1.0p-53; }
  bool chance(double p) { return real() < p; }
  template <class T>
  T pick(const std::vector<T>& v) {
    return v[static_cast<std::size_t>(range(0, static_cast<int64_t>(v.size()) - 1))];
  }
  // Index drawn with the given weights (some may be 0).
  std::size_t weighted(const std::vector<double>& w) {
    double total = 0;
    for (double x : w) total += x;
    double u = real() * total;
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (w[i] <= 0) continue;
      if (u < w[i]) return i;
      u -= w[i];
    }
    for (std::size_t i = w.size(); i-- > 0;)
      if (w[i] > 0) return i;
    return 0;
  }
  // A size in [lo, hi]: mostly a power of two, sometimes any size (kernels must handle edges).
  int64_t dim(int64_t lo, int64_t hi) {
    if (chance(0.75)) {
      std::vector<int64_t> pows;
      for (int64_t p = 1; p <= hi; p *= 2)
        if (p >= lo) pows.push_back(p);
      if (!pows.empty()) return pick(pows);
    }
    return range(lo, hi);
  }
  // Roughly log-uniform in [lo, hi]: a random octave, then uniform inside it.
  int64_t log_range(int64_t lo, int64_t hi) {
    int e_lo = 0, e_hi = 0;
    while ((int64_t{2} << e_lo) <= lo) ++e_lo;
    while ((int64_t{2} << e_hi) <= hi) ++e_hi;
    int64_t base = int64_t{1} << range(e_lo, e_hi);
    return std::clamp(base + range(0, base - 1), lo, hi);
  }

private:
  std::mt19937_64& g_;
};

// A value of the chain with what the generator knows about its range: `mag` is a rough bound on
// |x| that steers exp / pow / prod away from overflow; the flags gate log, sqrt, rsqrt, pow(0.5).
struct value {
  std::string name;
  shape_t shape;
  double mag = 1;
  bool nonneg = false;
  bool positive = false;
};

bool is_heavy(op_family f) {
  return f == op_family::linear || f == op_family::matmul || f == op_family::bmm ||
         f == op_family::conv || f == op_family::conv_transpose;
}

// A task under construction. Every op is shape-inferred as it is appended; a step that fails is
// undone with restore().
class builder {
public:
  builder(rng_t& r, const synth_options& o) : r(r), o(o) {}

  rng_t& r;
  const synth_options& o;
  task t;
  value cur;               // the chain's latest value
  std::vector<value> pool; // inputs and op results usable as second operands
  int heavy = 0;           // GEMM / conv ops so far

  struct mark {
    std::size_t inputs, params, ops, pool;
    value cur;
    int heavy;
  };
  mark save() const {
    return {t.inputs.size(), t.params.size(), t.ops.size(), pool.size(), cur, heavy};
  }
  void restore(const mark& m) {
    t.inputs.resize(m.inputs);
    t.params.resize(m.params);
    t.ops.resize(m.ops);
    pool.resize(m.pool);
    cur = m.cur;
    heavy = m.heavy;
  }

  value input(shape_t s, init_kind k) {
    std::string name = t.inputs.empty() ? "x" : "x" + std::to_string(t.inputs.size());
    tensor_decl d;
    d.name = name;
    d.shape = s;
    d.init = k;
    t.inputs.push_back(d);
    value v{name, std::move(s), k == init_kind::normal ? 4.0 : 1.0, k == init_kind::uniform, false};
    pool.push_back(v);
    return v;
  }
  value input(shape_t s) { return input(std::move(s), random_input_init()); }
  init_kind random_input_init() { return r.chance(0.75) ? init_kind::normal : init_kind::uniform; }

  std::string param(const std::string& prefix, shape_t s, init_kind k, const std::string& of = {}) {
    std::string name;
    for (int i = 0;; ++i) {
      name = prefix + std::to_string(i);
      if (find_value(t, name).k == value_ref::kind::none) break;
    }
    tensor_decl d;
    d.name = name;
    d.shape = std::move(s);
    d.init = k;
    d.of = of;
    t.params.push_back(d);
    return name;
  }

  const shape_t& shape_of(const std::string& name) const {
    return value_shape(t, find_value(t, name));
  }

  // Appends `op` if its shape infers and no dimension or tensor gets out of bounds.
  bool emit(const std::string& op, const std::vector<std::string>& args, const attr_map& attrs,
            double mag, bool nonneg, bool positive) {
    const op_info* info = find_op(op);
    if (!info) return false;
    std::vector<shape_t> shapes;
    for (const auto& a : args) shapes.push_back(shape_of(a));
    auto s = infer_shape(*info, shapes, attrs);
    if (!s || numel(*s) > o.max_tensor) return false;
    for (auto d : *s)
      if (d < 1) return false;
    op_node n;
    n.out = "y" + std::to_string(t.ops.size());
    n.op = op;
    n.args = args;
    n.attrs = attrs;
    n.shape = *s;
    n.is_index = info->family == op_family::arg_reduce;
    t.ops.push_back(n);
    cur = value{n.out, *s, std::min(mag, 1e30), nonneg || positive, positive};
    if (!n.is_index) pool.push_back(cur);
    if (is_heavy(info->family)) ++heavy;
    return true;
  }

  const std::string& prev_op() const {
    static const std::string none;
    return t.ops.empty() ? none : t.ops.back().op;
  }
};

// An int when all entries agree (the usual spelling), else the list.
attr_value ints_attr(const std::vector<int64_t>& v) {
  for (auto x : v)
    if (x != v[0]) return v;
  return v[0];
}

// A shape of `rank` with about `target` elements: trailing dims drawn from per-rank ranges, the
// leading (batch) dim fills the rest.
shape_t shape_for(rng_t& r, std::size_t rank, int64_t target) {
  shape_t tail;
  switch (rank) {
  case 1: return {target};
  case 2: tail = {r.dim(16, 4096)}; break;
  case 3: tail = {r.dim(2, 128), r.dim(16, 1024)}; break;
  case 4: {
    int64_t h = r.dim(4, 64);
    tail = {r.dim(2, 64), h, r.chance(0.8) ? h : r.dim(4, 64)};
    break;
  }
  default: {
    int64_t s = r.dim(2, 16);
    tail = {r.dim(2, 32), s, r.chance(0.7) ? s : r.dim(2, 16), r.chance(0.7) ? s : r.dim(2, 16)};
    break;
  }
  }
  while (numel(tail) > target) {
    auto it = std::max_element(tail.begin(), tail.end());
    if (*it <= 2) break;
    *it = (*it + 1) / 2;
  }
  tail.insert(tail.begin(), std::clamp<int64_t>(target / numel(tail), 1, 65536));
  return tail;
}

// --- epilogues (also used as heads on a fresh input) -------------------------------------------

bool ep_unary(builder& b) {
  const value c = b.cur;
  std::vector<std::string> ops = {"relu", "leaky_relu", "sigmoid",   "tanh",        "gelu",
                                  "silu", "mish",       "hardswish", "hardsigmoid", "hardtanh",
                                  "elu",  "selu",       "softplus",  "softsign",    "abs",
                                  "neg",  "clamp"};
  if (c.mag <= 15) ops.push_back("exp");
  if (c.positive) {
    ops.push_back("log");
    ops.push_back("rsqrt");
  }
  if (c.nonneg) ops.push_back("sqrt");
  std::string op = b.r.pick(ops);
  // Positive values are rare in a chain: use them for the ops that need them.
  if (c.positive && b.r.chance(0.35)) op = b.r.pick<std::string>({"log", "sqrt", "rsqrt"});
  if (op == b.prev_op()) return false; // relu(relu(x)) and the like teach nothing
  rng_t& r = b.r;
  attr_map a;
  double mag = c.mag;
  bool nonneg = false, positive = false;
  if (op == "relu") {
    nonneg = true, positive = c.positive;
  } else if (op == "leaky_relu") {
    double s = r.pick<double>({0.01, 0.05, 0.1, 0.2});
    if (s != 0.01) a["negative_slope"] = s; // 0.01 is the default: one spelling per semantics
    positive = c.positive;
  } else if (op == "sigmoid") {
    mag = 1, nonneg = true, positive = c.mag < 80;
  } else if (op == "tanh" || op == "softsign") {
    mag = 1, positive = c.positive;
  } else if (op == "gelu" || op == "silu" || op == "mish" || op == "hardswish") {
    if (op == "gelu" && r.chance(0.3)) a["approximate"] = std::string("tanh");
    positive = c.positive;
  } else if (op == "hardsigmoid") {
    mag = 1, nonneg = true;
  } else if (op == "hardtanh") {
    auto range =
        r.pick<std::pair<double, double>>({{-1, 1}, {-1, 1}, {-0.5, 0.5}, {-2, 2}, {0, 6}});
    if (range.first != -1 || range.second != 1) {
      a["min_val"] = range.first;
      a["max_val"] = range.second;
    }
    mag = std::max(-range.first, range.second), nonneg = range.first >= 0;
  } else if (op == "elu") {
    double alpha = r.pick<double>({1.0, 1.0, 0.5, 2.0});
    if (alpha != 1.0) a["alpha"] = alpha;
    mag = std::max(mag, alpha), positive = c.positive;
  } else if (op == "selu") {
    mag = 1.06 * mag + 1.8, positive = c.positive;
  } else if (op == "softplus") {
    double beta = 1;
    switch (r.range(0, 3)) {
    case 1: a["beta"] = beta = 2.0; break;
    case 2: a["beta"] = beta = 0.5; break;
    case 3: a["threshold"] = 10.0; break;
    default: break;
    }
    mag = mag + 1, nonneg = true, positive = c.mag * beta < 80;
  } else if (op == "abs") {
    nonneg = true, positive = c.positive;
  } else if (op == "neg") {
  } else if (op == "clamp") {
    auto range = r.pick<std::pair<double, double>>(
        {{-1, 1}, {0, 1}, {-0.5, 0.5}, {0, 6}, {0, 1e30}, {-1e30, 1}});
    if (range.first > -1e30) a["min"] = range.first;
    if (range.second < 1e30) a["max"] = range.second;
    if (range.second < 1e30) mag = std::max(-range.first, range.second);
    nonneg = range.first >= 0 || c.nonneg, positive = c.positive;
  } else if (op == "exp") {
    mag = 1e7, positive = true;
  } else if (op == "log") {
    mag = 90;
  } else if (op == "rsqrt") {
    mag = 1e4, positive = true;
  } else if (op == "sqrt") {
    mag = std::sqrt(mag), nonneg = true, positive = c.positive;
  }
  return b.emit(op, {c.name}, a, mag, nonneg, positive);
}

bool ep_scalar(builder& b) {
  const value c = b.cur;
  rng_t& r = b.r;
  static const std::vector<std::string> ops = {"add",     "sub",     "mul", "div",
                                               "maximum", "minimum", "pow"};
  std::string op = ops[r.weighted({3, 2, 3, 2, 1, 1, 2})];
  double s = 0, mag = c.mag;
  bool nonneg = false, positive = false;
  if (op == "add") {
    s = r.pick<double>({0.5, 1.0, 2.0, 3.0, -0.5, -1.0, 0.1});
    mag += std::abs(s), nonneg = c.nonneg && s >= 0, positive = c.nonneg && s > 0;
  } else if (op == "sub") {
    s = r.pick<double>({0.5, 1.0, 2.0, 0.1});
    mag += s;
  } else if (op == "mul" || op == "div") {
    s = op == "mul" ? r.pick<double>({0.5, 2.0, 1.5, 0.1, 0.25, 10.0, -1.0, -0.5})
                    : r.pick<double>({2.0, 0.5, 3.0, 10.0, 1.5, -2.0});
    mag = op == "mul" ? mag * std::abs(s) : mag / std::abs(s);
    nonneg = c.nonneg && s > 0, positive = c.positive && s > 0;
  } else if (op == "maximum") {
    s = r.pick<double>({0.0, 0.5, -1.0, 0.1});
    mag = std::max(mag, std::abs(s)), nonneg = s >= 0 || c.nonneg, positive = s > 0 || c.positive;
  } else if (op == "minimum") {
    s = r.pick<double>({0.0, 1.0, 6.0, 0.5, -0.5});
    nonneg = c.nonneg && s >= 0, positive = c.positive && s > 0;
  } else { // pow
    std::vector<double> exps;
    if (c.mag <= 1e6) exps.push_back(2.0);
    if (c.mag <= 1e4) exps.push_back(3.0);
    if (c.nonneg) exps.push_back(0.5);
    if (exps.empty()) return false;
    s = r.pick(exps);
    mag = s == 2.0 ? mag * mag : s == 3.0 ? mag * mag * mag : std::sqrt(mag);
    nonneg = s == 2.0 || c.nonneg, positive = c.positive;
  }
  attr_map a;
  a["scalar"] = s;
  return b.emit(op, {c.name}, a, mag, nonneg, positive);
}

// Binary with a param broadcast over the channel dim ([C, 1, 1] for [N, C, H, W]) or the last dim.
bool ep_param(builder& b) {
  const value c = b.cur;
  rng_t& r = b.r;
  std::size_t rank = c.shape.size();
  if (rank == 0) return false;
  shape_t ps;
  if (rank >= 3 && r.chance(0.7)) {
    ps.assign(rank - 1, 1);
    ps[0] = c.shape[1];
  } else {
    ps = {c.shape.back()};
  }
  static const std::vector<std::string> ops = {"add", "mul", "sub", "maximum", "minimum"};
  std::string op = ops[r.weighted({4, 3, 1, 0.5, 0.5})];
  bool uniform = op == "mul" && r.chance(0.5);
  std::string p =
      b.param(op == "mul" ? "scale" : "bias", ps, uniform ? init_kind::uniform : init_kind::normal);
  double mag = op == "mul" ? c.mag * (uniform ? 1 : 4) : c.mag + 4;
  bool nonneg = (op == "mul" && uniform && c.nonneg);
  return b.emit(op, {c.name, p}, {}, mag, nonneg, false);
}

// True when `a` broadcasts to exactly `to` (so the result keeps the chain's shape).
bool broadcasts_to(const shape_t& a, const shape_t& to) {
  if (a.size() > to.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    int64_t da = a[a.size() - 1 - i], dt = to[to.size() - 1 - i];
    if (da != dt && da != 1) return false;
  }
  return true;
}

// Binary with an earlier value of the chain (a residual / gate) or with a fresh input.
bool ep_residual(builder& b) {
  const value c = b.cur;
  rng_t& r = b.r;
  std::vector<value> others;
  for (const auto& v : b.pool)
    if (v.name != c.name && broadcasts_to(v.shape, c.shape)) others.push_back(v);
  value other;
  if (others.empty() || r.chance(0.3)) {
    if (b.t.inputs.size() >= 3 || c.shape.empty()) return false;
    other = b.input(c.shape);
  } else {
    other = r.pick(others);
  }
  static const std::vector<std::string> ops = {"add", "mul", "sub", "maximum", "minimum"};
  std::string op = ops[r.weighted({4, 3, 1, 1, 1})];
  double mag;
  bool nonneg, positive;
  if (op == "add") {
    mag = c.mag + other.mag, nonneg = c.nonneg && other.nonneg;
    positive = nonneg && (c.positive || other.positive);
  } else if (op == "sub") {
    mag = c.mag + other.mag, nonneg = positive = false;
  } else if (op == "mul") {
    mag = c.mag * other.mag, nonneg = c.nonneg && other.nonneg,
    positive = c.positive && other.positive;
  } else if (op == "maximum") {
    mag = std::max(c.mag, other.mag), nonneg = c.nonneg || other.nonneg;
    positive = c.positive || other.positive;
  } else {
    mag = std::max(c.mag, other.mag), nonneg = c.nonneg && other.nonneg;
    positive = c.positive && other.positive;
  }
  std::vector<std::string> args{c.name, other.name};
  if (other.shape == c.shape && r.chance(0.3)) std::swap(args[0], args[1]);
  return b.emit(op, args, {}, mag, nonneg, positive);
}

// A normalization; `only` forces the op (norm heads). Each op is offered only where it is
// well defined and non-degenerate (more than one value per normalized group).
bool ep_norm(builder& b, const std::string& only = {}) {
  const value c = b.cur;
  rng_t& r = b.r;
  const shape_t& s = c.shape;
  std::size_t rank = s.size();
  if (rank == 0) return false;
  int64_t total = numel(s);
  int64_t spatial = rank >= 3 ? total / (s[0] * s[1]) : 1;
  std::vector<std::string> ok;
  if (rank >= 2 && total / s[1] >= 2) ok.push_back("batch_norm");
  if (rank >= 3 && spatial >= 2) ok.push_back("instance_norm");
  if (rank >= 2 && s[1] >= 2) ok.push_back("group_norm");
  if (s.back() >= 2) {
    ok.push_back("layer_norm");
    ok.push_back("rms_norm");
  }
  if (ok.empty()) return false;
  std::string op = only.empty() ? r.pick(ok) : only;
  if (std::find(ok.begin(), ok.end(), op) == ok.end() || op == b.prev_op()) return false;
  attr_map a;
  if (r.chance(0.2)) a["eps"] = r.pick<double>({1e-3, 1e-6});
  std::vector<std::string> args{c.name};
  auto affine = [&](const shape_t& ps, bool with_bias) {
    args.push_back(b.param("gamma", ps, init_kind::ones));
    if (with_bias) args.push_back(b.param("beta", ps, init_kind::zeros));
  };
  if (op == "batch_norm" || op == "instance_norm") {
    if (r.chance(op == "batch_norm" ? 0.5 : 0.3)) affine({s[1]}, true);
  } else if (op == "group_norm") {
    std::vector<int64_t> groups;
    for (int64_t g : {1, 2, 4, 8, 16, 32})
      if (s[1] % g == 0 && (s[1] / g) * spatial >= 2) groups.push_back(g);
    if (groups.empty()) return false;
    a["num_groups"] = r.pick(groups);
    if (r.chance(0.5)) affine({s[1]}, true);
  } else {
    std::size_t k = (op == "layer_norm" && rank >= 3 && r.chance(0.3)) ? 2 : 1;
    shape_t ns(s.end() - k, s.end());
    a["normalized_shape"] = ns;
    if (r.chance(0.5)) affine(ns, op == "layer_norm");
  }
  return b.emit(op, args, a, 5, false, false);
}

bool ep_pool(builder& b) {
  const value c = b.cur;
  rng_t& r = b.r;
  std::size_t rank = c.shape.size();
  if (rank < 3 || rank > 5) return false;
  int d = static_cast<int>(rank) - 2;
  int64_t minsp = *std::min_element(c.shape.begin() + 2, c.shape.end());
  if (minsp < 2) return false;
  std::string sd = std::to_string(d) + "d";
  attr_map a;
  std::string op;
  std::size_t kind = r.weighted({4, 3, 2}); // max, avg, adaptive
  switch (kind) {
  case 0:
  case 1: {
    bool is_max = kind == 0;
    op = (is_max ? "max_pool" : "avg_pool") + sd;
    int64_t k = std::min<int64_t>(r.pick<int64_t>({2, 2, 3}), minsp);
    a["kernel_size"] = k;
    if (r.chance(0.3)) a["stride"] = r.pick<int64_t>({1, 2});
    int64_t pad = (k >= 2 && r.chance(0.2)) ? 1 : 0;
    if (pad) a["padding"] = pad;
    if (is_max && r.chance(0.1) && 2 * (k - 1) + 1 <= minsp + 2 * pad) a["dilation"] = int64_t{2};
    break;
  }
  default: {
    op = "adaptive_avg_pool" + sd;
    int64_t os = r.pick<int64_t>({1, 1, 2, 4});
    a["output_size"] = os <= minsp ? os : int64_t{1};
    break;
  }
  }
  return b.emit(op, {c.name}, a, c.mag, c.nonneg, c.positive);
}

bool ep_reduce(builder& b, bool last) {
  const value c = b.cur;
  rng_t& r = b.r;
  const shape_t& s = c.shape;
  std::size_t rank = s.size();
  if (rank == 0) return false;
  std::vector<int64_t> dims;
  for (std::size_t i = 0; i < rank; ++i)
    if (s[i] >= 2) dims.push_back(static_cast<int64_t>(i));
  if (dims.empty()) return false;
  static const std::vector<std::string> ops = {"sum",  "mean",   "amax",   "amin",  "logsumexp",
                                               "prod", "cumsum", "argmax", "argmin"};
  std::string op = ops[r.weighted({3, 3, 2, 1, 2, 0.5, 1, last ? 1.0 : 0.0, last ? 0.5 : 0.0})];
  // Reductions that cancel the previous op make constant outputs: sum of a softmax over its dim,
  // the mean of a normalized group.
  const std::string& prev = b.prev_op();
  bool after_norm = prev.find("norm") != std::string::npos;
  if (after_norm && (op == "sum" || op == "mean")) return false;
  std::vector<int64_t> red{r.pick(dims)};
  bool multi = (op == "sum" || op == "mean" || op == "amax" || op == "amin" || op == "logsumexp");
  if (multi && rank >= 4 && r.chance(0.3)) {
    red.clear();
    for (std::size_t i = 2; i < rank; ++i) red.push_back(static_cast<int64_t>(i));
  }
  if (prev == "softmax" && op == "sum") return false;
  int64_t n = 1;
  for (auto d : red) n *= s[d];
  if (n < 2) return false;
  attr_map a;
  a["dim"] = red.size() == 1 ? attr_value(red[0]) : attr_value(red);
  bool keep = r.chance(op == "argmax" || op == "argmin" ? 0.3 : 0.4);
  if (op != "cumsum" && !keep && rank == red.size() && !last) keep = true; // rank 0 only at the end
  if (op != "cumsum" && keep) a["keepdim"] = true;
  double mag = c.mag;
  bool nonneg = c.nonneg, positive = c.positive;
  if (op == "sum" || op == "cumsum") {
    mag *= static_cast<double>(n);
  } else if (op == "logsumexp") {
    mag += 20, nonneg = positive = false;
  } else if (op == "prod") {
    if (c.mag > 4 || n > 8) return false;
    double m = 1;
    for (int64_t i = 0; i < n; ++i) m *= std::max(1.0, c.mag);
    mag = m;
  }
  return b.emit(op, {c.name}, a, mag, nonneg, positive);
}

bool ep_softmax(builder& b) {
  const value c = b.cur;
  rng_t& r = b.r;
  const shape_t& s = c.shape;
  std::vector<int64_t> dims;
  for (std::size_t i = 0; i < s.size(); ++i)
    if (s[i] >= 2) dims.push_back(static_cast<int64_t>(i));
  if (dims.empty()) return false;
  int64_t d = (s.back() >= 2 && r.chance(0.6)) ? static_cast<int64_t>(s.size()) - 1 : r.pick(dims);
  bool log = r.chance(0.4);
  if (b.prev_op() == "softmax" || b.prev_op() == "log_softmax") return false;
  attr_map a;
  a["dim"] = d;
  if (log) return b.emit("log_softmax", {c.name}, a, 2 * c.mag + 20, false, false);
  return b.emit("softmax", {c.name}, a, 1, true, c.mag < 40);
}

// Layout ops; `copy_only` keeps to those that move data (transpose, permute) for one-op tasks.
bool ep_layout(builder& b, bool copy_only) {
  const value c = b.cur;
  rng_t& r = b.r;
  const shape_t& s = c.shape;
  std::size_t rank = s.size();
  if (rank < 2) return false;
  const op_info* prev = find_op(b.prev_op());
  if (prev && (prev->family == op_family::transpose || prev->family == op_family::permute ||
               prev->family == op_family::reshape || prev->family == op_family::flatten ||
               prev->family == op_family::dropout))
    return false;
  std::size_t kind = r.weighted({3, rank >= 3 ? 2.0 : 0.0, rank >= 3 && !copy_only ? 2.0 : 0.0,
                                 copy_only ? 0.0 : 1.5, copy_only ? 0.0 : 0.5});
  attr_map a;
  std::string op;
  if (kind == 0) {
    op = "transpose";
    int64_t d0 = r.range(0, static_cast<int64_t>(rank) - 1);
    int64_t d1 = r.range(0, static_cast<int64_t>(rank) - 2);
    if (d1 >= d0) ++d1;
    a["dim0"] = std::min(d0, d1);
    a["dim1"] = std::max(d0, d1);
  } else if (kind == 1) {
    op = "permute";
    std::vector<int64_t> p(rank);
    for (std::size_t i = 0; i < rank; ++i) p[i] = static_cast<int64_t>(i);
    for (int tries = 0; tries < 4; ++tries) {
      for (std::size_t i = rank - 1; i > 0; --i)
        std::swap(p[i], p[static_cast<std::size_t>(r.range(0, static_cast<int64_t>(i)))]);
      bool identity = true;
      for (std::size_t i = 0; i < rank; ++i) identity = identity && p[i] == static_cast<int64_t>(i);
      if (!identity) break;
    }
    a["dims"] = p;
  } else if (kind == 2) {
    op = "flatten";
    int64_t start = r.chance(0.7) ? 1 : r.range(0, static_cast<int64_t>(rank) - 2);
    int64_t end = r.chance(0.7) ? static_cast<int64_t>(rank) - 1
                                : r.range(start + 1, static_cast<int64_t>(rank) - 1);
    if (start != 0) a["start_dim"] = start;
    if (end != static_cast<int64_t>(rank) - 1) a["end_dim"] = end;
  } else if (kind == 3) {
    op = "reshape";
    std::vector<std::vector<int64_t>> shapes;
    if (rank >= 3) shapes.push_back({s[0], -1});
    if (rank == 2 && s[1] % 2 == 0 && s[1] >= 4) shapes.push_back({s[0], 2, -1});
    if (rank == 2) shapes.push_back({-1});
    a["shape"] = r.pick(shapes);
  } else {
    op = "dropout";
    a["p"] = 0.0; // only p = 0 is deterministic
  }
  return b.emit(op, {c.name}, a, c.mag, c.nonneg, c.positive);
}

// A second heavy op on the chain: a linear layer over the last dim, or a shape-keeping conv.
bool ep_heavy(builder& b) {
  const value c = b.cur;
  rng_t& r = b.r;
  const shape_t& s = c.shape;
  std::size_t rank = s.size();
  if (rank < 2) return false;
  bool conv = rank >= 3 && rank <= 5 && r.chance(0.5);
  if (!conv) {
    int64_t in = s.back(), rows = numel(s) / in, out = r.dim(8, 1024);
    if (in < 2) return false;
    while (out > 8 && rows * in * out > b.o.max_macs) out /= 2;
    if (rows * in * out > b.o.max_macs) return false;
    std::string w = b.param("w", {out, in}, init_kind::kaiming_uniform);
    std::vector<std::string> args{c.name, w};
    if (r.chance(0.8)) args.push_back(b.param("b", {out}, init_kind::bias_uniform, w));
    return b.emit("linear", args, {}, c.mag + 1, false, false);
  }
  int64_t d = static_cast<int64_t>(rank) - 2, cin = s[1], k = r.pick<int64_t>({1, 3, 3});
  int64_t minsp = *std::min_element(s.begin() + 2, s.end());
  if (minsp < k) k = 1;
  int64_t kd = 1;
  for (int64_t i = 0; i < d; ++i) kd *= k;
  int64_t cout = r.dim(4, 128);
  int64_t per_out = numel(s) / cin * cin * kd; // MACs per output channel (stride 1, same size)
  while (cout > 4 && per_out * cout > b.o.max_macs) cout /= 2;
  if (per_out * cout > b.o.max_macs) return false;
  shape_t ws{cout, cin};
  ws.insert(ws.end(), static_cast<std::size_t>(d), k);
  std::string w = b.param("w", ws, init_kind::kaiming_uniform);
  std::vector<std::string> args{c.name, w};
  if (r.chance(0.8)) args.push_back(b.param("b", {cout}, init_kind::bias_uniform, w));
  attr_map a;
  if (k / 2) a["padding"] = k / 2;
  return b.emit("conv" + std::to_string(d) + "d", args, a, c.mag + 1, false, false);
}

// --- heads --------------------------------------------------------------------------------------

bool head_linear(builder& b) {
  rng_t& r = b.r;
  bool rank3 = r.chance(0.2);
  int64_t in = r.dim(16, 2048), out = r.dim(16, 2048), batch = r.dim(1, 512);
  int64_t seq = rank3 ? r.dim(2, 64) : 1;
  auto macs = [&] { return batch * seq * in * out; };
  while (macs() > b.o.max_macs) {
    int64_t* big = &batch;
    for (int64_t* p : {&seq, &in, &out})
      if (*p > *big) big = p;
    *big = std::max<int64_t>(1, *big / 2);
  }
  while (macs() < b.o.min_macs) batch *= 2;
  value x = b.input(rank3 ? shape_t{batch, seq, in} : shape_t{batch, in});
  std::string w = b.param("w", {out, in}, init_kind::kaiming_uniform);
  std::vector<std::string> args{x.name, w};
  if (r.chance(0.8)) args.push_back(b.param("b", {out}, init_kind::bias_uniform, w));
  return b.emit("linear", args, {}, x.mag + 1, false, false);
}

// matmul ([M,K]x[K,N], batched x 2-D, or 4-D attention-like) and bmm, both operands inputs.
bool head_matmul(builder& b, bool bmm) {
  rng_t& r = b.r;
  int64_t m = r.dim(16, 1024), k = r.dim(16, 1024), n = r.dim(16, 1024);
  std::size_t variant = bmm ? 1 : r.weighted({6, 2, 2});
  int64_t batch = variant == 0 ? 1 : r.dim(2, 32), heads = variant == 2 ? r.dim(2, 8) : 1;
  auto macs = [&] { return batch * heads * m * k * n; };
  while (macs() > b.o.max_macs) {
    int64_t* big = &m;
    for (int64_t* p : {&k, &n, &batch})
      if (*p > *big) big = p;
    *big = std::max<int64_t>(1, *big / 2);
  }
  while (macs() < b.o.min_macs) m *= 2;
  init_kind ik = b.random_input_init();
  shape_t as, bs;
  if (variant == 0) {
    as = {m, k}, bs = {k, n};
  } else if (variant == 1) {
    as = {batch, m, k}, bs = bmm ? shape_t{batch, k, n} : shape_t{k, n};
  } else {
    as = {batch, heads, m, k}, bs = {batch, heads, k, n};
  }
  value x = b.input(as, ik), y = b.input(bs, ik);
  bool centered = ik == init_kind::normal;
  double mag =
      x.mag * y.mag * (centered ? std::sqrt(static_cast<double>(k)) : static_cast<double>(k)) / 4;
  return b.emit(bmm ? "bmm" : "matmul", {x.name, y.name}, {}, mag, !centered, false);
}

bool head_conv(builder& b, int d, bool transposed) {
  rng_t& r = b.r;
  std::string op = (transposed ? "conv_transpose" : "conv") + std::to_string(d) + "d";
  const op_info* info = find_op(op);
  int64_t n = r.dim(1, 16);
  int64_t cin = r.pick<int64_t>({1, 2, 3, 3, 4, 8, 16, 16, 32, 32, 64, 64});
  int64_t cout = r.dim(4, 128);
  std::size_t sd = static_cast<std::size_t>(d);
  std::vector<int64_t> k(sd), size(sd), pad(sd);
  int64_t k0 = r.pick<int64_t>({1, 2, 3, 3, 3, 4, 5, 5});
  bool square = d == 1 || r.chance(0.8);
  for (auto& x : k) x = square ? k0 : r.range(1, 5);
  int64_t stride = r.chance(transposed ? 0.5 : 0.3) ? 2 : 1;
  int64_t dil = r.chance(0.15) ? 2 : 1;
  int pad_mode = static_cast<int>(r.range(0, 2));
  for (std::size_t i = 0; i < sd; ++i)
    pad[i] = pad_mode == 0 ? 0 : pad_mode == 1 ? k[i] / 2 : r.range(0, k[i] / 2);
  int64_t lo = d == 1 ? 16 : d == 2 ? 8 : 4, hi = d == 1 ? 1024 : d == 2 ? 64 : 24;
  if (transposed) hi /= 2, lo = std::max<int64_t>(2, lo / 2);
  int64_t s0 = r.dim(lo, hi);
  bool cube = r.chance(0.75);
  for (auto& x : size) x = cube ? s0 : r.dim(lo, hi);
  for (std::size_t i = 0; i < sd; ++i) size[i] = std::max(size[i], dil * (k[i] - 1) + 1);
  int64_t groups = 1;
  if (r.chance(0.25)) {
    std::vector<int64_t> gs;
    for (int64_t g : {2, 4, 8, 16, 32, 64})
      if (cin % g == 0 && cout % g == 0) gs.push_back(g);
    if (cin > 1 && cout % cin == 0 && !transposed) gs.push_back(cin); // depthwise
    if (!gs.empty()) groups = r.pick(gs);
  }
  int64_t outpad = (transposed && stride > 1 && r.chance(0.3)) ? stride - 1 : 0;
  attr_map a;
  if (stride != 1) a["stride"] = stride;
  if (std::any_of(pad.begin(), pad.end(), [](int64_t p) { return p != 0; }))
    a["padding"] = ints_attr(pad);
  if (dil != 1) a["dilation"] = dil;
  if (groups != 1) a["groups"] = groups;
  if (outpad) a["output_padding"] = outpad;
  int64_t kd = 1;
  for (auto x : k) kd *= x;
  // Shrink batch, then spatial size, then channels until the MACs fit the budget.
  for (int iter = 0; iter < 40; ++iter) {
    shape_t xs{n, cin}, ws;
    xs.insert(xs.end(), size.begin(), size.end());
    ws = transposed ? shape_t{cin, cout / groups} : shape_t{cout, cin / groups};
    ws.insert(ws.end(), k.begin(), k.end());
    auto out = infer_shape(*info, {xs, ws}, a);
    if (!out) return false;
    int64_t macs =
        transposed ? numel(xs) * (cout / groups) * kd : numel(*out) * (cin / groups) * kd;
    if (macs > b.o.max_macs) {
      auto big = std::max_element(size.begin(), size.end());
      if (n > 1 && (n >= *big || *big <= 2 * dil * k0)) {
        n /= 2;
      } else if (*big > std::max<int64_t>(lo, dil * k0 + 1)) {
        *big = (*big + 1) / 2;
        for (std::size_t i = 0; i < sd; ++i) size[i] = std::max(size[i], dil * (k[i] - 1) + 1);
      } else if (cout / 2 >= 4 && (cout / 2) % groups == 0) {
        cout /= 2;
      } else {
        return false;
      }
      continue;
    }
    if (macs < b.o.min_macs && n < 64) {
      n *= 2;
      continue;
    }
    value x = b.input(xs);
    std::string w = b.param("w", ws, init_kind::kaiming_uniform);
    std::vector<std::string> args{x.name, w};
    if (r.chance(0.7)) args.push_back(b.param("b", {cout}, init_kind::bias_uniform, w));
    double mag = x.mag + 1;
    if (transposed && cin > cout) mag = x.mag * std::sqrt(static_cast<double>(cin) / cout) + 1;
    return b.emit(op, args, a, mag, false, false);
  }
  return false;
}

// Elementwise, norm, reduction, softmax, pool and layout heads: a fresh input, then the epilogue.
bool head_on_input(builder& b, std::size_t rank, bool last, int kind) {
  rng_t& r = b.r;
  b.cur = b.input(shape_for(r, rank, r.log_range(b.o.min_elements, b.o.max_elements)));
  switch (kind) {
  case 0: { // unary or binary
    double u = r.real();
    if (u < 0.65) return ep_unary(b);
    if (u < 0.8) return ep_scalar(b);
    if (u < 0.9 || rank < 2) return ep_residual(b);
    return ep_param(b);
  }
  case 1: {
    static const std::vector<std::string> norms = {"batch_norm", "group_norm", "layer_norm",
                                                   "instance_norm", "rms_norm"};
    return ep_norm(b, r.pick(norms));
  }
  case 2: return ep_reduce(b, last);
  case 3: return ep_softmax(b);
  case 4: return ep_pool(b);
  default: return ep_layout(b, true); // a lone reshape would be a view: only ops that move data
  }
}

bool make_head(builder& b, bool last) {
  rng_t& r = b.r;
  // linear, matmul, bmm, conv1-3d, conv_transpose1-3d, elementwise, norm, reduce, softmax, pool,
  // layout
  switch (r.weighted({12, 5, 3, 3, 9, 3, 2, 4, 2, 9, 7, 6, 3, 5, 1})) {
  case 0: return head_linear(b);
  case 1: return head_matmul(b, false);
  case 2: return head_matmul(b, true);
  case 3: return head_conv(b, 1, false);
  case 4: return head_conv(b, 2, false);
  case 5: return head_conv(b, 3, false);
  case 6: return head_conv(b, 1, true);
  case 7: return head_conv(b, 2, true);
  case 8: return head_conv(b, 3, true);
  case 9:
    return head_on_input(b, static_cast<std::size_t>(r.pick<int64_t>({1, 2, 2, 3, 4})), last, 0);
  case 10:
    return head_on_input(b, static_cast<std::size_t>(r.pick<int64_t>({2, 3, 4, 4, 5})), last, 1);
  case 11: return head_on_input(b, static_cast<std::size_t>(r.range(2, 4)), last, 2);
  case 12: return head_on_input(b, static_cast<std::size_t>(r.range(2, 3)), last, 3);
  case 13: return head_on_input(b, static_cast<std::size_t>(r.range(3, 5)), last, 4);
  default: return head_on_input(b, static_cast<std::size_t>(r.range(3, 4)), last, 5);
  }
}

bool add_epilogue(builder& b, bool last) {
  // unary, scalar, param, residual, norm, pool, reduce, softmax, layout, heavy
  switch (b.r.weighted({30, 14, 8, 6, 9, 6, 9, 4, 4, 4})) {
  case 0: return ep_unary(b);
  case 1: return ep_scalar(b);
  case 2: return ep_param(b);
  case 3: return ep_residual(b);
  case 4: return ep_norm(b);
  case 5: return ep_pool(b);
  case 6: return ep_reduce(b, last);
  case 7: return ep_softmax(b);
  case 8: return ep_layout(b, false);
  default: return ep_heavy(b);
  }
}

int pick_length(rng_t& r, int max_ops) {
  static const double weights[] = {1, 2, 2, 1.5, 1.2, 0.8, 0.8, 0.8};
  std::vector<double> w(weights, weights + max_ops);
  return static_cast<int>(r.weighted(w)) + 1;
}

} // namespace

const char* to_string(reject_reason r) {
  switch (r) {
  case reject_reason::shape: return "shape";
  case reject_reason::reference_error: return "reference_error";
  case reject_reason::non_finite: return "non_finite";
  case reject_reason::degenerate: return "degenerate";
  case reject_reason::too_fast: return "too_fast";
  case reject_reason::too_slow: return "too_slow";
  case reject_reason::duplicate_of_suite: return "duplicate_of_suite";
  case reject_reason::duplicate_in_set: return "duplicate_in_set";
  }
  return "?";
}

expected<task> random_task(std::mt19937_64& rng, const synth_options& opts, int64_t index) {
  rng_t r(rng);
  builder b(r, opts);
  int len = pick_length(r, std::clamp(opts.max_ops, 1, 8));
  bool ok = false;
  for (int tries = 0; tries < 4 && !ok; ++tries) {
    auto m = b.save();
    ok = make_head(b, len == 1);
    if (!ok) b.restore(m);
  }
  if (!ok) return error{"no head op fits"};
  for (int i = 1; i < len; ++i) {
    ok = false;
    for (int tries = 0; tries < 12 && !ok; ++tries) {
      auto m = b.save();
      ok = add_epilogue(b, i == len - 1);
      if (!ok) b.restore(m);
    }
    if (!ok) return error{"no epilogue fits after " + b.prev_op() + " " + to_string(b.cur.shape)};
  }
  task t = std::move(b.t);
  t.outputs = {b.cur.name};
  t.level = t.ops.size() == 1 ? 1 : (b.heavy >= 2 && t.ops.size() >= 3 ? 3 : 2);
  t.tol = default_tolerance(t.type);
  char buf[32];
  std::snprintf(buf, sizeof buf, "synth_%06lld", static_cast<long long>(index));
  t.name = buf;
  for (const auto& op : t.ops) t.name += "_" + op.op;
  check_limits lim;
  lim.memory_budget_bytes = int64_t{1} << 30;
  lim.max_ops = 8;
  if (auto st = check_task(t, lim); !st) return st.err();
  return t;
}

// --- synthesizer --------------------------------------------------------------------------------

synthesizer::synthesizer(const synth_options& opts) : opts_(opts), rng_(opts.seed) {}

void synthesizer::exclude(const std::vector<task>& suite) {
  for (const auto& t : suite) suite_.insert(structure_hash(t));
  stats_.suite_tasks += static_cast<int64_t>(suite.size());
  stats_.suite_structures = static_cast<int64_t>(suite_.size());
}

void synthesizer::count(reject_reason r, const std::string& head) {
  ++stats_.rejected[static_cast<std::size_t>(r)];
  if (!head.empty()) ++stats_.rejected_by_head[head][to_string(r)];
}

expected<task> synthesizer::next(int64_t index) {
  for (int a = 0; a < opts_.max_attempts; ++a) {
    ++stats_.candidates;
    auto t = random_task(rng_, opts_, index);
    if (!t) {
      count(reject_reason::shape, "");
      continue;
    }
    uint64_t h = structure_hash(*t);
    if (suite_.count(h)) {
      count(reject_reason::duplicate_of_suite, t->ops[0].op);
      continue;
    }
    if (produced_.count(h)) {
      count(reject_reason::duplicate_in_set, t->ops[0].op);
      continue;
    }
    return t;
  }
  return error{"synth: no new well-typed structure in " + std::to_string(opts_.max_attempts) +
               " draws (max_ops " + std::to_string(opts_.max_ops) +
               "): the structure space looks exhausted"};
}

void synthesizer::reject(const task& t, reject_reason r) {
  count(r, t.ops.empty() ? "" : t.ops[0].op);
}

void synthesizer::accept(const task& t, double eager_ms) {
  produced_.insert(structure_hash(t));
  ++stats_.accepted;
  for (const auto& op : t.ops) ++stats_.by_op[op.op];
  if (!t.ops.empty()) ++stats_.by_head[t.ops[0].op];
  ++stats_.by_length[static_cast<int>(t.ops.size())];
  ++stats_.by_level[t.level];
  if (eager_ms >= 0) stats_.eager_ms.push_back(eager_ms);
}

// --- statistics ---------------------------------------------------------------------------------

int64_t synth_stats::rejected_total() const {
  int64_t n = 0;
  for (auto x : rejected) n += x;
  return n;
}

std::string synth_stats::rejections_line() const {
  std::string s;
  for (std::size_t i = 0; i < reject_reason_count; ++i)
    if (rejected[i])
      s += (s.empty() ? "" : ", ") + std::string(to_string(static_cast<reject_reason>(i))) + " " +
           std::to_string(rejected[i]);
  return s.empty() ? "none" : s;
}

nlohmann::json synth_stats::to_json() const {
  using json = nlohmann::json;
  json j;
  j["accepted"] = accepted;
  j["candidates"] = candidates;
  j["rejected_total"] = rejected_total();
  json rej = json::object();
  for (std::size_t i = 0; i < reject_reason_count; ++i)
    rej[to_string(static_cast<reject_reason>(i))] = rejected[i];
  j["rejected"] = rej;
  j["rejected_by_head"] = rejected_by_head;
  j["seconds"] = seconds;
  j["tasks_per_s"] = seconds > 0 ? static_cast<double>(accepted) / seconds : 0.0;
  j["candidates_per_s"] = seconds > 0 ? static_cast<double>(candidates) / seconds : 0.0;
  j["by_op"] = by_op;
  j["by_head"] = by_head;
  json len = json::object(), lvl = json::object();
  for (const auto& [k, v] : by_length) len[std::to_string(k)] = v;
  for (const auto& [k, v] : by_level) lvl[std::to_string(k)] = v;
  j["by_length"] = len;
  j["by_level"] = lvl;
  j["suite_tasks"] = suite_tasks;
  j["suite_structures"] = suite_structures;
  if (!eager_ms.empty()) {
    auto ms = eager_ms;
    std::sort(ms.begin(), ms.end());
    auto q = [&](double p) {
      return ms[static_cast<std::size_t>(p * static_cast<double>(ms.size() - 1))];
    };
    double sum = 0;
    for (double x : ms) sum += x;
    j["eager_ms"] = {{"min", ms.front()}, {"p10", q(0.1)},
                     {"median", q(0.5)},  {"p90", q(0.9)},
                     {"max", ms.back()},  {"mean", sum / static_cast<double>(ms.size())}};
  }
  return j;
}

} // namespace kiln
