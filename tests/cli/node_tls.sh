#!/usr/bin/env bash
# `kiln node --tls` on loopback: a client with a certificate from the node's CA runs jobs there (an
# eval, and a run through [pool] tls);
# one from another CA, a plaintext client, and a TLS client of a plaintext node are refused (exit
# 2, naming the node) while the node serves on; a port that never answers the TLS handshake is
# given up after the connect timeout. Exits 77 (skipped) without openssl or TLS.
#   node_tls.sh KILN SOURCE_DIR OUT_DIR
set -u
kiln="$1"; src="$2"; out="$3/node_tls"
rm -rf "$out"; mkdir -p "$out"
cache="$out/cache"
fail() { echo "node_tls: FAIL: $*"; for f in "$out"/*.log; do echo "--- $f"; tail -n 20 "$f"; done; exit 1; }
command -v openssl > /dev/null || { echo "node_tls: SKIPPED: no openssl command"; exit 77; }

# make_ca CA WHO...: a CA, and a directory per WHO with cert.pem, key.pem (signed by CA), ca.pem.
make_ca() {
  local ca="$out/$1"; shift
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$ca.key" -out "$ca.pem" -days 2 \
    -subj "/CN=$(basename "$ca")" 2> /dev/null || fail "openssl req for $ca"
  for who in "$@"; do
    mkdir -p "$out/$who"
    openssl req -newkey rsa:2048 -nodes -keyout "$out/$who/key.pem" -out "$out/$who.csr" \
      -subj "/CN=$who" 2> /dev/null &&
      openssl x509 -req -in "$out/$who.csr" -CA "$ca.pem" -CAkey "$ca.key" -CAcreateserial \
        -out "$out/$who/cert.pem" -days 2 2> /dev/null || fail "openssl x509 for $who"
    cp "$ca.pem" "$out/$who/ca.pem"
  done
}
make_ca ca node client
make_ca other_ca stranger

start_node() { # start_node NAME [--tls DIR]: sets $pid and $addr
  local name="$1"; shift
  "$kiln" --threads 1 node --backend cpu --port 0 --cache-dir "$cache" --stats-every 0 "$@" \
    > "$out/$name.log" 2>&1 &
  pid=$!
  for _ in $(seq 200); do
    addr=$(sed -n 's/.*published at \(127\.0\.0\.1:[0-9]*\).*/\1/p' "$out/$name.log")
    [ -n "$addr" ] && return 0
    if ! kill -0 "$pid" 2> /dev/null; then
      grep -q "this build has no TLS" "$out/$name.log" && { echo "node_tls: SKIPPED: no TLS in this build"; exit 77; }
      fail "$name exited before publishing"
    fi
    sleep 0.1
  done
  fail "$name did not publish within 20 s"
}

relu="$src/data/suites/level1/small/relu.toml"
eval_on() { # eval_on LOG [--tls DIR]: evaluates relu on the node at $addr only
  local log="$1"; shift
  timeout 120 "$kiln" --threads 1 eval --policy expert --suite "$relu" --remote "$addr" --no-local \
    --cache-dir "$cache" "$@" > "$out/$log.log" 2>&1
}

start_node tls_node --tls "$out/node"
grep -q "(mutual TLS)" "$out/tls_node.log" || fail "the node does not say it is on TLS"
eval_on trusted --tls "$out/client" || fail "trusted client exited $?"
grep -q "tasks 1  pass 100.0%" "$out/trusted.log" || fail "trusted client did not pass relu"
grep -q "\"name\":\"$addr\",\"rejoined\":0,\"routed\":2" "$out/trusted.log" || fail "the node did not run both jobs"

eval_on stranger --tls "$out/stranger"; rc=$?
[ "$rc" -eq 2 ] || fail "a certificate from another CA: exit $rc, wanted 2"
grep -q "pool node $addr: cannot connect over TLS" "$out/stranger.log" || fail "stranger: no clear error"
eval_on plaintext; rc=$?
[ "$rc" -eq 2 ] || fail "a plaintext client: exit $rc, wanted 2"
grep -q "pool node $addr: cannot connect" "$out/plaintext.log" || fail "plaintext: no clear error"
eval_on trusted_again --tls "$out/client" || fail "the node stopped serving after refusals"
# A port that accepts TCP and never answers the TLS handshake: refused after the connect timeout
# (10 s), not waited on forever.
silent=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -c 'import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(16); held = []
while True: held.append(s.accept()[0])' "$silent" &
silent_pid=$!
sleep 0.5
node_addr="$addr"; addr="127.0.0.1:$silent"; t0=$(date +%s)
eval_on silent --tls "$out/client"; rc=$?
addr="$node_addr"; kill "$silent_pid"
[ "$rc" -eq 2 ] || fail "a TLS peer that never answers: exit $rc, wanted 2 (124: it hung)"
[ $(($(date +%s) - t0)) -le 60 ] || fail "a TLS peer that never answers held the client too long"
grep -q "cannot connect over TLS" "$out/silent.log" || fail "silent TLS peer: no clear error"
# A run whose pool is the TLS node alone ([pool] tls): 4 expert episodes.
timeout 200 "$kiln" --threads 1 run --set "tasks.suites=[\"$relu\"]" --set 'eval.policies=[]' \
  --set rollout.policy=\"expert\" --set rollout.episodes=4 --set rollout.max_concurrent=4 \
  --set rollout.verify_checks=1 --set rollout.timing_cap_ms=50 --set pool.local=false \
  --set "pool.remote=[\"$addr\"]" --set "pool.tls=\"$out/client\"" --set "pool.cache_dir=\"$cache\"" \
  --set "run.out_dir=\"$out/runs\"" > "$out/run_tls.log" 2>&1 || fail "run with pool.tls exited $?"
grep -q "rollout done: 4 episodes" "$out/run_tls.log" || fail "the TLS-pool run did not finish"
kill -TERM "$pid"; wait "$pid" || fail "TLS node exited $? on SIGTERM"

start_node plain_node
eval_on tls_to_plain --tls "$out/client"; rc=$?
[ "$rc" -eq 2 ] || fail "a TLS client of a plaintext node: exit $rc, wanted 2"
kill -TERM "$pid"; wait "$pid"
echo "node_tls: ok"
