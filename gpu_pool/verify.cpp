// Verification and timing on LibTorch CPU tensors. Guard zones around every buffer the kernel can
// reach catch small out-of-bounds writes that would not crash; NaN poison catches unwritten
// outputs.
#include "gpu_pool/verify.hpp"

#include "data/reference.hpp"

#include <ATen/ATen.h>
#include <cmath>
#include <limits>
#include <random>

namespace kiln {

namespace {

constexpr int64_t guard_elems = 1024; // 4 KiB (float) / 8 KiB (int64) each side
constexpr float canary_f = -1.2345678e-37f;
constexpr int64_t canary_i = std::numeric_limits<int64_t>::min() + 0x5eed;
constexpr int64_t poison_i = std::numeric_limits<int64_t>::min();

void evict_tensor(const at::Tensor& t) {
  if (t.defined() && t.is_cpu() && t.is_contiguous())
    evict_from_cache(t.data_ptr(), static_cast<int64_t>(t.numel() * t.element_size()));
}

// [guard | data | guard] in one flat allocation; `data` is the view the kernel sees.
struct guarded {
  at::Tensor storage;
  at::Tensor data;
};

guarded make_guarded(at::IntArrayRef shape, at::ScalarType type, c10::Device device) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  guarded g;
  g.storage = at::empty({n + 2 * guard_elems}, at::TensorOptions().dtype(type).device(device));
  if (type == at::kLong)
    g.storage.fill_(canary_i);
  else
    g.storage.fill_(canary_f);
  g.data = g.storage.narrow(0, guard_elems, n).view(shape);
  return g;
}

bool guards_intact(const guarded& g) {
  int64_t n = g.data.numel();
  auto head = g.storage.narrow(0, 0, guard_elems);
  auto tail = g.storage.narrow(0, guard_elems + n, guard_elems);
  if (g.storage.scalar_type() == at::kLong)
    return head.eq(canary_i).all().item<bool>() && tail.eq(canary_i).all().item<bool>();
  return head.eq(canary_f).all().item<bool>() && tail.eq(canary_f).all().item<bool>();
}

void poison(guarded& g) {
  if (g.data.scalar_type() == at::kLong)
    g.data.fill_(poison_i);
  else
    g.data.fill_(std::numeric_limits<float>::quiet_NaN());
}

// The cpu ABI's form of a tensor: float32 (int64 stays int64), dense, row-major.
at::Tensor to_kernel(const at::Tensor& x) {
  if (x.scalar_type() == at::kLong) return x.contiguous();
  return x.to(at::kFloat).contiguous();
}

struct out_spec {
  std::vector<int64_t> shape;
  at::ScalarType type;
};

std::vector<out_spec> out_specs(const std::vector<at::Tensor>& ref) {
  std::vector<out_spec> s;
  for (const auto& r : ref)
    s.push_back({r.sizes().vec(), r.scalar_type() == at::kLong ? at::kLong : at::kFloat});
  return s;
}

// Buffers of one kernel call plus the pointers passed to it.
struct call_buffers {
  std::vector<guarded> in, par, out;
  std::vector<const void*> in_ptr, par_ptr;
  std::vector<void*> out_ptr;

