#include "data/reference.hpp"

#include "data/module_reference.hpp"
#include "data/op_vocab.hpp"
#include "data/task_check.hpp"
#include "data/task_hash.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <cmath>
#include <functional>
#include <limits>
#include <mutex>
#include <torch/cuda.h>

namespace kiln {

namespace {

at::ScalarType scalar_type(dtype t) {
  switch (t) {
  case dtype::float32: return at::kFloat;
  case dtype::float16: return at::kHalf;
  case dtype::bfloat16: return at::kBFloat16;
  }
  return at::kFloat;
}

// Low-precision tasks compute in float32 on CPU, where LibTorch lacks many half kernels.
at::ScalarType compute_type(const task& t, c10::Device device) {
  return device.is_cpu() ? at::kFloat : scalar_type(t.type);
}

int64_t fan_in(const shape_t& s) {
  int64_t f = s.size() > 1 ? s[1] : 1;
  for (std::size_t i = 2; i < s.size(); ++i) f *= s[i];
  return f;
}

// Draws one tensor. Values are drawn in float32 and rounded to the task dtype, so a seed gives the
// same values whatever the compute type.
at::Tensor draw(const task& t, const tensor_decl& d, at::Generator& gen, c10::Device device) {
  auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
  at::Tensor x;
  switch (d.init) {
  case init_kind::uniform: x = at::empty(d.shape, opts).uniform_(0.0, 1.0, gen); break;
  case init_kind::normal: x = at::empty(d.shape, opts).normal_(0.0, 1.0, gen); break;
  case init_kind::randint: x = at::randint(d.lo, d.hi, d.shape, gen, opts); break;
  case init_kind::ones: x = at::ones(d.shape, opts); break;
  case init_kind::zeros: x = at::zeros(d.shape, opts); break;
  case init_kind::kaiming_uniform: {
    double bound = 1.0 / std::sqrt(static_cast<double>(fan_in(d.shape)));
    x = at::empty(d.shape, opts).uniform_(-bound, bound, gen);
    break;
  }
  case init_kind::bias_uniform: {
    auto r = find_value(t, d.of);
    double bound = 1.0 / std::sqrt(static_cast<double>(fan_in(value_shape(t, r))));
    x = at::empty(d.shape, opts).uniform_(-bound, bound, gen);
    break;
  }
  }
  if (d.scale != 1.0) x.mul_(d.scale);
  if (d.shift != 0.0) x.add_(d.shift);
  if (d.random_scale) x.mul_(at::empty({}, opts).uniform_(0.0, 1.0, gen));
  if (d.softmax) x = x.softmax(-1);
  switch (d.structure) {
  case structure_kind::none: break;
  case structure_kind::triu: x = x.triu(); break;
  case structure_kind::tril: x = x.tril(); break;
  case structure_kind::symmetric: x = x.add(x.transpose(-2, -1)).div_(2.0); break;
  }
  if (t.type != dtype::float32) x = x.to(scalar_type(t.type));
  return x.to(compute_type(t, device));
}

std::vector<at::Tensor> draw_all(const task& t, const std::vector<tensor_decl>& decls,
                                 uint64_t seed, c10::Device device) {
  std::vector<at::Tensor> out;
  if (device.is_cpu()) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    for (const auto& d : decls) out.push_back(draw(t, d, gen, device));
    return out;
  }
  // The device's default generator: seeded under its lock, which must be released before drawing
  // (each draw takes the same non-recursive mutex). One reference per device at a time.
  at::Generator gen = at::globalContext().defaultGenerator(device);
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(seed);
  }
  for (const auto& d : decls) out.push_back(draw(t, d, gen, device));
  return out;
}

c10::optional<at::Tensor> opt_arg(const std::vector<at::Tensor>& a, std::size_t i) {
  if (i < a.size()) return a[i];
  return c10::nullopt;
}

