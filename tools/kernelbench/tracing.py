"""Tracing with torch.fx on meta tensors: MetaProxy, Tracer, meta kernels, wrapper, pruning, sizes."""
import builtins
import inspect
import math
import re

import torch
import torch.fx as fx
import torch.nn as nn

from kernelbench_draws import Blocked

from .problems import _short
from .values import _ints


def _to_meta(v):
    if isinstance(v, torch.Tensor) and v.device.type != "meta":
        return v.to("meta")
    return v


class MetaProxy(fx.Proxy):
    """A proxy that knows its meta value: sizes, dims, dtype are concrete while tracing (so
    `b, c, h, w = x.shape` and x.view(b, c, -1) trace, and bake these sizes); `device` says cpu
    so that constants made with device=x.device are real."""

    def _meta(self):
        return self.node.meta.get("kiln_meta")

    @property
    def shape(self):
        v = self._meta()
        return v.shape if isinstance(v, torch.Tensor) else fx.Proxy.__getattr__(self, "shape")

    def size(self, dim=None):
        v = self._meta()
        if isinstance(v, torch.Tensor):
            return v.size() if dim is None else v.size(dim)
        return self.tracer.create_proxy("call_method", "size",
                                        (self,) if dim is None else (self, dim), {})

    def dim(self):
        v = self._meta()
        return v.dim() if isinstance(v, torch.Tensor) else \
            self.tracer.create_proxy("call_method", "dim", (self,), {})

    @property
    def ndim(self):
        return self.dim()

    def numel(self):
        v = self._meta()
        return v.numel() if isinstance(v, torch.Tensor) else \
            self.tracer.create_proxy("call_method", "numel", (self,), {})

    @property
    def dtype(self):
        v = self._meta()
        return v.dtype if isinstance(v, torch.Tensor) else fx.Proxy.__getattr__(self, "dtype")

    @property
    def device(self):
        return torch.device("cpu")

    @property
    def is_cuda(self):
        return False

    def __len__(self):
        v = self._meta()
        if isinstance(v, torch.Tensor) and v.dim() > 0:
            return v.shape[0]
        raise RuntimeError("len() of a traced value of unknown shape")

    def __iter__(self):
        # `a, b = self.lstm(x)` / `q, k, v = x.split(...)`: fx's own __iter__ reads the
        # caller's bytecode, which Python 3.11 changed; the meta value knows the length
        v = self._meta()
        if isinstance(v, (tuple, list)):
            return iter([self[i] for i in range(len(v))])
        if isinstance(v, torch.Tensor) and v.dim() > 0:
            return iter([self[i] for i in range(v.shape[0])])
        return super().__iter__()

    def __getattr__(self, k):
        if k in ("node", "tracer", "_meta"):
            raise AttributeError(k)
        return MetaAttribute(self, k)


class MetaAttribute(MetaProxy):
    def __init__(self, root, attr):
        self.root, self.attr, self.tracer, self._node = root, attr, root.tracer, None

    @property
    def node(self):
        if self._node is None:
            self._node = self.tracer.create_proxy("call_function", builtins.getattr,
                                                  (self.root, self.attr), {}).node
        return self._node

    def __call__(self, *args, **kwargs):
        return self.tracer.create_proxy("call_method", self.attr, (self.root,) + args, kwargs)


class Tracer(fx.Tracer):
    """torch.nn's own modules are leaves (mapped whole); the problem's modules are traced
    through (Sequential / ModuleList / ModuleDict are containers, never leaves). Every node
    gets node.meta["kiln_meta"]: its value on meta tensors (None where that failed)."""

    def __init__(self, meta_args):
        super().__init__()
        # buffers read in forward become get_attr nodes (params with their init), not constants
        # computed during tracing (minGPT's causal mask: tril(ones) == 0)
        self.proxy_buffer_attributes = True
        self.meta_args, self.meta_errors, self._in_meta = meta_args, [], False

    # while a meta value is computed, modules run plainly (no proxies, no nodes)
    def call_module(self, m, forward, args, kwargs):
        if self._in_meta:
            return forward(*args, **kwargs)
        return super().call_module(m, forward, args, kwargs)

    def getattr(self, attr, attr_val, parameter_proxy_cache):
        if self._in_meta:
            return attr_val
        return super().getattr(attr, attr_val, parameter_proxy_cache)

    def is_leaf_module(self, m, qualname):
        if isinstance(m, (nn.Sequential, nn.ModuleList, nn.ModuleDict)):
            return False
        return type(m).__module__.startswith("torch.nn")

    def proxy(self, node):
        return MetaProxy(node, self)

    def create_proxy(self, kind, target, args, kwargs, name=None, type_expr=None,
                     proxy_factory_fn=None):
        p = super().create_proxy(kind, target, args, kwargs, name, type_expr, proxy_factory_fn)
        meta = None
        self._in_meta = True
        try:
            if kind == "placeholder":
                meta = self.meta_args.get(target)
            elif kind == "get_attr":
                obj = self.root
                for part in target.split("."):
                    obj = getattr(obj, part)
                meta = _to_meta(obj)
            elif kind in ("call_function", "call_method", "call_module"):
                def unwrap(a):
                    if isinstance(a, fx.Proxy):
                        v = a.node.meta.get("kiln_meta")
                        if v is None:
                            raise LookupError("an argument has no meta value")
                        return v
                    if isinstance(a, torch.device):  # x.to(h.device): stay on meta
                        return torch.device("meta")
                    return _to_meta(a)
                margs = fx.node.map_aggregate(args, unwrap)
                mkwargs = fx.node.map_aggregate(kwargs, unwrap)
                with torch.no_grad():
                    if kind == "call_function":
                        meta = target(*margs, **mkwargs)
                    elif kind == "call_method":
                        meta = getattr(margs[0], target)(*margs[1:], **mkwargs)
                    else:  # the model is on meta: its leaf modules run as they are
                        meta = self.root.get_submodule(target).forward(*margs, **mkwargs)
        except Exception as e:
            if not isinstance(e, LookupError):
                self.meta_errors.append(f"{target if isinstance(target, str) else _qn(target)}:"
                                        f" {_short(e)}")
            meta = None
        finally:
            self._in_meta = False
        p.node.meta["kiln_meta"] = meta
        return p


