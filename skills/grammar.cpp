#include "skills/grammar.hpp"

#include "data/op_vocab.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace kiln {

namespace {

std::vector<std::string> make_vocab() {
  std::vector<std::string> v = {"kernel", "ops", "end"};
  for (auto t : all_templates()) v.push_back(to_string(t));
  for (auto k : all_knobs()) v.push_back(to_string(k));
  std::set<int64_t> numbers;
  for (int64_t n = 0; n <= max_group_ops; ++n) numbers.insert(n);
  for (auto k : all_knobs())
    if (k != knob::precision)
      for (auto x : knob_values(k)) numbers.insert(x);
  for (auto n : numbers) v.push_back(std::to_string(n));
  for (auto w : {"fp32", "tf32", "fp16"}) v.push_back(w);
  return v;
}

op_family family_of(const op_node& op) { return find_op(op.op)->family; }

bool is_elementwise(op_family f) { return f == op_family::unary || f == op_family::binary; }

std::vector<kernel_template> anchor_templates(op_family f) {
  switch (f) {
  case op_family::unary:
  case op_family::binary: return {kernel_template::elementwise};
  case op_family::linear:
  case op_family::matmul:
  case op_family::bmm: return {kernel_template::gemm, kernel_template::library};
  case op_family::conv:
  case op_family::conv_transpose: return {kernel_template::conv, kernel_template::library};
  case op_family::max_pool:
  case op_family::avg_pool:
  case op_family::adaptive_avg_pool: return {kernel_template::pool};
  case op_family::batch_norm:
  case op_family::group_norm:
  case op_family::layer_norm:
  case op_family::instance_norm:
  case op_family::rms_norm: return {kernel_template::norm};
  case op_family::softmax:
  case op_family::logsumexp:
  case op_family::reduce:
  case op_family::arg_reduce:
  case op_family::cumsum: return {kernel_template::reduce};
  case op_family::reshape:
  case op_family::permute:
  case op_family::transpose:
  case op_family::flatten:
  case op_family::dropout:
  case op_family::cat:
  case op_family::slice:
  case op_family::flip:
  case op_family::pad: return {kernel_template::layout};
  case op_family::module: return {}; // a PyTorch module: no template writes it
  }
  return {};
}

// Replays a token prefix; tells where it stands and what may come next.
struct cursor {
  enum class expect { kernel_or_end, ops, count, tmpl, knob_name, knob_value, done, invalid };
  expect state = expect::kernel_or_end;
  int64_t next_op = 0, first = 0, count = 0;
  kernel_template tmpl = kernel_template::elementwise;
  std::size_t knob_index = 0;
};

} // namespace

const std::vector<std::string>& program_vocab() {
  static const std::vector<std::string> v = make_vocab();
  return v;
}

int token_id(const std::string& word) {
  static const std::map<std::string, int> ids = [] {
    std::map<std::string, int> m;
    const auto& v = program_vocab();
    for (std::size_t i = 0; i < v.size(); ++i) m[v[i]] = static_cast<int>(i);
    return m;
  }();
  auto it = ids.find(word);
  return it == ids.end() ? -1 : it->second;
}

const std::vector<knob>& template_knobs(kernel_template t) {
  static const std::map<kernel_template, std::vector<knob>> knobs = {
      {kernel_template::elementwise, {knob::block, knob::vec, knob::unroll, knob::bounds}},
      {kernel_template::gemm,
       {knob::tile_m, knob::tile_n, knob::tile_k, knob::split_k, knob::precision, knob::stage,
        knob::bounds}},
      {kernel_template::library, {knob::precision, knob::block, knob::vec}},
      {kernel_template::conv,
       {knob::tile_m, knob::tile_n, knob::unroll, knob::precision, knob::bounds}},
      {kernel_template::pool, {knob::block, knob::vec, knob::bounds}},
      {kernel_template::norm, {knob::threads, knob::vec, knob::onepass}},
      {kernel_template::reduce, {knob::threads, knob::vec}},
      {kernel_template::layout, {knob::block, knob::vec}},
  };
  return knobs.at(t);
}

const std::vector<int64_t>& knob_values(knob k) {
  static const std::map<knob, std::vector<int64_t>> values = {
      {knob::block, {64, 128, 256, 512, 1024}},
      {knob::vec, {1, 2, 4, 8}},
      {knob::unroll, {1, 2, 4, 8}},
      {knob::tile_m, {8, 16, 32, 64, 128}},
      {knob::tile_n, {8, 16, 32, 64, 128}},
      {knob::tile_k, {8, 16, 32, 64}},
      {knob::split_k, {1, 2, 4, 8}},
      {knob::threads, {32, 64, 128, 256, 512, 1024}},
      {knob::precision, {0, 1, 2}},
      {knob::stage, {0, 1}},
      {knob::bounds, {0, 1}},
      {knob::onepass, {0, 1}},
  };
  return values.at(k);
}

