"""How the tensors of a KernelBench problem were made, in spec v1's terms.

Recorder watches torch's factories (and nn.init, and the expressions get_inputs() and a Model's
__init__ compute on them) while a problem's code runs; input_init / describe_init then say which
spec v1 draw made each input and parameter: a plain draw, a draw with the modifiers a tensor_decl
has (x * scale + shift, times one rand(()) scalar, triu / tril / symmetric), a torch.nn init, a
causal mask, or Blocked with the reason. Used by tools/kernelbench_import.py.
"""
import math
import sys

import torch
import torch.nn as nn


class Blocked(Exception):
    """One thing spec v1 (or this machine) cannot do for a problem."""

    def __init__(self, kind, what, detail=""):
        super().__init__(f"{what}: {detail}" if detail else what)
        self.kind, self.what, self.detail = kind, what, detail

    def as_dict(self):
        return {"kind": self.kind, "what": self.what, "detail": self.detail}


# ---------------------------------------------------------------- recording

class Recorder:
    """While active, torch's tensor factories (and, for models, nn.init's functions) record how
    each tensor they return was made: key (data_ptr, shape, stride, dtype) -> (how, version).
    References are kept so that no recorded address is reused by another tensor. meta=True makes
    the factories build meta tensors (get_inputs() at GPU sizes costs nothing)."""

    FACTORIES = ("rand", "randn", "randint", "ones", "zeros", "full", "tensor", "empty",
                 "rand_like", "randn_like", "ones_like", "zeros_like", "full_like", "empty_like",
                 "randint_like", "as_tensor")
    INITS = ("uniform_", "normal_", "constant_", "ones_", "zeros_", "kaiming_uniform_",
             "kaiming_normal_", "xavier_uniform_", "xavier_normal_", "trunc_normal_",
             "orthogonal_", "eye_", "dirac_", "sparse_")

    def __init__(self, meta=False, inits=False):
        self.meta, self.inits = meta, inits
        self.records, self.keep, self.saved, self.depth = {}, [], [], 0
        self.exprs, self.mode = {}, None  # id(tensor) -> how it was computed (inputs only)
        self.derived = {}  # id(tensor) -> (function name, args, version, kwargs): derived tensors
        self.param_data = {}  # id(param) -> (the derived tensor it wraps, the param's version)

    def key(self, t):
        # meta tensors have no storage (data_ptr 0): identity, which the kept refs make unique
        if self.meta or t.device.type == "meta":
            return ("id", id(t))
        return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, t.device.type)

    def note(self, t, how):
        if isinstance(t, torch.Tensor):
            self.records[self.key(t)] = (how, t._version)
            self.keep.append(t)

    def lookup(self, t):
        return self.records.get(self.key(t))

    def _factory(self, name, orig):
        rec = self

        def f(*args, **kwargs):
            if rec.meta and not name.endswith("_like") and name not in ("tensor", "as_tensor"):
                kwargs["device"] = "meta"
                kwargs.pop("generator", None)
            t = orig(*args, **kwargs)
            if rec.depth == 0:
                rec.note(t, ("factory", name, args, kwargs))
            return t
        return f

    def _init(self, name, orig):
        rec = self

        def f(tensor, *args, **kwargs):
            rec.depth += 1
            try:
                out = orig(tensor, *args, **kwargs)
            finally:
                rec.depth -= 1
            if rec.depth == 0:
                rec.note(tensor, ("init", name, args, kwargs))
            return out
        return f

    def __enter__(self):
        for n in self.FACTORIES:
            if hasattr(torch, n):
                orig = getattr(torch, n)
                self.saved.append((torch, n, orig))
                setattr(torch, n, self._factory(n, orig))
        if self.inits:
            # torch's own modules bind some by name (activation.py: `from torch.nn.init import
            # xavier_uniform_` for nn.MultiheadAttention): patch those bindings too
            homes = [nn.init] + [mod for name, mod in list(sys.modules.items())
                                 if name.startswith("torch.nn.modules.") and mod is not None]
            for n in self.INITS:
                orig = getattr(nn.init, n, None)
                if orig is None:
                    continue
                wrapped = self._init(n, orig)
                for home in homes:
                    if getattr(home, n, None) is orig:
                        self.saved.append((home, n, orig))
                        setattr(home, n, wrapped)
            # nn.Parameter(data) is a new tensor object sharing data's storage and version
            # counter: it inherits data's record (meta tensors are recorded by identity)
            orig_new = nn.Parameter.__dict__["__new__"]
            fn = orig_new.__func__ if isinstance(orig_new, staticmethod) else orig_new
            rec = self

            def new(cls, data=None, requires_grad=True):
                p = fn(cls, data, requires_grad)
                r = rec.lookup(data) if isinstance(data, torch.Tensor) else None
                if r is not None:
                    rec.records[rec.key(p)] = r
                    rec.keep.append(p)
                elif isinstance(data, torch.Tensor) and id(data) in rec.derived:
                    rec.param_data[id(p)] = (data, p._version)  # randn(...) * 0.02
                    rec.keep.append(p)
                return p
            self.saved.append((nn.Parameter, "__new__", orig_new))
            nn.Parameter.__new__ = staticmethod(new)
        if self.meta or self.inits:  # say how a tensor that is not a plain draw was made
            self.mode = self._mode()
            self.mode.__enter__()
        return self

    def expression(self, t):
        return self.exprs.get(id(t))

    def _mode(self):
        rec = self

        def show(a):
            if isinstance(a, torch.Tensor):
                return rec.exprs.get(id(a), f"tensor{list(a.shape)}")
            if isinstance(a, (list, tuple)):
                return "(" + ", ".join(show(x) for x in a) + ")"
            return repr(a)

        class Mode(torch.overrides.TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                if isinstance(out, torch.Tensor) and id(out) not in rec.exprs:
                    name = getattr(func, "__name__", str(func))
                    parts = [show(a) for a in args] + [
                        f"{k}={show(v)}" for k, v in kwargs.items()
                        if k not in ("device", "generator", "requires_grad")]
                    rec.exprs[id(out)] = f"{name}({', '.join(parts)})"[:160]
                    rec.derived[id(out)] = (name, args, out._version, kwargs)
                    rec.keep.append(out)
                return out
        return Mode()

    def __exit__(self, *exc):
        if self.mode is not None:
            self.mode.__exit__(*exc)
            self.mode = None
        for mod, n, orig in reversed(self.saved):
            setattr(mod, n, orig)
        self.saved = []
        return False


def _size_arg(args, kwargs):
    size = kwargs.get("size", args[0] if len(args) == 1 and not isinstance(args[0], int)
                      else args)
    return [int(s) for s in size]


def bool_mask_init(t, rec, where):
    """torch.randint(0, 2, shape).bool(), unmodified: a float 0 / 1 input (randint:0:2). Exact where
    the model only multiplies by the mask (x * mask); the numerical check feeds the original Model
    the mask as bool (Kiln's draws, .bool()), so any use where bool and float differ (mask + mask
    is a logical or) is a mismatch, not an import."""
    how = rec.derived.get(id(t))
    src = how[1][0] if how and how[0] == "bool" and how[1] and how[2] == t._version else None
    r = rec.lookup(src) if isinstance(src, torch.Tensor) else None
    if r is None or r[0][0] != "factory" or r[0][1] != "randint" or src._version != r[1]:
        raise Blocked("input", "bool input tensor",
                      f"{where} is torch.bool and not a randint(0, 2).bool() mask")
    if factory_init(src, r, rec, where) != {"init": "randint:0:2"}:
        raise Blocked("input", "bool input tensor", f"{where}: a mask drawn other than 0 / 1")
    return {"init": "randint:0:2", "rewrite": "bool mask input -> float 0 / 1 input"}


INPUT_KEYS = ("name", "shape", "init", "scale", "shift", "random_scale", "softmax", "structure")


def input_init(t, rec, where):
    """Kiln's init for one get_inputs() tensor, or Blocked."""
    if t.dtype == torch.bool:
        return bool_mask_init(t, rec, where)
    if t.dtype != torch.float32:
        raise Blocked("input", f"{str(t.dtype).replace('torch.', '')} input tensor",
                      f"{where} is {t.dtype}; Kiln's inputs are drawn in the task dtype (float32)")
    return modified_init(t, rec, where)


_MUL = ("mul", "__mul__", "__rmul__", "multiply")
_ADD = ("add", "__add__", "__radd__")
_SUB = ("sub", "__sub__", "subtract")
_DIV = ("div", "__truediv__", "true_divide", "divide")
_TRANSPOSE = ("__get__", "t", "transpose", "mT")


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_transpose_of(rec, y, x):
    """y is x.T / x.t() / x.transpose(-2, -1) / x.mT of square matrices x, unmodified: told by
    its geometry (a view of x with the last two strides swapped), not by the function's name
    (every property reaches the recorder as __get__; x.data is one too)."""
    how = rec.derived.get(id(y))
    if how is None or how[2] != y._version or how[0] not in _TRANSPOSE:
        return False
    args = [a for a in how[1] if isinstance(a, torch.Tensor)]
    if not args or args[0] is not x or x.dim() < 2 or x.shape[-1] != x.shape[-2] or \
            x.shape[-1] < 2 or y.shape != x.shape:
        return False
    xs, ys = x.stride(), y.stride()
    return (ys[:-2] == xs[:-2] and ys[-1] == xs[-2] and ys[-2] == xs[-1] and xs[-1] != xs[-2]
            and y.storage_offset() == x.storage_offset())


def modified_init(t, rec, where, depth=0):
    """Kiln's init for a tensor made by a draw and then the modifiers a tensor_decl has, applied
    in its order: x * scale + shift, times one rand(()) scalar, a softmax over the last dim,
    triu / tril / symmetric. An
    expression in another order is kept only where the two orders agree (a scale after triu);
    anything else is Blocked."""
    r = rec.lookup(t)
    if r is not None and r[0][0] == "factory":
        _claim(rec, t, where)
        return factory_init(t, r, rec, where)
    how = rec.derived.get(id(t))

    def blocked(why):
        raise Blocked("input", "input drawn by an expression",
                      f"{where} = {rec.expression(t) or 'an expression'}: {why}")
    if how is None or how[2] != t._version or depth > 16:
        blocked("not a plain torch.rand / randn / randint / ones / zeros draw, nor one with "
                "the modifiers Kiln draws (times / plus a constant, times one rand(()), a "
                "softmax over the last dim, triu, tril, (A + A.T) / 2)")
    name, args, _, kwargs = how
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    numbers = [a for a in args if _number(a)]
    if not tensors:
        blocked(f"{name} of no tensor")
    x = tensors[0]
    if name == "float" and len(args) == 1:
        return modified_init(x, rec, where, depth + 1)
    if name in ("view", "reshape") and t.numel() == x.numel() and t.dtype == x.dtype:
        d = modified_init(x, rec, where, depth + 1)
        if d.get("structure", "none") != "none" and (
                t.dim() < 2 or list(t.shape[-2:]) != list(x.shape[-2:])):
            blocked(f"{name} that splits the matrices of a {d['structure']} tensor")
        if d.get("softmax") and (t.dim() < 1 or t.shape[-1] != x.shape[-1]):
            blocked(f"{name} that splits or joins the rows of a softmax")
        return d
    if name == "softmax" and len(tensors) == 1 and args[0] is x:
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        if set(kwargs) - {"dim", "dtype", "_stacklevel"} or kwargs.get("dtype") is not None or \
                len(args) > 2 or dim not in (-1, x.dim() - 1):
            blocked("a softmax other than over the last dim")
        d = modified_init(x, rec, where, depth + 1)
        if d.get("softmax") or d.get("structure", "none") != "none":
            blocked("a softmax of a distribution or of a triangle")
        return _with(d, softmax=True)
    if name in ("triu", "tril") and len(args) == 1 and not kwargs:
        d = modified_init(x, rec, where, depth + 1)
        if d.get("structure", "none") != "none":
            blocked(f"{name} of a tensor already {d['structure']}")
        return _with(d, structure=name)
    if name in _ADD and len(tensors) == 2 and not kwargs and (
            _is_transpose_of(rec, tensors[1], tensors[0]) or
            _is_transpose_of(rec, tensors[0], tensors[1])):
        base = tensors[0] if _is_transpose_of(rec, tensors[1], tensors[0]) else tensors[1]
        d = modified_init(base, rec, where, depth + 1)
        if d.get("structure", "none") != "none" or d.get("random_scale"):
            blocked("A + A.T of a tensor with a structure or a random scale")
        # A + A.T = 2 * symmetric(A); the shift is symmetric's too
        return _with(_then_affine(d, 2.0, 0.0, blocked), structure="symmetric")
    if name in _MUL and len(tensors) == 2 and not kwargs:
        for s, other in ((tensors[1], tensors[0]), (tensors[0], tensors[1])):
            rs = rec.lookup(s)
            if (rs is not None and rs[0][0] == "factory" and rs[0][1] == "rand" and
                    s._version == rs[1] and s.numel() == 1 and s.dim() <= other.dim() and
                    "dtype" not in rs[0][3]):
                _claim(rec, s, where)
                d = modified_init(other, rec, where, depth + 1)
                if d.get("random_scale") or d.get("softmax") or d.get("shift", 0.0) != 0.0:
                    blocked("a random scale after a shift or another random scale")
                return _with(d, random_scale=True)
        blocked("a product of two tensors that is not a tensor times one rand(()) scalar")
    if len(tensors) == 1 and len(numbers) == 1 and len(args) == 2 and not kwargs:
        c = float(numbers[0])
        d = modified_init(x, rec, where, depth + 1)
        if name in _MUL:
            return _then_affine(d, c, 0.0, blocked)
        if name in _DIV and args[0] is x and c != 0:
            return _then_affine(d, 1.0 / c, 0.0, blocked)
        if name in _ADD:
            return _then_affine(d, 1.0, c, blocked)
        if name in _SUB and args[0] is x:
            return _then_affine(d, 1.0, -c, blocked)
        if name == "__rsub__" or name in _SUB and args[1] is x:
            return _then_affine(d, -1.0, c, blocked)
    blocked(f"{name}(...) is not a modifier Kiln draws")


def _claim(rec, leaf, where):
    """Each draw may make one input, once: Kiln draws every input (and each random scale) on its
    own, so [x, x * 2], [A, (A + A.T) / 2] or s * s would be other problems."""
    used = rec.__dict__.setdefault("claimed", {})
    if id(leaf) in used:
        raise Blocked("input", "inputs share a draw",
                      f"{where} uses the draw {rec.expression(leaf) or 'of'} {used[id(leaf)]} "
                      "uses too: Kiln draws each input on its own")
    used[id(leaf)] = where
    rec.keep.append(leaf)


def _with(d, **kv):
    out = dict(d)
    out.update(kv)
    return out


def _then_affine(d, scale, shift, blocked):
    """d followed by x * scale + shift: kept where it equals a draw's scale / shift applied first."""
    if d["init"] in ("ones", "zeros"):
        blocked("a constant fill other than ones / zeros")
    if d.get("softmax"):
        blocked("a scale or shift after a softmax")
    if scale == 0.0:
        blocked("times zero")
    if shift != 0.0 and (d.get("random_scale") or d.get("structure", "none") in ("triu", "tril")):
        blocked("a shift after a random scale or a triangle")
    s, b = d.get("scale", 1.0) * scale, d.get("shift", 0.0) * scale + shift
    out = {k: v for k, v in d.items() if k not in ("scale", "shift")}
    if s != 1.0:
        out["scale"] = s
    if b != 0.0:
        out["shift"] = b
    return out


def factory_init(t, r, rec, where):
    """The init of a tensor that `rec` saw drawn (r: its record), or Blocked."""
    if r is None or r[0][0] != "factory":
        expr = rec.expression(t)
        raise Blocked("input", "input drawn by an expression",
                      f"{where} = {expr or 'an expression'}: not a plain torch.rand / randn / "
                      "randint / ones / zeros draw")
    how, version = r
    name, args, kwargs = how[1], how[2], how[3]
    if name in ("empty", "empty_like"):  # storage an op allocated and filled (newer torch's
        # softmax does): the values come from an expression, never from a draw Kiln can make
        raise Blocked("input", "input drawn by an expression",
                      f"{where} = {rec.expression(t) or 'an expression'}: uninitialized storage "
                      f"(torch.{name}) filled by an op")
    if t._version != version:
        raise Blocked("input", "input modified in place after its draw", where)
    if kwargs.get("dtype") not in (None, torch.float32, torch.int64):
        raise Blocked("input", f"input drawn as {kwargs['dtype']}",
                      f"{where}: Kiln draws in float32 (randint as integers in it)")
    if name in ("rand", "rand_like"):
        return {"init": "uniform"}
    if name in ("randn", "randn_like"):
        return {"init": "normal"}
    if name in ("ones", "ones_like"):
        return {"init": "ones"}
    if name in ("zeros", "zeros_like"):
        return {"init": "zeros"}
    if name == "randint":
        ints = [a for a in args if isinstance(a, int)]
        lo, hi = (0, ints[0]) if len(ints) == 1 else (ints[:2] if len(ints) >= 2 else (0, None))
        lo, hi = kwargs.get("low", lo), kwargs.get("high", hi)
        if not isinstance(lo, int) or not isinstance(hi, int) or lo >= hi:
            raise Blocked("input", "randint bounds", f"{where}: low={lo!r}, high={hi!r}")
        return {"init": f"randint:{lo}:{hi}"}
    raise Blocked("input", f"input drawn by torch.{name}",
                  f"{where}: Kiln inits are uniform [0,1), normal, randint:LO:HI, ones, zeros")


def torch_fan_in(shape):
    return math.prod(shape[1:]) if len(shape) > 1 else 1


def close_enough(a, b):
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b))


