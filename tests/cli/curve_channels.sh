#!/usr/bin/env bash
# CurveZMQ on the trajectory channel, end to end: `kiln keys` makes the key pairs; a `kiln
# learner` binds its PULL and PUB as CURVE servers that let in only rollout.pub; `kiln run`s
# stream to it: the authorized one is delivered; a stranger's key and a plaintext client are
# refused, counted on both sides, and their runs end at once with exit 1 (no episode waits on a
# consumer that will never take it); plaintext to an address off loopback is refused by config.
# Then the stock Python consumer (tools/kiln_trajectories.py) as the CURVE server a run connects to.
#   curve_channels.sh KILN SOURCE_DIR OUT_DIR [PYTHON_WITH_ZMQ]
set -u
kiln="$1"; src="$2"; out="$3/curve_channels"; py="${4:-}"
rm -rf "$out"; mkdir -p "$out"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2> /dev/null; done; }
trap cleanup EXIT
fail() {
  echo "curve_channels: FAIL: $*"
  for f in "$out"/*.log; do echo "--- $f"; tail -n 30 "$f"; done
  exit 1
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
summary_field() { # summary_field RUN_NAME EXPR: a field of that run's summary.json (python expr on j)
  python3 -c 'import glob, json, sys
d = sorted(glob.glob(sys.argv[1] + "/" + sys.argv[2] + "-*"))[-1]
j = json.load(open(d + "/summary.json"))
print(eval(sys.argv[3]))' "$out/runs" "$1" "$2"
}

"$kiln" keys learner rollout stranger --out "$out/keys" > "$out/keys.log" 2>&1 || fail "kiln keys"
[ "$(stat -c %a "$out/keys/rollout.key")" = 600 ] || fail "a secret key file is not 0600"
"$kiln" keys rollout --out "$out/keys" > /dev/null 2>&1 && fail "kiln keys overwrote a key pair"
mkdir -p "$out/keys/authorized" && cp "$out/keys/rollout.pub" "$out/keys/authorized/"

pull="tcp://127.0.0.1:$(free_port)"; pub="tcp://127.0.0.1:$(free_port)"
"$kiln" --threads 1 learner --set learner.stage=\"ppo\" --set "run.out_dir=\"$out/runs\"" \
  --set "curve.secret_key=\"$out/keys/learner.key\"" \
  --set "curve.authorized=\"$out/keys/authorized\"" --pull "$pull" --pub "$pub" \
  > "$out/learner.log" 2>&1 &
learner=$!
pids+=("$learner")
for _ in $(seq 100); do
  grep -q "PULL $pull" "$out/learner.log" && break
  kill -0 "$learner" 2> /dev/null || fail "the learner exited"
  sleep 0.2
done

# One small task keeps each run to seconds: the channel is under test, not the pool.
printf 'name = "relu_small"\nlevel = 1\ndtype = "float32"\noutputs = ["y"]\n[[inputs]]\nname = "x"\nshape = [64, 1000]\ninit = "normal"\n[[ops]]\nout = "y"\nop = "relu"\nargs = ["x"]\n' \
  > "$out/relu_small.toml"
run() { # run NAME EXTRA_SETS...: 4 expert episodes on relu_small, streamed to the learner's PULL
  local name="$1"
  shift
  "$kiln" --threads 1 run --set "tasks.suites=[\"$out/relu_small.toml\"]" \
    --set 'eval.policies=[]' --set rollout.policy=\"expert\" --set rollout.episodes=4 \
    --set rollout.max_concurrent=4 --set rollout.verify_checks=1 --set rollout.timing_cap_ms=50 \
    --set validate.timing_runs=1 --set "pool.cache_dir=\"$out/cache\"" \
    --set "run.out_dir=\"$out/runs\"" --set "run.name=\"$name\"" --set "rollout.sink=\"$pull\"" \
    --set rollout.sink_bind=false "$@" > "$out/$name.log" 2>&1
}

# 1. The authorized key: every trajectory is handed over, and no server refused it.
run authorized --set "curve.secret_key=\"$out/keys/rollout.key\"" \
  --set "curve.server_key=\"$out/keys/learner.pub\"" || fail "the authorized run exited $?"
[ "$(summary_field authorized 'j["rollout"]["sink"]["sent"]')" = 4 ] || fail "authorized: not 4 sent"
[ "$(summary_field authorized 'j["rollout"]["sink"]["channel"]["curve"]')" = True ] ||
  fail "authorized: the sink's channel is not CURVE"
[ "$(summary_field authorized 'j["rollout"]["sink"]["channel"]["refused_by_server"]')" = 0 ] ||
  fail "authorized: refused by the learner"

# 2. A key the learner does not list: the learner refuses it; the run is told, fails its pushes at
#    once rather than waiting on a consumer that will never take them, and exits 1.
run stranger --set "curve.secret_key=\"$out/keys/stranger.key\"" \
  --set "curve.server_key=\"$out/keys/learner.pub\""
rc=$?
[ "$rc" = 1 ] || fail "the stranger's run exited $rc, not 1"
grep -q "refused this process's key" "$out/stranger.log" || fail "the stranger was not told"
grep -q "the trajectories were not delivered" "$out/stranger.log" || fail "no clear error at the end"
[ "$(summary_field stranger 'j["rollout"]["sink"]["channel"]["refused_by_server"]')" -ge 1 ] ||
  fail "stranger: the refusal was not counted by the run"

# 3. Plaintext (allowed on loopback by the client's config) against the CURVE learner: the
#    handshake fails, the learner counts it, the run stops waiting and exits 1.
run plaintext
rc=$?
[ "$rc" = 1 ] || fail "the plaintext run exited $rc, not 1"
grep -q "the server wants CURVE" "$out/plaintext.log" || fail "plaintext: the run was not told why"

# 4. Plaintext to an address off loopback: refused before anything is sent.
run offhost --set 'rollout.sink="tcp://10.255.255.1:5557"' && fail "plaintext off loopback ran"
grep -q "key 'rollout.sink': tcp://10.255.255.1:5557 would carry plaintext off this host" \
  "$out/offhost.log" || fail "offhost: no clear error naming the key"
grep -q "validating" "$out/offhost.log" && fail "offhost: refused only after validating tasks"

kill -INT "$learner"
wait "$learner" || fail "the learner exited $? on SIGINT"
line=$(grep "trajectories channel curve:" "$out/learner.log") || fail "no channel line from the learner"
echo "learner: $line"
frames=$(grep -o "[0-9]* frames" "$out/learner.log" | tail -n 1 | cut -d' ' -f1)
[ "$frames" = 4 ] || fail "the learner took $frames frames, not the authorized run's 4"
accepted=$(echo "$line" | grep -o "[0-9]* accepted" | cut -d' ' -f1)
refused=$(echo "$line" | grep -o "[0-9]* refused (unknown key)" | cut -d' ' -f1)
failed=$(echo "$line" | grep -o "[0-9]* failed handshakes" | cut -d' ' -f1)
[ "$accepted" -ge 1 ] || fail "no accepted handshake counted"
[ "$refused" -ge 1 ] || fail "the stranger's key was not counted as refused"
[ "$failed" -ge 1 ] || fail "the plaintext client was not counted as a failed handshake"
grep -q "refused a peer at 127.0.0.1" "$out/learner.log" || fail "the refusal was not logged"
# 5. The stock Python consumer binds as a CURVE server that lets in rollout.pub.
if [ -n "$py" ] && "$py" -c 'import zmq, msgpack' 2> /dev/null; then
  bound="tcp://127.0.0.1:$(free_port)"
  "$py" "$src/tools/kiln_trajectories.py" "$bound" --bind --count 4 --timeout 120 \
    --curve-secret "$out/keys/learner.key" --curve-authorized "$out/keys/authorized" \
    > "$out/python.log" 2>&1 &
  consumer=$!
  pids+=("$consumer")
  sleep 1
  run to_python --set "rollout.sink=\"$bound\"" --set "curve.secret_key=\"$out/keys/rollout.key\"" \
    --set "curve.server_key=\"$out/keys/learner.pub\"" || fail "the run to Python exited $?"
  wait "$consumer" || fail "the Python consumer exited $?"
  grep -q "^4 trajectories, 0 bad frames" "$out/python.log" || fail "Python did not get all 4"
else
  echo "curve_channels: the Python consumer step: SKIP (no python3 with zmq and msgpack)"
fi
echo "curve_channels: ok (accepted $accepted, refused $refused, failed handshakes $failed)"
