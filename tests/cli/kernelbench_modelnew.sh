#!/usr/bin/env bash
# KernelBench ModelNew submissions end to end: a problem in KernelBench's format imported by
# `kiln tasks import`, then `kiln eval --policy sources:DIR` on one submission per case
# (tests/data/kernelbench/modelnew/submissions; on cuda those that run on either device and
# submissions_cuda): an honest load_inline kernel passes, and every hostile or broken one gets the
# verdict and the reason pinned below. On cuda it exits 77 (skipped) where no device exists.
#   kernelbench_modelnew.sh KILN PYTHON SOURCE_DIR WORK_DIR [cpu|cuda]
set -euo pipefail
kiln="$1" python="$2" src="$3" work="$4" backend="${5:-cpu}"
fixtures="$src/tests/data/kernelbench/modelnew"
if [ "$backend" = cuda ]; then
  if ! nvidia-smi -L > /dev/null 2>&1; then
    echo "SKIP: no CUDA device here"
    exit 77
  fi
  cases=("$fixtures"/submissions/{cache_by_pointer,wrong_names,wrong_shape,secret_in_forward}.py
    "$fixtures"/submissions_cuda/*.py)
else
  cases=("$fixtures"/submissions/*.py)
fi
rm -rf "$work" && mkdir -p "$work/problems/level2" "$work/tasks" "$work/subs"
cp "$fixtures/linear_relu.py" "$work/problems/level2/"
"$kiln" tasks import "$work/problems" --out "$work/imported" --report "$work/import.json" \
  > "$work/import.log" 2>&1 || { cat "$work/import.log"; exit 1; }
task="$work/imported/level2/kb_l2_linear_relu.toml"
grep -q '^\[kernelbench\]' "$task" || { echo "no [kernelbench] table in $task"; exit 1; }
# One copy of the task per case, named after it: sources:DIR reads DIR/<task>.py.
for s in "${cases[@]}"; do
  case_name="$(basename "$s" .py)"
  sed "s/^name = \"kb_l2_linear_relu\"/name = \"mn_$case_name\"/" "$task" > "$work/tasks/mn_$case_name.toml"
  cp "$s" "$work/subs/mn_$case_name.py"
done
# --job-timeout: the endless forward is killed after 30 s, not the default 120.
"$kiln" eval --backend "$backend" --policy "sources:$work/subs" --suite "$work/tasks" \
  --cache-dir "$work/cache" --job-timeout 30 --json "$work/eval.json" > "$work/eval.log" 2>&1 ||
  { cat "$work/eval.log"; exit 1; }
cat "$work/eval.log" | tail -n 20
"$python" - "$work/eval.json" "$backend" <<'PY'
import json, re, sys
rows = {r["task"][3:]: r for r in json.load(open(sys.argv[1]))[0]["tasks"]}
cpu = {  # case: (outcome, pattern the reason must match)
    "honest_load_inline": ("correct", ""),
    "zeros": ("wrong", ""),
    "cache_by_pointer": ("wrong", ""),
    "own_weights": ("wrong", ""),
    "wrong_names": ("compile_error", r"missing \[.fc.weight., .fc.bias.\].*unexpected \['linear.weight', 'linear.bias'\]"),
    "no_model_new": ("compile_error", r"defines no class ModelNew"),
    "syntax_error": ("compile_error", r"submission.py:3: syntax error"),
    "wrong_shape": ("compile_error", r"returns shape \[64, 128\]; the task's is \[64, 96\]"),
    # Why a forward failed is said (the exception), as KernelBench tells its agents.
    "thread_in_forward": ("runtime_error", r"ModelNew's forward: RuntimeError: can't start new thread"),
    "escape_in_forward": ("runtime_error", r"RuntimeError: every escape was denied"),
    "endless_forward": ("timeout", ""),
    # A file the sandbox denies, raised as an exception: the denial comes back, never the file.
    "secret_at_import": ("compile_error", r"Permission denied: '/etc/passwd'"),
    "secret_in_forward": ("runtime_error", r"Permission denied: '/etc/passwd'"),
    "writes_input": ("input_mutated", ""),
}
cuda = {
    "honest_cuda": ("correct", ""),
    # Built by the kernel host at load: the compile stage has no device.
    "device_tensor_in_init": ("correct", ""),
    "zeros": ("wrong", ""),
    "cache_by_pointer": ("wrong", ""),
    "wrong_names": ("compile_error", r"missing \[.fc.weight., .fc.bias.\].*unexpected \['linear.weight', 'linear.bias'\]"),
    # No device at the compile stage: the first forward, at load, finds the shape.
    "wrong_shape": ("runtime_error", r"returns shape \[64, 128\]; the task's is \[64, 96\]"),
    "raises_in_forward": ("runtime_error", r"ModelNew's forward: RuntimeError: deliberate"),
    "side_stream": ("!correct", ""),
    "secret_in_forward": ("runtime_error", r"Permission denied: '/etc/passwd'"),
}
want = cuda if sys.argv[2] == "cuda" else cpu
bad = []
for case, (outcome, pattern) in want.items():
    r = rows.get(case)
    if r is None:
        bad.append(f"{case}: no row")
        continue
    text = json.dumps(r)
    refused = outcome == "!correct" and r["outcome"] != "correct"
    if not (refused or r["outcome"] == outcome) or (pattern and not re.search(pattern, text)):
        bad.append(f"{case}: {r['outcome']} (wanted {outcome} /{pattern}/): {text[:300]} ... "
                   f"{r.get('message', '')[-1500:]}")
leaked = [c for c, r in rows.items() if "root:x:0:0" in json.dumps(r)]
if leaked:
    bad.append(f"a file's text came back in: {leaked}")
if set(rows) != set(want):
    bad.append(f"cases without an expectation: {sorted(set(rows) - set(want))}")
print("\n".join(bad) if bad else
      f"kernelbench_modelnew ({sys.argv[2]}): {len(want)} cases as expected")
sys.exit(1 if bad else 0)
PY
