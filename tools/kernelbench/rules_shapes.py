"""Mapping rules: matmuls, constants like a tensor, views, indexing, slicing, split, pad, cat, stack."""
import math

import torch
import torch.fx as fx

from .rules_pointwise import _c, _shape, materialize_minmax
from .values import C, MinMax, Sig, T, Unknown, _const, _ints, _real, is_tensorish


def matmul(m, args, kwargs, what):
    b = Sig("input, other").bind(args, kwargs, what)
    return m.emit("matmul", [b["input"], b["other"]], shape=m.shape_of(m.node))


def einsum(m, args, kwargs, what):
    """The einsums that are one matmul: "...ij,jk->...ik" (a batched or broadcast product over the
    last index of the first operand and the first of a 2-D second), or the same batch prefix on
    both ("bij,bjk->bik")."""
    eq = _const(args[0], what) if args else None
    ops = list(args[1:])
    if len(ops) == 1 and isinstance(ops[0], (list, tuple)):
        ops = list(ops[0])
    if not isinstance(eq, str) or "->" not in eq or len(ops) != 2 or "." in eq:
        m.block("missing_op", "torch.einsum", f"equation {eq!r} with {len(ops)} operand(s)")
    lhs, out = eq.replace(" ", "").split("->")
    a, b = lhs.split(",") if lhs.count(",") == 1 else ("", "")
    ok = len(a) >= 2 and len(b) >= 2 and len(set(a)) == len(a) and len(set(b)) == len(b)
    if ok and len(b) == 2:  # contract a[-1] with b[0]: x @ w
        ok = a[-1] == b[0] and b[1] not in a and out == a[:-1] + b[1]
    elif ok:  # the same batch prefix: bmm-like
        ok = (len(a) == len(b) and a[:-2] == b[:-2] and a[-1] == b[-2] and a[-2] not in b
              and b[-1] not in a and out == a[:-1] + b[-1])
    if not ok:
        m.block("missing_op", "torch.einsum", f"equation {eq!r} is not one matmul")
    m.rewrite(f"einsum {eq} -> matmul")
    return m.emit("matmul", ops, shape=m.shape_of(m.node))


def const_like(init):
    def h(m, args, kwargs, what):
        shape = m.shape_of(m.node)
        if shape is None:
            m.block("missing_attr", f"{what}: unknown result shape")
        dtype = kwargs.get("dtype")
        if dtype is not None and _const(dtype, what) not in (None, torch.float32):
            m.block("missing_attr", f"{what}: dtype other than float32")
        t = torch.zeros(shape) if init == "zeros" else torch.ones(shape)
        return m.const_tensor(t)
    return h


def mm(m, args, kwargs, what):
    b = Sig("input, mat2").bind(args, kwargs, what)
    m.rewrite("mm -> matmul (2-D)")
    return m.emit("matmul", [b["input"], b["mat2"]], shape=m.shape_of(m.node))


def bmm(m, args, kwargs, what):
    b = Sig("input, mat2").bind(args, kwargs, what)
    return m.emit("bmm", [b["input"], b["mat2"]], shape=m.shape_of(m.node))


def f_linear(m, args, kwargs, what):
    b = Sig("input, weight, bias=None").bind(args, kwargs, what)
    a = [b["input"], b["weight"]] + ([b["bias"]] if not _is_none(b["bias"]) else [])
    return m.emit("linear", a, shape=m.shape_of(m.node))


def _is_none(v):
    return isinstance(v, C) and v.value is None


def reshape_to(m, x, what):
    """The node's result shape as a reshape (view, unsqueeze, squeeze...)."""
    shape = m.shape_of(m.node)
    if shape is None:
        m.block("missing_attr", f"{what}: unknown result shape")
    if list(shape) == list(_shape(x) or [None]):
        return alias(x)
    return m.emit("reshape", [x], {"shape": [int(s) for s in shape]}, shape=shape, view=True)


def alias(x):
    if isinstance(x, T):
        return T(x.name, x.shape, x.index, view=True)
    return x


