#!/usr/bin/env python3
"""Import KernelBench problems as Kiln task spec v1 files, exactly or not at all (issue #15).

    /usr/bin/python3 tools/kernelbench_import.py PATH... --out DIR [--scale-batch F]
        [--report OUT.json] [--kiln BIN] [--allow-degenerate] [--jobs N] [--level N]
        [--max-mib M] [--timeout S] [--threads T] [--no-check]

PATH is a KernelBench problem file (`class Model(nn.Module)`, `get_inputs()`, `get_init_inputs()`,
module-level sizes), a folder of them (searched recursively; KernelBench's layout: the level comes
from a `levelN` path component), or a JSON Lines file of {"code": ...} records (CUDA-Agent-Ops-6K's
format; optional "name" / "id" and "level" fields). `kiln tasks import ...` runs this script.

For each problem: its code runs (with `batch_size = ...` scaled by --scale-batch), get_inputs() runs
with torch's factories recording how each input is drawn, Model(*get_init_inputs()) is built with
torch's factories and nn.init recording how each parameter is initialized, and Model.forward is
traced with torch.fx (a wrapper binds get_inputs()'s non-tensor items as constants). Sizes and every
shape-derived constant come from running the trace on meta tensors. Each graph node is mapped to
Kiln ops (rules: MODULES, FUNCS and METHODS below); anything spec v1 cannot say exactly (an op, an
argument value, an init, an input draw) is a *blocker*: all of a problem's blockers are collected,
the problem is not imported, and the report names them. Mathematically exact rewrites are allowed
and listed per problem under "rewrites" (e.g. torch.norm -> pow, sum, sqrt; 1 / x -> pow -1;
smooth_l1 / huber / triplet losses as elementwise ops; triu(x) -> x * triu(ones); masked_fill with
a constant causal mask -> x * k + (k - 1) * -v). How inputs and params were drawn (plain draws,
scaled / shifted / triangular / symmetric ones, torch.nn inits) is tools/kernelbench_draws.py.

Numerical check (unless --no-check): the task is written to a scratch dir, `kiln tasks validate
--digest 256` runs Kiln's reference on it, tools/torch_baselines.py (imported as a module) redraws
Kiln's params and inputs bit for bit, those are loaded into the *original* Model and into the traced
GraphModule, and both outputs must match Kiln's output digests within the task tolerance (float32
default atol = rtol = 1e-4). A mismatch rejects the import. Degeneracy, from the same run: Kiln's own
verdict (constant / all-zeros / NaN outputs), an output that equals one of the inputs within
tolerance (copying the input passes), or an output within tolerance of zero on more than 99% of its
elements. Degenerate tasks are reported and not written unless --allow-degenerate.

--scale-batch F (0 < F <= 1) rewrites a module-level `batch_size = EXPR` to max(1, round(EXPR*F))
before the code runs, so every size derived from it follows; problems without `batch_size` keep
their sizes (the report says so). --max-mib M: a task whose tensors (inputs, params and every op
result, summed: the check runs PyTorch and Kiln on them) need more is not checked here or written
("too_large"). --no-check maps only and writes nothing (a dry run, e.g. at full GPU sizes).

Output: DIR/level<N>/<name>.toml, name = kb_l<N>_<file stem>. The report (--report) is JSON:
per-problem status (imported | rejected | degenerate | too_large | mappable), blockers
{kind, what, detail}, rewrites, sizes and check figures; a summary per level; and `missing`, the
blockers ranked by how many problems each blocks (`alone`: problems it is the only blocker of).
Exit status: 0 when every problem was imported or reported; 2 for bad arguments or unreadable input.

Each task ends with a [kernelbench] table, what running a KernelBench ModelNew submission against
it needs: `source` (the problem's code as it ran, batch_size scaled, so Model(*init_inputs) has the
task's sizes), `init_inputs` (get_init_inputs() as plain values), `forward` (get_inputs() in order:
{input = NAME} for a tensor, {value = V} for anything else), `bool_inputs` (inputs PyTorch gets as
bool), `state_dict` (task param -> the Model's state_dict key it is loaded into) and `model_keys`
(every key of Model's state_dict). A problem whose init inputs or forward arguments are not plain
values, or with a param the Model's state_dict does not hold (a rewrite's constant: a tensor
made in forward, triu(x)'s mask; a non-persistent buffer), is refused ("load"): a ModelNew could
not be run against it.
"""
import argparse
import ast
import builtins
import copy
import inspect
import json
import math
import multiprocessing as mp
import operator
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_baselines as tb  # noqa: E402  (exits with a message when torch is missing)
from kernelbench_draws import (  # noqa: E402
    INPUT_KEYS, Blocked, Recorder, close_enough, describe_init, input_init, torch_fan_in)

import torch  # noqa: E402
import torch.fx as fx  # noqa: E402
import torch.nn as nn  # noqa: E402

DIGEST_SAMPLES = 256
ZERO_SHARE_LIMIT = 0.99   # an all-zeros output within tolerance on more than this share: degenerate
KILN_MAX_OPS = 4096       # data/task_check.hpp check_limits::max_ops
RANKED_KINDS = ("missing_op", "missing_attr", "init", "input", "limit")
STATUSES = ("imported", "degenerate", "rejected", "too_large", "mappable")


class UsageError(Exception):
    """Bad arguments or unreadable input: exit status 2."""


# ---------------------------------------------------------------- problems

def _natural(s):
    return [int(p) if p.isdigit() else p.lower() for p in re.split(r"(\d+)", s)]


def slug(text):
    s = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")
    return (s or "problem")[:80]


def level_of_path(path):
    for part in reversed(os.path.normpath(path).split(os.sep)):
        m = re.fullmatch(r"level_?(\d+)", part, re.IGNORECASE)
        if m:
            return int(m[1])
    return None


