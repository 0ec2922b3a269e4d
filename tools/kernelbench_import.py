#!/usr/bin/env python3
"""Import KernelBench problems as Kiln tasks: spec v1 op graphs where spec v1 says a problem
exactly, else the problem's own Model as the reference (op pytorch_module); or refused, with the
reason.

    /usr/bin/python3 tools/kernelbench_import.py PATH... --out DIR [--scale-batch F]
        [--report OUT.json] [--kiln BIN] [--allow-degenerate] [--jobs N] [--level N]
        [--device cpu|cuda[:N]] [--max-mib M] [--timeout S] [--threads T]
        [--form auto|spec|module] [--no-check]

--form auto (the default): a problem spec v1 cannot say (its blockers below, kept in the report
as `not_spec_v1`) is written as a task whose reference is its own Model, traced to TorchScript
with its params left as placeholders (tools/kernelbench/module_form.py; docs/DESIGN.md, op
pytorch_module), and checked the same way. The report's `form` says which (spec_v1 |
pytorch_module); the summary counts the module ones. --form spec: spec v1 or refused; --form
module: every problem as its Model.

PATH is a KernelBench problem file (`class Model(nn.Module)`, `get_inputs()`, `get_init_inputs()`,
module-level sizes), a folder of them (searched recursively; KernelBench's layout: the level comes
from a `levelN` path component), or a JSON Lines file of {"code": ...} records (CUDA-Agent-Ops-6K's
format; optional "name" / "id" and "level" fields). `kiln tasks import ...` runs this script.

For each problem: its code runs (with `batch_size = ...` scaled by --scale-batch), get_inputs() runs
with torch's factories recording how each input is drawn, Model(*get_init_inputs()) is built with
torch's factories and nn.init recording how each parameter is initialized, and Model.forward is
traced with torch.fx (a wrapper binds get_inputs()'s non-tensor items as constants). Sizes and every
shape-derived constant come from running the trace on meta tensors. Each graph node is mapped to
Kiln ops (rules: MODULES, FUNCS and METHODS, tools/kernelbench/registry.py; the modules of
tools/kernelbench/ hold the importer by concern); anything spec v1 cannot say exactly (an op, an
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
elements. A problem degenerate under KernelBench's own draws (ReLU on torch.rand inputs; a deep
network at torch.nn's default init that forgets its input; a cumprod that underflows; a randn bias
that clamps every output) is imported again with its inputs drawn N(0, 1), its kaiming_uniform
weights N(0, 2 / fan_in) (He's rule), both, then its params from another seed (the task's
param_seed), a product first trying its inputs near 1 (tools/kernelbench/redraw.py): the first the
check accepts is written, its description and the report's `redrawn` saying what changed and why;
--keep-draws refuses such a problem instead. A BatchNorm problem degenerate on a batch scaled to 1
(each sample normalized by itself) is checked at batch 2 first. Degenerate tasks are
reported and not written unless --allow-degenerate.

--scale-batch F (0 < F <= 1) rewrites a module-level `batch_size = EXPR` to max(1, round(EXPR*F))
before the code runs, so every size derived from it follows. A problem without `batch_size` (the
matmuls: N = 2048 * 2) has each module-level size computed from literals alone and >= 256 scaled
by sqrt(F) instead (a matrix's elements by F; a multiple of 8 stays one; a size derived from
another follows it); the report's scaling and the task's description say what changed. --device cuda runs the check (Kiln's reference and PyTorch's,
TF32 off) on the GPU, with no work cap, so problems import at KernelBench's own sizes: the jobs
share 90% of the device's memory, and a problem too large for its share (or that runs out of
memory beside the others) is checked again alone, with all of it. --max-mib M: a task whose
tensors (inputs, params and every op result, summed: the check runs PyTorch and Kiln on them)
need more is not checked or written ("too_large").
--no-check maps only and writes nothing (a dry run).

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
import json
import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import time

# glibc hands large freed blocks back to the kernel and faults them in again on the next
# allocation: importing a 400 MB problem took 106 s, mostly page faults (kiln's check 70 s of
# it), and 34 s with freed memory kept. This process and the kiln it runs keep it, unless the
# caller chose its own GLIBC_TUNABLES; it must be set before the process starts, hence the exec.
if __name__ == "__main__" and "GLIBC_TUNABLES" not in os.environ:
    os.environ["GLIBC_TUNABLES"] = ("glibc.malloc.mmap_threshold=4294967296:"
                                    "glibc.malloc.trim_threshold=17179869184")
    os.execv(sys.executable, [sys.executable, *sys.argv])

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_baselines  # noqa: E402,F401  (first: exits with a message when torch is missing)

import torch  # noqa: E402

from kernelbench.check import KILN_MAX_OPS  # noqa: E402
from kernelbench.worker import FORMS, worker_main  # noqa: E402
from kernelbench.problems import UsageError, assign_names, load_problems  # noqa: E402

# Re-exported: tests/tools/test_kernelbench_import.py imports this script as a module.
from kernelbench_draws import Blocked  # noqa: E402,F401
from kernelbench.check import BlockedMany, check_problem, map_problem  # noqa: E402,F401
from kernelbench.problems import describe_scaling, exec_problem  # noqa: E402,F401
from kernelbench.toml_out import to_toml  # noqa: E402,F401

RANKED_KINDS = ("missing_op", "missing_attr", "init", "input", "limit")
STATUSES = ("imported", "degenerate", "rejected", "too_large", "mappable")


def run_all(probs, conf, progress):
    """Each problem in a forked process (a crash or a hang costs that problem only)."""
    ctx = mp.get_context("fork")
    pending = list(enumerate(probs))
    running = {}  # index -> (process, conn, start, this attempt's start)
    results = [None] * len(probs)
    while pending or running:
        while pending and len(running) < conf["jobs"]:
            i, prob = pending.pop(0)
            r, w = ctx.Pipe(duplex=False)
            p = ctx.Process(target=worker_main, args=(prob, conf, w), daemon=True)
            p.start()
            w.close()
            running[i] = (p, r, time.time(), time.time())
        done = []
        for i, (p, r, start, attempt) in running.items():
            res = None
            if r.poll(0.05):
                try:
                    res = r.recv()
                except EOFError:
                    res = None
                if res is not None and "attempt" in res:  # a redraw starts: its own --timeout
                    running[i] = (p, r, start, time.time())
                    continue
                p.join()
            elif not p.is_alive():
                p.join()
            elif time.time() - attempt > conf["timeout"]:
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


def out_of_memory(res):
    said = " ".join(f"{b.get('what', '')} {b.get('detail', '')}" for b in res["blockers"])
    # CUDA's "out of memory", not the crash report's guess ("out of memory?")
    return res["status"] == "rejected" and re.search(r"out of memory(?!\?)", said.lower())


def _first_what(res):
    why = res.get("not_spec_v1") or [{"kind": "?", "what": "?"}]
    if why[0]["kind"] == "form":
        return why[0]["what"]
    return "spec v1 cannot say " + why[0]["what"] + (f" +{len(why) - 1}" if len(why) > 1 else "")


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


def refused_for(r):
    """Why a problem is not a task, in two: "nature" where no task could check it (degenerate under
    every draw Kiln tries, a random forward, ill-conditioned in float32), "not_yet" where Kiln or
    this machine falls short (a missing op or draw, too large here, a module not installed);
    None for a task."""
    if r["status"] in ("imported", "mappable"):
        return None
    if r["status"] == "degenerate" and "redraw_outcomes" in r and \
            all(o == "degenerate" for o in r["redraw_outcomes"]):
        return "nature"  # not where a redraw failed for this machine's reasons (memory, time)
    blockers = r.get("blockers") or []
    if r["status"] == "rejected" and blockers and all(
            b["kind"] == "random" or b["what"] == "ill-conditioned in float32" for b in blockers):
        return "nature"
    return "not_yet"


def summarize(results):
    levels = {}
    for r in results:
        lv = levels.setdefault(str(r["level"]), {"problems": 0, **{s: 0 for s in STATUSES},
                                                 "rejected_by_kind": {},
                                                 "degenerate_flagged": 0})
        lv["problems"] += 1
        lv[r["status"]] += 1
        why = refused_for(r)
        if why:
            r["refused_for"] = why
            lv["refused_for_" + why] = lv.get("refused_for_" + why, 0) + 1
        if r["status"] == "imported" and r.get("form") == "pytorch_module":
            lv["as_module"] = lv.get("as_module", 0) + 1
        if r.get("degenerate"):
            lv["degenerate_flagged"] += 1
        if r["status"] == "imported" and r.get("redrawn"):
            lv["redrawn"] = lv.get("redrawn", 0) + 1
        if r["status"] == "rejected":
            for kind in sorted({b["kind"] for b in r["blockers"]}):
                lv["rejected_by_kind"][kind] = lv["rejected_by_kind"].get(kind, 0) + 1
    return levels


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog=os.environ.get("KILN_IMPORT_PROG", "kernelbench_import.py"), allow_abbrev=False,
        description="Import KernelBench problems as Kiln tasks: spec v1 where it says a "
                    "problem exactly, else the problem's own Model as the reference (op "
                    "pytorch_module), or refused with the reason.",
        epilog="See the module docstring for the method.")
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
    p.add_argument("--keep-draws", action="store_true",
                   help="refuse a problem degenerate under KernelBench's own draws rather than "
                        "redraw its inputs, weights or param seed")
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="problems in parallel")
    p.add_argument("--threads", type=int, default=0, metavar="T",
                   help="torch / kiln threads per job (default: cores / jobs)")
    p.add_argument("--level", type=int, default=None, metavar="N",
                   help="level for problems whose path or record does not say")
    p.add_argument("--device", default="cpu", metavar="DEV",
                   help="where the check runs: cpu, cuda or cuda:N (Kiln's reference and "
                        "PyTorch's, on the same device)")
    p.add_argument("--max-mib", type=float, default=None, metavar="M",
                   help="largest task (all tensors) checked; larger: too_large (default: 2048 "
                        "on cpu, the device's memory shared by the jobs on cuda)")
    p.add_argument("--max-ops", type=int, default=KILN_MAX_OPS, metavar="N",
                   help="longest task written (kiln's limit, tasks.max_ops / --max-ops: %(default)s)")
    p.add_argument("--max-gflop", type=float, default=None, metavar="G",
                   help="largest linear/matmul/bmm work per forward checked (default: 16 on "
                        "cpu, whose reference BLAS runs a few GFLOP/s; none on cuda); larger: "
                        "too_large")
    p.add_argument("--timeout", type=float, default=900.0, metavar="S",
                   help="seconds per check of a problem (each redraw of a degenerate one is "
                        "a check of its own)")
    p.add_argument("--form", choices=FORMS, default="auto",
                   help="auto: spec v1 when it says the problem exactly, else the problem's own "
                        "Model as the reference (op pytorch_module); spec: spec v1 only; module: "
                        "every problem as its Model (default: %(default)s)")
    p.add_argument("--no-check", action="store_true",
                   help="map only (dry run): no kiln, nothing written")
    a = p.parse_args(argv)
    if a.source_format != "kernelbench":
        raise UsageError(f"--from {a.source_format}: only 'kernelbench' is supported")
    if not 0 < a.scale_batch <= 1:
        raise UsageError(f"--scale-batch {a.scale_batch}: expected 0 < F <= 1")
    if a.jobs < 1 or a.threads < 0 or a.timeout <= 0 or (a.max_mib is not None and a.max_mib <= 0) \
            or (a.max_gflop is not None and a.max_gflop <= 0):
        raise UsageError("--jobs, --max-mib, --max-gflop and --timeout must be positive, "
                         "--threads >= 0")
    # Checked by name only: touching CUDA here would break the forked workers' own CUDA.
    if not re.fullmatch(r"cpu|cuda(:\d+)?", a.device):
        raise UsageError(f"--device {a.device}: expected cpu, cuda or cuda:N")
    if a.device == "cuda":
        a.device = "cuda:0"  # as Kiln's parse_device()
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
            "device": args.device, "form": args.form,
            "allow_degenerate": args.allow_degenerate, "keep_draws": args.keep_draws,
            "max_mib": args.max_mib,
            "max_gflop": args.max_gflop, "max_ops": args.max_ops,
            "timeout": args.timeout, "no_check": args.no_check, "jobs": args.jobs}
    if args.out:
        try:
            os.makedirs(args.out, exist_ok=True)
        except OSError as e:
            raise UsageError(f"--out {args.out}: cannot create: {e.strerror}")
    total, count = len(probs), [0]
    print(f"kernelbench_import: {total} problem(s), --scale-batch {args.scale_batch:g}, "
          f"--device {args.device}, {args.jobs} job(s) x {args.threads} thread(s)"
          + (", dry run (--no-check)" if args.no_check else ""), file=sys.stderr, flush=True)

    def progress(i, res):
        count[0] += 1
        line = f"[{count[0]:>{len(str(total))}}/{total}] {probs[i]['source']}: {res['status']}"
        if res["status"] in ("imported", "mappable"):
            line += (f" as {res['name']} (its Model, traced: {_first_what(res)})"
                     if res.get("form") == "pytorch_module"
                     else f" as {res['name']} ({res.get('ops')} ops)")
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
    # Too large beside the other jobs, or out of device memory there: each again, alone.
    alone = [i for i, r in enumerate(results) if args.jobs > 1 and (r.pop("alone", False) or
                                                                     out_of_memory(r))]
    if alone:
        print(f"kernelbench_import: {len(alone)} problem(s) need the device alone; "
              "checking them one at a time", file=sys.stderr, flush=True)
        total += len(alone)
        again = run_all([probs[i] for i in alone], dict(conf, jobs=1),
                        lambda k, res: progress(alone[k], res))  # named by its place in probs
        for i, r in zip(alone, again):
            r["notes"].append("checked alone: too large, or out of memory, beside other jobs")
            results[i] = r
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
    print("level  problems  imported  (as module)  (redrawn)  degenerate  rejected  too_large  "
          "mappable")
    for lv in sorted(levels):
        s = levels[lv]
        print(f"{lv:>5}  {s['problems']:>8}  {s['imported']:>8}  {s.get('as_module', 0):>11}  "
              f"{s.get('redrawn', 0):>9}  "
              f"{s['degenerate']:>10}  {s['rejected']:>8}  {s['too_large']:>9}  "
              f"{s['mappable']:>8}")
        if s.get("refused_for_nature") or s.get("refused_for_not_yet"):
            print(f"       not a task: {s.get('refused_for_nature', 0)} by the problem's nature "
                  "(degenerate under every draw, random, ill-conditioned in float32), "
                  f"{s.get('refused_for_not_yet', 0)} not yet")
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
