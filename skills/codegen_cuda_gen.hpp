// Internals of the cuda generator shared by its translation units (codegen_cuda.cpp: the driver,
// elementwise, GEMM, conv, pool, layout; codegen_cuda_rows.cpp: norms, softmax, reductions).
// task + program -> gen (kernel sources, buffers, launch steps) -> cuda_program.
#pragma once

#include "skills/codegen_common.hpp"
#include "skills/codegen_cuda.hpp"

#include "data/op_vocab.hpp"
#include "skills/grammar.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace kiln::cuda_gen {

using std::string;

constexpr int64_t kSms = 132; // H200 multiprocessors: grid caps, split choices
constexpr int64_t kIntSafe =
    (int64_t{1} << 31) - (int64_t{1} << 24); // int indices below this, with headroom
constexpr int64_t kMaxGrid = 0x7fffffffLL;

inline string lit(int64_t v) { return int_literal(v, cuda_dialect); }

inline string flit(double v) { return float_literal(v, cuda_dialect); }

inline int64_t prod(const shape_t& s, std::size_t from = 0, std::size_t to = SIZE_MAX) {
  return shape_product(s, from, to);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline string bcast_index(const shape_t& operand, const shape_t& out, const string& i) {
  return broadcast_index(operand, out, i, cuda_dialect);
}

// Tiles along an extent: ceil, guarded only when the tile does not divide it. Shapes are constants,
// so the guard is there exactly where it is needed, whatever the program's `bounds` says.
struct tiling {
  int64_t count;
  bool guard;
};
inline tiling tiles(int64_t extent, int64_t tile) {
  return {ceil_div(extent, tile), extent % tile != 0};
}

// Largest vector width <= want (8, 4, 2, 1) that divides every extent given.
inline int64_t fit_vec(int64_t want, std::initializer_list<int64_t> extents) {
  for (int64_t v : {8, 4, 2}) {
    if (v > want) continue;
    bool ok = true;
    for (auto e : extents) ok = ok && e % v == 0;
    if (ok) return v;
  }
  return 1;
}

struct kparam {
  string sym;
  bool read = false, written = false;
};

struct kernel_builder {
  string name;
  std::vector<kparam> params; // in order of first use
  std::ostringstream body;
  int64_t max_elems = 1;
};

struct buffer_info {
  buffer_ref ref;
  int64_t elems = 1;
  bool is_int = false;
};

struct gen {
  explicit gen(const task& task_)
      : t(task_), value_sym(task_.ops.size()), is_output(task_.ops.size(), false) {}
  const task& t;
  cuda_program prog;
  std::ostringstream kernels;
  std::map<string, buffer_info> buffers; // symbol -> buffer
  std::vector<string> value_sym;         // per op: the symbol of its storage
  std::vector<bool> is_output;
  std::vector<string> errors;

  string sym_of(const string& name) const {
    auto r = find_value(t, name);
    switch (r.k) {
    case value_ref::kind::input: return "I" + std::to_string(r.index);
    case value_ref::kind::param: return "P" + std::to_string(r.index);
    case value_ref::kind::op: return value_sym[r.index];
    case value_ref::kind::none: break;
    }
    return "";
  }
  const shape_t& shape(const string& name) const { return value_shape(t, find_value(t, name)); }

  string use(kernel_builder& kb, const string& sym, bool write) {
    auto it = buffers.find(sym);
    if (it == buffers.end()) {
      errors.push_back("cuda backend: internal: no storage for a value read by " + kb.name);
      return "nullptr";
    }
    kb.max_elems = std::max(kb.max_elems, it->second.elems);
    for (auto& p : kb.params)
      if (p.sym == sym) {
        (write ? p.written : p.read) = true;
        return sym;
      }
    kparam p;
    p.sym = sym;
    (write ? p.written : p.read) = true;
    kb.params.push_back(p);
    return sym;
  }
  string rd(kernel_builder& kb, const string& value_name) {
    return use(kb, sym_of(value_name), false);
  }

  string scratch(int64_t elems, bool is_int = false) {
    elems = std::max<int64_t>(1, elems);
    string sym = "S" + std::to_string(prog.plan.scratch_bytes.size());
    buffer_info b;
    b.ref = {buffer_kind::scratch, static_cast<int32_t>(prog.plan.scratch_bytes.size())};
    b.elems = elems;
    b.is_int = is_int;
    buffers[sym] = b;
    prog.plan.scratch_bytes.push_back(elems * (is_int ? 8 : 4));
    return sym;
  }

  // Emits the kernel's source and its launch step.
  void launch(kernel_builder& kb, int64_t grid, int64_t block, int64_t shared = 0) {
    if (grid < 1 || grid > kMaxGrid) {
      errors.push_back("cuda backend: kernel " + kb.name + " needs " + std::to_string(grid) +
                       " blocks");
      grid = 1;
    }
    kernel_step ks;
    ks.kernel = kb.name;
    ks.grid.x = static_cast<uint32_t>(grid);
    ks.block.x = static_cast<uint32_t>(block);
    ks.shared_bytes = static_cast<uint32_t>(shared);
    auto& o = kernels;
    o << "extern \"C\" __global__ void __launch_bounds__(" << block << ") " << kb.name << "(";
    for (std::size_t i = 0; i < kb.params.size(); ++i) {
      const auto& p = kb.params[i];
      const auto& b = buffers[p.sym];
      o << (i ? ", " : "") << (p.written ? "" : "const ") << (b.is_int ? "long long" : "float")
        << "* __restrict__ " << p.sym;
      kernel_arg a;
      a.buffer = b.ref;
      a.mode = p.written ? (p.read ? access::read_write : access::write) : access::read;
      ks.args.push_back(a);
    }
    o << ") {\n  typedef " << (kb.max_elems >= kIntSafe ? "long long" : "int") << " I;\n"
      << kb.body.str() << "}\n\n";
    plan_step st;
    st.kernel = std::move(ks);
    prog.plan.steps.push_back(std::move(st));
  }
};

// Code applying ops [from, to] to the V lanes r[0..V) at output indices i .. i + V - 1.
string chain_code(gen& g, kernel_builder& kb, int64_t from, int64_t to, int64_t chain_start,
                  int64_t V);
// The group's epilogue (ops after the anchor) on lanes r[0..V) at indices i...
string epilogue(gen& g, kernel_builder& kb, const group& grp, int64_t V);
// A grid-stride kernel over n outputs in units of V (see codegen_cuda.cpp).
void emit_driver(gen& g, kernel_builder& kb, const string& dst, int64_t n, int64_t V,
                 int64_t unroll, int64_t block, const std::function<string(int64_t)>& lanes);

// Row kernels (codegen_cuda_rows.cpp).
void emit_norm(gen& g, const group& grp, const string& pfx, const op_node& op, const op_info& info,
               const string& dst);
void emit_softmax_like(gen& g, const group& grp, const string& pfx, const op_node& op,
                       const op_info& info, const string& dst);
void emit_reduce(gen& g, const group& grp, const string& pfx, const op_node& op,
                 const op_info& info, const string& dst);

} // namespace kiln::cuda_gen
