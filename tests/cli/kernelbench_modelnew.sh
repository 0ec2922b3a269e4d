#!/usr/bin/env bash
# KernelBench ModelNew submissions end to end on cpu: a problem in KernelBench's format imported
# by `kiln tasks import`, then `kiln eval --policy sources:DIR` on one submission per case
# (tests/data/kernelbench/modelnew/submissions): an honest load_inline kernel passes, and every
# hostile or broken one gets the verdict and the reason pinned below.
#   kernelbench_modelnew.sh KILN PYTHON SOURCE_DIR WORK_DIR
set -euo pipefail
kiln="$1" python="$2" src="$3" work="$4"
fixtures="$src/tests/data/kernelbench/modelnew"
rm -rf "$work" && mkdir -p "$work/problems/level2" "$work/tasks" "$work/subs"
cp "$fixtures/linear_relu.py" "$work/problems/level2/"
"$kiln" tasks import "$work/problems" --out "$work/imported" --report "$work/import.json" \
  > "$work/import.log" 2>&1 || { cat "$work/import.log"; exit 1; }
task="$work/imported/level2/kb_l2_linear_relu.toml"
grep -q '^\[kernelbench\]' "$task" || { echo "no [kernelbench] table in $task"; exit 1; }
# One copy of the task per case, named after it: sources:DIR reads DIR/<task>.py.
for s in "$fixtures"/submissions/*.py; do
  case_name="$(basename "$s" .py)"
  sed "s/^name = \"kb_l2_linear_relu\"/name = \"mn_$case_name\"/" "$task" > "$work/tasks/mn_$case_name.toml"
  cp "$s" "$work/subs/mn_$case_name.py"
done
"$kiln" eval --policy "sources:$work/subs" --suite "$work/tasks" \
  --cache-dir "$work/cache" --json "$work/eval.json" > "$work/eval.log" 2>&1 ||
  { cat "$work/eval.log"; exit 1; }
cat "$work/eval.log" | tail -n 20
"$python" - "$work/eval.json" <<'PY'
import json, re, sys
rows = {r["task"][3:]: r for r in json.load(open(sys.argv[1]))[0]["tasks"]}
want = {  # case: (outcome, pattern the reason must match)
    "honest_load_inline": ("correct", ""),
    "zeros": ("wrong", ""),
    "cache_by_pointer": ("wrong", ""),
    "own_weights": ("wrong", ""),
    "wrong_names": ("compile_error", r"missing \[.fc.weight., .fc.bias.\].*unexpected \['linear.weight', 'linear.bias'\]"),
    "no_model_new": ("compile_error", r"defines no class ModelNew"),
    "syntax_error": ("compile_error", r"submission.py:3: syntax error"),
    "wrong_shape": ("compile_error", r"returns shape \[64, 128\]; the task's is \[64, 96\]"),
    "thread_in_forward": ("runtime_error", ""),
    "escape_in_forward": ("runtime_error", ""),
    "endless_forward": ("timeout", ""),
}
bad = []
for case, (outcome, pattern) in want.items():
    r = rows.get(case)
    if r is None:
        bad.append(f"{case}: no row")
        continue
    text = json.dumps(r)
    if r["outcome"] != outcome or (pattern and not re.search(pattern, text)):
        bad.append(f"{case}: {r['outcome']} (wanted {outcome} /{pattern}/): {text[:600]}")
if set(rows) != set(want):
    bad.append(f"cases without an expectation: {sorted(set(rows) - set(want))}")
print("\n".join(bad) if bad else f"kernelbench_modelnew: {len(want)} cases as expected")
sys.exit(1 if bad else 0)
PY
