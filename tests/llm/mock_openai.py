#!/usr/bin/env python3
"""A scripted OpenAI-compatible chat server for Kiln's LLM policy tests (real HTTP on loopback).

POST /v1/chat/completions answers by the task named in the first user message ("Task `NAME`"),
so one `kiln eval` over several tasks exercises every behaviour at once:
  llm_correct    a correct relu kernel every turn
  llm_fix        turn 1: a kernel that does not compile; the correct one once the compile error
                 is in the last user message
  llm_noblock    an answer without a fenced code block
  llm_hostile    a kernel that writes its input (and the outputs correctly)
  llm_malformed  HTTP 200 with a body that is not JSON
  llm_flaky500   the first attempt of each turn: HTTP 500; then the correct kernel
  llm_429        the first attempt of each turn: HTTP 429 with Retry-After: 1; then correct
  llm_drop       the first attempt of each turn: the connection is closed unanswered; then correct
  llm_stall      the first attempt of each turn sleeps 6 s (past the client's timeout); then correct
  llm_down       HTTP 503 always
A prompt in KernelBench's format (--llm-answer-format kernelbench: it asks for ModelNew) gets the
problem's Model renamed ModelNew in a ```python block followed by a ```cpp block; on turn 1 of a
task named *_fix, a ModelNew whose forward returns its input (a wrong answer to correct).
Anything else: a correct kernel. Usage: mock_openai.py [--port N] (0: any; the port is printed
on stdout as "port N"). GET answers the attempts seen per task (and per path) as JSON, and under
"sessions" the tasks asked through each /session/<id>/ prefix (an endpoint with {session}).

Token-level endpoints, with a toy tokenizer (one token per byte, id = byte + 16) and a
ChatML-like template (render() below: <|im_start|> role "\n" content <|im_end|> "\n" per
message, <|im_start|> "assistant\n" as the generation prompt):
  POST /tokenize        vLLM's: messages + add_generation_prompt -> {"tokens", "count"}
  POST /v1/completions  vLLM's with a prompt of ids and return_token_ids: choices[0].text,
                        token_ids (the answer's bytes, then <|im_end|>), logprobs.token_logprobs
  POST /generate        SGLang's native: input_ids -> text, output_ids, meta_info with
                        output_token_logprobs [[logprob, id, null], ...]
The conversation behind a prompt of ids is read back from the ids, so the scripted behaviours
are the same on every wire format.
"""
import argparse
import contextlib
import json
import re
import socketserver
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ATTEMPTS = {}
LOCK = threading.Lock()

RELU = """//! kiln-source cpu
#include "kiln_abi.h"
namespace {
constexpr int64_t kElements = %d;
struct args { const float* x; float* y; };
void range(void* ctx, int64_t b, int64_t e) {
  auto* a = static_cast<args*>(ctx);
  for (int64_t i = b; i < e; ++i) a->y[i] = a->x[i] > 0.f ? a->x[i] : 0.f;%s
}
}
extern "C" int kiln_run(const kiln_host* host, const void* const* inputs,
                        const void* const*, void* const* outputs) {
  args a{static_cast<const float*>(inputs[0]), static_cast<float*>(outputs[0])};
  host->parallel_for(host, kElements, 1 << 16, range, &a);
  return 0;
}
"""


RELU_CUDA = """//! kiln-source cuda
#include "kiln_cuda_abi.h"
#include <cuda_runtime.h>
__global__ void relu(float* x, float* y, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { float v = x[i]; y[i] = v > 0.f ? v : 0.f;%s }
}
extern "C" int kiln_cuda_run(const void* const* inputs, const void* const*,
                             void* const* outputs, void* stream) {
  const long long n = %d;
  relu<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
      (float*)inputs[0], (float*)outputs[0], n);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
"""


def kernel(prompt, hostile=False, broken=False):
    """A relu kernel for the task in the prompt: the cuda ABI when the prompt names the cuda
    backend, else the cpu one; hostile: it also writes its input."""
    m = re.search(r"- x: \[([0-9, ]+)\]", prompt)
    n = 1
    for d in (m.group(1).split(",") if m else ["1"]):
        n *= int(d)
    if "backend cuda" in prompt:
        src = RELU_CUDA % ("\n    if (i == 0) x[0] = 0.f;" if hostile else "", n)
    else:
        src = RELU % (n, "\n  const_cast<float*>(a->x)[b] = 0.f;" if hostile else "")
    if broken:  # a syntax error on either backend
        src = src.replace("#include", "int broken = ;  // no initializer\n#include", 1)
    return "Here is the kernel:\n\n```cpp\n" + src + "```\n"


def completion(content):
    return json.dumps({
        "id": "mock", "object": "chat.completion", "model": "mock",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150},
    })


IM_START, IM_END, OFFSET = 1, 2, 16


def encode_text(text):
    return [b + OFFSET for b in text.encode()]


def render(msgs, generation_prompt):
    ids = []
    for m in msgs:
        ids += [IM_START] + encode_text(m["role"] + "\n" + m["content"]) + [IM_END] + encode_text("\n")
    if generation_prompt:
        ids += [IM_START] + encode_text("assistant\n")
    return ids


def messages_of(ids):
    """The conversation a prompt of ids renders (the inverse of render, the open assistant
    turn at the end dropped)."""
    msgs, cur = [], None
    for t in ids:
        if t == IM_START:
            cur = bytearray()
        elif t == IM_END and cur is not None:
            role, _, content = cur.decode(errors="replace").partition("\n")
            msgs.append({"role": role, "content": content})
            cur = None
        elif cur is not None and t >= OFFSET:
            cur.append(t - OFFSET)
    return msgs