def describe_init(t, rec):
    """How a model tensor was initialized: ('uniform', lo, hi) | ('normal', mean, std) |
    ('constant', v) | ('other', text)."""
    r = rec.lookup(t)
    if r is None:
        return derived_param_init(t, rec)
    how, version = r
    if t._version != version:
        return ("other", "modified in place after its init", f"after {how[1]}")
    kind, name, args, kwargs = how

    def arg(i, key, default):
        return kwargs.get(key, args[i] if len(args) > i else default)

    if kind == "factory":
        if name in ("rand", "rand_like"):
            return ("uniform", 0.0, 1.0)
        if name in ("randn", "randn_like"):
            return ("normal", 0.0, 1.0)
        if name in ("ones", "ones_like"):
            return ("constant", 1.0)
        if name in ("zeros", "zeros_like"):
            return ("constant", 0.0)
        if name in ("full", "full_like"):
            return ("constant", float(arg(1, "fill_value", 0.0)))
        if name in ("tensor", "as_tensor") and t.numel() == 1 and t.is_floating_point():
            return ("constant", float(t.reshape(-1)[0]))
        return ("other", f"torch.{name}", f"torch.{name}(...)")
    if name == "uniform_":
        return ("uniform", float(arg(0, "a", 0.0)), float(arg(1, "b", 1.0)))
    if name == "normal_":
        return ("normal", float(arg(0, "mean", 0.0)), float(arg(1, "std", 1.0)))
    if name in ("ones_", "zeros_"):
        return ("constant", 1.0 if name == "ones_" else 0.0)
    if name == "constant_":
        return ("constant", float(arg(0, "val", 0.0)))
    if name == "kaiming_uniform_":
        a, mode, nl = arg(0, "a", 0), arg(1, "mode", "fan_in"), arg(2, "nonlinearity",
                                                                     "leaky_relu")
        fan = nn.init._calculate_correct_fan(t, mode)
        bound = math.sqrt(3.0) * nn.init.calculate_gain(nl, a) / math.sqrt(fan)
        return ("uniform", -bound, bound, f"kaiming_uniform_(a={a}, mode={mode})")
    if name in ("kaiming_normal_", "xavier_normal_"):
        if name == "kaiming_normal_":
            a, mode = arg(0, "a", 0), arg(1, "mode", "fan_in")
            nl = arg(2, "nonlinearity", "leaky_relu")
            std = nn.init.calculate_gain(nl, a) / math.sqrt(nn.init._calculate_correct_fan(t, mode))
            label = f"kaiming_normal_(a={a}, mode={mode}, nonlinearity={nl})"
        else:
            fi, fo = nn.init._calculate_fan_in_and_fan_out(t)
            std = float(arg(0, "gain", 1.0)) * math.sqrt(2.0 / (fi + fo))
            label = "xavier_normal_"
        return ("normal", 0.0, std, label)
    if name == "xavier_uniform_":
        fi, fo = nn.init._calculate_fan_in_and_fan_out(t)
        bound = float(arg(0, "gain", 1.0)) * math.sqrt(6.0 / (fi + fo))
        return ("uniform", -bound, bound, "xavier_uniform_")
    extra = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
    return ("other", f"nn.init.{name}", f"nn.init.{name}({extra})")


