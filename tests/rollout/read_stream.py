#!/usr/bin/env python3
"""A stock Python client of trajectory stream v1 (docs/DESIGN.md): pyzmq + msgpack + numpy only.
Starts the stream binary, PULLs every message and checks every field of the schema.
usage: read_stream.py STREAM_BINARY [EPISODES]"""
import math
import socket
import subprocess
import sys

import msgpack
import numpy as np
import zmq

STATUSES = {"completed", "truncated", "aborted", "failed"}
OUTCOMES = {"correct", "wrong", "runtime_error", "timeout", "compile_error", "nondeterministic",
            "input_mutated"}
TURN_KEYS = {"start", "end", "outcome", "reward", "speedup_eager", "speedup_compile",
             "compile_ms", "run_ms"}
TIMING_KEYS = {"queue_ms", "policy_ms", "compile_ms", "device_ms", "total_ms"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check(msg, seen):
    m = msgpack.unpackb(msg, raw=False)
    assert isinstance(m, dict), "not a map"
    assert m["v"] == 1, m["v"]
    for k in ("id", "task", "group"):
        assert isinstance(m[k], str) and m[k], k
    assert m["id"] not in seen, "duplicate id " + m["id"]
    seen.add(m["id"])
    assert m["status"] in STATUSES, m["status"]
    assert isinstance(m["policy_version"], int), "policy_version"
    for k in ("tokens", "loss_mask", "logprobs", "versions"):
        assert isinstance(m[k], bytes), k + " must be bin"
    tokens = np.frombuffer(m["tokens"], dtype="<i4")
    mask = np.frombuffer(m["loss_mask"], dtype=np.uint8)
    logprobs = np.frombuffer(m["logprobs"], dtype="<f4")
    versions = np.frombuffer(m["versions"], dtype="<i4")
    n = len(tokens)
    assert n > 0
    assert len(mask) == n and len(logprobs) == n and len(versions) == n, "lengths"
    assert set(np.unique(mask)) <= {0, 1}, "loss_mask values"
    assert (tokens >= 0).all(), "token ids"
    model = mask == 1
    assert model.any(), "no model tokens"
    assert (logprobs[~model] == 0).all(), "logprobs off the mask"
    assert (versions[~model] == -1).all(), "versions off the mask"
    assert np.isfinite(logprobs[model]).all() and (logprobs[model] <= 0).all(), "logprobs"
    assert (logprobs[model] < 0).any(), "the random policy has non-zero log-probs"
    assert (versions[model] >= 0).all(), "versions on the mask"
    assert m["policy_version"] == int(versions[model][0]), "policy_version = first model token's"
    turns = m["turns"]
    assert isinstance(turns, list) and turns, "turns"
    covered = np.zeros(n, dtype=bool)
    prev_end = 0
    for t in turns:
        assert set(t) == TURN_KEYS, sorted(t)
        assert isinstance(t["start"], int) and isinstance(t["end"], int)
        assert prev_end <= t["start"] < t["end"] <= n, (t["start"], t["end"], n)
        prev_end = t["end"]
        covered[t["start"]:t["end"]] = True
        assert t["outcome"] in OUTCOMES, t["outcome"]
        for k in ("reward", "speedup_eager", "compile_ms", "run_ms"):
            assert number(t[k]), k
        assert t["speedup_compile"] is None or number(t["speedup_compile"])
        assert t["reward"] in (-1, 1, 2, 3), t["reward"]
        if t["outcome"] != "correct":
            assert t["reward"] == -1 and t["speedup_eager"] == 0
    assert (covered == model).all(), "loss_mask is 1 exactly on the turns' programs"
    assert number(m["reward"])
    assert m["reward"] == max(t["reward"] for t in turns), "episode reward = best turn"
    assert set(m["timings"]) >= TIMING_KEYS
    for k in TIMING_KEYS:
        assert number(m["timings"][k]) and m["timings"][k] >= 0, k
    return m


def main():
    binary = sys.argv[1]
    episodes = int(sys.argv[2]) if len(sys.argv) > 2 else 24
    endpoint = "tcp://127.0.0.1:%d" % free_port()
    proc = subprocess.Popen([binary, endpoint, str(episodes)], stdout=subprocess.PIPE)
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVTIMEO, 30000)
    pull.connect(endpoint)
    seen, compile_kinds, statuses = set(), set(), set()
    try:
        for _ in range(episodes):
            m = check(pull.recv(), seen)
            statuses.add(m["status"])
            for t in m["turns"]:
                compile_kinds.add(t["speedup_compile"] is None)
    finally:
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, "stream binary exited %d" % proc.returncode
    assert len(seen) == episodes
    assert compile_kinds == {True, False}, "speedup_compile both nil and a number"
    print("read %d trajectories, statuses %s; producer: %s" %
          (episodes, sorted(statuses), out.decode().strip()))


if __name__ == "__main__":
    main()
