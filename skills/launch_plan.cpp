#include "skills/launch_plan.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace kiln {

namespace {

using json = nlohmann::json;

const char* access_word(access a) {
  switch (a) {
  case access::read: return "read";
  case access::write: return "write";
  case access::read_write: return "read_write";
  }
  return "?";
}

json ref_json(const buffer_ref& r) { return json{{"kind", to_string(r.kind)}, {"index", r.index}}; }

json dims_json(const dim3_t& d) { return json::array({d.x, d.y, d.z}); }

// Field readers that throw a message naming the field; plan_from_json turns it into an error.
struct bad_field {
  std::string what;
};

const json& field(const json& j, const char* key, const std::string& at) {
  if (!j.is_object() || !j.contains(key)) throw bad_field{at + "." + key + ": missing"};
  return j.at(key);
}

int64_t int_field(const json& j, const char* key, const std::string& at) {
  const json& v = field(j, key, at);
  if (!v.is_number_integer()) throw bad_field{at + "." + key + ": expected an integer"};
  return v.get<int64_t>();
}

buffer_ref ref_from(const json& j, const std::string& at) {
  buffer_ref r;
  const json& k = field(j, "kind", at);
  std::string w = k.is_string() ? k.get<std::string>() : "";
  if (w == "input")
    r.kind = buffer_kind::input;
  else if (w == "param")
    r.kind = buffer_kind::param;
  else if (w == "output")
    r.kind = buffer_kind::output;
  else if (w == "scratch")
    r.kind = buffer_kind::scratch;
  else
    throw bad_field{at + ".kind: unknown buffer kind '" + w + "'"};
  r.index = static_cast<int32_t>(int_field(j, "index", at));
  return r;
}

dim3_t dims_from(const json& j, const std::string& at) {
  if (!j.is_array() || j.size() != 3) throw bad_field{at + ": expected [x, y, z]"};
  dim3_t d;
  uint32_t* p[3] = {&d.x, &d.y, &d.z};
  for (int i = 0; i < 3; ++i) {
    if (!j[i].is_number_unsigned() && !j[i].is_number_integer())
      throw bad_field{at + ": expected integers"};
    int64_t v = j[i].get<int64_t>();
    if (v < 1 || v > 0xffffffffLL) throw bad_field{at + ": dimension out of range"};
    *p[i] = static_cast<uint32_t>(v);
  }
  return d;
}

int32_t count_of(const launch_plan& p, buffer_kind k) {
  switch (k) {
  case buffer_kind::input: return p.num_inputs;
  case buffer_kind::param: return p.num_params;
  case buffer_kind::output: return p.num_outputs;
  case buffer_kind::scratch: return static_cast<int32_t>(p.scratch_bytes.size());
  }
  return 0;
}

} // namespace

const char* to_string(buffer_kind k) {
  switch (k) {
  case buffer_kind::input: return "input";
  case buffer_kind::param: return "param";
  case buffer_kind::output: return "output";
  case buffer_kind::scratch: return "scratch";
  }
  return "?";
}

const char* to_string(gemm_precision p) {
  switch (p) {
  case gemm_precision::fp32: return "fp32";
  case gemm_precision::tf32: return "tf32";
  case gemm_precision::fp16_accumulate: return "fp16_accumulate";
  }
  return "?";
}

namespace {

json ints_json(const std::vector<int64_t>& v) { return json(v); }

gemm_precision precision_from(const json& pr, const std::string& at) {
  std::string w = pr.is_string() ? pr.get<std::string>() : "";
  if (w == "fp32") return gemm_precision::fp32;
  if (w == "tf32") return gemm_precision::tf32;
  if (w == "fp16_accumulate") return gemm_precision::fp16_accumulate;
  throw bad_field{at + ".precision: unknown precision '" + w + "'"};
}

} // namespace

// Extents positive, channels divisible by groups, and each spatial size what the forward conv
// (from x to y, or from y to x when transposed) makes of its input.
status check_conv(const conv_step& c, const std::string& at) {
  if (c.spatial < 1 || c.spatial > 3)
    return error{at + ": conv with " + std::to_string(c.spatial) + " spatial dims"};
  for (const auto* v : {&c.in, &c.ker, &c.out, &c.stride, &c.pad, &c.dilation})
    if (v->size() != 3) return error{at + ": conv geometry lists need 3 entries"};
  if (c.batch < 1 || c.ci < 1 || c.co < 1 || c.groups < 1 || c.ci % c.groups != 0 ||
      c.co % c.groups != 0)
    return error{at + ": conv channels or groups out of range"};
  for (int d = 0; d < 3; ++d) {
    if (c.in[d] < 1 || c.ker[d] < 1 || c.out[d] < 1 || c.stride[d] < 1 || c.pad[d] < 0 ||
        c.dilation[d] < 1)
      return error{at + ": conv with an empty or negative extent"};
    int64_t src = c.transposed ? c.out[d] : c.in[d], dst = c.transposed ? c.in[d] : c.out[d];
    int64_t span = src + 2 * c.pad[d] - c.dilation[d] * (c.ker[d] - 1) - 1;
    if (span < 0 || span / c.stride[d] + 1 != dst)
      return error{at + ": conv spatial dim " + std::to_string(d) + " does not match its geometry"};
  }
  return ok();
}

