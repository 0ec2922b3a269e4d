#include "data/task_parse.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <toml++/toml.h>

namespace kiln {

using json = nlohmann::json;

namespace {

struct parse_error {
  std::string message;
};

[[noreturn]] void fail(const std::string& at, const std::string& msg) {
  throw parse_error{at + ": " + msg};
}

std::string type_name(const json& j) {
  if (j.is_number_integer()) return "an integer";
  if (j.is_number_float()) return "a number";
  return j.type_name();
}

void check_keys(const json& obj, const std::string& at, std::initializer_list<const char*> known) {
  if (!obj.is_object()) fail(at, "expected a table, got " + type_name(obj));
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool found = false;
    for (auto k : known) found = found || it.key() == k;
    if (!found) {
      std::string list;
      for (auto k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      fail(at.empty() ? it.key() : at + "." + it.key(),
           "unknown key (expected one of: " + list + ")");
    }
  }
}

const json& need(const json& obj, const char* key, const std::string& at) {
  auto it = obj.find(key);
  if (it == obj.end()) fail(at.empty() ? key : at + "." + key, "missing");
  return *it;
}

std::string str(const json& j, const std::string& at) {
  if (!j.is_string()) fail(at, "expected a string, got " + type_name(j));
  return j.get<std::string>();
}

int64_t integer(const json& j, const std::string& at) {
  if (!j.is_number_integer()) fail(at, "expected an integer, got " + type_name(j));
  return j.get<int64_t>();
}

double real(const json& j, const std::string& at) {
  if (!j.is_number()) fail(at, "expected a number, got " + type_name(j));
  return j.get<double>();
}

shape_t shape(const json& j, const std::string& at) {
  if (!j.is_array()) fail(at, "expected a list of integers, got " + type_name(j));
  shape_t s;
  for (std::size_t i = 0; i < j.size(); ++i)
    s.push_back(integer(j[i], at + "[" + std::to_string(i) + "]"));
  return s;
}

std::vector<std::string> strings(const json& j, const std::string& at) {
  if (!j.is_array()) fail(at, "expected a list of strings, got " + type_name(j));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < j.size(); ++i)
    out.push_back(str(j[i], at + "[" + std::to_string(i) + "]"));
  return out;
}

dtype parse_dtype(const std::string& s, const std::string& at) {
  if (s == "float32") return dtype::float32;
  if (s == "float16") return dtype::float16;
  if (s == "bfloat16") return dtype::bfloat16;
  fail(at, "unknown dtype '" + s + "' (expected float32, float16 or bfloat16)");
}

void parse_init(const std::string& s, tensor_decl& d, const std::string& at) {
  static const std::pair<const char*, init_kind> kinds[] = {
      {"uniform", init_kind::uniform},
      {"normal", init_kind::normal},
      {"ones", init_kind::ones},
      {"zeros", init_kind::zeros},
      {"kaiming_uniform", init_kind::kaiming_uniform},
      {"bias_uniform", init_kind::bias_uniform},
  };
  for (const auto& [name, kind] : kinds)
    if (s == name) {
      d.init = kind;
      return;
    }
  if (s.rfind("randint:", 0) == 0) {
    long long lo = 0, hi = 0;
    char tail = 0;
    if (std::sscanf(s.c_str(), "randint:%lld:%lld%c", &lo, &hi, &tail) == 2 && lo < hi) {
      d.init = init_kind::randint;
      d.lo = lo;
      d.hi = hi;
      return;
    }
    fail(at, "malformed '" + s + "' (expected randint:LO:HI with LO < HI)");
  }
  fail(at, "unknown init '" + s +
               "' (expected uniform, normal, randint:LO:HI, ones, zeros, kaiming_uniform, "
               "bias_uniform)");
}

tensor_decl parse_decl(const json& j, const std::string& at, bool is_param) {
  check_keys(
      j, at,
      {"name", "shape", "init", "of", "scale", "shift", "random_scale", "softmax", "structure"});
  tensor_decl d;
  d.name = str(need(j, "name", at), at + ".name");
  d.shape = shape(need(j, "shape", at), at + ".shape");
  d.init = is_param ? init_kind::kaiming_uniform : init_kind::uniform;
  if (j.contains("init")) parse_init(str(j["init"], at + ".init"), d, at + ".init");
  if (j.contains("of")) d.of = str(j["of"], at + ".of");
  if (j.contains("scale")) d.scale = real(j["scale"], at + ".scale");
  if (j.contains("shift")) d.shift = real(j["shift"], at + ".shift");
  if (j.contains("random_scale")) {
    if (!j["random_scale"].is_boolean()) fail(at + ".random_scale", "expected a boolean");
    d.random_scale = j["random_scale"].get<bool>();
  }
  if (j.contains("softmax")) {
    if (!j["softmax"].is_boolean()) fail(at + ".softmax", "expected a boolean");
    d.softmax = j["softmax"].get<bool>();
  }
  if (j.contains("structure")) {
    std::string s = str(j["structure"], at + ".structure");
    static const structure_kind kinds[] = {structure_kind::none, structure_kind::triu,
                                           structure_kind::tril, structure_kind::symmetric};
    bool known = false;
    for (auto k : kinds)
      if (s == to_string(k)) d.structure = k, known = true;
    if (!known)
      fail(at + ".structure",
           "unknown structure '" + s + "' (expected none, triu, tril or symmetric)");
  }
  return d;
}

attr_value parse_attr(const json& j, const std::string& at) {
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_number_float()) return j.get<double>();
  if (j.is_string()) return j.get<std::string>();
  if (j.is_array()) {
    bool all_int = true;
    for (const auto& e : j) {
      if (!e.is_number()) fail(at, "lists may hold numbers only");
      all_int = all_int && e.is_number_integer();
    }
    if (all_int) return j.get<std::vector<int64_t>>();
    return j.get<std::vector<double>>();
  }
  fail(at, "expected a number, boolean, string or list, got " + type_name(j));
}

