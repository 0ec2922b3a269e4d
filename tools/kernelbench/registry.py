"""The rule registries FUNCS, METHODS, MODULES and INPLACE_FUNCS, filled at import."""
import builtins
import operator

import torch
import torch.nn as nn

from .rules_modules import (
    _mod_gelu, mod_adaptive, mod_attention, mod_batch_norm, mod_conv, mod_flatten, mod_group_norm,
    mod_identity, mod_instance_norm, mod_layer_norm, mod_linear, mod_loss, mod_pad, mod_pool,
    mod_relu6, mod_softmax, mod_triplet, mod_unary, mod_unflatten)
from .rules_nn import (
    f_adaptive, f_batch_norm, f_conv, f_dropout, f_group_norm, f_instance_norm, f_layer_norm,
    f_normalize, f_pairwise_distance, f_pointwise_loss, f_pool, f_triplet_margin_loss, mask_compare,
    masked_fill, norm_fn, square, triangle_fn)
from .rules_pointwise import (
    _unary, _unary_attrs, argreduce_fn, binary, clamp, cumsum, h_elu, h_gelu, h_hardtanh, h_leaky,
    h_softplus, logsumexp, minmax_fn, reduce_fn, relu6, softmax_fn)
from .rules_shapes import (
    bmm, cat_fn, chunk, const_like, einsum, f_linear, f_pad, flatten, flip, getattr_fn, getitem,
    identity_method, matmul, mm, narrow, permute, reshape_to, select, size_method, split, squeeze,
    stack_fn, t_method, to_method, torch_reshape, transpose, unsqueeze, view)
from .values import _real


FUNCS, METHODS, MODULES = {}, {}, {}


INPLACE_FUNCS = set()


def _reg_fn(names, handler, what=None):
    for n in names:
        obj = operator if n.startswith("operator.") else torch
        try:
            for part in n.split(".")[1:]:
                obj = getattr(obj, part)
        except AttributeError:
            continue
        FUNCS[obj] = (handler, what or n.rsplit(".", 1)[-1])
        if n.endswith("_") and not n.startswith("operator."):
            INPLACE_FUNCS.add(obj)


