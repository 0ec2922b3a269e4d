#!/usr/bin/env python3
"""`kiln run configs/llm.toml` (an LLM policy, cpu backend) against the scripted server
(tests/llm/mock_openai.py), end to end: trajectories stream to rollout.sink and a stock consumer
(tools/kiln_trajectories.py) reads them and builds trainer samples, checked field by field, for
each endpoint kind. vllm and sglang: the context is the model's token ids (the mock's toy
tokenizer), extended turn by turn without re-tokenizing an answer, and the model tokens carry the
version a fake trainer announces on llm.version_endpoint. chat: text only, no ids.
Usage: test_llm_run.py KILN [chat|vllm|sglang ...]"""
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, HERE)
import kiln_trajectories  # noqa: E402
import mock_openai  # noqa: E402

import zmq  # noqa: E402

TASKS = ["llm_correct", "llm_fix", "llm_noblock", "llm_hostile", "llm_flaky500"]
VERSION = 7


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def announce(endpoint, stop):
    """A trainer that has loaded VERSION into its servers: the weights channel's frame with a
    version and no weights, repeated (PUB/SUB drops what a late subscriber missed)."""
    pub = zmq.Context.instance().socket(zmq.PUB)
    pub.bind(endpoint)
    while not stop.is_set():
        pub.send(b"KLNW" + struct.pack("<q", VERSION))
        time.sleep(0.05)
    pub.close(0)


def collect(endpoint, want, out, stop):
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.connect(endpoint)
    while len(out) < want and not stop.is_set():
        if pull.poll(200):
            out.append(kiln_trajectories.decode(pull.recv()))
    pull.close(0)


def check_tokens(t, api):
    """The context is exactly what the template renders for the conversation, the model's answers
    (their bytes and the stop token) are the only trained tokens, with the mock's log-probs."""
    msgs = t["messages"]
    assert [m["role"] for m in msgs[:2]] == ["system", "user"], msgs[:2]
    assert all(m["role"] == ("assistant" if i % 2 == 0 else "user")
               for i, m in enumerate(msgs[2:])), [m["role"] for m in msgs]
    answers = [m["content"] for m in msgs if m["role"] == "assistant"]
    assert len(answers) == len(t["turns"]), (len(answers), len(t["turns"]))
    if api == "chat":
        assert t["tokens"] == [] and t["loss_mask"] == [], "chat returns no token ids"
        return
    expected = mock_openai.render(msgs, False)[:-1]  # no closing "\n" after the last answer
    assert t["tokens"] == expected, "the context is not the template's rendering (%d vs %d)" % (
        len(t["tokens"]), len(expected))
    trained = []
    for turn, answer in zip(t["turns"], answers):
        span = t["tokens"][turn["start"]:turn["end"]]
        assert span == mock_openai.encode_text(answer) + [mock_openai.IM_END], "turn span"
        trained += list(range(turn["start"], turn["end"]))
        for i, k in enumerate(range(turn["start"], turn["end"])):
            assert abs(t["logprobs"][k] - mock_openai.logprob(i)) < 1e-6, (k, t["logprobs"][k])
            assert t["versions"][k] in (0, VERSION), t["versions"][k]
    assert [i for i, m in enumerate(t["loss_mask"]) if m] == trained, "loss_mask off the answers"