status check_plan(const launch_plan& p, const plan_limits& lim) {
  std::vector<bool> out_written(p.num_outputs, false),
      scratch_written(p.scratch_bytes.size(), false);
  auto in_range = [&](const buffer_ref& r) {
    return r.index >= 0 && r.index < count_of(p, r.kind);
  };
  auto use = [&](const buffer_ref& r, access a, const std::string& at) -> status {
    if (!in_range(r))
      return error{at + ": " + to_string(r.kind) + " " + std::to_string(r.index) + " out of range"};
    bool writes = a != access::read;
    if ((r.kind == buffer_kind::input || r.kind == buffer_kind::param) && writes)
      return error{at + ": writes " + to_string(r.kind) + " " + std::to_string(r.index)};
    if (r.kind == buffer_kind::scratch && a != access::write && !scratch_written[r.index])
      return error{at + ": reads scratch " + std::to_string(r.index) +
                   " before any step writes it"};
    if (writes && r.kind == buffer_kind::output) out_written[r.index] = true;
    if (writes && r.kind == buffer_kind::scratch) scratch_written[r.index] = true;
    return ok();
  };
  if (static_cast<int32_t>(p.output_bytes.size()) != p.num_outputs)
    return error{"plan: output_bytes has " + std::to_string(p.output_bytes.size()) +
                 " entries for " + std::to_string(p.num_outputs) + " outputs"};
  for (auto b : p.scratch_bytes)
    if (b < 1) return error{"plan: a scratch buffer has " + std::to_string(b) + " bytes"};
  for (std::size_t s = 0; s < p.steps.size(); ++s) {
    const auto& st = p.steps[s];
    std::string at = "plan: step " + std::to_string(s);
    if (st.k == plan_step::kind::conv) {
      if (auto c = check_conv(st.conv, at); !c) return c;
      if (auto u = use(st.conv.x, access::read, at + " conv x"); !u) return u;
      if (auto u = use(st.conv.w, access::read, at + " conv w"); !u) return u;
      if (auto u = use(st.conv.y, access::write, at + " conv y"); !u) return u;
      continue;
    }
    if (st.k == plan_step::kind::gemm) {
      const auto& g = st.gemm;
      if (g.m < 1 || g.n < 1 || g.k < 1 || g.batch < 1)
        return error{at + ": gemm with an empty extent"};
      if (g.lda < (g.trans_a ? g.m : g.k) || g.ldb < (g.trans_b ? g.k : g.n) || g.ldc < g.n)
        return error{at + ": gemm leading dimension smaller than its row"};
      for (auto [r, a] : {std::pair{g.a, access::read}, {g.b, access::read}})
        if (auto u = use(r, a, at + " gemm A/B"); !u) return u;
      if (auto u = use(g.c, g.beta == 0.f ? access::write : access::read_write, at + " gemm C"); !u)
        return u;
      continue;
    }
    const auto& k = st.kernel;
    at += " (" + k.kernel + ")";
    if (k.kernel.empty()) return error{at + ": kernel without a name"};
    if (k.block.count() > lim.max_threads_per_block || k.block.x > lim.max_block_xy ||
        k.block.y > lim.max_block_xy || k.block.z > lim.max_block_z)
      return error{at + ": block of " + std::to_string(k.block.count()) +
                   " threads exceeds the limits"};
    if (k.grid.count() < 1 || k.grid.x > lim.max_grid_x || k.grid.y > lim.max_grid_yz ||
        k.grid.z > lim.max_grid_yz)
      return error{at + ": grid exceeds the limits"};
    if (k.shared_bytes > lim.max_shared_bytes)
      return error{at + ": " + std::to_string(k.shared_bytes) + " bytes of dynamic shared memory"};
    // Reads are checked before writes: a read_write argument must already hold data.
    for (int pass = 0; pass < 2; ++pass)
      for (std::size_t a = 0; a < k.args.size(); ++a) {
        const auto& arg = k.args[a];
        if (arg.k != kernel_arg::kind::buffer) continue;
        if ((pass == 0) != (arg.mode != access::write)) continue;
        if (auto u = use(arg.buffer, arg.mode, at + " arg " + std::to_string(a)); !u) return u;
      }
  }
  for (int32_t o = 0; o < p.num_outputs; ++o)
    if (!out_written[o]) return error{"plan: no step writes output " + std::to_string(o)};
  return ok();
}

