// Task spec v1 in memory: the parsed form of one task file (TOML) or one JSON Lines record.
// Parsing (task_parse) fills it; validation (task_check) infers shapes; the reference executor,
// the code generators and the synthesis pipeline read it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace kiln {

enum class dtype { float32, float16, bfloat16 };
const char* to_string(dtype t);
std::size_t element_size(dtype t);

using shape_t = std::vector<int64_t>;
std::string to_string(const shape_t& s); // "[2, 3]"
int64_t numel(const shape_t& s);

// An attribute: integer, real, boolean, string, or a list of integers / reals.
using attr_value =
    std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>>;
using attr_map = std::map<std::string, attr_value>; // ordered: canonical printing and hashing
std::string to_string(const attr_value& v);

enum class init_kind {
  uniform, // U[0, 1)
  normal,  // N(0, 1)
  randint, // integers in [lo, hi), stored in the task dtype
  ones,
  zeros,
  kaiming_uniform, // torch.nn default for Linear / Conv weights: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
  bias_uniform,    // U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in of the param named by `of`
};
const char* to_string(init_kind k);

// How a drawn tensor is shaped after its draw (the last two dimensions, which must be square).
enum class structure_kind { none, triu, tril, symmetric /* (x + x^T) / 2 */ };
const char* to_string(structure_kind k);

// Drawn as `init`, then in this order: x * scale + shift; times one U[0, 1) scalar drawn next
// (random_scale); a softmax over the last dimension (softmax); the structure. KernelBench's
// inputs are made so: randn * 0.02 (normal with std), randint(0, 2) * 2 - 1 (+-1 targets),
// rand(...) * rand(()), triu(rand), (A + A.T) / 2, (rand(...) * rand(())).softmax(-1) (a
// distribution, for KL divergence). Scale, shift, random_scale and softmax apply to uniform,
// normal and randint; structure to those and to ones (triu(ones): the mask a triangular output
// is multiplied by).
struct tensor_decl {
  std::string name;
  shape_t shape;
  init_kind init = init_kind::uniform;
  int64_t lo = 0, hi = 0;          // randint bounds
  std::string of;                  // bias_uniform: the weight whose fan-in sets the bound
  double scale = 1.0, shift = 0.0; // uniform, normal, randint only
  bool random_scale = false;
  bool softmax = false; // over the last dimension, after the scales
  structure_kind structure = structure_kind::none;
  bool plain_draw() const {
    return scale == 1.0 && shift == 0.0 && !random_scale && !softmax &&
           structure == structure_kind::none;
  }
};

struct op_node {
  std::string out;
  std::string op;
  std::vector<std::string> args;
  attr_map attrs;
  // Filled by check_task():
  shape_t shape;         // inferred output shape
  bool is_index = false; // int64 result (argmax / argmin)
};

struct tolerance {
  double atol = 1e-4;
  double rtol = 1e-4;
  // Whether kernels may use reduced precision (TF32, fp16 accumulation) beyond the task dtype.
  bool reduced_precision = false;
};
tolerance default_tolerance(dtype t);

// Param seeds are 47-bit, as default_param_seed masks a name's hash.
constexpr int64_t max_param_seed = 0x7fffffffffff;

struct task {
  std::string name;
  int level = 1;
  dtype type = dtype::float32;
  std::vector<std::string> outputs;
  tolerance tol;
  std::vector<tensor_decl> inputs;
  std::vector<tensor_decl> params;
  std::vector<op_node> ops;
  std::string origin; // "file.toml" or "file.jsonl:LINE", for error messages
  // The seed the params are drawn from, where the task names one (an import that drew a problem's
  // params again because the name's seed made it degenerate); else one derived from the name
  // (default_param_seed). Hashed: it changes the numbers.
  std::optional<uint64_t> param_seed;
  // A KernelBench import's [kernelbench] table, as JSON text ("" when the task has none): the
  // problem's source and how its Model is built, called and given the task's params, so a
  // ModelNew submission (submission/kind_kernelbench.cpp) runs against the task. Not hashed: it
  // says where the task came from, not what it computes.
  std::string kernelbench_json;
};

// Where a value is defined: an input, a param or an op result.
struct value_ref {
  enum class kind { input, param, op, none } k = kind::none;
  std::size_t index = 0;
};
value_ref find_value(const task& t, const std::string& name);
const shape_t& value_shape(const task& t, const value_ref& r);

} // namespace kiln
