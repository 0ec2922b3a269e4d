#!/usr/bin/env python3
"""torch.compile baselines for Kiln tasks, with a fidelity check against Kiln's reference.

For every task of the given suites this script writes the task as PyTorch code (a function
`forward(<inputs...>, <params...>)` with exactly the semantics of data/reference.cpp), checks that
code against Kiln's own reference run (`kiln tasks validate --digest`: same params, same inputs,
output digests within the task tolerance), then times it eagerly and under torch.compile by the
pool's method (executor/timing.cpp) and writes the baselines file of docs/DESIGN.md.

    # on a GPU machine (PyTorch >= 2.0): for `kiln eval --baselines` and `[pool] baselines`
    python3 tools/torch_baselines.py --device cuda --suite data/suites/level1/gpu \\
        --suite data/suites/level2/gpu --suite data/suites/level3/gpu \\
        --jobs 4 --out baselines_h200.json --report baselines_h200.report.json --emit /tmp/kiln_py

    # anywhere with PyTorch (1.13 is enough): only check the generated code against Kiln
    /usr/bin/python3 tools/torch_baselines.py --fidelity-only --device cpu \\
        --suite data/suites/level1/cpu --report /tmp/fid.json

Options (see --help): --suite PATH (repeatable: a directory searched recursively for *.toml and
*.jsonl files, sorted like Kiln does, a .toml file or a .jsonl file), --only NAME (repeatable),
--max-tasks N (the first N in Kiln's order), --kiln PATH (default ./build/kiln), --validated FILE
(reuse the JSON Lines of an earlier `kiln tasks validate --json F --digest 256` on the same device
instead of running kiln), --device, --threads (LibTorch threads for kiln and torch on cpu), --mode
(torch.compile mode), --jobs N (worker processes: they compile in parallel, time one at a time),
--time-cap-ms, --emit DIR (one readable, runnable <task>.py per task), --out FILE, --report FILE.

Method. Params are drawn with the task's param_seed (by default fnv1a64(name) & 0x7fffffffffff)
and inputs with seed 7, by the same generator calls as reference.cpp's draw_all(), so they are
bit-identical to Kiln's (a
difference is reported as "inputs differ", a replication failure, not an op-semantics one). Outputs
must match Kiln's digest: every sample within atol + rtol * |ref|, sums within atol * numel + rtol *
abs_sum, equal shapes and non-finite counts (argmax / argmin exactly). TF32 is off, as in Kiln.
Timing: 2 warm-up calls, then trials of (untimed cache flush, one timed call) until >= 5 trials
and cv <= 1%, or --time-cap-ms of trial-loop wall time, or 500 trials; the median is reported. CUDA
calls are timed with events on the current stream and a device synchronize; cpu calls with
perf_counter.
Params are passed to forward() as arguments, as Kiln's kernels receive them (under
mode=reduce-overhead CUDA graphs therefore copy them on every call, like any input).
A task gets a compile_ms entry only if its fidelity is ok, its timing worked and the compiled
function's outputs match eager ones (allclose, task tolerance).

Exit status: 0 if every task's fidelity is ok (and, when timing, every task got both baselines);
1 if any task failed; 2 for usage errors (bad path or option, kiln missing, no torch.compile).

TEST AID ONLY: --fake-compile uses the eager function as the "compiled" one so that the timing path
can be exercised where torch.compile does not exist (PyTorch 1.13). Its numbers are not
torch.compile baselines; files written with it say mode "test-aid:no-compile".
"""
import argparse
import builtins
import json
import keyword
import linecache
import math
import multiprocessing as mp
import os
import platform
import queue
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import traceback
import warnings

try:
    import torch
except ImportError:
    sys.exit("torch_baselines.py: needs PyTorch (import torch failed)")

