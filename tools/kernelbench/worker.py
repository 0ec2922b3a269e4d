"""One problem in its own process: the device's limits, the form the task takes (spec v1, else
the problem's own Model as a pytorch_module reference), the size rule and the numerical check.

prob -> map (spec v1 | pytorch_module) -> size verdict -> check_problem() -> result dict (+ TOML)
"""
import math
import re
import tempfile
import time
import traceback

import torch

from kernelbench_draws import Blocked

from . import redraw
from .check import BlockedMany, check_problem, map_problem
from .module_form import map_module
from .problems import _short
from .toml_out import to_toml

# BatchNorm in training mode on one value per channel (a scaled batch of 1 at 1 x 1 spatial size)
ONE_VALUE_PER_CHANNEL = "Expected more than 1 value per channel when training"
# BatchNorm in training mode on a batch of 1 normalizes each sample by its own statistics: an
# output that then averages over the spatial dims is zero (KernelBench's L2 77), which at the
# problem's own batch it is not.
_BATCH_STATISTICS = re.compile(r"BatchNorm|batch_norm")
MAX_FORWARD_S_CPU = 15.0  # a module task whose Model's forward takes longer: too_large on cpu
FORMS = ("auto", "spec", "module")  # --form: spec v1 else module | spec v1 only | module only
# Blocker kinds no other form can help with: the problem itself does not run or is random, or
# this machine failed the check (out of memory, a crash, a timeout, kiln): a spec v1 problem must
# not become a module task because the device was busy.
FINAL_KINDS = ("level", "format", "random", "crash", "timeout", "internal", "kiln", "too_large",
               "redraw")


def prepare_device(conf):
    """Makes this worker's device current (on cuda, with TF32 off) and returns its limits:
    (share, whole, max_gflop), the MiB a problem may need beside the other jobs, the MiB it may
    need alone, and its work cap. As given, else this device's: on cpu 2 GiB either way and 16
    GFLOP (its reference BLAS runs a few GFLOP/s); on cuda no work cap, 90% of the device's memory
    alone and that shared by the jobs beside each other."""
    max_mib, max_gflop = conf["max_mib"], conf["max_gflop"]
    whole = max_mib
    dev = torch.device(conf["device"])
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        # The task's reference is exact float32 (data/reference.cpp turns TF32 off): so is this.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        if max_mib is None:
            whole = 0.9 * torch.cuda.get_device_properties(dev).total_memory / 2 ** 20
            max_mib = whole / conf["jobs"]
        if max_gflop is None:
            max_gflop = math.inf
    max_mib = 2048.0 if max_mib is None else max_mib
    return max_mib, (max_mib if whole is None else whole), (16.0 if max_gflop is None else max_gflop)


def size_verdict(need_bytes, share_mib, whole_mib):
    """"ok" within the share, "alone" past it but within what the device holds for one problem
    (checked after the others, by itself), else "too_large"."""
    mib = need_bytes / 2 ** 20
    return "ok" if mib <= share_mib else "alone" if mib <= whole_mib else "too_large"


def _shape_failure(bm):
    return len(bm.blockers) == 1 and bm.blockers[0].kind == "load" and \
        bm.blockers[0].what == "shape propagation on meta tensors failed"


def map_spec(prob, conf):
    """map_problem(); at --scale-batch < 1, when scaling broke its shapes, once more with its sizes
    equal to the batch scaled as the batch, else at its own sizes."""
    try:
        return map_problem(prob, conf)
    except BlockedMany as e:
        if conf["scale_batch"] == 1 or not _shape_failure(e):
            raise
        scaled = e.blockers[0].detail
    # KernelBench's hinge loss uses batch_size as a feature size too: scaled, its own shapes
    # disagree. Its sizes equal to the batch scale as the batch (and the others by sqrt(F));
    # failing that, it is mapped at its own sizes (then checked, or too_large, as those say).
    try:
        state, res = map_problem(prob, dict(conf, scale_sizes=True, tie_batch=True))
        res["notes"].append(f"at --scale-batch {conf['scale_batch']:g} its shapes disagree "
                            f"({scaled}): its sizes equal to batch_size scale as "
                            "the batch")
        return state, res
    except BlockedMany as tied:
        if not _shape_failure(tied):
            raise
        state, res = map_problem(prob, dict(conf, scale_batch=1))
        res["notes"].append(f"at --scale-batch {conf['scale_batch']:g} its shapes disagree "
                            f"({scaled}): sizes as given")
        return state, res


