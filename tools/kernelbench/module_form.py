"""The PyTorch-module form: a problem spec v1 cannot say, as a task whose reference is the problem's
own Model (op pytorch_module), traced to TorchScript with the task's params left as placeholders.

problem -> Model built twice (seeds 0, 1) -> params: the state_dict tensors Kiln can draw (those it
cannot must be the same on both builds: a submission's Model makes them itself) -> torch.jit.trace
-> the task (one pytorch_module op per output) -> check_problem() as for spec v1, against the Model.
"""
import base64
import copy
import io
import time
import warnings

import torch
import torch.nn as nn

from kernelbench_draws import INPUT_KEYS, Blocked, Recorder, describe_init, factory_init, input_init

from . import redraw
from .check import build_model, describe_all, flat_outputs, kernelbench_table
from .mapper import Mapper
from .problems import _short, describe_scaling, exec_for, short_source
from .tracing import make_wrapper
from .values import ParamRef

PREFIX = "m."  # the traced wrapper holds the Model as `m`: its state_dict keys are "m.<key>"


def flatten(y):
    """The Model's output as a flat list of tensors (tuples and lists in order), or Blocked."""
    ys = flat_outputs(y)
    for k, t in enumerate(ys):
        if not isinstance(t, torch.Tensor):
            raise Blocked("module", "forward returns something other than tensors",
                          f"output {k} is {type(t).__name__}")
    return ys


def model_args(items, tensors, casts):
    """Model.forward's arguments: get_inputs()'s items with its tensors replaced by `tensors`
    (float32, as Kiln draws every input), each cast to what the Model takes (casts[k]: None, bool
    or int64)."""
    it = iter(zip(tensors, casts))
    out = []
    for x in items:
        if not isinstance(x, torch.Tensor):
            out.append(x)
            continue
        t, cast = next(it)
        out.append(t if cast is None else t != 0 if cast == torch.bool else t.to(cast))
    return out


def flat_wrapper(model, items, casts, fresh=()):
    """A module whose forward takes get_inputs()'s tensors as Kiln gives them (float32; the other
    items bound as constants), casts them as the Model takes them and returns its outputs
    flattened: what torch.jit.trace can record. fresh: attribute paths the forward writes (its
    state, never read across calls): each call works on a copy, so no call writes into a task
    param that every call, and every thread, shares."""

    class Flat(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, *tensors):
            for path in fresh:
                mod, leaf = _parent(self.m, path)
                setattr(mod, leaf, getattr(mod, leaf).clone())
            return tuple(flat_outputs(self.m(*model_args(items, tensors, casts))))

    return Flat()


def _tensor_attrs(model, plain_only=False):
    """Tensors a module holds outside its state_dict (non-persistent buffers and, or only, plain
    attributes): torch.jit.trace bakes them in, so they must not be random unless the task gives
    them (a plain attribute: [kernelbench] attributes)."""
    out = {}
    keys = set(model.state_dict().keys())
    for mname, mod in model.named_modules():
        buffers = [] if plain_only else list(mod._buffers.items())
        for k, v in buffers + [(k, v) for k, v in vars(mod).items()
                               if isinstance(v, torch.Tensor)]:
            path = f"{mname}.{k}" if mname else k
            if isinstance(v, torch.Tensor) and path not in keys:
                out[path] = v
    return out


def _parent(root, path):
    """(module, attribute name) of a dotted path."""
    *mods, leaf = path.split(".")
    for part in mods:
        root = getattr(root, part)
    return root, leaf


def set_attrs(dst, src, paths):
    """dst's plain tensor attributes at `paths` made copies of src's."""
    for path in paths:
        mod, leaf = _parent(dst, path)
        setattr(mod, leaf, getattr(*_parent(src, path)).detach().clone())


def as_buffers(model, paths):
    """model with the plain tensor attributes at `paths` registered as buffers, so a trace keeps
    them as the module's tensors (settable, as params are) rather than as constants."""
    for path in paths:
        mod, leaf = _parent(model, path)
        value = getattr(mod, leaf)
        delattr(mod, leaf)
        mod.register_buffer(leaf, value)
    return model


