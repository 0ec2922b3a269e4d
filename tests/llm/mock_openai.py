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
Anything else: a correct kernel. Usage: mock_openai.py [--port N] (0: any; the port is printed
on stdout as "port N"). /stats answers the attempts seen per task as JSON.
"""
import argparse
import json
import re
import socketserver
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


def kernel(prompt, hostile=False, broken=False):
    m = re.search(r"- x: \[([0-9, ]+)\]", prompt)
    n = 1
    for d in (m.group(1).split(",") if m else ["1"]):
        n *= int(d)
    extra = "\n  const_cast<float*>(a->x)[b] = 0.f;" if hostile else ""
    src = RELU % (n, extra)
    if broken:
        src = src.replace("return 0;", "return 0  // a missing semicolon")
    return "Here is the kernel:\n\n```cpp\n" + src + "```\n"


def completion(content):
    return json.dumps({
        "id": "mock", "object": "chat.completion", "model": "mock",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150},
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
        msgs = req.get("messages", [])
        prompt = next((m["content"] for m in msgs if m.get("role") == "user"), "")
        m = re.search(r"Task `([^`]+)`", prompt)
        task = m.group(1) if m else "?"
        turn = sum(1 for x in msgs if x.get("role") == "user")
        with LOCK:
            key = "%s/%d" % (task, turn)
            ATTEMPTS[key] = ATTEMPTS.get(key, 0) + 1
            attempt = ATTEMPTS[key]
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
            return self.send(200, completion("I would use a simple loop over the elements."))
        # Fixed only once the compiler's complaint came back in the last user message.
        if task == "llm_fix" and (turn == 1 or "compile_error" not in msgs[-1].get("content", "")):
            return self.send(200, completion(kernel(prompt, broken=True)))
        return self.send(200, completion(kernel(prompt, hostile=task == "llm_hostile")))


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
