"""Mapping rules: dropout, norms, losses, masks, triangles, and functional conv / pool / normalization."""
import math

import torch

from .rules_pointwise import _c, _shape
from .rules_shapes import _is_none, alias
from .values import C, Mask, ParamRef, Sig, T, _attr_ints, _const, _ints, _real


def f_dropout(m, args, kwargs, what):
    b = Sig("input, p=0.5, training=True, inplace=False").bind(args, kwargs, what)
    p, training = float(_c(b, "p", what)), bool(_c(b, "training", what))
    if p != 0.0 and training:
        m.block("missing_attr", "dropout p > 0 in training mode (random)", f"p={p}")
    m.rewrite(f"{what}(p={p}, training={training}) -> identity")
    return alias(b["input"])


def norm_fn(m, args, kwargs, what):
    """torch.norm / linalg.vector_norm / linalg.norm (vector forms) as pow / abs, sum, sqrt."""
    if what == "vector_norm":
        b = Sig("input, ord=2, dim=None, keepdim=False, dtype=None").bind(args, kwargs, what)
        p = _c(b, "ord", what)
    elif what == "linalg_norm":
        b = Sig("input, ord=None, dim=None, keepdim=False, dtype=None").bind(args, kwargs, what)
        p = _c(b, "ord", what)
        p = 2 if p is None else p
        if (p == "fro" or len(_ints(_c(b, "dim", what))) == 2) and \
                _c(b, "dim", what) is not None and p not in ("fro", 2):
            m.block("missing_op", "matrix norm", f"ord={p}")
    else:
        b = Sig("input, p='fro', dim=None, keepdim=False, out=None, dtype=None").bind(
            args, kwargs, what)
        p = _c(b, "p", what)
    if _const(b.get("dtype", C(None)), "dtype") is not None:
        m.block("missing_attr", f"{what} dtype")
    dim = _c(b, "dim", what)
    keep = bool(_c(b, "keepdim", what))
    x = b["input"]
    rank = len(_shape(x) or [])
    if p == "fro":
        if dim is not None and len(_ints(dim)) not in (1, 2):
            m.block("missing_attr", f"{what} p='fro' over {dim}")
        p = 2
    if p == "nuc" or isinstance(p, str):
        m.block("missing_op", f"torch.{what} p={p!r}")
    attrs = {"keepdim": keep}
    if dim is not None:
        dims = _ints(dim)
        attrs["dim"] = dims[0] if len(dims) == 1 else dims
    elif keep:
        attrs["dim"] = list(range(rank))
    shape = m.shape_of(m.node)
    if p == 2:
        m.rewrite(f"{what}(p=2) -> sqrt(sum(x ** 2))")
        sq = m.emit("pow", [x], {"scalar": 2}, shape=_shape(x))
        s = m.emit("sum", [sq], attrs if (dim is not None or keep) else None, shape=shape)
        return m.emit("sqrt", [s], shape=shape)
    if p == 1:
        m.rewrite(f"{what}(p=1) -> sum(abs(x))")
        a = m.emit("abs", [x], shape=_shape(x))
        return m.emit("sum", [a], attrs if (dim is not None or keep) else None, shape=shape)
    if p in (math.inf, float("inf")):
        m.rewrite(f"{what}(p=inf) -> amax(abs(x))")
        a = m.emit("abs", [x], shape=_shape(x))
        return m.emit("amax", [a], attrs if (dim is not None or keep) else None, shape=shape)
    m.block("missing_op", f"torch.{what} p={p!r}", "only p = 1, 2, inf, 'fro' are rewritten")


def f_normalize(m, args, kwargs, what):
    b = Sig("input, p=2.0, dim=1, eps=1e-12, out=None").bind(args, kwargs, what)
    p, dim, eps = float(_c(b, "p", what)), int(_c(b, "dim", what)), float(_c(b, "eps", what))
    x = b["input"]
    if p not in (1.0, 2.0):
        m.block("missing_attr", "F.normalize p", f"p={p}")
    m.rewrite(f"F.normalize(p={p:g}) -> x / max(norm(x, dim, keepdim), eps)")
    if p == 2.0:
        sq = m.emit("pow", [x], {"scalar": 2}, shape=_shape(x))
        n = m.emit("sqrt", [m.emit("sum", [sq], {"dim": dim, "keepdim": True})])
    else:
        n = m.emit("sum", [m.emit("abs", [x], shape=_shape(x))], {"dim": dim, "keepdim": True})
    d = m.emit("maximum", [n], {"scalar": _real(eps)})
    return m.emit("div", [x, d], shape=_shape(x))