INPUT_SEED = 7         # data/task_validate.hpp digest_input_seed: the inputs of Kiln's digests
TIMING_SEED = 8        # fresh inputs for phase B's timing
DIGEST_SAMPLES = 256   # samples per output digest (params / inputs get min(this, 32))
DEFAULT_TOL = {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (2e-2, 2e-2)}
FINFO_EPS = {"float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}  # rms_norm eps
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


class TaskError(Exception):
    """A problem with one task; the message names the task (and op / field)."""


class UsageError(Exception):
    """Exit status 2."""


# ---------------------------------------------------------------- loading (data/task_set.cpp)

def param_seed(spec):
    """The seed Kiln draws a task's params from: its param_seed, else one from its name
    (data/reference.cpp default_param_seed)."""
    seed = spec.get("param_seed")
    if seed is None:
        return fnv1a64(spec["name"]) & 0x7FFFFFFFFFFF
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= 0x7FFFFFFFFFFF:
        raise TaskError(f"param_seed {seed!r}: expected an integer in [0, 2^47)")
    return seed


def fnv1a64(text):
    h = 14695981039346656037
    for c in text.encode("utf-8"):
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def load_suites(paths):
    """Tasks in Kiln's order: each path in turn; a directory's .toml / .jsonl files recursively
    (symlinked directories not followed, like fs::recursive_directory_iterator), sorted by path
    components like std::sort over fs::path. Returns (tasks, errors); a missing path is a
    UsageError."""
    tasks, errors, names = [], [], {}

    def add(t, origin, scope):
        name = t.get("name") if isinstance(t, dict) else None
        if not isinstance(name, str) or not name:
            errors.append((None, f"{origin}: name: missing or not a string"))
            return
        seen = names.setdefault(scope, set())
        if name in seen:
            errors.append((name, f"{origin}: task '{name}': name: already used by another task "
                                 "in the same suite"))
            return
        seen.add(name)
        tasks.append({"name": name, "origin": origin, "spec": t})

    def load_file(p):
        ext = os.path.splitext(p)[1]
        try:
            with open(p, "rb") as f:
                data = f.read()
        except OSError as e:
            errors.append((None, f"{p}: cannot open file: {e.strerror}"))
            return
        if ext == ".toml":
            try:
                add(tomllib.loads(data.decode("utf-8")), p, os.path.dirname(p))
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
                errors.append((None, f"{p}: TOML syntax error: {e}"))
        elif ext == ".jsonl":
            for n, line in enumerate(data.decode("utf-8", "replace").split("\n"), 1):
                if not line.strip(" \t\r"):
                    continue
                try:
                    add(json.loads(line), f"{p}:{n}", p)
                except json.JSONDecodeError as e:
                    errors.append((None, f"{p}:{n}: JSON syntax error: {e.msg}"))
        else:
            errors.append((None, f"{p}: not a task file (expected .toml or .jsonl)"))

    for path in paths:
        if os.path.isdir(path):
            found = []
            for root, _, files in os.walk(path):
                for f in files:
                    full = os.path.join(root, f)
                    if os.path.splitext(f)[1] in (".toml", ".jsonl") and os.path.isfile(full):
                        found.append(full)
            for f in sorted(found, key=lambda s: s.split(os.sep)):
                load_file(f)
        elif os.path.exists(path):
            load_file(path)
        else:
            raise UsageError(f"--suite {path}: no such file or directory")
    return tasks, errors


# ---------------------------------------------------------------- code generation

# op -> (family, spatial dims, min args, max args, {attr: kind}, required attrs): data/op_vocab.cpp
OPS = {}


def _op(name, family, lo, hi, attrs=(), spatial=0, required=()):
    OPS[name] = (family, spatial, lo, hi, dict(attrs), set(required))


for _n, _a in [("relu", ()), ("leaky_relu", [("negative_slope", "real")]), ("sigmoid", ()),
               ("tanh", ()), ("gelu", [("approximate", "string")]), ("silu", ()), ("mish", ()),
               ("hardswish", ()), ("hardsigmoid", ()),
               ("hardtanh", [("min_val", "real"), ("max_val", "real")]),
               ("elu", [("alpha", "real")]),
               ("selu", ()), ("softplus", [("beta", "real"), ("threshold", "real")]),
               ("softsign", ()), ("exp", ()), ("log", ()), ("abs", ()), ("neg", ()), ("sqrt", ()),
               ("rsqrt", ()), ("clamp", [("min", "real"), ("max", "real")])]:
    _op(_n, "unary", 1, 1, _a)
for _n in ("add", "sub", "mul", "div", "maximum", "minimum", "pow"):
    _op(_n, "binary", 1, 2, [("scalar", "real")])
_op("linear", "linear", 2, 3)
_op("matmul", "matmul", 2, 2)
_op("bmm", "bmm", 2, 2)
_CONV = [("stride", "int_or_ints"), ("padding", "int_or_ints"), ("dilation", "int_or_ints"),
         ("groups", "integer")]
for _d in (1, 2, 3):
    _op(f"conv{_d}d", "conv", 2, 3, _CONV, _d)
    _op(f"conv_transpose{_d}d", "conv_transpose", 2, 3,
        _CONV + [("output_padding", "int_or_ints")], _d)
    _POOL = [("kernel_size", "int_or_ints"), ("stride", "int_or_ints"), ("padding", "int_or_ints")]
    _op(f"max_pool{_d}d", "max_pool", 1, 1,
        _POOL + [("dilation", "int_or_ints"), ("ceil_mode", "boolean")], _d,
        ["kernel_size"])
    _op(f"avg_pool{_d}d", "avg_pool", 1, 1, _POOL, _d, ["kernel_size"])
    _op(f"adaptive_avg_pool{_d}d", "adaptive_avg_pool", 1, 1, [("output_size", "int_or_ints")], _d,
        ["output_size"])
_op("batch_norm", "batch_norm", 1, 3, [("eps", "real"), ("momentum", "real")])
_op("group_norm", "group_norm", 1, 3, [("num_groups", "integer"), ("eps", "real")], 0,
    ["num_groups"])
_op("layer_norm", "layer_norm", 1, 3, [("normalized_shape", "int_or_ints"), ("eps", "real")], 0,
    ["normalized_shape"])
_op("instance_norm", "instance_norm", 1, 3, [("eps", "real")])
_op("rms_norm", "rms_norm", 1, 2, [("normalized_shape", "int_or_ints"), ("eps", "real")], 0,
    ["normalized_shape"])
_op("softmax", "softmax", 1, 1, [("dim", "integer")], 0, ["dim"])
_op("log_softmax", "softmax", 1, 1, [("dim", "integer")], 0, ["dim"])
_op("logsumexp", "logsumexp", 1, 1, [("dim", "int_or_ints"), ("keepdim", "boolean")], 0, ["dim"])
for _n in ("sum", "mean", "amax", "amin"):
    _op(_n, "reduce", 1, 1, [("dim", "int_or_ints"), ("keepdim", "boolean")])
_op("prod", "reduce", 1, 1, [("dim", "integer"), ("keepdim", "boolean")])
for _n in ("argmax", "argmin"):
    _op(_n, "arg_reduce", 1, 1, [("dim", "integer"), ("keepdim", "boolean")])
_op("cumsum", "cumsum", 1, 1, [("dim", "integer")], 0, ["dim"])
_op("reshape", "reshape", 1, 1, [("shape", "ints")], 0, ["shape"])
_op("permute", "permute", 1, 1, [("dims", "ints")], 0, ["dims"])
_op("transpose", "transpose", 1, 1, [("dim0", "integer"), ("dim1", "integer")], 0, ["dim0", "dim1"])
_op("flatten", "flatten", 1, 1, [("start_dim", "integer"), ("end_dim", "integer")])
_op("dropout", "dropout", 1, 1, [("p", "real")])
_op("cat", "cat", 2, 64, [("dim", "integer")])
_op("flip", "flip", 1, 1, [("dims", "int_or_ints")], 0, ["dims"])
_op("pad", "pad", 1, 1, [("pad", "ints"), ("value", "real")], 0, ["pad"])
_op("slice", "slice", 1, 1, [("dim", "integer"), ("start", "integer"), ("end", "integer"),
                             ("step", "integer")], 0, ["dim"])


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _kind_ok(kind, v):
    is_ints = isinstance(v, list) and all(_is_int(e) for e in v)
    return {"integer": _is_int(v), "real": _is_int(v) or isinstance(v, float),
            "boolean": isinstance(v, bool), "string": isinstance(v, str), "ints": is_ints,
            "int_or_ints": _is_int(v) or is_ints}[kind]


def _num(v):
    """A float literal (attr_real() hands the reference a double even for an integer attr)."""
    v = float(v)
    return repr(v) if math.isfinite(v) else f'float("{v}")'


class Attrs:
    """op_vocab.cpp's attr_* accessors; kinds were checked before, so no silent fallbacks."""

    def __init__(self, attrs):
        self.a = attrs

    def has(self, k):
        return k in self.a

    def real(self, k, d):
        return _num(self.a.get(k, d))

    def int(self, k, d):
        return self.a.get(k, d)

    def bool(self, k, d):
        return self.a.get(k, d)

    def ints(self, k, n, d):  # attr_ints: an integer means that value for every spatial dim
        v = self.a.get(k, d)
        return [v] * n if _is_int(v) else list(v)

    def dims(self, k):  # attr_dims: an integer is one dim, absent is none
        v = self.a.get(k, [])
        return [v] if _is_int(v) else list(v)


def gen_op(op, a, at, sd):
    """Python expression for one op of reference.cpp's apply(); a = arg identifiers."""
    family, x, n = OPS[op][0], a[0], op
    if family == "unary":
        simple = {"relu": "torch.relu", "sigmoid": "torch.sigmoid", "tanh": "torch.tanh",
                  "silu": "F.silu", "mish": "F.mish", "hardswish": "F.hardswish",
                  "hardsigmoid": "F.hardsigmoid", "selu": "F.selu", "exp": "torch.exp",
                  "log": "torch.log", "abs": "torch.abs", "neg": "torch.neg", "sqrt": "torch.sqrt",
                  "rsqrt": "torch.rsqrt"}
        if n in simple:
            return f"{simple[n]}({x})"
        if n == "leaky_relu":
            return f"F.leaky_relu({x}, {at.real('negative_slope', 0.01)})"
        if n == "gelu":
            approx = at.a.get("approximate", "none")
            if approx not in ("none", "tanh"):
                raise TaskError(f"attrs.approximate: expected \"none\" or \"tanh\", got {approx!r}")
            return f"F.gelu({x}, approximate={approx!r})"
        if n == "hardtanh":
            return f"F.hardtanh({x}, {at.real('min_val', -1.0)}, {at.real('max_val', 1.0)})"
        if n == "elu":
            return f"F.elu({x}, {at.real('alpha', 1.0)})"
        if n == "softplus":
            return f"F.softplus({x}, {at.real('beta', 1.0)}, {at.real('threshold', 20.0)})"
        if n == "softsign":
            return f"{x} / ({x}.abs() + 1)"
        if n == "clamp":
            if not at.has("min") and not at.has("max"):
                raise TaskError("attrs: clamp needs min or max")
            lo = at.real("min", 0) if at.has("min") else "None"
            hi = at.real("max", 0) if at.has("max") else "None"
            return f"torch.clamp({x}, min={lo}, max={hi})"
    if family == "binary":
        if len(a) == 2:
            if at.has("scalar"):
                raise TaskError("attrs.scalar: given together with a second argument")
            fn = {"maximum": "torch.maximum", "minimum": "torch.minimum"}.get(n, f"torch.{n}")
            return f"{fn}({x}, {a[1]})"
        if not at.has("scalar"):
            raise TaskError(f"attrs.scalar: {n} with one argument needs attrs.scalar")
        fn = {"maximum": "torch.clamp_min", "minimum": "torch.clamp_max"}.get(n, f"torch.{n}")
        return f"{fn}({x}, {at.real('scalar', 0.0)})"
    bias = a[2] if len(a) > 2 else "None"
    w = a[1] if len(a) > 1 else "None"
    if family == "linear":
        return f"F.linear({x}, {w}, {bias})"
    if family in ("matmul", "bmm"):
        return f"torch.{family}({x}, {w})"
    if family in ("conv", "conv_transpose"):
        common = (f"stride={at.ints('stride', sd, 1)}, padding={at.ints('padding', sd, 0)}, "
                  f"dilation={at.ints('dilation', sd, 1)}, groups={at.int('groups', 1)}")
        if family == "conv":
            return f"F.conv{sd}d({x}, {w}, {bias}, {common})"
        return (f"F.conv_transpose{sd}d({x}, {w}, {bias}, {common}, "
                f"output_padding={at.ints('output_padding', sd, 0)})")
    if family in ("max_pool", "avg_pool"):
        k = at.ints("kernel_size", sd, 1)
        stride = at.ints("stride", sd, 1) if at.has("stride") else k  # default stride: the kernel
        common = f"kernel_size={k}, stride={stride}, padding={at.ints('padding', sd, 0)}"
        if family == "max_pool":
            return (f"F.max_pool{sd}d({x}, {common}, dilation={at.ints('dilation', sd, 1)}, "
                    f"ceil_mode={at.bool('ceil_mode', False)})")
        return f"F.avg_pool{sd}d({x}, {common}, ceil_mode=False, count_include_pad=True)"
    if family == "adaptive_avg_pool":
        return f"F.adaptive_avg_pool{sd}d({x}, {at.ints('output_size', sd, 1)})"
    if family in ("batch_norm", "instance_norm", "group_norm", "layer_norm") and len(a) == 2:
        raise TaskError(f"args: {n} takes x alone or x, weight and bias")
    eps = at.real("eps", 1e-5)
    if family == "batch_norm":  # batch statistics, no running stats: a module in training mode
        return (f"F.batch_norm({x}, None, None, {w}, {bias}, training=True, "
                f"momentum={at.real('momentum', 0.1)}, eps={eps})")
    if family == "instance_norm":
        return (f"F.instance_norm({x}, None, None, {w}, {bias}, use_input_stats=True, "
                f"momentum=0.1, eps={eps})")
    if family == "group_norm":
        return f"F.group_norm({x}, {at.int('num_groups', 1)}, {w}, {bias}, {eps})"
    if family == "layer_norm":
        return f"F.layer_norm({x}, {at.dims('normalized_shape')}, {w}, {bias}, {eps})"
    if family == "rms_norm":  # eps: the caller substitutes the dtype's machine epsilon by default
        return f"rms_norm({x}, {at.dims('normalized_shape')}, {{rms_eps}}, {w})"
    if family == "softmax":
        return f"F.{n}({x}, dim={at.int('dim', -1)})"
    if family == "logsumexp":
        return f"torch.logsumexp({x}, {at.dims('dim')}, keepdim={at.bool('keepdim', False)})"
    if family == "reduce":
        keep = at.bool("keepdim", False)
        if n == "prod":
            if at.has("dim"):
                return f"torch.prod({x}, {at.int('dim', 0)}, keepdim={keep})"
            return f"torch.prod({x}).reshape([1] * {x}.dim())" if keep else f"torch.prod({x})"
        dims = at.dims("dim") or f"list(range({x}.dim()))"  # no dim: every dim
        return f"torch.{n}({x}, {dims}, keepdim={keep})"
    if family == "arg_reduce":
        keep = at.bool("keepdim", False)
        if at.has("dim"):
            return f"torch.{n}({x}, dim={at.int('dim', 0)}, keepdim={keep})"
        e = f"torch.{n}({x}, dim=None, keepdim={keep})"
        return f"{e}.reshape([1] * {x}.dim())" if keep else e
    if family == "cumsum":
        return f"torch.cumsum({x}, dim={at.int('dim', 0)})"
    if family == "reshape":
        return f"{x}.reshape({at.a['shape']})"
    if family == "permute":
        return f"{x}.permute({at.a['dims']})"
    if family == "transpose":
        return f"{x}.transpose({at.int('dim0', 0)}, {at.int('dim1', 0)})"
    if family == "flatten":
        return f"torch.flatten({x}, {at.int('start_dim', 0)}, {at.int('end_dim', -1)})"
    if family == "dropout":
        if float(at.a.get("p", 0.0)) != 0.0:
            raise TaskError(f"attrs.p: only dropout with p = 0 is deterministic; got {at.a['p']}")
        return f"{x}  # dropout with p = 0: the identity"
    if family == "cat":
        return f"torch.cat([{', '.join(a)}], dim={at.int('dim', 0)})"
    if family == "flip":
        return f"torch.flip({x}, {at.dims('dims')})"
    if family == "pad":
        return f"F.pad({x}, {list(at.a['pad'])}, value={at.real('value', 0.0)})"
    if family == "slice":  # Python's slice clamping is the op's (op_vocab.cpp slice_window_of)
        step = at.int("step", 1)
        if step < 1:
            raise TaskError(f"attrs.step: must be >= 1, got {step}")
        d, end = at.int("dim", 0), at.a.get("end")
        return (f"{x}[(slice(None),) * ({d} % {x}.dim()) + "
                f"(slice({at.int('start', 0)}, {end!r}, {step}),)]")
    raise TaskError(f"op '{n}': no PyTorch translation")  # a family added to OPS but not here


MODULE_HEAD = '''\
"""Kiln task {name!r} in PyTorch: {origin}
Level {level}, dtype {dtype}. Generated by tools/torch_baselines.py with the semantics of
data/reference.cpp (Kiln's LibTorch reference); the same draws reproduce Kiln's params and inputs.

    forward({sig}) -> ({outs})
"""
import math

import torch
import torch.nn.functional as F

NAME = {name!r}
DTYPE = torch.{dtype}
TOLERANCE = {{"atol": {atol!r}, "rtol": {rtol!r}}}
PARAM_SEED = {seed}  # the task's param_seed, else fnv1a64(NAME) & 0x7fffffffffff (reference.cpp)
INPUT_SEED = 7  # the inputs of `kiln tasks validate --digest`
INDEX_OUTPUTS = {index_outputs!r}  # argmax / argmin results: int64, compared exactly
'''

MODULE_DRAW = '''

def compute_dtype(device):
    """reference.cpp compute_type(): float16 / bfloat16 tasks compute in float32 on CPU."""
    return torch.float32 if torch.device(device).type == "cpu" else DTYPE


def draw_all(decls, seed, device):
    """reference.cpp draw_all() / draw(): one generator per call, seeded once; each tensor drawn in
    declaration order in float32 on the device, then rounded to the task dtype."""
    device = torch.device(device)
    gen = torch.Generator() if device.type == "cpu" else torch.Generator(device=device)
    gen.manual_seed(seed)
    out = []
    for d in decls:
        shape, init = d["shape"], d["init"]
        opts = {"dtype": torch.float32, "device": device}
        if init == "uniform":
            x = torch.empty(shape, **opts).uniform_(0.0, 1.0, generator=gen)
        elif init == "normal":
            x = torch.empty(shape, **opts).normal_(0.0, 1.0, generator=gen)
        elif init == "randint":
            x = torch.randint(d["lo"], d["hi"], shape, generator=gen, **opts)
        elif init == "ones":
            x = torch.ones(shape, **opts)
        elif init == "zeros":
            x = torch.zeros(shape, **opts)
        else:  # kaiming_uniform / bias_uniform: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
            bound = 1.0 / math.sqrt(d["fan_in"])
            x = torch.empty(shape, **opts).uniform_(-bound, bound, generator=gen)
        if d.get("scale", 1.0) != 1.0:
            x.mul_(d["scale"])
        if d.get("shift", 0.0) != 0.0:
            x.add_(d["shift"])
        if d.get("random_scale"):
            x.mul_(torch.empty((), **opts).uniform_(0.0, 1.0, generator=gen))
        if d.get("softmax"):
            x = x.softmax(-1)
        structure = d.get("structure", "none")
        if structure == "triu":
            x = x.triu()
        elif structure == "tril":
            x = x.tril()
        elif structure == "symmetric":
            x = x.add(x.transpose(-2, -1)).div_(2.0)
        if DTYPE != torch.float32:
            x = x.to(DTYPE)
        out.append(x.to(compute_dtype(device)))
    return out


def make_params(device):
    return draw_all(PARAMS, PARAM_SEED, device)


def make_inputs(device, seed=INPUT_SEED):
    return draw_all(INPUTS, seed, device)
'''

MODULE_RMS = '''

def rms_norm(x, normalized_shape, eps, weight=None):
    """torch.nn.functional.rms_norm's formula, in float32 (at::rms_norm is newer than LibTorch
    1.13, so Kiln's reference spells it out too)."""
    dims = list(range(x.dim() - len(normalized_shape), x.dim()))
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(dims, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    return y.to(x.dtype)
'''

MODULE_MAIN = '''

if __name__ == "__main__":
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.no_grad():
        outs = forward(*make_inputs(dev), *make_params(dev))
    for name, y in zip(OUTPUTS, outs):
        print(name, tuple(y.shape), y.dtype, float(y.double().sum()))
'''

RESERVED = {"torch", "F", "math", "rms_norm", "forward", "list", "range"}

# A pytorch_module task's forward: the problem's own Model, from its [kernelbench] table, built
# once per device, its tensors made to share the task's params (`.data`, nothing copied but an
# RNN's flat weight buffer; set again only when other tensors come) before each call. Not functional_call: an RNN keeps its own list of
# its weights, which torch 1.13's functional_call does not update.
MODULE_KB = '''

import sys
import types

KB_SOURCE = {source!r}
KB_INIT_INPUTS = {init!r}
KB_FORWARD = {forward!r}  # Model.forward's arguments: a task input's name, or a value
KB_BOOL_INPUTS = {bools!r}
KB_INT64_INPUTS = {ints!r}  # drawn as floats, given to the Model as int64 (class indices)
KB_KEYS = {keys!r}  # each param argument's state_dict key (or attribute path) in the Model
KB_OUTPUTS = {index!r}  # the task's outputs: positions in the Model's flattened output
_MODELS = {{}}


def model_on(device):
    """The problem's Model on `device`, built once, and its tensors by KB_KEYS."""
    key = str(device)
    if key not in _MODELS:
        try:  # what the importer supplied where this machine lacks it (SDPA, einops)
            from kernelbench import compat
            compat.provide()
        except ImportError:
            pass
        # A module Python can import by name: torch.compile looks up the Model's module.
        problem = sys.modules.setdefault("kiln_problem_" + NAME,
                                         types.ModuleType("kiln_problem_" + NAME))
        exec(compile(KB_SOURCE, "<kernelbench problem " + NAME + ">", "exec"), problem.__dict__)
        torch.manual_seed(0)
        model = problem.Model(*KB_INIT_INPUTS).to(device)
        held = model.state_dict(keep_vars=True)
        tensors = [held[k] if k in held else _attribute(model, k) for k in KB_KEYS]
        _MODELS[key] = [model, tensors, None]  # the model, its tensors, bound
    return _MODELS[key]


def _attribute(model, path):
    for part in path.split("."):
        model = getattr(model, part)
    return model


def _bind(entry, given):
    """The model's tensors made the given ones, unless they already were (the same tensors as
    the last call's); an RNN's weights then put back into cuDNN's one buffer (a copy, once)."""
    ptrs = [(g.data_ptr(), tuple(g.shape)) for g in given]
    if entry[2] == ptrs:
        return
    for t, g in zip(entry[1], given):
        t.data = g
    for m in entry[0].modules():
        if isinstance(m, torch.nn.RNNBase):
            m.flatten_parameters()
    entry[2] = ptrs


if hasattr(torch, "_dynamo"):  # torch.compile: binding is Python bookkeeping, not graph work
    _bind = torch._dynamo.disable(_bind)


def _flat(y):
    if isinstance(y, (tuple, list)):
        return [t for e in y for t in _flat(e)]
    return [y]


def forward({{sig}}):
    given = dict(zip({input_names!r}, [{input_idents}]))
    args = [a["value"] if "value" in a else
            given[a["input"]].bool() if a["input"] in KB_BOOL_INPUTS else
            given[a["input"]].long() if a["input"] in KB_INT64_INPUTS else given[a["input"]]
            for a in KB_FORWARD]
    entry = model_on({first}.device)
    # A forward that replaces its own state (VanillaRNN) may write into a bound param: its
    # output never reads it (the importer's rule), and the digests were compared before.
    _bind(entry, [{param_idents}])
    ys = _flat(entry[0](*args))
    return tuple(ys[i].contiguous() for i in KB_OUTPUTS)
'''


def module_forward(spec, ops, ident, input_names, param_shapes):
    """MODULE_KB for a task whose ops are pytorch_module ones (one per output, same module and
    args); TaskError names what the task lacks."""
    kb = spec.get("kernelbench")
    if not isinstance(kb, dict) or not isinstance(kb.get("source"), str):
        raise TaskError("kernelbench: a pytorch_module task needs its [kernelbench] table (source, "
                        "init_inputs, forward, state_dict)")
    first = ops[0]
    n = first.get("attrs", {}).get("inputs")
    args = first.get("args", [])
    if not isinstance(n, int) or not isinstance(args, list) or not 0 < n <= len(args):
        raise TaskError("ops[0] (pytorch_module): attrs.inputs must count the leading args")
    if any(op.get("args") != args for op in ops):
        raise TaskError("ops: every pytorch_module op must take the same args")
    if args[:n] != input_names:
        raise TaskError(f"ops[0].args: the first {n} must be the task's inputs in order")
    by_name = {**kb.get("state_dict", {}), **kb.get("attributes", {})}
    keys = []
    for a in args[n:]:
        if a not in param_shapes or a not in by_name:
            raise TaskError(f"ops[0].args: '{a}' is not a param with a [kernelbench].state_dict "
                            "key or attribute")
        keys.append(by_name[a])
    index = [op.get("attrs", {}).get("output", 0) for op in ops]
    if len(ops) != len(spec.get("outputs", [])) or [op.get("out") for op in ops] != \
            spec.get("outputs"):
        raise TaskError("outputs: one pytorch_module op per output, in order")
    return MODULE_KB.format(source=kb["source"], init=kb.get("init_inputs", []),
                            forward=kb.get("forward", []), bools=kb.get("bool_inputs", []),
                            ints=kb.get("int64_inputs", []),
                            keys=keys, index=index, input_names=input_names,
                            input_idents=", ".join(ident[x] for x in input_names),
                            param_idents=", ".join(ident[a] for a in args[n:]),
                            first=ident[input_names[0]])


def _decl(d, spec, where, is_param, params):
    """One [[inputs]] / [[params]] entry as the dict draw_all() reads (task_parse.cpp rules)."""
    if not isinstance(d, dict) or not isinstance(d.get("name"), str):
        raise TaskError(f"{where}: name: missing or not a string")
    shape = d.get("shape")
    if not isinstance(shape, list) or not all(_is_int(s) for s in shape):
        raise TaskError(f"{where}.shape: expected a list of integers")
    init = d.get("init", "kaiming_uniform" if is_param else "uniform")
    out = {"name": d["name"], "shape": shape, "init": init}
    m = re.fullmatch(r"randint:(-?\d+):(-?\d+)", init) if isinstance(init, str) else None
    if m and int(m[1]) < int(m[2]):
        out.update(init="randint", lo=int(m[1]), hi=int(m[2]))
    elif init == "kaiming_uniform":
        out["fan_in"] = math.prod(shape[1:]) if len(shape) > 1 else 1
    elif init == "bias_uniform":
        w = params.get(d.get("of"))
        if w is None or len(w) < 2:
            raise TaskError(f"{where}.of: bias_uniform needs `of` naming a param of rank >= 2")
        out["fan_in"] = math.prod(w[1:])
    elif init not in ("uniform", "normal", "ones", "zeros"):
        raise TaskError(f"{where}.init: unknown init {init!r}")
    for key in ("scale", "shift"):
        if key in d:
            if not isinstance(d[key], (int, float)) or isinstance(d[key], bool):
                raise TaskError(f"{where}.{key}: expected a number")
            out[key] = float(d[key])
    for key in ("random_scale", "softmax"):
        if key in d:
            if not isinstance(d[key], bool):
                raise TaskError(f"{where}.{key}: expected a boolean")
            out[key] = d[key]
    if "structure" in d:
        out["structure"] = d["structure"]
    if out.get("structure", "none") not in ("none", "triu", "tril", "symmetric"):
        raise TaskError(f"{where}.structure: unknown structure {out['structure']!r}")
    return out


def generate(task):
    """Python source of the task's module; TaskError names the task and the op / field."""
    spec, name = task["spec"], task["name"]
    try:
        dtype = spec.get("dtype", "float32")
        if dtype not in DEFAULT_TOL:
            raise TaskError(f"dtype: unknown dtype {dtype!r}")
        tol = spec.get("tolerance", {})
        atol = float(tol.get("atol", DEFAULT_TOL[dtype][0]))
        rtol = float(tol.get("rtol", DEFAULT_TOL[dtype][1]))
        param_shapes = {p.get("name"): p.get("shape") for p in spec.get("params", [])
                        if isinstance(p, dict)}
        inputs = [_decl(d, spec, f"inputs[{i}]", False, param_shapes)
                  for i, d in enumerate(spec.get("inputs", []))]
        params = [_decl(d, spec, f"params[{i}]", True, param_shapes)
                  for i, d in enumerate(spec.get("params", []))]
        ident, used = {}, set()

        def define(v):  # a Python identifier for a task value name, unique and not shadowing
            base = re.sub(r"\W", "_", v)
            if (not base.isidentifier() or keyword.iskeyword(base) or base in RESERVED
                    or hasattr(builtins, base)):
                base = "v_" + base
            out, k = base, 2
            while out in used:
                out, k = f"{base}_{k}", k + 1
            used.add(out)
            ident[v] = out

        for d in inputs + params:
            define(d["name"])
        ops = spec.get("ops", [])
        if ops and all(isinstance(op, dict) and op.get("op") == "pytorch_module" for op in ops):
            kb_src = module_forward(spec, ops, ident, [d["name"] for d in inputs], param_shapes)
            outs = spec.get("outputs", [])
        else:
            kb_src = None
        body, index_values, uses_rms = [], set(), False
        for i, op in enumerate([] if kb_src else ops):
            opname = op.get("op") if isinstance(op, dict) else None
            where = f"ops[{i}] ({opname} -> '{op.get('out') if isinstance(op, dict) else None}')"
            try:
                if opname == "pytorch_module":
                    raise TaskError("a PyTorch-module reference must be the task's only kind "
                                    "of op")
                if opname not in OPS:
                    raise TaskError(f"op: unknown op '{opname}' (not in Kiln's op vocabulary v1)")
                family, sd, lo, hi, kinds, required = OPS[opname]
                args, attrs = op.get("args", []), op.get("attrs", {})
                if not isinstance(args, list) or not lo <= len(args) <= hi:
                    raise TaskError(f"args: {opname} takes {lo}..{hi} argument(s), got {args!r}")
                for k, v in attrs.items():
                    if k not in kinds:
                        raise TaskError(f"attrs.{k}: unknown attribute for {opname} "
                                        f"(known: {', '.join(kinds) or 'none'})")
                    if not _kind_ok(kinds[k], v):
                        raise TaskError(f"attrs.{k}: expected {kinds[k]}, got {v!r}")
                for k in required - attrs.keys():
                    raise TaskError(f"attrs.{k}: required by {opname}")
                for k, arg in enumerate(args):
                    if arg not in ident:
                        raise TaskError(f"args[{k}]: '{arg}' is not defined before this op")
                expr = gen_op(opname, [ident[x] for x in args], Attrs(attrs), sd)
                if family == "rms_norm":
                    uses_rms = True
                    expr = expr.replace("{rms_eps}", _num(attrs.get("eps", FINFO_EPS[dtype])))
                out = op.get("out")
                if not isinstance(out, str) or out in ident:
                    raise TaskError(f"out: {out!r} missing or defined twice")
                define(out)
                body.append(f"    {ident[out]} = {expr}")
                if family == "arg_reduce":
                    index_values.add(out)
            except TaskError as e:
                raise TaskError(f"{where}: {e}") from None
        outs = spec.get("outputs", [])
        if kb_src is None and (not outs or any(
                o not in ident or o in param_shapes or o in [d["name"] for d in inputs]
                for o in outs)):
            raise TaskError(f"outputs: {outs!r} must name op results")
        # reference.cpp run_reference(): outputs in the task dtype (int64 for indices), contiguous
        rets = [] if kb_src else [
            ident[o] + ("" if dtype == "float32" or o in index_values else ".to(DTYPE)")
            + ".contiguous()" for o in outs]
    except TaskError as e:
        raise TaskError(f"{task['origin']}: task '{name}': {e}") from None
    except (AttributeError, TypeError, ValueError) as e:  # malformed structure Kiln would reject
        raise TaskError(f"{task['origin']}: task '{name}': malformed task ({e})") from None
    sig = ", ".join(ident[d["name"]] for d in inputs + params)
    decls = lambda ds: "[\n" + "".join(f"    {d!r},\n" for d in ds) + "]\n"
    src = MODULE_HEAD.format(name=name, origin=task["origin"], level=spec.get("level"),
                             dtype=dtype, sig=sig, outs=", ".join(outs), atol=atol, rtol=rtol,
                             seed=param_seed(spec),
                             index_outputs=sorted(index_values & set(outs)))
    src += "INPUTS = " + decls(inputs) + "PARAMS = " + decls(params) + f"OUTPUTS = {outs!r}\n"
    src += MODULE_DRAW + (MODULE_RMS if uses_rms else "")
    if kb_src:
        src += kb_src.replace("{sig}", sig) + MODULE_MAIN
    else:
        src += f"\n\ndef forward({sig}):\n" + "\n".join(body)
        src += f"\n    return ({', '.join(rets)},)\n" + MODULE_MAIN
    return src, (atol, rtol)


# ---------------------------------------------------------------- kiln validate and digests

def run_kiln(kiln, device, threads, paths, json_path):
    """`kiln tasks validate --digest`; returns (wall s, its output lines). Exit 1 (bad tasks) is
    fine: their rows are missing and their errors are in the output."""
    cmd = [kiln, "--threads", str(threads), "tasks", "validate", "--device", device,
           "--json", json_path, "--digest", str(DIGEST_SAMPLES)] + paths
    print(f"running kiln: {' '.join(cmd[:10])} ... ({len(paths)} paths)", flush=True)
    t0 = time.perf_counter()
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as e:
        raise UsageError(f"--kiln {kiln}: cannot run: {e.strerror}")
    err = []
    t = threading.Thread(target=lambda: err.extend(p.stderr), daemon=True)
    t.start()
    out = []
    for line in p.stdout:
        print("kiln> " + line.rstrip(), flush=True)
        out.append(line)
    p.wait()
    t.join()
    # spdlog's "HH:MM:SS.mmm error " prefix off; which stream it uses depends on the build
    said = [re.sub(r"^[\d:.]+ (error|warning) ", "", e.rstrip()) for e in out + err]
    if p.returncode not in (0, 1):
        tail = "\n".join(said[-10:])
        if not os.path.exists(json_path) or not os.path.getsize(json_path):
            raise UsageError(f"{kiln} tasks validate exited {p.returncode}" +
                             (" (does this kiln have --digest? rebuild it)" if "digest" in tail
                              else "") + f":\n{tail}")
        # it crashed part-way: keep the rows it wrote; the other tasks get "no row"
        killed = " (killed: out of memory?)" if p.returncode in (-9, 137) else ""
        print(f"warning: kiln exited {p.returncode}{killed} part-way:\n{tail}", flush=True)
        said.append(f"kiln exited {p.returncode} before reaching this task")
    return time.perf_counter() - t0, said


def read_rows(path):
    rows = []
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        raise UsageError(f"{path}:{n}: not JSON Lines ({e.msg})")
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror}")
    return rows