at::Tensor apply(const op_info& info, const op_node& op, const std::vector<at::Tensor>& a,
                 double rms_default_eps) {
  const auto& at_ = op.attrs;
  const at::Tensor& x = a[0];
  std::string_view n = info.name;
  std::size_t sd = static_cast<std::size_t>(info.spatial);
  switch (info.family) {
  case op_family::unary:
    if (n == "relu") return at::relu(x);
    if (n == "leaky_relu") return at::leaky_relu(x, attr_real(at_, "negative_slope", 0.01));
    if (n == "sigmoid") return at::sigmoid(x);
    if (n == "tanh") return at::tanh(x);
    if (n == "gelu") return at::gelu(x, attr_string(at_, "approximate", "none"));
    if (n == "silu") return at::silu(x);
    if (n == "mish") return at::mish(x);
    if (n == "hardswish") return at::hardswish(x);
    if (n == "hardsigmoid") return at::hardsigmoid(x);
    if (n == "hardtanh")
      return at::hardtanh(x, attr_real(at_, "min_val", -1.0), attr_real(at_, "max_val", 1.0));
    if (n == "elu") return at::elu(x, attr_real(at_, "alpha", 1.0));
    if (n == "selu") return at::selu(x);
    if (n == "softplus")
      return at::softplus(x, attr_real(at_, "beta", 1.0), attr_real(at_, "threshold", 20.0));
    if (n == "softsign") return x / (x.abs() + 1);
    if (n == "exp") return at::exp(x);
    if (n == "log") return at::log(x);
    if (n == "abs") return at::abs(x);
    if (n == "neg") return at::neg(x);
    if (n == "sqrt") return at::sqrt(x);
    if (n == "rsqrt") return at::rsqrt(x);
    if (n == "clamp") {
      c10::optional<at::Scalar> lo, hi;
      if (has_attr(at_, "min")) lo = attr_real(at_, "min", 0);
      if (has_attr(at_, "max")) hi = attr_real(at_, "max", 0);
      return at::clamp(x, lo, hi);
    }
    break;
  case op_family::binary: {
    if (a.size() == 2) {
      const at::Tensor& y = a[1];
      if (n == "add") return at::add(x, y);
      if (n == "sub") return at::sub(x, y);
      if (n == "mul") return at::mul(x, y);
      if (n == "div") return at::div(x, y);
      if (n == "maximum") return at::maximum(x, y);
      if (n == "minimum") return at::minimum(x, y);
      if (n == "pow") return at::pow(x, y);
    }
    at::Scalar s = attr_real(at_, "scalar", 0.0);
    if (n == "add") return at::add(x, s);
    if (n == "sub") return at::sub(x, s);
    if (n == "mul") return at::mul(x, s);
    if (n == "div") return at::div(x, s);
    if (n == "maximum") return at::clamp_min(x, s);
    if (n == "minimum") return at::clamp_max(x, s);
    if (n == "pow") return at::pow(x, s);
    break;
  }
  case op_family::linear: return at::linear(x, a[1], opt_arg(a, 2));
  case op_family::matmul: return at::matmul(x, a[1]);
  case op_family::bmm: return at::bmm(x, a[1]);
  case op_family::conv: {
    auto stride = attr_ints(at_, "stride", sd, 1);
    auto padding = attr_ints(at_, "padding", sd, 0);
    auto dilation = attr_ints(at_, "dilation", sd, 1);
    int64_t groups = attr_int(at_, "groups", 1);
    return at::convolution(x, a[1], opt_arg(a, 2), stride, padding, dilation, false,
                           std::vector<int64_t>(sd, 0), groups);
  }
  case op_family::conv_transpose: {
    auto stride = attr_ints(at_, "stride", sd, 1);
    auto padding = attr_ints(at_, "padding", sd, 0);
    auto dilation = attr_ints(at_, "dilation", sd, 1);
    auto outpad = attr_ints(at_, "output_padding", sd, 0);
    int64_t groups = attr_int(at_, "groups", 1);
    return at::convolution(x, a[1], opt_arg(a, 2), stride, padding, dilation, true, outpad, groups);
  }
  case op_family::max_pool: {
    auto k = attr_ints(at_, "kernel_size", sd, 1);
    auto stride = has_attr(at_, "stride") ? attr_ints(at_, "stride", sd, 1) : k;
    auto padding = attr_ints(at_, "padding", sd, 0);
    auto dilation = attr_ints(at_, "dilation", sd, 1);
    bool ceil_mode = attr_bool(at_, "ceil_mode", false);
    if (sd == 1) return at::max_pool1d(x, k, stride, padding, dilation, ceil_mode);
    if (sd == 2) return at::max_pool2d(x, k, stride, padding, dilation, ceil_mode);
    return at::max_pool3d(x, k, stride, padding, dilation, ceil_mode);
  }
  case op_family::avg_pool: {
    auto k = attr_ints(at_, "kernel_size", sd, 1);
    auto stride = has_attr(at_, "stride") ? attr_ints(at_, "stride", sd, 1) : k;
    auto padding = attr_ints(at_, "padding", sd, 0);
    if (sd == 1) return at::avg_pool1d(x, k, stride, padding, false, true);
    if (sd == 2) return at::avg_pool2d(x, k, stride, padding, false, true);
    return at::avg_pool3d(x, k, stride, padding, false, true);
  }
  case op_family::adaptive_avg_pool: {
    auto os = attr_ints(at_, "output_size", sd, 1);
    if (sd == 1) return at::adaptive_avg_pool1d(x, os);
    if (sd == 2) return at::adaptive_avg_pool2d(x, os);
    return at::adaptive_avg_pool3d(x, os);
  }
  case op_family::batch_norm:
    return at::batch_norm(x, opt_arg(a, 1), opt_arg(a, 2), c10::nullopt, c10::nullopt, true,
                          attr_real(at_, "momentum", 0.1), attr_real(at_, "eps", 1e-5), true);
  case op_family::instance_norm:
    return at::instance_norm(x, opt_arg(a, 1), opt_arg(a, 2), c10::nullopt, c10::nullopt, true, 0.1,
                             attr_real(at_, "eps", 1e-5), true);
  case op_family::group_norm:
    return at::group_norm(x, attr_int(at_, "num_groups", 1), opt_arg(a, 1), opt_arg(a, 2),
                          attr_real(at_, "eps", 1e-5), true);
  case op_family::layer_norm:
    return at::layer_norm(x, attr_dims(at_, "normalized_shape"), opt_arg(a, 1), opt_arg(a, 2),
                          attr_real(at_, "eps", 1e-5), true);
  case op_family::rms_norm: {
    // at::rms_norm is newer than LibTorch 1.13: the formula of torch.nn.functional.rms_norm.
    auto ns = attr_dims(at_, "normalized_shape");
    std::vector<int64_t> dims;
    for (std::size_t i = 0; i < ns.size(); ++i)
      dims.push_back(static_cast<int64_t>(x.dim() - ns.size() + i));
    double eps = attr_real(at_, "eps", rms_default_eps);
    auto xf = x.to(at::kFloat);
    auto y = xf * at::rsqrt(xf.pow(2).mean(dims, true) + eps);
    if (a.size() > 1) y = y * a[1].to(at::kFloat);
    return y.to(x.scalar_type());
  }
  case op_family::softmax:
    if (n == "softmax") return at::softmax(x, attr_int(at_, "dim", -1));
    return at::log_softmax(x, attr_int(at_, "dim", -1));
  case op_family::logsumexp:
    return at::logsumexp(x, attr_dims(at_, "dim"), attr_bool(at_, "keepdim", false));
  case op_family::reduce: {
    bool keep = attr_bool(at_, "keepdim", false);
    auto dims = attr_dims(at_, "dim");
    if (dims.empty())
      for (int64_t i = 0; i < x.dim(); ++i) dims.push_back(i);
    if (n == "sum") return dims.empty() ? x.sum() : at::sum(x, dims, keep);
    if (n == "mean") return dims.empty() ? x.mean() : at::mean(x, dims, keep);
    if (n == "amax") return at::amax(x, dims, keep);
    if (n == "amin") return at::amin(x, dims, keep);
    if (n == "prod") {
      if (has_attr(at_, "dim")) return at::prod(x, attr_int(at_, "dim", 0), keep);
      auto p = x.prod();
      return keep ? p.reshape(std::vector<int64_t>(x.dim(), 1)) : p;
    }
    break;
  }
  case op_family::arg_reduce: {
    c10::optional<int64_t> dim;
    if (has_attr(at_, "dim")) dim = attr_int(at_, "dim", 0);
    bool keep = attr_bool(at_, "keepdim", false);
    auto r = n == "argmax" ? at::argmax(x, dim, keep) : at::argmin(x, dim, keep);
    if (!dim && keep) r = r.reshape(std::vector<int64_t>(x.dim(), 1));
    return r;
  }
  case op_family::cumsum: return at::cumsum(x, attr_int(at_, "dim", 0));
  case op_family::reshape: return x.reshape(op.shape);
  case op_family::permute: return x.permute(attr_dims(at_, "dims"));
  case op_family::transpose: return x.transpose(attr_int(at_, "dim0", 0), attr_int(at_, "dim1", 0));
  case op_family::flatten:
    return x.flatten(attr_int(at_, "start_dim", 0), attr_int(at_, "end_dim", -1));
  case op_family::dropout: return x;
  case op_family::cat: return at::cat(a, attr_int(at_, "dim", 0));
  case op_family::flip: return at::flip(x, attr_dims(at_, "dims"));
  case op_family::pad:
    return at::constant_pad_nd(x, std::get<std::vector<int64_t>>(at_.at("pad")),
                               attr_real(at_, "value", 0.0));
  case op_family::slice: {
    // LibTorch's own clamping of start / end: a cross-check of slice_window_of, not a copy of it.
    c10::optional<int64_t> start, end;
    if (has_attr(at_, "start")) start = attr_int(at_, "start", 0);
    if (has_attr(at_, "end")) end = attr_int(at_, "end", 0);
    // A copy: a view would keep its whole source alive past the source's last use (peak_bytes).
    return x.slice(attr_int(at_, "dim", 0), start, end, attr_int(at_, "step", 1)).clone();
  }
  case op_family::module: break; // run_reference runs the module once for all its outputs
  }
  throw std::runtime_error("no reference implementation for op '" + op.op + "'");
}

