#include "data/module_reference.hpp"

#include "data/op_vocab.hpp"
#include "data/task_hash.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <torch/script.h>
#include <utility>

namespace kiln {

namespace {

expected<std::string> base64_decode(const std::string& in) {
  static const std::string alphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve(in.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=' || c == '\n' || c == '\r' || c == ' ') continue;
    auto v = alphabet.find(c);
    if (v == std::string::npos) return error{"attrs.torchscript is not base64"};
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

// Loaded modules by the hash of their text. One call at a time per module: the task's params are
// set into it for each call.
struct loaded {
  std::mutex mu;
  torch::jit::Module module;
  // The module's tensors in attrs.state_dict's order, found once: the reference's eager time is
  // measured through this call, so it does no lookups per call.
  std::string slots_for; // the state_dict text they were found for
  std::vector<at::Tensor> slots;
};

// Fills l.slots for `keys`; the error names a key the module does not hold.
status find_slots(loaded& l, const std::string& keys_text, const std::vector<std::string>& keys) {
  if (l.slots_for == keys_text && l.slots.size() == keys.size()) return ok();
  std::map<std::string, at::Tensor> held; // the module's tensors, by state_dict key
  for (const auto& p : l.module.named_parameters(true)) held.emplace(p.name, p.value);
  for (const auto& b : l.module.named_buffers(true)) held.emplace(b.name, b.value);
  std::vector<at::Tensor> slots;
  for (const auto& k : keys) {
    auto it = held.find(k);
    if (it == held.end()) return error{"pytorch_module: the module holds no tensor '" + k + "'"};
    slots.push_back(it->second);
  }
  l.slots = std::move(slots);
  l.slots_for = keys_text;
  return ok();
}

// Loaded onto the device of the call: the tensors the task does not give (a BatchNorm's counter,
// a constant buffer) must live where the inputs do.
expected<std::shared_ptr<loaded>> module_for(const std::string& text, const c10::Device& device) {
  static std::mutex mu;
  static std::map<std::pair<uint64_t, std::string>, std::shared_ptr<loaded>> cache;
  auto key = std::make_pair(fnv1a64(text), device.str());
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  auto bytes = base64_decode(text);
  if (!bytes) return bytes.err();
  auto l = std::make_shared<loaded>();
  try {
    std::istringstream in(*bytes);
    l->module = torch::jit::load(in, device);
  } catch (const std::exception& e) {
    std::string what = e.what();
    return error{"attrs.torchscript does not load as a TorchScript module: " +
                 what.substr(0, what.find('\n'))};
  }
  cache.emplace(key, l); // as traced: a training-mode forward stays one (KernelBench's default)
  return l;
}

} // namespace

expected<std::vector<at::Tensor>> run_module(const op_node& op,
                                             const std::vector<at::Tensor>& args) {
  auto device = args.empty() ? c10::Device(c10::kCPU) : args.front().device();
  auto l = module_for(attr_string(op.attrs, "torchscript", ""), device);
  if (!l) return l.err();
  auto n_inputs = static_cast<std::size_t>(attr_int(op.attrs, "inputs", 0));
  auto keys = attr_words(op.attrs, "state_dict");
  if (n_inputs + keys.size() != args.size())
    return error{"pytorch_module: " + std::to_string(n_inputs) + " inputs and " +
                 std::to_string(keys.size()) + " state_dict keys for " +
                 std::to_string(args.size()) + " args"};
  std::lock_guard<std::mutex> lock((*l)->mu);
  auto& m = (*l)->module;
  if (auto st = find_slots(**l, attr_string(op.attrs, "state_dict", ""), keys); !st)
    return st.err();
  // The importer left a placeholder for each tensor the task gives (its weights are drawn by the
  // task's rules, as a submission's are); the others (a BatchNorm's counter) are as saved.
  for (std::size_t i = 0; i < keys.size(); ++i) (*l)->slots[i].set_data(args[n_inputs + i]);
  std::vector<torch::jit::IValue> inputs(args.begin(), args.begin() + n_inputs);
  std::vector<at::Tensor> out;
  try {
    torch::NoGradGuard no_grad;
    auto y = m.forward(inputs);
    if (y.isTensor()) {
      out.push_back(y.toTensor());
    } else if (y.isTuple()) {
      for (const auto& e : y.toTupleRef().elements()) out.push_back(e.toTensor());
    } else if (y.isTensorList()) {
      for (const auto& e : y.toTensorList()) out.push_back(e);
    } else {
      return error{"pytorch_module: forward returned " + y.tagKind() + ", not tensors"};
    }
  } catch (const std::exception& e) {
    std::string what = e.what();
    return error{"pytorch_module: forward failed: " + what.substr(0, what.find('\n'))};
  }
  return out;
}

} // namespace kiln
