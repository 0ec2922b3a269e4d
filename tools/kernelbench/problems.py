"""Loading KernelBench problems, naming them, and running a problem's code."""
import ast
import builtins
import json
import math
import os
import re

import torch.nn as nn

from kernelbench_draws import Blocked

from . import compat


class UsageError(Exception):
    """Bad arguments or unreadable input: exit status 2."""


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

def exec_problem(code, filename, scale, sizes_too=False, min_batch=1, tie_batch=False):
    """The problem's module namespace, with `batch_size = EXPR` scaled. Returns (ns, scaling,
    source): source is the code as it ran, each scaled `batch_size = EXPR` written as its value
    (the [kernelbench] table keeps it, so that Model(*get_init_inputs()) has the task's sizes).
    sizes_too: the other module-level sizes (ints, or lists / tuples of them) by sqrt(F) as well;
    tie_batch: with it, a size equal to batch_size's own value is the batch used as a feature
    size (KernelBench's hinge loss) and becomes the scaled batch; min_batch: the least batch a
    scaled one gets (BatchNorm in training needs two values per channel)."""
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
        batch_hits = len(hits)
        if not hits or sizes_too:  # the sizes themselves, each by sqrt(F) (a matrix's elements by F)
            for i, node in enumerate(tree.body):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                        isinstance(node.targets[0], ast.Name) and \
                        node.targets[0].id != "batch_size" and _size_constant(node.value):
                    hits.append((i, node.value))
                    node.value = ast.Call(func=ast.Name("__kiln_scale_size__", ast.Load()),
                                          args=[ast.Constant(node.targets[0].id), node.value],
                                          keywords=[])
            if batch_hits:
                scaling["note"] = ("too large with batch_size scaled: each other module-level "
                                   f"size >= {MIN_SCALED_SIZE} scaled by sqrt(F) too")
            else:
                scaling["note"] = ("no module-level batch_size: each module-level size >= "
                                   f"{MIN_SCALED_SIZE} scaled by sqrt(F)" if hits else
                                   "no module-level batch_size nor a size to scale: sizes as "
                                   "given")
        ast.fix_missing_locations(tree)

    def scale_batch(v):
        if isinstance(v, bool) or not isinstance(v, int):
            raise Blocked("input", "batch_size is not an integer", f"batch_size = {v!r}")
        scaled = max(1, int(round(v * scale)))
        new = max(min(v, min_batch), scaled)
        scaling["batch_size"] = {"from": v, "to": new}
        if new > scaled:
            scaling["batch_size"]["least"] = min_batch
        values.append(new)
        return new

    def scale_one(v):
        if isinstance(v, (list, tuple)):
            return type(v)(scale_one(x) for x in v)
        if isinstance(v, bool) or not isinstance(v, int) or v < MIN_SCALED_SIZE:
            return v
        batch = scaling["batch_size"]
        if tie_batch and batch and v == batch["from"]:
            return batch["to"]
        new = max(1, int(round(v * math.sqrt(scale))))
        if v % 8 == 0:  # keep what alignment the size had
            new = max(8, 8 * int(round(new / 8)))
        return new

    def scale_size(name, v):
        new = scale_one(v)
        scaling.setdefault("sizes", {})[name] = {"from": v, "to": new}
        values.append(new)
        return new

    compat.provide()
    ns = {"__name__": "__kernelbench_problem__", "__file__": filename,
          "__builtins__": builtins, "__kiln_scale_batch__": scale_batch,
          "__kiln_scale_size__": scale_size}
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
    hits.sort(key=lambda h: h[0])  # values come in the order the statements ran: the body's
    return ns, scaling, (_as_run(code, hits, values) if hits else code)


MIN_SCALED_SIZE = 256  # a module-level int constant this large is a size (not a kernel_size)


def _size_constant(node):
    """A module-level value that is a size to scale: an int >= MIN_SCALED_SIZE computed from
    literals alone (N = 2048 * 2; not K = N * 2, which follows N), or a list / tuple of ints with
    one such (hidden_layer_sizes = [32768, 32768], input_shape = (32768,))."""
    if any(isinstance(n, (ast.Name, ast.Call, ast.Attribute)) for n in ast.walk(node)):
        return False
    try:
        v = eval(compile(ast.Expression(node), "<size>", "eval"), {"__builtins__": {}})
    except Exception:
        return False

    def size(x):
        return isinstance(x, int) and not isinstance(x, bool) and x >= MIN_SCALED_SIZE

    if isinstance(v, (list, tuple)):
        return bool(v) and all(isinstance(x, int) and not isinstance(x, bool) for x in v) and \
            any(size(x) for x in v)
    return size(v)


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
        want.body[i].value = ast.parse(repr(new), mode="eval").body
    if ast.dump(ast.parse(out)) != ast.dump(want):
        raise AssertionError("internal: the scaled source does not parse as the code that ran")
    return out


def exec_for(prob, conf, res):
    """exec_problem() as conf scales it; res gets its scaling and the scaling's note."""
    ns, scaling, source = exec_problem(prob["code"], prob["source"], conf["scale_batch"],
                                       conf.get("scale_sizes", False), conf.get("min_batch", 1),
                                       conf.get("tie_batch", False))
    res["scaling"] = scaling
    if "note" in scaling:
        res["notes"].append(scaling["note"])
    return ns, scaling, source


def describe_scaling(scaling, scale):
    """What --scale-batch did to a problem, for the task's description."""
    out = ""
    if scaling.get("batch_size"):
        b = scaling["batch_size"]
        out = f"; batch_size {b['from']} -> {b['to']} (--scale-batch {scale:g}"
        out += f", at least {b['least']} for BatchNorm)" if "least" in b else ")"
    if scaling.get("sizes"):
        out += "; sizes " + ", ".join(f"{k} {v['from']} -> {v['to']}"
                                      for k, v in scaling["sizes"].items()) + \
            f" (--scale-batch {scale:g}: each size by its square root)"
    if not out and scale != 1.0:
        out = "; sizes as given (no batch_size or size to scale)"
    return out


def _short(e):
    msg = str(e).strip().split("\n")[0][:300]
    return f"{type(e).__name__}: {msg}"