// The [kernelbench] table (tools/kernelbench_import.py writes it): checked for shape here; what
// its values mean to Python is checked where Python runs them (the ModelNew build). A param
// without a state_dict key is one an importer rewrite made (a mask, zeros): the Model never held
// it, so ModelNew is not given it.
std::string parse_kernelbench(const json& kb, const task& t) {
  const std::string at = "kernelbench";
  check_keys(kb, at,
             {"source", "init_inputs", "forward", "bool_inputs", "int64_inputs", "state_dict",
              "attributes", "model_keys"});
  str(need(kb, "source", at), at + ".source");
  if (!need(kb, "init_inputs", at).is_array()) fail(at + ".init_inputs", "expected an array");
  auto is_input = [&](const std::string& n) {
    for (const auto& d : t.inputs)
      if (d.name == n) return true;
    return false;
  };
  const auto& fwd = need(kb, "forward", at);
  if (!fwd.is_array()) fail(at + ".forward", "expected an array of tables");
  for (std::size_t i = 0; i < fwd.size(); ++i) {
    std::string here = at + ".forward[" + std::to_string(i) + "]";
    check_keys(fwd[i], here, {"input", "value"});
    if (fwd[i].size() != 1) fail(here, "expected exactly one of input, value");
    if (fwd[i].contains("input") && !is_input(str(fwd[i]["input"], here + ".input")))
      fail(here + ".input", "'" + fwd[i]["input"].get<std::string>() + "' is not an input");
  }
  for (const char* key : {"bool_inputs", "int64_inputs"}) // drawn as float, given as that type
    if (kb.contains(key))
      for (const auto& n : strings(kb[key], at + "." + key))
        if (!is_input(n)) fail(at + "." + key, "'" + n + "' is not an input");
  // A param goes into the Model by its state_dict key, or (a random plain tensor the Model draws
  // in __init__, an RNN's h0) by its attribute path; never both.
  auto by_param = [&](const char* key) {
    std::string here = at + "." + key;
    const auto& table = key == std::string("state_dict") ? need(kb, key, at) : kb[key];
    if (!table.is_object()) fail(here, "expected a table");
    for (auto it = table.begin(); it != table.end(); ++it) {
      bool known = false;
      for (const auto& d : t.params) known = known || d.name == it.key();
      if (!known) fail(here + "." + it.key(), "not a param of the task");
      str(*it, here + "." + it.key());
    }
  };
  by_param("state_dict");
  if (kb.contains("attributes")) {
    by_param("attributes");
    for (auto it = kb["attributes"].begin(); it != kb["attributes"].end(); ++it)
      if (kb["state_dict"].contains(it.key()))
        fail(at + ".attributes." + it.key(), "also in state_dict: a param goes in one way");
  }
  strings(need(kb, "model_keys", at), at + ".model_keys");
  return kb.dump();
}