def view(m, args, kwargs, what):
    x = args[0]
    rest = list(args[1:]) + [kwargs[k] for k in ("shape", "size") if k in kwargs]
    if what == "view" and len(rest) == 1 and isinstance(rest[0], C) and \
            isinstance(rest[0].value, torch.dtype):
        m.block("missing_op", "Tensor.view(dtype)")
    shape = []
    for r in rest:
        v = _const(r, f"{what} shape")
        shape += _ints(v)
    if what in ("view", "reshape") and shape:
        if shape == list(_shape(x) or []):
            return alias(x)
        return m.emit("reshape", [x], {"shape": shape}, shape=m.shape_of(m.node), view=True)
    return reshape_to(m, x, what)


def torch_reshape(m, args, kwargs, what):
    b = Sig("input, shape").bind(args, kwargs, what)
    return view(m, [b["input"], b["shape"]], {}, "reshape")


def unsqueeze(m, args, kwargs, what):
    b = Sig("input, dim").bind(args, kwargs, what)
    m.rewrite(f"{what} -> reshape")
    return reshape_to(m, b["input"], what)


def squeeze(m, args, kwargs, what):
    b = Sig("input, dim=None").bind(args, kwargs, what)
    m.rewrite(f"{what} -> reshape")
    return reshape_to(m, b["input"], what)


def flatten(m, args, kwargs, what):
    b = Sig("input, start_dim=0, end_dim=-1").bind(args, kwargs, what)
    return m.emit("flatten", [b["input"]], {"start_dim": int(_c(b, "start_dim", what)),
                                            "end_dim": int(_c(b, "end_dim", what))},
                 shape=m.shape_of(m.node), view=True)


def transpose(m, args, kwargs, what):
    b = Sig("input, dim0, dim1").bind(args, kwargs, what)
    return m.emit("transpose", [b["input"]], {"dim0": int(_c(b, "dim0", what)),
                                              "dim1": int(_c(b, "dim1", what))},
                 shape=m.shape_of(m.node), view=True)


def t_method(m, args, kwargs, what):
    b = Sig("input").bind(args, kwargs, what)
    rank = len(_shape(b["input"]) or [])
    if rank < 2:
        return alias(b["input"])
    return m.emit("transpose", [b["input"]], {"dim0": 0, "dim1": 1}, shape=m.shape_of(m.node),
                  view=True)


def permute(m, args, kwargs, what):
    x = args[0]
    rest = list(args[1:]) + [kwargs[k] for k in ("dims",) if k in kwargs]
    dims = []
    for r in rest:
        dims += _ints(_const(r, "permute dims"))
    return m.emit("permute", [x], {"dims": dims}, shape=m.shape_of(m.node), view=True)


def identity_method(m, args, kwargs, what):
    if what == "contiguous":
        Sig("input, memory_format=None").bind(args, kwargs, what)
    elif what == "clone":
        Sig("input, memory_format=None").bind(args, kwargs, what)
    return alias(args[0])


def to_method(m, args, kwargs, what):
    x = args[0]
    rest = list(args[1:]) + list(kwargs.values())
    if what == "to" and rest and all(
            isinstance(v, C) and (isinstance(v.value, torch.device) or v.value in (
                "cpu", "cuda") or isinstance(v.value, bool)) for v in rest):
        return alias(x)  # a device move: the identity on values
    dt = m.meta.get(m.node)
    src = m.meta.get(m.node.args[0]) if isinstance(m.node.args[0], fx.Node) else None
    if isinstance(dt, torch.Tensor) and isinstance(src, torch.Tensor) and dt.dtype == src.dtype:
        for v in list(args[1:]) + list(kwargs.values()):
            if is_tensorish(v):
                m.block("missing_attr", f"Tensor.{what} with a tensor argument")
        return alias(x)
    m.block("missing_op", f"Tensor.{what} (dtype cast)",
            f"{getattr(src, 'dtype', '?')} -> {getattr(dt, 'dtype', '?')}")


def size_method(m, args, kwargs, what):
    v = m.meta.get(m.node)
    return C(v)