int64_t knob_default(knob k) {
  switch (k) {
  case knob::block: return 256;
  case knob::vec: return 1;
  case knob::unroll: return 1;
  case knob::tile_m: return 32;
  case knob::tile_n: return 32;
  case knob::tile_k: return 16;
  case knob::split_k: return 1;
  case knob::threads: return 128;
  case knob::precision: return 0;
  case knob::stage: return 0;
  case knob::bounds: return 1;
  case knob::onepass: return 0;
  }
  return 0;
}

std::vector<kernel_template> fitting_templates(const task& t, int64_t first, int64_t n) {
  int64_t total = static_cast<int64_t>(t.ops.size());
  if (first < 0 || n < 1 || n > max_group_ops || first + n > total) return {};
  const op_node& anchor = t.ops[first];
  op_family f = family_of(anchor);
  auto templates = anchor_templates(f);
  if (n == 1 || templates.empty()) return templates; // none: an op no template takes (a module)
  if (f == op_family::arg_reduce || templates.front() == kernel_template::layout) return {};
  for (int64_t j = first + 1; j < first + n; ++j) {
    const op_node& op = t.ops[j];
    if (!is_elementwise(family_of(op)) || op.shape != anchor.shape) return {};
    bool chained = false;
    for (const auto& a : op.args) {
      auto r = find_value(t, a);
      if (r.k != value_ref::kind::op) continue;
      if (static_cast<int64_t>(r.index) == j - 1)
        chained = true;
      else if (static_cast<int64_t>(r.index) >= first)
        return {}; // reads a non-adjacent group value
    }
    if (!chained) return {};
  }
  // Intermediates live in registers: nobody outside the group may read them.
  for (int64_t j = first; j < first + n - 1; ++j) {
    const std::string& name = t.ops[j].out;
    if (std::find(t.outputs.begin(), t.outputs.end(), name) != t.outputs.end()) return {};
    for (int64_t k = first + n; k < total; ++k)
      for (const auto& a : t.ops[k].args)
        if (a == name) return {};
  }
  return templates;
}

status check_program(const program& p, const task& t) {
  int64_t next = 0;
  for (std::size_t g = 0; g < p.groups.size(); ++g) {
    const auto& grp = p.groups[g];
    std::string at = "program: kernel " + std::to_string(g);
    if (grp.first_op != next) return error{at + ": does not start where the previous kernel ended"};
    auto fits = fitting_templates(t, grp.first_op, grp.num_ops);
    if (fits.empty())
      return error{at + ": ops " + std::to_string(grp.first_op) + ".." +
                   std::to_string(grp.first_op + grp.num_ops - 1) +
                   " cannot be fused into one kernel"};
    if (std::find(fits.begin(), fits.end(), grp.tmpl) == fits.end())
      return error{at + ": template " + std::string(to_string(grp.tmpl)) + " does not fit op '" +
                   t.ops[grp.first_op].op + "'"};
    const auto& allowed = template_knobs(grp.tmpl);
    for (const auto& s : grp.knobs) {
      if (std::find(allowed.begin(), allowed.end(), s.k) == allowed.end())
        return error{at + ": knob " + std::string(to_string(s.k)) + " does not apply to template " +
                     to_string(grp.tmpl)};
      const auto& vals = knob_values(s.k);
      if (std::find(vals.begin(), vals.end(), s.value) == vals.end())
        return error{at + ": knob " + std::string(to_string(s.k)) + " has no value " +
                     std::to_string(s.value)};
      if (!knob_value_allowed(t, s.k, s.value))
        return error{at + ": precision " + knob_value_word(s.k, s.value) +
                     " needs a task with tolerance.reduced_precision = true (this one is fp32)"};
    }
    next += grp.num_ops;
  }
  if (next != static_cast<int64_t>(t.ops.size()))
    return error{"program: covers " + std::to_string(next) + " of " + std::to_string(t.ops.size()) +
                 " ops"};
  return ok();
}

bool knob_value_allowed(const task& t, knob k, int64_t v) {
  return k != knob::precision || v == 0 || t.tol.reduced_precision;
}