def load_problems(paths, level_override):
    """Problems in order: each PATH in turn, a folder's *.py files recursively in natural order.
    Unreadable input raises UsageError naming the file (and line)."""
    probs = []

    def add(source, code, stem, level, level_from):
        if level_override is not None:
            level, level_from = level_override, "--level"
        probs.append({"source": source, "code": code, "stem": stem, "level": level,
                      "level_from": level_from if level is not None else None})

    def read(p):
        try:
            with open(p, "rb") as f:
                data = f.read()
        except OSError as e:
            raise UsageError(f"{p}: cannot read: {e.strerror}")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UsageError(f"{p}: not UTF-8 text ({e.reason} at byte {e.start})")

    def load_file(p):
        ext = os.path.splitext(p)[1].lower()
        if ext == ".py":
            add(p, read(p), os.path.splitext(os.path.basename(p))[0], level_of_path(p), "path")
        elif ext in (".jsonl", ".json"):
            text, n_rec = read(p), 0
            base = os.path.splitext(os.path.basename(p))[0]
            for n, line in enumerate(text.split("\n"), 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise UsageError(f"{p}:{n}: not JSON Lines ({e.msg} at column {e.colno})")
                if not isinstance(rec, dict) or not isinstance(rec.get("code"), str):
                    raise UsageError(f"{p}:{n}: expected an object with a \"code\" string")
                n_rec += 1
                stem = next((str(rec[k]) for k in ("name", "id", "problem_id", "task_id")
                             if isinstance(rec.get(k), (str, int)) and str(rec[k])),
                            f"{base}_{n}")
                lv = rec.get("level")
                lv = lv if isinstance(lv, int) and not isinstance(lv, bool) else None
                add(f"{p}:{n}", rec["code"], stem, lv if lv is not None else level_of_path(p),
                    "record" if lv is not None else "path")
            if not n_rec:
                raise UsageError(f"{p}: no records")
        elif ext == ".parquet":
            try:
                import pyarrow.parquet as pq
            except ImportError:
                raise UsageError(f"{p}: reading parquet needs pyarrow, which this Python lacks; "
                                 "convert it to JSON Lines of {\"code\": ...} records")
            try:
                table = pq.read_table(p).to_pylist()
            except Exception as e:  # pyarrow's own errors
                raise UsageError(f"{p}: cannot read parquet: {e}")
            for n, rec in enumerate(table, 1):
                if not isinstance(rec.get("code"), str):
                    raise UsageError(f"{p}: row {n}: no \"code\" string")
                stem = str(rec.get("name") or rec.get("id") or f"{os.path.basename(p)}_{n}")
                lv = rec.get("level") if isinstance(rec.get("level"), int) else None
                add(f"{p}:{n}", rec["code"], stem, lv if lv is not None else level_of_path(p),
                    "record" if lv is not None else "path")
        else:
            raise UsageError(f"{p}: not a problem file (expected .py, .jsonl or .parquet)")

    for path in paths:
        if os.path.isdir(path):
            found = []
            for root, dirs, files in os.walk(path):
                dirs[:] = [d for d in dirs if not d.startswith((".", "__"))]
                found += [os.path.join(root, f) for f in files
                          if f.endswith(".py") and not f.startswith("__")]
            if not found:
                raise UsageError(f"{path}: no .py problem files in this folder")
            for f in sorted(found, key=lambda s: [_natural(c) for c in
                                                  os.path.relpath(s, path).split(os.sep)]):
                load_file(f)
        elif os.path.exists(path):
            load_file(path)
        else:
            raise UsageError(f"{path}: no such file or directory")
    return probs


def short_source(source):
    """level2/1_Conv2D_ReLU_BiasAdd.py (from the levelN folder on), or the file's base name."""
    parts = os.path.normpath(source).split(os.sep)
    for i in range(len(parts) - 1, -1, -1):
        if re.fullmatch(r"level_?\d+", parts[i], re.IGNORECASE):
            return "/".join(parts[i:])
    return os.path.basename(source)


def assign_names(probs):
    """kb_l<level>_<stem>, unique over the run (a repeat gets _2, _3, ...)."""
    used = set()
    for p in probs:
        base = (f"kb_l{p['level']}_" if p["level"] is not None else "kb_") + slug(p["stem"])
        name, k = base, 2
        while name in used:
            name, k = f"{base}_{k}", k + 1
        used.add(name)
        p["name"] = name


# ---------------------------------------------------------------- running a problem's code

def exec_problem(code, filename, scale):
    """The problem's module namespace, with `batch_size = EXPR` scaled. Returns (ns, scaling,
    source): source is the code as it ran, each scaled `batch_size = EXPR` written as its value
    (the [kernelbench] table keeps it, so that Model(*get_init_inputs()) has the task's sizes)."""
    try:
        tree = ast.parse(code, filename)
    except SyntaxError as e:
        raise Blocked("load", "syntax error", f"line {e.lineno}: {e.msg}")
    scaling = {"batch_size": None}
    hits, values = [], []  # (body index, value node) of each scaled assignment; what each got
    if scale != 1.0:
        for i, node in enumerate(tree.body):
            target = None
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                target = node.target
            if isinstance(target, ast.Name) and target.id == "batch_size":
                hits.append((i, node.value))
                node.value = ast.Call(func=ast.Name("__kiln_scale_batch__", ast.Load()),
                                      args=[node.value], keywords=[])
        ast.fix_missing_locations(tree)
        if not hits:
            scaling["note"] = "no module-level batch_size: sizes not scaled"

    def scale_batch(v):
        if isinstance(v, bool) or not isinstance(v, int):
            raise Blocked("input", "batch_size is not an integer", f"batch_size = {v!r}")
        new = max(1, int(round(v * scale)))
        scaling["batch_size"] = {"from": v, "to": new}
        values.append(new)
        return new

    ns = {"__name__": "__kernelbench_problem__", "__file__": filename,
          "__builtins__": builtins, "__kiln_scale_batch__": scale_batch}
    try:
        exec(compile(tree, filename, "exec"), ns)
    except Blocked:
        raise
    except Exception as e:
        raise Blocked("load", "problem code fails here", _short(e))
    for k in ("Model", "get_inputs", "get_init_inputs"):
        if k not in ns or not callable(ns[k]):
            raise Blocked("format", f"no {k}", "KernelBench problems define class Model, "
                          "get_inputs() and get_init_inputs()")
    if not (isinstance(ns["Model"], type) and issubclass(ns["Model"], nn.Module)):
        raise Blocked("format", "Model is not an nn.Module subclass")
    return ns, scaling, (_as_run(code, hits, values) if hits else code)


def _as_run(code, hits, values):
    """code with each scaled assignment's value written as the int it got. Top-level statements
    run once each, in order, so values[k] is hits[k]'s. The text is checked by parsing it: the
    same module with those values as constants."""
    if len(values) != len(hits):
        raise AssertionError("internal: batch_size scaled a different number of times")
    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", code)]  # the tokenizer's lines

    def offset(line, col):  # ast columns count UTF-8 bytes
        text = code[starts[line - 1]:starts[line] if line < len(starts) else len(code)]
        return starts[line - 1] + len(text.encode("utf-8")[:col].decode("utf-8"))

    out = code
    for (_, v), new in sorted(zip(hits, values), key=lambda h: -h[0][0]):
        a, b = offset(v.lineno, v.col_offset), offset(v.end_lineno, v.end_col_offset)
        out = out[:a] + str(new) + out[b:]
    want = ast.parse(code)
    for (i, _), new in zip(hits, values):
        want.body[i].value = ast.Constant(new)
    if ast.dump(ast.parse(out)) != ast.dump(want):
        raise AssertionError("internal: the scaled source does not parse as the code that ran")
    return out


def _short(e):
    msg = str(e).strip().split("\n")[0][:300]
    return f"{type(e).__name__}: {msg}"


# ---------------------------------------------------------------- values during mapping

class T:
    """A Kiln tensor value: input, param or op result."""
    __slots__ = ("name", "shape", "index", "view")

    def __init__(self, name, shape, index=False, view=False):
        self.name, self.shape, self.index, self.view = name, shape, index, view


class C:
    """A Python constant (int, float, tuple, torch.Size, None, str, dtype...)."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class Unknown:
    """The result of a node that could not be mapped (its blocker is recorded already)."""
    __slots__ = ("shape",)

    def __init__(self, shape=None):
        self.shape = shape


class ParamRef:
    """A model tensor (parameter or buffer), declared as a Kiln param on first use."""
    __slots__ = ("path", "tensor", "of", "shape")

    def __init__(self, path, tensor, of=None):
        self.path, self.tensor, self.of, self.shape = path, tensor, of, list(tensor.shape)


class Mask:
    """mask == 0 / mask == 1 / mask != 0 of a 0 / 1 valued tensor: only masked_fill takes it.
    fill_where_one: the condition holds where the mask is 1."""
    __slots__ = ("x", "fill_where_one")

    def __init__(self, x, fill_where_one):
        self.x, self.fill_where_one = x, fill_where_one


class MinMax:
    """torch.max / torch.min (x, dim) -> (values, indices), materialized per element used."""
    __slots__ = ("x", "dim", "keepdim", "which", "node")

    def __init__(self, x, dim, keepdim, which, node):
        self.x, self.dim, self.keepdim, self.which, self.node = x, dim, keepdim, which, node


def is_tensorish(v):
    return isinstance(v, (T, Unknown, ParamRef))


REQ = object()


class Sig:
    """A call signature: "input, dim=None, keepdim=False". bind() maps args and kwargs onto it;
    an argument it does not know is a blocker."""

    def __init__(self, spec):
        self.names, self.defaults = [], {}
        for part in [p.strip() for p in spec.split(",") if p.strip()]:
            if "=" in part:
                k, v = part.split("=", 1)
                self.names.append(k.strip())
                self.defaults[k.strip()] = ast.literal_eval(v.strip())
            else:
                self.names.append(part)
                self.defaults[part] = REQ

    def bind(self, args, kwargs, what, varargs=False):
        out = {}
        if varargs and len(args) > len(self.names):
            # x.view(a, b, c) / x.permute(0, 2, 1): the tail becomes one tuple
            head = len(self.names) - 1
            args = list(args[:head]) + [C(tuple(_const(a, what) for a in args[head:]))]
        if len(args) > len(self.names):
            raise Blocked("missing_attr", f"{what}: {len(args)} positional arguments",
                          f"takes {len(self.names)}")
        for k, v in zip(self.names, args):
            out[k] = v
        for k, v in kwargs.items():
            if k not in self.defaults:
                raise Blocked("missing_attr", f"{what} argument {k}", f"{k}={_show(v)}")
            out[k] = v
        for k in self.names:
            if k not in out:
                if self.defaults[k] is REQ:
                    raise Blocked("missing_attr", f"{what}: argument {k} missing")
                out[k] = C(self.defaults[k])
        return out


def _show(v):
    if isinstance(v, C):
        return repr(v.value)
    if isinstance(v, (T, ParamRef)):
        return "<tensor>"
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(_show(x) for x in v) + ")"
    return "<value>"


def _const(v, what):
    """The Python value of a constant argument (tuples of constants too)."""
    if isinstance(v, C):
        return v.value
    if isinstance(v, (list, tuple)):
        return type(v)(_const(x, what) for x in v)
    if isinstance(v, dict):
        return {k: _const(x, what) for k, x in v.items()}
    if isinstance(v, slice):
        return slice(_const(v.start, what), _const(v.stop, what), _const(v.step, what))
    if v is None or isinstance(v, (int, float, bool, str)):
        return v
    raise Blocked("missing_attr", f"{what}: a tensor where a constant is needed")


def _ints(v, n=None):
    """An int or a sequence of ints as a list (n: expand an int to n entries)."""
    if isinstance(v, (list, tuple, torch.Size)):
        return [int(x) for x in v]
    return [int(v)] * n if n else [int(v)]


def _attr_ints(v):
    """An attr value: an int when all entries agree, else a list."""
    v = _ints(v)
    return v[0] if len(set(v)) == 1 else v


def _real(v):
    f = float(v)
    return int(f) if f.is_integer() and abs(f) < 2 ** 53 else f


# ---------------------------------------------------------------- the mapping context

class Mapper:
    def __init__(self, gm, meta_env, inits, model_prefix):
        self.gm, self.meta, self.inits, self.prefix = gm, meta_env, inits, model_prefix
        self.val = {}
        self.inputs, self.params, self.ops = [], [], []
        self.names, self.blockers, self.rewrites = set(), [], []
        self.param_names = {}    # id(tensor) -> kiln name
        self.param_paths = {}    # kiln name -> model path (to load Kiln's values into)
        self.const_params = {}   # kiln name -> constant tensor made in forward (ones / zeros)
        self.binary = set()      # kiln names of 0 / 1 valued tensors (masks) and their views
        self.index_values = set()
        self.node = None
        self.k = 0

    # names
    def fresh(self, base):
        base = re.sub(r"\W", "_", base) or "v"
        if base[0].isdigit():
            base = "v_" + base
        name, k = base, 2
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name

    def shape_of(self, node):
        v = self.meta.get(node)
        return list(v.shape) if isinstance(v, torch.Tensor) else None

    def block(self, kind, what, detail=""):
        raise Blocked(kind, what, detail)

    def rewrite(self, text):
        if text not in self.rewrites:
            self.rewrites.append(text)

    # tensors
    def tensor(self, v, what="argument"):
        """A T for an op argument (declaring a param on first use), or Unknown."""
        if isinstance(v, T):
            if v.index:
                self.block("missing_attr", "argmax/argmin result used by another op",
                           "Kiln's index tensors may only be task outputs")
            return v
        if isinstance(v, Unknown):
            return v
        if isinstance(v, ParamRef):
            return self.declare_param(v)
        if isinstance(v, C) and isinstance(v.value, torch.Tensor):
            return self.const_tensor(v.value)
        self.block("missing_attr", f"{what}: a constant where a tensor is needed",
                   f"{_show(v)}")

    def declare_param(self, ref):
        t = ref.tensor
        if id(t) in self.param_names:
            return T(self.param_names[id(t)], ref.shape)
        path = ref.path[len(self.prefix):] if ref.path.startswith(self.prefix) else ref.path
        init = self.param_init(ref, path)
        name = self.fresh(path.replace(".", "_"))
        decl = {"name": name, "shape": list(t.shape)}
        decl.update(init)
        self.params.append(decl)
        if init.get("structure") in ("triu", "tril") and init["init"] == "ones":
            self.binary.add(name)
        self.param_names[id(t)] = name
        self.param_paths[name] = path
        return T(name, ref.shape)

    def param_init(self, ref, path):
        t = ref.tensor
        if t.dtype != torch.float32:
            self.block("init", f"{str(t.dtype).replace('torch.', '')} param",
                       f"param '{path}' is {t.dtype}")
        how = self.init_of(ref)
        shape = list(t.shape)
        if how[0] == "uniform":
            lo, hi = how[1], how[2]
            if lo == 0.0 and hi == 1.0:
                init = {"init": "uniform"}
            elif close_enough(-lo, hi) and len(shape) >= 2 and close_enough(hi, 1 / math.sqrt(
                    torch_fan_in(shape))):
                init = {"init": "kaiming_uniform"}
            elif (close_enough(-lo, hi) and ref.of is not None and
                  close_enough(hi, 1 / math.sqrt(torch_fan_in(list(ref.of.shape))))):
                w = self.declare_param(ref.of)
                init = {"init": "bias_uniform", "of": w.name}
            elif hi > lo:
                init = {"init": "uniform", "scale": hi - lo}
                if lo != 0.0:
                    init["shift"] = lo
            else:
                self.block("init", "param init: uniform with empty bounds",
                           f"param '{path}': U({lo:.6g}, {hi:.6g})")
        elif how[0] == "normal":
            init = {"init": "normal"}
            if how[2] <= 0.0:
                self.block("init", "param init: normal with std <= 0",
                           f"param '{path}': N({how[1]}, {how[2]})")
            if how[2] != 1.0:
                init["scale"] = how[2]
            if how[1] != 0.0:
                init["shift"] = how[1]
        elif how[0] == "mask":
            init = {"init": "ones", "structure": how[1]}
        elif how[0] == "constant":
            if how[1] not in (0.0, 1.0):
                self.block("init", "param init: constant fill",
                           f"param '{path}' = {how[1]!r} everywhere; Kiln's constant inits "
                           "are ones and zeros")
            init = {"init": "ones" if how[1] == 1.0 else "zeros"}
        else:
            self.block("init", "param init: " + how[1], f"param '{path}': {how[2]}")
        return init

    def init_of(self, ref):
        path = ref.path[len(self.prefix):] if ref.path.startswith(self.prefix) else ref.path
        how = self.inits.get(path)
        if how is None:
            return ("other", "unknown", "not a parameter or buffer of the model")
        return how

    @staticmethod
    def sanity(t, init, path):
        """The values agree with the init recorded (catches changes no recorder saw)."""
        with torch.no_grad():
            x = t.detach().double()
            kind, ok = init["init"], True
            if kind in ("ones", "zeros"):
                want = torch.full_like(x, 1.0 if kind == "ones" else 0.0)
                if init.get("structure") in ("triu", "tril") and x.dim() >= 2:
                    want = want.triu() if init["structure"] == "triu" else want.tril()
                ok = bool((x == want).all())
            elif kind == "uniform":
                lo, width = init.get("shift", 0.0), init.get("scale", 1.0)
                slack = 1e-6 * max(1.0, abs(lo) + width)
                ok = bool(((x >= lo - slack) & (x <= lo + width + slack)).all())
            elif kind in ("kaiming_uniform", "bias_uniform"):
                ok = bool(torch.isfinite(x).all())
            elif kind == "normal":
                mean, std = init.get("shift", 0.0), init.get("scale", 1.0)
                ok = bool(torch.isfinite(x).all())
                if x.numel() >= 1000:
                    ok = ok and abs(float(x.mean()) - mean) < 0.2 * std and \
                        0.8 * std < float(x.std()) < 1.2 * std
        if not ok:
            raise Blocked("init", "param values do not match their recorded init",
                          f"param '{path}' ({kind})")

    def const_tensor(self, t):
        """A tensor constant made in forward (torch.ones(...)): a ones / zeros param."""
        if t.device.type == "meta":
            raise Blocked("missing_op", "tensor constant made in forward", "")
        if t.dtype == torch.float32 and t.numel() and bool((t == 1).all()):
            init = "ones"
        elif t.dtype == torch.float32 and t.numel() and bool((t == 0).all()):
            init = "zeros"
        else:
            self.block("missing_op", "tensor constant made in forward",
                       f"shape {list(t.shape)}, {t.dtype}")
        name = self.fresh(f"const_{init}")
        self.params.append({"name": name, "shape": list(t.shape), "init": init})
        self.const_params[name] = t
        self.rewrite(f"constant {init} tensor made in forward -> param {init}")
        return T(name, list(t.shape))

    def emit(self, op, args, attrs=None, shape=None, index=False, view=False):
        """One Kiln op; its result T. Unknown in, Unknown out. view: PyTorch's result shares its
        input's storage (reshape, transpose, slice...), so an in-place op on it is refused."""
        ts = [self.tensor(a) for a in args]
        if any(isinstance(a, Unknown) for a in ts):
            return Unknown(shape)
        if op not in tb.OPS:
            raise AssertionError(f"internal: op {op} is not in torch_baselines.OPS")
        name = self.fresh(f"y{self.k}")
        self.k += 1
        entry = {"out": name, "op": op, "args": [a.name for a in ts]}
        if attrs:
            entry["attrs"] = attrs
        self.ops.append(entry)
        if op in ("slice", "reshape", "permute", "transpose", "flatten") and \
                ts[0].name in self.binary:
            self.binary.add(name)
        if index:
            self.index_values.add(name)
        return T(name, shape, index=index, view=view)

    # ---- the graph
    def run(self, placeholders):
        for node in self.gm.graph.nodes:
            self.node = node
            try:
                if node.op == "placeholder":
                    self.val[node] = placeholders[node.target]
                elif node.op == "get_attr":
                    self.val[node] = self.get_attr(node)
                elif node.op == "output":
                    return self.outputs(node.args[0])
                else:
                    self.val[node] = self.call(node)
            except Blocked as b:
                self.blockers.append(b)
                self.val[node] = Unknown(self.shape_of(node))
        return []

    def arg(self, a):
        if isinstance(a, fx.Node):
            return self.val[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(x) for x in a)
        if isinstance(a, dict):
            return {k: self.arg(x) for k, x in a.items()}
        if isinstance(a, slice):
            return slice(self.arg(a.start), self.arg(a.stop), self.arg(a.step))
        return C(a)

    def get_attr(self, node):
        obj = self.gm
        for part in node.target.split("."):
            obj = getattr(obj, part)
        path = node.target[len(self.prefix):] if node.target.startswith(self.prefix) else None
        if isinstance(obj, torch.Tensor) and path in self.inits:
            return ParamRef(node.target, obj)
        return C(obj)  # a constant tracing made (torch.tensor(c) in forward) or a non-tensor

    def call(self, node):
        args = [self.arg(a) for a in node.args]
        kwargs = {k: self.arg(v) for k, v in node.kwargs.items()}
        if node.op == "call_module":
            mod = self.gm.get_submodule(node.target)
            handler = MODULES.get(type(mod))
            if handler is None:
                self.block("missing_op", f"nn.{type(mod).__name__}",
                           f"module '{node.target[len(self.prefix):]}'")
            return handler(self, mod, node.target, args, kwargs)
        flat = list(args) + list(kwargs.values())
        if not any(self._has_tensor(a) for a in flat):
            v = self.meta.get(node)  # a constant: its value from the meta run
            if isinstance(v, torch.Tensor):
                if v.dim() == 0 and node.target in (torch.tensor, torch.as_tensor) \
                        and isinstance(_const(args[0], "tensor"), (int, float)):
                    return C(float(_const(args[0], "tensor")))
                if node.target in (torch.ones, torch.zeros):
                    return C((torch.ones if node.target is torch.ones else torch.zeros)(
                        *_const(args, "size"), **{k: _const(x, k) for k, x in kwargs.items()}))
                self.block("missing_op", "tensor constant made in forward",
                           f"{_qualname(node)}")
            return C(v)
        if node.op == "call_method":
            name = node.target
            if name.endswith("_") and not name.endswith("__") and name[:-1] in METHODS:
                out = METHODS[name[:-1]](self, args, kwargs, name[:-1])
                self.inplace(node, out)
                return out
            if name not in METHODS:
                self.block("missing_op", f"Tensor.{name}", _where(node))
            return METHODS[name](self, args, kwargs, name)
        handler = FUNCS.get(node.target)
        if handler is None:
            self.block("missing_op", _qualname(node), _where(node))
        out = handler[0](self, args, kwargs, handler[1])
        if node.target in INPLACE_FUNCS:
            self.inplace(node, out)
        return out

    def _has_tensor(self, a):
        if isinstance(a, (T, Unknown, ParamRef, MinMax, Mask)):
            return True
        if isinstance(a, (list, tuple)):
            return any(self._has_tensor(x) for x in a)
        if isinstance(a, dict):
            return any(self._has_tensor(x) for x in a.values())
        if isinstance(a, slice):
            return any(self._has_tensor(x) for x in (a.start, a.stop, a.step))
        return False

    def inplace(self, node, out):
        """x.relu_() and friends: later uses of x see the new value."""
        src = node.args[0]
        if isinstance(src, fx.Node):
            v = self.val.get(src)
            if isinstance(v, T) and v.view:
                self.block("missing_attr", "in-place op on a view",
                           f"{node.target} on the result of a view op (its base changes too)")
            if isinstance(v, ParamRef):
                self.block("missing_attr", "in-place op on a parameter", node.target)
            self.val[src] = out

    def outputs(self, out):
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        names = []
        for i, v in enumerate(outs):
            v = self.arg(v) if isinstance(v, fx.Node) else self.arg(v)
            if isinstance(v, Unknown):
                continue
            if not isinstance(v, T) or v.name not in {o["out"] for o in self.ops}:
                self.blockers.append(Blocked(
                    "missing_op", "output is not an op result",
                    f"output {i} is {'an input or param' if isinstance(v, (T, ParamRef)) else 'a constant'}"))
                continue
            if v.name in names:
                self.blockers.append(Blocked("missing_op", "the same value output twice",
                                             f"output {i}"))
                continue
            names.append(v.name)
        return names


def _qualname(node):
    t = node.target
    try:
        name = fx.node._get_qualified_name(t)
    except Exception:
        name = getattr(t, "__name__", repr(t))
    name = re.sub(r"^_operator\.", "operator.", name)
    name = re.sub(r"^torch\._C\._nn\.", "F.", name)
    name = re.sub(r"^torch\.nn\.functional\.", "F.", name)
    name = re.sub(r"^torch\._C\._special\.special_", "torch.special.", name)
    name = re.sub(r"^torch\._C\._linalg\.linalg_", "torch.linalg.", name)
    name = re.sub(r"^torch\.functional\.", "torch.", name)
    if name.startswith("operator."):
        sym = {"gt": ">", "lt": "<", "ge": ">=", "le": "<=", "eq": "==", "ne": "!=",
               "floordiv": "//", "mod": "%", "and_": "&", "or_": "|", "invert": "~"}
        s = sym.get(name.split(".", 1)[1])
        if s:
            return f"tensor {s} (operator.{name.split('.', 1)[1]})"
    return name


def _where(node):
    st = node.meta.get("stack_trace") if hasattr(node, "meta") else None
    return f"node {node.name}" + (f" ({st.strip().splitlines()[-1].strip()})" if st else "")


# ---------------------------------------------------------------- mapping rules

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


def matmul(m, args, kwargs, what):
    b = Sig("input, other").bind(args, kwargs, what)
    return m.emit("matmul", [b["input"], b["other"]], shape=m.shape_of(m.node))


def einsum(m, args, kwargs, what):
    """The einsums that are one matmul: "...ij,jk->...ik" (a batched or broadcast product over the
    last index of the first operand and the first of a 2-D second), or the same batch prefix on
    both ("bij,bjk->bik")."""
    eq = _const(args[0], what) if args else None
    ops = list(args[1:])
    if len(ops) == 1 and isinstance(ops[0], (list, tuple)):
        ops = list(ops[0])
    if not isinstance(eq, str) or "->" not in eq or len(ops) != 2 or "." in eq:
        m.block("missing_op", "torch.einsum", f"equation {eq!r} with {len(ops)} operand(s)")
    lhs, out = eq.replace(" ", "").split("->")
    a, b = lhs.split(",") if lhs.count(",") == 1 else ("", "")
    ok = len(a) >= 2 and len(b) >= 2 and len(set(a)) == len(a) and len(set(b)) == len(b)
    if ok and len(b) == 2:  # contract a[-1] with b[0]: x @ w
        ok = a[-1] == b[0] and b[1] not in a and out == a[:-1] + b[1]
    elif ok:  # the same batch prefix: bmm-like
        ok = (len(a) == len(b) and a[:-2] == b[:-2] and a[-1] == b[-2] and a[-2] not in b
              and b[-1] not in a and out == a[:-1] + b[-1])
    if not ok:
        m.block("missing_op", "torch.einsum", f"equation {eq!r} is not one matmul")
    m.rewrite(f"einsum {eq} -> matmul")
    return m.emit("matmul", ops, shape=m.shape_of(m.node))


def const_like(init):
    def h(m, args, kwargs, what):
        shape = m.shape_of(m.node)
        if shape is None:
            m.block("missing_attr", f"{what}: unknown result shape")
        dtype = kwargs.get("dtype")
        if dtype is not None and _const(dtype, what) not in (None, torch.float32):
            m.block("missing_attr", f"{what}: dtype other than float32")
        t = torch.zeros(shape) if init == "zeros" else torch.ones(shape)
        return m.const_tensor(t)
    return h


def mm(m, args, kwargs, what):
    b = Sig("input, mat2").bind(args, kwargs, what)
    m.rewrite("mm -> matmul (2-D)")
    return m.emit("matmul", [b["input"], b["mat2"]], shape=m.shape_of(m.node))


def bmm(m, args, kwargs, what):
    b = Sig("input, mat2").bind(args, kwargs, what)
    return m.emit("bmm", [b["input"], b["mat2"]], shape=m.shape_of(m.node))


def f_linear(m, args, kwargs, what):
    b = Sig("input, weight, bias=None").bind(args, kwargs, what)
    a = [b["input"], b["weight"]] + ([b["bias"]] if not _is_none(b["bias"]) else [])
    return m.emit("linear", a, shape=m.shape_of(m.node))


def _is_none(v):
    return isinstance(v, C) and v.value is None


def reshape_to(m, x, what):
    """The node's result shape as a reshape (view, unsqueeze, squeeze...)."""
    shape = m.shape_of(m.node)
    if shape is None:
        m.block("missing_attr", f"{what}: unknown result shape")
    if list(shape) == list(_shape(x) or [None]):
        return alias(x)
    return m.emit("reshape", [x], {"shape": [int(s) for s in shape]}, shape=shape, view=True)


def alias(x):
    if isinstance(x, T):
        return T(x.name, x.shape, x.index, view=True)
    return x


def view(m, args, kwargs, what):
    x = args[0]
    rest = list(args[1:]) + [kwargs[k] for k in ("shape", "size") if k in kwargs]
    if what == "view" and len(rest) == 1 and isinstance(rest[0], C) and \
            isinstance(rest[0].value, torch.dtype):
        m.block("missing_op", "Tensor.view(dtype)")
    shape = []
    for r in rest:
        v = _const(r, f"{what} shape")
        shape += _ints(v)
    if what in ("view", "reshape") and shape:
        if shape == list(_shape(x) or []):
            return alias(x)
        return m.emit("reshape", [x], {"shape": shape}, shape=m.shape_of(m.node), view=True)
    return reshape_to(m, x, what)


def torch_reshape(m, args, kwargs, what):
    b = Sig("input, shape").bind(args, kwargs, what)
    return view(m, [b["input"], b["shape"]], {}, "reshape")


def unsqueeze(m, args, kwargs, what):
    b = Sig("input, dim").bind(args, kwargs, what)
    m.rewrite(f"{what} -> reshape")
    return reshape_to(m, b["input"], what)


def squeeze(m, args, kwargs, what):
    b = Sig("input, dim=None").bind(args, kwargs, what)
    m.rewrite(f"{what} -> reshape")
    return reshape_to(m, b["input"], what)


def flatten(m, args, kwargs, what):
    b = Sig("input, start_dim=0, end_dim=-1").bind(args, kwargs, what)
    return m.emit("flatten", [b["input"]], {"start_dim": int(_c(b, "start_dim", what)),
                                            "end_dim": int(_c(b, "end_dim", what))},
                 shape=m.shape_of(m.node), view=True)


def transpose(m, args, kwargs, what):
    b = Sig("input, dim0, dim1").bind(args, kwargs, what)
    return m.emit("transpose", [b["input"]], {"dim0": int(_c(b, "dim0", what)),
                                              "dim1": int(_c(b, "dim1", what))},
                 shape=m.shape_of(m.node), view=True)


def t_method(m, args, kwargs, what):
    b = Sig("input").bind(args, kwargs, what)
    rank = len(_shape(b["input"]) or [])
    if rank < 2:
        return alias(b["input"])
    return m.emit("transpose", [b["input"]], {"dim0": 0, "dim1": 1}, shape=m.shape_of(m.node),
                  view=True)


def permute(m, args, kwargs, what):
    x = args[0]
    rest = list(args[1:]) + [kwargs[k] for k in ("dims",) if k in kwargs]
    dims = []
    for r in rest:
        dims += _ints(_const(r, "permute dims"))
    return m.emit("permute", [x], {"dims": dims}, shape=m.shape_of(m.node), view=True)


def identity_method(m, args, kwargs, what):
    if what == "contiguous":
        Sig("input, memory_format=None").bind(args, kwargs, what)
    elif what == "clone":
        Sig("input, memory_format=None").bind(args, kwargs, what)
    return alias(args[0])


def to_method(m, args, kwargs, what):
    x = args[0]
    rest = list(args[1:]) + list(kwargs.values())
    if what == "to" and rest and all(
            isinstance(v, C) and (isinstance(v.value, torch.device) or v.value in (
                "cpu", "cuda") or isinstance(v.value, bool)) for v in rest):
        return alias(x)  # a device move: the identity on values
    dt = m.meta.get(m.node)
    src = m.meta.get(m.node.args[0]) if isinstance(m.node.args[0], fx.Node) else None
    if isinstance(dt, torch.Tensor) and isinstance(src, torch.Tensor) and dt.dtype == src.dtype:
        for v in list(args[1:]) + list(kwargs.values()):
            if is_tensorish(v):
                m.block("missing_attr", f"Tensor.{what} with a tensor argument")
        return alias(x)
    m.block("missing_op", f"Tensor.{what} (dtype cast)",
            f"{getattr(src, 'dtype', '?')} -> {getattr(dt, 'dtype', '?')}")


def size_method(m, args, kwargs, what):
    v = m.meta.get(m.node)
    return C(v)


def getattr_fn(m, args, kwargs, what):
    x, attr = args[0], _const(args[1], "getattr")
    if isinstance(x, MinMax):
        if attr in ("values", "indices"):
            return materialize_minmax(m, x, 0 if attr == "values" else 1)
        m.block("missing_op", f"torch.{x.which}(...).{attr}")
    if attr in ("shape", "dtype", "device", "ndim", "is_cuda", "requires_grad"):
        return C(m.meta.get(m.node))
    if attr == "T":
        rank = len(_shape(x) or [])
        if rank < 2:
            return alias(x)
        m.rewrite("x.T -> " + ("transpose(0, 1)" if rank == 2 else "permute(reversed dims)"))
        op, attrs = (("transpose", {"dim0": 0, "dim1": 1}) if rank == 2 else
                     ("permute", {"dims": list(range(rank))[::-1]}))
        return m.emit(op, [x], attrs, shape=m.shape_of(m.node), view=True)
    if attr == "mT":
        m.rewrite("x.mT -> transpose(-2, -1)")
        return m.emit("transpose", [x], {"dim0": -2, "dim1": -1}, shape=m.shape_of(m.node))
    if attr == "data":
        return alias(x)
    m.block("missing_op", f"Tensor.{attr}")


def getitem(m, args, kwargs, what):
    x, idx = args[0], args[1]
    if isinstance(x, MinMax):
        i = _const(idx, "getitem")
        if i in (0, 1, -1, -2):
            return materialize_minmax(m, x, i % 2)
    if isinstance(x, (list, tuple)):
        i = _const(idx, "getitem")
        return x[i]
    src = m.node.args[0]
    if isinstance(x, Unknown) and isinstance(m.meta.get(src) if isinstance(src, fx.Node)
                                             else None, (tuple, list)):
        return Unknown(m.shape_of(m.node))  # an element of a blocked op's tuple result
    if not is_tensorish(x):
        return C(m.meta.get(m.node))
    index = idx if isinstance(idx, tuple) else (idx,)
    consts = []
    for e in index:
        if is_tensorish(e):
            m.block("missing_op", "tensor indexing x[tensor]", "advanced indexing")
        consts.append(_const(e, "index"))
    if all(e == slice(None) or e is Ellipsis or e is None for e in consts):
        if any(e is None for e in consts):
            m.rewrite("x[..., None] -> reshape")
            return reshape_to(m, x, "index with None")
        return alias(x)
    return basic_index(m, x, consts)


def slice_dim(m, x, dim, start, end, step, what):
    """x sliced on one dim with Python's bounds (normalized here); x itself when it takes all."""
    if _shapeless(x):
        return Unknown(None)  # its blocker is recorded already
    shape = list(_shape(x))
    n = shape[dim]
    try:
        s, e, st = slice(start, end, step).indices(n)
    except (TypeError, ValueError) as err:
        m.block("missing_attr", f"{what}: bounds", str(err))
    if st < 1:
        m.block("missing_attr", f"{what}: negative step", f"step {st}")
    if (s, e, st) == (0, n, 1):
        return alias(x)
    shape[dim] = len(range(s, e, st))
    if shape[dim] == 0:
        m.block("missing_attr", f"{what}: selects no element", f"{start}:{end}:{step} of {n}")
    return m.emit("slice", [x], {"dim": dim, "start": s, "end": e, "step": st}, shape=shape,
                  view=True)


def basic_index(m, x, consts):
    """x[i, a:b:c, ..., None]: one slice op per sliced dim; an int is a one-element slice, then a
    reshape drops those dims (and adds the None ones)."""
    shape = _shape(x)
    if isinstance(x, Unknown):
        return Unknown(m.shape_of(m.node))
    if shape is None:
        m.block("missing_attr", "index: unknown input shape")
    taken = sum(1 for e in consts if e is not None and e is not Ellipsis)
    if sum(1 for e in consts if e is Ellipsis) > 1 or taken > len(shape):
        m.block("missing_attr", "index: more indices than dims",
                ", ".join(_show_index(e) for e in consts))
    items = []
    for e in consts:
        items += [slice(None)] * (len(shape) - taken) if e is Ellipsis else [e]
    items += [slice(None)] * (len(shape) - sum(1 for e in items if e is not None))
    cur, d, reshape = x, 0, False
    for e in items:
        if e is None:
            reshape = True
            continue
        if isinstance(e, bool) or not isinstance(e, (int, slice)):
            m.block("missing_op", "tensor indexing x[...] by a non-integer", _show_index(e))
        if isinstance(e, int):
            i = e + shape[d] if e < 0 else e
            if not 0 <= i < shape[d]:
                m.block("missing_attr", "index out of range", f"{e} on a dim of {shape[d]}")
            cur, reshape = slice_dim(m, cur, d, i, i + 1, 1, "index"), True
        else:
            for part in (e.start, e.stop, e.step):
                if part is not None and (isinstance(part, bool) or not isinstance(part, int)):
                    m.block("missing_attr", "slice bound is not an integer", _show_index(e))
            cur = slice_dim(m, cur, d, e.start, e.stop, e.step, "slice")
        d += 1
    if reshape:
        return reshape_to(m, cur, "index")
    return cur


def _shapeless(x):
    return isinstance(x, Unknown) or _shape(x) is None


def _dim_of(m, x, dim, what):
    """dim normalized against x's rank, or Blocked."""
    rank = len(_shape(x))
    d = dim + rank if dim < 0 else dim
    if not 0 <= d < rank:
        m.block("missing_attr", f"{what}: dim out of range", f"dim {dim} of rank {rank}")
    return d


def narrow(m, args, kwargs, what):
    b = Sig("input, dim, start, length").bind(args, kwargs, what)
    if _shapeless(b["input"]):
        return Unknown(m.shape_of(m.node))  # its blocker is recorded already
    x = b["input"]
    dim, start = _dim_of(m, x, int(_c(b, "dim", what)), what), int(_c(b, "start", what))
    length = int(_c(b, "length", what))
    n = _shape(x)[dim]
    start = start + n if start < 0 else start
    if not (0 <= start and length >= 0 and start + length <= n):
        m.block("missing_attr", "narrow out of range", f"dim {dim} start {start} length {length}")
    return slice_dim(m, x, dim, start, start + length, 1, "narrow")


def select(m, args, kwargs, what):
    b = Sig("input, dim, index").bind(args, kwargs, what)
    if _shapeless(b["input"]):
        return Unknown(m.shape_of(m.node))  # its blocker is recorded already
    x = b["input"]
    dim, i = _dim_of(m, x, int(_c(b, "dim", what)), what), int(_c(b, "index", what))
    n = _shape(x)[dim]
    i = i + n if i < 0 else i
    if not 0 <= i < n:
        m.block("missing_attr", "select out of range", f"dim {dim} index {i}")
    m.rewrite("select -> slice, reshape")
    return reshape_to(m, slice_dim(m, x, dim, i, i + 1, 1, "select"), "select")


def split_parts(m, x, dim, sizes, what):
    parts, at = [], 0
    for k in sizes:
        parts.append(slice_dim(m, x, dim, at, at + k, 1, what))
        at += k
    m.rewrite(f"{what} -> slices")
    return tuple(parts)


def split(m, args, kwargs, what):
    b = Sig("input, split_size_or_sections, dim=0").bind(args, kwargs, what)
    if _shapeless(b["input"]):
        return Unknown(None)  # its blocker is recorded already
    x, how = b["input"], _const(b["split_size_or_sections"], what)
    dim = _dim_of(m, x, int(_c(b, "dim", what)), what)
    n = _shape(x)[dim]
    if isinstance(how, int):
        if how < 1:
            m.block("missing_attr", f"{what}: split size < 1", str(how))
        sizes = [min(how, n - at) for at in range(0, n, how)]
    else:
        sizes = [int(k) for k in how]
        if sum(sizes) != n:
            m.block("missing_attr", f"{what}: sections do not add up", f"{sizes} of {n}")
    return split_parts(m, x, dim, sizes, what)


def chunk(m, args, kwargs, what):
    b = Sig("input, chunks, dim=0").bind(args, kwargs, what)
    if _shapeless(b["input"]):
        return Unknown(None)  # its blocker is recorded already
    x, chunks = b["input"], int(_c(b, "chunks", what))
    dim = _dim_of(m, x, int(_c(b, "dim", what)), what)
    n = _shape(x)[dim]
    if chunks < 1:
        m.block("missing_attr", f"{what}: chunks < 1", str(chunks))
    size = -(-n // chunks)
    return split_parts(m, x, dim, [min(size, n - at) for at in range(0, n, size)], what)


def emit_pad(m, x, widths, value, what):
    """F.pad in constant mode; all-zero widths are the identity; negative widths (crops) and
    non-finite fills are refused."""
    widths = _ints(widths)
    if any(w < 0 for w in widths):
        m.block("missing_attr", "pad with negative widths (a crop)", str(widths))
    value = 0.0 if value is None else _real(value)
    if not math.isfinite(value):
        m.block("missing_attr", "pad with a non-finite value", repr(value))
    if not any(widths):
        return alias(x)
    attrs = {"pad": widths}
    if value != 0.0:
        attrs["value"] = value
    return m.emit("pad", [x], attrs, shape=m.shape_of(m.node))


def f_pad(m, args, kwargs, what):
    b = Sig("input, pad, mode='constant', value=None").bind(args, kwargs, what)
    mode = _c(b, "mode", what)
    if mode != "constant":
        m.block("missing_attr", f"{what} mode={mode}", "only constant padding")
    return emit_pad(m, b["input"], _c(b, "pad", what), _c(b, "value", what), what)


def mod_pad(m, mod, path, args, kwargs):
    name = type(mod).__name__
    x = _mod_input(m, args, kwargs, name)
    return emit_pad(m, x, mod.padding, getattr(mod, "value", 0.0), f"nn.{name}")


def flip(m, args, kwargs, what):
    x = args[0] if args else kwargs.get("input")
    rest = list(args[1:]) + [kwargs[k] for k in ("dims",) if k in kwargs]
    dims = _const(rest[0] if len(rest) == 1 else tuple(rest), what)
    dims = _ints(dims)
    if not dims:
        return alias(x)
    return m.emit("flip", [x], {"dims": dims if len(dims) > 1 else dims[0]},
                  shape=m.shape_of(m.node))


def cat_fn(m, args, kwargs, what):
    b = Sig("tensors, dim=0").bind(args, kwargs, what)
    ts = list(b["tensors"]) if isinstance(b["tensors"], (list, tuple)) else None
    if not ts:
        m.block("missing_attr", f"{what}: not a list of tensors")
    if len(ts) == 1:
        return alias(ts[0])
    return emit_cat(m, ts, int(_c(b, "dim", what)), m.shape_of(m.node))


KILN_CAT_ARGS = 64  # data/op_vocab.cpp: cat takes 2 to 64 arguments


def emit_cat(m, ts, dim, out):
    """cat of any number of tensors: more than Kiln's 64 as a cat of cats along the same dim (an
    exact rewrite: concatenation is associative)."""
    if len(ts) <= KILN_CAT_ARGS:
        return m.emit("cat", ts, {"dim": dim}, shape=out)
    ts = [m.tensor(t) for t in ts]
    if any(isinstance(t, Unknown) for t in ts):
        return Unknown(out)
    if out is None:
        m.block("missing_attr", f"cat of {len(ts)} tensors: result shape unknown")
    rank = len(out)
    d = dim + rank if dim < 0 else dim
    m.rewrite(f"cat of more than {KILN_CAT_ARGS} tensors -> cat of cats")
    parts = []
    for i in range(0, len(ts), KILN_CAT_ARGS):
        chunk = ts[i:i + KILN_CAT_ARGS]
        if len(chunk) == 1:
            parts.append(chunk[0])
            continue
        shapes = [t.shape for t in chunk]
        shape = list(out)
        shape[d] = sum(s[d] for s in shapes) if all(s and len(s) == rank for s in shapes) else None
        if shape[d] is None:
            m.block("missing_attr", f"cat of {len(ts)} tensors: part shapes unknown")
        parts.append(m.emit("cat", chunk, {"dim": dim}, shape=shape))
    return emit_cat(m, parts, dim, out)


def stack_fn(m, args, kwargs, what):
    b = Sig("tensors, dim=0").bind(args, kwargs, what)
    ts = list(b["tensors"]) if isinstance(b["tensors"], (list, tuple)) else None
    out = m.shape_of(m.node)
    if not ts or out is None:
        m.block("missing_attr", f"{what}: not a list of tensors of known shape")
    rank = len(out)
    dim = int(_c(b, "dim", what))
    dim = dim + rank if dim < 0 else dim
    if not 0 <= dim < rank:
        m.block("missing_attr", f"{what}: dim out of range", f"dim {dim} of rank {rank}")
    # torch.stack needs equal shapes: each part is the result without its `dim`
    part = out[:dim] + out[dim + 1:]
    shape = part[:dim] + [1] + part[dim:]
    parts = [m.emit("reshape", [t], {"shape": shape}, shape=shape) for t in ts]
    m.rewrite("stack -> reshape, cat")
    if len(parts) == 1:
        return parts[0]
    return emit_cat(m, parts, dim, out)


def _show_index(e):
    if isinstance(e, slice):
        return ":".join("" if v is None else str(v) for v in (e.start, e.stop, e.step)).rstrip(
            ":") or ":"
    return "..." if e is Ellipsis else repr(e)


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


# ---- modules: handler(m, module, path, args, kwargs)

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


# ---- registries

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


# ---------------------------------------------------------------- tracing

def _to_meta(v):
    if isinstance(v, torch.Tensor) and v.device.type != "meta":
        return v.to("meta")
    return v


class MetaProxy(fx.Proxy):
    """A proxy that knows its meta value: sizes, dims, dtype are concrete while tracing (so
    `b, c, h, w = x.shape` and x.view(b, c, -1) trace, and bake these sizes); `device` says cpu
    so that constants made with device=x.device are real."""

    def _meta(self):
        return self.node.meta.get("kiln_meta")

    @property
    def shape(self):
        v = self._meta()
        return v.shape if isinstance(v, torch.Tensor) else fx.Proxy.__getattr__(self, "shape")

    def size(self, dim=None):
        v = self._meta()
        if isinstance(v, torch.Tensor):
            return v.size() if dim is None else v.size(dim)
        return self.tracer.create_proxy("call_method", "size",
                                        (self,) if dim is None else (self, dim), {})

    def dim(self):
        v = self._meta()
        return v.dim() if isinstance(v, torch.Tensor) else \
            self.tracer.create_proxy("call_method", "dim", (self,), {})

    @property
    def ndim(self):
        return self.dim()

    def numel(self):
        v = self._meta()
        return v.numel() if isinstance(v, torch.Tensor) else \
            self.tracer.create_proxy("call_method", "numel", (self,), {})

    @property
    def dtype(self):
        v = self._meta()
        return v.dtype if isinstance(v, torch.Tensor) else fx.Proxy.__getattr__(self, "dtype")

    @property
    def device(self):
        return torch.device("cpu")

    @property
    def is_cuda(self):
        return False

    def __len__(self):
        v = self._meta()
        if isinstance(v, torch.Tensor) and v.dim() > 0:
            return v.shape[0]
        raise RuntimeError("len() of a traced value of unknown shape")

    def __iter__(self):
        # `a, b = self.lstm(x)` / `q, k, v = x.split(...)`: fx's own __iter__ reads the
        # caller's bytecode, which Python 3.11 changed; the meta value knows the length
        v = self._meta()
        if isinstance(v, (tuple, list)):
            return iter([self[i] for i in range(len(v))])
        if isinstance(v, torch.Tensor) and v.dim() > 0:
            return iter([self[i] for i in range(v.shape[0])])
        return super().__iter__()

    def __getattr__(self, k):
        if k in ("node", "tracer", "_meta"):
            raise AttributeError(k)
        return MetaAttribute(self, k)


class MetaAttribute(MetaProxy):
    def __init__(self, root, attr):
        self.root, self.attr, self.tracer, self._node = root, attr, root.tracer, None

    @property
    def node(self):
        if self._node is None:
            self._node = self.tracer.create_proxy("call_function", builtins.getattr,
                                                  (self.root, self.attr), {}).node
        return self._node

    def __call__(self, *args, **kwargs):
        return self.tracer.create_proxy("call_method", self.attr, (self.root,) + args, kwargs)


class Tracer(fx.Tracer):
    """torch.nn's own modules are leaves (mapped whole); the problem's modules are traced
    through (Sequential / ModuleList / ModuleDict are containers, never leaves). Every node
    gets node.meta["kiln_meta"]: its value on meta tensors (None where that failed)."""

    def __init__(self, meta_args):
        super().__init__()
        # buffers read in forward become get_attr nodes (params with their init), not constants
        # computed during tracing (minGPT's causal mask: tril(ones) == 0)
        self.proxy_buffer_attributes = True
        self.meta_args, self.meta_errors, self._in_meta = meta_args, [], False

    # while a meta value is computed, modules run plainly (no proxies, no nodes)
    def call_module(self, m, forward, args, kwargs):
        if self._in_meta:
            return forward(*args, **kwargs)
        return super().call_module(m, forward, args, kwargs)

    def getattr(self, attr, attr_val, parameter_proxy_cache):
        if self._in_meta:
            return attr_val
        return super().getattr(attr, attr_val, parameter_proxy_cache)

    def is_leaf_module(self, m, qualname):
        if isinstance(m, (nn.Sequential, nn.ModuleList, nn.ModuleDict)):
            return False
        return type(m).__module__.startswith("torch.nn")

    def proxy(self, node):
        return MetaProxy(node, self)

    def create_proxy(self, kind, target, args, kwargs, name=None, type_expr=None,
                     proxy_factory_fn=None):
        p = super().create_proxy(kind, target, args, kwargs, name, type_expr, proxy_factory_fn)
        meta = None
        self._in_meta = True
        try:
            if kind == "placeholder":
                meta = self.meta_args.get(target)
            elif kind == "get_attr":
                obj = self.root
                for part in target.split("."):
                    obj = getattr(obj, part)
                meta = _to_meta(obj)
            elif kind in ("call_function", "call_method", "call_module"):
                def unwrap(a):
                    if isinstance(a, fx.Proxy):
                        v = a.node.meta.get("kiln_meta")
                        if v is None:
                            raise LookupError("an argument has no meta value")
                        return v
                    if isinstance(a, torch.device):  # x.to(h.device): stay on meta
                        return torch.device("meta")
                    return _to_meta(a)
                margs = fx.node.map_aggregate(args, unwrap)
                mkwargs = fx.node.map_aggregate(kwargs, unwrap)
                with torch.no_grad():
                    if kind == "call_function":
                        meta = target(*margs, **mkwargs)
                    elif kind == "call_method":
                        meta = getattr(margs[0], target)(*margs[1:], **mkwargs)
                    else:  # the model is on meta: its leaf modules run as they are
                        meta = self.root.get_submodule(target).forward(*margs, **mkwargs)
        except Exception as e:
            if not isinstance(e, LookupError):
                self.meta_errors.append(f"{target if isinstance(target, str) else _qn(target)}:"
                                        f" {_short(e)}")
            meta = None
        finally:
            self._in_meta = False
        p.node.meta["kiln_meta"] = meta
        return p


def _qn(t):
    try:
        return fx.node._get_qualified_name(t)
    except Exception:
        return getattr(t, "__name__", repr(t))


def _register_meta_kernels():
    """Meta kernels LibTorch 1.13 lacks, for the shapes of ops KernelBench uses."""
    lib = torch.library.Library("aten", "IMPL", "Meta")

    def out_size(i, k, p, s, d, ceil):
        o = (i + 2 * p - d * (k - 1) - 1 + ((s - 1) if ceil else 0)) // s + 1
        if ceil and (o - 1) * s >= i + p:
            o -= 1
        return o

    def max_pool3d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1,
                                ceil_mode=False):
        k = _ints(kernel_size, 3)
        k = k * 3 if len(k) == 1 else k
        st = _ints(stride, 3) if stride not in ((), []) else k
        st = st * 3 if len(st) == 1 else st
        pd = _ints(padding, 3)
        pd = pd * 3 if len(pd) == 1 else pd
        dl = _ints(dilation, 3)
        dl = dl * 3 if len(dl) == 1 else dl
        shape = list(x.shape[:-3]) + [out_size(x.shape[-3 + i], k[i], pd[i], st[i], dl[i],
                                               ceil_mode) for i in range(3)]
        return (torch.empty(shape, dtype=x.dtype, device="meta"),
                torch.empty(shape, dtype=torch.long, device="meta"))

    try:
        lib.impl("max_pool3d_with_indices", max_pool3d_with_indices)
    except RuntimeError:
        pass  # a LibTorch that has it
    return lib


_META_LIB = _register_meta_kernels()


def make_wrapper(model, items):
    """A module whose forward takes only get_inputs()'s tensors, the others bound as
    constants, and calls the model: placeholders are tensors, constants are baked in."""
    sig_names = []
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    for p in params:
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            sig_names.append(p.name)
        elif p.kind == p.VAR_POSITIONAL:
            sig_names += [f"{p.name}{i}" for i in range(len(items) - len(sig_names))]
            break
    if len(sig_names) < len(items):
        raise Blocked("format", "get_inputs() returns more items than forward takes",
                      f"{len(items)} items, forward({', '.join(sig_names)})")
    tensor_names, call = [], []
    for i, item in enumerate(items):
        name = re.sub(r"\W", "_", sig_names[i])
        if isinstance(item, torch.Tensor):
            tensor_names.append(name)
            call.append(name)
        else:
            call.append(f"self.consts[{i}]")
    src = (f"def forward(self, {', '.join(tensor_names)}):\n"
           f"    return self.m({', '.join(call)})\n")
    ns = {}
    exec(src, ns)

    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model
            self.consts = list(items)

    Wrapper.forward = ns["forward"]
    return Wrapper(), tensor_names


def prune(ops, outputs):
    """Only the ops the outputs need, in order."""
    need, keep = set(outputs), []
    for op in reversed(ops):
        if op["out"] in need:
            keep.append(op)
            need.update(op["args"])
    return keep[::-1], need


def spec_bytes(spec, shapes):
    n = sum(math.prod(d["shape"]) * 4 for d in spec["inputs"] + spec["params"])
    for op in spec["ops"]:
        s = shapes.get(op["out"])
        n += math.prod(s) * (8 if op["op"] in ("argmax", "argmin") else 4) if s is not None \
            else 0
    return n


def spec_peak_bytes(spec, shapes):
    """The peak of live tensors as Kiln's reference holds them (data/task_check.cpp peak_bytes):
    inputs and params throughout, an op result until its last reader, outputs to the end."""
    ops, outs = spec["ops"], set(spec["outputs"])
    last = {}
    for i, op in enumerate(ops):
        for a in op["args"]:
            last[a] = i
    size = {op["out"]: (math.prod(shapes[op["out"]]) if shapes.get(op["out"]) is not None else 0) *
            (8 if op["op"] in ("argmax", "argmin") else 4) for op in ops}
    live = sum(math.prod(d["shape"]) * 4 for d in spec["inputs"] + spec["params"])
    peak = live
    for i, op in enumerate(ops):
        live += size[op["out"]]
        peak = max(peak, live)
        for o in ops[:i + 1]:
            if o["out"] not in outs and last.get(o["out"], ops.index(o)) == i:
                live -= size[o["out"]]
    return peak


def blas_gflop(spec, shapes):
    """Estimated GFLOP of one forward's linear / matmul / bmm ops: the ops this machine's
    LibTorch runs through the reference BLAS (a few GFLOP/s), the check's main cost."""
    for d in spec["inputs"] + spec["params"]:
        shapes.setdefault(d["name"], d["shape"])
    total = 0
    for op in spec["ops"]:
        if op["op"] not in ("linear", "matmul", "bmm"):
            continue
        out, a = shapes.get(op["out"]), shapes.get(op["args"][0])
        if out is None or not a:
            continue
        total += 2 * math.prod(out) * a[-1]
    return total / 1e9


# ---------------------------------------------------------------- TOML

def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        r = repr(v)
        return r if any(c in r for c in ".en") else r + ".0"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=True)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        if not v:
            return "{}"
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"no TOML for {type(v).__name__}")


