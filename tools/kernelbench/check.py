"""One problem: mapping it, checking it numerically against Kiln, degeneracy, the worker."""
import copy
import math
import os
import re
import subprocess
import time

import torch
import torch.fx as fx

import torch_baselines as tb
from kernelbench_draws import Blocked, INPUT_KEYS, Recorder, describe_init, input_init

from . import redraw
from .mapper import Mapper
from .problems import _short, describe_scaling, exec_for, short_source
from .tolerance import (ATOL_MARGIN, STEPS, atol_window, degeneracy, float32_tolerance,
                        float64_outputs)
from .toml_out import to_toml
from .tracing import Tracer, blas_gflop, make_wrapper, prune, spec_bytes, spec_peak_bytes
from .values import T


DIGEST_SAMPLES = 256
KILN_MAX_OPS = 4096       # data/task_check.hpp check_limits::max_ops


def describe_all(model, rec):
    """path -> describe_init() for every parameter and buffer, before anything moves."""
    out = {}
    for mname, mod in model.named_modules():
        for k, t in list(mod._parameters.items()) + list(mod._buffers.items()):
            if t is not None:
                out[f"{mname}.{k}" if mname else k] = describe_init(t, rec)
    return out


def build_model(ns, init_items, meta):
    """Model(*get_init_inputs()), its factories making meta tensors when meta=True."""
    torch.manual_seed(0)
    with Recorder(meta=meta, inits=True) as rec:
        model = ns["Model"](*copy.deepcopy(init_items))
    return model, rec


def trace(model, items, shapes):
    """The wrapper (get_inputs()'s non-tensors bound as constants) of a meta model, traced
    with meta values."""
    wrapper, tensor_names = make_wrapper(model, items)
    metas = {n: torch.empty(s, device="meta") for n, s in zip(tensor_names, shapes)}
    tracer = Tracer(metas)
    try:
        graph = tracer.trace(wrapper)
    except Exception as e:
        b = _trace_blocker(e)
        if tracer.meta_errors and b.kind == "trace":
            b.detail += f" (after a meta value failed: {tracer.meta_errors[0]})"
        raise b
    gm = fx.GraphModule(wrapper, graph)
    env = {n: n.meta.get("kiln_meta") for n in gm.graph.nodes}
    return gm, env, tensor_names, tracer.meta_errors


def rebind(meta_gm, model, items, device="cpu"):
    """The traced graph over the real model: a GraphModule whose modules and parameters are
    the real model's (constants tracing made are copied over, onto the model's device)."""
    wrapper, _ = make_wrapper(model, items)
    for n in meta_gm.graph.nodes:
        if n.op == "get_attr":
            try:
                _resolve(wrapper, n.target)
            except AttributeError:
                const = _resolve(meta_gm, n.target)
                setattr(wrapper, n.target,
                        const.to(device) if isinstance(const, torch.Tensor) else const)
    graph = fx.Graph()
    out = graph.graph_copy(meta_gm.graph, {})
    graph.output(out)
    return fx.GraphModule(wrapper, graph)


def _trace_blocker(e):
    m = re.search(r"module '([\w.]+)' has no attribute '(\w+)'", str(e))
    if isinstance(e, AttributeError) and m:
        mod = re.sub(r"^torch\.nn\.functional$", "F", m[1])
        return Blocked("missing_op", f"{mod}.{m[2]}",
                       f"not in Kiln, nor in this torch {torch.__version__}")
    return Blocked("trace", "torch.fx cannot trace Model.forward", _short(e))