_SAME_VALUES = ("clone", "detach", "__get__", "contiguous")


def _same_values_source(t, rec, depth=0):
    """The tensor t copies its values from, through clone / detach / .data / contiguous."""
    how = rec.derived.get(id(t))
    if how is None or how[2] != t._version or depth > 8 or how[0] not in _SAME_VALUES:
        return t
    tensors = [a for a in how[1] if isinstance(a, torch.Tensor)]
    return _same_values_source(tensors[0], rec, depth + 1) if tensors else t


def derived_param_init(t, rec):
    """nn.Parameter(expression of a draw): the draw and its modifiers as ('uniform', lo, hi) /
    ('normal', mean, std), or ('other', ...)."""
    data = rec.param_data.get(id(t))
    if data is None and id(t) in rec.derived:  # a buffer: register_buffer keeps the tensor itself
        data = (t, rec.derived[id(t)][2])
    if data is not None and data[1] == t._version:
        src = _same_values_source(data[0], rec)
        if src is not data[0] and rec.lookup(src) is not None:
            return describe_init(src, rec)  # a clone of an init (a deep-copied layer): its draw
    if data is None or data[1] != t._version:
        return ("other", "expression", "made by an expression, not a torch factory or nn.init "
                "call (e.g. torch.randn(...) * 0.02)")
    try:
        d = modified_init(data[0], rec, "param")
    except Blocked as b:
        return ("other", "expression", b.detail)
    s, b = d.get("scale", 1.0), d.get("shift", 0.0)
    if d == {"init": "ones", "structure": d.get("structure")} and d["structure"] in ("triu",
                                                                                   "tril"):
        return ("mask", d["structure"])  # torch.tril(torch.ones(n, n)): a causal mask
    if d.get("random_scale") or d.get("softmax") or d.get("structure", "none") != "none" or \
            d["init"] not in ("uniform", "normal"):
        return ("other", "expression", f"{rec.expression(data[0])}: not an affine draw")
    if d["init"] == "normal":
        return ("normal", b, abs(s), f"{rec.expression(data[0])}")
    return ("uniform", min(b, b + s), max(b, b + s), f"{rec.expression(data[0])}")
