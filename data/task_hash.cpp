#include "data/task_hash.hpp"

#include "data/op_vocab.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

namespace kiln {

namespace {

// Bump when the canonical text changes, so stored hashes are never compared across versions.
constexpr const char* hash_version = "kiln-task-hash v1";

// An attr in canonical form: ints given for reals become reals, a bare int for an int-or-ints
// attr becomes a list (expanded to the spatial rank for conv / pool ops), so equivalent spellings
// hash alike.
attr_value canonical_attr(const op_info* info, const std::string& key, const attr_value& v) {
  if (!info) return v;
  auto it = std::find_if(info->attrs.begin(), info->attrs.end(),
                         [&](const attr_spec& s) { return s.name == key; });
  if (it == info->attrs.end()) return v;
  if (it->kind == attr_kind::real)
    if (auto p = std::get_if<int64_t>(&v)) return static_cast<double>(*p);
  if (it->kind == attr_kind::int_or_ints)
    if (auto p = std::get_if<int64_t>(&v))
      return std::vector<int64_t>(info->spatial > 0 ? info->spatial : 1, *p);
  return v;
}

// Attrs that only restate sizes: in the structure text they keep their length (and the -1 of a
// reshape), not the sizes themselves.
std::string size_free_attr(const std::string& key, const attr_value& v, const op_info* info) {
  if (!info) return to_string(v);
  bool norm = info->family == op_family::layer_norm || info->family == op_family::rms_norm;
  if (norm && key == "normalized_shape") {
    std::size_t n = 1;
    if (auto p = std::get_if<std::vector<int64_t>>(&v)) n = p->size();
    return "len" + std::to_string(n);
  }
  if (info->family == op_family::reshape && key == "shape") {
    if (auto p = std::get_if<std::vector<int64_t>>(&v)) {
      std::string out = "[";
      for (std::size_t i = 0; i < p->size(); ++i)
        out += std::string(i ? "," : "") + ((*p)[i] == -1 ? "-1" : "*");
      return out + "]";
    }
  }
  return to_string(v);
}

std::string init_text(const tensor_decl& d, bool with_sizes) {
  std::string s = to_string(d.init);
  if (d.init == init_kind::randint && with_sizes)
    s += ":" + std::to_string(d.lo) + ":" + std::to_string(d.hi);
  if (with_sizes && (d.scale != 1.0 || d.shift != 0.0))
    s += "*" + to_string(attr_value(d.scale)) + "+" + to_string(attr_value(d.shift));
  if (d.random_scale) s += "*u";
  if (d.softmax) s += "/softmax";
  if (d.structure != structure_kind::none) s += std::string("/") + to_string(d.structure);
  return s;
}

std::string real_text(double x) { return to_string(attr_value(x)); }

std::string canonical(const task& t, bool with_sizes) {
  // Canonical names: inputs in declaration order (they are the kernel's signature); params in
  // declaration order for content (it fixes which random values each gets) but in order of first
  // use for structure (the same graph written with params listed differently is the same graph).
  std::map<std::string, std::string> rename;
  for (std::size_t i = 0; i < t.inputs.size(); ++i)
    rename[t.inputs[i].name] = "i" + std::to_string(i);
  std::vector<std::size_t> param_order;
  if (with_sizes) {
    for (std::size_t i = 0; i < t.params.size(); ++i) param_order.push_back(i);
  } else {
    std::vector<bool> placed(t.params.size(), false);
    auto place = [&](const std::string& name) {
      for (std::size_t i = 0; i < t.params.size(); ++i)
        if (!placed[i] && t.params[i].name == name) {
          placed[i] = true;
          param_order.push_back(i);
        }
    };
    for (const auto& op : t.ops)
      for (const auto& a : op.args) place(a);
    for (std::size_t i = 0; i < t.params.size(); ++i)
      if (!placed[i]) param_order.push_back(i); // unused params: declaration order
  }
  for (std::size_t k = 0; k < param_order.size(); ++k)
    rename.emplace(t.params[param_order[k]].name, "p" + std::to_string(k));
  for (std::size_t i = 0; i < t.ops.size(); ++i)
    rename.emplace(t.ops[i].out, "o" + std::to_string(i));
  auto name_of = [&](const std::string& n) {
    auto it = rename.find(n);
    return it == rename.end() ? "?" + n : it->second;
  };

  std::string s = hash_version;
  s += with_sizes ? " content\n" : " structure\n";
  s += "dtype " + std::string(to_string(t.type)) + "\n";
  if (with_sizes)
    s += "tol " + real_text(t.tol.atol) + " " + real_text(t.tol.rtol) +
         (t.tol.reduced_precision ? " reduced\n" : " exact\n");
  if (with_sizes && t.param_seed) s += "param_seed " + std::to_string(*t.param_seed) + "\n";
  auto decl = [&](const char* what, const tensor_decl& d) {
    s += std::string(what) + " " + name_of(d.name) + " ";
    s += with_sizes ? to_string(d.shape) : "r" + std::to_string(d.shape.size());
    s += " " + init_text(d, with_sizes);
    if (!d.of.empty()) s += " of=" + name_of(d.of);
    s += "\n";
  };
  for (const auto& d : t.inputs) decl("in", d);
  for (auto i : param_order) decl("param", t.params[i]);
  for (const auto& op : t.ops) {
    const op_info* info = find_op(op.op);
    s += "op " + name_of(op.out) + " = " + op.op + "(";
    for (std::size_t a = 0; a < op.args.size(); ++a) s += (a ? "," : "") + name_of(op.args[a]);
    s += ") {";
    bool first = true;
    for (const auto& [key, value] : op.attrs) { // attr_map is ordered: canonical order
      attr_value v = canonical_attr(info, key, value);
      s += (first ? "" : ",") + key + "=" +
           (with_sizes ? to_string(v) : size_free_attr(key, v, info));
      first = false;
    }
    s += "}\n";
  }
  for (const auto& o : t.outputs) s += "out " + name_of(o) + "\n";
  return s;
}

} // namespace

uint64_t fnv1a64(const std::string& bytes) {
  uint64_t h = 14695981039346656037ull; // the FNV-1a 64 offset basis
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string structure_text(const task& t) { return canonical(t, false); }
std::string content_text(const task& t) { return canonical(t, true); }

uint64_t structure_hash(const task& t) { return fnv1a64(structure_text(t)); }
uint64_t content_hash(const task& t) { return fnv1a64(content_text(t)); }

std::string hash_hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

} // namespace kiln