double finfo_eps(dtype t) {
  switch (t) {
  case dtype::float32: return std::numeric_limits<float>::epsilon();
  case dtype::float16: return 0.0009765625;
  case dtype::bfloat16: return 0.0078125;
  }
  return 1e-6;
}

} // namespace

uint64_t default_param_seed(const task& t) {
  if (t.param_seed) return *t.param_seed;
  // Stable across runs and machines, unlike std::hash.
  return fnv1a64(t.name) & static_cast<uint64_t>(max_param_seed);
}

std::vector<at::Tensor> make_params(const task& t, uint64_t seed, c10::Device device) {
  return draw_all(t, t.params, seed, device);
}

std::vector<at::Tensor> make_inputs(const task& t, uint64_t seed, c10::Device device) {
  return draw_all(t, t.inputs, seed, device);
}

expected<std::vector<at::Tensor>> run_reference(const task& t,
                                                const std::vector<at::Tensor>& inputs,
                                                const std::vector<at::Tensor>& params) {
  if (inputs.size() != t.inputs.size() || params.size() != t.params.size())
    return error{"task '" + t.name + "': reference given " + std::to_string(inputs.size()) +
                 " inputs and " + std::to_string(params.size()) + " params, expected " +
                 std::to_string(t.inputs.size()) + " and " + std::to_string(t.params.size())};
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
  std::vector<at::Tensor> values(t.ops.size());
  auto lookup = [&](const std::string& name) -> const at::Tensor& {
    auto r = find_value(t, name);
    if (r.k == value_ref::kind::input) return inputs[r.index];
    if (r.k == value_ref::kind::param) return params[r.index];
    return values[r.index];
  };
  double rms_eps = finfo_eps(t.type);
  std::vector<at::Tensor> module_out;  // a pytorch_module's outputs, once it has run,
  const op_node* module_ran = nullptr; // for this op and those that share its module and args
  // Intermediates are freed after their last use: the peak that check_task budgets (peak_bytes).
  const auto last = last_uses(t);
  std::vector<std::vector<std::size_t>> dies_after(t.ops.size());
  for (std::size_t i = 0; i < t.ops.size(); ++i) {
    const auto& op = t.ops[i];
    const op_info* info = find_op(op.op);
    if (!info)
      return error{"task '" + t.name + "': ops[" + std::to_string(i) + "]: unknown op '" + op.op +
                   "'"};
    std::vector<at::Tensor> args;
    for (const auto& name : op.args) args.push_back(lookup(name));
    if (info->family == op_family::module) {
      // One forward answers every output op of the same module on the same args.
      auto same_attr = [&](const char* k) { // compared in place: the module text is kilobytes
        auto a = module_ran->attrs.find(k), b = op.attrs.find(k);
        return (a == module_ran->attrs.end()) == (b == op.attrs.end()) &&
               (a == module_ran->attrs.end() || a->second == b->second);
      };
      bool same = module_ran && module_ran->args == op.args && same_attr("torchscript") &&
                  same_attr("state_dict");
      if (!same) {
        auto ran = run_module(op, args);
        if (!ran)
          return error{"task '" + t.name + "': ops[" + std::to_string(i) + "] (" + op.op +
                       "): reference failed: " + ran.message()};
        module_out = std::move(*ran);
        module_ran = &op;
      }
      auto k = static_cast<std::size_t>(attr_int(op.attrs, "output", 0));
      if (k >= module_out.size())
        return error{"task '" + t.name + "': ops[" + std::to_string(i) + "]: output " +
                     std::to_string(k) + " of a module with " + std::to_string(module_out.size())};
      if (module_out[k].sizes() != c10::IntArrayRef(op.shape))
        return error{"task '" + t.name + "': ops[" + std::to_string(i) + "]: the module's output " +
                     std::to_string(k) + " has shape " + to_string(module_out[k].sizes().vec()) +
                     ", the task says " + to_string(op.shape)};
      values[i] = module_out[k];
    } else {
      try {
        values[i] = apply(*info, op, args, rms_eps);
      } catch (const std::exception& e) {
        std::string what = e.what();
        if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
        return error{"task '" + t.name + "': ops[" + std::to_string(i) + "] (" + op.op + " -> '" +
                     op.out + "'): reference failed: " + what};
      }
    }
    args.clear();
    if (last[i] < t.ops.size()) dies_after[last[i]].push_back(i);
    for (auto k : dies_after[i]) values[k] = at::Tensor();
  }
  std::vector<at::Tensor> out;
  for (const auto& name : t.outputs) {
    auto r = find_value(t, name);
    at::Tensor v = values[r.index];
    if (!t.ops[r.index].is_index && v.scalar_type() != scalar_type(t.type))
      v = v.to(scalar_type(t.type));
    out.push_back(v.contiguous());
  }
  return out;
}

void synchronize(c10::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index() < 0 ? -1 : device.index());
}

expected<c10::Device> parse_device(const std::string& name) {
  try {
    c10::Device d(name);
    if (!d.is_cpu() && !d.is_cuda())
      return error{"device '" + name + "': expected cpu or cuda[:N]"};
    if (d.is_cuda()) {
      if (!at::hasCUDA())
        return error{"device '" + name + "': this LibTorch has no usable CUDA device"};
      if (!d.has_index()) d = c10::Device(c10::kCUDA, 0);
    }
    return d;
  } catch (const std::exception&) {
    return error{"device '" + name + "': expected cpu, cuda or cuda:N"};
  }
}

} // namespace kiln