def _reduced(m, loss, reduction, what):
    """A loss's reduction: 'mean' and 'sum' over every element, or 'none'."""
    if reduction == "mean":
        return m.emit("mean", [loss], shape=[])
    if reduction == "sum":
        return m.emit("sum", [loss], shape=[])
    if reduction == "none":
        return loss
    m.block("missing_attr", f"{what} reduction", repr(reduction))


def _loss_args(m, b, what):
    if _const(b.get("size_average", C(None)), "size_average") is not None or \
            _const(b.get("reduce", C(None)), "reduce") is not None:
        m.block("missing_attr", f"{what} size_average / reduce (deprecated)")
    if "weight" in b and not (isinstance(b["weight"], C) and b["weight"].value is None):
        m.block("missing_attr", f"{what} weight", "per-element loss weights")
    x, y = b["input"], b["target"]
    if _shape(x) != _shape(y):
        m.block("missing_attr", f"{what} with broadcasting", f"{_shape(x)} vs {_shape(y)}")
    return x, y, _c(b, "reduction", what)


def f_pointwise_loss(kind):
    """mse / l1 / smooth_l1 / huber as elementwise ops and a reduction. With a = |x - y| and
    m = min(a, beta): smooth_l1 = 0.5 m^2 / beta + (a - m), huber = 0.5 m^2 + delta (a - m);
    each equals PyTorch's two-branch formula on both branches."""
    # weight: PyTorch 2.6+ (mse, l1, huber) take per-element weights; None is the plain loss
    sigs = {"mse": "input, target, size_average=None, reduce=None, reduction='mean', weight=None",
            "l1": "input, target, size_average=None, reduce=None, reduction='mean', weight=None",
            "smooth_l1": "input, target, size_average=None, reduce=None, reduction='mean', "
                         "beta=1.0",
            "huber": "input, target, reduction='mean', delta=1.0, weight=None"}

    def h(m, args, kwargs, what):
        b = Sig(sigs[kind]).bind(args, kwargs, what)
        x, y, reduction = _loss_args(m, b, what)
        shape = _shape(x)
        d = m.emit("sub", [x, y], shape=shape)
        if kind == "mse":
            return _reduced(m, m.emit("pow", [d], {"scalar": 2}, shape=shape), reduction, what)
        a = m.emit("abs", [d], shape=shape)
        if kind == "l1":
            return _reduced(m, a, reduction, what)
        beta = float(_c(b, "beta" if kind == "smooth_l1" else "delta", what))
        if kind == "smooth_l1" and beta == 0.0:
            return _reduced(m, a, reduction, what)
        if beta <= 0.0:
            m.block("missing_attr", f"{what} delta <= 0", repr(beta))
        m.rewrite(f"{kind}_loss -> 0.5 min(|d|, b)^2{' / b' if kind == 'smooth_l1' else ''} + "
                  f"{'' if kind == 'smooth_l1' else 'b '}(|d| - min(|d|, b))")
        mn = m.emit("minimum", [a], {"scalar": _real(beta)}, shape=shape)
        q = m.emit("mul", [m.emit("pow", [mn], {"scalar": 2}, shape=shape)],
                   {"scalar": _real(0.5 / beta if kind == "smooth_l1" else 0.5)}, shape=shape)
        r = m.emit("sub", [a, mn], shape=shape)
        if kind == "huber":
            r = m.emit("mul", [r], {"scalar": _real(beta)}, shape=shape)
        return _reduced(m, m.emit("add", [q, r], shape=shape), reduction, what)
    return h


def _pairwise_distance(m, x1, x2, p, eps, what):
    """F.pairwise_distance: ||x1 - x2 + eps||_p over the last dim (p = 1 or 2)."""
    shape = _shape(x1)
    if shape is None or _shape(x2) != shape:
        m.block("missing_attr", f"{what} with broadcasting", f"{shape} vs {_shape(x2)}")
    d = m.emit("add", [m.emit("sub", [x1, x2], shape=shape)], {"scalar": _real(eps)},
               shape=shape)
    out = shape[:-1]
    if p == 2.0:
        s = m.emit("sum", [m.emit("pow", [d], {"scalar": 2}, shape=shape)],
                   {"dim": -1, "keepdim": False}, shape=out)
        return m.emit("sqrt", [s], shape=out)
    if p == 1.0:
        return m.emit("sum", [m.emit("abs", [d], shape=shape)], {"dim": -1, "keepdim": False},
                      shape=out)
    m.block("missing_attr", f"{what} p", f"p={p}")