def _abs_origin(origin):
    """An origin ("file.toml" or "file.jsonl:LINE") with its file made absolute."""
    jsonl = re.search(r"\.jsonl:\d+$", origin)
    path, sep, line = origin.rpartition(":") if jsonl else (origin, "", "")
    return os.path.abspath(path) + sep + line


def match_rows(tasks, rows, exact):
    """Row for each task by origin. exact=False (--validated, maybe run from another directory):
    else by absolute path, else the only row of that name not claimed by another task."""
    by_origin = {r.get("origin", ""): r for r in rows}
    by_abs = {_abs_origin(r.get("origin", "")): r for r in rows}
    for t in tasks:
        t["row"] = by_origin.get(t["kiln_origin"]) or (
            None if exact else by_abs.get(_abs_origin(t["kiln_origin"])))
    if exact:
        return
    claimed = {id(t["row"]) for t in tasks if t["row"] is not None}
    by_name = {}
    for r in rows:
        if id(r) not in claimed:
            by_name.setdefault(r.get("name"), []).append(r)
    for t in tasks:
        if t["row"] is None and len(by_name.get(t["name"], [])) == 1:
            t["row"] = by_name[t["name"]][0]


SLICE = 1 << 24  # elements per float64 slice (128 MiB): KernelBench's level 1 outputs at its own
# sizes hold 1.6 G elements, which a float64 copy of the whole would double twice over