def map_problem(prob, conf):
    """Run, trace and map one problem (model on meta tensors: no size costs anything).
    Returns (state, res); raises Blocked / BlockedMany."""
    res = {"source": prob["source"], "name": prob["name"], "level": prob["level"],
           "status": "rejected", "blockers": [], "rewrites": [], "notes": []}
    level = prob["level"]
    if level is not None and not 1 <= level <= 3:
        raise Blocked("level", f"level {level}", "Kiln's levels are 1, 2 and 3")
    torch.manual_seed(0)
    ns, scaling, source = exec_for(prob, conf, res)
    try:
        init_items = list(ns["get_init_inputs"]())
    except Exception as e:
        raise Blocked("load", "get_init_inputs() fails here", _short(e))
    try:
        with Recorder(meta=True) as irec:
            items = list(ns["get_inputs"]())
    except Blocked:
        raise
    except Exception as e:
        raise Blocked("load", "get_inputs() fails here", _short(e))
    try:
        model, prec = build_model(ns, init_items, meta=True)
        built = "meta"
    except Exception as e_meta:
        try:
            model, prec = build_model(ns, init_items, meta=False)
            built = f"cpu (on meta: {_short(e_meta)})"
        except Exception as e:
            raise Blocked("load", "Model(*get_init_inputs()) fails here", _short(e))
    res["built"] = built
    inits = describe_all(model, prec)
    if built != "meta":
        model.to("meta")
    blockers, inputs, tensor_items = [], [], [x for x in items if isinstance(x, torch.Tensor)]
    if not tensor_items:
        raise Blocked("format", "get_inputs() returns no tensor")
    gm, env, tensor_names, meta_errors = trace(model, items, [list(x.shape) for x in tensor_items])
    input_rewrites, bool_inputs = [], set()
    for i, (name, item) in enumerate(zip(tensor_names, tensor_items)):
        if item.dtype == torch.bool:
            bool_inputs.add(name)
        try:
            decl = input_init(item, irec, f"input {i} ('{name}')")
        except Blocked as b:
            blockers.append(b)
            decl = {"init": "?"}
        if "rewrite" in decl:
            input_rewrites.append(decl.pop("rewrite"))
        inputs.append(dict(name=name, shape=list(item.shape), **decl))
    if meta_errors:
        res["notes"].append("no meta value for: " + "; ".join(meta_errors[:3]))
    m = Mapper(gm, env, inits, "m.")
    for r in input_rewrites:
        m.rewrite(r)
    placeholders = {}
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            d = inputs[len(placeholders)]
            m.names.add(d["name"])
            placeholders[n.target] = T(d["name"], d["shape"])
    outs = m.run(placeholders)
    blockers += m.blockers
    res["rewrites"] = m.rewrites
    if not blockers and meta_errors and any(env.get(n) is None for n in gm.graph.nodes
                                            if n.op not in ("output",)):
        blockers.append(Blocked("load", "shape propagation on meta tensors failed",
                                meta_errors[0]))
    if blockers:
        raise BlockedMany(blockers, res)
    ops, needed = prune(m.ops, outs)
    if len(ops) > conf["max_ops"]:
        raise Blocked("limit", f"more than {conf['max_ops']} ops",
                      f"{len(ops)} ops (--max-ops; kiln's default: {KILN_MAX_OPS})")
    for p in m.params:  # bias_uniform needs its weight declared
        if p["name"] in needed and p.get("of"):
            needed.add(p["of"])
    params = [p for p in m.params if p["name"] in needed]
    redrawn, redrawn_params, seed = redraw.apply(conf.get("redraw"), inputs, params,
                                                 bool_inputs)
    if level is None:
        level = 1 if len(ops) == 1 else 2
        res["level"] = level
        res["notes"].append(f"level inferred ({level}) from the op count")
        res["name"] = f"kb_l{level}_" + prob["name"][3:]  # prob's own stays: forms retry
    desc = f"KernelBench {short_source(prob['source'])}"
    desc += describe_scaling(scaling, conf["scale_batch"]) + redrawn
    desc += f"; imported by tools/kernelbench_import.py (source sha1 {_sha1(prob['code'])[:12]})"
    if m.rewrites:
        desc += "; rewrites: " + "; ".join(m.rewrites)
    kb, kb_blockers = kernelbench_table(source, init_items, items, tensor_names, bool_inputs,
                                        params, m.param_paths, model)
    if kb_blockers:
        raise BlockedMany(kb_blockers, res)
    spec = {"name": res["name"], "level": level, "dtype": "float32", "description": desc,
            "outputs": outs, "inputs": [{k: v for k, v in d.items() if k in INPUT_KEYS}
                                        for d in inputs],
            "params": params, "ops": ops, "kernelbench": kb}
    if seed is not None:
        spec["param_seed"] = seed
    shapes_by_value = {}
    for v in m.val.values():
        if isinstance(v, T) and v.shape is not None:
            shapes_by_value.setdefault(v.name, v.shape)
    res["ops"] = len(ops)
    res["bytes"] = spec_bytes(spec, shapes_by_value)
    res["peak_bytes"] = spec_peak_bytes(spec, shapes_by_value)
    res["blas_gflop"] = blas_gflop(spec, dict(shapes_by_value))
    res["shapes"] = {"inputs": [d["shape"] for d in inputs],
                     "outputs": [shapes_by_value.get(o) for o in outs]}
    state = {"bool_inputs": bool_inputs,
             "spec": spec, "ns": ns, "init_items": init_items, "items": items, "gm": gm,
             "tensor_names": tensor_names, "param_paths": m.param_paths,
             "const_params": m.const_params, "index": m.index_values,
             "redrawn_params": redrawn_params}
    return state, res


