"""Mapping rules for nn.Module calls: handler(m, module, path, args, kwargs)."""
import math
import operator

import torch.nn as nn

from kernelbench_draws import Blocked

from .rules_nn import _triplet, adaptive_size, conv_attrs, f_pointwise_loss, pool_attrs
from .rules_pointwise import _c, _shape, legacy_softmax_dim
from .rules_shapes import alias, emit_pad, reshape_to
from .values import C, ParamRef, Sig, Unknown, _attr_ints, _real


def _mod_input(m, args, kwargs, what):
    if len(args) != 1 or kwargs:
        m.block("missing_attr", f"{what} called with {len(args)} args / {sorted(kwargs)}")
    return args[0]


def _inplace_module(m, mod, out):
    if getattr(mod, "inplace", False):
        m.inplace(m.node, out)
    return out


def mod_unary(op, attrs_of=None):
    def h(m, mod, path, args, kwargs):
        x = _mod_input(m, args, kwargs, type(mod).__name__)
        attrs = attrs_of(mod) if attrs_of else None
        return _inplace_module(m, mod, m.emit(op, [x], attrs, shape=_shape(x)))
    return h


def _mod_gelu(mod):
    if mod.approximate not in ("none", "tanh"):
        raise Blocked("missing_attr", "nn.GELU approximate", repr(mod.approximate))
    return {"approximate": mod.approximate}


def mod_loss(kind):
    """nn.MSELoss / L1Loss / SmoothL1Loss / HuberLoss: the functional form with the module's
    reduction (and beta / delta)."""
    fn = f_pointwise_loss(kind)

    def h(m, mod, path, args, kwargs):
        kw = dict(kwargs, reduction=C(mod.reduction))
        if kind == "smooth_l1":
            kw["beta"] = C(float(mod.beta))
        if kind == "huber":
            kw["delta"] = C(float(mod.delta))
        return fn(m, list(args), kw, f"{kind}_loss")
    return h


def mod_triplet(m, mod, path, args, kwargs):
    b = Sig("anchor, positive, negative").bind(list(args), kwargs, "TripletMarginLoss")
    return _triplet(m, b["anchor"], b["positive"], b["negative"], float(mod.margin),
                    float(mod.p), float(mod.eps), bool(mod.swap), mod.reduction,
                    "nn.TripletMarginLoss")


def mod_relu6(m, mod, path, args, kwargs):
    x = _mod_input(m, args, kwargs, "ReLU6")
    m.rewrite("nn.ReLU6 -> hardtanh(0, 6)")
    return _inplace_module(m, mod, m.emit("hardtanh", [x], {"min_val": 0, "max_val": 6},
                                          shape=_shape(x)))


def mod_softmax(op):
    def h(m, mod, path, args, kwargs):
        x = _mod_input(m, args, kwargs, type(mod).__name__)
        dim = mod.dim if mod.dim is not None else legacy_softmax_dim(m, x, type(mod).__name__)
        return m.emit(op, [x], {"dim": int(dim)}, shape=_shape(x))
    return h


def mod_identity(m, mod, path, args, kwargs):
    if isinstance(mod, nn.Identity):
        return alias(args[0])
    x = _mod_input(m, args, kwargs, type(mod).__name__)
    if mod.p != 0.0 and mod.training:
        m.block("missing_attr", "dropout p > 0 in training mode (random)",
                f"nn.{type(mod).__name__}(p={mod.p})")
    m.rewrite(f"nn.{type(mod).__name__}(p={mod.p}) -> identity")
    return alias(x)


def _pref(m, mod, path, attr, of=None):
    t = getattr(mod, attr)
    return ParamRef(f"{path}.{attr}", t, of)


def mod_conv(d, transposed):
    def h(m, mod, path, args, kwargs):
        what = f"nn.{type(mod).__name__}"
        if len(args) != 1 or kwargs:
            m.block("missing_attr", f"{what} forward with output_size")
        x = args[0]
        if mod.padding_mode != "zeros":
            m.block("missing_attr", f"conv padding_mode='{mod.padding_mode}'", what)
        xs = _shape(x)
        if xs is not None and len(xs) != d + 2:
            m.block("missing_attr", f"{what} on an unbatched input", f"input shape {xs}")
        attrs = conv_attrs(m, d, list(mod.kernel_size), mod.stride, mod.padding, mod.dilation,
                           mod.groups, mod.output_padding if transposed else None, what)
        w = _pref(m, mod, path, "weight")
        a = [x, w] + ([_pref(m, mod, path, "bias", of=w)] if mod.bias is not None else [])
        return m.emit(f"conv_transpose{d}d" if transposed else f"conv{d}d", a, attrs,
                      shape=m.shape_of(m.node))
    return h


