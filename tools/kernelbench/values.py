"""Values during mapping: T, C, Unknown, ParamRef, Mask, MinMax, Sig and small helpers."""
import ast

import torch

from kernelbench_draws import Blocked


class T:
    """A Kiln tensor value: input, param or op result."""
    __slots__ = ("name", "shape", "index", "view")

    def __init__(self, name, shape, index=False, view=False):
        self.name, self.shape, self.index, self.view = name, shape, index, view


class C:
    """A Python constant (int, float, tuple, torch.Size, None, str, dtype...)."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class Unknown:
    """The result of a node that could not be mapped (its blocker is recorded already)."""
    __slots__ = ("shape",)

    def __init__(self, shape=None):
        self.shape = shape


class ParamRef:
    """A model tensor (parameter or buffer), declared as a Kiln param on first use."""
    __slots__ = ("path", "tensor", "of", "shape")

    def __init__(self, path, tensor, of=None):
        self.path, self.tensor, self.of, self.shape = path, tensor, of, list(tensor.shape)


class Mask:
    """mask == 0 / mask == 1 / mask != 0 of a 0 / 1 valued tensor: only masked_fill takes it.
    fill_where_one: the condition holds where the mask is 1."""
    __slots__ = ("x", "fill_where_one")

    def __init__(self, x, fill_where_one):
        self.x, self.fill_where_one = x, fill_where_one


class MinMax:
    """torch.max / torch.min (x, dim) -> (values, indices), materialized per element used."""
    __slots__ = ("x", "dim", "keepdim", "which", "node")

    def __init__(self, x, dim, keepdim, which, node):
        self.x, self.dim, self.keepdim, self.which, self.node = x, dim, keepdim, which, node


def is_tensorish(v):
    return isinstance(v, (T, Unknown, ParamRef))


REQ = object()


class Sig:
    """A call signature: "input, dim=None, keepdim=False". bind() maps args and kwargs onto it;
    an argument it does not know is a blocker."""

    def __init__(self, spec):
        self.names, self.defaults = [], {}
        for part in [p.strip() for p in spec.split(",") if p.strip()]:
            if "=" in part:
                k, v = part.split("=", 1)
                self.names.append(k.strip())
                self.defaults[k.strip()] = ast.literal_eval(v.strip())
            else:
                self.names.append(part)
                self.defaults[part] = REQ

    def bind(self, args, kwargs, what, varargs=False):
        out = {}
        if varargs and len(args) > len(self.names):
            # x.view(a, b, c) / x.permute(0, 2, 1): the tail becomes one tuple
            head = len(self.names) - 1
            args = list(args[:head]) + [C(tuple(_const(a, what) for a in args[head:]))]
        if len(args) > len(self.names):
            raise Blocked("missing_attr", f"{what}: {len(args)} positional arguments",
                          f"takes {len(self.names)}")
        for k, v in zip(self.names, args):
            out[k] = v
        for k, v in kwargs.items():
            if k not in self.defaults:
                raise Blocked("missing_attr", f"{what} argument {k}", f"{k}={_show(v)}")
            out[k] = v
        for k in self.names:
            if k not in out:
                if self.defaults[k] is REQ:
                    raise Blocked("missing_attr", f"{what}: argument {k} missing")
                out[k] = C(self.defaults[k])
        return out


def _show(v):
    if isinstance(v, C):
        return repr(v.value)
    if isinstance(v, (T, ParamRef)):
        return "<tensor>"
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(_show(x) for x in v) + ")"
    return "<value>"


def _const(v, what):
    """The Python value of a constant argument (tuples of constants too)."""
    if isinstance(v, C):
        return v.value
    if isinstance(v, (list, tuple)):
        return type(v)(_const(x, what) for x in v)
    if isinstance(v, dict):
        return {k: _const(x, what) for k, x in v.items()}
    if isinstance(v, slice):
        return slice(_const(v.start, what), _const(v.stop, what), _const(v.step, what))
    if v is None or isinstance(v, (int, float, bool, str)):
        return v
    raise Blocked("missing_attr", f"{what}: a tensor where a constant is needed")


def _ints(v, n=None):
    """An int or a sequence of ints as a list (n: expand an int to n entries)."""
    if isinstance(v, (list, tuple, torch.Size)):
        return [int(x) for x in v]
    return [int(v)] * n if n else [int(v)]


def _attr_ints(v):
    """An attr value: an int when all entries agree, else a list."""
    v = _ints(v)
    return v[0] if len(set(v)) == 1 else v


def _real(v):
    f = float(v)
    return int(f) if f.is_integer() and abs(f) < 2 ** 53 else f
