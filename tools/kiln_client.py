"""A client for `kiln serve` (KernelGYM's HTTP API), standard library only, and a reward function
for RL frameworks built on it.

    from kiln_client import KilnClient, compute_score
    c = KilnClient("http://127.0.0.1:10907", token="...")
    r = c.evaluate("ep1-turn0", reference_code=problem_src, kernel_code=model_new_src)
    r["correctness"], r["speedup"]

`compute_score(data_source, solution_str, ground_truth, extra_info)` has the signature verl's
custom reward functions take (`custom_reward_function.path`); `compute_score_batch` the batched
one, `compute_score_async` the awaitable one. `KilnEnv` is OpenEnv's EnvClient shape (reset,
step, state) over the server's HTTP episodes. The reward follows Kiln's tiers (rollout/reward.hpp): -1 not correct, 1 correct, 2 faster
than eager by the margin, 3 faster than torch.compile too (when the server has its times).
Environment: KILN_SERVE_URL (default http://127.0.0.1:10907), KILN_SERVE_TOKEN.
"""
import asyncio
import collections
import concurrent.futures
import json
import os
import re
import time
import urllib.error
import urllib.request
import uuid


class KilnError(RuntimeError):
    """An answer the client cannot use: the HTTP status and the server's words."""

    def __init__(self, status, detail):
        super().__init__(f"kiln serve answered {status}: {detail}")
        self.status, self.detail = status, detail


class KilnClient:
    def __init__(self, base_url=None, token=None, timeout=900.0, retries=8):
        self.base = (base_url or os.environ.get("KILN_SERVE_URL", "http://127.0.0.1:10907")).rstrip("/")
        self.token = token if token is not None else os.environ.get("KILN_SERVE_TOKEN")
        self.timeout, self.retries = timeout, retries

    def _call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(self.base + path, data, headers, method=method)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as r:
                    text = r.read().decode()
                    return r.status, (json.loads(text) if text.startswith(("{", "[")) else text)
            except urllib.error.HTTPError as e:
                text = e.read().decode(errors="replace")
                # A full queue or a restarting server: wait as told, then again.
                if e.code in (429, 503) and attempt < self.retries:
                    time.sleep(min(60.0, float(e.headers.get("Retry-After", 2 ** attempt))))
                    continue
                try:
                    detail = json.loads(text)
                except ValueError:
                    detail = text
                raise KilnError(e.code, detail) from None
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if attempt >= self.retries:
                    raise
                time.sleep(min(30.0, 2 ** attempt))
        raise AssertionError("unreachable")

    def health(self):
        return self._call("GET", "/health")[1]

    def evaluate(self, task_id, reference_code, kernel_code, backend="cuda", wait=True, **fields):
        """One evaluation; blocks until the verdict unless wait=False (then {task_id, status})."""
        body = {"task_id": task_id, "reference_code": reference_code, "kernel_code": kernel_code,
                "backend": backend, "wait": wait, **fields}
        return self._call("POST", "/evaluate", body)[1]

    def evaluate_batch(self, requests, batch_id=None):
        body = {"batch_id": batch_id or uuid.uuid4().hex, "tasks": requests}
        return self._call("POST", "/evaluate/batch", body)[1]

    def status(self, task_id):
        return self._call("GET", "/status/" + task_id)[1]

    def result(self, task_id):
        return self._call("GET", "/results/" + task_id)[1]

    def wait_result(self, task_id, poll_s=1.0, timeout_s=3600.0):
        """Polls /status as KernelGYM's own client does, then fetches /results."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.status(task_id)["status"] in ("completed", "failed"):
                return self.result(task_id)
            time.sleep(poll_s)
        raise TimeoutError(f"{task_id}: no verdict within {timeout_s} s")


_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


def extract_code(solution_str):
    """The last ```python block of an answer (KernelBench's answer format), else the text."""
    blocks = _BLOCK.findall(solution_str)
    return blocks[-1] if blocks else solution_str


def score_of(result):
    """Kiln's reward tiers for a verdict, as the server computed them (metadata.kiln.reward);
    a request refused before the pool ran it scores as a failure."""
    return float(result.get("metadata", {}).get("kiln", {}).get("reward", -1.0))


def _request(solution_str, ground_truth, extra_info):
    extra = extra_info or {}
    return {"task_id": str(extra.get("task_id") or uuid.uuid4().hex),
            "reference_code": ground_truth,
            "kernel_code": extract_code(solution_str),
            "backend": extra.get("backend", os.environ.get("KILN_SERVE_BACKEND", "cuda"))}


def compute_score(data_source, solution_str, ground_truth, extra_info=None, client=None):
    """verl's reward function: ground_truth is the KernelBench problem source (or a task name)."""
    client = client or KilnClient()
    r = _request(solution_str, ground_truth, extra_info)
    res = client.evaluate(r.pop("task_id"), **r)
    return {"score": score_of(res), "correct": bool(res.get("correctness")),
            "speedup": res.get("speedup") or 0.0, "error_code": res.get("error_code") or ""}


def compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos=None, client=None,
                        max_workers=64):
    """The batched form: every evaluation in flight at once; the server's queue orders them."""
    client = client or KilnClient()
    extra_infos = extra_infos or [None] * len(solution_strs)
    with concurrent.futures.ThreadPoolExecutor(max_workers) as pool:
        return list(pool.map(lambda a: compute_score(*a, client=client),
                             zip(data_sources, solution_strs, ground_truths, extra_infos)))


async def compute_score_async(data_source, solution_str, ground_truth, extra_info=None,
                              client=None):
    """For reward managers that await: the same call on a worker thread."""
    return await asyncio.to_thread(compute_score, data_source, solution_str, ground_truth,
                                   extra_info, client)


StepResult = collections.namedtuple("StepResult", "observation reward done")


class KilnEnv:
    """OpenEnv's EnvClient shape over kiln serve's episodes: reset() opens one on a reference (a
    KernelBench problem source or a served task's name) and gives the prompt; step(action) submits
    a kernel ({"kernel_code": ...}, or an LLM's answer as {"answer": ...} or a plain string) and
    gives Kiln's feedback, the reward by its tiers and done."""

    def __init__(self, client=None):
        self.client = client or KilnClient()
        self.episode_id = None

    def reset(self, reference_code, max_turns=None, backend=None):
        body = {"reference_code": reference_code}
        if max_turns is not None:
            body["max_turns"] = max_turns
        if backend is not None:
            body["backend"] = backend
        r = self.client._call("POST", "/reset", body)[1]
        self.episode_id = r["observation"]["episode_id"]
        return StepResult(r["observation"], r["reward"], r["done"])

    def step(self, action):
        if isinstance(action, str):
            action = {"answer": action}
        r = self.client._call("POST", "/step", {"episode_id": self.episode_id, "action": action})[1]
        return StepResult(r["observation"], r["reward"], r["done"])

    def state(self):
        return self.client._call("GET", "/state?episode_id=" + str(self.episode_id))[1]
