#!/usr/bin/env python3
"""`kiln eval --policy llm --llm-answer-format kernelbench` on cpu against the scripted server
(tests/llm/mock_openai.py): a KernelBench problem imported by `kiln tasks import`, asked in
KernelBench's style (the Model's source, "write ModelNew"), answered with a ModelNew module in the
last ```python block (a ```cpp block after it is not taken), built and judged by the pool. One
task passes on turn 1; its *_fix copy is wrong on turn 1, and the outcome fed back leads to a
correct turn 2. Five tasks whose reference is the problem's own Model (op pytorch_module: an
LSTM, a GRU, a level-3 attention network, a loss over int64 class indices and a bool mask, an LSTM's nested (out, (h, c)) flattened)
pass on turn 1. The answer format is in the eval JSON. Usage: test_llm_kernelbench.py KILN"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import mock_openai  # noqa: E402


def main():
    kiln = sys.argv[1]
    with mock_openai.serving() as port, tempfile.TemporaryDirectory() as tmp:
        problems = os.path.join(tmp, "problems", "level2")
        os.makedirs(problems)
        shutil.copy(os.path.join(ROOT, "tests", "data", "kernelbench", "modelnew",
                                 "linear_relu.py"), problems)
        shutil.copy(os.path.join(problems, "linear_relu.py"),
                    os.path.join(problems, "linear_relu_fix.py"))
        imp = subprocess.run([kiln, "tasks", "import", os.path.dirname(problems), "--out",
                              os.path.join(tmp, "tasks")], capture_output=True, text=True,
                             timeout=600)
        assert imp.returncode == 0, imp.stdout[-3000:] + imp.stderr[-3000:]
        # Tasks whose reference is the problem's own Model (op pytorch_module): an LSTM and a GRU
        # spec v1 cannot say, and a level-3 attention network written in that form too.
        data = os.path.join(ROOT, "tests", "data")
        imp = subprocess.run([kiln, "tasks", "import", "--form", "module", "--out",
                              os.path.join(tmp, "tasks"),
                              os.path.join(data, "kernelbench", "level3", "attention_block.py")],
                             capture_output=True, text=True, timeout=600)
        assert imp.returncode == 0, imp.stdout[-3000:] + imp.stderr[-3000:]
        imp = subprocess.run([kiln, "tasks", "import", "--out", os.path.join(tmp, "tasks"),
                              os.path.join(data, "module", "level3", "lstm_module.py"),
                              os.path.join(data, "module", "problems", "level3",
                                           "constant_attribute.py"),
                              os.path.join(data, "module", "problems", "level2",
                                           "int64_and_bool_inputs.py"),
                              os.path.join(data, "module", "problems", "level3",
                                           "lstm_nested_outputs.py")],
                             capture_output=True, text=True, timeout=600)
        assert imp.returncode == 0, imp.stdout[-3000:] + imp.stderr[-3000:]
        res = mock_openai.kiln_eval(
            [kiln, "eval", "--policy", "llm", "--llm-answer-format", "kernelbench",
             "--llm-endpoint", "http://127.0.0.1:%d" % port, "--llm-model", "mock",
             "--suite", os.path.join(tmp, "tasks"), "--turns", "2",
             "--cache-dir", os.path.join(tmp, "cache"), "--json", os.path.join(tmp, "eval.json")])
    rows = {t["task"]: t for t in res["tasks"]}
    print(json.dumps({k: (v["outcome"], v.get("turns"), v.get("message", "")[:100])
                      for k, v in rows.items()}, indent=1))
    assert res["answer_format"] == "kernelbench", res.get("answer_format")
    one, fix = rows["kb_l2_linear_relu"], rows["kb_l2_linear_relu_fix"]
    for r in (one, fix):
        assert r["answer_format"] == "kernelbench", r
        assert r["outcome"] == "correct", r
    assert one["turns"] == 1 and fix["turns"] == 2, (one["turns"], fix["turns"])
    for name in ("kb_l3_attention_block", "kb_l3_lstm_module", "kb_l3_constant_attribute",
                 "kb_l2_int64_and_bool_inputs", "kb_l3_lstm_nested_outputs"):
        r = rows[name]
        assert r["outcome"] == "correct" and r["turns"] == 1, (name, r)
    print("ok: the same against tasks whose reference is the problem's own Model")
    print("ok: ModelNew answers in KernelBench's format taken, built, judged and corrected")


if __name__ == "__main__":
    main()