def slices(a, *others):
    """Matching flat slices of same-sized tensors, each as float64 on a's device (a float64
    forward that ran on the cpu meets a cuda output one slice at a time)."""
    flat = [t.detach().reshape(-1) for t in (a,) + others]
    for i in range(0, flat[0].numel(), SLICE):
        yield tuple(t[i:i + SLICE].to(a.device, torch.float64) for t in flat)


def digest(x, k):
    """data/tensor_digest.cpp digest_of(), its float64 sums a slice at a time."""
    flat = x.detach().reshape(-1)
    n = flat.numel()
    nonfinite, s, a = 0, 0.0, 0.0
    for (wide,) in slices(flat):
        if flat.is_floating_point():
            bad = int((~torch.isfinite(wide)).sum())
            if bad:
                nonfinite += bad
                wide = torch.nan_to_num(wide, 0.0, 0.0, 0.0)
        s += float(wide.sum())
        a += float(wide.abs().sum())
    k = min(n, max(k, 0))
    idx = [(i * n) // k for i in range(k)]
    picked = flat.index_select(0, torch.tensor(idx, dtype=torch.long, device=flat.device))
    return {"shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", ""), "sum": s,
            "abs_sum": a, "nonfinite": nonfinite, "samples": picked.cpu().double().tolist(),
            "index": idx}


