#include "skills/program.hpp"

#include "skills/grammar.hpp"

#include <sstream>

namespace kiln {

const char* to_string(kernel_template t) {
  switch (t) {
  case kernel_template::elementwise: return "elementwise";
  case kernel_template::gemm: return "gemm";
  case kernel_template::library: return "library";
  case kernel_template::conv: return "conv";
  case kernel_template::pool: return "pool";
  case kernel_template::norm: return "norm";
  case kernel_template::reduce: return "reduce";
  case kernel_template::layout: return "layout";
  }
  return "?";
}

const char* to_string(knob k) {
  switch (k) {
  case knob::block: return "block";
  case knob::vec: return "vec";
  case knob::unroll: return "unroll";
  case knob::tile_m: return "tile_m";
  case knob::tile_n: return "tile_n";
  case knob::tile_k: return "tile_k";
  case knob::split_k: return "split_k";
  case knob::threads: return "threads";
  case knob::precision: return "precision";
  case knob::stage: return "stage";
  case knob::bounds: return "bounds";
  case knob::onepass: return "onepass";
  }
  return "?";
}

const std::vector<kernel_template>& all_templates() {
  static const std::vector<kernel_template> t = {
      kernel_template::elementwise, kernel_template::gemm,  kernel_template::library,
      kernel_template::conv,        kernel_template::pool,  kernel_template::norm,
      kernel_template::reduce,      kernel_template::layout};
  return t;
}

const std::vector<knob>& all_knobs() {
  static const std::vector<knob> k = {knob::block,     knob::vec,    knob::unroll,  knob::tile_m,
                                      knob::tile_n,    knob::tile_k, knob::split_k, knob::threads,
                                      knob::precision, knob::stage,  knob::bounds,  knob::onepass};
  return k;
}

std::string knob_value_word(knob k, int64_t v) {
  if (k == knob::precision) return v == 1 ? "tf32" : v == 2 ? "fp16" : "fp32";
  return std::to_string(v);
}

namespace {

bool parse_value(knob k, const std::string& w, int64_t& out) {
  if (k == knob::precision) {
    if (w == "fp32") return out = 0, true;
    if (w == "tf32") return out = 1, true;
    if (w == "fp16") return out = 2, true;
    return false;
  }
  try {
    std::size_t used = 0;
    out = std::stoll(w, &used);
    return used == w.size();
  } catch (...) {
    return false;
  }
}

} // namespace

std::string print(const program& p) {
  std::ostringstream out;
  for (const auto& g : p.groups) {
    out << "kernel ops " << g.num_ops << " " << to_string(g.tmpl);
    for (const auto& s : g.knobs) {
      out << " " << to_string(s.k) << " " << knob_value_word(s.k, s.value);
    }
    out << " ";
  }
  out << "end";
  return out.str();
}

expected<program> parse_program(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  program p;
  std::size_t i = 0;
  auto at = [&](std::size_t k) {
    return "token " + std::to_string(k) + " ('" +
           (k < words.size() ? words[k] : std::string("<eof>")) + "')";
  };
  int64_t next_op = 0;
  while (true) {
    if (i >= words.size()) return error{"program: missing 'end'"};
    if (words[i] == "end") {
      if (i + 1 != words.size()) return error{"program: " + at(i + 1) + ": text after 'end'"};
      break;
    }
    if (words[i] != "kernel") return error{"program: " + at(i) + ": expected 'kernel' or 'end'"};
    if (i + 3 >= words.size() || words[i + 1] != "ops")
      return error{"program: " + at(i + 1) + ": expected 'ops COUNT TEMPLATE'"};
    group g;
    g.first_op = next_op;
    if (!parse_value(knob::block, words[i + 2], g.num_ops) || g.num_ops < 1 ||
        g.num_ops > max_group_ops)
      return error{"program: " + at(i + 2) + ": expected an op count from 1 to " +
                   std::to_string(max_group_ops)};
    bool found = false;
    for (auto t : all_templates())
      if (words[i + 3] == to_string(t)) g.tmpl = t, found = true;
    if (!found) return error{"program: " + at(i + 3) + ": unknown template"};
    i += 4;
    while (i < words.size() && words[i] != "kernel" && words[i] != "end") {
      bool known = false;
      knob k = knob::block;
      for (auto kk : all_knobs())
        if (words[i] == to_string(kk)) k = kk, known = true;
      if (!known) return error{"program: " + at(i) + ": unknown knob"};
      int64_t v = 0;
      if (i + 1 >= words.size() || !parse_value(k, words[i + 1], v))
        return error{"program: " + at(i + 1) + ": bad value for knob " + to_string(k)};
      for (const auto& s : g.knobs)
        if (s.k == k) return error{"program: " + at(i) + ": knob given twice"};
      g.knobs.push_back({k, v});
      i += 2;
    }
    next_op += g.num_ops;
    p.groups.push_back(std::move(g));
  }
  if (p.groups.empty()) return error{"program: no kernels"};
  return p;
}

program canonical(const program& p) {
  program c;
  for (const auto& g : p.groups) {
    group cg = g;
    cg.knobs.clear();
    for (auto k : template_knobs(g.tmpl)) cg.knobs.push_back({k, g.get(k, knob_default(k))});
    c.groups.push_back(std::move(cg));
  }
  return c;
}

} // namespace kiln