task parse(const json& j, const std::string& origin) {
  check_keys(j, "",
             {"name", "level", "dtype", "outputs", "tolerance", "inputs", "params", "ops",
              "description", "kernelbench", "param_seed"});
  task t;
  t.origin = origin;
  t.name = str(need(j, "name", ""), "name");
  auto in_task = [&](const std::string& field) { return "task '" + t.name + "': " + field; };
  try {
    t.level = static_cast<int>(integer(need(j, "level", ""), "level"));
    t.type = j.contains("dtype") ? parse_dtype(str(j["dtype"], "dtype"), "dtype") : dtype::float32;
    t.outputs = strings(need(j, "outputs", ""), "outputs");
    if (j.contains("param_seed")) {
      int64_t seed = integer(j["param_seed"], "param_seed");
      if (seed < 0 || seed > max_param_seed)
        fail("param_seed", "expected 0 <= param_seed <= " + std::to_string(max_param_seed) +
                               ", got " + std::to_string(seed));
      t.param_seed = static_cast<uint64_t>(seed);
    }
    t.tol = default_tolerance(t.type);
    if (j.contains("tolerance")) {
      const auto& tol = j["tolerance"];
      check_keys(tol, "tolerance", {"atol", "rtol", "reduced_precision"});
      if (tol.contains("atol")) t.tol.atol = real(tol["atol"], "tolerance.atol");
      if (tol.contains("rtol")) t.tol.rtol = real(tol["rtol"], "tolerance.rtol");
      if (tol.contains("reduced_precision")) {
        if (!tol["reduced_precision"].is_boolean())
          fail("tolerance.reduced_precision", "expected a boolean");
        t.tol.reduced_precision = tol["reduced_precision"].get<bool>();
      }
    }
    auto list = [&](const char* key, bool required) -> const json& {
      static const json empty = json::array();
      if (!j.contains(key)) {
        if (required) fail(key, "missing");
        return empty;
      }
      if (!j[key].is_array()) fail(key, "expected an array of tables, got " + type_name(j[key]));
      return j[key];
    };
    const auto& inputs = list("inputs", true);
    for (std::size_t i = 0; i < inputs.size(); ++i)
      t.inputs.push_back(parse_decl(inputs[i], "inputs[" + std::to_string(i) + "]", false));
    const auto& params = list("params", false);
    for (std::size_t i = 0; i < params.size(); ++i)
      t.params.push_back(parse_decl(params[i], "params[" + std::to_string(i) + "]", true));
    const auto& ops = list("ops", true);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      std::string at = "ops[" + std::to_string(i) + "]";
      check_keys(ops[i], at, {"out", "op", "args", "attrs"});
      op_node op;
      op.out = str(need(ops[i], "out", at), at + ".out");
      op.op = str(need(ops[i], "op", at), at + ".op");
      op.args = strings(need(ops[i], "args", at), at + ".args");
      if (ops[i].contains("attrs")) {
        const auto& attrs = ops[i]["attrs"];
        if (!attrs.is_object()) fail(at + ".attrs", "expected a table, got " + type_name(attrs));
        for (auto it = attrs.begin(); it != attrs.end(); ++it)
          op.attrs[it.key()] = parse_attr(*it, at + ".attrs." + it.key());
      }
      t.ops.push_back(std::move(op));
    }
    if (j.contains("kernelbench")) t.kernelbench_json = parse_kernelbench(j["kernelbench"], t);
  } catch (const parse_error& e) {
    throw parse_error{in_task(e.message)};
  }
  return t;
}

