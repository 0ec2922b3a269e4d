#include "data/module_reference.hpp"

#include "data/op_vocab.hpp"
#include "data/task_hash.hpp"

#include <functional>
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
  // What each slot held as loaded (the importer's 0-dim placeholders): put back after every call,
  // so that a cached module does not keep the last call's params alive.
  std::vector<at::Tensor> placeholders;
};

// Gives the task's params to the module's slots for one call; puts the placeholders back when it
// ends, on every path.
struct params_lent {
  loaded& l;
  params_lent(loaded& into, const std::vector<at::Tensor>& args, std::size_t first) : l(into) {
    for (std::size_t i = 0; i < l.slots.size(); ++i) l.slots[i].set_data(args[first + i]);
  }
  ~params_lent() {
    for (std::size_t i = 0; i < l.slots.size(); ++i) l.slots[i].set_data(l.placeholders[i]);
  }
};

// Fills l.slots for `keys`; the error names a key the module does not hold.
status find_slots(loaded& l, const std::string& keys_text, const std::vector<std::string>& keys) {
  if (l.slots_for == keys_text && l.slots.size() == keys.size()) return ok();
  std::map<std::string, at::Tensor> held; // the module's tensors, by state_dict key
  for (const auto& p : l.module.named_parameters(true)) held.emplace(p.name, p.value);
  for (const auto& b : l.module.named_buffers(true)) held.emplace(b.name, b.value);
  std::vector<at::Tensor> slots, placeholders;
  for (const auto& k : keys) {
    auto it = held.find(k);
    if (it == held.end()) return error{"pytorch_module: the module holds no tensor '" + k + "'"};
    slots.push_back(it->second);
    placeholders.push_back(it->second.detach()); // aliases what the slot holds now
  }
  l.slots = std::move(slots);
  l.placeholders = std::move(placeholders);
  l.slots_for = keys_text;
  return ok();
}

// torch.jit.trace records the device of each tensor a forward makes (zeros(..., device=x.device),
// an RNN's zero state) as a constant: those are set to the call's device, so that a module traced
// on one device (the importer's) runs on any.
void retarget_device_constants(torch::jit::Module& m, const c10::Device& device) {
  std::function<void(torch::jit::Block*)> walk = [&](torch::jit::Block* b) {
    for (auto* n : b->nodes()) {
      if (n->kind() == c10::prim::Constant &&
          n->output()->type()->kind() == c10::TypeKind::DeviceObjType)
        n->s_(c10::attr::value, device.str());
      for (auto* sub : n->blocks()) walk(sub);
    }
  };
  for (const auto& sub : m.modules())
    for (const auto& method : sub.get_methods()) walk(method.graph()->block());
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
    retarget_device_constants(l->module, device);
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
  std::vector<torch::jit::IValue> inputs(args.begin(), args.begin() + n_inputs);
  std::vector<at::Tensor> out;
  try {
    torch::NoGradGuard no_grad;
    // The importer left a placeholder for each tensor the task gives (its weights are drawn by
    // the task's rules, as a submission's are); the others (a BatchNorm's buffers) are as saved.
    params_lent lent(**l, args, n_inputs);
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