  call_buffers(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& params,
               const std::vector<out_spec>& outs, c10::Device device) {
    for (const auto& x : inputs) in.push_back(make_guarded(x.sizes(), x.scalar_type(), device));
    for (const auto& p : params) par.push_back(make_guarded(p.sizes(), p.scalar_type(), device));
    for (const auto& o : outs) out.push_back(make_guarded(o.shape, o.type, device));
    for (auto& g : in) in_ptr.push_back(g.data.data_ptr());
    for (auto& g : par) par_ptr.push_back(g.data.data_ptr());
    for (auto& g : out) out_ptr.push_back(g.data.data_ptr());
  }
  // Fresh copies of inputs and params, poisoned outputs: untimed set-up before every call.
  void load(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& params) {
    for (size_t i = 0; i < in.size(); ++i) in[i].data.copy_(inputs[i]);
    for (size_t i = 0; i < par.size(); ++i) par[i].data.copy_(params[i]);
    for (auto& g : out) poison(g);
  }
  // The copies above left every buffer in cache: a timed call must read them from memory.
  void evict() const {
    for (const auto* v : {&in, &par, &out})
      for (const auto& g : *v) evict_tensor(g.storage);
  }
};

// After a call: guard zones, then inputs and params unchanged. Empty when all is well.
std::optional<check_result> inspect(const task& t, const call_buffers& b,
                                    const std::vector<at::Tensor>& inputs,
                                    const std::vector<at::Tensor>& params) {
  auto guard_hit = [&](const char* what, const std::string& name) {
    check_result r;
    r.kind = outcome_kind::runtime_error;
    r.message = std::string("out-of-bounds write: guard zone around ") + what + " '" + name +
                "' overwritten";
    r.retire = true; // the write may have reached memory we cannot see: start a fresh executor
    return r;
  };
  for (size_t i = 0; i < b.out.size(); ++i)
    if (!guards_intact(b.out[i])) return guard_hit("output", t.outputs[i]);
  for (size_t i = 0; i < b.in.size(); ++i)
    if (!guards_intact(b.in[i])) return guard_hit("input", t.inputs[i].name);
  for (size_t i = 0; i < b.par.size(); ++i)
    if (!guards_intact(b.par[i])) return guard_hit("param", t.params[i].name);
  auto mutated = [&](const char* what, const std::string& name) {
    check_result r;
    r.kind = outcome_kind::input_mutated;
    r.message = std::string("the kernel wrote into ") + what + " '" + name + "'";
    return r;
  };
  for (size_t i = 0; i < b.in.size(); ++i)
    if (!at::equal(b.in[i].data, inputs[i])) return mutated("input", t.inputs[i].name);
  for (size_t i = 0; i < b.par.size(); ++i)
    if (!at::equal(b.par[i].data, params[i])) return mutated("param", t.params[i].name);
  return std::nullopt;
}

std::optional<check_result> compare_all(const task& t, const call_buffers& b,
                                        const std::vector<at::Tensor>& ref, int check) {
  for (size_t i = 0; i < ref.size(); ++i) {
    if (auto mm = compare_output(b.out[i].data, ref[i], t.tol)) {
      mm->output = t.outputs[i];
      mm->check = check;
      check_result r;
      r.kind = outcome_kind::wrong;
      r.message =
          "output '" + mm->output + "': " + std::to_string(mm->bad_count) +
          " elements outside tolerance" +
          (check >= 0 ? " in check " + std::to_string(check) : std::string(" after timing"));
      r.error = mm;
      return r;
    }
  }
  return std::nullopt;
}

check_result runtime_error_result(std::string message) {
  check_result r;
  r.kind = outcome_kind::runtime_error;
  r.message = std::move(message);
  return r;
}

uint64_t fresh_seed() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

std::vector<at::Tensor> kernel_form(const std::vector<at::Tensor>& v) {
  std::vector<at::Tensor> out;
  for (const auto& x : v) out.push_back(to_kernel(x));
  return out;
}

} // namespace

std::optional<mismatch> compare_output(const at::Tensor& out, const at::Tensor& ref,
                                       const tolerance& tol) {
  auto o = out.reshape({-1});
  auto r = ref.reshape({-1});
  mismatch mm;
  if (o.numel() != r.numel()) {
    mm.bad_count = std::max(o.numel(), r.numel());
    mm.first_bad_index = 0;
    mm.max_abs_err = mm.max_rel_err = std::numeric_limits<double>::infinity();
    return mm;
  }
  at::Tensor bad, diff;
  if (r.scalar_type() == at::kLong || o.scalar_type() == at::kLong) {
    auto oi = o.to(at::kLong), ri = r.to(at::kLong);
    bad = oi.ne(ri);
    diff = (oi.to(at::kDouble) - ri.to(at::kDouble)).abs();
  } else {
    auto od = o.to(at::kDouble), rd = r.to(at::kDouble);
    auto both_nan = od.isnan().logical_and(rd.isnan());
    diff = (od - rd).abs();
    auto good = diff.le(tol.atol + tol.rtol * rd.abs()).logical_or(od.eq(rd)).logical_or(both_nan);
    bad = good.logical_not();
    diff = diff.masked_fill(both_nan, 0.0).nan_to_num(std::numeric_limits<double>::infinity());
  }
  mm.bad_count = bad.sum().item<int64_t>();
  if (mm.bad_count == 0) return std::nullopt;
  mm.first_bad_index = bad.nonzero().select(1, 0)[0].item<int64_t>();
  mm.max_abs_err = diff.max().item<double>();
  auto rabs = r.to(at::kDouble).abs();
  auto sel = rabs.gt(tol.atol);
  if (sel.any().item<bool>())
    mm.max_rel_err = (diff.masked_select(sel) / rabs.masked_select(sel)).max().item<double>();
  return mm;
}

