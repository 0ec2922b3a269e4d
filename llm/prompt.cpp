#include "llm/prompt.hpp"

#include "data/op_vocab.hpp"
#include "kiln/embedded_skill.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

namespace kiln {

namespace {

std::string draw_text(const tensor_decl& d);

std::string init_text(const tensor_decl& d) {
  if (d.plain_draw()) return draw_text(d);
  std::ostringstream s;
  s << draw_text(d);
  if (d.scale != 1.0) s << ", times " << to_string(attr_value(d.scale));
  if (d.shift != 0.0) s << ", plus " << to_string(attr_value(d.shift));
  if (d.random_scale) s << ", times one scalar uniform in [0, 1)";
  if (d.softmax) s << ", then a softmax over the last dimension";
  if (d.structure == structure_kind::triu) s << ", upper triangle kept (triu)";
  if (d.structure == structure_kind::tril) s << ", lower triangle kept (tril)";
  if (d.structure == structure_kind::symmetric) s << ", symmetrized: (x + x^T) / 2";
  return s.str();
}

std::string draw_text(const tensor_decl& d) {
  switch (d.init) {
  case init_kind::uniform: return "uniform in [0, 1)";
  case init_kind::normal: return "normal(0, 1)";
  case init_kind::randint:
    return "integers in [" + std::to_string(d.lo) + ", " + std::to_string(d.hi) + ")";
  case init_kind::ones: return "ones";
  case init_kind::zeros: return "zeros";
  case init_kind::kaiming_uniform: return "kaiming_uniform (torch.nn's default for weights)";
  case init_kind::bias_uniform: return "bias_uniform (fan-in of " + d.of + ")";
  }
  return "?";
}

std::string ms(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g ms", v);
  return b;
}

// The tolerance sentence and, where known, the baseline times: both prompt formats say them alike.
void tolerance_and_baselines(std::ostream& o, const task& t, const char* ours, const char* theirs,
                             const char* baselines, std::optional<double> eager_ms,
                             std::optional<double> compile_ms) {
  o << "\n\nTolerance: |" << ours << " - " << theirs << "| <= " << t.tol.atol << " + " << t.tol.rtol
    << " * |" << theirs << "| per element; reduced precision (TF32 / fp16 math) "
    << (t.tol.reduced_precision ? "allowed" : "not allowed") << ".\n";
  if (eager_ms || compile_ms) {
    o << baselines << ":";
    if (eager_ms) o << " PyTorch eager " << ms(*eager_ms);
    if (compile_ms) o << (eager_ms ? "," : "") << " torch.compile " << ms(*compile_ms);
    o << ".\n";
  }
}

// KernelBench's style: the problem's own Model and the request for ModelNew (the task's
// [kernelbench] table holds the source). Written here, in the spirit of its prompts.
std::string kernelbench_system_prompt(backend_kind backend) {
  std::string how =
      backend == backend_kind::cuda
          ? "custom CUDA kernels (CUDA C++ compiled with "
            "torch.utils.cpp_extension.load_inline)"
          : "custom C++ operators (compiled with torch.utils.cpp_extension.load_inline)";
  return "You write fast kernels for PyTorch models. You are given a PyTorch architecture named "
         "Model. Write an architecture named ModelNew that computes the same outputs, replacing "
         "PyTorch operators of your choice with " +
         how +
         ": fuse them, change algorithms, whatever makes it faster. ModelNew takes the same "
         "constructor arguments as Model and holds its parameters under the same state_dict "
         "names; its outputs must match Model's within the stated tolerance on fresh random "
         "inputs. Answer with real code that compiles and runs, in one ```python block holding "
         "the whole module (imports, kernel sources, load_inline calls, class ModelNew), and "
         "no testing code.";
}

std::string kernelbench_task_prompt(const task& t, backend_kind backend,
                                    std::optional<double> eager_ms,
                                    std::optional<double> compile_ms) {
  std::ostringstream o;
  o << "Task `" << t.name << "` (level " << t.level << "), backend " << to_string(backend)
    << ".\n\nYou are given the following architecture:\n\n```python\n";
  if (!t.kernelbench_json.empty()) {
    auto kb = nlohmann::json::parse(t.kernelbench_json);
    o << kb.value("source", "");
  }
  o << "\n```";
  tolerance_and_baselines(o, t, "ModelNew", "Model", "Model on this device", eager_ms, compile_ms);
  o << "\nOptimize the architecture named Model with "
    << (backend == backend_kind::cuda ? "custom CUDA operators" : "custom C++ operators")
    << "; name your optimized architecture ModelNew and answer with the whole module in one "
       "```python block.\n";
  return o.str();
}

} // namespace

std::string llm_system_prompt(backend_kind backend, llm_answer_format format) {
  if (format == llm_answer_format::kernelbench) return kernelbench_system_prompt(backend);
  std::string s = embedded_llm_skill_md;
  s += "\n## The ABI header\n\n```c\n";
  s += backend == backend_kind::cuda ? embedded_llm_cuda_abi_h : embedded_llm_kiln_abi_h;
  s += "```\n";
  return s;
}

std::string llm_task_prompt(const task& t, backend_kind backend, llm_answer_format format,
                            std::optional<double> eager_ms, std::optional<double> compile_ms) {
  if (format == llm_answer_format::kernelbench)
    return kernelbench_task_prompt(t, backend, eager_ms, compile_ms);
  std::ostringstream o;
  o << "Task `" << t.name << "` (level " << t.level << "), backend " << to_string(backend)
    << ", dtype " << to_string(t.type) << ".\n\n";
  auto decls = [&](const char* title, const std::vector<tensor_decl>& v, const char* array) {
    if (v.empty()) return;
    o << title << " (in this order in `" << array << "`):\n";
    for (const auto& d : v)
      o << "- " << d.name << ": " << to_string(d.shape) << ", " << init_text(d) << "\n";
    o << "\n";
  };
  decls("Inputs, fresh random values every call", t.inputs, "inputs");
  decls("Params, fixed for the task", t.params, "params");
  if (has_module_reference(t)) {
    // No op graph: the problem's own module is the reference (its params are the task's, by
    // their state_dict names); an op line would be its TorchScript in base64.
    auto kb = nlohmann::json::parse(t.kernelbench_json, nullptr, false);
    o << "The computation is the forward of this PyTorch module, its tensors being the params "
         "above by state_dict name (the outputs: "
      << t.ops.size() << ", the shapes below):\n\n```python\n"
      << (kb.is_object() ? kb.value("source", std::string()) : std::string()) << "\n";
    if (kb.is_object() && kb.contains("state_dict") && kb["state_dict"].is_object())
      for (const auto& [param, key] : kb["state_dict"].items())
        o << "# params: " << param << " is " << key.get<std::string>() << "\n";
    // A random plain tensor the Model draws in __init__ (an RNN's h0): set on ModelNew by path.
    if (kb.is_object() && kb.contains("attributes") && kb["attributes"].is_object())
      for (const auto& [param, path] : kb["attributes"].items())
        o << "# params: " << param << " is the plain tensor attribute " << path.get<std::string>()
          << " (not in the state_dict)\n";
    for (const auto& op : t.ops)
      o << "# " << op.out << ": " << to_string(op.shape) << (op.is_index ? " int64" : "") << "\n";
  } else {
    o << "The computation, one torch op per line (torch / torch.nn.functional semantics; the "
         "comment is the result's shape):\n\n```python\n";
    for (const auto& op : t.ops) {
      o << op.out << " = " << op.op << "(";
      bool first = true;
      for (const auto& a : op.args) {
        o << (first ? "" : ", ") << a;
        first = false;
      }
      for (const auto& [k, v] : op.attrs) {
        o << (first ? "" : ", ") << k << "=" << to_string(v);
        first = false;
      }
      o << ")  # " << to_string(op.shape) << (op.is_index ? " int64" : "") << "\n";
    }
  }
  o << "```\n\nOutputs (in this order in `outputs`): ";
  for (size_t i = 0; i < t.outputs.size(); ++i) o << (i ? ", " : "") << t.outputs[i];
  tolerance_and_baselines(o, t, "kernel", "reference", "Baselines on this device", eager_ms,
                          compile_ms);
  o << "\nAnswer with one fenced code block holding the whole "
    << (backend == backend_kind::cuda ? "CUDA C++" : "C++") << " program.\n";
  return o.str();
}

} // namespace kiln