def _plain(v, what):
    """v as a TOML / JSON value (bool, int, float, str, lists of them; a tuple as a list), or
    Blocked naming it."""
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and -2 ** 63 <= v < 2 ** 63:
        return int(v)
    if isinstance(v, float) and math.isfinite(v):  # nan / inf: no JSON, and nan != nan
        return float(v)
    if isinstance(v, str):
        return str(v)
    if isinstance(v, (list, tuple)):
        return [_plain(x, f"{what}[{i}]") for i, x in enumerate(v)]
    shown = "a tensor" if isinstance(v, torch.Tensor) else f"{type(v).__name__} {v!r}"[:120]
    raise Blocked("load", "a value the [kernelbench] table cannot hold", f"{what}: {shown}")


def kernelbench_table(source, init_items, items, tensor_names, bool_inputs, params, param_paths,
                      model, attributes=()):
    """The [kernelbench] table: what running a KernelBench ModelNew against the task needs (the
    source as run, Model's init arguments, forward's arguments by task input, and the Model's
    state_dict key each task param is loaded into). Returns (table, blockers): a param a rewrite
    made (a tensor made in forward, triu(x)'s mask) has no key and is left out (a ModelNew makes
    its own); one at a path in `attributes` (a random plain tensor the Model draws in __init__)
    is given by that path; one the Model holds otherwise outside its state_dict (a non-persistent
    buffer) refuses the problem, since a ModelNew could not be given it."""
    blockers = []

    def plain(v, what):
        try:
            return _plain(v, what)
        except Blocked as b:
            blockers.append(b)

    init_inputs = [plain(v, f"get_init_inputs() item {i}") for i, v in enumerate(init_items)]
    names = iter(tensor_names)  # the task inputs, in get_inputs()'s order of its tensors
    forward = [{"input": next(names)} if isinstance(x, torch.Tensor)
               else {"value": plain(x, f"get_inputs() item {i}")} for i, x in enumerate(items)]
    keys = list(model.state_dict().keys())
    state_dict, by_attribute = {}, {}
    for p in params:
        path = param_paths.get(p["name"])
        if path is None:  # a ones / zeros / triangle mask a rewrite made: ModelNew makes its own
            continue
        if path in attributes:
            by_attribute[p["name"]] = path
        elif path not in keys:
            blockers.append(Blocked("load", "a param that is not in the Model's state_dict",
                                    f"param '{p['name']}' is Model.{path} (a non-persistent "
                                    "buffer or a plain tensor attribute)"))
        else:
            state_dict[p["name"]] = path
    table = {"source": source, "init_inputs": init_inputs, "forward": forward,
             "bool_inputs": [n for n in tensor_names if n in bool_inputs],
             "state_dict": state_dict, "model_keys": keys}
    if by_attribute:
        table["attributes"] = by_attribute
    return table, blockers


class BlockedMany(Exception):
    def __init__(self, blockers, res):
        super().__init__("; ".join(str(b) for b in blockers))
        self.blockers, self.res = blockers, res


def _sha1(text):
    import hashlib
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def kiln_validate(kiln, threads, path, rows_path, max_ops, device):
    cmd = [kiln, "--threads", str(threads), "--log-level", "warn", "tasks", "validate",
           "--device", device, "--json", rows_path, "--digest", str(DIGEST_SAMPLES),
           "--timing-runs", "1", "--max-ops", str(max_ops), path]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise Blocked("kiln", "cannot run kiln", f"{kiln}: {e.strerror}")
    said = [re.sub(r"^\[?[\d:. -]+\]? ?(\[?(error|warning)\]?:? )?", "", l)
            for l in (p.stdout + p.stderr).splitlines() if l.strip()]
    rows = tb.read_rows(rows_path) if os.path.exists(rows_path) else []
    return p.returncode, rows, said