check_result verify_kernel(const task& t, const std::vector<at::Tensor>& params,
                           const kernel_call& kernel, const verify_options& opts,
                           c10::Device device) {
  auto params_k = kernel_form(params);
  for (int c = 0; c < opts.checks; ++c) {
    auto inputs = make_inputs(t, fresh_seed(), device);
    auto ref = run_reference(t, inputs, params); // its own tensors: the kernel never sees them
    if (!ref) return runtime_error_result("reference failed: " + ref.message());
    auto inputs_k = kernel_form(inputs);
    call_buffers b(inputs_k, params_k, out_specs(*ref), device);
    for (int run = 0; run < (opts.check_determinism ? 2 : 1); ++run) {
      b.load(inputs_k, params_k);
      auto st = kernel(b.in_ptr, b.par_ptr, b.out_ptr);
      if (auto bad = inspect(t, b, inputs_k, params_k)) return *bad;
      if (!st) return runtime_error_result(st.message());
      if (auto bad = compare_all(t, b, *ref, c)) {
        if (run == 1) {
          bad->kind = outcome_kind::nondeterministic;
          bad->message = "second run on the same inputs disagrees: " + bad->message;
        }
        return *bad;
      }
    }
  }
  check_result r;
  r.message = std::to_string(opts.checks) + " checks passed" +
              (opts.check_determinism ? " (each run twice)" : "");
  return r;
}

check_result time_kernel(const task& t, const std::vector<at::Tensor>& params,
                         const kernel_call& kernel, const timing_options& opts,
                         const run_device& dev) {
  auto params_k = kernel_form(params);
  std::vector<at::Tensor> sets[2] = {make_inputs(t, fresh_seed(), dev.device),
                                     make_inputs(t, fresh_seed(), dev.device)};
  std::vector<at::Tensor> sets_k[2] = {kernel_form(sets[0]), kernel_form(sets[1])};
  auto ref0 = run_reference(t, sets[0], params);
  if (!ref0) return runtime_error_result("reference failed: " + ref0.message());
  call_buffers b(sets_k[0], params_k, out_specs(*ref0), dev.device);
  int calls = 0, last = 0;
  auto prepare = [&]() -> status {
    last = calls++ % 2;
    b.load(sets_k[last], params_k);
    if (dev.device.is_cpu()) b.evict();
    return ok();
  };
  auto run = dev.clock([&] { return kernel(b.in_ptr, b.par_ptr, b.out_ptr); });
  auto summary = measure(opts, *dev.flusher, prepare, run);
  if (auto bad = inspect(t, b, sets_k[last], params_k)) return *bad;
  if (!summary) return runtime_error_result(summary.message());
  auto ref = last == 0 ? std::move(ref0) : run_reference(t, sets[1], params);
  if (!ref) return runtime_error_result("reference failed: " + ref.message());
  if (auto bad = compare_all(t, b, *ref, -1)) return *bad;
  // Which of the two sets the last trial used depends on the trial count: a kernel that caches
  // its answer by pointer returns the first set's answer, right whenever the count is odd. One
  // more call, on a third fresh set in the same buffers, is checked whatever the count was.
  auto fresh = make_inputs(t, fresh_seed(), dev.device);
  auto fresh_k = kernel_form(fresh);
  b.load(fresh_k, params_k);
  if (auto st = run(); !st) return runtime_error_result(st.message());
  if (auto bad = inspect(t, b, fresh_k, params_k)) return *bad;
  auto fresh_ref = run_reference(t, fresh, params);
  if (!fresh_ref) return runtime_error_result("reference failed: " + fresh_ref.message());
  if (auto bad = compare_all(t, b, *fresh_ref, -1)) return *bad;
  check_result r;
  r.time = summary->t;
  return r;
}

check_result time_reference(const task& t, const std::vector<at::Tensor>& params,
                            const timing_options& opts, const run_device& dev) {
  auto inputs = make_inputs(t, fresh_seed(), dev.device);
  auto run = dev.clock([&]() -> status {
    auto r = run_reference(t, inputs, params);
    if (!r) return r.err();
    return ok();
  });
  // Like the kernel's buffers: the reference reads its inputs and params from memory each trial.
  auto prepare = [&]() -> status {
    if (dev.device.is_cpu())
      for (const auto* v : {static_cast<const std::vector<at::Tensor>*>(&inputs), &params})
        for (const auto& x : *v) evict_tensor(x);
    return ok();
  };
  auto summary = measure(opts, *dev.flusher, prepare, run);
  if (!summary) return runtime_error_result("reference failed: " + summary.message());
  check_result r;
  r.time = summary->t;
  return r;
}

} // namespace kiln
