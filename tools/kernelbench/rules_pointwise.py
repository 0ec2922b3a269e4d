"""Mapping rules: unary and binary elementwise ops, clamps, min / max, reductions, softmax, cumsum."""
import torch

from .values import C, MinMax, ParamRef, Sig, _const, _ints, _real, _show, is_tensorish


def _unary(op, **fixed):
    sig = Sig("input, inplace=False")

    def h(m, args, kwargs, what):
        b = sig.bind(args, kwargs, what)
        out = m.emit(op, [b["input"]], dict(fixed) or None, shape=_shape(b["input"]))
        return _maybe_inplace(m, b, out)
    return h


def _maybe_inplace(m, b, out):
    if _const(b.get("inplace", C(False)), "inplace"):
        m.inplace(m.node, out)
    return out


def _shape(v):
    return getattr(v, "shape", None)


def _unary_attrs(op, sig, attrs_of):
    """An op whose attrs come from bound arguments: attrs_of(bound) -> dict."""
    s = Sig(sig)

    def h(m, args, kwargs, what):
        b = s.bind(args, kwargs, what)
        out = m.emit(op, [b["input"]], attrs_of(m, b, what), shape=_shape(b["input"]))
        return _maybe_inplace(m, b, out)
    return h


def _c(b, k, what):
    return _const(b[k], f"{what} {k}")


def h_leaky(m, b, what):
    return {"negative_slope": _real(_c(b, "negative_slope", what))}


def h_hardtanh(m, b, what):
    return {"min_val": _real(_c(b, "min_val", what)), "max_val": _real(_c(b, "max_val", what))}


def h_elu(m, b, what):
    return {"alpha": _real(_c(b, "alpha", what))}


def h_softplus(m, b, what):
    return {"beta": _real(_c(b, "beta", what)), "threshold": _real(_c(b, "threshold", what))}


def h_gelu(m, b, what):
    a = _c(b, "approximate", what)
    if a not in ("none", "tanh"):
        m.block("missing_attr", f"{what} approximate", repr(a))
    return {"approximate": a}


def relu6(m, args, kwargs, what):
    b = Sig("input, inplace=False").bind(args, kwargs, what)
    m.rewrite("relu6 -> hardtanh(0, 6)")
    out = m.emit("hardtanh", [b["input"]], {"min_val": 0, "max_val": 6}, shape=_shape(b["input"]))
    return _maybe_inplace(m, b, out)


def clamp(m, args, kwargs, what):
    if what in ("clamp_min", "clamp_max"):
        b = Sig("input, " + what[-3:]).bind(args, kwargs, what)
        b.setdefault("min" if what == "clamp_max" else "max", C(None))
    else:
        b = Sig("input, min=None, max=None").bind(args, kwargs, what)
    attrs = {}
    for k in ("min", "max"):
        v = b[k]
        if is_tensorish(v):
            m.block("missing_attr", f"{what} with a tensor bound", k)
        v = _const(v, f"{what} {k}")
        if v is not None:
            attrs[k] = _real(v)
    if not attrs:
        m.block("missing_attr", f"{what} without bounds")
    return m.emit("clamp", [b["input"]], attrs, shape=_shape(b["input"]))


def _scalar(v):
    """A Python number, or a scalar-valued constant param / 0-dim constant, or None."""
    if isinstance(v, C) and isinstance(v.value, (int, float)) and not isinstance(v.value, bool):
        return float(v.value)
    if isinstance(v, C) and isinstance(v.value, torch.Tensor) and v.value.numel() == 1 and \
            v.value.device.type != "meta" and v.value.dim() == 0 and \
            v.value.dtype in (torch.float32, torch.float64, torch.int64, torch.int32):
        return float(v.value)  # a 0-dim constant (torch.tensor(c) in forward)
    return None


def _param_scalar(m, v, other):
    """A one-element param holding a fixed constant (nn.Parameter(torch.tensor(c))) used with a
    tensor whose shape it does not change: its value as a scalar attr, else None."""
    if not isinstance(v, ParamRef) or v.tensor.numel() != 1:
        return None
    how = m.init_of(v)
    if how[0] != "constant":
        return None
    oshape = _shape(other)
    if oshape is None or len(oshape) < len(v.shape):
        return None
    m.rewrite(f"constant param '{v.path[len(m.prefix):]}' ({how[1]!r}) -> scalar attr")
    return how[1]


