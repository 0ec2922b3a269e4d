"""Functions a KernelBench problem may call that are newer than this machine's torch (Debian's
1.13), supplied as their documented math where torch lacks them, so such problems import here
too. Nothing is replaced where torch has its own. Both forms trace through them (torch.fx into
spec v1 ops, torch.jit.trace into the module), so the task is the same math either way."""
import math

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


def provide():
    """Adds what this torch lacks (once; idempotent)."""
    if not hasattr(F, "scaled_dot_product_attention"):
        F.scaled_dot_product_attention = scaled_dot_product_attention
