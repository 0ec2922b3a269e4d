#!/usr/bin/env bash
# A task whose reference is the problem's own PyTorch module (op pytorch_module; the LSTM of
# tests/data/module, which spec v1's ops cannot say): `kiln tasks validate` runs it, the expert
# skips it with the reason (counted, not failed), and ModelNew sources are judged against it: the
# problem's Model as ModelNew passes, one that reads the LSTM's first step instead of its last is
# wrong, and one that searches its own process for the reference's output is wrong (the reference
# runs in the trusted executor).
#   module_reference.sh KILN PYTHON SOURCE_DIR WORK_DIR
set -euo pipefail
kiln="$1" python="$2" src="$3" work="$4"
data="$src/tests/data/module"
rm -rf "$work" && mkdir -p "$work"
"$kiln" tasks validate "$data/level3/kb_l3_lstm_module.toml" > "$work/validate.log" 2>&1 ||
  { cat "$work/validate.log"; exit 1; }
grep -q "1 ok, 0 bad" "$work/validate.log" || { cat "$work/validate.log"; exit 1; }
"$kiln" eval --policy expert --policy "sources:$data/subs" --policy "sources:$data/subs_wrong" \
  --policy "sources:$data/subs_hostile" \
  --suite "$data/level3/kb_l3_lstm_module.toml" --cache-dir "$work/cache" --json "$work/eval.json" \
  > "$work/eval.log" 2>&1 || { cat "$work/eval.log"; exit 1; }
tail -n 8 "$work/eval.log"
"$python" - "$work/eval.json" <<'PY'
import json, sys
pols = json.load(open(sys.argv[1]))
row = {p["policy"].rstrip("/").split("/")[-1]: p["tasks"][0] for p in pols}
overall = {p["policy"].rstrip("/").split("/")[-1]: p["overall"] for p in pols}
bad = []
def want(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        bad.append(what)
want(row["expert"]["outcome"] == "skipped" and "PyTorch module" in row["expert"]["message"] and
     overall["expert"]["skipped"] == 1 and overall["expert"]["tasks"] == 0,
     f"expert: skipped with the reason, counted apart ({row['expert']})")
want(row["subs"]["outcome"] == "correct" and row["subs"]["eager_ms"] > 0,
     f"the problem's Model as ModelNew: correct against the module reference ({row['subs']['outcome']}: {row['subs'].get('message', '')[:300]})")
want(row["subs_hostile"]["outcome"] == "wrong",
     f"a ModelNew that searches its process for the reference's output: wrong, it is not there ({row['subs_hostile']['outcome']}: {row['subs_hostile'].get('message', '')[:200]})")
want(row["subs_wrong"]["outcome"] == "wrong",
     f"a ModelNew that reads the first step: wrong ({row['subs_wrong']['outcome']}: {row['subs_wrong'].get('message', '')[:200]})")
sys.exit(1 if bad else 0)
PY