def _val(v):
    return float(v) if isinstance(v, str) else v  # "nan", "inf", "-inf" -> float


def compare(mine, ref, atol, rtol, exact, margin=None):
    """None if the digests agree, else why not (kiln X torch Y). margin (a list) gets the worst
    sample error as a fraction of its allowance: 0 is bit-identical, 1 is at the tolerance."""
    if mine["shape"] != ref["shape"]:
        return f"shape: kiln {ref['shape']} torch {mine['shape']}"
    if mine["dtype"] != ref["dtype"]:
        return f"dtype: kiln {ref['dtype']} torch {mine['dtype']}"
    if mine["nonfinite"] != ref["nonfinite"]:
        return f"non-finite elements: kiln {ref['nonfinite']} torch {mine['nonfinite']}"
    if exact:
        atol = rtol = 0.0
    samples = ref["samples"]
    if len(samples) != len(mine["samples"]):
        return f"sample count: kiln {len(samples)} torch {len(mine['samples'])}"
    for i, (r, m) in enumerate(zip(map(_val, samples), mine["samples"])):
        same = (r == m or (math.isnan(r) and math.isnan(m))) if not (
            math.isfinite(r) and math.isfinite(m)) else abs(m - r) <= atol + rtol * abs(r)
        if not same:
            return f"sample {i} (flat index {mine['index'][i]}): kiln {r!r} torch {m!r}"
        if margin is not None and math.isfinite(r) and r != m:
            margin.append(abs(m - r) / (atol + rtol * abs(r)) if atol + rtol * abs(r) else math.inf)
    n = math.prod(ref["shape"])
    for key in ("sum", "abs_sum"):
        allowed = atol * n + rtol * abs(ref["abs_sum"])
        if abs(mine[key] - ref[key]) > allowed:
            return f"{key}: kiln {ref[key]!r} torch {mine[key]!r} (allowed +-{allowed:.3g})"
    return None