def run(kiln, api, mock_port, tmp):
    sink = "tcp://127.0.0.1:%d" % free_port()
    versions = "tcp://127.0.0.1:%d" % free_port()
    episodes = 2 * len(TASKS)
    suite = [os.path.join(ROOT, "tests", "data", "llm", t + ".toml") for t in TASKS]
    # The shipped example config, pointed at the scripted server: what a user starts from.
    sets = {
        "run.name": "llm_" + api, "run.out_dir": os.path.join(tmp, "runs"), "tasks.suites": suite,
        "validate.timing_runs": 1, "validate.degeneracy_seeds": 2,
        "pool.cache_dir": os.path.join(tmp, "cache"), "rollout.episodes": episodes,
        "rollout.max_concurrent": episodes, "rollout.group_size": 2, "rollout.max_turns": 2,
        "rollout.verify_checks": 1, "rollout.timing_cap_ms": 50, "rollout.progress_s": 2,
        "rollout.sink": sink, "llm.api": api,
        # chat: a trainer's gateway with a base_url per episode ({session}: the episode's id)
        "llm.endpoints": ["http://127.0.0.1:%d%s" % (mock_port,
                                                     "/session/{session}" if api == "chat" else "")],
        "llm.model": "mock", "llm.timeout_s": 5, "llm.max_attempts": 3, "llm.backoff_s": 0.2,
        "llm.version_endpoint": versions, "llm.eta": 2,
    }
    cmd = [kiln, "run", os.path.join(ROOT, "configs", "llm.toml")]
    for k, v in sets.items():
        cmd += ["--set", "%s=%s" % (k, json.dumps(v))]
    stop = threading.Event()
    got = []
    threads = [threading.Thread(target=announce, args=(versions, stop)),
               threading.Thread(target=collect, args=(sink, episodes, got, stop))]
    for th in threads:
        th.start()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        deadline = time.time() + 30
        while len(got) < episodes and time.time() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        for th in threads:
            th.join()
    sys.stdout.write(p.stdout[-3000:])
    sys.stderr.write(p.stderr[-5000:])
    assert p.returncode == 0, "kiln run (%s) exited %d" % (api, p.returncode)
    run_dir = max(os.path.join(tmp, "runs", d) for d in os.listdir(os.path.join(tmp, "runs"))
                  if d.startswith("llm_%s-" % api))
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    ro = summary["rollout"]
    assert ro["episodes"] == episodes, ro
    assert ro["llm"]["answers"] >= episodes, ro["llm"]
    assert ro["llm"]["version"] == VERSION and ro["llm"]["announcements"] > 0, ro["llm"]
    assert ro["sink"]["sent"] == episodes, ro["sink"]
    assert len(got) == episodes, "the consumer got %d of %d trajectories" % (len(got), episodes)

    by_task = {}
    for t in got:
        assert t["model"] == "mock" and t["api"] == api, (t["model"], t["api"])
        check_tokens(t, api)
        by_task.setdefault(t["task"], []).append(t)
        s = kiln_trajectories.trainer_sample(t)
        assert s["reward"] == t["reward"]
        if api != "chat":
            assert s["prompt_ids"] == t["tokens"][:t["turns"][0]["start"]]
            assert len(s["response_ids"]) == len(s["response_mask"]) == len(s["response_logprobs"])
            assert sum(s["token_level_rewards"]) == t["reward"]
            assert s["response_mask"][-1] == 1
    assert sorted(by_task) == sorted(TASKS), sorted(by_task)
    if api == "chat":  # every episode reached the gateway under its own id, for its own task
        with urllib.request.urlopen("http://127.0.0.1:%d/" % mock_port, timeout=10) as r:
            sessions = json.load(r).get("sessions", {})
        for t in got:
            assert sessions.get(str(t["id"])) == [t["task"]], (t["id"], t["task"], sessions)
        print("ok chat: %d episodes, each under its own {session} (%s)" % (
            len(got), ", ".join(sorted(sessions)[:4])))
    outcomes = {k: [x["turns"][0]["outcome"] for x in v] for k, v in by_task.items()}
    for fix in by_task["llm_fix"]:  # the compile log came back and the next answer fixed it
        assert [x["outcome"] for x in fix["turns"]] == ["compile_error", "correct"], fix["turns"]
    assert set(outcomes["llm_noblock"]) == {"compile_error"}, outcomes
    assert set(outcomes["llm_hostile"]) == {"input_mutated"}, outcomes
    assert set(outcomes["llm_correct"]) == {"correct"} and set(outcomes["llm_flaky500"]) == {
        "correct"}, outcomes
    tagged = sum(1 for t in got for v, m in zip(t["versions"], t["loss_mask"]) if m and v == VERSION)
    print("ok %s: %d trajectories, %d model tokens tagged v%d, outcomes %s" % (
        api, len(got), tagged, VERSION, json.dumps(outcomes)))
    if api != "chat":
        assert tagged > 0, "no model token carries the announced version"


def main():
    kiln = sys.argv[1]
    apis = sys.argv[2:] or ["vllm", "sglang", "chat"]
    mock = subprocess.Popen([sys.executable, os.path.join(HERE, "mock_openai.py")],
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(mock.stdout.readline().split()[1])
        with tempfile.TemporaryDirectory() as tmp:
            for api in apis:
                run(kiln, api, port, tmp)
    finally:
        mock.kill()
        mock.wait()


if __name__ == "__main__":
    main()