def _triplet(m, a, pos, neg, margin, p, eps, swap, reduction, what):
    if swap:
        m.block("missing_attr", f"{what} swap=True")
    m.rewrite("triplet_margin_loss -> relu(d(a, p) - d(a, n) + margin), "
              "d = ||x - y + eps||_p")
    dap = _pairwise_distance(m, a, pos, p, eps, what)
    dan = _pairwise_distance(m, a, neg, p, eps, what)
    shape = _shape(a)[:-1]
    diff = m.emit("add", [m.emit("sub", [dap, dan], shape=shape)], {"scalar": _real(margin)},
                  shape=shape)
    return _reduced(m, m.emit("relu", [diff], shape=shape), reduction, what)


def f_triplet_margin_loss(m, args, kwargs, what):
    b = Sig("anchor, positive, negative, margin=1.0, p=2, eps=1e-06, swap=False, "
            "size_average=None, reduce=None, reduction='mean'").bind(args, kwargs, what)
    if _const(b["size_average"], "size_average") is not None or \
            _const(b["reduce"], "reduce") is not None:
        m.block("missing_attr", f"{what} size_average / reduce (deprecated)")
    if "weight" in b and not (isinstance(b["weight"], C) and b["weight"].value is None):
        m.block("missing_attr", f"{what} weight", "per-element loss weights")
    return _triplet(m, b["anchor"], b["positive"], b["negative"], float(_c(b, "margin", what)),
                    float(_c(b, "p", what)), float(_c(b, "eps", what)),
                    bool(_c(b, "swap", what)), _c(b, "reduction", what), what)


def f_pairwise_distance(m, args, kwargs, what):
    b = Sig("x1, x2, p=2.0, eps=1e-06, keepdim=False").bind(args, kwargs, what)
    if _c(b, "keepdim", what):
        m.block("missing_attr", f"{what} keepdim=True")
    return _pairwise_distance(m, b["x1"], b["x2"], float(_c(b, "p", what)),
                              float(_c(b, "eps", what)), what)


def mask_compare(op):
    def h(m, args, kwargs, what):
        x, other = args[0], args[1] if len(args) > 1 else kwargs.get("other")
        if isinstance(x, ParamRef):  # declared here: a full slice of it is the param itself
            x = m.tensor(x)
        c = other.value if isinstance(other, C) else None
        if not (isinstance(x, T) and x.name in m.binary and c in (0, 1) and not kwargs):
            m.block("missing_op", f"tensor {'==' if op == 'eq' else '!='} (comparison)",
                    "only mask == 0 / 1 (or !=) of a constant 0 / 1 mask, for masked_fill")
        return Mask(x, (c == 1) == (op == "eq"))
    return h


def masked_fill(m, args, kwargs, what):
    """x.masked_fill(mask == 0, v) with a 0 / 1 mask k (the condition where k is 0):
    x * k + (k - 1) * -v, which is x where k is 1 and v where it is 0 for finite x. -inf fills
    as -FLT_MAX: the same after softmax, exp or relu, and the numerical check compares outputs."""
    b = Sig("input, mask, value").bind(args, kwargs, what)
    mask, x = b["mask"], b["input"]
    if not isinstance(mask, Mask):
        m.block("missing_op", "Tensor.masked_fill", "with a mask that is not mask == 0 / 1 of a "
                "constant 0 / 1 tensor")
    v = float(_c(b, "value", what))
    if math.isnan(v):
        m.block("missing_attr", "masked_fill with NaN")
    big = float(torch.finfo(torch.float32).max)
    fill = max(-big, min(big, v))
    shape = _shape(x)
    k = mask.x
    if mask.fill_where_one:  # keep where the mask is 0
        k = m.emit("add", [m.emit("neg", [k], shape=k.shape)], {"scalar": 1}, shape=k.shape)
    m.rewrite("masked_fill(k == 0, v) -> x * k + (k - 1) * -v" +
              (f" (v = {v} as {fill:.8g})" if fill != v else ""))
    kept = m.emit("mul", [x, k], shape=shape)
    f = m.emit("mul", [m.emit("sub", [k], {"scalar": 1}, shape=k.shape)], {"scalar": _real(-fill)},
               shape=k.shape)
    return m.emit("add", [kept, f], shape=shape)


