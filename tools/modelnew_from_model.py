#!/usr/bin/env python3
"""ModelNew submissions that are the problem's own Model, one per imported KernelBench task:
`kiln eval --policy sources:OUT` then measures PyTorch's eager code through the honest pool, the
same code the eager baseline times, so its kernel / eager ratio says how far the pool's timing of
a ModelNew (Python host, shared buffers, the call protocol) stands from the reference's. A
calibration, not a policy: a ratio far from 1.0 is overhead of the ModelNew path.
Usage: modelnew_from_model.py TASK_DIR [TASK_DIR...] --out OUT_DIR"""
import argparse
import os
import re
import sys
import tomllib


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task_dirs", nargs="+")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    written = skipped = 0
    for d in a.task_dirs:
        for root, _, files in os.walk(d):
            for f in sorted(files):
                if not f.endswith(".toml"):
                    continue
                path = os.path.join(root, f)
                try:
                    t = tomllib.load(open(path, "rb"))
                except tomllib.TOMLDecodeError as e:
                    print(f"{path}: not TOML ({e}); skipped", file=sys.stderr)
                    skipped += 1
                    continue
                kb = t.get("kernelbench")
                if not kb or "name" not in t:
                    skipped += 1  # not imported from KernelBench: no Model to rename
                    continue
                source = re.sub(r"\bModel\b", "ModelNew", kb["source"])
                with open(os.path.join(a.out, t["name"] + ".py"), "w") as out:
                    out.write(source)
                written += 1
    print(f"{written} ModelNew sources in {a.out} ({skipped} task files without a "
          "[kernelbench] table skipped)")
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