def binary(op):
    def h(m, args, kwargs, what):
        if what in ("add", "sub", "subtract"):
            b = Sig("input, other, alpha=1").bind(args, kwargs, what)
            if _const(b["alpha"], f"{what} alpha") != 1:
                m.block("missing_attr", f"torch.{what} alpha", f"alpha={_const(b['alpha'], '')}")
        elif what in ("div", "divide", "true_divide"):
            b = Sig("input, other, rounding_mode=None").bind(args, kwargs, what)
            if _const(b["rounding_mode"], "div rounding_mode") is not None:
                m.block("missing_attr", "torch.div rounding_mode",
                        repr(_const(b["rounding_mode"], "")))
        elif what == "pow":
            b = Sig("input, exponent").bind(args, kwargs, what)
            b = {"input": b["input"], "other": b["exponent"]}
        else:
            b = Sig("input, other").bind(args, kwargs, what)
        return apply_binary(m, op, b["input"], b["other"])
    return h


def apply_binary(m, op, x, y):
    out_shape = m.shape_of(m.node)
    sx, sy = _scalar(x), _scalar(y)
    if sy is None and is_tensorish(x):
        ps = _param_scalar(m, y, x)
        if ps is not None:
            sy = ps
    if sx is None and is_tensorish(y):
        ps = _param_scalar(m, x, y)
        if ps is not None:
            sx = ps
    if sx is not None and sy is not None:
        m.block("missing_attr", f"{op} of two constants")
    if sy is not None and is_tensorish(x):
        return m.emit(op, [x], {"scalar": _real(sy)}, shape=out_shape)
    if sx is not None and is_tensorish(y):  # c op y
        if op in ("add", "mul", "maximum", "minimum"):
            return m.emit(op, [y], {"scalar": _real(sx)}, shape=out_shape)
        if op == "sub":
            m.rewrite("c - x -> neg(x) + c")
            n = m.emit("neg", [y], shape=out_shape)
            return m.emit("add", [n], {"scalar": _real(sx)}, shape=out_shape)
        if op == "div":
            m.rewrite("c / x -> pow(x, -1) * c" if sx != 1 else "1 / x -> pow(x, -1)")
            r = m.emit("pow", [y], {"scalar": -1}, shape=out_shape)
            return r if sx == 1 else m.emit("mul", [r], {"scalar": _real(sx)}, shape=out_shape)
        m.block("missing_op", "scalar ** tensor", "c ** x (no rpow op)")
    if is_tensorish(x) and is_tensorish(y):
        return m.emit(op, [x, y], shape=out_shape)
    m.block("missing_attr", f"{op} with a non-numeric operand", f"{_show(x)}, {_show(y)}")


def minmax_fn(which):
    """torch.max / torch.min: (x) all, (x, dim[, keepdim]) tuple, (x, other) elementwise."""
    def h(m, args, kwargs, what):
        rest = list(args[1:])
        def tensorlike(v):
            return is_tensorish(v) or (isinstance(v, C) and isinstance(v.value, torch.Tensor))
        other = kwargs.get("other", rest[0] if rest and tensorlike(rest[0]) else None)
        if other is not None:
            op = "maximum" if which == "max" else "minimum"
            m.rewrite(f"torch.{which}(x, y) -> {op}")
            return apply_binary(m, op, args[0], other)
        b = Sig("input, dim=None, keepdim=False").bind(args, kwargs, what)
        dim = _const(b["dim"], f"{what} dim")
        if dim is None:
            return m.emit("amax" if which == "max" else "amin", [b["input"]], None,
                          shape=m.shape_of(m.node))
        return MinMax(b["input"], int(dim), bool(_const(b["keepdim"], "keepdim")), which,
                      m.node)
    return h