def _setup():
    simple = ["relu", "sigmoid", "tanh", "silu", "mish", "hardswish", "hardsigmoid", "selu",
              "softsign", "exp", "log", "abs", "neg", "sqrt", "rsqrt"]
    for op in simple:
        h = _unary(op)
        _reg_fn([f"torch.{op}", f"torch.nn.functional.{op}", f"torch.{op}_",
                 f"torch.nn.functional.{op}_"], h, op)
        METHODS[op] = h
    for alias_name, op in (("negative", "neg"), ("special.expit", "sigmoid"),
                           ("absolute", "abs")):
        _reg_fn([f"torch.{alias_name}"], _unary(op), op)
        METHODS[alias_name.split(".")[-1]] = _unary(op)
    FUNCS[operator.neg] = (_unary("neg"), "neg")
    FUNCS[operator.abs] = (_unary("abs"), "abs")
    h = _unary_attrs("leaky_relu", "input, negative_slope=0.01, inplace=False", h_leaky)
    _reg_fn(["torch.nn.functional.leaky_relu", "torch.nn.functional.leaky_relu_"], h,
            "leaky_relu")
    METHODS["leaky_relu"] = h
    h = _unary_attrs("hardtanh", "input, min_val=-1.0, max_val=1.0, inplace=False", h_hardtanh)
    _reg_fn(["torch.nn.functional.hardtanh", "torch.nn.functional.hardtanh_"], h, "hardtanh")
    _reg_fn(["torch.nn.functional.relu6"], relu6, "relu6")
    h = _unary_attrs("elu", "input, alpha=1.0, inplace=False", h_elu)
    _reg_fn(["torch.nn.functional.elu", "torch.nn.functional.elu_"], h, "elu")
    h = _unary_attrs("softplus", "input, beta=1, threshold=20", h_softplus)
    _reg_fn(["torch.nn.functional.softplus"], h, "softplus")
    h = _unary_attrs("gelu", "input, approximate='none'", h_gelu)
    _reg_fn(["torch.nn.functional.gelu"], h, "gelu")
    for n in ("clamp", "clip", "clamp_min", "clamp_max"):
        _reg_fn([f"torch.{n}"], clamp, n if n != "clip" else "clamp")
        METHODS[n] = (lambda nn_: (lambda m, a, k, w: clamp(m, a, k, nn_)))(
            n if n != "clip" else "clamp")
    for op, names in (("add", ["torch.add", "operator.add", "operator.iadd"]),
                      ("sub", ["torch.sub", "torch.subtract", "operator.sub", "operator.isub"]),
                      ("mul", ["torch.mul", "torch.multiply", "operator.mul", "operator.imul"]),
                      ("div", ["torch.div", "torch.divide", "torch.true_divide",
                               "operator.truediv", "operator.itruediv"]),
                      ("maximum", ["torch.maximum"]), ("minimum", ["torch.minimum"]),
                      ("pow", ["torch.pow", "operator.pow", "operator.ipow"])):
        for n in names:
            _reg_fn([n], binary(op), n.rsplit(".", 1)[-1].lstrip("i")
                    if n.startswith("operator.") else n.rsplit(".", 1)[-1])
        for meth in {"add": ["add", "__add__", "__radd__"],
                     "sub": ["sub", "subtract", "__sub__"],
                     "mul": ["mul", "multiply", "__mul__", "__rmul__"],
                     "div": ["div", "divide", "true_divide", "__truediv__"],
                     "maximum": ["maximum"], "minimum": ["minimum"],
                     "pow": ["pow", "__pow__"]}[op]:
            METHODS[meth] = (lambda h_, w_: (lambda m, a, k, w: h_(m, a, k, w_)))(
                binary(op), {"add": "add", "sub": "sub", "mul": "mul", "div": "div",
                             "pow": "pow"}.get(op, op))
    # operator.add etc. are named "add" / "truediv" / "pow" / "iadd": normalize what
    for fn, what in ((operator.add, "add"), (operator.iadd, "add"), (operator.sub, "sub"),
                     (operator.isub, "sub"), (operator.mul, "mul"), (operator.imul, "mul"),
                     (operator.truediv, "div"), (operator.itruediv, "div"),
                     (operator.pow, "pow"), (operator.ipow, "pow")):
        FUNCS[fn] = (FUNCS[fn][0], what)
    FUNCS[torch.max] = (minmax_fn("max"), "max")
    FUNCS[torch.min] = (minmax_fn("min"), "min")
    METHODS["max"] = minmax_fn("max")
    METHODS["min"] = minmax_fn("min")
    for op in ("sum", "mean", "amax", "amin", "prod"):
        _reg_fn([f"torch.{op}"], reduce_fn(op), op)
        METHODS[op] = reduce_fn(op)
    for op in ("argmax", "argmin"):
        _reg_fn([f"torch.{op}"], argreduce_fn(op), op)
        METHODS[op] = argreduce_fn(op)
    _reg_fn(["torch.logsumexp"], logsumexp, "logsumexp")
    METHODS["logsumexp"] = logsumexp
    for op in ("softmax", "log_softmax"):
        _reg_fn([f"torch.{op}", f"torch.nn.functional.{op}", f"torch.special.{op}"],
                softmax_fn(op), op)
        METHODS[op] = softmax_fn(op)
    _reg_fn(["torch.cumsum"], cumsum, "cumsum")
    METHODS["cumsum"] = cumsum
    _reg_fn(["torch.matmul", "operator.matmul"], matmul, "matmul")
    METHODS["matmul"] = METHODS["__matmul__"] = matmul
    _reg_fn(["torch.mm"], mm, "mm")
    METHODS["mm"] = mm
    _reg_fn(["torch.bmm"], bmm, "bmm")
    METHODS["bmm"] = bmm
    _reg_fn(["torch.nn.functional.linear"], f_linear, "linear")
    METHODS["view"] = METHODS["reshape"] = view
    _reg_fn(["torch.reshape"], torch_reshape, "reshape")
    _reg_fn(["torch.unsqueeze"], unsqueeze, "unsqueeze")
    METHODS["unsqueeze"] = unsqueeze
    _reg_fn(["torch.squeeze"], squeeze, "squeeze")
    METHODS["squeeze"] = squeeze
    METHODS["view_as"] = METHODS["reshape_as"] = \
        lambda m, a, k, w: reshape_to(m, a[0], w)
    _reg_fn(["torch.flatten"], flatten, "flatten")
    METHODS["flatten"] = flatten
    _reg_fn(["torch.transpose", "torch.swapaxes", "torch.swapdims"], transpose, "transpose")
    METHODS["transpose"] = METHODS["swapaxes"] = METHODS["swapdims"] = transpose
    _reg_fn(["torch.t"], t_method, "t")
    METHODS["t"] = t_method
    _reg_fn(["torch.permute"], permute, "permute")
    METHODS["permute"] = permute
    METHODS["contiguous"] = METHODS["clone"] = METHODS["detach"] = identity_method
    _reg_fn(["torch.clone"], identity_method, "clone")
    for n in ("to", "float", "type_as", "type"):
        METHODS[n] = to_method
    METHODS["size"] = METHODS["dim"] = METHODS["numel"] = size_method
    FUNCS[builtins.getattr] = (getattr_fn, "getattr")
    FUNCS[operator.getitem] = (getitem, "getitem")
    _reg_fn(["torch.cat", "torch.concat", "torch.concatenate"], cat_fn, "cat")
    _reg_fn(["torch.einsum"], einsum, "einsum")
    _reg_fn(["torch.flip"], flip, "flip")
    _reg_fn(["torch.nn.functional.pad", "torch._C._nn.pad"], f_pad, "F.pad")
    METHODS["flip"] = flip
    _reg_fn(["torch.zeros_like"], const_like("zeros"), "zeros_like")
    _reg_fn(["torch.ones_like"], const_like("ones"), "ones_like")
    _reg_fn(["torch.stack"], stack_fn, "stack")
    _reg_fn(["torch.narrow"], narrow, "narrow")
    METHODS["narrow"] = narrow
    _reg_fn(["torch.select"], select, "select")
    METHODS["select"] = select
    _reg_fn(["torch.split"], split, "split")
    METHODS["split"] = split
    _reg_fn(["torch.chunk"], chunk, "chunk")
    METHODS["chunk"] = chunk
    _reg_fn(["torch.nn.functional.dropout", "torch.nn.functional.dropout2d",
             "torch.nn.functional.dropout3d", "torch.nn.functional.dropout1d",
             "torch.nn.functional.alpha_dropout"], f_dropout, "dropout")
    _reg_fn(["torch.norm"], norm_fn, "norm")
    METHODS["norm"] = norm_fn
    _reg_fn(["torch.linalg.vector_norm"], norm_fn, "vector_norm")
    _reg_fn(["torch.linalg.norm"], norm_fn, "linalg_norm")
    _reg_fn(["torch.nn.functional.normalize"], f_normalize, "normalize")
    _reg_fn(["torch.square"], square, "square")
    _reg_fn(["operator.eq", "torch.eq"], mask_compare("eq"), "eq")
    _reg_fn(["operator.ne", "torch.ne"], mask_compare("ne"), "ne")
    METHODS["eq"], METHODS["ne"] = mask_compare("eq"), mask_compare("ne")
    _reg_fn(["torch.masked_fill"], masked_fill, "masked_fill")
    METHODS["masked_fill"] = masked_fill
    for which in ("triu", "tril"):
        _reg_fn([f"torch.{which}"], triangle_fn(which), which)
        METHODS[which] = triangle_fn(which)
    for kind in ("mse", "l1", "smooth_l1", "huber"):
        _reg_fn([f"torch.nn.functional.{kind}_loss"], f_pointwise_loss(kind), f"{kind}_loss")
    _reg_fn(["torch.nn.functional.triplet_margin_loss"], f_triplet_margin_loss,
            "triplet_margin_loss")
    _reg_fn(["torch.nn.functional.pairwise_distance", "torch.pairwise_distance"],
            f_pairwise_distance, "pairwise_distance")
    METHODS["square"] = square
    for d in (1, 2, 3):
        _reg_fn([f"torch.conv{d}d", f"torch.nn.functional.conv{d}d"], f_conv(d, False),
                f"conv{d}d")
        _reg_fn([f"torch.conv_transpose{d}d", f"torch.nn.functional.conv_transpose{d}d"],
                f_conv(d, True), f"conv_transpose{d}d")
        _reg_fn([f"torch.nn.functional.max_pool{d}d", f"torch.max_pool{d}d"],
                f_pool(d, "max"), f"max_pool{d}d")
        _reg_fn([f"torch.nn.functional.avg_pool{d}d", f"torch.avg_pool{d}d"],
                f_pool(d, "avg"), f"avg_pool{d}d")
        _reg_fn([f"torch.nn.functional.adaptive_avg_pool{d}d",
                 f"torch.adaptive_avg_pool{d}d"], f_adaptive(d), f"adaptive_avg_pool{d}d")
    _reg_fn(["torch.nn.functional.batch_norm", "torch.batch_norm"], f_batch_norm, "batch_norm")
    _reg_fn(["torch.nn.functional.instance_norm"], f_instance_norm, "instance_norm")
    _reg_fn(["torch.nn.functional.group_norm"], f_group_norm, "group_norm")
    _reg_fn(["torch.nn.functional.layer_norm"], f_layer_norm, "layer_norm")

    for cls, op in ((nn.ReLU, "relu"), (nn.Sigmoid, "sigmoid"), (nn.Tanh, "tanh"),
                    (nn.SiLU, "silu"), (nn.Mish, "mish"), (nn.Hardswish, "hardswish"),
                    (nn.Hardsigmoid, "hardsigmoid"), (nn.SELU, "selu"),
                    (nn.Softsign, "softsign")):
        MODULES[cls] = mod_unary(op)
    MODULES[nn.LeakyReLU] = mod_unary("leaky_relu", lambda mod: {
        "negative_slope": _real(mod.negative_slope)})
    MODULES[nn.Hardtanh] = mod_unary("hardtanh", lambda mod: {
        "min_val": _real(mod.min_val), "max_val": _real(mod.max_val)})
    MODULES[nn.ReLU6] = mod_relu6
    for cls, kind in ((nn.MSELoss, "mse"), (nn.L1Loss, "l1"), (nn.SmoothL1Loss, "smooth_l1"),
                      (nn.HuberLoss, "huber")):
        MODULES[cls] = mod_loss(kind)
    MODULES[nn.TripletMarginLoss] = mod_triplet
    MODULES[nn.ELU] = mod_unary("elu", lambda mod: {"alpha": _real(mod.alpha)})
    MODULES[nn.Softplus] = mod_unary("softplus", lambda mod: {
        "beta": _real(mod.beta), "threshold": _real(mod.threshold)})
    MODULES[nn.GELU] = mod_unary("gelu", _mod_gelu)
    MODULES[nn.Softmax] = mod_softmax("softmax")
    MODULES[nn.LogSoftmax] = mod_softmax("log_softmax")
    for cls in (nn.Identity, nn.Dropout, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout,
                getattr(nn, "Dropout1d", nn.Dropout)):
        MODULES[cls] = mod_identity
    for d in (1, 2, 3):
        MODULES[getattr(nn, f"Conv{d}d")] = mod_conv(d, False)
        MODULES[getattr(nn, f"ConvTranspose{d}d")] = mod_conv(d, True)
        MODULES[getattr(nn, f"MaxPool{d}d")] = mod_pool(d, "max")
        MODULES[getattr(nn, f"AvgPool{d}d")] = mod_pool(d, "avg")
        MODULES[getattr(nn, f"AdaptiveAvgPool{d}d")] = mod_adaptive(d)
        MODULES[getattr(nn, f"BatchNorm{d}d")] = mod_batch_norm
        MODULES[getattr(nn, f"InstanceNorm{d}d")] = mod_instance_norm(d)
    MODULES[nn.Linear] = mod_linear
    MODULES[nn.GroupNorm] = mod_group_norm
    MODULES[nn.LayerNorm] = mod_layer_norm
    MODULES[nn.Flatten] = mod_flatten
    MODULES[nn.MultiheadAttention] = mod_attention
    for name in ("ConstantPad1d", "ConstantPad2d", "ConstantPad3d", "ZeroPad1d", "ZeroPad2d",
                 "ZeroPad3d"):
        if hasattr(nn, name):  # ZeroPad1d / 3d are newer than torch 1.13
            MODULES[getattr(nn, name)] = mod_pad
    MODULES[nn.Unflatten] = mod_unflatten


_setup()