def _same(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a.cpu(), b.cpu()))


def _sibling_weight(key, state):
    """`X.bias` -> the ParamRef of `X.weight` (bias_uniform's `of`), if the module has one."""
    if not key.endswith(".bias") and key != "bias":
        return None
    w = key[:-len("bias")] + "weight"
    t = state.get(w)
    return ParamRef(w, t) if t is not None and t.dim() >= 2 else None


def declare_params(model, twin, inits, input_names):
    """Task params for the Model's float32 parameters (its state_dict entries that are
    nn.Parameters, tied ones under each key) and for its random plain tensor attributes (an RNN's
    h0 drawn in __init__: a submission is given them by attribute path). Returns (Mapper with the
    params, [(state_dict key, param name)], [(attribute path, param name)], notes). Everything
    else stays in the module as the Model makes it, and must be the same on both builds: a
    parameter Kiln cannot draw, and every buffer (a BatchNorm's running statistics, which a
    training-mode forward updates in place: as task params they would be changed by every
    reference call)."""
    m = Mapper(None, {}, inits, "")
    m.names.update(input_names)
    state = model.state_dict(keep_vars=True)
    other = twin.state_dict()
    pairs, kept = [], []

    def keep(key, t, why):
        if not _same(t, other[key]):
            raise Blocked(why.kind if why else "init",
                          why.what if why else "a random buffer",
                          (f"{why.detail}; " if why else f"buffer '{key}' ") +
                          "differs between two builds of the Model: it is random, and a "
                          "submission's Model could not make the same")
        kept.append(key)

    for key, t in state.items():
        if not isinstance(t, nn.Parameter) or t.dtype != torch.float32:
            keep(key, t, None)
            continue
        try:
            name = m.declare_param(ParamRef(key, t, _sibling_weight(key, state))).name
        except Blocked as b:
            keep(key, t, b)
            continue
        pairs.append((key, name))
    twin_attrs, plain = _tensor_attrs(twin), _tensor_attrs(model, plain_only=True)
    attrs = []
    for path, t in _tensor_attrs(model).items():
        if path not in twin_attrs or _same(t, twin_attrs[path]):
            continue
        why = None
        if path in plain and t.dtype == torch.float32:
            try:
                attrs.append((path, m.declare_param(ParamRef(path, t)).name))
                continue
            except Blocked as b:
                why = b.detail
        raise Blocked("init", "a random tensor outside the state_dict",
                      f"Model.{path} differs between two builds and is no param a task can "
                      "give (a non-persistent buffer, or a plain attribute Kiln cannot draw" +
                      (f": {why})" if why else ")"))
    notes = [f"kept in the module as the Model makes them: {', '.join(kept[:6])}"
             + (f" (+{len(kept) - 6})" if len(kept) > 6 else "")] if kept else []
    if attrs:
        notes.append("given by attribute path (random plain tensors of the Model): " +
                     ", ".join(p for p, _ in attrs))
    return m, pairs, attrs, notes


def trace_module(model, items, tensors, casts, device, buffers=(), fresh=()):
    """TorchScript of the flat wrapper, traced on `device`, the plain attributes at `buffers`
    traced as buffers, those at `fresh` copied at each call; warnings torch.jit gives are
    kept."""
    try:
        wrapper = flat_wrapper(as_buffers(copy.deepcopy(model), buffers).to(device), items,
                               casts, fresh)
    except Exception as e:
        raise Blocked("module", "the Model cannot be copied for tracing", _short(e))
    args = tuple(x.to(device) for x in tensors)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.no_grad():
                traced = torch.jit.trace(wrapper, args, check_trace=False)
        except Exception as e:
            raise Blocked("module", "torch.jit.trace fails on the Model", _short(e))
    said = sorted({str(w.message).split("\n")[0][:160] for w in caught
                   if issubclass(w.category, torch.jit.TracerWarning)})
    return traced, said