def getattr_fn(m, args, kwargs, what):
    x, attr = args[0], _const(args[1], "getattr")
    if isinstance(x, MinMax):
        if attr in ("values", "indices"):
            return materialize_minmax(m, x, 0 if attr == "values" else 1)
        m.block("missing_op", f"torch.{x.which}(...).{attr}")
    if attr in ("shape", "dtype", "device", "ndim", "is_cuda", "requires_grad"):
        return C(m.meta.get(m.node))
    if attr == "T":
        rank = len(_shape(x) or [])
        if rank < 2:
            return alias(x)
        m.rewrite("x.T -> " + ("transpose(0, 1)" if rank == 2 else "permute(reversed dims)"))
        op, attrs = (("transpose", {"dim0": 0, "dim1": 1}) if rank == 2 else
                     ("permute", {"dims": list(range(rank))[::-1]}))
        return m.emit(op, [x], attrs, shape=m.shape_of(m.node), view=True)
    if attr == "mT":
        m.rewrite("x.mT -> transpose(-2, -1)")
        return m.emit("transpose", [x], {"dim0": -2, "dim1": -1}, shape=m.shape_of(m.node))
    if attr == "data":
        return alias(x)
    m.block("missing_op", f"Tensor.{attr}")


def getitem(m, args, kwargs, what):
    x, idx = args[0], args[1]
    if isinstance(x, MinMax):
        i = _const(idx, "getitem")
        if i in (0, 1, -1, -2):
            return materialize_minmax(m, x, i % 2)
    if isinstance(x, (list, tuple)):
        i = _const(idx, "getitem")
        return x[i]
    src = m.node.args[0]
    if isinstance(x, Unknown) and isinstance(m.meta.get(src) if isinstance(src, fx.Node)
                                             else None, (tuple, list)):
        return Unknown(m.shape_of(m.node))  # an element of a blocked op's tuple result
    if not is_tensorish(x):
        return C(m.meta.get(m.node))
    index = idx if isinstance(idx, tuple) else (idx,)
    consts = []
    for e in index:
        if is_tensorish(e):
            m.block("missing_op", "tensor indexing x[tensor]", "advanced indexing")
        consts.append(_const(e, "index"))
    if all(e == slice(None) or e is Ellipsis or e is None for e in consts):
        if any(e is None for e in consts):
            m.rewrite("x[..., None] -> reshape")
            return reshape_to(m, x, "index with None")
        return alias(x)
    return basic_index(m, x, consts)


def slice_dim(m, x, dim, start, end, step, what):
    """x sliced on one dim with Python's bounds (normalized here); x itself when it takes all."""
    if _shapeless(x):
        return Unknown(None)  # its blocker is recorded already
    shape = list(_shape(x))
    n = shape[dim]
    try:
        s, e, st = slice(start, end, step).indices(n)
    except (TypeError, ValueError) as err:
        m.block("missing_attr", f"{what}: bounds", str(err))
    if st < 1:
        m.block("missing_attr", f"{what}: negative step", f"step {st}")
    if (s, e, st) == (0, n, 1):
        return alias(x)
    shape[dim] = len(range(s, e, st))
    if shape[dim] == 0:
        m.block("missing_attr", f"{what}: selects no element", f"{start}:{end}:{step} of {n}")
    return m.emit("slice", [x], {"dim": dim, "start": s, "end": e, "step": st}, shape=shape,
                  view=True)


def basic_index(m, x, consts):
    """x[i, a:b:c, ..., None]: one slice op per sliced dim; an int is a one-element slice, then a
    reshape drops those dims (and adds the None ones)."""
    shape = _shape(x)
    if isinstance(x, Unknown):
        return Unknown(m.shape_of(m.node))
    if shape is None:
        m.block("missing_attr", "index: unknown input shape")
    taken = sum(1 for e in consts if e is not None and e is not Ellipsis)
    if sum(1 for e in consts if e is Ellipsis) > 1 or taken > len(shape):
        m.block("missing_attr", "index: more indices than dims",
                ", ".join(_show_index(e) for e in consts))
    items = []
    for e in consts:
        items += [slice(None)] * (len(shape) - taken) if e is Ellipsis else [e]
    items += [slice(None)] * (len(shape) - sum(1 for e in items if e is not None))
    cur, d, reshape = x, 0, False
    for e in items:
        if e is None:
            reshape = True
            continue
        if isinstance(e, bool) or not isinstance(e, (int, slice)):
            m.block("missing_op", "tensor indexing x[...] by a non-integer", _show_index(e))
        if isinstance(e, int):
            i = e + shape[d] if e < 0 else e
            if not 0 <= i < shape[d]:
                m.block("missing_attr", "index out of range", f"{e} on a dim of {shape[d]}")
            cur, reshape = slice_dim(m, cur, d, i, i + 1, 1, "index"), True
        else:
            for part in (e.start, e.stop, e.step):
                if part is not None and (isinstance(part, bool) or not isinstance(part, int)):
                    m.block("missing_attr", "slice bound is not an integer", _show_index(e))
            cur = slice_dim(m, cur, d, e.start, e.stop, e.step, "slice")
        d += 1
    if reshape:
        return reshape_to(m, cur, "index")
    return cur