def _qn(t):
    try:
        return fx.node._get_qualified_name(t)
    except Exception:
        return getattr(t, "__name__", repr(t))


def _register_meta_kernels():
    """Meta kernels LibTorch 1.13 lacks, for the shapes of ops KernelBench uses."""
    lib = torch.library.Library("aten", "IMPL", "Meta")

    def out_size(i, k, p, s, d, ceil):
        o = (i + 2 * p - d * (k - 1) - 1 + ((s - 1) if ceil else 0)) // s + 1
        if ceil and (o - 1) * s >= i + p:
            o -= 1
        return o

    def max_pool3d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1,
                                ceil_mode=False):
        k = _ints(kernel_size, 3)
        k = k * 3 if len(k) == 1 else k
        st = _ints(stride, 3) if stride not in ((), []) else k
        st = st * 3 if len(st) == 1 else st
        pd = _ints(padding, 3)
        pd = pd * 3 if len(pd) == 1 else pd
        dl = _ints(dilation, 3)
        dl = dl * 3 if len(dl) == 1 else dl
        shape = list(x.shape[:-3]) + [out_size(x.shape[-3 + i], k[i], pd[i], st[i], dl[i],
                                               ceil_mode) for i in range(3)]
        return (torch.empty(shape, dtype=x.dtype, device="meta"),
                torch.empty(shape, dtype=torch.long, device="meta"))

    try:
        lib.impl("max_pool3d_with_indices", max_pool3d_with_indices)
    except RuntimeError:
        pass  # a LibTorch that has it
    return lib


_META_LIB = _register_meta_kernels()


def make_wrapper(model, items):
    """A module whose forward takes only get_inputs()'s tensors, the others bound as
    constants, and calls the model: placeholders are tensors, constants are baked in."""
    sig_names = []
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    for p in params:
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            sig_names.append(p.name)
        elif p.kind == p.VAR_POSITIONAL:
            sig_names += [f"{p.name}{i}" for i in range(len(items) - len(sig_names))]
            break
    if len(sig_names) < len(items):
        raise Blocked("format", "get_inputs() returns more items than forward takes",
                      f"{len(items)} items, forward({', '.join(sig_names)})")
    tensor_names, call = [], []
    for i, item in enumerate(items):
        name = re.sub(r"\W", "_", sig_names[i])
        if isinstance(item, torch.Tensor):
            tensor_names.append(name)
            call.append(name)
        else:
            call.append(f"self.consts[{i}]")
    src = (f"def forward(self, {', '.join(tensor_names)}):\n"
           f"    return self.m({', '.join(call)})\n")
    ns = {}
    exec(src, ns)

    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model
            self.consts = list(items)

    Wrapper.forward = ns["forward"]
    return Wrapper(), tensor_names


def prune(ops, outputs):
    """Only the ops the outputs need, in order."""
    need, keep = set(outputs), []
    for op in reversed(ops):
        if op["out"] in need:
            keep.append(op)
            need.update(op["args"])
    return keep[::-1], need


def spec_bytes(spec, shapes):
    n = sum(math.prod(d["shape"]) * 4 for d in spec["inputs"] + spec["params"])
    for op in spec["ops"]:
        s = shapes.get(op["out"])
        n += math.prod(s) * (8 if op["op"] in ("argmax", "argmin") else 4) if s is not None \
            else 0
    return n


def spec_peak_bytes(spec, shapes):
    """The peak of live tensors as Kiln's reference holds them (data/task_check.cpp peak_bytes):
    inputs and params throughout, an op result until its last reader, outputs to the end."""
    ops, outs = spec["ops"], set(spec["outputs"])
    last = {}
    for i, op in enumerate(ops):
        for a in op["args"]:
            last[a] = i
    size = {op["out"]: (math.prod(shapes[op["out"]]) if shapes.get(op["out"]) is not None else 0) *
            (8 if op["op"] in ("argmax", "argmin") else 4) for op in ops}
    # Op j's result is freed after step last[j] (after step j when nothing reads it).
    freed_at = [[] for _ in ops]
    for j, op in enumerate(ops):
        if op["out"] not in outs:
            freed_at[last.get(op["out"], j)].append(op["out"])
    live = sum(math.prod(d["shape"]) * 4 for d in spec["inputs"] + spec["params"])
    peak = live
    for i, op in enumerate(ops):
        live += size[op["out"]]
        peak = max(peak, live)
        live -= sum(size[o] for o in freed_at[i])
    return peak


def blas_gflop(spec, shapes):
    """Estimated GFLOP of one forward's linear / matmul / bmm ops: the ops this machine's
    LibTorch runs through the reference BLAS (a few GFLOP/s), the check's main cost."""
    for d in spec["inputs"] + spec["params"]:
        shapes.setdefault(d["name"], d["shape"])
    total = 0
    for op in spec["ops"]:
        if op["op"] not in ("linear", "matmul", "bmm"):
            continue
        out, a = shapes.get(op["out"]), shapes.get(op["args"][0])
        if out is None or not a:
            continue
        total += 2 * math.prod(out) * a[-1]
    return total / 1e9
