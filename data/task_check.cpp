#include "data/task_check.hpp"

#include "data/op_vocab.hpp"

#include <algorithm>
#include <cmath>
#include <set>

namespace kiln {

namespace {

std::string where(const task& t) {
  return (t.origin.empty() ? std::string() : t.origin + ": ") + "task '" + t.name + "'";
}

status check_decl(const task& t, const tensor_decl& d, const char* section, std::size_t i,
                  const check_limits& lim) {
  std::string at = where(t) + ": " + section + "[" + std::to_string(i) + "] ('" + d.name + "')";
  if (d.shape.size() > 8)
    return error{at + ": shape: rank " + std::to_string(d.shape.size()) + " exceeds 8"};
  for (auto s : d.shape)
    if (s < 1 || s > lim.max_dim)
      return error{at + ": shape: dimension " + std::to_string(s) + " out of range [1, " +
                   std::to_string(lim.max_dim) + "]"};
  if (d.init == init_kind::randint && d.lo >= d.hi)
    return error{at + ": init: randint needs LO < HI"};
  if (d.init == init_kind::kaiming_uniform && d.shape.size() < 2)
    return error{at + ": init: kaiming_uniform needs a weight of rank >= 2 (fan-in from dim 1)"};
  bool drawn =
      d.init == init_kind::uniform || d.init == init_kind::normal || d.init == init_kind::randint;
  if (!drawn && (d.scale != 1.0 || d.shift != 0.0 || d.random_scale || d.softmax))
    return error{at +
                 ": scale / shift / random_scale / softmax apply to uniform, normal and randint "
                 "draws, not " +
                 std::string(to_string(d.init))};
  if (d.softmax && d.structure != structure_kind::none)
    return error{at + ": softmax and structure together: a triangle of a distribution is none"};
  if (!drawn && d.init != init_kind::ones && d.structure != structure_kind::none)
    return error{at + ": structure applies to uniform, normal, randint and ones, not " +
                 std::string(to_string(d.init))};
  // In float32, as the draws apply them: 1e39 would make every value inf, 1e-50 every one zero.
  if (!std::isfinite(float(d.scale)) || float(d.scale) == 0.0f || !std::isfinite(float(d.shift)))
    return error{at + ": scale must be finite and nonzero in float32, shift finite"};
  if (d.structure != structure_kind::none &&
      (d.shape.size() < 2 || d.shape[d.shape.size() - 1] != d.shape[d.shape.size() - 2]))
    return error{at + ": structure " + std::string(to_string(d.structure)) +
                 " needs square matrices in the last two dimensions, got shape " +
                 to_string(d.shape)};
  return ok();
}

bool checked_mul(int64_t a, int64_t b, int64_t& out) { return !__builtin_mul_overflow(a, b, &out); }

} // namespace

int64_t compulsory_bytes(const task& t) {
  int64_t n = 0;
  int64_t esize = static_cast<int64_t>(element_size(t.type));
  for (const auto& d : t.inputs) n += numel(d.shape) * esize;
  for (const auto& d : t.params) n += numel(d.shape) * esize;
  for (const auto& out : t.outputs)
    for (const auto& op : t.ops)
      if (op.out == out) {
        n += numel(op.shape) * (op.is_index ? 8 : esize);
        break;
      }
  return n;
}

std::vector<std::size_t> last_uses(const task& t) {
  const std::size_t n = t.ops.size();
  std::vector<std::size_t> last(n, n);
  std::vector<bool> read(n, false);
  for (std::size_t i = 0; i < n; ++i)
    for (const auto& a : t.ops[i].args) {
      auto r = find_value(t, a);
      if (r.k != value_ref::kind::op) continue;
      last[r.index] = i;
      read[r.index] = true;
    }
  for (std::size_t i = 0; i < n; ++i)
    if (!read[i]) last[i] = i; // nothing reads it: free as soon as it is made
  for (const auto& out : t.outputs) {
    auto r = find_value(t, out);
    if (r.k == value_ref::kind::op) last[r.index] = n;
  }
  return last;
}

int64_t peak_bytes(const task& t) {
  auto bytes = [](const shape_t& s, std::size_t esize, int64_t& b) {
    int64_t n = 1;
    for (auto d : s)
      if (!checked_mul(n, d, n)) return false;
    return checked_mul(n, static_cast<int64_t>(esize), b);
  };
  int64_t live = 0, b = 0;
  for (const auto* decls : {&t.inputs, &t.params})
    for (const auto& d : *decls)
      if (!bytes(d.shape, element_size(t.type), b) || __builtin_add_overflow(live, b, &live))
        return INT64_MAX;
  const auto last = last_uses(t);
  const std::size_t n = t.ops.size();
  std::vector<int64_t> freed(n, 0); // bytes whose last use is op i
  int64_t peak = live;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& op = t.ops[i];
    int64_t size = 0;
    if (!bytes(op.shape, op.is_index ? 8 : element_size(t.type), size) ||
        __builtin_add_overflow(live, size, &live))
      return INT64_MAX;
    peak = std::max(peak, live); // the result and every argument are alive together
    if (last[i] < n) freed[last[i]] += size;
    live -= freed[i];
  }
  return peak;
}