# ---------------------------------------------------------------- workers (torch side)

def setup_torch(conf):
    # Kiln's reference and baselines are exact fp32: no TF32 in matmuls or convolutions.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    # Inductor suggests TF32 for speed on every compile; here exact fp32 is the point.
    warnings.filterwarnings("ignore", message=".*TensorFloat32 tensor cores.*")
    dev = torch.device(conf["device"])
    if dev.type == "cuda":
        dev = torch.device("cuda", dev.index or 0)  # "cuda" is cuda:0, as in Kiln
        torch.cuda.set_device(dev)
    else:
        torch.set_num_threads(conf["threads"])
    return dev


def device_name(dev):
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            names = [l.split(":", 1)[1].strip() for l in f if l.startswith("model name")]
        model = names[0] if names else model
    except OSError:
        pass
    return f"cpu: {model or platform.machine()}"


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def load_module(job):
    """Exec the generated source (the very text --emit writes) as a module."""
    fname = job["filename"]
    linecache.cache[fname] = (len(job["source"]), None, job["source"].splitlines(True), fname)
    mod = {"__name__": "kiln_task_" + re.sub(r"\W", "_", job["name"])}
    exec(compile(job["source"], fname, "exec"), mod)
    return mod


def short(e):
    msg = str(e).strip().split("\n")[0]
    return f"{type(e).__name__}: {msg[:300]}"


def phase_a(job, conf, dev):
    """Build, fidelity check against Kiln's digest, and (timing) compile by one call."""
    res = {"fidelity": None}
    mod = load_module(job)
    row = job["row"]
    atol, rtol = job["tol"]
    with torch.no_grad():
        params = mod["make_params"](dev)
        inputs = mod["make_inputs"](dev, row["digest"].get("input_seed", INPUT_SEED))
        for kind, values, decls in (("params", params, mod["PARAMS"]),
                                    ("inputs", inputs, mod["INPUTS"])):
            refs = row["digest"][kind]
            if len(refs) != len(values):
                res["fidelity"] = f"inputs differ: kiln has {len(refs)} {kind}, torch {len(values)}"
                return res, None
            for d, v, ref in zip(decls, values, refs):
                why = compare(digest(v, len(ref["samples"])), ref, 0.0, 1e-6, False)
                if why:
                    res["fidelity"] = f"inputs differ: {kind[:-1]} '{d['name']}': {why}"
                    return res, None
        outs = mod["forward"](*inputs, *params)
        sync(dev)
        refs = row["digest"]["outputs"]
        if len(refs) != len(outs):
            res["fidelity"] = f"mismatch: kiln has {len(refs)} outputs, torch {len(outs)}"
            return res, None
        margin = [0.0]
        for name, y, ref in zip(mod["OUTPUTS"], outs, refs):
            why = compare(digest(y, len(ref["samples"])), ref, atol, rtol,
                          name in mod["INDEX_OUTPUTS"], margin)
            if why:
                res["fidelity"] = f"mismatch: {name}, {why}"
                return res, None
        res["fidelity"], res["fidelity_margin"] = "ok", max(margin)
        if not conf["timing"]:
            return res, None
        try:
            fn = mod["forward"] if conf["fake_compile"] else torch.compile(mod["forward"],
                                                                           mode=conf["mode"])
            t0 = time.perf_counter()
            couts = fn(*inputs, *params)  # torch.compile is lazy: Inductor compiles here
            sync(dev)
            res["compile_s"] = time.perf_counter() - t0
        except Exception as e:
            res["compile_check"] = "error: " + short(e)
            res["traceback"] = traceback.format_exc()
            return res, None
        for name, c, e in zip(mod["OUTPUTS"], couts, outs):
            exact = name in mod["INDEX_OUTPUTS"]
            if c.shape != e.shape:
                res["compile_check"] = (f"mismatch: '{name}' has shape {list(c.shape)}, "
                                        f"eager {list(e.shape)}")
                return res, None
            why = differs(c, e, 0 if exact else atol, 0 if exact else rtol)
            if why:
                res["compile_check"] = f"mismatch: '{name}' {why}"
                return res, None
        res["compile_check"] = "ok"
    return res, (mod, fn)


def differs(got, want, atol, rtol):
    """None where got is within atol + rtol |want| of want everywhere (NaN where NaN), else where
    it is not; compared in float64 a slice at a time."""
    count, first, at = 0, None, 0
    for a, b in slices(got, want):
        bad = ~torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
        n = int(bad.sum())
        if n and first is None:
            j = int(bad.nonzero()[0])
            first = (at + j, float(b[j]), float(a[j]))
        count += n
        at += b.numel()
    if not count:
        return None
    j, e, c = first
    return (f"differs from eager at {count} of {want.numel()} elements, first at flat index {j}: "
            f"eager {e!r} compiled {c!r} (atol {atol}, rtol {rtol})")


class Flusher:
    """the executor's cache flush before each trial: cpu writes one byte per 64-byte line of 64 MiB;
    cuda writes max(64 MiB, 2 x L2) (cuda_cache_flusher)."""

    def __init__(self, dev):
        self.tick, size = 0, 64 << 20
        if dev.type == "cuda":
            l2 = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0)
            size = max(size, 2 * l2 if l2 else 256 << 20)
            self.buf = torch.empty(size, dtype=torch.uint8, device=dev)
        else:
            self.buf = torch.zeros(size, dtype=torch.uint8).view(-1, 64)[:, 0]
        self.cuda = dev.type == "cuda"

    def __call__(self):
        self.tick = (self.tick + 1) % 256
        if self.cuda:
            self.buf.fill_(self.tick)
        else:
            self.buf.add_(1)