def materialize_minmax(m, mm, i):
    key = (id(mm), i)
    cache = m.__dict__.setdefault("_mm", {})
    if key not in cache:
        meta = m.meta.get(mm.node)
        shape = list(meta[i].shape) if meta is not None else None
        attrs = {"dim": mm.dim, "keepdim": mm.keepdim}
        if i == 0:
            op = "amax" if mm.which == "max" else "amin"
            m.rewrite(f"torch.{mm.which}(x, dim).values -> {op}")
            cache[key] = m.emit(op, [mm.x], attrs, shape=shape)
        else:
            op = "argmax" if mm.which == "max" else "argmin"
            m.rewrite(f"torch.{mm.which}(x, dim).indices -> {op}")
            cache[key] = m.emit(op, [mm.x], attrs, shape=shape, index=True)
    return cache[key]


def reduce_fn(op):
    def h(m, args, kwargs, what):
        if op == "prod":
            b = Sig("input, dim=None, keepdim=False, dtype=None").bind(args, kwargs, what)
        elif op in ("amax", "amin"):
            b = Sig("input, dim=(), keepdim=False").bind(args, kwargs, what)
        else:
            b = Sig("input, dim=None, keepdim=False, dtype=None").bind(args, kwargs, what,
                                                                       varargs=False)
        if _const(b.get("dtype", C(None)), f"{what} dtype") is not None:
            m.block("missing_attr", f"{what} dtype", repr(_const(b["dtype"], "")))
        dim = _const(b["dim"], f"{what} dim")
        attrs = {}
        if dim is not None and dim != () and dim != []:
            dims = _ints(dim)
            if op == "prod" and len(dims) != 1:
                m.block("missing_attr", "prod over several dims", str(dims))
            attrs["dim"] = dims[0] if len(dims) == 1 else dims
        attrs["keepdim"] = bool(_const(b["keepdim"], f"{what} keepdim"))
        if "dim" not in attrs and attrs["keepdim"] is False:
            attrs.pop("keepdim")
        return m.emit(op, [b["input"]], attrs, shape=m.shape_of(m.node))
    return h


def argreduce_fn(op):
    def h(m, args, kwargs, what):
        b = Sig("input, dim=None, keepdim=False").bind(args, kwargs, what)
        dim = _const(b["dim"], f"{what} dim")
        attrs = {"keepdim": bool(_const(b["keepdim"], f"{what} keepdim"))}
        if dim is not None:
            attrs["dim"] = int(dim)
        return m.emit(op, [b["input"]], attrs, shape=m.shape_of(m.node), index=True)
    return h


def logsumexp(m, args, kwargs, what):
    b = Sig("input, dim, keepdim=False").bind(args, kwargs, what)
    dims = _ints(_const(b["dim"], "logsumexp dim"))
    return m.emit("logsumexp", [b["input"]], {
        "dim": dims[0] if len(dims) == 1 else dims,
        "keepdim": bool(_const(b["keepdim"], "keepdim"))}, shape=m.shape_of(m.node))


def softmax_fn(op):
    def h(m, args, kwargs, what):
        b = Sig("input, dim=None, _stacklevel=3, dtype=None").bind(args, kwargs, what)
        if _const(b["dtype"], f"{what} dtype") is not None:
            m.block("missing_attr", f"{what} dtype", repr(_const(b["dtype"], "")))
        dim = _const(b["dim"], f"{what} dim")
        if dim is None:
            dim = legacy_softmax_dim(m, b["input"], what)
        return m.emit(op, [b["input"]], {"dim": int(dim)}, shape=_shape(b["input"]))
    return h


def legacy_softmax_dim(m, x, what):
    """softmax with dim=None: torch's legacy implicit dim (nn.functional._get_softmax_dim)."""
    nd = len(_shape(x) or [])
    m.rewrite(f"{what} with dim=None -> the implicit dim torch picks")
    return 0 if nd in (0, 1, 3) else 1


def cumsum(m, args, kwargs, what):
    b = Sig("input, dim, dtype=None").bind(args, kwargs, what)
    if _const(b["dtype"], "cumsum dtype") is not None:
        m.block("missing_attr", "cumsum dtype")
    return m.emit("cumsum", [b["input"]], {"dim": int(_const(b["dim"], "cumsum dim"))},
                  shape=_shape(b["input"]))