def toml_key(k):
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k, ensure_ascii=True)


def toml_source(s):
    """A long text (a problem's source) as a multi-line literal string, read back as is; a basic
    string where it cannot be one (it holds ''' or a control character, CR included, or ends in
    a quote)."""
    if "'''" in s or s.endswith("'") or re.search(r"[\x00-\x08\x0b-\x1f\x7f]", s):
        # UTF-8 as is: JSON's ASCII escapes write a character past U+FFFF as a surrogate pair,
        # which TOML refuses
        return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")
    return "'''\n" + s + "'''"


def to_toml(spec):
    lines = ["# generated by tools/kernelbench_import.py -- re-run the importer, do not edit"]
    for k in ("name", "level", "dtype", "description", "outputs"):
        lines.append(f"{k} = {toml_value(spec[k])}")
    if "tolerance" in spec:
        lines += ["", "[tolerance]"] + [f"{k} = {toml_value(v)}"
                                        for k, v in spec["tolerance"].items()]
    for section in ("inputs", "params", "ops"):
        for e in spec[section]:
            lines += ["", f"[[{section}]]"]
            lines += [f"{k} = {toml_value(v)}" for k, v in e.items()]
    if "kernelbench" in spec:  # a table: after the arrays of tables, or it would be one's
        lines += ["", "[kernelbench]"]
        lines += [f"{k} = {toml_source(v) if k == 'source' else toml_value(v)}"
                  for k, v in spec["kernelbench"].items()]
    text = "\n".join(lines) + "\n"
    if tomllib.loads(text) != {k: v for k, v in spec.items() if v != []}:
        raise AssertionError("internal: TOML round trip differs")
    return text