std::string to_json(const launch_plan& p) {
  json steps = json::array();
  for (const auto& s : p.steps) {
    if (s.k == plan_step::kind::conv) {
      const auto& c = s.conv;
      steps.push_back({{"conv",
                        {{"spatial", c.spatial},
                         {"transposed", c.transposed},
                         {"batch", c.batch},
                         {"ci", c.ci},
                         {"co", c.co},
                         {"groups", c.groups},
                         {"in", ints_json(c.in)},
                         {"ker", ints_json(c.ker)},
                         {"out", ints_json(c.out)},
                         {"stride", ints_json(c.stride)},
                         {"pad", ints_json(c.pad)},
                         {"dilation", ints_json(c.dilation)},
                         {"x", ref_json(c.x)},
                         {"w", ref_json(c.w)},
                         {"y", ref_json(c.y)},
                         {"precision", to_string(c.precision)}}}});
      continue;
    }
    if (s.k == plan_step::kind::gemm) {
      const auto& g = s.gemm;
      steps.push_back({{"gemm",
                        {{"m", g.m},
                         {"n", g.n},
                         {"k", g.k},
                         {"batch", g.batch},
                         {"trans_a", g.trans_a},
                         {"trans_b", g.trans_b},
                         {"lda", g.lda},
                         {"ldb", g.ldb},
                         {"ldc", g.ldc},
                         {"stride_a", g.stride_a},
                         {"stride_b", g.stride_b},
                         {"stride_c", g.stride_c},
                         {"a", ref_json(g.a)},
                         {"b", ref_json(g.b)},
                         {"c", ref_json(g.c)},
                         {"alpha", g.alpha},
                         {"beta", g.beta},
                         {"precision", to_string(g.precision)}}}});
      continue;
    }
    const auto& k = s.kernel;
    json args = json::array();
    for (const auto& a : k.args) {
      if (a.k == kernel_arg::kind::buffer)
        args.push_back({{"buffer", ref_json(a.buffer)}, {"access", access_word(a.mode)}});
      else if (a.k == kernel_arg::kind::i64)
        args.push_back({{"i64", a.i64}});
      else
        args.push_back({{"f32", a.f32}});
    }
    steps.push_back({{"kernel",
                      {{"name", k.kernel},
                       {"grid", dims_json(k.grid)},
                       {"block", dims_json(k.block)},
                       {"shared_bytes", k.shared_bytes},
                       {"args", args}}}});
  }
  json j{{"version", p.version},
         {"num_inputs", p.num_inputs},
         {"num_params", p.num_params},
         {"num_outputs", p.num_outputs},
         {"output_bytes", p.output_bytes},
         {"scratch_bytes", p.scratch_bytes},
         {"steps", steps}};
  return j.dump();
}

