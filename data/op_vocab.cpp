#include "data/op_vocab.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace kiln {

namespace {

using K = attr_kind;

std::vector<op_info> make_ops() {
  std::vector<op_info> ops;
  auto unary = [&](std::string_view n, std::vector<attr_spec> a = {}) {
    ops.push_back({n, op_family::unary, 1, 1, 0, std::move(a)});
  };
  unary("relu");
  unary("leaky_relu", {{"negative_slope", K::real}});
  unary("sigmoid");
  unary("tanh");
  unary("gelu", {{"approximate", K::string}});
  unary("silu");
  unary("mish");
  unary("hardswish");
  unary("hardsigmoid");
  unary("hardtanh", {{"min_val", K::real}, {"max_val", K::real}});
  unary("elu", {{"alpha", K::real}});
  unary("selu");
  unary("softplus", {{"beta", K::real}, {"threshold", K::real}});
  unary("softsign");
  unary("exp");
  unary("log");
  unary("abs");
  unary("neg");
  unary("sqrt");
  unary("rsqrt");
  unary("clamp", {{"min", K::real}, {"max", K::real}});
  for (auto n : {"add", "sub", "mul", "div", "maximum", "minimum", "pow"})
    ops.push_back({n, op_family::binary, 1, 2, 0, {{"scalar", K::real}}});
  ops.push_back({"linear", op_family::linear, 2, 3, 0, {}});
  ops.push_back({"matmul", op_family::matmul, 2, 2, 0, {}});
  ops.push_back({"bmm", op_family::bmm, 2, 2, 0, {}});
  const char* conv_names[] = {"conv1d", "conv2d", "conv3d"};
  const char* convt_names[] = {"conv_transpose1d", "conv_transpose2d", "conv_transpose3d"};
  const char* maxp_names[] = {"max_pool1d", "max_pool2d", "max_pool3d"};
  const char* avgp_names[] = {"avg_pool1d", "avg_pool2d", "avg_pool3d"};
  const char* adap_names[] = {"adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d"};
  for (int d = 1; d <= 3; ++d) {
    ops.push_back({conv_names[d - 1],
                   op_family::conv,
                   2,
                   3,
                   d,
                   {{"stride", K::int_or_ints},
                    {"padding", K::int_or_ints},
                    {"dilation", K::int_or_ints},
                    {"groups", K::integer}}});
    ops.push_back({convt_names[d - 1],
                   op_family::conv_transpose,
                   2,
                   3,
                   d,
                   {{"stride", K::int_or_ints},
                    {"padding", K::int_or_ints},
                    {"output_padding", K::int_or_ints},
                    {"dilation", K::int_or_ints},
                    {"groups", K::integer}}});
    ops.push_back({maxp_names[d - 1],
                   op_family::max_pool,
                   1,
                   1,
                   d,
                   {{"kernel_size", K::int_or_ints, true},
                    {"stride", K::int_or_ints},
                    {"padding", K::int_or_ints},
                    {"dilation", K::int_or_ints},
                    {"ceil_mode", K::boolean}}});
    ops.push_back({avgp_names[d - 1],
                   op_family::avg_pool,
                   1,
                   1,
                   d,
                   {{"kernel_size", K::int_or_ints, true},
                    {"stride", K::int_or_ints},
                    {"padding", K::int_or_ints}}});
    ops.push_back({adap_names[d - 1],
                   op_family::adaptive_avg_pool,
                   1,
                   1,
                   d,
                   {{"output_size", K::int_or_ints, true}}});
  }
  ops.push_back(
      {"batch_norm", op_family::batch_norm, 1, 3, 0, {{"eps", K::real}, {"momentum", K::real}}});
  ops.push_back({"group_norm",
                 op_family::group_norm,
                 1,
                 3,
                 0,
                 {{"num_groups", K::integer, true}, {"eps", K::real}}});
  ops.push_back({"layer_norm",
                 op_family::layer_norm,
                 1,
                 3,
                 0,
                 {{"normalized_shape", K::int_or_ints, true}, {"eps", K::real}}});
  ops.push_back({"instance_norm", op_family::instance_norm, 1, 3, 0, {{"eps", K::real}}});
  ops.push_back({"rms_norm",
                 op_family::rms_norm,
                 1,
                 2,
                 0,
                 {{"normalized_shape", K::int_or_ints, true}, {"eps", K::real}}});
  ops.push_back({"softmax", op_family::softmax, 1, 1, 0, {{"dim", K::integer, true}}});
  ops.push_back({"log_softmax", op_family::softmax, 1, 1, 0, {{"dim", K::integer, true}}});
  ops.push_back({"logsumexp",
                 op_family::logsumexp,
                 1,
                 1,
                 0,
                 {{"dim", K::int_or_ints, true}, {"keepdim", K::boolean}}});
  for (auto n : {"sum", "mean", "amax", "amin"})
    ops.push_back(
        {n, op_family::reduce, 1, 1, 0, {{"dim", K::int_or_ints}, {"keepdim", K::boolean}}});
  ops.push_back(
      {"prod", op_family::reduce, 1, 1, 0, {{"dim", K::integer}, {"keepdim", K::boolean}}});
  for (auto n : {"argmax", "argmin"})
    ops.push_back(
        {n, op_family::arg_reduce, 1, 1, 0, {{"dim", K::integer}, {"keepdim", K::boolean}}});
  ops.push_back({"cumsum", op_family::cumsum, 1, 1, 0, {{"dim", K::integer, true}}});
  ops.push_back({"reshape", op_family::reshape, 1, 1, 0, {{"shape", K::ints, true}}});
  ops.push_back({"permute", op_family::permute, 1, 1, 0, {{"dims", K::ints, true}}});
  ops.push_back({"transpose",
                 op_family::transpose,
                 1,
                 1,
                 0,
                 {{"dim0", K::integer, true}, {"dim1", K::integer, true}}});
  ops.push_back({"flatten",
                 op_family::flatten,
                 1,
                 1,
                 0,
                 {{"start_dim", K::integer}, {"end_dim", K::integer}}});
  ops.push_back({"dropout", op_family::dropout, 1, 1, 0, {{"p", K::real}}});
  ops.push_back({"cat", op_family::cat, 2, 64, 0, {{"dim", K::integer}}});
  // args: the module's tensor inputs, then the params it is given (attrs.state_dict, in order).
  // One op per output of its forward (attrs.output), each with that output's shape.
  ops.push_back({"pytorch_module",
                 op_family::module,
                 1,
                 1 << 16,
                 0,
                 {{"torchscript", K::string, true},
                  {"inputs", K::integer, true},
                  {"state_dict", K::string},
                  {"output", K::integer},
                  {"shape", K::ints, true},
                  {"index", K::boolean}}});
  ops.push_back({"slice",
                 op_family::slice,
                 1,
                 1,
                 0,
                 {{"dim", K::integer, true},
                  {"start", K::integer},
                  {"end", K::integer},
                  {"step", K::integer}}});
  ops.push_back({"flip", op_family::flip, 1, 1, 0, {{"dims", K::int_or_ints, true}}});
  ops.push_back({"pad", op_family::pad, 1, 1, 0, {{"pad", K::ints, true}, {"value", K::real}}});
  return ops;
}

const char* kind_name(attr_kind k) {
  switch (k) {
  case K::integer: return "an integer";
  case K::real: return "a number";
  case K::boolean: return "a boolean";
  case K::string: return "a string";
  case K::ints: return "a list of integers";
  case K::int_or_ints: return "an integer or a list of integers";
  }
  return "?";
}

bool kind_matches(attr_kind k, const attr_value& v) {
  switch (k) {
  case K::integer: return std::holds_alternative<int64_t>(v);
  case K::real: return std::holds_alternative<double>(v) || std::holds_alternative<int64_t>(v);
  case K::boolean: return std::holds_alternative<bool>(v);
  case K::string: return std::holds_alternative<std::string>(v);
  case K::ints: return std::holds_alternative<std::vector<int64_t>>(v);
  case K::int_or_ints:
    return std::holds_alternative<int64_t>(v) || std::holds_alternative<std::vector<int64_t>>(v);
  }
  return false;
}

error fail(const std::string& msg) { return error{msg}; }

// Broadcasts two shapes with NumPy rules.
expected<shape_t> broadcast(const shape_t& a, const shape_t& b, const char* what) {
  std::size_t n = std::max(a.size(), b.size());
  shape_t out(n);
  for (std::size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      return fail(std::string(what) + ": shapes " + to_string(a) + " and " + to_string(b) +
                  " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

expected<shape_t> reduce_shape(const shape_t& x, std::vector<int64_t> dims, bool keepdim) {
  if (dims.empty()) { // all dims
    if (keepdim) return shape_t(x.size(), 1);
    return shape_t{};
  }
  std::vector<bool> reduced(x.size(), false);
  for (auto d : dims) {
    if (!normalize_dim(d, x.size()))
      return fail("attrs.dim: " + std::to_string(d) + " out of range for rank " +
                  std::to_string(x.size()));
    if (reduced[d]) return fail("attrs.dim: dim " + std::to_string(d) + " repeated");
    reduced[d] = true;
  }
  shape_t out;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!reduced[i])
      out.push_back(x[i]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

expected<shape_t> check_norm_params(const std::string& what, const std::vector<shape_t>& args,
                                    const shape_t& expect) {
  for (std::size_t i = 1; i < args.size(); ++i)
    if (args[i] != expect)
      return fail("args[" + std::to_string(i) + "]: " + what + " expects shape " +
                  to_string(expect) + ", got " + to_string(args[i]));
  return args[0];
}

expected<shape_t> conv_like(const op_info& op, const std::vector<shape_t>& args,
                            const attr_map& attrs) {
  const auto& x = args[0];
  const auto& w = args[1];
  std::size_t d = op.spatial;
  if (x.size() != d + 2)
    return fail("args[0]: " + std::string(op.name) + " expects input of rank " +
                std::to_string(d + 2) + " [N, C, ...], got " + to_string(x));
  if (w.size() != d + 2)
    return fail("args[1]: " + std::string(op.name) + " expects weight of rank " +
                std::to_string(d + 2) + ", got " + to_string(w));
  auto stride = attr_ints(attrs, "stride", d, 1);
  auto padding = attr_ints(attrs, "padding", d, 0);
  auto dilation = attr_ints(attrs, "dilation", d, 1);
  int64_t groups = attr_int(attrs, "groups", 1);
  if (stride.size() != d || padding.size() != d || dilation.size() != d)
    return fail("attrs: stride / padding / dilation need " + std::to_string(d) + " entries");
  if (groups < 1) return fail("attrs.groups: must be >= 1");
  for (std::size_t i = 0; i < d; ++i) {
    if (stride[i] < 1) return fail("attrs.stride: must be >= 1");
    if (dilation[i] < 1) return fail("attrs.dilation: must be >= 1");
    if (padding[i] < 0) return fail("attrs.padding: must be >= 0");
  }
  bool transposed = op.family == op_family::conv_transpose;
  int64_t cin = x[1];
  if (cin % groups)
    return fail("attrs.groups: input channels " + std::to_string(cin) +
                " not divisible by groups " + std::to_string(groups));
  int64_t cout;
  if (!transposed) {
    cout = w[0];
    if (cout % groups) return fail("attrs.groups: output channels not divisible by groups");
    if (w[1] * groups != cin)
      return fail("args[1]: weight " + to_string(w) + " expects " + std::to_string(w[1] * groups) +
                  " input channels, input has " + std::to_string(cin));
  } else {
    if (w[0] != cin)
      return fail("args[1]: transposed-conv weight " + to_string(w) + " expects " +
                  std::to_string(w[0]) + " input channels, input has " + std::to_string(cin));
    cout = w[1] * groups;
  }
  if (args.size() == 3 && args[2] != shape_t{cout})
    return fail("args[2]: bias must have shape [" + std::to_string(cout) + "], got " +
                to_string(args[2]));
  shape_t out{x[0], cout};
  auto outpad = attr_ints(attrs, "output_padding", d, 0);
  for (std::size_t i = 0; i < d; ++i) {
    int64_t in = x[2 + i], k = w[2 + i];
    int64_t o;
    if (!transposed) {
      o = (in + 2 * padding[i] - dilation[i] * (k - 1) - 1) / stride[i] + 1;
      if (in + 2 * padding[i] < dilation[i] * (k - 1) + 1) o = 0;
    } else {
      if (outpad[i] < 0 || (outpad[i] >= stride[i] && outpad[i] >= dilation[i]))
        return fail("attrs.output_padding: must be smaller than stride or dilation");
      o = (in - 1) * stride[i] - 2 * padding[i] + dilation[i] * (k - 1) + outpad[i] + 1;
    }
    if (o < 1)
      return fail("shape: " + std::string(op.name) + " output spatial size would be " +
                  std::to_string(o) + " (input " + to_string(x) + ", weight " + to_string(w) + ")");
    out.push_back(o);
  }
  return out;
}

int64_t pool_out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dilation,
                      bool ceil_mode) {
  int64_t span = in + 2 * pad - dilation * (k - 1) - 1;
  int64_t o = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  // PyTorch's rule: the last window must start inside the input or its left padding.
  if (ceil_mode && (o - 1) * stride >= in + pad) --o;
  return o;
}

expected<shape_t> pool_like(const op_info& op, const shape_t& x, const attr_map& attrs) {
  std::size_t d = op.spatial;
  if (x.size() != d + 1 && x.size() != d + 2)
    return fail("args[0]: " + std::string(op.name) + " expects rank " + std::to_string(d + 1) +
                " or " + std::to_string(d + 2) + ", got " + to_string(x));
  std::size_t lead = x.size() - d;
  shape_t out(x.begin(), x.begin() + lead);
  if (op.family == op_family::adaptive_avg_pool) {
    auto os = attr_ints(attrs, "output_size", d, 1);
    if (os.size() != d) return fail("attrs.output_size: needs " + std::to_string(d) + " entries");
    for (auto o : os) {
      if (o < 1) return fail("attrs.output_size: must be >= 1");
      out.push_back(o);
    }
    return out;
  }
  auto k = attr_ints(attrs, "kernel_size", d, 1);
  auto stride = has_attr(attrs, "stride") ? attr_ints(attrs, "stride", d, 1) : k;
  auto padding = attr_ints(attrs, "padding", d, 0);
  auto dilation = attr_ints(attrs, "dilation", d, 1);
  bool ceil_mode = attr_bool(attrs, "ceil_mode", false);
  if (k.size() != d || stride.size() != d || padding.size() != d || dilation.size() != d)
    return fail("attrs: kernel_size / stride / padding need " + std::to_string(d) + " entries");
  for (std::size_t i = 0; i < d; ++i) {
    if (k[i] < 1) return fail("attrs.kernel_size: must be >= 1");
    if (stride[i] < 1) return fail("attrs.stride: must be >= 1");
    if (dilation[i] < 1) return fail("attrs.dilation: must be >= 1");
    if (padding[i] < 0 || padding[i] * 2 > k[i])
      return fail("attrs.padding: must be between 0 and half the kernel size");
    int64_t in = x[lead + i];
    if (in + 2 * padding[i] < dilation[i] * (k[i] - 1) + 1)
      return fail("shape: " + std::string(op.name) + " window larger than input " + to_string(x));
    out.push_back(pool_out_size(in, k[i], stride[i], padding[i], dilation[i], ceil_mode));
  }
  return out;
}

expected<shape_t> matmul_shape(const shape_t& a, const shape_t& b) {
  if (a.empty() || b.empty()) return fail("args: matmul needs tensors of rank >= 1");
  shape_t aa = a, bb = b;
  bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) aa.insert(aa.begin(), 1);
  if (b_vec) bb.push_back(1);
  int64_t k1 = aa.back(), k2 = bb[bb.size() - 2];
  if (k1 != k2)
    return fail("args: matmul inner dimensions differ: " + to_string(a) + " x " + to_string(b));
  shape_t ba(aa.begin(), aa.end() - 2), bbt(bb.begin(), bb.end() - 2);
  auto batch = broadcast(ba, bbt, "matmul batch dims");
  if (!batch) return batch.err();
  shape_t out = *batch;
  if (!a_vec) out.push_back(aa[aa.size() - 2]);
  if (!b_vec) out.push_back(bb.back());
  return out;
}

} // namespace

const std::vector<op_info>& all_ops() {
  static const std::vector<op_info> ops = make_ops();
  return ops;
}

bool has_module_reference(const task& t) {
  for (const auto& op : t.ops)
    if (const auto* info = find_op(op.op); info && info->family == op_family::module) return true;
  return false;
}

const op_info* find_op(std::string_view name) {
  for (const auto& op : all_ops())
    if (op.name == name) return &op;
  return nullptr;
}

bool has_attr(const attr_map& a, std::string_view key) {
  return a.find(std::string(key)) != a.end();
}

int64_t attr_int(const attr_map& a, std::string_view key, int64_t fallback) {
  auto it = a.find(std::string(key));
  if (it == a.end()) return fallback;
  if (auto p = std::get_if<int64_t>(&it->second)) return *p;
  return fallback;
}

double attr_real(const attr_map& a, std::string_view key, double fallback) {
  auto it = a.find(std::string(key));
  if (it == a.end()) return fallback;
  if (auto p = std::get_if<double>(&it->second)) return *p;
  if (auto p = std::get_if<int64_t>(&it->second)) return static_cast<double>(*p);
  return fallback;
}

bool attr_bool(const attr_map& a, std::string_view key, bool fallback) {
  auto it = a.find(std::string(key));
  if (it == a.end()) return fallback;
  if (auto p = std::get_if<bool>(&it->second)) return *p;
  return fallback;
}

std::string attr_string(const attr_map& a, std::string_view key, const std::string& fallback) {
  auto it = a.find(std::string(key));
  if (it == a.end()) return fallback;
  if (auto p = std::get_if<std::string>(&it->second)) return *p;
  return fallback;
}

std::vector<int64_t> attr_ints(const attr_map& a, std::string_view key, std::size_t n,
                               int64_t fallback) {
  auto it = a.find(std::string(key));
  if (it == a.end()) return std::vector<int64_t>(n, fallback);
  if (auto p = std::get_if<int64_t>(&it->second)) return std::vector<int64_t>(n, *p);
  if (auto p = std::get_if<std::vector<int64_t>>(&it->second)) return *p;
  return std::vector<int64_t>(n, fallback);
}

std::vector<int64_t> attr_dims(const attr_map& a, std::string_view key) {
  auto it = a.find(std::string(key));
  if (it == a.end()) return {};
  if (auto p = std::get_if<int64_t>(&it->second)) return {*p};
  if (auto p = std::get_if<std::vector<int64_t>>(&it->second)) return *p;
  return {};
}

std::vector<std::string> attr_words(const attr_map& a, std::string_view key) {
  std::vector<std::string> out;
  std::istringstream in(attr_string(a, key, ""));
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

bool normalize_dim(int64_t& dim, std::size_t rank) {
  int64_t r = static_cast<int64_t>(rank);
  if (r == 0) return dim == 0 || dim == -1 ? (dim = 0, true) : false;
  if (dim < -r || dim >= r) return false;
  if (dim < 0) dim += r;
  return true;
}

status check_attrs(const op_info& op, const attr_map& attrs) {
  for (const auto& [key, value] : attrs) {
    auto it = std::find_if(op.attrs.begin(), op.attrs.end(),
                           [&](const attr_spec& s) { return s.name == key; });
    if (it == op.attrs.end()) {
      std::string known;
      for (const auto& s : op.attrs) known += (known.empty() ? "" : ", ") + std::string(s.name);
      return error{"attrs." + key + ": unknown attribute for " + std::string(op.name) +
                   (known.empty() ? " (it takes none)" : " (known: " + known + ")")};
    }
    if (!kind_matches(it->kind, value))
      return error{"attrs." + key + ": expected " + kind_name(it->kind) + ", got " +
                   to_string(value)};
  }
  for (const auto& s : op.attrs)
    if (s.required && !attrs.count(std::string(s.name)))
      return error{"attrs." + std::string(s.name) + ": required by " + std::string(op.name)};
  return ok();
}

expected<shape_t> infer_shape(const op_info& op, const std::vector<shape_t>& args,
                              const attr_map& attrs) {
  int n = static_cast<int>(args.size());
  if (n < op.min_args || n > op.max_args) {
    std::string want = op.min_args == op.max_args
                           ? std::to_string(op.min_args)
                           : std::to_string(op.min_args) + " to " + std::to_string(op.max_args);
    return fail("args: " + std::string(op.name) + " takes " + want + " argument(s), got " +
                std::to_string(n));
  }
  if (auto st = check_attrs(op, attrs); !st) return st.err();
  const shape_t& x = args[0];
  auto rank = x.size();
  switch (op.family) {
  case op_family::unary: {
    if (op.name == "gelu") {
      auto approx = attr_string(attrs, "approximate", "none");
      if (approx != "none" && approx != "tanh")
        return fail("attrs.approximate: expected \"none\" or \"tanh\", got \"" + approx + "\"");
    }
    if (op.name == "clamp" && !has_attr(attrs, "min") && !has_attr(attrs, "max"))
      return fail("attrs: clamp needs min or max");
    return x;
  }
  case op_family::binary:
    if (n == 2) {
      if (has_attr(attrs, "scalar"))
        return fail("attrs.scalar: given together with a second argument");
      return broadcast(args[0], args[1], "args");
    }
    if (!has_attr(attrs, "scalar"))
      return fail("attrs.scalar: " + std::string(op.name) +
                  " with one argument needs attrs.scalar");
    return x;
  case op_family::linear: {
    const auto& w = args[1];
    if (rank < 1 || w.size() != 2)
      return fail("args: linear expects x [..., in] and w [out, in], got " + to_string(x) +
                  " and " + to_string(w));
    if (x.back() != w[1])
      return fail("args[1]: linear weight " + to_string(w) + " expects in_features " +
                  std::to_string(w[1]) + ", x has " + std::to_string(x.back()));
    if (n == 3 && args[2] != shape_t{w[0]})
      return fail("args[2]: linear bias must have shape [" + std::to_string(w[0]) + "], got " +
                  to_string(args[2]));
    shape_t out = x;
    out.back() = w[0];
    return out;
  }
  case op_family::matmul: return matmul_shape(args[0], args[1]);
  case op_family::bmm: {
    const auto& a = args[0];
    const auto& b = args[1];
    if (a.size() != 3 || b.size() != 3 || a[0] != b[0] || a[2] != b[1])
      return fail("args: bmm expects [B, n, k] and [B, k, m], got " + to_string(a) + " and " +
                  to_string(b));
    return shape_t{a[0], a[1], b[2]};
  }
  case op_family::conv:
  case op_family::conv_transpose: return conv_like(op, args, attrs);
  case op_family::max_pool:
  case op_family::avg_pool:
  case op_family::adaptive_avg_pool: return pool_like(op, x, attrs);
  case op_family::batch_norm:
    if (n == 2) return fail("args: batch_norm takes x alone or x, weight and bias");
    if (rank < 2) return fail("args[0]: batch_norm expects [N, C, ...], got " + to_string(x));
    if (attr_real(attrs, "eps", 1e-5) <= 0) return fail("attrs.eps: must be > 0");
    return check_norm_params("batch_norm", args, {x[1]});
  case op_family::instance_norm:
    if (n == 2) return fail("args: instance_norm takes x alone or x, weight and bias");
    if (rank < 3)
      return fail("args[0]: instance_norm expects [N, C, spatial...], got " + to_string(x));
    if (attr_real(attrs, "eps", 1e-5) <= 0) return fail("attrs.eps: must be > 0");
    return check_norm_params("instance_norm", args, {x[1]});
  case op_family::group_norm: {
    if (n == 2) return fail("args: group_norm takes x alone or x, weight and bias");
    if (rank < 2) return fail("args[0]: group_norm expects [N, C, ...], got " + to_string(x));
    int64_t g = attr_int(attrs, "num_groups", 1);
    if (g < 1 || x[1] % g)
      return fail("attrs.num_groups: " + std::to_string(g) + " does not divide " +
                  std::to_string(x[1]) + " channels");
    if (attr_real(attrs, "eps", 1e-5) <= 0) return fail("attrs.eps: must be > 0");
    return check_norm_params("group_norm", args, {x[1]});
  }
  case op_family::layer_norm:
  case op_family::rms_norm: {
    if (op.family == op_family::layer_norm && n == 2)
      return fail("args: layer_norm takes x alone or x, weight and bias");
    auto ns = attr_dims(attrs, "normalized_shape");
    if (ns.empty() || ns.size() > rank)
      return fail("attrs.normalized_shape: must be a non-empty suffix of input shape " +
                  to_string(x));
    shape_t tail(x.end() - ns.size(), x.end());
    if (tail != ns)
      return fail("attrs.normalized_shape: " + to_string(ns) + " is not the trailing shape of " +
                  to_string(x));
    if (has_attr(attrs, "eps") && attr_real(attrs, "eps", 1) <= 0)
      return fail("attrs.eps: must be > 0");
    return check_norm_params(std::string(op.name), args, ns);
  }
  case op_family::softmax:
  case op_family::cumsum: {
    int64_t d = attr_int(attrs, "dim", 0);
    if (!normalize_dim(d, rank))
      return fail("attrs.dim: " + std::to_string(attr_int(attrs, "dim", 0)) +
                  " out of range for rank " + std::to_string(rank));
    return x;
  }
  case op_family::logsumexp:
  case op_family::reduce: {
    auto dims = attr_dims(attrs, "dim");
    if (op.family == op_family::logsumexp && dims.empty())
      return fail("attrs.dim: logsumexp needs at least one dim");
    return reduce_shape(x, dims, attr_bool(attrs, "keepdim", false));
  }
  case op_family::arg_reduce: {
    if (!has_attr(attrs, "dim")) {
      if (attr_bool(attrs, "keepdim", false)) return shape_t(rank, 1);
      return shape_t{};
    }
    return reduce_shape(x, {attr_int(attrs, "dim", 0)}, attr_bool(attrs, "keepdim", false));
  }
  case op_family::reshape: {
    auto s = attr_dims(attrs, "shape");
    int infer = -1;
    int64_t known = 1;
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s[i] == -1) {
        if (infer >= 0) return fail("attrs.shape: more than one -1");
        infer = static_cast<int>(i);
      } else if (s[i] < 1) {
        return fail("attrs.shape: entries must be >= 1 or a single -1");
      } else {
        known *= s[i];
      }
    }
    int64_t total = numel(x);
    if (infer >= 0) {
      if (total % known)
        return fail("attrs.shape: " + to_string(s) + " does not fit " + to_string(x));
      s[infer] = total / known;
    } else if (known != total) {
      return fail("attrs.shape: " + to_string(s) + " has " + std::to_string(known) +
                  " elements, input " + to_string(x) + " has " + std::to_string(total));
    }
    return s;
  }
  case op_family::permute: {
    auto dims = attr_dims(attrs, "dims");
    if (dims.size() != rank)
      return fail("attrs.dims: needs " + std::to_string(rank) + " entries, got " +
                  std::to_string(dims.size()));
    std::vector<bool> seen(rank, false);
    shape_t out;
    for (auto d : dims) {
      if (!normalize_dim(d, rank) || seen[d])
        return fail("attrs.dims: " + to_string(attr_dims(attrs, "dims")) +
                    " is not a permutation of 0.." + std::to_string(rank - 1));
      seen[d] = true;
      out.push_back(x[d]);
    }
    return out;
  }
  case op_family::transpose: {
    int64_t d0 = attr_int(attrs, "dim0", 0), d1 = attr_int(attrs, "dim1", 0);
    if (!normalize_dim(d0, rank)) return fail("attrs.dim0: out of range");
    if (!normalize_dim(d1, rank)) return fail("attrs.dim1: out of range");
    shape_t out = x;
    std::swap(out[d0], out[d1]);
    return out;
  }
  case op_family::flatten: {
    if (rank == 0) return shape_t{1};
    int64_t s = attr_int(attrs, "start_dim", 0), e = attr_int(attrs, "end_dim", -1);
    if (!normalize_dim(s, rank)) return fail("attrs.start_dim: out of range");
    if (!normalize_dim(e, rank)) return fail("attrs.end_dim: out of range");
    if (s > e) return fail("attrs.start_dim: must not come after end_dim");
    shape_t out(x.begin(), x.begin() + s);
    int64_t m = 1;
    for (int64_t i = s; i <= e; ++i) m *= x[i];
    out.push_back(m);
    out.insert(out.end(), x.begin() + e + 1, x.end());
    return out;
  }
  case op_family::dropout:
    if (attr_real(attrs, "p", 0.0) != 0.0)
      return fail("attrs.p: only dropout with p = 0 is deterministic; got " +
                  std::to_string(attr_real(attrs, "p", 0.0)));
    return x;
  case op_family::cat: {
    int64_t dim = attr_int(attrs, "dim", 0);
    if (rank == 0) return fail("args[0]: cat needs tensors of rank >= 1");
    if (!normalize_dim(dim, rank)) return fail("attrs.dim: out of range for " + to_string(x));
    shape_t out = x;
    for (std::size_t i = 1; i < args.size(); ++i) {
      const auto& y = args[i];
      bool fits = y.size() == rank;
      for (std::size_t d = 0; fits && d < rank; ++d)
        fits = static_cast<int64_t>(d) == dim || y[d] == x[d];
      if (!fits)
        return fail("args[" + std::to_string(i) + "]: cat on dim " + std::to_string(dim) +
                    " needs " + to_string(x) + " outside that dim, got " + to_string(y));
      out[dim] += y[dim];
    }
    return out;
  }
  case op_family::flip: {
    if (rank == 0) return fail("args[0]: flip needs a tensor of rank >= 1");
    std::vector<bool> seen(rank, false);
    for (auto d : attr_dims(attrs, "dims")) {
      if (!normalize_dim(d, rank) || seen[d])
        return fail("attrs.dims: " + to_string(attr_dims(attrs, "dims")) +
                    " are not distinct dims of " + to_string(x));
      seen[d] = true;
    }
    return x;
  }
  case op_family::module: {
    auto inputs = attr_int(attrs, "inputs", 0);
    if (inputs < 1 || inputs > n)
      return fail("attrs.inputs: " + std::to_string(inputs) + " for " + std::to_string(n) +
                  " args");
    auto n_keys = static_cast<int64_t>(attr_words(attrs, "state_dict").size());
    if (inputs + n_keys != n)
      return fail("attrs.state_dict: " + std::to_string(n_keys) + " keys for " +
                  std::to_string(n - inputs) + " params");
    if (attr_int(attrs, "output", 0) < 0) return fail("attrs.output: must be >= 0");
    auto shape = attr_dims(attrs, "shape");
    for (auto d : shape)
      if (d < 1) return fail("attrs.shape: " + to_string(shape) + " has a size below 1");
    return shape;
  }
  case op_family::pad: {
    auto w = pad_widths_of(attrs, x);
    if (!w) return w.err();
    shape_t out = x;
    for (std::size_t d = 0; d < rank; ++d) out[d] += w->before[d] + w->after[d];
    return out;
  }
  case op_family::slice: {
    auto w = slice_window_of(attrs, x);
    if (!w) return w.err();
    if (w->len == 0) return fail("attrs: the slice selects no element of " + to_string(x));
    shape_t out = x;
    out[w->dim] = w->len;
    return out;
  }
  }
  return fail("internal: unhandled op family");
}

expected<pad_widths> pad_widths_of(const attr_map& attrs, const shape_t& x) {
  const auto it = attrs.find("pad");
  const auto* list = it == attrs.end() ? nullptr : std::get_if<std::vector<int64_t>>(&it->second);
  if (!list) return fail("attrs.pad: required (a list of integers)");
  const auto& p = *list;
  if (p.empty() || p.size() % 2 != 0 || p.size() > 2 * x.size())
    return fail("attrs.pad: needs an even number of widths, at most two per dim of " +
                to_string(x) + ", got " + std::to_string(p.size()));
  const double value = attr_real(attrs, "value", 0.0);
  if (!std::isfinite(value)) return fail("attrs.value: must be finite");
  pad_widths w{std::vector<int64_t>(x.size(), 0), std::vector<int64_t>(x.size(), 0)};
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] < 0 || p[i] > (int64_t{1} << 31))
      return fail("attrs.pad[" + std::to_string(i) + "]: widths must be in [0, 2^31] (crop with " +
                  "slice), got " + std::to_string(p[i]));
    const std::size_t d = x.size() - 1 - i / 2;
    (i % 2 == 0 ? w.before : w.after)[d] = p[i];
  }
  return w;
}

expected<slice_window> slice_window_of(const attr_map& attrs, const shape_t& x) {
  slice_window w;
  w.dim = attr_int(attrs, "dim", 0);
  if (x.empty()) return fail("args[0]: slice needs a tensor of rank >= 1");
  if (!normalize_dim(w.dim, x.size())) return fail("attrs.dim: out of range for " + to_string(x));
  w.step = attr_int(attrs, "step", 1);
  if (w.step < 1) return fail("attrs.step: must be >= 1, got " + std::to_string(w.step));
  const int64_t n = x[w.dim];
  auto clamp = [n](int64_t v) {
    if (v < 0) v = v < -n ? 0 : v + n;
    return std::min(v, n);
  };
  w.start = clamp(attr_int(attrs, "start", 0));
  int64_t end = clamp(attr_int(attrs, "end", n));
  w.len = end > w.start ? (end - w.start - 1) / w.step + 1 : 0;
  return w;
}

bool is_view_layout(op_family f) {
  return f == op_family::reshape || f == op_family::flatten || f == op_family::dropout;
}

} // namespace kiln
