#!/usr/bin/env python3
"""Reads Kiln's trajectory stream v1 (docs/DESIGN.md) from ZeroMQ and turns each episode into the
sample a verl / OpenRLHF-style trainer takes: prompt ids, response ids with their mask (1 on the
model's tokens, 0 on observations between turns), the behaviour log-probs, and the reward.

A trainer PULLs what `kiln run` pushes to rollout.sink:
    python3 tools/kiln_trajectories.py tcp://127.0.0.1:5560 --count 100 --jsonl samples.jsonl
(--bind when the run connects to the trainer: rollout.sink_bind = false). With CurveZMQ ([curve]
keys, `kiln keys`): --curve-secret KEY and either --curve-server RUN.pub (connecting) or, with
--bind, --curve-authorized (a .pub file or a folder of them: the runs let in). As a module:
    decode(frame) -> dict (checked), trainer_sample(traj) -> dict
Uses python3-zmq and python3-msgpack from Debian.
"""
import argparse
import json
import math
import struct
import sys

import msgpack

STATUSES = ("completed", "truncated", "aborted", "failed")


class StreamError(ValueError):
    """A frame that is not trajectory stream v1; the message names the field."""


def _ints(b, field):
    if not isinstance(b, (bytes, bytearray)) or len(b) % 4:
        raise StreamError("'%s' must be bin of 4-byte little-endian values" % field)
    return list(struct.unpack("<%di" % (len(b) // 4), b))


def _floats(b, field):
    if not isinstance(b, (bytes, bytearray)) or len(b) % 4:
        raise StreamError("'%s' must be bin of 4-byte little-endian floats" % field)
    return list(struct.unpack("<%df" % (len(b) // 4), b))


def decode(frame):
    """One ZeroMQ message of the stream as a dict, with the invariants the C++ decoder checks."""
    try:
        t = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several types
        raise StreamError("not msgpack: %s" % e)
    if not isinstance(t, dict):
        raise StreamError("the message must be a map")
    if t.get("v") != 1:
        raise StreamError("unsupported version v=%r" % t.get("v"))
    for k in ("id", "task", "group", "status", "policy_version", "tokens", "loss_mask",
              "logprobs", "versions", "turns", "reward", "timings"):
        if k not in t:
            raise StreamError("missing key '%s'" % k)
    if t["status"] not in STATUSES:
        raise StreamError("unknown status '%s'" % t["status"])
    t["tokens"] = _ints(t["tokens"], "tokens")
    n = len(t["tokens"])
    mask = t["loss_mask"]
    if not isinstance(mask, (bytes, bytearray)) or len(mask) != n:
        raise StreamError("'loss_mask' must be bin with one byte per token")
    t["loss_mask"] = list(mask)
    t["logprobs"] = _floats(t["logprobs"], "logprobs")
    t["versions"] = _ints(t["versions"], "versions")
    if len(t["logprobs"]) != n or len(t["versions"]) != n:
        raise StreamError("'logprobs' and 'versions' must have one entry per token")
    for i, (m, lp, v) in enumerate(zip(t["loss_mask"], t["logprobs"], t["versions"])):
        if m not in (0, 1):
            raise StreamError("loss_mask[%d] = %d, expected 0 or 1" % (i, m))
        if m and (not math.isfinite(lp) or lp > 0 or v < 0):
            raise StreamError("token %d: a model token needs a finite log-prob <= 0, version >= 0" % i)
        if not m and (lp != 0 or v != -1):
            raise StreamError("token %d: off the mask, log-prob 0 and version -1 expected" % i)
    for i, turn in enumerate(t["turns"]):
        if not (0 <= turn["start"] <= turn["end"] <= n):
            raise StreamError("turns[%d]: [start, end) outside the context" % i)
    for i, m in enumerate(t.get("messages", [])):
        if m.get("role") not in ("system", "user", "assistant") or not isinstance(
                m.get("content"), str):
            raise StreamError("messages[%d]: role system|user|assistant and text content" % i)
    return t


def trainer_sample(t):
    """The episode as one RL sample. The prompt runs to the model's first token; the response is
    everything after, the observations of later turns masked out. The reward sits on the last
    model token (token_level_rewards), as PPO trainers place an outcome reward."""
    mask = t["loss_mask"]
    first = next((i for i, m in enumerate(mask) if m), len(mask))
    last = max((i for i, m in enumerate(mask) if m), default=-1)
    response_mask = mask[first:]
    rewards = [0.0] * len(response_mask)
    if last >= first:
        rewards[last - first] = t["reward"]
    return {
        "id": t["id"], "task": t["task"], "group": t["group"], "status": t["status"],
        "prompt_ids": t["tokens"][:first],
        "response_ids": t["tokens"][first:],
        "response_mask": response_mask,
        "response_logprobs": t["logprobs"][first:],
        "response_versions": t["versions"][first:],
        "token_level_rewards": rewards,
        "reward": t["reward"],
        "policy_version": t["policy_version"],
        "turn_outcomes": [x["outcome"] for x in t["turns"]],
        "messages": t.get("messages", []),
        "model": t.get("model", ""),
        "api": t.get("api", ""),
        "answer_format": t.get("answer_format", ""),
    }


def read_key(path):
    """A `kiln keys` file: 40 characters of Z85 on one line."""
    with open(path) as f:
        key = f.read().strip()
    if len(key) != 40:
        raise SystemExit("%s: not a CurveZMQ key (%d characters, a Z85 key has 40)" % (path, len(key)))
    return key.encode()


def secure(sock, ctx, a):
    """CURVE options for the PULL: a client of the run's bound sink, or (--bind) a server whose
    ZAP handler lets in only the authorized keys."""
    import os
    import zmq
    secret = read_key(a.curve_secret)
    sock.curve_secretkey = secret
    sock.curve_publickey = zmq.curve_public(secret)
    if not a.bind:
        if not a.curve_server:
            raise SystemExit("--curve-secret without --bind needs --curve-server (the run's .pub)")
        sock.curve_serverkey = read_key(a.curve_server)
        return None
    if not a.curve_authorized:
        raise SystemExit("--curve-secret with --bind needs --curve-authorized (the runs' .pub keys)")
    path = a.curve_authorized
    files = [os.path.join(path, f) for f in sorted(os.listdir(path)) if f.endswith(".pub")] \
        if os.path.isdir(path) else [path]
    allowed = {read_key(f) for f in files}
    from zmq.auth.thread import ThreadAuthenticator

    class Keys:
        def callback(self, domain, key):
            if key not in allowed:
                print("refused a run whose key %s is not authorized" % key.decode(), file=sys.stderr)
            return key in allowed

    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve_callback(domain="*", credentials_provider=Keys())
    sock.curve_server = True
    return auth


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("endpoint")
    ap.add_argument("--bind", action="store_true", help="bind the PULL (default: connect)")
    ap.add_argument("--count", type=int, default=0, help="stop after N trajectories (0: never)")
    ap.add_argument("--jsonl", help="append each trainer sample as one JSON line")
    ap.add_argument("--timeout", type=float, default=0, help="stop after S idle seconds (0: never)")
    ap.add_argument("--curve-secret", help="this trainer's secret key file (kiln keys)")
    ap.add_argument("--curve-server", help="connecting: the run's public key file")
    ap.add_argument("--curve-authorized", help="--bind: the runs' .pub file or a folder of them")
    a = ap.parse_args()
    import zmq
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.PULL)
    auth = secure(sock, ctx, a) if a.curve_secret else None
    (sock.bind if a.bind else sock.connect)(a.endpoint)
    out = open(a.jsonl, "a") if a.jsonl else None
    got = bad = 0
    while not a.count or got < a.count:
        if a.timeout and not sock.poll(int(a.timeout * 1000)):
            break
        frame = sock.recv()
        try:
            s = trainer_sample(decode(frame))
        except StreamError as e:
            bad += 1
            print("bad frame (%d bytes): %s" % (len(frame), e), file=sys.stderr)
            continue
        got += 1
        if out:
            out.write(json.dumps(s) + "\n")
            out.flush()
        print("%s %s %s reward %+.3f, %d response tokens (%d trained)" % (
            s["id"], s["task"], s["status"], s["reward"], len(s["response_ids"]),
            sum(s["response_mask"])))
    print("%d trajectories, %d bad frames" % (got, bad), file=sys.stderr)
    if auth:
        auth.stop()


if __name__ == "__main__":
    main()