def measure(fn, args, dev, flush, conf):
    """executor/timing.cpp measure(): median of trials under a cv / time-cap / count rule."""
    for _ in range(2):
        fn(*args)
    sync(dev)
    if dev.type == "cuda":
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples, t_start = [], time.perf_counter()
    while len(samples) < 500:
        flush()
        if dev.type == "cuda":
            start.record()
            fn(*args)
            stop.record()
            torch.cuda.synchronize(dev)  # the whole device, as cuda_timed does
            samples.append(start.elapsed_time(stop))
        else:
            t0 = time.perf_counter()
            fn(*args)
            samples.append((time.perf_counter() - t0) * 1e3)
        spent = (time.perf_counter() - t_start) * 1e3
        if len(samples) >= 5 and (cv(samples) <= 0.01 or spent >= conf["time_cap_ms"]):
            break
    return {"median_ms": statistics.median(samples), "cv": cv(samples), "trials": len(samples),
            "min_ms": min(samples)}


def cv(v):
    mean = statistics.fmean(v) if len(v) > 1 else 0
    return statistics.stdev(v) / mean if mean > 0 else 0.0


def phase_b(job, state, conf, dev, flush):
    mod, fn = state
    with torch.no_grad():
        args = mod["make_inputs"](dev, TIMING_SEED) + mod["make_params"](dev)
        res = {"eager": measure(mod["forward"], args, dev, flush, conf)}
        res["compiled"] = measure(fn, args, dev, flush, conf)
    return res


def worker(wid, conf, jobs, emit, barrier, lock):
    """Phase A over this worker's shard, a barrier across workers, then phase B under the lock."""
    dev = setup_torch(conf)
    emit(("hello", wid, {"device": device_name(dev), "torch": torch.__version__}))
    kept = {}
    for job in jobs:
        try:
            res, state = phase_a(job, conf, dev)
        except Exception as e:
            res = {"fidelity": "error: " + short(e), "traceback": traceback.format_exc()}
            state = None
        if state:
            kept[job["index"]] = state
        emit(("A", job["index"], res))
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    if conf["timing"]:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass  # another worker died; time what we have
        flush = Flusher(dev)
        for job in jobs:
            if job["index"] not in kept:
                continue
            with lock:  # only one process touches the device during any timed trial
                emit(("lock", wid, job["index"]))
                try:
                    res = phase_b(job, kept[job["index"]], conf, dev, flush)
                except Exception as e:
                    res = {"timing_error": short(e), "traceback": traceback.format_exc()}
                emit(("B", job["index"], res))
            kept.pop(job["index"])
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    emit(("done", wid, None))


def worker_entry(wid, conf, jobs, q, barrier, lock):
    worker(wid, conf, jobs, q.put, barrier, lock)


# ---------------------------------------------------------------- main

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                epilog="See the module docstring for the method.")
    p.add_argument("--suite", action="append", required=True, metavar="PATH")
    p.add_argument("--only", action="append", default=[], metavar="NAME")
    p.add_argument("--max-tasks", type=int, default=0, metavar="N")
    p.add_argument("--kiln", default="./build/kiln")
    p.add_argument("--validated", metavar="FILE")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--mode", default="default", choices=MODES)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--time-cap-ms", type=float, default=1000.0)
    p.add_argument("--fidelity-only", action="store_true")
    p.add_argument("--fake-compile", action="store_true",
                   help="TEST AID: time the eager function as if compiled (no torch.compile)")
    p.add_argument("--emit", metavar="DIR")
    p.add_argument("--out", metavar="FILE")
    p.add_argument("--report", metavar="FILE")
    a = p.parse_args(argv)
    if a.jobs < 1 or a.threads < 1 or a.max_tasks < 0:
        raise UsageError("--jobs and --threads must be >= 1, --max-tasks >= 0")
    if a.out and a.fidelity_only:
        raise UsageError("--out needs timing: drop --fidelity-only")
    if not a.fidelity_only and not a.fake_compile and not hasattr(torch, "compile"):
        raise UsageError(f"torch {torch.__version__} has no torch.compile: use --fidelity-only or "
                         "PyTorch >= 2.0")
    dev = a.device
    if not re.fullmatch(r"cpu|cuda(:\d+)?", dev):
        raise UsageError(f"--device {dev}: expected cpu, cuda or cuda:N")
    if dev.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device {dev}: this torch has no usable CUDA device")
    if dev == "cuda":
        a.device = "cuda:0"  # as Kiln's parse_device()
    if not a.validated and not (os.path.isfile(a.kiln) and os.access(a.kiln, os.X_OK)):
        raise UsageError(f"--kiln {a.kiln}: no such executable (build kiln or pass --kiln PATH)")
    return a


def select(args):
    tasks, load_errors = load_suites(args.suite)
    if args.only:
        missing = set(args.only) - {t["name"] for t in tasks} - {n for n, _ in load_errors if n}
        if missing:
            raise UsageError(f"--only: no task named {', '.join(sorted(missing))} in the suites")
        tasks = [t for t in tasks if t["name"] in args.only]
        load_errors = [(n, m) for n, m in load_errors if n in args.only]
    if args.max_tasks:
        tasks = tasks[:args.max_tasks]
    if not tasks and not load_errors:
        raise UsageError(f"no task files (.toml, .jsonl) in {', '.join(args.suite)}")
    return tasks, [m for _, m in load_errors]


def kiln_paths(tasks, tmpdir):
    """Paths for kiln covering exactly the selected tasks: .toml files themselves; a .jsonl whole
    when all its lines are selected, else a subset copy (origins mapped back to the task)."""
    paths, by_file = [], {}
    for t in tasks:
        if ".jsonl:" in t["origin"]:
            by_file.setdefault(t["origin"].rsplit(":", 1)[0], []).append(t)
        else:
            t["kiln_origin"] = t["origin"]
            paths.append(t["origin"])
    for f, ts in by_file.items():
        with open(f, "rb") as fh:
            lines = [l for l in fh.read().decode("utf-8", "replace").split("\n")
                     if l.strip(" \t\r")]
        if len(lines) == len(ts):
            paths.append(f)
            for t in ts:
                t["kiln_origin"] = t["origin"]
        else:
            sub = os.path.join(tmpdir, f"subset{len(paths)}.jsonl")
            with open(sub, "w") as out:
                for n, t in enumerate(ts, 1):
                    out.write(json.dumps(t["spec"]) + "\n")
                    t["kiln_origin"] = f"{sub}:{n}"
            paths.append(sub)
    return paths


def fmt_ms(x):
    return f"{x:.4g} ms" if x is not None else "-"