def mod_linear(m, mod, path, args, kwargs):
    x = _mod_input(m, args, kwargs, "Linear")
    w = _pref(m, mod, path, "weight")
    a = [x, w] + ([_pref(m, mod, path, "bias", of=w)] if mod.bias is not None else [])
    return m.emit("linear", a, shape=m.shape_of(m.node))


def mod_attention(m, mod, path, args, kwargs):
    """nn.MultiheadAttention as its math (torch's multi_head_attention_forward without masks):
    in-projection, heads split, softmax(q k^T / sqrt(head_dim)) v, heads joined, out-projection.
    The averaged attention weights (the second result) are not computed: a use of them blocks."""
    what = "nn.MultiheadAttention"
    b = Sig("query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None, "
            "average_attn_weights=True, is_causal=False").bind(args, kwargs, what)
    for k in ("key_padding_mask", "attn_mask"):
        if b[k] is not None and _c(b, k, what) is not None:
            m.block("missing_attr", f"{what} {k}")
    if _c(b, "is_causal", what):
        m.block("missing_attr", f"{what} is_causal=True")
    if mod.dropout > 0 and mod.training:
        m.block("missing_attr", "dropout p > 0 in training mode (random)", f"{what} dropout")
    if not mod._qkv_same_embed_dim or mod.bias_k is not None or mod.add_zero_attn:
        m.block("missing_attr", f"{what} with kdim / vdim, add_bias_kv or add_zero_attn")
    for u in m.node.users:  # `a, _ = attn(...)` traces a getitem of the weights without users
        if not (u.target is operator.getitem and (u.args[1] == 0 or not u.users)):
            m.block("missing_attr", f"{what} attention weights used")
            break
    q, k, v = (m.tensor(b[n]) for n in ("query", "key", "value"))
    if any(isinstance(t, Unknown) for t in (q, k, v)):
        return (Unknown(None), Unknown(None))
    if any(len(t.shape or []) != 3 for t in (q, k, v)):
        m.block("missing_attr", f"{what} on unbatched inputs")
    E, H = mod.embed_dim, mod.num_heads
    hd = E // H
    if mod.batch_first:  # (N, L, E) in and out: the math below runs on (L, N, E)
        q, k, v = (m.emit("transpose", [t], {"dim0": 0, "dim1": 1},
                          shape=[t.shape[1], t.shape[0], E]) for t in (q, k, v))
    L, N, S = q.shape[0], q.shape[1], k.shape[0]
    w = _pref(m, mod, path, "in_proj_weight")
    bias = _pref(m, mod, path, "in_proj_bias") if mod.in_proj_bias is not None else None

    def rows(t, i, shape):
        return m.emit("slice", [t], {"dim": 0, "start": i * E, "end": (i + 1) * E, "step": 1},
                      shape=shape)

    def project(t, i):  # heads: (len, N, E) -> (N * H, len, hd)
        wi = rows(w, i, [E, E])
        a = [t, wi] + ([rows(bias, i, [E])] if bias is not None else [])
        y = m.emit("linear", a, shape=[t.shape[0], N, E])
        y = m.emit("reshape", [y], {"shape": [t.shape[0], N * H, hd]},
                   shape=[t.shape[0], N * H, hd])
        return m.emit("transpose", [y], {"dim0": 0, "dim1": 1}, shape=[N * H, t.shape[0], hd])

    qh, kh, vh = project(q, 0), project(k, 1), project(v, 2)
    qh = m.emit("mul", [qh], {"scalar": 1.0 / math.sqrt(hd)}, shape=[N * H, L, hd])
    kt = m.emit("transpose", [kh], {"dim0": 1, "dim1": 2}, shape=[N * H, hd, S])
    scores = m.emit("bmm", [qh, kt], shape=[N * H, L, S])
    attn = m.emit("softmax", [scores], {"dim": -1}, shape=[N * H, L, S])
    o = m.emit("bmm", [attn, vh], shape=[N * H, L, hd])
    o = m.emit("transpose", [o], {"dim0": 0, "dim1": 1}, shape=[L, N * H, hd])
    o = m.emit("reshape", [o], {"shape": [L, N, E]}, shape=[L, N, E])
    op = mod.out_proj
    wo = _pref(m, op, f"{path}.out_proj", "weight")
    a = [o, wo] + ([_pref(m, op, f"{path}.out_proj", "bias")] if op.bias is not None else [])
    out = m.emit("linear", a, shape=[L, N, E])
    if mod.batch_first:
        out = m.emit("transpose", [out], {"dim0": 0, "dim1": 1}, shape=[N, L, E])
    m.rewrite(f"{what} -> linear, bmm, softmax, linear (its math)")
    return (out, None)