json toml_to_json(const toml::node& n) {
  if (auto t = n.as_table()) {
    json obj = json::object();
    for (auto&& [k, v] : *t) obj[std::string(k.str())] = toml_to_json(v);
    return obj;
  }
  if (auto a = n.as_array()) {
    json arr = json::array();
    for (auto&& v : *a) arr.push_back(toml_to_json(v));
    return arr;
  }
  if (auto v = n.as_integer()) return v->get();
  if (auto v = n.as_floating_point()) return v->get();
  if (auto v = n.as_boolean()) return v->get();
  if (auto v = n.as_string()) return v->get();
  throw parse_error{"line " + std::to_string(n.source().begin.line) +
                    ": dates and times are not valid in a task"};
}

void toml_value(std::ostringstream& out, const attr_value& v) { out << to_string(v); }

// A JSON value as TOML: objects as inline tables `{ "k" = v }`, null refused by the parser
// before it gets here.
std::string toml_inline(const json& v) {
  if (v.is_object()) {
    std::string s = "{ ";
    bool first = true;
    for (const auto& [k, e] : v.items()) {
      s += (first ? "" : ", ") + json(k).dump() + " = " + toml_inline(e);
      first = false;
    }
    return s + " }";
  }
  if (v.is_array()) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + toml_inline(v[i]);
    return s + "]";
  }
  return v.dump();
}

} // namespace

expected<task> task_from_json(const json& j, const std::string& origin) {
  try {
    if (!j.is_object()) return error{origin + ": expected a JSON object, got " + type_name(j)};
    return parse(j, origin);
  } catch (const parse_error& e) {
    return error{origin + ": " + e.message};
  } catch (const json::exception& e) {
    return error{origin + ": " + e.what()};
  }
}

expected<task> task_from_toml(const std::string& text, const std::string& origin) {
  toml::table tbl;
  try {
    tbl = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    return error{origin + ":" + std::to_string(e.source().begin.line) + ":" +
                 std::to_string(e.source().begin.column) +
                 ": TOML syntax error: " + std::string(e.description())};
  }
  try {
    return task_from_json(toml_to_json(tbl), origin);
  } catch (const parse_error& e) {
    return error{origin + ": " + e.message};
  }
}

expected<task> read_task_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error{path + ": cannot open file"};
  std::ostringstream ss;
  ss << in.rdbuf();
  return task_from_toml(ss.str(), path);
}