# ---------------------------------------------------------------- one problem

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


def rebind(meta_gm, model, items):
    """The traced graph over the real model: a GraphModule whose modules and parameters are
    the real model's (constants tracing made are copied over)."""
    wrapper, _ = make_wrapper(model, items)
    for n in meta_gm.graph.nodes:
        if n.op == "get_attr":
            try:
                _resolve(wrapper, n.target)
            except AttributeError:
                setattr(wrapper, n.target, _resolve(meta_gm, n.target))
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
    ns, scaling, source = exec_problem(prob["code"], prob["source"], conf["scale_batch"])
    res["scaling"] = scaling
    if "note" in scaling:
        res["notes"].append(scaling["note"])
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
    if level is None:
        level = 1 if len(ops) == 1 else 2
        res["level"] = level
        res["notes"].append(f"level inferred ({level}) from the op count")
        prob["name"] = res["name"] = f"kb_l{level}_" + prob["name"][3:]
    desc = f"KernelBench {short_source(prob['source'])}"
    if scaling.get("batch_size"):
        b = scaling["batch_size"]
        desc += f"; batch_size {b['from']} -> {b['to']} (--scale-batch {conf['scale_batch']:g})"
    elif conf["scale_batch"] != 1.0:
        desc += "; sizes as given (no batch_size to scale)"
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
             "const_params": m.const_params, "index": m.index_values}
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
                      model):
    """The [kernelbench] table: what running a KernelBench ModelNew against the task needs (the
    source as run, Model's init arguments, forward's arguments by task input, and the Model's
    state_dict key each task param is loaded into). Returns (table, blockers): a param a rewrite
    made (a tensor made in forward, triu(x)'s mask) has no key and is left out (a ModelNew makes
    its own); one the Model holds outside its state_dict (a non-persistent buffer) refuses the
    problem, since a ModelNew could not be given it."""
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
    state_dict = {}
    for p in params:
        path = param_paths.get(p["name"])
        if path is None:  # a ones / zeros / triangle mask a rewrite made: ModelNew makes its own
            continue
        if path not in keys:
            blockers.append(Blocked("load", "a param that is not in the Model's state_dict",
                                    f"param '{p['name']}' is Model.{path} (a non-persistent "
                                    "buffer or a plain tensor attribute)"))
        else:
            state_dict[p["name"]] = path
    table = {"source": source, "init_inputs": init_inputs, "forward": forward,
             "bool_inputs": [n for n in tensor_names if n in bool_inputs],
             "state_dict": state_dict, "model_keys": keys}
    return table, blockers


