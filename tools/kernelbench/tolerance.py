"""float32 against float64, and the zeros rule: the tolerance a task needs, and whether zeros, a
constant or a copied input would pass it.

Model outputs (float32) + the float64 forward -> gap, atol window -> degeneracy flags

Element-wise work runs a slice at a time, so an output of 1.6 G elements (KernelBench level 1 at its
own sizes) never needs a float64 copy of itself, and the float64 forward falls back to the cpu when
the device cannot hold it: the check then costs time, not a refusal.
"""
import copy
import math

import torch

from kernelbench_draws import Blocked
from torch_baselines import slices  # the float64 slices torch_baselines' digest works in

from .problems import _short

ZERO_SHARE_LIMIT = 0.99  # an all-zeros output within tolerance on more than this share: degenerate
ATOL_MARGIN = 4.0  # a task atol holds this many times the float32 / float64 gap (2: each side
# rounds its own way; 2 more: other draws than the one measured)
STEPS = [float(f"{m}e{e}") for e in range(-12, 0) for m in (1, 2, 5)]  # 1-2-5 atol steps
QUANTILE_SAMPLE = 1 << 24  # |y|'s quantile from at most this many evenly spaced elements


def _max(values):
    """The largest of the slices' maxima; NaN if any is (Python's max() would drop one that is
    not first)."""
    values = list(values)
    return math.nan if any(math.isnan(v) for v in values) else max(values)


def abs_quantile(y, q):
    """The q-quantile of |y|: exact up to QUANTILE_SAMPLE elements, past that over an evenly
    spaced sample of them (deterministic; a heuristic's cap needs no more)."""
    flat = y.reshape(-1)
    step = max(1, -(-flat.numel() // QUANTILE_SAMPLE))
    mag = flat[::step].double().abs()
    return mag.kthvalue(max(1, int(q * mag.numel()))).values.item()


def _float_outputs(state, ys32, ys64):
    for name, a, b in zip(state["spec"]["outputs"], ys32, ys64):
        if name not in state["index"] and a.is_floating_point():
            yield name, a, b


def atol_window(state, ys32, ys64, rtol):
    """(need, cap): the atol float32 rounding needs (ATOL_MARGIN x the float32 / float64 gap,
    less rtol |y|, over every element) and the largest one that still tells zeros from the
    answer (half the 90th percentile of |y|, times 1 - rtol: zeros then miss on at least a tenth of
    the elements), over all float outputs. None when an output is empty or not finite."""
    need, cap = 0.0, math.inf
    for _, a, b in _float_outputs(state, ys32, ys64):
        if not a.numel():
            return None
        worst = _max((ATOL_MARGIN * (x - y).abs() - rtol * y.abs()).max().item()
                     for x, y in slices(a, b))
        q90 = abs_quantile(a, 0.9)
        if not math.isfinite(worst) or not math.isfinite(q90):
            return None
        need, cap = max(need, worst), min(cap, q90 * (1 - rtol) / 2)
    return need, cap


def float64_outputs(model, run, tensors, res, tries=None):
    """The Model's forward in float64 on the same tensors (flattened outputs), or None (noted).
    run(model, args) calls it. tries: the devices in order, by default the inputs' and, if that
    runs out of memory, the cpu."""
    if tries is None:
        device = next((t.device for t in list(tensors) + list(model.parameters())),
                      torch.device("cpu"))
        tries = [device] + ([torch.device("cpu")] if device.type != "cpu" else [])
    for dev in tries:
        saved = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)  # tensors the forward makes itself
        try:
            model64 = copy.deepcopy(model).to(device=dev, dtype=torch.float64)
            for mod in model64.modules():  # plain tensor attributes (an RNN's h0) too
                for k, v in list(vars(mod).items()):
                    if isinstance(v, torch.Tensor) and v.is_floating_point():
                        setattr(mod, k, v.to(dev, torch.float64))
            args = [x.to(dev, torch.float64) if x.is_floating_point() else x.to(dev)
                    for x in tensors]
            return run(model64, args)
        except Exception as e:
            if "out of memory" in str(e).lower() and dev != tries[-1]:
                res["notes"].append("float64 forward out of device memory: run on the cpu")
                continue
            res["notes"].append(f"float64 forward fails ({_short(e)}): float32 rounding not "
                                "measured")
            return None
        finally:
            torch.set_default_dtype(saved)
            model64 = args = None
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    return None


def float32_tolerance(state, ys32, ys64, default, res):
    """The task's tolerance when float32 itself cannot meet the default: PyTorch's float32 forward
    against its float64 forward. A correct float32 program differs from the float32 reference by
    up to about twice that gap (each side rounds its own way), so the tolerance must hold 2x the
    gap; past KernelBench's own 1e-2 the problem is refused as ill-conditioned."""
    if default != (1e-4, 1e-4) or ys64 is None:
        return None
    worst, where = 0.0, None
    for name, a, b in _float_outputs(state, ys32, ys64):
        need = _max((2 * (x - y).abs() / (1 + y.abs())).max().item() for x, y in slices(a, b)) \
            if a.numel() else 0.0
        if not math.isfinite(need) or need > worst:
            worst, where = (need if math.isfinite(need) else math.inf), name
    res["float32_gap"] = worst / 2
    if worst <= default[0]:
        return None
    tol = next((t for t in (1e-3, 1e-2) if worst <= t), None)
    detail = (f"output '{where}': float32 vs float64 forward differ by up to {worst / 2:.2g} of "
              f"1 + |y|")
    if tol is None:
        raise Blocked("check", "ill-conditioned in float32",
                      detail + "; a float32 program needs twice that, past 1e-2")
    res["rewrites"].append(f"tolerance 1e-4 -> {tol:g}: {detail}")
    return tol


def degeneracy(spec, outs, inputs, atol, rtol, row, index):
    """Why zeros or a copied input would pass this task at (atol, rtol), with Kiln's own verdict
    (row: its validate row) first; [] when neither would."""
    flags = []
    verdict = row.get("verdict") or ""
    if verdict.startswith("degenerate"):
        flags.append("kiln: " + verdict)
    for name, y in zip(spec["outputs"], outs):
        if name in index or not y.is_floating_point():
            continue
        n = y.numel()
        zero_ok = sum(int((v.abs() <= atol + rtol * v.abs()).sum()) for (v,) in slices(y))
        share = zero_ok / n if n else 1.0
        if share > ZERO_SHARE_LIMIT:
            flags.append(f"output '{name}': an all-zeros output is within tolerance on "
                         f"{100 * share:.2f}% of its elements")
        for iname, x in inputs.items():
            if list(x.shape) == list(y.shape) and all(
                    bool(((u - v).abs() <= atol + rtol * v.abs()).all())
                    for v, u in slices(y, x)):
                flags.append(f"output '{name}': copying input '{iname}' passes (the task is "
                             "the identity on these inputs)")
    return flags