def triangle_fn(which):
    """torch.triu / tril (diagonal 0) of square matrices: x times a triu / tril of ones param
    (x * 1 = x and x * 0 = 0 for the finite values a task has)."""
    def h(m, args, kwargs, what):
        b = Sig("input, diagonal=0").bind(args, kwargs, what)
        if int(_c(b, "diagonal", what)) != 0:
            m.block("missing_attr", f"torch.{which} diagonal != 0",
                    f"diagonal={_c(b, 'diagonal', what)}")
        x = b["input"]
        shape = _shape(x)
        if shape is None or len(shape) < 2 or shape[-1] != shape[-2]:
            m.block("missing_attr", f"torch.{which} of non-square matrices", f"shape {shape}")
        n = shape[-1]
        m.rewrite(f"{which}(x) -> x * {which}(ones)")
        name = m.fresh(f"{which}_mask")
        m.params.append({"name": name, "shape": [n, n], "init": "ones", "structure": which})
        return m.emit("mul", [x, T(name, [n, n])], shape=shape)
    return h


def square(m, args, kwargs, what):
    b = Sig("input").bind(args, kwargs, what)
    m.rewrite("square -> pow 2")
    return m.emit("pow", [b["input"]], {"scalar": 2}, shape=_shape(b["input"]))


def torch_neg_fn(m, args, kwargs, what):
    return m.emit("neg", [args[0]], shape=_shape(args[0]))


def f_conv(d, transposed):
    names = ("input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, "
             "dilation=1" if transposed else
             "input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1")
    s = Sig(names)

    def h(m, args, kwargs, what):
        b = s.bind(args, kwargs, what)
        w = b["weight"]
        ks = (_shape(w) or [1] * (d + 2))[2:]
        attrs = conv_attrs(m, d, ks, _c(b, "stride", what), _c(b, "padding", what),
                           _c(b, "dilation", what), _c(b, "groups", what),
                           _c(b, "output_padding", what) if transposed else None, what)
        a = [b["input"], w] + ([b["bias"]] if not _is_none(b["bias"]) else [])
        return m.emit(f"conv_transpose{d}d" if transposed else f"conv{d}d", a, attrs,
                      shape=m.shape_of(m.node))
    return h