class BlockedMany(Exception):
    def __init__(self, blockers, res):
        super().__init__("; ".join(str(b) for b in blockers))
        self.blockers, self.res = blockers, res


def _sha1(text):
    import hashlib
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def kiln_validate(kiln, threads, path, rows_path, max_ops):
    cmd = [kiln, "--threads", str(threads), "--log-level", "warn", "tasks", "validate",
           "--device", "cpu", "--json", rows_path, "--digest", str(DIGEST_SAMPLES),
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
                                   conf["max_ops"])
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
    model, _ = build_model(state["ns"], state["init_items"], meta=False)
    gm = rebind(state["gm"], model, state["items"])
    real = {}
    for d in spec["params"]:
        if d["name"] in state["param_paths"]:
            t = _resolve(model, state["param_paths"][d["name"]])
            if list(t.shape) != d["shape"]:
                raise Blocked("check", "param shape differs on the real model", d["name"])
            Mapper.sanity(t, d, state["param_paths"][d["name"]])
            real[d["name"]] = t
    task = {"name": spec["name"], "origin": path, "spec": spec}
    src, (atol, rtol) = tb.generate(task)
    mod = tb.load_module({"filename": f"<kiln task {spec['name']}>", "source": src,
                          "name": spec["name"]})
    dig = row["digest"]
    with torch.no_grad():
        params = mod["make_params"]("cpu")
        inputs = mod["make_inputs"]("cpu", dig.get("input_seed", tb.INPUT_SEED))
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
        tensors = [by_name[n].bool() if n in state["bool_inputs"] else by_name[n]
                   for n in state["tensor_names"]]
        outs = {}
        t0 = time.perf_counter()
        for who, fn in (("Model", lambda: model(*_model_args(state, tensors))),
                        ("traced GraphModule", lambda: gm(*[x.clone() for x in tensors]))):
            try:
                y = fn()
            except Exception as e:
                raise Blocked("check", f"the {who} fails on Kiln's tensors", _short(e))
            ys = list(y) if isinstance(y, (list, tuple)) else [y]
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
        tol = float32_tolerance(model, state, tensors, outs["Model"], (atol, rtol), res)
        if tol is not None:
            spec["tolerance"] = {"atol": tol, "rtol": tol}
            atol = rtol = tol
        flags = degeneracy(spec, outs["Model"], by_name, atol, rtol, row, state["index"])
    return flags