std::vector<int> to_tokens(const program& p) {
  std::vector<int> ids;
  auto push = [&](const std::string& w) { ids.push_back(token_id(w)); };
  for (const auto& g : canonical(p).groups) {
    push("kernel");
    push("ops");
    push(std::to_string(g.num_ops));
    push(to_string(g.tmpl));
    for (const auto& s : g.knobs) {
      push(to_string(s.k));
      push(knob_value_word(s.k, s.value));
    }
  }
  push("end");
  return ids;
}

std::string tokens_to_text(const std::vector<int>& ids) {
  std::string out;
  const auto& v = program_vocab();
  for (int id : ids) {
    if (!out.empty()) out += ' ';
    out += id >= 0 && id < static_cast<int>(v.size()) ? v[id] : "<?>";
  }
  return out;
}

grammar::grammar(const task& t) : task_(t) {}

std::vector<int> grammar::valid_next(const std::vector<int>& prefix) const {
  const auto& vocab = program_vocab();
  int64_t total = static_cast<int64_t>(task_.ops.size());
  cursor c;
  auto options = [&](const cursor& cur) {
    std::vector<int> ids;
    switch (cur.state) {
    case cursor::expect::kernel_or_end:
      ids.push_back(token_id(cur.next_op < total ? "kernel" : "end"));
      break;
    case cursor::expect::ops: ids.push_back(token_id("ops")); break;
    case cursor::expect::count:
      for (int64_t n = 1; n <= std::min(max_group_ops, total - cur.next_op); ++n)
        if (!fitting_templates(task_, cur.next_op, n).empty())
          ids.push_back(token_id(std::to_string(n)));
      break;
    case cursor::expect::tmpl:
      for (auto tm : fitting_templates(task_, cur.first, cur.count))
        ids.push_back(token_id(to_string(tm)));
      break;
    case cursor::expect::knob_name:
      ids.push_back(token_id(to_string(template_knobs(cur.tmpl)[cur.knob_index])));
      break;
    case cursor::expect::knob_value: {
      knob k = template_knobs(cur.tmpl)[cur.knob_index];
      for (auto v : knob_values(k))
        if (knob_value_allowed(task_, k, v)) ids.push_back(token_id(knob_value_word(k, v)));
      break;
    }
    case cursor::expect::done:
    case cursor::expect::invalid: break;
    }
    return ids;
  };
  for (int tok : prefix) {
    auto allowed = options(c);
    if (std::find(allowed.begin(), allowed.end(), tok) == allowed.end()) return {};
    const std::string& w = vocab[tok];
    switch (c.state) {
    case cursor::expect::kernel_or_end:
      c.state = w == "end" ? cursor::expect::done : cursor::expect::ops;
      break;
    case cursor::expect::ops: c.state = cursor::expect::count; break;
    case cursor::expect::count:
      c.first = c.next_op;
      c.count = std::stoll(w);
      c.state = cursor::expect::tmpl;
      break;
    case cursor::expect::tmpl:
      for (auto tm : all_templates())
        if (w == to_string(tm)) c.tmpl = tm;
      c.knob_index = 0;
      c.state = template_knobs(c.tmpl).empty() ? cursor::expect::kernel_or_end
                                               : cursor::expect::knob_name;
      if (c.state == cursor::expect::kernel_or_end) c.next_op += c.count;
      break;
    case cursor::expect::knob_name: c.state = cursor::expect::knob_value; break;
    case cursor::expect::knob_value:
      if (++c.knob_index < template_knobs(c.tmpl).size()) {
        c.state = cursor::expect::knob_name;
      } else {
        c.next_op += c.count;
        c.state = cursor::expect::kernel_or_end;
      }
      break;
    case cursor::expect::done:
    case cursor::expect::invalid: return {};
    }
  }
  return options(c);
}

std::vector<uint8_t> grammar::mask(const std::vector<int>& prefix) const {
  std::vector<uint8_t> m(program_vocab().size(), 0);
  for (int id : valid_next(prefix)) m[id] = 1;
  return m;
}

bool grammar::complete(const std::vector<int>& prefix) const {
  return !prefix.empty() && prefix.back() == token_id("end") && valid_next(prefix).empty() &&
         parse_program(tokens_to_text(prefix)).has_value();
}

std::vector<int> sample_program(const task& t, std::mt19937_64& rng) {
  grammar g(t);
  std::vector<int> prefix;
  for (auto next = g.valid_next(prefix); !next.empty(); next = g.valid_next(prefix))
    prefix.push_back(next[rng() % next.size()]);
  return prefix;
}

} // namespace kiln
