"""Functions a KernelBench problem may call that this machine lacks, supplied as their documented
math where they are missing, so such problems import here too: torch 2.0's
F.scaled_dot_product_attention (Debian's torch is 1.13), and einops.rearrange (Debian does not
package einops; KernelBench's Mamba2 imports it). Nothing is replaced where the real one exists.
Both forms trace through them (torch.fx into spec v1 ops, torch.jit.trace into the module: a
rearrange is a reshape and a permute), so the task is the same math either way. The ModelNew
build (submission/kernelbench_build.py) and kernel host (kernel_host/python_host.cpp) embed this
file and supply the same, so a ModelNew written from the problem's Model runs where the Model
was imported. Standard library and torch only: it runs in those sandboxed processes too."""
import importlib.util
import math
import re
import sys
import types

import torch
import torch.nn.functional as F


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None):
    """torch 2.0's F.scaled_dot_product_attention, without dropout: softmax(Q K^T * scale +
    mask) V, scale = 1 / sqrt(E) by default; a bool mask keeps where True."""
    if dropout_p:
        raise NotImplementedError("scaled_dot_product_attention with dropout_p > 0 is random")
    s = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    scores = torch.matmul(query, key.transpose(-2, -1)) * s
    if is_causal:
        n, m = query.size(-2), key.size(-2)
        keep = torch.ones(n, m, dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool \
            else scores + attn_mask
    return torch.matmul(torch.softmax(scores, dim=-1), value)


def _groups(side):
    """'b (c l) ... h' -> [['b'], ['c', 'l'], ['...'], ['h']]."""
    out, group = [], None
    for tok in re.findall(r"\(|\)|\.\.\.|\w+|\S", side):
        if tok == "(":
            if group is not None:
                raise ValueError(f"rearrange: nested parentheses in '{side}'")
            group = []
        elif tok == ")":
            if group is None:
                raise ValueError(f"rearrange: unbalanced ')' in '{side}'")
            out.append(group)
            group = None
        elif tok == "..." or re.fullmatch(r"\w+", tok):
            if group is None:
                out.append([tok])
            elif tok == "...":
                raise ValueError(f"rearrange: '...' inside parentheses in '{side}'")
            else:
                group.append(tok)
        else:
            raise ValueError(f"rearrange: unexpected '{tok}' in '{side}'")
    if group is not None:
        raise ValueError(f"rearrange: unbalanced '(' in '{side}'")
    return out


def rearrange(tensor, pattern, **sizes):
    """einops.rearrange for what splits, merges and reorders axes: 'b (c l) ... -> b c l ...'
    with l=..., 'b c l h -> b h c l'. A reshape to the elementary axes, a permute, a reshape to
    the right side's groups."""
    left, right = (_groups(part.strip()) for part in pattern.split("->"))
    names = [a for g in left for a in g if a != "..."]
    if len(set(names)) != len(names) or set(sizes) - set(names) or \
            any(not isinstance(v, int) or v < 1 for v in sizes.values()):
        raise ValueError(f"rearrange: '{pattern}' repeats an axis, or a size is not a positive "
                         "int of a left-side axis")
    shape, known, elementary, ellipsis = list(tensor.shape), dict(sizes), [], []
    fixed = sum(1 for g in left if g != ["..."])
    if len(shape) < fixed or (len(shape) != fixed and ["..."] not in left):
        raise ValueError(f"rearrange: '{pattern}' does not fit a tensor of shape {shape}")
    i = 0
    for g in left:
        if g == ["..."]:
            ellipsis = [f"...{k}" for k in range(len(shape) - fixed)]
            known.update(zip(ellipsis, shape[i:i + len(ellipsis)]))
            elementary += ellipsis
            i += len(ellipsis)
            continue
        unknown = [a for a in g if a not in known]
        part = math.prod(known[a] for a in g if a in known)
        if len(unknown) > 1 or (unknown and shape[i] % part) or (not unknown and part != shape[i]):
            raise ValueError(f"rearrange: cannot split axis {i} of size {shape[i]} as {g}")
        if unknown:
            known[unknown[0]] = shape[i] // part
        elementary += g
        i += 1
    order, out_shape = [], []
    for g in right:
        names = ellipsis if g == ["..."] else g
        order += names
        out_shape += [known[a] for a in names] if g == ["..."] else \
            [math.prod(known[a] for a in names)]
    if sorted(order) != sorted(elementary):
        raise ValueError(f"rearrange: '{pattern}' does not name the same axes on both sides")
    x = tensor.reshape([known[a] for a in elementary])
    return x.permute([elementary.index(a) for a in order]).reshape(out_shape)


def provide():
    """Adds what this machine lacks (once; idempotent)."""
    if not hasattr(F, "scaled_dot_product_attention"):
        F.scaled_dot_product_attention = scaled_dot_product_attention
    if "einops" not in sys.modules and importlib.util.find_spec("einops") is None:
        shim = types.ModuleType("einops")
        shim.__doc__ = "Kiln's importer: einops.rearrange only (tools/kernelbench/compat.py)"
        shim.rearrange = rearrange
        sys.modules["einops"] = shim