expected<launch_plan> plan_from_json(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return error{"plan: not valid JSON"};
  try {
    launch_plan p;
    p.version = static_cast<int32_t>(int_field(j, "version", "plan"));
    if (p.version != 1)
      return error{"plan.version: " + std::to_string(p.version) + " is not supported"};
    p.num_inputs = static_cast<int32_t>(int_field(j, "num_inputs", "plan"));
    p.num_params = static_cast<int32_t>(int_field(j, "num_params", "plan"));
    p.num_outputs = static_cast<int32_t>(int_field(j, "num_outputs", "plan"));
    for (const char* key : {"output_bytes", "scratch_bytes"}) {
      const json a = field(j, key, "plan"); // a copy: field() takes temporaries
      if (!a.is_array()) throw bad_field{std::string("plan.") + key + ": expected an array"};
      auto& dst = std::string(key) == "output_bytes" ? p.output_bytes : p.scratch_bytes;
      for (const auto& v : a) {
        if (!v.is_number_integer())
          throw bad_field{std::string("plan.") + key + ": expected integers"};
        dst.push_back(v.get<int64_t>());
      }
    }
    const json steps = field(j, "steps", "plan");
    if (!steps.is_array()) throw bad_field{"plan.steps: expected an array"};
    for (std::size_t i = 0; i < steps.size(); ++i) {
      std::string at = "plan.steps[" + std::to_string(i) + "]";
      const json& s = steps[i];
      plan_step st;
      if (s.is_object() && s.contains("gemm")) {
        const json& g = s.at("gemm");
        at += ".gemm";
        st.k = plan_step::kind::gemm;
        auto& o = st.gemm;
        o.m = int_field(g, "m", at), o.n = int_field(g, "n", at), o.k = int_field(g, "k", at);
        o.batch = int_field(g, "batch", at);
        o.lda = int_field(g, "lda", at), o.ldb = int_field(g, "ldb", at),
        o.ldc = int_field(g, "ldc", at);
        o.stride_a = int_field(g, "stride_a", at), o.stride_b = int_field(g, "stride_b", at);
        o.stride_c = int_field(g, "stride_c", at);
        for (auto [key, dst] : {std::pair{"trans_a", &o.trans_a}, {"trans_b", &o.trans_b}}) {
          const json& v = field(g, key, at);
          if (!v.is_boolean()) throw bad_field{at + "." + key + ": expected a boolean"};
          *dst = v.get<bool>();
        }
        o.a = ref_from(field(g, "a", at), at + ".a");
        o.b = ref_from(field(g, "b", at), at + ".b");
        o.c = ref_from(field(g, "c", at), at + ".c");
        for (auto [key, dst] : {std::pair{"alpha", &o.alpha}, {"beta", &o.beta}}) {
          const json& v = field(g, key, at);
          if (!v.is_number()) throw bad_field{at + "." + key + ": expected a number"};
          *dst = v.get<float>();
        }
        o.precision = precision_from(field(g, "precision", at), at);
      } else if (s.is_object() && s.contains("conv")) {
        const json& c = s.at("conv");
        at += ".conv";
        st.k = plan_step::kind::conv;
        auto& o = st.conv;
        o.spatial = static_cast<int32_t>(int_field(c, "spatial", at));
        const json& tr = field(c, "transposed", at);
        if (!tr.is_boolean()) throw bad_field{at + ".transposed: expected a boolean"};
        o.transposed = tr.get<bool>();
        o.batch = int_field(c, "batch", at), o.ci = int_field(c, "ci", at);
        o.co = int_field(c, "co", at), o.groups = int_field(c, "groups", at);
        for (auto [key, dst] : {std::pair{"in", &o.in},
                                {"ker", &o.ker},
                                {"out", &o.out},
                                {"stride", &o.stride},
                                {"pad", &o.pad},
                                {"dilation", &o.dilation}}) {
          const json& v = field(c, key, at);
          if (!v.is_array()) throw bad_field{at + "." + key + ": expected an array"};
          for (const auto& e : v) {
            if (!e.is_number_integer()) throw bad_field{at + "." + key + ": expected integers"};
            dst->push_back(e.get<int64_t>());
          }
        }
        o.x = ref_from(field(c, "x", at), at + ".x");
        o.w = ref_from(field(c, "w", at), at + ".w");
        o.y = ref_from(field(c, "y", at), at + ".y");
        o.precision = precision_from(field(c, "precision", at), at);
      } else {
        const json& k = field(s, "kernel", at);
        at += ".kernel";
        auto& o = st.kernel;
        const json& name = field(k, "name", at);
        if (!name.is_string()) throw bad_field{at + ".name: expected a string"};
        o.kernel = name.get<std::string>();
        o.grid = dims_from(field(k, "grid", at), at + ".grid");
        o.block = dims_from(field(k, "block", at), at + ".block");
        int64_t sh = int_field(k, "shared_bytes", at);
        if (sh < 0 || sh > 0xffffffffLL) throw bad_field{at + ".shared_bytes: out of range"};
        o.shared_bytes = static_cast<uint32_t>(sh);
        const json& args = field(k, "args", at);
        if (!args.is_array()) throw bad_field{at + ".args: expected an array"};
        for (std::size_t a = 0; a < args.size(); ++a) {
          std::string aat = at + ".args[" + std::to_string(a) + "]";
          const json& x = args[a];
          kernel_arg arg;
          if (x.is_object() && x.contains("buffer")) {
            arg.buffer = ref_from(x.at("buffer"), aat + ".buffer");
            const json& m = field(x, "access", aat);
            std::string w = m.is_string() ? m.get<std::string>() : "";
            if (w == "read")
              arg.mode = access::read;
            else if (w == "write")
              arg.mode = access::write;
            else if (w == "read_write")
              arg.mode = access::read_write;
            else
              throw bad_field{aat + ".access: unknown access '" + w + "'"};
          } else if (x.is_object() && x.contains("i64")) {
            arg.k = kernel_arg::kind::i64;
            arg.i64 = int_field(x, "i64", aat);
          } else if (x.is_object() && x.contains("f32") && x.at("f32").is_number()) {
            arg.k = kernel_arg::kind::f32;
            arg.f32 = x.at("f32").get<float>();
          } else {
            throw bad_field{aat + ": expected buffer, i64 or f32"};
          }
          o.args.push_back(arg);
        }
      }
      p.steps.push_back(std::move(st));
    }
    return p;
  } catch (const bad_field& b) {
    return error{b.what};
  } catch (const std::exception& e) {
    return error{std::string("plan: ") + e.what()};
  }
}

} // namespace kiln