json task_to_json(const task& t) {
  json j;
  j["name"] = t.name;
  j["level"] = t.level;
  j["dtype"] = to_string(t.type);
  j["outputs"] = t.outputs;
  if (t.param_seed) j["param_seed"] = *t.param_seed;
  j["tolerance"] = {{"atol", t.tol.atol}, {"rtol", t.tol.rtol}};
  if (t.tol.reduced_precision) j["tolerance"]["reduced_precision"] = true;
  auto decl = [](const tensor_decl& d) {
    json o = {{"name", d.name}, {"shape", d.shape}};
    o["init"] = d.init == init_kind::randint
                    ? "randint:" + std::to_string(d.lo) + ":" + std::to_string(d.hi)
                    : std::string(to_string(d.init));
    if (!d.of.empty()) o["of"] = d.of;
    if (d.scale != 1.0) o["scale"] = d.scale;
    if (d.shift != 0.0) o["shift"] = d.shift;
    if (d.random_scale) o["random_scale"] = true;
    if (d.softmax) o["softmax"] = true;
    if (d.structure != structure_kind::none) o["structure"] = to_string(d.structure);
    return o;
  };
  j["inputs"] = json::array();
  for (const auto& d : t.inputs) j["inputs"].push_back(decl(d));
  if (!t.params.empty()) {
    j["params"] = json::array();
    for (const auto& d : t.params) j["params"].push_back(decl(d));
  }
  j["ops"] = json::array();
  for (const auto& op : t.ops) {
    json o = {{"out", op.out}, {"op", op.op}, {"args", op.args}};
    if (!op.attrs.empty()) {
      json a = json::object();
      for (const auto& [k, v] : op.attrs) std::visit([&](const auto& x) { a[k] = x; }, v);
      o["attrs"] = a;
    }
    j["ops"].push_back(o);
  }
  if (!t.kernelbench_json.empty()) j["kernelbench"] = json::parse(t.kernelbench_json);
  return j;
}

std::string task_to_toml(const task& t) {
  std::ostringstream out;
  auto q = [](const std::string& s) {
    return json(s).dump();
  }; // TOML basic strings escape like JSON
  out << "name = " << q(t.name) << "\nlevel = " << t.level << "\ndtype = " << q(to_string(t.type))
      << "\noutputs = [";
  for (std::size_t i = 0; i < t.outputs.size(); ++i) out << (i ? ", " : "") << q(t.outputs[i]);
  out << "]\n";
  if (t.param_seed) out << "param_seed = " << *t.param_seed << "\n";
  out << "\n[tolerance]\natol = " << to_string(attr_value(t.tol.atol))
      << "\nrtol = " << to_string(attr_value(t.tol.rtol)) << "\n";
  if (t.tol.reduced_precision) out << "reduced_precision = true\n";
  auto decl = [&](const char* section, const tensor_decl& d) {
    out << "\n[[" << section << "]]\nname = " << q(d.name) << "\nshape = " << to_string(d.shape)
        << "\ninit = "
        << q(d.init == init_kind::randint
                 ? "randint:" + std::to_string(d.lo) + ":" + std::to_string(d.hi)
                 : std::string(to_string(d.init)))
        << "\n";
    if (!d.of.empty()) out << "of = " << q(d.of) << "\n";
    if (d.scale != 1.0) out << "scale = " << to_string(attr_value(d.scale)) << "\n";
    if (d.shift != 0.0) out << "shift = " << to_string(attr_value(d.shift)) << "\n";
    if (d.random_scale) out << "random_scale = true\n";
    if (d.softmax) out << "softmax = true\n";
    if (d.structure != structure_kind::none)
      out << "structure = " << q(to_string(d.structure)) << "\n";
  };
  for (const auto& d : t.inputs) decl("inputs", d);
  for (const auto& d : t.params) decl("params", d);
  for (const auto& op : t.ops) {
    out << "\n[[ops]]\nout = " << q(op.out) << "\nop = " << q(op.op) << "\nargs = [";
    for (std::size_t i = 0; i < op.args.size(); ++i) out << (i ? ", " : "") << q(op.args[i]);
    out << "]\n";
    if (!op.attrs.empty()) {
      out << "attrs = { ";
      bool first = true;
      for (const auto& [k, v] : op.attrs) {
        out << (first ? "" : ", ") << k << " = ";
        toml_value(out, v);
        first = false;
      }
      out << " }\n";
    }
  }
  // The whole table as one inline value: JSON objects and arrays are TOML inline tables and
  // arrays once their keys are quoted, which json's dump does.
  if (!t.kernelbench_json.empty()) {
    out << "\n[kernelbench]\n";
    const json table = json::parse(t.kernelbench_json);
    for (const auto& [k, v] : table.items()) out << q(k) << " = " << toml_inline(v) << "\n";
  }
  return out.str();
}

} // namespace kiln