def conv_attrs(m, d, ks, stride, padding, dilation, groups, output_padding, what):
    dil = _ints(dilation, d)
    st = _ints(stride, d)
    if isinstance(padding, str):
        if padding == "valid":
            pad = [0] * d
            m.rewrite(f"{what} padding='valid' -> 0")
        elif padding == "same":
            total = [dl * (k - 1) for dl, k in zip(dil, ks)]
            if any(t % 2 for t in total):
                m.block("missing_attr", "conv padding='same' with an even kernel extent",
                        "asymmetric padding")
            pad = [t // 2 for t in total]
            m.rewrite(f"{what} padding='same' -> {pad}")
        else:
            m.block("missing_attr", f"{what} padding", repr(padding))
    else:
        pad = _ints(padding, d)
    attrs = {"stride": _attr_ints(st), "padding": _attr_ints(pad),
             "dilation": _attr_ints(dil), "groups": int(groups)}
    if output_padding is not None:
        attrs["output_padding"] = _attr_ints(_ints(output_padding, d))
    return attrs


def pool_attrs(m, d, kind, b, what, x_shape, out_shape):
    k = _ints(_c(b, "kernel_size", what), d)
    stride = _c(b, "stride", what)
    st = k if stride is None or stride == [] or stride == () else _ints(stride, d)
    pad = _ints(_c(b, "padding", what), d)
    attrs = {"kernel_size": _attr_ints(k), "stride": _attr_ints(st), "padding": _attr_ints(pad)}
    if kind == "max":
        attrs["dilation"] = _attr_ints(_ints(_c(b, "dilation", what), d))
        if _c(b, "return_indices", what):
            m.block("missing_attr", "max_pool return_indices=True")
    if _c(b, "ceil_mode", what):
        dil = _ints(attrs.get("dilation", 1), d)
        floor = [(i + 2 * p - dl * (kk - 1) - 1) // s + 1 for i, p, dl, kk, s in
                 zip((x_shape or [0] * d)[-d:], pad, dil, k, st)]
        if out_shape is not None and floor == list(out_shape[-d:]):
            m.rewrite(f"{what} ceil_mode=True -> False (same windows at these sizes)")
        elif kind == "max":
            attrs["ceil_mode"] = True  # a partial last window: max over its elements in range
        else:  # avg: the divisor of a partial window is not the whole window's
            m.block("missing_attr", f"{kind}_pool ceil_mode=True",
                    "changes the output size here")
    if kind == "avg":
        if not _c(b, "count_include_pad", what):
            if any(pad):
                m.block("missing_attr", "avg_pool count_include_pad=False with padding")
            m.rewrite(f"{what} count_include_pad=False without padding -> True")
        if b.get("divisor_override") is not None and _c(b, "divisor_override", what) is not None:
            m.block("missing_attr", "avg_pool divisor_override")
    return attrs


def f_pool(d, kind):
    s = Sig("input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, "
            "return_indices=False" if kind == "max" else
            "input, kernel_size, stride=None, padding=0, ceil_mode=False, "
            "count_include_pad=True, divisor_override=None")

    def h(m, args, kwargs, what):
        b = s.bind(args, kwargs, what)
        attrs = pool_attrs(m, d, kind, b, what, _shape(b["input"]), m.shape_of(m.node))
        return m.emit(f"{kind}_pool{d}d", [b["input"]], attrs, shape=m.shape_of(m.node))
    return h


def adaptive_size(m, d, os_, x_shape, what):
    os_ = list(os_) if isinstance(os_, (list, tuple)) else [os_] * d
    out = []
    for i, o in enumerate(os_):
        if o is None:
            out.append(int(x_shape[len(x_shape) - d + i]))
            m.rewrite(f"{what} output_size None -> the input size")
        else:
            out.append(int(o))
    return _attr_ints(out)


def f_adaptive(d):
    def h(m, args, kwargs, what):
        b = Sig("input, output_size").bind(args, kwargs, what)
        return m.emit(f"adaptive_avg_pool{d}d", [b["input"]], {
            "output_size": adaptive_size(m, d, _c(b, "output_size", what), _shape(b["input"]),
                                         what)}, shape=m.shape_of(m.node))
    return h


def _norm_args(m, x, w, b, what):
    wn, bn = _is_none(w), _is_none(b)
    if wn != bn:
        m.block("missing_attr", f"{what} with only one of weight / bias")
    return [x] + ([] if wn else [w, b])


def f_batch_norm(m, args, kwargs, what):
    b = Sig("input, running_mean, running_var, weight=None, bias=None, training=False, "
            "momentum=0.1, eps=1e-05").bind(args, kwargs, what)
    if not _c(b, "training", what) and not (_is_none(b["running_mean"])):
        m.block("missing_attr", "batch_norm with running statistics (eval mode)")
    attrs = {"eps": _real(_c(b, "eps", what))}
    if _c(b, "momentum", what) is not None:
        attrs["momentum"] = _real(_c(b, "momentum", what))
    return m.emit("batch_norm", _norm_args(m, b["input"], b["weight"], b["bias"], what), attrs,
                  shape=_shape(b["input"]))


def f_instance_norm(m, args, kwargs, what):
    b = Sig("input, running_mean=None, running_var=None, weight=None, bias=None, "
            "use_input_stats=True, momentum=0.1, eps=1e-05").bind(args, kwargs, what)
    if not _c(b, "use_input_stats", what):
        m.block("missing_attr", "instance_norm with running statistics")
    return m.emit("instance_norm", _norm_args(m, b["input"], b["weight"], b["bias"], what),
                  {"eps": _real(_c(b, "eps", what))}, shape=_shape(b["input"]))


def f_group_norm(m, args, kwargs, what):
    b = Sig("input, num_groups, weight=None, bias=None, eps=1e-05").bind(args, kwargs, what)
    return m.emit("group_norm", _norm_args(m, b["input"], b["weight"], b["bias"], what),
                  {"num_groups": int(_c(b, "num_groups", what)),
                   "eps": _real(_c(b, "eps", what))}, shape=_shape(b["input"]))


def f_layer_norm(m, args, kwargs, what):
    b = Sig("input, normalized_shape, weight=None, bias=None, eps=1e-05").bind(args, kwargs,
                                                                               what)
    return m.emit("layer_norm", _norm_args(m, b["input"], b["weight"], b["bias"], what),
                  {"normalized_shape": _attr_ints(_c(b, "normalized_shape", what)),
                   "eps": _real(_c(b, "eps", what))}, shape=_shape(b["input"]))