def mod_pool(d, kind):
    def h(m, mod, path, args, kwargs):
        what = f"nn.{type(mod).__name__}"
        x = _mod_input(m, args, kwargs, what)
        b = {k: C(getattr(mod, k, None)) for k in (
            "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices",
            "count_include_pad", "divisor_override")}
        if kind == "max":
            b.pop("count_include_pad")
            b.pop("divisor_override")
        attrs = pool_attrs(m, d, kind, b, what, _shape(x), m.shape_of(m.node))
        return m.emit(f"{kind}_pool{d}d", [x], attrs, shape=m.shape_of(m.node))
    return h


def mod_adaptive(d):
    def h(m, mod, path, args, kwargs):
        what = f"nn.{type(mod).__name__}"
        x = _mod_input(m, args, kwargs, what)
        return m.emit(f"adaptive_avg_pool{d}d", [x], {
            "output_size": adaptive_size(m, d, mod.output_size, _shape(x), what)},
            shape=m.shape_of(m.node))
    return h


def _affine(m, mod, path, x, on):
    if not on:
        return [x]
    return [x, _pref(m, mod, path, "weight"), _pref(m, mod, path, "bias")]


def mod_batch_norm(m, mod, path, args, kwargs):
    what = f"nn.{type(mod).__name__}"
    x = _mod_input(m, args, kwargs, what)
    if not mod.training and mod.track_running_stats:
        m.block("missing_attr", "batch_norm with running statistics (eval mode)", what)
    attrs = {"eps": _real(mod.eps)}
    if mod.momentum is not None:
        attrs["momentum"] = _real(mod.momentum)
    return m.emit("batch_norm", _affine(m, mod, path, x, mod.affine), attrs, shape=_shape(x))


def mod_instance_norm(d):
    def h(m, mod, path, args, kwargs):
        what = f"nn.{type(mod).__name__}"
        x = _mod_input(m, args, kwargs, what)
        xs = _shape(x)
        if xs is not None and len(xs) != d + 2:
            m.block("missing_attr", f"{what} on an unbatched input", f"input shape {xs}")
        if not mod.training and mod.track_running_stats:
            m.block("missing_attr", "instance_norm with running statistics (eval mode)", what)
        return m.emit("instance_norm", _affine(m, mod, path, x, mod.affine),
                      {"eps": _real(mod.eps)}, shape=xs)
    return h


def mod_group_norm(m, mod, path, args, kwargs):
    x = _mod_input(m, args, kwargs, "GroupNorm")
    return m.emit("group_norm", _affine(m, mod, path, x, mod.affine),
                  {"num_groups": int(mod.num_groups), "eps": _real(mod.eps)}, shape=_shape(x))


def mod_layer_norm(m, mod, path, args, kwargs):
    x = _mod_input(m, args, kwargs, "LayerNorm")
    a = [x]
    if mod.elementwise_affine:
        if getattr(mod, "bias", None) is None:
            m.block("missing_attr", "nn.LayerNorm without bias")
        a = _affine(m, mod, path, x, True)
    return m.emit("layer_norm", a, {"normalized_shape": _attr_ints(list(mod.normalized_shape)),
                                    "eps": _real(mod.eps)}, shape=_shape(x))


def mod_flatten(m, mod, path, args, kwargs):
    x = _mod_input(m, args, kwargs, "Flatten")
    return m.emit("flatten", [x], {"start_dim": mod.start_dim, "end_dim": mod.end_dim},
                 shape=m.shape_of(m.node), view=True)


def mod_unflatten(m, mod, path, args, kwargs):
    x = _mod_input(m, args, kwargs, "Unflatten")
    m.rewrite("nn.Unflatten -> reshape")
    return reshape_to(m, x, "Unflatten")


def mod_pad(m, mod, path, args, kwargs):
    name = type(mod).__name__
    x = _mod_input(m, args, kwargs, name)
    return emit_pad(m, x, mod.padding, getattr(mod, "value", 0.0), f"nn.{name}")