def float32_tolerance(model, state, tensors, ys32, default, res):
    """The task's tolerance when float32 itself cannot meet the default: PyTorch's float32 forward
    against its float64 forward. A correct float32 program differs from the float32 reference by
    up to about twice that gap (each side rounds its own way), so the tolerance must hold 2x the
    gap; past KernelBench's own 1e-2 the problem is refused as ill-conditioned."""
    if default != (1e-4, 1e-4):
        return None
    model64 = copy.deepcopy(model).double()
    args = [x.double() if x.is_floating_point() else x for x in tensors]
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # tensors the forward makes itself
    try:
        y = model64(*_model_args(state, args))
    except Exception as e:
        res["notes"].append(f"float64 forward fails ({_short(e)}): float32 rounding not measured")
        return None
    finally:
        torch.set_default_dtype(saved)
    worst, where = 0.0, None
    for name, a, b in zip(state["spec"]["outputs"], ys32,
                          list(y) if isinstance(y, (list, tuple)) else [y]):
        if name in state["index"] or not a.is_floating_point():
            continue
        need = (2 * (a.double() - b).abs() / (1 + b.abs())).max().item() if a.numel() else 0.0
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


def _resolve(root, path):
    obj = root
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _model_args(state, tensors):
    it = iter(x.clone() for x in tensors)
    return [next(it) if isinstance(item, torch.Tensor) else item for item in state["items"]]


