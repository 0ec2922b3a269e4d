#!/usr/bin/env python3
"""Times ModelNew solutions the way KernelBench does, to set beside Kiln's times of the same ones.

    python3 tools/kernelbench_timing.py --tasks TASKS --subs SUBS --out times.json [--jobs 12]

TASKS holds tasks imported from KernelBench (`kiln tasks import`; their [kernelbench] table keeps
the problem's source at the task's sizes and its init inputs); SUBS holds `<task>.py` ModelNew
files. For each: the problem's Model and the ModelNew are built with the init inputs, ModelNew
gets Model's state_dict (strict), both run on get_inputs() on the GPU and are compared, then each
is timed by KernelBench's CUDA-event method (its src/kernelbench/timing.py, cuda_event): per
trial, synchronize, thrash L2 with a 256 MiB write, record the start event, call, record the end
event, synchronize; 3 warm-up calls, 100 trials, the median. A second figure times the same calls
with the start event settled before the call (what Kiln's Python kernel host does), so CPU time
spent launching cannot hide behind the L2 write.

load_inline builds run first, in parallel, one process per solution (--jobs), into one extension
folder; timing is sequential in this process, on the builds already made.
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import time
import tomllib


def problem(task_path):
    with open(task_path, "rb") as f:
        spec = tomllib.load(f)
    kb = spec.get("kernelbench")
    if not kb:
        raise RuntimeError(f"{task_path} has no [kernelbench] table (not imported from KernelBench)")
    return kb


def build_one(sub, ext_dir):
    # A process of its own: load_inline runs at import and builds into ext_dir.
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=ext_dir)
    code = ("import importlib.util, sys\n"
            "s = importlib.util.spec_from_file_location('sub', sys.argv[1])\n"
            "s.loader.exec_module(importlib.util.module_from_spec(s))\n")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", code, sub], env=env, capture_output=True, text=True)
    return time.monotonic() - t0, r.returncode, r.stderr[-2000:]


def load_module(path, name):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def time_calls(torch, fn, args, settle, warmup=3, trials=100):
    thrash = torch.empty((32, 1024, 1024), dtype=torch.int64, device="cuda")
    with torch.no_grad():
        for _ in range(warmup):
            fn(*args)
        torch.cuda.synchronize()
        times = []
        for _ in range(trials):
            torch.cuda.synchronize()
            thrash.fill_(1)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            if settle:
                start.synchronize()
            fn(*args)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", required=True, help="folder of imported task files (searched deep)")
    ap.add_argument("--subs", required=True, help="folder of <task>.py ModelNew files")
    ap.add_argument("--out", required=True, help="JSON rows")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--ext-dir", default=None, help="load_inline's build folder (default: a "
                    "fresh one beside --out)")
    a = ap.parse_args()
    tasks = {}
    for root, _, files in os.walk(a.tasks):
        for f in files:
            if f.endswith(".toml"):
                tasks[f[:-5]] = os.path.join(root, f)
    subs = sorted(f[:-3] for f in os.listdir(a.subs) if f.endswith(".py"))
    missing = [s for s in subs if s not in tasks]
    if missing:
        sys.exit(f"kernelbench_timing: no task file for {missing} under {a.tasks}")
    ext_dir = os.path.abspath(a.ext_dir or a.out + ".ext")
    os.makedirs(ext_dir, exist_ok=True)
    os.environ["TORCH_EXTENSIONS_DIR"] = ext_dir

    builds = {}
    with concurrent.futures.ThreadPoolExecutor(max(1, a.jobs)) as pool:
        futures = {pool.submit(build_one, os.path.join(a.subs, s + ".py"), ext_dir): s
                   for s in subs}
        for fut in concurrent.futures.as_completed(futures):
            s = futures[fut]
            builds[s] = fut.result()
            print(f"built {s}: {builds[s][0]:.1f} s, rc {builds[s][1]}", flush=True)

    import torch
    rows = []
    for s in subs:
        row = {"task": s, "build_s": round(builds[s][0], 2)}
        rows.append(row)
        if builds[s][1] != 0:
            row["error"] = "build failed: " + builds[s][2]
            continue
        try:
            kb = problem(tasks[s])
            ns = {"__name__": "kernelbench_problem"}
            exec(compile(kb["source"], tasks[s] + ":source", "exec"), ns)
            torch.manual_seed(0)
            model = ns["Model"](*kb["init_inputs"]).cuda().eval()
            new = load_module(os.path.join(a.subs, s + ".py"), "sub_" + s).ModelNew(
                *kb["init_inputs"]).cuda().eval()
            new.load_state_dict(model.state_dict(), strict=True)
            args = [x.cuda() if isinstance(x, torch.Tensor) else x for x in ns["get_inputs"]()]
            with torch.no_grad():
                want, got = model(*args), new(*args)
            row["max_abs_diff"] = float((want - got).abs().max())
            row["eager_ms"] = time_calls(torch, model, args, settle=False)
            row["kernelbench_ms"] = time_calls(torch, new, args, settle=False)
            row["settled_ms"] = time_calls(torch, new, args, settle=True)
        except Exception as e:  # one problem's failure is a row, not the end of the run
            row["error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(row), flush=True)
    with open(a.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "method": "KernelBench cuda_event: 3 warm-up, 100 trials, L2 thrash, median",
                   "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
