// The v1 op vocabulary: each op's family, arity and attributes, and shape inference from argument
// shapes. Pure metadata; no tensors are allocated here.
#pragma once

#include "data/expected.hpp"
#include "data/task_spec.hpp"

#include <string_view>
#include <vector>

namespace kiln {

enum class op_family {
  unary,          // elementwise, one arg
  binary,         // elementwise with broadcasting, or one arg + attrs.scalar
  linear,         // linear(x, w[, b])
  matmul,         // torch.matmul
  bmm,            // batched [B,n,k] x [B,k,m]
  conv,           // conv1d/2d/3d
  conv_transpose, // conv_transpose1d/2d/3d
  max_pool,
  avg_pool,
  adaptive_avg_pool,
  batch_norm,
  group_norm,
  layer_norm,
  instance_norm,
  rms_norm,
  softmax, // softmax, log_softmax
  logsumexp,
  reduce,     // sum, mean, amax, amin, prod
  arg_reduce, // argmax, argmin
  cumsum,
  reshape,
  permute,
  transpose,
  flatten,
  dropout,
  cat,    // torch.cat of 2+ tensors along attrs.dim
  slice,  // x[..., start:end:step, ...] on one dim (constant bounds)
  flip,   // torch.flip over attrs.dims
  pad,    // F.pad(x, attrs.pad, value = attrs.value), constant mode, non-negative widths
  module, // pytorch_module: the problem's PyTorch module as the whole reference
          // (data/module_reference.hpp); no program is written over it
};

enum class attr_kind { integer, real, boolean, string, ints, int_or_ints };

struct attr_spec {
  std::string_view name;
  attr_kind kind;
  bool required = false;
};

struct op_info {
  std::string_view name;
  op_family family;
  int min_args = 1;
  int max_args = 1;
  int spatial = 0; // conv / pool: number of spatial dims
  std::vector<attr_spec> attrs;
};

const std::vector<op_info>& all_ops();
const op_info* find_op(std::string_view name);

// Typed attribute access with PyTorch defaults. Validation (check_attrs) guarantees kinds match.
int64_t attr_int(const attr_map& a, std::string_view key, int64_t fallback);
double attr_real(const attr_map& a, std::string_view key, double fallback);
bool attr_bool(const attr_map& a, std::string_view key, bool fallback);
std::string attr_string(const attr_map& a, std::string_view key, const std::string& fallback);
bool has_attr(const attr_map& a, std::string_view key);
// An int or a list of ints, expanded to n entries (conv / pool sizes).
std::vector<int64_t> attr_ints(const attr_map& a, std::string_view key, std::size_t n,
                               int64_t fallback);
// dim attributes as a list (an int becomes a one-element list); empty when absent.
std::vector<int64_t> attr_dims(const attr_map& a, std::string_view key);
// A string attribute's whitespace-separated words (pytorch_module's state_dict keys).
std::vector<std::string> attr_words(const attr_map& a, std::string_view key);

// Checks that attribute names and kinds are known for the op; message names the field.
status check_attrs(const op_info& op, const attr_map& attrs);

// Output shape of `op` applied to args of the given shapes; the error names the offending field.
expected<shape_t> infer_shape(const op_info& op, const std::vector<shape_t>& args,
                              const attr_map& attrs);

// Normalizes a possibly negative dim against rank; false when out of range.
bool normalize_dim(int64_t& dim, std::size_t rank);

// The elements a slice op takes from its input: on `dim`, `len` elements from `start` by `step`.
// start / end follow Python's rules: negative counts from the end, then both clamp to [0, n].
struct slice_window {
  int64_t dim = 0, start = 0, step = 1, len = 0;
};
expected<slice_window> slice_window_of(const attr_map& attrs, const shape_t& x);

// The widths a pad op adds before and after each dim of x (F.pad's list runs from the last dim
// backwards in (before, after) pairs; dims it does not reach get 0).
struct pad_widths {
  std::vector<int64_t> before, after; // one per dim of x
};
expected<pad_widths> pad_widths_of(const attr_map& attrs, const shape_t& x);

// The layout ops that keep every element in order (a view: reshape, flatten, dropout p = 0);
// permute, transpose, cat, slice, flip and pad move elements and are copies.
bool is_view_layout(op_family f);

// Whether the task's reference is a PyTorch module (op pytorch_module): it has no op graph for
// programs to be written over; free-form submissions take it, op-graph policies skip it.
bool has_module_reference(const task& t);

} // namespace kiln