def check_problem(state, res, conf, tmp):
    """Kiln's reference vs the original Model and the traced GraphModule, same tensors."""
    spec = state["spec"]
    path = os.path.join(tmp, spec["name"] + ".toml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(to_toml(spec))
    rows_path = os.path.join(tmp, "rows.jsonl")
    t0 = time.perf_counter()
    rc, rows, said = kiln_validate(conf["kiln"], conf["threads"], path, rows_path,
                                   conf["max_ops"], conf["device"])
    res["kiln_s"] = round(time.perf_counter() - t0, 2)
    row = next((r for r in rows if r.get("name") == spec["name"]), None)
    if rc not in (0, 1):
        raise Blocked("kiln", f"kiln exited {rc}", " | ".join(said[-3:]))
    if row is None:
        msg = next((s for s in said if spec["name"] in s or path in s), " | ".join(said[-3:]))
        msg = msg.replace(path + ": ", "")
        raise Blocked("kiln", "kiln rejects the task", msg)
    res["kiln_verdict"] = row.get("verdict")
    if row.get("warning"):
        res["notes"].append(f"kiln: {row['warning']}")
    if "digest" not in row:
        raise Blocked("kiln", "kiln's reference fails", row.get("verdict", ""))
    dev = torch.device(conf["device"])
    model, _ = build_model(state["ns"], state["init_items"], meta=False)
    model.to(dev)
    # spec v1: the traced GraphModule too (what was mapped); a pytorch_module task: the Model only
    gm = state["gm"] and rebind(state["gm"], model, state["items"], dev)
    real = {}
    for d in spec["params"]:
        if d["name"] in state["param_paths"]:
            t = _resolve(model, state["param_paths"][d["name"]])
            if list(t.shape) != d["shape"]:
                raise Blocked("check", "param shape differs on the real model", d["name"])
            if d["name"] not in state["redrawn_params"]:  # else no longer the Model's init
                Mapper.sanity(t, d, state["param_paths"][d["name"]])
            real[d["name"]] = t
    task = {"name": spec["name"], "origin": path, "spec": spec}
    src, (atol, rtol) = tb.generate(task)
    mod = tb.load_module({"filename": f"<kiln task {spec['name']}>", "source": src,
                          "name": spec["name"]})
    dig = row["digest"]
    with torch.no_grad():
        params = mod["make_params"](dev)
        inputs = mod["make_inputs"](dev, dig.get("input_seed", tb.INPUT_SEED))
        for kind, values, decls in (("params", params, spec["params"]),
                                    ("inputs", inputs, spec["inputs"])):
            for d, v, ref in zip(decls, values, dig[kind]):
                why = tb.compare(tb.digest(v, len(ref["samples"])), ref, 0.0, 1e-6, False)
                if why:
                    raise Blocked("check", "redrawn tensors differ from Kiln's",
                                  f"{kind[:-1]} '{d['name']}': {why}")
        for d, v in zip(spec["params"], params):
            if d["name"] in real:
                real[d["name"]].data.copy_(v)
        by_name = dict(zip([d["name"] for d in spec["inputs"]], inputs))
        # bool masks were drawn by Kiln as float 0 / 1 (bool_mask_init): bool again for PyTorch
        tensors = [by_name[n].bool() if n in state["bool_inputs"] else
                   by_name[n].long() if n in state.get("int64_inputs", ()) else by_name[n]
                   for n in state["tensor_names"]]
        outs = {}
        t0 = time.perf_counter()
        runs = [("Model", lambda: model(*_model_args(state, tensors)))]
        if gm is not None:
            runs.append(("traced GraphModule", lambda: gm(*[x.clone() for x in tensors])))
        for who, fn in runs:
            try:
                y = fn()
            except Exception as e:
                raise Blocked("check", f"the {who} fails on Kiln's tensors", _short(e))
            ys = flat_outputs(y)
            if len(ys) != len(dig["outputs"]):
                raise Blocked("check", "output count differs",
                              f"{who} {len(ys)}, Kiln {len(dig['outputs'])}")
            for name, yy, ref in zip(spec["outputs"], ys, dig["outputs"]):
                if not isinstance(yy, torch.Tensor):
                    raise Blocked("check", f"{who} output is not a tensor", name)
                why = tb.compare(tb.digest(yy.contiguous(), len(ref["samples"])), ref, atol,
                                 rtol, name in state["index"])
                if why:
                    raise Blocked("check", "numerical mismatch", f"{who} output '{name}': {why}")
            outs[who] = ys
        res["torch_s"] = round(time.perf_counter() - t0, 2)
        res["check"] = "ok"
        outs.pop("traced GraphModule", None)
        gm = params = ys = y = yy = None  # device memory for the float64 forward
        ys64 = float64_outputs(model, lambda m, args: flat_outputs(m(*_model_args(state, args))),
                               tensors, res)
        if ys64 is not None and sum(y.numel() for y in ys64) * 8 > 2 ** 30:
            ys64 = [y.cpu() for y in ys64]  # device memory for Kiln's validate; compared a slice
            # at a time
        tol = float32_tolerance(state, outs["Model"], ys64, (atol, rtol), res)
        if tol is not None:
            spec["tolerance"] = {"atol": tol, "rtol": tol}
            atol = rtol = tol
            # Kiln's own degeneracy verdict (constant, same across seeds) at the new tolerance
            row = revalidate(spec, conf, tmp, "loose")
        flags = degeneracy(spec, outs["Model"], by_name, atol, rtol, row, state["index"])
        if flags and ys64 is not None:
            flags = retolerance(state, res, conf, tmp, outs["Model"], ys64, by_name, (atol, rtol),
                                flags)
    return flags


def revalidate(spec, conf, tmp, tag):
    """`kiln tasks validate --digest` on the spec as it is now; its row, or Blocked."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # Kiln's validate runs beside this process, on the same device
    path = os.path.join(tmp, f"{spec['name']}.{tag}.toml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(to_toml(spec))
    rc, rows, said = kiln_validate(conf["kiln"], conf["threads"], path,
                                   os.path.join(tmp, f"rows.{tag}.jsonl"), conf["max_ops"],
                                   conf["device"])
    row = next((r for r in rows if r.get("name") == spec["name"]), None)
    if row is None or "digest" not in row:
        raise Blocked("kiln", "kiln rejects the task at its new tolerance",
                      " | ".join(said[-2:]) if row is None else row.get("verdict", ""))
    return row


def retolerance(state, res, conf, tmp, ys32, ys64, by_name, tol, flags):
    """A task zeros, a constant or a copied input would pass at its tolerance gets a tighter
    atol where float32 allows one that still tells zeros from the answer: the loosest 1-2-5 step
    in atol_window() (loosest: the least a correct kernel summing in another order can miss by).
    Kiln validates it again; the Model must still match Kiln's reference and the degeneracy rules
    must pass at it. Returns the flags left (none: re-toleranced)."""
    atol, rtol = tol
    window = atol_window(state, ys32, ys64, rtol)
    fits = [a for a in STEPS if window and window[0] <= a <= window[1] and a < atol]
    if not fits:
        res["notes"].append("no tighter tolerance helps: " + (
            "float32 rounding not measured" if window is None else
            f"float32 rounding needs atol >= {window[0]:.2g}, zeros pass unless atol <= "
            f"{window[1]:.2g} (rtol {rtol:g})"))
        return flags
    new = fits[-1]
    spec = dict(state["spec"], tolerance={"atol": new, "rtol": rtol})
    try:
        row = revalidate(spec, conf, tmp, "tight")
    except Blocked as b:
        res["notes"].append(f"at atol {new:g}: {b}")
        return flags
    for name, y, ref in zip(spec["outputs"], ys32, row["digest"]["outputs"]):
        why = tb.compare(tb.digest(y.contiguous(), len(ref["samples"])), ref, new, rtol,
                         name in state["index"])
        if why:
            res["notes"].append(f"at atol {new:g} the Model misses Kiln's reference: {why}")
            return flags
    left = degeneracy(spec, ys32, by_name, new, rtol, row, state["index"])
    if left:
        res["notes"].append(f"at atol {new:g} still: {left[0]}")
        return flags
    state["spec"]["tolerance"] = spec["tolerance"]
    res["rewrites"].append(f"tolerance atol {atol:g} -> {new:g}: at {atol:g}, {flags[0]}; "
                           f"float32 rounding needs >= {window[0]:.2g} ({ATOL_MARGIN:g}x its gap "
                           f"to float64), zeros fail at <= {window[1]:.2g}")
    return []


def flat_outputs(y):
    """A forward's outputs as a list, nested tuples and lists flattened in order (a spec v1 task's
    outputs are the top level; a pytorch_module task's are the flattened ones)."""
    if isinstance(y, (list, tuple)):
        return [t for e in y for t in flat_outputs(e)]
    return [y]


def _resolve(root, path):
    obj = root
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _model_args(state, tensors):
    it = iter(x.clone() for x in tensors)
    return [next(it) if isinstance(item, torch.Tensor) else item for item in state["items"]]