def _shapeless(x):
    return isinstance(x, Unknown) or _shape(x) is None


def _dim_of(m, x, dim, what):
    """dim normalized against x's rank, or Blocked."""
    rank = len(_shape(x))
    d = dim + rank if dim < 0 else dim
    if not 0 <= d < rank:
        m.block("missing_attr", f"{what}: dim out of range", f"dim {dim} of rank {rank}")
    return d


def narrow(m, args, kwargs, what):
    b = Sig("input, dim, start, length").bind(args, kwargs, what)
    if _shapeless(b["input"]):
        return Unknown(m.shape_of(m.node))  # its blocker is recorded already
    x = b["input"]
    dim, start = _dim_of(m, x, int(_c(b, "dim", what)), what), int(_c(b, "start", what))
    length = int(_c(b, "length", what))
    n = _shape(x)[dim]
    start = start + n if start < 0 else start
    if not (0 <= start and length >= 0 and start + length <= n):
        m.block("missing_attr", "narrow out of range", f"dim {dim} start {start} length {length}")
    return slice_dim(m, x, dim, start, start + length, 1, "narrow")


def select(m, args, kwargs, what):
    b = Sig("input, dim, index").bind(args, kwargs, what)
    if _shapeless(b["input"]):
        return Unknown(m.shape_of(m.node))  # its blocker is recorded already
    x = b["input"]
    dim, i = _dim_of(m, x, int(_c(b, "dim", what)), what), int(_c(b, "index", what))
    n = _shape(x)[dim]
    i = i + n if i < 0 else i
    if not 0 <= i < n:
        m.block("missing_attr", "select out of range", f"dim {dim} index {i}")
    m.rewrite("select -> slice, reshape")
    return reshape_to(m, slice_dim(m, x, dim, i, i + 1, 1, "select"), "select")


def split_parts(m, x, dim, sizes, what):
    parts, at = [], 0
    for k in sizes:
        parts.append(slice_dim(m, x, dim, at, at + k, 1, what))
        at += k
    m.rewrite(f"{what} -> slices")
    return tuple(parts)


def split(m, args, kwargs, what):
    b = Sig("input, split_size_or_sections, dim=0").bind(args, kwargs, what)
    if _shapeless(b["input"]):
        return Unknown(None)  # its blocker is recorded already
    x, how = b["input"], _const(b["split_size_or_sections"], what)
    dim = _dim_of(m, x, int(_c(b, "dim", what)), what)
    n = _shape(x)[dim]
    if isinstance(how, int):
        if how < 1:
            m.block("missing_attr", f"{what}: split size < 1", str(how))
        sizes = [min(how, n - at) for at in range(0, n, how)]
    else:
        sizes = [int(k) for k in how]
        if sum(sizes) != n:
            m.block("missing_attr", f"{what}: sections do not add up", f"{sizes} of {n}")
    return split_parts(m, x, dim, sizes, what)


