#include "data/task_spec.hpp"

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace kiln {

const char* to_string(dtype t) {
  switch (t) {
  case dtype::float32: return "float32";
  case dtype::float16: return "float16";
  case dtype::bfloat16: return "bfloat16";
  }
  return "?";
}

std::size_t element_size(dtype t) { return t == dtype::float32 ? 4 : 2; }

std::string to_string(const shape_t& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int64_t numel(const shape_t& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

std::string to_string(const attr_value& v) {
  struct visitor {
    std::string operator()(int64_t x) const { return std::to_string(x); }
    std::string operator()(double x) const {
      // Shortest form that reads back as the same double.
      char buf[32];
      for (int prec = 6; prec <= 17; ++prec) {
        std::snprintf(buf, sizeof buf, "%.*g", prec, x);
        if (std::strtod(buf, nullptr) == x) break;
      }
      std::string s = buf;
      if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
      return s;
    }
    std::string operator()(bool x) const { return x ? "true" : "false"; }
    std::string operator()(const std::string& x) const { return "\"" + x + "\""; }
    std::string operator()(const std::vector<int64_t>& x) const { return to_string(x); }
    std::string operator()(const std::vector<double>& x) const {
      std::string out = "[";
      for (std::size_t i = 0; i < x.size(); ++i) out += (i ? ", " : "") + (*this)(x[i]);
      return out + "]";
    }
  };
  return std::visit(visitor{}, v);
}

const char* to_string(structure_kind k) {
  switch (k) {
  case structure_kind::none: return "none";
  case structure_kind::triu: return "triu";
  case structure_kind::tril: return "tril";
  case structure_kind::symmetric: return "symmetric";
  }
  return "?";
}

const char* to_string(init_kind k) {
  switch (k) {
  case init_kind::uniform: return "uniform";
  case init_kind::normal: return "normal";
  case init_kind::randint: return "randint";
  case init_kind::ones: return "ones";
  case init_kind::zeros: return "zeros";
  case init_kind::kaiming_uniform: return "kaiming_uniform";
  case init_kind::bias_uniform: return "bias_uniform";
  }
  return "?";
}

tolerance default_tolerance(dtype t) {
  switch (t) {
  case dtype::float32: return {1e-4, 1e-4, false};
  case dtype::float16: return {1e-2, 1e-2, false};
  case dtype::bfloat16: return {2e-2, 2e-2, false};
  }
  return {};
}

value_ref find_value(const task& t, const std::string& name) {
  for (std::size_t i = 0; i < t.inputs.size(); ++i)
    if (t.inputs[i].name == name) return {value_ref::kind::input, i};
  for (std::size_t i = 0; i < t.params.size(); ++i)
    if (t.params[i].name == name) return {value_ref::kind::param, i};
  for (std::size_t i = 0; i < t.ops.size(); ++i)
    if (t.ops[i].out == name) return {value_ref::kind::op, i};
  return {};
}

const shape_t& value_shape(const task& t, const value_ref& r) {
  static const shape_t empty;
  switch (r.k) {
  case value_ref::kind::input: return t.inputs[r.index].shape;
  case value_ref::kind::param: return t.params[r.index].shape;
  case value_ref::kind::op: return t.ops[r.index].shape;
  case value_ref::kind::none: break;
  }
  return empty;
}

} // namespace kiln
