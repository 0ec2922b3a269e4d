#!/usr/bin/env python3
"""`kiln eval --policy llm` end to end on the cpu backend against the scripted server
(tests/llm/mock_openai.py): every scripted behaviour in one run of ten tasks, two turns each,
all episodes in flight together. With --backend cuda (label gpu) the server answers cuda kernels
and the pool compiles, verifies and times them on the device; it exits 77 (skipped) where no
CUDA device exists. Usage: test_llm_eval.py KILN [--backend cpu|cuda]"""
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import mock_openai  # noqa: E402


def main():
    kiln = sys.argv[1]
    backend = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--backend" else "cpu"
    if backend == "cuda" and not os.path.exists("/dev/nvidiactl"):
        print("skipped: no CUDA device (/dev/nvidiactl is absent)")
        sys.exit(77)
    with mock_openai.serving() as port, tempfile.TemporaryDirectory() as tmp:
        res = mock_openai.kiln_eval(
            [kiln, "eval", "--policy", "llm", "--llm-endpoint", "http://127.0.0.1:%d" % port,
             "--llm-model", "mock", "--llm-timeout", "2", "--llm-attempts", "3",
             "--suite", os.path.join(ROOT, "tests", "data", "llm"), "--turns", "2",
             "--parallel", "10", "--backend", backend,
             "--cache-dir", os.path.join(tmp, "cache"), "--json", os.path.join(tmp, "eval.json")])
    rows = {t["task"]: t for t in res["tasks"]}
    print(json.dumps({k: (v["outcome"], v.get("turns"), v.get("message", "")[:80])
                      for k, v in rows.items()}, indent=1))
    assert res["policy"] == "llm" and res["turns"] == 2
    assert len(rows) == 10, sorted(rows)
    for t in ("llm_correct", "llm_flaky500", "llm_429", "llm_drop", "llm_stall"):
        assert rows[t]["outcome"] == "correct", (t, rows[t])
        assert rows[t]["kernel_ms"] > 0
    fix = rows["llm_fix"]
    assert fix["outcome"] == "correct", fix  # the compile error came back and was fixed
    assert fix.get("turns") == 2, fix
    assert rows["llm_noblock"]["outcome"] == "compile_error", rows["llm_noblock"]
    assert "no fenced code block" in rows["llm_noblock"].get("message", ""), rows["llm_noblock"]
    assert rows["llm_hostile"]["outcome"] == "input_mutated", rows["llm_hostile"]
    for t, why in (("llm_malformed", "not valid JSON"), ("llm_down", "HTTP 503")):
        r = rows[t]
        assert r["outcome"] != "correct", r
        assert why in r.get("message", ""), (t, r)
    print("ok: 10 scripted behaviours on the %s backend, each with its outcome" % backend)


if __name__ == "__main__":
    main()