def chunk(m, args, kwargs, what):
    b = Sig("input, chunks, dim=0").bind(args, kwargs, what)
    if _shapeless(b["input"]):
        return Unknown(None)  # its blocker is recorded already
    x, chunks = b["input"], int(_c(b, "chunks", what))
    dim = _dim_of(m, x, int(_c(b, "dim", what)), what)
    n = _shape(x)[dim]
    if chunks < 1:
        m.block("missing_attr", f"{what}: chunks < 1", str(chunks))
    size = -(-n // chunks)
    return split_parts(m, x, dim, [min(size, n - at) for at in range(0, n, size)], what)


def emit_pad(m, x, widths, value, what):
    """F.pad in constant mode; all-zero widths are the identity; negative widths (crops) and
    non-finite fills are refused."""
    widths = _ints(widths)
    if any(w < 0 for w in widths):
        m.block("missing_attr", "pad with negative widths (a crop)", str(widths))
    value = 0.0 if value is None else _real(value)
    if not math.isfinite(value):
        m.block("missing_attr", "pad with a non-finite value", repr(value))
    if not any(widths):
        return alias(x)
    attrs = {"pad": widths}
    if value != 0.0:
        attrs["value"] = value
    return m.emit("pad", [x], attrs, shape=m.shape_of(m.node))


def f_pad(m, args, kwargs, what):
    b = Sig("input, pad, mode='constant', value=None").bind(args, kwargs, what)
    mode = _c(b, "mode", what)
    if mode != "constant":
        m.block("missing_attr", f"{what} mode={mode}", "only constant padding")
    return emit_pad(m, b["input"], _c(b, "pad", what), _c(b, "value", what), what)


def flip(m, args, kwargs, what):
    x = args[0] if args else kwargs.get("input")
    rest = list(args[1:]) + [kwargs[k] for k in ("dims",) if k in kwargs]
    dims = _const(rest[0] if len(rest) == 1 else tuple(rest), what)
    dims = _ints(dims)
    if not dims:
        return alias(x)
    return m.emit("flip", [x], {"dims": dims if len(dims) > 1 else dims[0]},
                  shape=m.shape_of(m.node))


def cat_fn(m, args, kwargs, what):
    b = Sig("tensors, dim=0").bind(args, kwargs, what)
    ts = list(b["tensors"]) if isinstance(b["tensors"], (list, tuple)) else None
    if not ts:
        m.block("missing_attr", f"{what}: not a list of tensors")
    if len(ts) == 1:
        return alias(ts[0])
    return emit_cat(m, ts, int(_c(b, "dim", what)), m.shape_of(m.node))


KILN_CAT_ARGS = 64  # data/op_vocab.cpp: cat takes 2 to 64 arguments


def emit_cat(m, ts, dim, out):
    """cat of any number of tensors: more than Kiln's 64 as a cat of cats along the same dim (an
    exact rewrite: concatenation is associative)."""
    if len(ts) <= KILN_CAT_ARGS:
        return m.emit("cat", ts, {"dim": dim}, shape=out)
    ts = [m.tensor(t) for t in ts]
    if any(isinstance(t, Unknown) for t in ts):
        return Unknown(out)
    if out is None:
        m.block("missing_attr", f"cat of {len(ts)} tensors: result shape unknown")
    rank = len(out)
    d = dim + rank if dim < 0 else dim
    m.rewrite(f"cat of more than {KILN_CAT_ARGS} tensors -> cat of cats")
    parts = []
    for i in range(0, len(ts), KILN_CAT_ARGS):
        chunk = ts[i:i + KILN_CAT_ARGS]
        if len(chunk) == 1:
            parts.append(chunk[0])
            continue
        shapes = [t.shape for t in chunk]
        shape = list(out)
        shape[d] = sum(s[d] for s in shapes) if all(s and len(s) == rank for s in shapes) else None
        if shape[d] is None:
            m.block("missing_attr", f"cat of {len(ts)} tensors: part shapes unknown")
        parts.append(m.emit("cat", chunk, {"dim": dim}, shape=shape))
    return emit_cat(m, parts, dim, out)


def stack_fn(m, args, kwargs, what):
    b = Sig("tensors, dim=0").bind(args, kwargs, what)
    ts = list(b["tensors"]) if isinstance(b["tensors"], (list, tuple)) else None
    out = m.shape_of(m.node)
    if not ts or out is None:
        m.block("missing_attr", f"{what}: not a list of tensors of known shape")
    rank = len(out)
    dim = int(_c(b, "dim", what))
    dim = dim + rank if dim < 0 else dim
    if not 0 <= dim < rank:
        m.block("missing_attr", f"{what}: dim out of range", f"dim {dim} of rank {rank}")
    # torch.stack needs equal shapes: each part is the result without its `dim`
    part = out[:dim] + out[dim + 1:]
    shape = part[:dim] + [1] + part[dim:]
    parts = [m.emit("reshape", [t], {"shape": shape}, shape=shape) for t in ts]
    m.rewrite("stack -> reshape, cat")
    if len(parts) == 1:
        return parts[0]
    return emit_cat(m, parts, dim, out)


def _show_index(e):
    if isinstance(e, slice):
        return ":".join("" if v is None else str(v) for v in (e.start, e.stop, e.step)).rstrip(
            ":") or ":"
    return "..." if e is Ellipsis else repr(e)
