#!/usr/bin/env bash
# `kiln node` end to end on loopback: a published pool serves `kiln eval --remote` and a `kiln run`
# whose [pool] is remote only; a node killed while it holds jobs costs time, not results (the
# router retries them on the local pool); an unreachable node is a clear error; SIGTERM stops a
# node cleanly with its stats; a hostile "node" cannot make the coordinator allocate what it claims.
#   node_pool.sh KILN SOURCE_DIR OUT_DIR
set -u
kiln="$1"; src="$2"; out="$3/node_pool"
rm -rf "$out"; mkdir -p "$out"
cache="$out/cache"
fail() { echo "node_pool: FAIL: $*"; for f in "$out"/*.log; do echo "--- $f"; tail -n 20 "$f"; done; exit 1; }

start_node() { # start_node NAME: runs a node in the background, sets $pid and $addr
  "$kiln" --threads 1 node --backend cpu --port 0 --cache-dir "$cache" --stats-every 0 \
    > "$out/$1.log" 2>&1 &
  pid=$!
  for _ in $(seq 200); do
    addr=$(sed -n 's/.*published at \(127\.0\.0\.1:[0-9]*\).*/\1/p' "$out/$1.log")
    [ -n "$addr" ] && return 0
    kill -0 "$pid" 2>/dev/null || fail "$1 exited before publishing"
    sleep 0.1
  done
  fail "$1 did not publish within 20 s"
}

relu="$src/data/suites/level1/small/relu.toml"

# 1. Remote only: every job runs on the node.
start_node node1
"$kiln" --threads 1 eval --policy expert --suite "$relu" --remote "$addr" --no-local \
  --cache-dir "$cache" --json "$out/remote.json" > "$out/eval_remote.log" 2>&1 ||
  fail "eval --remote --no-local exited $?"
grep -q "tasks 1  pass 100.0%" "$out/eval_remote.log" || fail "remote eval did not pass relu"
grep -q "\"name\":\"$addr\",\"rejoined\":0,\"routed\":2" "$out/eval_remote.log" ||
  fail "the node did not run both jobs (baseline, evaluate)"

# 2. A run whose pool is the node alone (expert episodes, no learner).
"$kiln" --threads 1 run --set "tasks.suites=[\"$relu\"]" --set 'eval.policies=[]' \
  --set rollout.policy=\"expert\" --set rollout.episodes=4 --set rollout.max_concurrent=4 \
  --set rollout.verify_checks=1 --set rollout.timing_cap_ms=50 --set pool.local=false \
  --set "pool.remote=[\"$addr\"]" --set "pool.cache_dir=\"$cache\"" \
  --set "run.out_dir=\"$out/runs\"" > "$out/run_remote.log" 2>&1 || fail "run with pool.remote exited $?"
grep -q "rollout done: 4 episodes" "$out/run_remote.log" || fail "the remote-pool run did not finish its episodes"

# 3. SIGTERM: a clean stop that reports what the node served.
kill -TERM "$pid"; wait "$pid"; rc=$?
[ "$rc" -eq 0 ] || fail "node exited $rc on SIGTERM"
grep -q "kiln node: stopped; [0-9]* requests" "$out/node1.log" || fail "no stop line with stats"

# 4. A node killed with jobs in flight: they are retried locally, every task still passes.
start_node node2
tasks=()
for t in relu abs neg exp; do tasks+=(--suite "$src/data/suites/level1/cpu/$t.toml"); done
( sleep 3; kill -KILL "$pid" ) &
"$kiln" --threads 1 eval --policy expert "${tasks[@]}" --remote "$addr" --parallel 4 \
  --cache-dir "$cache" > "$out/eval_lost.log" 2>&1 || fail "eval with a lost node exited $?"
wait
grep -q "tasks 4  pass 100.0%" "$out/eval_lost.log" || fail "tasks were lost with the node"
grep -q "pool router: pool $addr" "$out/eval_lost.log" || fail "the lost node was not reported"
grep -o '"retries":[0-9]*' "$out/eval_lost.log" | head -1

# 5. Nothing listening: exit 2 naming the address.
"$kiln" --threads 1 eval --policy expert --suite "$relu" --remote 127.0.0.1:1 > "$out/eval_none.log" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "unreachable node: exit $rc, wanted 2"
grep -q "pool node 127.0.0.1:1: cannot connect" "$out/eval_none.log" || fail "unreachable node not named"
# 6. A "node" that answers with a BASP header claiming 4 GiB: the coordinator's frame guard cuts
#    it before its middleman allocates; the eval exits 2 naming the node, its peak RSS stays small.
python3 - "$kiln" "$relu" "$out/eval_hostile_node.log" <<'PY' || fail "hostile node: see $out/eval_hostile_node.log"
import resource, socket, struct, subprocess, sys, threading
kiln, relu, log = sys.argv[1:4]
ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(8)
port = ls.getsockname()[1]
def serve():
    while True:
        try:
            c, _ = ls.accept()
        except OSError:
            return
        c.sendall(struct.pack(">BBBBI", 0, 0, 0, 0, 0xFFFFFFF0) + bytes(24))
threading.Thread(target=serve, daemon=True).start()
with open(log, "w") as f:
    rc = subprocess.call([kiln, "--threads", "1", "eval", "--policy", "expert", "--suite", relu,
                          "--remote", f"127.0.0.1:{port}"], stdout=f, stderr=subprocess.STDOUT)
peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
text = open(log).read()
print(f"hostile node: exit {rc}, coordinator peak RSS {peak_kib} KiB")
ok = rc == 2 and f"pool node 127.0.0.1:{port}: cannot connect" in text and peak_kib < 1 << 20
ok = ok and "claiming 4294967280 bytes" in text
sys.exit(0 if ok else 1)
PY
echo "node_pool: ok"