status check_task(task& t, const check_limits& lim) {
  if (t.name.empty()) return error{t.origin + ": name: missing or empty"};
  if (t.level < 1 || t.level > 3)
    return error{where(t) + ": level: expected 1, 2 or 3, got " + std::to_string(t.level)};
  if (t.ops.empty()) return error{where(t) + ": ops: a task needs at least one op"};
  if (static_cast<int>(t.ops.size()) > lim.max_ops)
    return error{where(t) + ": ops: " + std::to_string(t.ops.size()) + " ops exceed the limit of " +
                 std::to_string(lim.max_ops)};
  if (t.outputs.empty()) return error{where(t) + ": outputs: at least one output is required"};
  if (!(t.tol.atol >= 0) || !(t.tol.rtol >= 0))
    return error{where(t) + ": tolerance: atol and rtol must be >= 0"};

  std::set<std::string> names;
  auto define = [&](const std::string& name, const std::string& at) -> status {
    if (name.empty()) return error{at + ": name: empty"};
    if (!names.insert(name).second) return error{at + ": name: '" + name + "' defined twice"};
    return ok();
  };
  for (std::size_t i = 0; i < t.inputs.size(); ++i) {
    std::string at = where(t) + ": inputs[" + std::to_string(i) + "]";
    if (auto s = define(t.inputs[i].name, at); !s) return s;
    if (auto s = check_decl(t, t.inputs[i], "inputs", i, lim); !s) return s;
    if (t.inputs[i].init == init_kind::kaiming_uniform ||
        t.inputs[i].init == init_kind::bias_uniform)
      return error{at + ": init: " + to_string(t.inputs[i].init) + " is for params, not inputs"};
  }
  if (t.inputs.empty()) return error{where(t) + ": inputs: a task needs at least one input"};
  for (std::size_t i = 0; i < t.params.size(); ++i) {
    std::string at = where(t) + ": params[" + std::to_string(i) + "]";
    if (auto s = define(t.params[i].name, at); !s) return s;
    if (auto s = check_decl(t, t.params[i], "params", i, lim); !s) return s;
  }
  for (std::size_t i = 0; i < t.params.size(); ++i) {
    const auto& p = t.params[i];
    if (p.init != init_kind::bias_uniform) continue;
    std::string at = where(t) + ": params[" + std::to_string(i) + "] ('" + p.name + "')";
    if (p.of.empty()) return error{at + ": of: bias_uniform needs `of` naming its weight"};
    auto r = find_value(t, p.of);
    if (r.k != value_ref::kind::param)
      return error{at + ": of: '" + p.of + "' is not a param of this task"};
    if (t.params[r.index].shape.size() < 2)
      return error{at + ": of: '" + p.of + "' has rank < 2, no fan-in"};
  }
  for (std::size_t i = 0; i < t.ops.size(); ++i) {
    auto& op = t.ops[i];
    std::string at =
        where(t) + ": ops[" + std::to_string(i) + "] (" + op.op + " -> '" + op.out + "')";
    const op_info* info = find_op(op.op);
    if (!info) return error{at + ": op: unknown op '" + op.op + "'"};
    std::vector<shape_t> shapes;
    for (std::size_t a = 0; a < op.args.size(); ++a) {
      auto r = find_value(t, op.args[a]);
      if (r.k == value_ref::kind::none || (r.k == value_ref::kind::op && r.index >= i))
        return error{at + ": args[" + std::to_string(a) + "]: '" + op.args[a] +
                     "' is not defined before this op"};
      if (r.k == value_ref::kind::op && t.ops[r.index].is_index)
        return error{at + ": args[" + std::to_string(a) + "]: '" + op.args[a] +
                     "' is an index tensor (argmax/argmin); it may only be an output"};
      shapes.push_back(value_shape(t, r));
    }
    auto shape = infer_shape(*info, shapes, op.attrs);
    if (!shape) return error{at + ": " + shape.message()};
    for (auto s : *shape)
      if (s < 1 || s > lim.max_dim)
        return error{at + ": shape: result dimension " + std::to_string(s) + " out of range"};
    if (auto s = define(op.out, at); !s) return s;
    op.shape = *shape;
    op.is_index = info->family == op_family::arg_reduce ||
                  (info->family == op_family::module && attr_bool(op.attrs, "index", false));
  }
  std::set<std::string> seen_out;
  for (std::size_t i = 0; i < t.outputs.size(); ++i) {
    auto r = find_value(t, t.outputs[i]);
    if (r.k != value_ref::kind::op)
      return error{where(t) + ": outputs[" + std::to_string(i) + "]: '" + t.outputs[i] +
                   "' is not the result of any op"};
    if (!seen_out.insert(t.outputs[i]).second)
      return error{where(t) + ": outputs[" + std::to_string(i) + "]: '" + t.outputs[i] +
                   "' listed twice"};
  }
  int64_t bytes = peak_bytes(t);
  if (bytes > lim.memory_budget_bytes)
    return error{
        where(t) + ": shape: live tensors peak at " +
        (bytes == INT64_MAX ? std::string("more than 2^63 bytes")
                            : std::to_string(bytes >> 20) + " MiB") +
        " (inputs, params and the intermediates alive at once), over the memory budget of " +
        std::to_string(lim.memory_budget_bytes >> 20) + " MiB"};
  return ok();
}

} // namespace kiln
