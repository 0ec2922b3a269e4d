#!/usr/bin/env python3
"""`kiln bench serve --json` on small settings: every level served without errors, paced levels
at their offered rate, and the queued jobs' memory measured (each holds at least its submission).

Usage: check_bench_serve.py KILN SOURCE_DIR"""
import json
import subprocess
import sys

KILN, SRC = sys.argv[1:3]
p = subprocess.run([KILN, "--threads", "1", "bench", "serve", "--json", "--duration", "0.5",
                    "--clients", "1,20", "--rate", "200", "--queued", "400", "--suite",
                    SRC + "/data/suites/level1/cpu/relu.toml"],
                   capture_output=True, text=True, timeout=300)
failed = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failed.append(what)


check(p.returncode == 0, f"exit 0 (got {p.returncode}: {p.stderr[-500:]})")
doc = json.loads(p.stdout)
levels = doc["levels"]
check([(lv["endpoint"], lv["clients"], lv["offered_per_s"]) for lv in levels] ==
      [("/health", 1, None), ("/health", 20, None), ("/evaluate", 1, None),
       ("/evaluate", 20, None), ("/evaluate", 1, 200), ("/evaluate", 20, 200)],
      "levels: /health and /evaluate closed loop, then /evaluate paced, per client count")
for lv in levels:
    name = f"{lv['endpoint']} x{lv['clients']}" + (" paced" if lv["offered_per_s"] else "")
    check(lv["requests"] > 0 and lv["errors"] == 0, f"{name}: {lv['requests']} answered, "
          f"{lv['errors']} errors {lv.get('first_error', '')}")
    check(0 < lv["p50_ms"] <= lv["p99_ms"] <= lv["max_ms"], f"{name}: p50 <= p99 <= max")
for lv in levels[4:]:  # a paced level sends what it offers, no more
    check(lv["requests_per_s"] < 1.2 * lv["offered_per_s"],
          f"paced x{lv['clients']}: {lv['requests_per_s']:.0f} req/s for 200 offered")
q = doc["queued"]
check(q["jobs"] == 400 and q["errors"] == 0, f"400 jobs held in the queue (got {q['jobs']})")
check(q["heap_bytes_per_job"] >= q["submission_bytes"],
      f"a queued job holds at least its submission: {q['heap_bytes_per_job']:.0f} bytes of heap "
      f"for {q['submission_bytes']}")
answered = sum(lv["requests"] for lv in levels if lv["endpoint"] == "/evaluate") + q["jobs"]
jw = doc["journal"]
check(jw["writes"] >= 2 * answered and 0 < jw["commits"] < jw["writes"],
      f"the journal: an add and a result per job ({answered} jobs), group-committed: "
      f"{jw['writes']} writes in {jw['commits']} commits")
sys.exit(1 if failed else 0)
