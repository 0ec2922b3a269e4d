#include "app/config_reader.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <toml++/toml.h>

namespace kiln {

namespace fs = std::filesystem;

struct config_reader::tree : toml::table {
  using toml::table::table;
  explicit tree(toml::table&& t) : toml::table(std::move(t)) {}
};

namespace {

std::string node_type(const toml::node& n) {
  switch (n.type()) {
  case toml::node_type::table: return "a table";
  case toml::node_type::array: return "an array";
  case toml::node_type::string: return "a string";
  case toml::node_type::integer: return "an integer";
  case toml::node_type::floating_point: return "a float";
  case toml::node_type::boolean: return "a boolean";
  default: return "a date/time";
  }
}

void collect_keys(const toml::table& t, const std::string& prefix, std::vector<std::string>& out) {
  for (auto&& [k, v] : t) {
    std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (auto sub = v.as_table())
      collect_keys(*sub, key, out);
    else
      out.push_back(key);
  }
}

} // namespace

config_reader::config_reader(config_reader&&) noexcept = default;
config_reader& config_reader::operator=(config_reader&&) noexcept = default;
config_reader::~config_reader() = default;

expected<config_reader> config_reader::parse(const std::string& text, const std::string& origin,
                                             const std::string& base_dir) {
  config_reader r;
  r.origin_ = origin;
  r.base_dir_ = base_dir;
  try {
    r.root_ = std::make_unique<tree>(toml::parse(text, origin));
  } catch (const toml::parse_error& e) {
    return error{origin + ":" + std::to_string(e.source().begin.line) + ":" +
                 std::to_string(e.source().begin.column) +
                 ": TOML syntax error: " + std::string(e.description())};
  }
  return r;
}

expected<config_reader> config_reader::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error{path + ": cannot open config file"};
  std::ostringstream ss;
  ss << in.rdbuf();
  auto dir = fs::absolute(fs::path(path)).parent_path().string();
  return parse(ss.str(), path, dir);
}

std::string config_reader::where(const std::string& key) const {
  auto node = root_->at_path(key);
  if (node && node.node()->source().begin.line > 0)
    return origin_ + ":" + std::to_string(node.node()->source().begin.line) + ": key '" + key + "'";
  return origin_ + ": key '" + key + "'";
}

void config_reader::problem(const std::string& key, const std::string& msg) {
  problems_.push_back(where(key) + ": " + msg);
}

int64_t config_reader::integer(const std::string& key, int64_t fallback, int64_t min, int64_t max) {
  read_.insert(key);
  auto n = root_->at_path(key);
  if (!n) return fallback;
  auto v = n.value<int64_t>();
  if (!n.is_integer() || !v) {
    problem(key, "expected an integer, got " + node_type(*n.node()));
    return fallback;
  }
  if (*v < min || *v > max) {
    problem(key, "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
                     "], got " + std::to_string(*v));
    return fallback;
  }
  return *v;
}

double config_reader::real(const std::string& key, double fallback) {
  read_.insert(key);
  auto n = root_->at_path(key);
  if (!n) return fallback;
  if (!n.is_number()) {
    problem(key, "expected a number, got " + node_type(*n.node()));
    return fallback;
  }
  return *n.value<double>();
}

bool config_reader::boolean(const std::string& key, bool fallback) {
  read_.insert(key);
  auto n = root_->at_path(key);
  if (!n) return fallback;
  if (!n.is_boolean()) {
    problem(key, "expected a boolean (true or false), got " + node_type(*n.node()));
    return fallback;
  }
  return *n.value<bool>();
}

std::string config_reader::string(const std::string& key, const std::string& fallback) {
  read_.insert(key);
  auto n = root_->at_path(key);
  if (!n) return fallback;
  if (!n.is_string()) {
    problem(key, "expected a string, got " + node_type(*n.node()));
    return fallback;
  }
  return *n.value<std::string>();
}

std::string config_reader::choice(const std::string& key, const std::string& fallback,
                                  const std::vector<std::string>& allowed) {
  auto v = string(key, fallback);
  for (const auto& a : allowed)
    if (a == v) return v;
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  problem(key, "expected one of " + list + ", got '" + v + "'");
  return fallback;
}

std::vector<std::string> config_reader::strings(const std::string& key,
                                                const std::vector<std::string>& fallback) {
  read_.insert(key);
  auto n = root_->at_path(key);
  if (!n) return fallback;
  auto arr = n.as_array();
  if (!arr) {
    problem(key, "expected an array of strings, got " + node_type(*n.node()));
    return fallback;
  }
  std::vector<std::string> out;
  for (std::size_t i = 0; i < arr->size(); ++i) {
    auto s = (*arr)[i].value<std::string>();
    if (!(*arr)[i].is_string() || !s) {
      problem(key,
              "element " + std::to_string(i) + ": expected a string, got " + node_type((*arr)[i]));
      return fallback;
    }
    out.push_back(*s);
  }
  return out;
}

std::string config_reader::resolve(const std::string& key, const std::string& p) const {
  if (p.empty() || fs::path(p).is_absolute()) return p;
  fs::path base = set_keys_.count(key) ? fs::current_path() : fs::path(base_dir_);
  return (base / p).lexically_normal().string();
}

std::string config_reader::path(const std::string& key, const std::string& fallback) {
  return resolve(key, string(key, fallback));
}

std::vector<std::string> config_reader::paths(const std::string& key,
                                              const std::vector<std::string>& fallback) {
  auto ps = strings(key, fallback);
  for (auto& p : ps) p = resolve(key, p);
  return ps;
}

status config_reader::set(const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    return error{"--set '" + assignment + "': expected KEY=VALUE, e.g. run.seed=3"};
  std::string key = assignment.substr(0, eq);
  std::string value = assignment.substr(eq + 1);
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    try {
      parsed = toml::parse("v = \"" + value + "\""); // bare words are strings
    } catch (const toml::parse_error& e) {
      return error{"--set '" + assignment +
                   "': value is not valid TOML: " + std::string(e.description())};
    }
  }
  toml::table* t = root_.get();
  std::size_t start = 0;
  for (std::size_t dot; (dot = key.find('.', start)) != std::string::npos; start = dot + 1) {
    std::string part = key.substr(start, dot - start);
    auto* sub = t->get(part);
    if (!sub) {
      t->insert(part, toml::table{});
      sub = t->get(part);
    }
    if (!sub->as_table()) return error{"--set '" + assignment + "': '" + part + "' is not a table"};
    t = sub->as_table();
  }
  t->insert_or_assign(key.substr(start), *parsed.get("v"));
  set_keys_.insert(key);
  return ok();
}

status config_reader::finish() const {
  std::vector<std::string> all = problems_;
  std::vector<std::string> keys;
  collect_keys(*root_, "", keys);
  for (const auto& k : keys)
    if (!read_.count(k))
      all.push_back(where(k) + ": unknown key (misspelt, or not for this version of kiln)");
  if (all.empty()) return ok();
  std::string msg;
  for (const auto& p : all) msg += (msg.empty() ? "" : "\n") + p;
  return error{msg};
}

} // namespace kiln