def check_sized(state, res, conf, limits):
    """The size rule, then the numerical check: sets res["status"] (and res["toml"])."""
    share_mib, whole_mib, max_gflop = limits
    fits = size_verdict(res["bytes"], share_mib, whole_mib)
    if conf["no_check"]:
        res["status"] = "mappable"
    elif fits == "alone":
        res["status"] = "too_large"  # for now: main() checks it again, alone
        res["alone"] = True
        res["blockers"] = [Blocked("too_large", "too large beside other jobs",
                                   f"tensors need {res['bytes'] / 2 ** 20:.0f} MiB, over a "
                                   f"job's share {share_mib:.0f} MiB of {conf['device']}")
                           .as_dict()]
    elif fits == "too_large":
        res["status"] = "too_large"
        res["blockers"] = [Blocked("too_large", "too large to check here",
                                   f"tensors need {res['bytes'] / 2 ** 20:.0f} MiB, over "
                                   f"--max-mib {whole_mib:.0f} on {conf['device']}").as_dict()]
    elif conf["device"] == "cpu" and res.get("forward_s", 0) > MAX_FORWARD_S_CPU:
        res["status"] = "too_large"  # a module task has no op graph to count its work from
        res["blockers"] = [Blocked("too_large", "too slow to check here",
                                   f"one forward of the Model took {res['forward_s']:.1f} s on "
                                   f"cpu, over {MAX_FORWARD_S_CPU:g} s (the check runs about "
                                   "twenty)").as_dict()]
    elif res["blas_gflop"] > max_gflop:
        res["status"] = "too_large"
        res["blockers"] = [Blocked("too_large", "too slow to check here",
                                   f"linear / matmul / bmm need {res['blas_gflop']:.1f} GFLOP per "
                                   f"forward, over --max-gflop {max_gflop:g} on {conf['device']} "
                                   "(--device cuda has no such cap)").as_dict()]
    else:
        with tempfile.TemporaryDirectory(prefix="kiln_kb_") as tmp:
            flags = check_problem(state, res, conf, tmp)
        res["degenerate"] = flags
        res["status"] = "degenerate" if flags and not conf["allow_degenerate"] else "imported"
        res["toml"] = to_toml(state["spec"])
    res["name"] = state["spec"]["name"]
    res["level"] = state["spec"]["level"]


def _attempt(fn, res):
    """Runs fn() -> (state, res); on Blocked returns (None, res with the blockers, rejected)."""
    try:
        return fn()
    except BlockedMany as bm:
        out = bm.res
        out["blockers"] = [b.as_dict() for b in bm.blockers]
    except Blocked as b:
        out = dict(res)
        out["blockers"] = res.get("blockers", []) + [b.as_dict()]
    out["status"] = "rejected"
    return None, out


def _run_form(mapper, conf, limits, res):
    state, res = _attempt(mapper, res)
    if state is None:
        return res
    try:
        check_sized(state, res, conf, limits)
    except Blocked as b:
        res["blockers"] = res.get("blockers", []) + [b.as_dict()]
        res["status"] = "rejected"
    return res


def import_problem(prob, conf, limits):
    """import_sized(); a problem degenerate under KernelBench's own draws is imported again under
    Kiln's (redraw.py), unless --keep-draws."""
    res = import_sized(prob, conf, limits)
    if res["status"] != "degenerate" or conf.get("keep_draws"):
        return res
    why = (res.get("degenerate") or ["degenerate"])[0]
    tried, outcomes = [], []
    for variant in redraw.variants_for(prob["code"]):
        if conf.get("attempt"):
            conf["attempt"](variant)  # a check of its own: --timeout starts again
        again = import_sized(prob, dict(conf, redraw=(variant, why)), limits)
        if again["status"] == "imported":
            again["redrawn"] = {"variant": variant, "why": why}
            again["notes"].append(f"degenerate under KernelBench's draws ({why}): "
                                  f"imported with {variant}" +
                                  (f" ({'; '.join(tried)} before)" if tried else ""))
            return again
        if not any(b.get("kind") == "redraw" for b in again.get("blockers", [])):
            tried.append(f"{variant}: {_outcome(again)}")
            outcomes.append(again["status"])
    if tried:
        res["notes"].append("redrawn by Kiln, still not a task: " + "; ".join(tried))
    res["redraw_outcomes"] = outcomes  # each variant that changed a draw: what it came to
    return res