def main(argv):
    t_start = time.perf_counter()
    args = parse_args(argv)
    tasks, load_errors = select(args)
    for m in load_errors:
        print(f"error: {m}", flush=True)
    timing = not args.fidelity_only
    rows = [{"name": t["name"], "origin": t["origin"], "content_hash": None, "fidelity": None}
            for t in tasks]
    info = {"device": None, "torch": torch.__version__}
    done, total = [0], len(tasks)

    def progress(i, phase="final"):
        row = rows[i]
        done[0] += phase == "final"
        tag = f"[{done[0]:>{len(str(total))}}/{total}]" if phase == "final" else "[compiled]"
        line = f"{tag} {row['name']:<40} fidelity {row['fidelity']}"
        if row.get("kiln_verdict") not in (None, "ok"):
            line += f" (kiln: {row['kiln_verdict']})"
        if phase == "compiled":
            line += f"; compiled in {row.get('compile_s', 0):.1f} s, matches eager"
        elif timing and "eager" in row:
            sp = row.get("speedup")
            line += (f"  eager {fmt_ms(row['eager']['median_ms'])}  compile "
                     f"{fmt_ms(row['compiled']['median_ms'])}  " + (f"x{sp:.2f}" if sp else ""))
        elif timing and row.get("fidelity") == "ok":
            line += f"  no timing: {row.get('timing_error') or row.get('compile_check')}"
        print(line, flush=True)

    generated, emitted = [], set()
    for i, t in enumerate(tasks):
        try:
            t["source"], t["tol"] = generate(t)
        except TaskError as e:
            rows[i]["fidelity"] = f"error: {e}"
            progress(i)
            continue
        if args.emit:
            os.makedirs(args.emit, exist_ok=True)
            base = os.path.join(args.emit, re.sub(r"[^\w.-]", "_", t["name"]))
            fn, k = base + ".py", 2
            while fn in emitted:  # the same name in two suites (level1/cpu and level1/gpu)
                fn, k = f"{base}_{k}.py", k + 1
            emitted.add(fn)
            with open(fn, "w") as f:
                f.write(t["source"])
            rows[i]["emitted"] = fn
        generated.append(i)
    kiln_s, kiln_err, validated = 0.0, [], []
    gen_ok = [tasks[i] for i in generated]
    if args.validated:
        validated = read_rows(args.validated)
        for t in gen_ok:
            t["kiln_origin"] = t["origin"]
    elif gen_ok:
        with tempfile.TemporaryDirectory(prefix="kiln_baselines_") as tmp:
            paths = kiln_paths(gen_ok, tmp)
            json_path = os.path.join(tmp, "validate.jsonl")
            kiln_s, kiln_err = run_kiln(args.kiln, args.device, args.threads, paths, json_path)
            validated = read_rows(json_path)
    match_rows(gen_ok, validated, exact=not args.validated)
    work = []
    for i in generated:
        t, row = tasks[i], rows[i]
        r = t["row"]
        if r is None:
            said = [e for e in kiln_err if e.startswith(t["kiln_origin"] + ":")] or [
                e for e in kiln_err[-1:] if e.startswith("kiln exited")]
            row["fidelity"] = ("error: kiln has no row for this task" +
                               (f": {said[0]}" if said else " (not in the validated file)"))
            progress(i)
            continue
        row.update(content_hash=r.get("content_hash"), kiln_verdict=r.get("verdict"),
                   kiln_eager_ms=r.get("eager_ms"))
        if "digest" not in r:
            row["fidelity"] = "error: kiln row has no digest (its reference did not run)"
            progress(i)
            continue
        filename = os.path.abspath(row["emitted"]) if "emitted" in row else f"<task {t['name']}>"
        work.append({"index": i, "name": t["name"], "source": t["source"], "tol": t["tol"],
                     "row": r, "filename": filename})
    conf = {"device": args.device, "threads": args.threads, "timing": timing,
            "mode": args.mode, "fake_compile": args.fake_compile, "time_cap_ms": args.time_cap_ms}

    def handle(msg):
        kind, i, res = msg
        if kind == "hello":
            info.update(res)
        elif kind == "A":
            rows[i].update(res)
            progress(i, "compiled" if timing and res.get("compile_check") == "ok" else "final")
        elif kind == "B":
            rows[i].update(res)
            if "eager" in res:
                rows[i]["speedup"] = res["eager"]["median_ms"] / res["compiled"]["median_ms"]
            progress(i)

    njobs = min(args.jobs, max(1, len(work)))
    shards = [work[w::njobs] for w in range(njobs)]
    if njobs == 1:
        worker(0, conf, shards[0], handle, threading.Barrier(1), threading.Lock())
    else:
        run_pool(conf, shards, handle, rows)
        # Large tasks can run out of device memory while the other workers hold their inputs:
        # those get one more attempt, alone, in this process.
        oom = [job for job in work
               if "out of memory" in (str(rows[job["index"]].get("fidelity")) +
                                      str(rows[job["index"]].get("timing_error", ""))).lower()]
        if oom:
            print(f"retrying {len(oom)} task(s) that ran out of device memory, one at a time",
                  flush=True)
            for job in oom:
                for k in ("fidelity_margin", "compile_s", "compile_check", "eager", "compiled",
                          "speedup", "timing_error", "traceback"):
                    rows[job["index"]].pop(k, None)
                rows[job["index"]]["fidelity"] = None
            worker(0, conf, oom, handle, threading.Barrier(1), threading.Lock())
    write_outputs(args, rows, info, timing, kiln_s, time.perf_counter() - t_start, load_errors)
    bad = [r for r in rows if r["fidelity"] != "ok"]
    untimed = [r for r in rows if timing and r["fidelity"] == "ok" and "speedup" not in r]
    return 1 if bad or untimed or load_errors else 0


def run_pool(conf, shards, handle, rows):
    """Spawned workers (CUDA needs spawn); a dead worker breaks the barrier and frees the lock."""
    ctx = mp.get_context("spawn")
    q, barrier, lock = ctx.Queue(), ctx.Barrier(len(shards)), ctx.Lock()
    procs = [ctx.Process(target=worker_entry, args=(w, conf, s, q, barrier, lock), daemon=True)
             for w, s in enumerate(shards)]
    for p in procs:
        p.start()
    finished, holder, timed = set(), {}, set()  # holder: worker -> task it times under the lock

    def take(msg):
        kind, key, _ = msg
        if kind == "done":
            finished.add(key)
        elif kind == "lock":
            holder[key] = msg[2]
        else:
            if kind == "B":
                timed.add(key)
                for w in [w for w, i in holder.items() if i == key]:
                    del holder[w]
            handle(msg)

    try:
        while len(finished) < len(procs):
            try:
                take(q.get(timeout=1.0))
                continue
            except queue.Empty:
                pass
            for w, p in enumerate(procs):
                if w in finished or p.is_alive():
                    continue
                while True:  # messages it sent before dying
                    try:
                        take(q.get_nowait())
                    except queue.Empty:
                        break
                if w in finished:
                    continue
                finished.add(w)
                barrier.abort()
                if w in holder:
                    lock.release()
                for job in shards[w]:
                    r = rows[job["index"]]
                    why = f"worker process died (exit code {p.exitcode})"
                    if r["fidelity"] is None:
                        r["fidelity"] = "error: " + why
                    elif job["index"] not in timed and r.get("compile_check") == "ok":
                        r["timing_error"] = why
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join()


def write_outputs(args, rows, info, timing, kiln_s, wall_s, load_errors):
    mode = "test-aid:no-compile" if args.fake_compile else args.mode
    if info["device"] is None:  # no worker ran
        info["device"] = device_name(torch.device(args.device))
    ok = [r for r in rows if r["fidelity"] == "ok"]
    mism = [r for r in rows if (r["fidelity"] or "").startswith(("mismatch", "inputs differ"))]
    err = [r for r in rows if r not in ok and r not in mism]
    timed = [r for r in rows if "speedup" in r]
    no_base = [r for r in ok if timing and "speedup" not in r]
    geo = math.exp(statistics.fmean(math.log(r["speedup"]) for r in timed)) if timed else None
    summary = {"tasks": len(rows) + len(load_errors), "fidelity_ok": len(ok),
               "fidelity_mismatch": len(mism), "fidelity_error": len(err) + len(load_errors),
               "load_errors": load_errors, "timed": len(timed),
               "geomean_compile_speedup": geo,
               "eager_total_ms": sum(r["eager"]["median_ms"] for r in timed),
               "compile_total_ms": sum(r["compiled"]["median_ms"] for r in timed),
               "compile_total_s": sum(r.get("compile_s", 0) for r in rows),
               "kiln_validate_s": kiln_s, "wall_s": wall_s}
    print(f"\n{summary['tasks']} tasks: fidelity {len(ok)} ok, {len(mism)} mismatch, "
          f"{summary['fidelity_error']} error; device {info['device']}, torch {info['torch']}")
    for r in mism + err:
        print(f"  {r['name']}: {r['fidelity']}")
    for m in load_errors:
        print(f"  {m}")
    if timing:
        print(f"timing ({mode}): {len(timed)} tasks with compile baselines, {len(no_base)} "
              "without" +
              (f", geomean compile speedup over eager x{geo:.3f}" if geo else "") +
              f"; eager total {summary['eager_total_ms']:.1f} ms, compile total "
              f"{summary['compile_total_ms']:.1f} ms, compiling {summary['compile_total_s']:.0f} s")
        for r in no_base:
            print(f"  no compile baseline: {r['name']}: "
                  f"{r.get('timing_error') or r.get('compile_check')}")
    print(f"wall {wall_s:.1f} s (kiln validate {kiln_s:.1f} s)", flush=True)
    if args.out:
        entries = {}
        for r in timed:
            entries[r["content_hash"]] = {
                "task": r["name"], "eager_ms": r["eager"]["median_ms"],
                "compile_ms": r["compiled"]["median_ms"], "eager_cv": r["eager"]["cv"],
                "compile_cv": r["compiled"]["cv"],
                "eager_trials": r["eager"]["trials"], "compile_trials": r["compiled"]["trials"],
                "compile_s": r.get("compile_s"), "kiln_eager_ms": r.get("kiln_eager_ms")}
        doc = {"kiln_baselines": 1, "device": info["device"], "torch": info["torch"], "mode": mode,
               "tasks": entries}
        if args.fake_compile:
            doc["test_aid"] = "--fake-compile: compile_ms is eager time, not torch.compile"
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
    if args.report:
        with open(args.report, "w") as f:
            json.dump({"kiln_baselines_report": 1, "device": info["device"],
                       "torch": info["torch"], "mode": mode, "args": vars(args), "rows": rows,
                       "summary": summary}, f, indent=1)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except UsageError as e:
        print(f"torch_baselines.py: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