def degeneracy(spec, outs, inputs, atol, rtol, row, index):
    flags = []
    verdict = row.get("verdict") or ""
    if verdict.startswith("degenerate"):
        flags.append("kiln: " + verdict)
    for name, y in zip(spec["outputs"], outs):
        if name in index or not y.is_floating_point():
            continue
        y = y.detach().double()
        allowed = atol + rtol * y.abs()
        share = float((y.abs() <= allowed).double().mean()) if y.numel() else 1.0
        if share > ZERO_SHARE_LIMIT:
            flags.append(f"output '{name}': an all-zeros output is within tolerance on "
                         f"{100 * share:.2f}% of its elements")
        for iname, x in inputs.items():
            if list(x.shape) == list(y.shape) and bool(((x.double() - y).abs() <= allowed).all()):
                flags.append(f"output '{name}': copying input '{iname}' passes (the task is "
                             "the identity on these inputs)")
    return flags


def _shape_failure(bm):
    return len(bm.blockers) == 1 and bm.blockers[0].kind == "load" and \
        bm.blockers[0].what == "shape propagation on meta tensors failed"


def worker_main(prob, conf, conn):
    """One problem in its own process; sends the result dict."""
    torch.set_num_threads(conf["threads"])
    res = {"source": prob["source"], "name": prob["name"], "level": prob["level"],
           "status": "rejected", "blockers": [], "rewrites": [], "notes": []}
    t0 = time.perf_counter()
    try:
        try:
            try:
                state, res = map_problem(prob, conf)
            except BlockedMany as bm:
                if conf["scale_batch"] == 1 or not _shape_failure(bm):
                    raise
                # KernelBench's hinge loss uses batch_size as a feature size too: scaled, its own
                # shapes disagree. Map it at its own sizes (then checked, or too_large, as those say).
                state, res = map_problem(prob, dict(conf, scale_batch=1))
                res["notes"].append(f"at --scale-batch {conf['scale_batch']:g} its shapes "
                                    f"disagree ({bm.blockers[0].detail}): sizes as given")
        except BlockedMany as bm:
            res = bm.res
            raise
        if conf["no_check"]:
            res["status"] = "mappable"
        elif res["bytes"] > conf["max_mib"] * 2 ** 20:
            res["status"] = "too_large"
            res["blockers"] = [Blocked("too_large", "too large to check here",
                                       f"tensors need {res['bytes'] / 2 ** 20:.0f} MiB, over "
                                       f"--max-mib {conf['max_mib']:g}").as_dict()]
        elif res["blas_gflop"] > conf["max_gflop"]:
            res["status"] = "too_large"
            res["blockers"] = [Blocked("too_large", "too slow to check here",
                                       f"linear / matmul / bmm need {res['blas_gflop']:.1f} "
                                       f"GFLOP per forward, over --max-gflop "
                                       f"{conf['max_gflop']:g}").as_dict()]
        else:
            with tempfile.TemporaryDirectory(prefix="kiln_kb_") as tmp:
                flags = check_problem(state, res, conf, tmp)
            res["degenerate"] = flags
            res["status"] = "degenerate" if flags and not conf["allow_degenerate"] \
                else "imported"
            res["toml"] = to_toml(state["spec"])
        res["name"] = state["spec"]["name"]
        res["level"] = state["spec"]["level"]
    except BlockedMany as bm:
        res["blockers"] = [b.as_dict() for b in bm.blockers]
    except Blocked as b:
        res["blockers"] = res.get("blockers", []) + [b.as_dict()]
        res["status"] = "rejected"
    except Exception as e:
        res["blockers"] = [{"kind": "internal", "what": "importer error", "detail": _short(e)}]
        res["traceback"] = traceback.format_exc()
    res["seconds"] = round(time.perf_counter() - t0, 2)
    conn.send(res)
    conn.close()