def _outcome(res):
    """A result's status with its first reason, short."""
    said = (res.get("degenerate") or [b["what"] + ": " + b.get("detail", "")
                                      for b in res.get("blockers", [])] or [""])[0]
    return f"{res['status']} ({said[:160]})" if said else res["status"]


def import_sized(prob, conf, limits):
    """import_form(); at --scale-batch < 1, a problem still too large to check with its batch
    scaled is tried once more with its other sizes scaled too (by sqrt(F)), and one whose
    BatchNorm cannot train on the scaled batch of 1, or is degenerate on it, again at batch 2."""
    res = import_form(prob, conf, limits)
    if res["status"] == "rejected" and conf["scale_batch"] < 1 and "min_batch" not in conf and \
            any(ONE_VALUE_PER_CHANNEL in b.get("detail", "") for b in res["blockers"]):
        again = import_form(prob, dict(conf, min_batch=2), limits)
        again["notes"].append(f"at batch 1: {res['blockers'][0]['detail'][:160]}; batch 2")
        return again
    scaled = (res.get("scaling") or {}).get("batch_size") or {}
    if res["status"] == "degenerate" and "min_batch" not in conf and scaled.get("to") == 1 and \
            scaled.get("from", 1) > 1 and _BATCH_STATISTICS.search(prob["code"]):
        again = import_form(prob, dict(conf, min_batch=2), limits)
        if again["status"] == "imported":
            again["notes"].append("at batch 1 degenerate (BatchNorm normalizes each sample by "
                                  f"its own statistics: {(res.get('degenerate') or [''])[0][:120]}"
                                  "); batch 2")
            return again
        res["notes"].append(f"at batch 2 too: {_outcome(again)}")
    if res["status"] == "too_large" and not res.get("alone") and conf["scale_batch"] < 1 and \
            (res.get("scaling") or {}).get("batch_size"):
        again = import_form(prob, dict(conf, scale_sizes=True), limits)
        if again["status"] in ("imported", "degenerate"):
            return again
        res["notes"].append(f"with its other sizes scaled too: {again['status']} "
                            f"({'; '.join(b['what'] for b in again['blockers'][:2])})")
    return res


def import_form(prob, conf, limits):
    """The problem as a task: spec v1 when it can say it exactly (unless --form module), else
    (unless --form spec) its own Model as the reference; the result says which form and why."""
    base = {"source": prob["source"], "name": prob["name"], "level": prob["level"],
            "status": "rejected", "blockers": [], "rewrites": [], "notes": []}
    why = []
    if conf["form"] != "module":
        res = _run_form(lambda: map_spec(prob, conf), conf, limits, dict(base))
        res["form"] = "spec_v1"
        if res["status"] != "rejected" or conf["form"] == "spec" or \
                any(b["kind"] in FINAL_KINDS or "out of memory" in b.get("detail", "").lower()
                    for b in res["blockers"]):
            return res
        why = res["blockers"]
    else:
        why = [{"kind": "form", "what": "--form module", "detail": "every problem as its Model"}]
    mod = _run_form(lambda: map_module(prob, conf, why), conf, limits, dict(base))
    mod["form"] = "pytorch_module"
    mod["not_spec_v1"] = why
    return mod


def worker_main(prob, conf, conn):
    """One problem in its own process; sends {"attempt": variant} as each redraw starts (its own
    --timeout), then the result dict."""
    torch.set_num_threads(conf["threads"])
    t0 = time.perf_counter()
    try:
        started = dict(conf, attempt=lambda what: conn.send({"attempt": what}))
        res = import_problem(prob, started, prepare_device(conf))
    except Exception as e:
        res = {"source": prob["source"], "name": prob["name"], "level": prob["level"],
               "status": "rejected", "rewrites": [], "notes": [],
               "blockers": [{"kind": "internal", "what": "importer error", "detail": _short(e)}],
               "traceback": traceback.format_exc()}
    res["seconds"] = round(time.perf_counter() - t0, 2)
    conn.send(res)
    conn.close()