OTHER_INPUTS = 4  # other inputs the trace is compared on


def other_input(x, decl, gen):
    """Another input in x's domain: a fresh draw by its task init where that is a plain affine
    draw, else x's own values shuffled."""
    plain = decl.get("init") in ("uniform", "normal") and not decl.get("random_scale") and \
        not decl.get("softmax") and \
        decl.get("structure", "none") == "none" and x.dtype == torch.float32
    if not plain:
        return x.flatten()[torch.randperm(x.numel(), generator=gen).to(x.device)].view_as(x)
    draw = torch.rand if decl["init"] == "uniform" else torch.randn
    y = draw(x.shape, generator=gen) * decl.get("scale", 1.0) + decl.get("shift", 0.0)
    return y.to(x.device)


def follows_the_model(traced, model, items, example, casts, decls):
    """The traced module against the Model on inputs other than the example it was traced with,
    so that control flow which depends on values (a branch tracing recorded one way) refuses the
    problem here rather than giving a reference that is right only on the example."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for k in range(OTHER_INPUTS):
            xs = [other_input(x, d, gen) for x, d in zip(example, decls)]
            want = flatten(model(*model_args(items, xs, casts)))
            got = list(traced(*xs))
            for j, (a, b) in enumerate(zip(want, got)):
                if a.shape != b.shape or not torch.allclose(a, b, atol=1e-4, rtol=1e-4,
                                                            equal_nan=True):
                    raise Blocked("module", "torch.jit.trace does not follow the Model",
                                  f"on other inputs ({k + 1} of {OTHER_INPUTS}) the traced "
                                  f"output {j} differs from the Model's: control flow that "
                                  "depends on values, which a trace records one way")


def blob_with_placeholders(traced, keys, device):
    """The TorchScript in base64, each task param a 0-dim placeholder (the task's draws take its
    place at every call), so the file holds no weights."""
    held = dict(list(traced.named_parameters()) + list(traced.named_buffers()))
    for k in keys:
        t = held[PREFIX + k]
        t.data = torch.zeros((), dtype=t.dtype, device=device).expand(t.shape)
    buf = io.BytesIO()
    torch.jit.save(traced, buf)
    return base64.b64encode(buf.getvalue()).decode()


def _check_state_unread(model, call, example, decls, ys, changed, res):
    """A forward that replaces a plain attribute (VanillaRNN's `self.hidden = ...`) is a task only
    where its output never reads what an earlier call left there (VanillaRNN copies its
    `initial_hidden` input in first): calls on inputs A, then on other inputs B, then on A again
    must give A's output. Otherwise two calls on the same inputs compute two outputs, which no
    reference can check. B: each input drawn again by its task draw (other_input). Raises
    Blocked."""
    gen = torch.Generator().manual_seed(7)
    other = [other_input(x, d, gen) for x, d in zip(example, decls)]
    where = ", ".join(f"Model.{p}" for p in changed)
    try:
        call(model, other)
        later = call(model)
    except Exception as e:
        raise Blocked("load", "Model.forward fails here", _short(e))
    for a, b in zip(ys, later):
        if a.shape != b.shape or not torch.allclose(a, b, atol=1e-5, rtol=1e-5, equal_nan=True):
            raise Blocked("random", "forward reads state an earlier call left",
                          f"{where} is another tensor after a call, and a call on other inputs "
                          "in between changes the output: no reference can check it")
    res["notes"].append(f"forward replaces {where}, but its output does not read what an "
                        "earlier call left there (inputs A, B, A give A's output again)")


def map_module(prob, conf, why):
    """The problem as a pytorch_module task. `why`: the spec v1 blockers (the reason for this
    form). Returns (state, res) as map_problem does; raises Blocked."""
    level = prob["level"] or 3  # none given: a whole Model is level 3's kind of problem
    if not 1 <= level <= 3:
        raise Blocked("level", f"level {level}", "Kiln's levels are 1, 2 and 3")
    task_name = prob["name"] if prob["level"] else f"kb_l3_{prob['name'][3:]}"
    res = {"source": prob["source"], "name": task_name, "level": level,
           "status": "rejected", "blockers": [], "rewrites": [], "notes": [],
           "form": "pytorch_module", "not_spec_v1": why}
    ns, scaling, source = exec_for(prob, conf, res)
    try:
        init_items = list(ns["get_init_inputs"]())
        with Recorder(meta=True) as irec:
            meta_items = list(ns["get_inputs"]())
        torch.manual_seed(0)
        items = list(ns["get_inputs"]())
    except Exception as e:
        raise Blocked("load", "get_inputs() / get_init_inputs() fail here", _short(e))
    tensor_pos = [i for i, x in enumerate(items) if isinstance(x, torch.Tensor)]
    if not tensor_pos:
        raise Blocked("format", "get_inputs() returns no tensor")
    try:
        model, prec = build_model(ns, init_items, meta=False)
        torch.manual_seed(1)
        with Recorder(meta=False, inits=True):
            twin = ns["Model"](*copy.deepcopy(init_items))
    except Exception as e:
        raise Blocked("load", "Model(*get_init_inputs()) fails here", _short(e))
    names = make_wrapper(model, items)[1]  # forward's own argument names
    inputs, casts = [], []
    for name, i in zip(names, tensor_pos):
        t, where = meta_items[i], f"input {i} ('{name}')"
        if t.dtype == torch.int64:  # class indices: drawn by randint (as floats), given as int64
            d = factory_init(t, irec.lookup(t), irec, where)
            if not d["init"].startswith("randint:"):
                raise Blocked("input", "an int64 input not drawn by randint", where)
        else:
            d = input_init(t, irec, where)
        d.pop("rewrite", None)  # a bool mask drawn as float 0 / 1: the module casts it back
        casts.append(t.dtype if t.dtype in (torch.bool, torch.int64) else None)
        inputs.append(dict(name=name, shape=list(t.shape), **d))
    bool_inputs = {n for n, c in zip(names, casts) if c == torch.bool}
    int64_inputs = [n for n, c in zip(names, casts) if c == torch.int64]
    inits = describe_all(model, prec)
    inits.update({p: describe_init(t, prec)
                  for p, t in _tensor_attrs(model, plain_only=True).items()})
    m, pairs, attrs, notes = declare_params(model, twin, inits, names)
    attr_paths = [p for p, _ in attrs]
    res["notes"] += notes
    redrawn, redrawn_params, seed = redraw.apply(conf.get("redraw"), inputs, m.params,
                                                 bool_inputs | set(int64_inputs))
    device = torch.device(conf["device"])
    example = [items[i].float() for i in tensor_pos]  # as Kiln gives them

    def call(mod, xs=example):  # fresh copies of the inputs each time: a forward may write them
        return flatten(mod(*model_args(items, [x.to(device).clone() for x in xs], casts)))

    with torch.no_grad():
        try:
            model.to(device)
            before = {p: t.clone() for p, t in _tensor_attrs(model, plain_only=True).items()}
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            t0 = time.perf_counter()
            ys = call(model)
            res["forward_s"] = round(time.perf_counter() - t0, 3)
            if device.type == "cuda":
                res["peak_bytes"] = torch.cuda.max_memory_allocated(device)
            again = call(model)
        except Blocked:
            raise
        except Exception as e:
            raise Blocked("load", "Model.forward fails here", _short(e))
        after = _tensor_attrs(model, plain_only=True)
        changed = [p for p, t in before.items() if p not in after or not _same(t, after[p])]
        # state the forward replaces, never read across calls (else refused just below)
        if changed:
            _check_state_unread(model, call, example, inputs, ys, changed, res)
        for k, (a, b) in enumerate(zip(ys, again)):
            if not a.is_floating_point() or a.dtype != torch.float32:
                raise Blocked("module", "an output that is not float32",
                              f"output {k} is {a.dtype}")
            if not torch.allclose(a, b, atol=1e-5, rtol=1e-5, equal_nan=True):
                raise Blocked("random", "forward is not deterministic",
                              f"output {k} differs between two calls on the same inputs (dropout "
                              "in training mode or another random op): no reference can check "
                              "it")
        # Whatever else the Model draws (a Python number, tensors in a list) shows here: a second
        # build given the first's state_dict must compute the same.
        try:
            twin.load_state_dict(model.state_dict())
            set_attrs(twin, model, attr_paths)
            other = call(twin.to(device))
        except Exception as e:
            raise Blocked("load", "a second build of the Model does not run", _short(e))
        for k, (a, b) in enumerate(zip(ys, other)):
            if not torch.allclose(a, b, atol=1e-5, rtol=1e-5, equal_nan=True):
                raise Blocked("init", "randomness outside the state_dict",
                              f"output {k}: a second build of the Model, given the first's "
                              "state_dict, computes another output; it draws something else "
                              "(a random attribute or number) that a submission's Model would "
                              "draw otherwise")
        del twin, other, again
    traced, said = trace_module(model.cpu(), items, example, casts, device, attr_paths, changed)
    if said:
        res["notes"].append("torch.jit.trace warned: " + "; ".join(said[:2]))
    follows_the_model(traced, model.to(device), items, [x.to(device) for x in example], casts,
                      inputs)
    keys = [k for k, _ in pairs + attrs]  # the attributes are the traced module's buffers
    blob = blob_with_placeholders(traced, keys, device)
    outs = [f"y{k}" for k in range(len(ys))] if len(ys) > 1 else ["y"]
    arg_names = names + [n for _, n in pairs + attrs]
    ops = [{"out": o, "op": "pytorch_module", "args": arg_names,
            "attrs": {"inputs": len(names), "state_dict": " ".join(PREFIX + k for k in keys),
                      "output": k, "shape": list(y.shape), "torchscript": blob}}
           for k, (o, y) in enumerate(zip(outs, ys))]
    desc = (f"KernelBench {short_source(prob['source'])}; its own Model is the reference "
            f"(traced to TorchScript), since spec v1 cannot say it: "
            + "; ".join(f"{b['what']}" for b in why[:3]))
    desc += describe_scaling(scaling, conf["scale_batch"]) + redrawn
    params = m.params
    param_paths = dict((n, k) for k, n in pairs + attrs)
    kb, kb_blockers = kernelbench_table(source, init_items, items, names, bool_inputs, params,
                                        param_paths, model, attributes=set(attr_paths))
    if kb_blockers:
        raise kb_blockers[0]
    if int64_inputs:
        kb["int64_inputs"] = int64_inputs
    spec = {"name": task_name, "level": level, "dtype": "float32", "description": desc,
            "outputs": outs, "inputs": [{k: v for k, v in d.items() if k in INPUT_KEYS}
                                        for d in inputs],
            "params": params, "ops": ops, "kernelbench": kb}
    if seed is not None:
        spec["param_seed"] = seed
    res["ops"] = len(ops)
    res["level"] = level
    res["torchscript_bytes"] = len(blob) * 3 // 4
    nbytes = sum(4 * _numel(d["shape"]) for d in spec["inputs"] + params)
    res["bytes"] = max(nbytes + sum(y.numel() * 4 for y in ys), res.get("peak_bytes", 0))
    res["peak_bytes"] = res["bytes"]
    res["blas_gflop"] = 0.0
    res["shapes"] = {"inputs": [d["shape"] for d in inputs], "outputs": [list(y.shape) for y in ys]}
    state = {"bool_inputs": bool_inputs, "int64_inputs": set(int64_inputs), "spec": spec, "ns": ns, "init_items": init_items,
             "items": items, "gm": None, "tensor_names": names, "param_paths": param_paths,
             "const_params": {}, "index": set(), "redrawn_params": redrawn_params}
    return state, res


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n