def logprob(i):
    return -0.001 - 0.01 * (i % 7)


def completion_ids(content, usage_prompt):
    ids = encode_text(content) + [IM_END]
    return json.dumps({
        "id": "mock", "object": "text_completion", "model": "mock",
        "choices": [{"index": 0, "finish_reason": "stop", "text": content, "token_ids": ids,
                     "logprobs": {"token_logprobs": [logprob(i) for i in range(len(ids))],
                                  "tokens": ["t%d" % t for t in ids]}}],
        "usage": {"prompt_tokens": usage_prompt, "completion_tokens": len(ids),
                  "total_tokens": usage_prompt + len(ids)},
    })


def generate_ids(content, usage_prompt):
    ids = encode_text(content) + [IM_END]
    return json.dumps({
        "text": content, "output_ids": ids,
        "meta_info": {"id": "mock", "prompt_tokens": usage_prompt, "completion_tokens": len(ids),
                      "finish_reason": {"type": "stop", "matched": IM_END},
                      "output_token_logprobs": [[logprob(i), t, None] for i, t in enumerate(ids)]},
    })


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send(self, code, body, headers=()):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up first (the stall behaviour): nothing to answer

    def do_GET(self):
        with LOCK:
            self.send(200, json.dumps(ATTEMPTS))

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        req = json.loads(self.rfile.read(length) or b"{}")
        path = self.path
        # An endpoint with {session} (a trainer's gateway): /session/<episode id>/<the API path>.
        session = None
        if path.startswith("/session/"):
            session, _, rest = path[len("/session/"):].partition("/")
            path = "/" + rest
        if path == "/tokenize":
            ids = render(req.get("messages", []), bool(req.get("add_generation_prompt")))
            return self.send(200, json.dumps({"tokens": ids, "count": len(ids),
                                              "max_model_len": 1 << 20}))
        if path == "/v1/completions":
            prompt_ids = req.get("prompt", [])
            msgs = messages_of(prompt_ids)
            answer = lambda c: completion_ids(c, len(prompt_ids))
        elif path == "/generate":
            prompt_ids = req.get("input_ids", [])
            msgs = messages_of(prompt_ids)
            answer = lambda c: generate_ids(c, len(prompt_ids))
        else:
            msgs = req.get("messages", [])
            answer = completion
        prompt = next((m["content"] for m in msgs if m.get("role") == "user"), "")
        m = re.search(r"Task `([^`]+)`", prompt)
        task = m.group(1) if m else "?"
        turn = sum(1 for x in msgs if x.get("role") == "user")
        with LOCK:
            key = "%s/%d%s" % (task, turn, "" if path == "/v1/chat/completions" else path)
            ATTEMPTS[key] = ATTEMPTS.get(key, 0) + 1
            attempt = ATTEMPTS[key]
            if session is not None:
                seen = ATTEMPTS.setdefault("sessions", {}).setdefault(session, [])
                if task not in seen:
                    seen.append(task)
        first = attempt == 1
        if task == "llm_down":
            return self.send(503, '{"error": {"message": "overloaded"}}')
        if task == "llm_malformed":
            return self.send(200, "{not json")
        if task == "llm_flaky500" and first:
            return self.send(500, '{"error": {"message": "internal"}}')
        if task == "llm_429" and first:
            return self.send(429, '{"error": {"message": "slow down"}}', [("Retry-After", "1")])
        if task == "llm_drop" and first:
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if task == "llm_stall" and first:
            time.sleep(6)
        if task == "llm_noblock":
            return self.send(200, answer("I would use a simple loop over the elements."))
        if "ModelNew" in prompt:  # --llm-answer-format kernelbench
            return self.send(200, answer(model_new(prompt, turn)))
        # Fixed only once the compiler's complaint came back in the last user message.
        if task == "llm_fix" and (turn == 1 or "compile_error" not in msgs[-1].get("content", "")):
            return self.send(200, answer(kernel(prompt, broken=True)))
        return self.send(200, answer(kernel(prompt, hostile=task == "llm_hostile")))


# KernelBench's answer shape: prose, the ModelNew module in a ```python block, then a ```cpp
# block (the last block of all, but not Python: it must not be taken). The module is the
# problem's own Model renamed; on turn 1 of a task named *_fix, its forward returns the input.
def model_new(prompt, turn):
    m = re.search(r"```python\n(.*?)\n```", prompt, re.S)
    source = m.group(1) if m else ""
    module = source.replace("class Model(", "class ModelNew(")
    if "_fix" in prompt.split("`")[1] and turn == 1:
        module = module.replace("return torch.relu(self.fc(x))", "return x")
    return ("Here is the optimized architecture.\n\n```python\n" + module +
            "\n```\n\nThe kernel alone, for reading:\n\n```cpp\n// nothing to compile\n```\n")


@contextlib.contextmanager
def serving():
    """This server in a process of its own, for a test's `with`: yields its port."""
    p = subprocess.Popen([sys.executable, __file__], stdout=subprocess.PIPE, text=True)
    try:
        yield int(p.stdout.readline().split()[1])
    finally:
        p.kill()
        p.wait()


def kiln_eval(cmd):
    """Runs `kiln eval ... --json OUT` (OUT last in cmd), shows its output's tail, and returns
    the first policy's result."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    sys.stdout.write(p.stdout[-4000:])
    sys.stderr.write(p.stderr[-6000:])
    assert p.returncode == 0, "kiln eval exited %d" % p.returncode
    return json.load(open(cmd[-1]))[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    ThreadingHTTPServer.daemon_threads = True
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    print("port", srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