# ---------------------------------------------------------------- driver

def run_all(probs, conf, progress):
    """Each problem in a forked process (a crash or a hang costs that problem only)."""
    ctx = mp.get_context("fork")
    pending = list(enumerate(probs))
    running = {}  # index -> (process, conn, start)
    results = [None] * len(probs)
    while pending or running:
        while pending and len(running) < conf["jobs"]:
            i, prob = pending.pop(0)
            r, w = ctx.Pipe(duplex=False)
            p = ctx.Process(target=worker_main, args=(prob, conf, w), daemon=True)
            p.start()
            w.close()
            running[i] = (p, r, time.time())
        done = []
        for i, (p, r, start) in running.items():
            res = None
            if r.poll(0.05):
                try:
                    res = r.recv()
                except EOFError:
                    res = None
                p.join()
            elif not p.is_alive():
                p.join()
            elif time.time() - start > conf["timeout"]:
                os.kill(p.pid, signal.SIGKILL)
                p.join()
                res = _failed(probs[i], "timeout", f"over --timeout {conf['timeout']} s")
            else:
                continue
            if res is None:
                code = p.exitcode
                why = f"signal {-code}" if code is not None and code < 0 else f"exit {code}"
                res = _failed(probs[i], "crash", f"the worker process died ({why}; "
                              "out of memory?)")
            res["seconds"] = res.get("seconds", round(time.time() - start, 2))
            results[i] = res
            done.append(i)
            progress(i, res)
        for i in done:
            running.pop(i)
        if not done and running:
            time.sleep(0.05)
    return results


def _failed(prob, kind, detail):
    return {"source": prob["source"], "name": prob["name"], "level": prob["level"],
            "status": "rejected", "blockers": [{"kind": kind, "what": kind, "detail": detail}],
            "rewrites": [], "notes": []}


def rank_missing(results):
    table = {}
    for r in results:
        if r["status"] != "rejected":
            continue
        keys = []
        for b in r["blockers"]:
            if b["kind"] in RANKED_KINDS and (b["kind"], b["what"]) not in keys:
                keys.append((b["kind"], b["what"]))
        others = {b["kind"] for b in r["blockers"]} - set(RANKED_KINDS)
        for k in keys:
            e = table.setdefault(k, {"kind": k[0], "what": k[1], "problems": 0, "alone": 0,
                                     "levels": {}, "examples": []})
            e["problems"] += 1
            e["alone"] += len(keys) == 1 and not others
            lv = str(r["level"])
            e["levels"][lv] = e["levels"].get(lv, 0) + 1
            if len(e["examples"]) < 5:
                e["examples"].append(r["source"])
    return sorted(table.values(), key=lambda e: (-e["problems"], -e["alone"], e["what"]))


def summarize(results):
    levels = {}
    for r in results:
        lv = levels.setdefault(str(r["level"]), {"problems": 0, **{s: 0 for s in STATUSES},
                                                 "rejected_by_kind": {},
                                                 "degenerate_flagged": 0})
        lv["problems"] += 1
        lv[r["status"]] += 1
        if r.get("degenerate"):
            lv["degenerate_flagged"] += 1
        if r["status"] == "rejected":
            for kind in sorted({b["kind"] for b in r["blockers"]}):
                lv["rejected_by_kind"][kind] = lv["rejected_by_kind"].get(kind, 0) + 1
    return levels


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog=os.environ.get("KILN_IMPORT_PROG", "kernelbench_import.py"), allow_abbrev=False,
        description="Import KernelBench problems as Kiln task spec v1 files (exactly or not "
                    "at all).", epilog="See the module docstring for the method.")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="problem .py file, folder of them, or JSON Lines of {\"code\": ...}")
    p.add_argument("--from", dest="source_format", default="kernelbench",
                   help="input format (only: kernelbench)")
    p.add_argument("--out", metavar="DIR", help="write DIR/level<N>/<name>.toml")
    p.add_argument("--scale-batch", type=float, default=1.0, metavar="F",
                   help="batch_size -> max(1, round(batch_size * F)), 0 < F <= 1")
    p.add_argument("--report", metavar="OUT.json")
    p.add_argument("--kiln", default=None, metavar="BIN",
                   help="kiln binary (default: $KILN, else build/kiln next to tools/)")
    p.add_argument("--allow-degenerate", action="store_true",
                   help="write degenerate tasks too (still flagged in the report)")
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="problems in parallel")
    p.add_argument("--threads", type=int, default=0, metavar="T",
                   help="torch / kiln threads per job (default: cores / jobs)")
    p.add_argument("--level", type=int, default=None, metavar="N",
                   help="level for problems whose path or record does not say")
    p.add_argument("--max-mib", type=float, default=2048, metavar="M",
                   help="largest task (all tensors) checked here; larger: too_large")
    p.add_argument("--max-ops", type=int, default=KILN_MAX_OPS, metavar="N",
                   help="longest task written (kiln's limit, tasks.max_ops / --max-ops: %(default)s)")
    p.add_argument("--max-gflop", type=float, default=16.0, metavar="G",
                   help="largest linear/matmul/bmm work per forward checked here (this "
                        "LibTorch's reference BLAS runs a few GFLOP/s); larger: too_large")
    p.add_argument("--timeout", type=float, default=900.0, metavar="S",
                   help="seconds per problem")
    p.add_argument("--no-check", action="store_true",
                   help="map only (dry run): no kiln, nothing written")
    a = p.parse_args(argv)
    if a.source_format != "kernelbench":
        raise UsageError(f"--from {a.source_format}: only 'kernelbench' is supported")
    if not 0 < a.scale_batch <= 1:
        raise UsageError(f"--scale-batch {a.scale_batch}: expected 0 < F <= 1")
    if a.jobs < 1 or a.threads < 0 or a.max_mib <= 0 or a.timeout <= 0 or a.max_gflop <= 0:
        raise UsageError("--jobs, --max-mib and --timeout must be positive, --threads >= 0")
    if a.level is not None and not 1 <= a.level <= 3:
        raise UsageError(f"--level {a.level}: expected 1, 2 or 3")
    if not a.no_check and not a.out:
        raise UsageError("--out DIR is required (or --no-check for a dry run)")
    if not a.no_check:
        if a.kiln is None:
            a.kiln = os.environ.get("KILN") or os.path.join(
                os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "kiln")
        if not (os.path.isfile(a.kiln) and os.access(a.kiln, os.X_OK)):
            raise UsageError(f"--kiln {a.kiln}: no such executable (build kiln or pass --kiln)")
    if a.threads == 0:
        a.threads = max(1, (os.cpu_count() or 1) // a.jobs)
    return a


def main(argv):
    t_start = time.perf_counter()
    args = parse_args(argv)
    probs = load_problems(args.paths, args.level)
    assign_names(probs)
    conf = {"scale_batch": args.scale_batch, "kiln": args.kiln, "threads": args.threads,
            "allow_degenerate": args.allow_degenerate, "max_mib": args.max_mib,
            "max_gflop": args.max_gflop, "max_ops": args.max_ops,
            "timeout": args.timeout, "no_check": args.no_check, "jobs": args.jobs}
    if args.out:
        try:
            os.makedirs(args.out, exist_ok=True)
        except OSError as e:
            raise UsageError(f"--out {args.out}: cannot create: {e.strerror}")
    total, count = len(probs), [0]
    print(f"kernelbench_import: {total} problem(s), --scale-batch {args.scale_batch:g}, "
          f"{args.jobs} job(s) x {args.threads} thread(s)"
          + (", dry run (--no-check)" if args.no_check else ""), file=sys.stderr, flush=True)

    def progress(i, res):
        count[0] += 1
        line = f"[{count[0]:>{len(str(total))}}/{total}] {probs[i]['source']}: {res['status']}"
        if res["status"] in ("imported", "mappable"):
            line += f" as {res['name']} ({res.get('ops')} ops)"
        if res.get("degenerate"):
            line += f"; degenerate: {res['degenerate'][0]}"
        if res["blockers"]:
            line += ": " + "; ".join(f"{b['what']}" + (f" ({b['detail']})" if b["detail"] else "")
                                     for b in res["blockers"][:3])
            if len(res["blockers"]) > 3:
                line += f"; +{len(res['blockers']) - 3} more"
        line += f"  [{res.get('seconds', 0):.1f} s]"
        print(line, file=sys.stderr, flush=True)

    results = run_all(probs, conf, progress)
    written = []
    for r in results:
        toml_text = r.pop("toml", None)
        if r["status"] == "imported" and toml_text:
            d = os.path.join(args.out, f"level{r['level']}")
            os.makedirs(d, exist_ok=True)
            path = os.path.join(d, r["name"] + ".toml")
            with open(path, "w", encoding="utf-8") as f:  # the source may be any Unicode
                f.write(toml_text)
            r["out"] = path
            written.append(path)
    levels = summarize(results)
    missing = rank_missing(results)
    shapes_check = None
    if written and args.kiln:
        p = subprocess.run([args.kiln, "--log-level", "warn", "tasks", "validate",
                            "--shapes-only", "--max-ops", str(args.max_ops)] + written,
                           capture_output=True, text=True)
        shapes_check = {"exit": p.returncode, "tasks": len(written),
                        "tail": (p.stdout + p.stderr).strip().splitlines()[-1:]}
    print_summary(levels, missing, shapes_check)
    if args.report:
        doc = {"kiln_kernelbench_import": 1, "torch": torch.__version__,
               "args": {k: v for k, v in vars(args).items()},
               "summary": levels, "missing": missing, "shapes_only_validate": shapes_check,
               "wall_s": round(time.perf_counter() - t_start, 1), "problems": results}
        with open(args.report, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


def print_summary(levels, missing, shapes_check):
    print("level  problems  imported  degenerate  rejected  too_large  mappable")
    for lv in sorted(levels):
        s = levels[lv]
        print(f"{lv:>5}  {s['problems']:>8}  {s['imported']:>8}  {s['degenerate']:>10}  "
              f"{s['rejected']:>8}  {s['too_large']:>9}  {s['mappable']:>8}")
        if s["rejected_by_kind"]:
            print("       rejected by kind: " + ", ".join(
                f"{k} {v}" for k, v in sorted(s["rejected_by_kind"].items(),
                                              key=lambda kv: -kv[1])))
    if missing:
        print("missing ops / attributes, by problems blocked (alone = its only blocker):")
        for e in missing:
            print(f"  {e['problems']:>4}  alone {e['alone']:>3}  [{e['kind']}] {e['what']}")
    if shapes_check:
        print(f"kiln tasks validate --shapes-only on {shapes_check['tasks']} written task(s): "
              f"exit {shapes_check['exit']}; {' '.join(shapes_check['tail'])}")


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except UsageError as e:
        print(f"kernelbench_import.py: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
