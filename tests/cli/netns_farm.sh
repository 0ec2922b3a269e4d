#!/usr/bin/env bash
# A farm on one machine: a coordinator host and two node hosts, each in its own network namespace
# with its own address, joined by a bridge in a fourth ("switch") namespace. Faults are made on the
# wire: a node SIGKILLed with jobs in flight, a link cut at the switch (no RST: only the
# middleman's heartbeat timeout can tell) and restored, a node restarted under its old address,
# 50 ms latency with 5% loss, hostile bytes on a node's port. Every eval must pass every task (no
# job lost, none answered twice), lost nodes must be detected within the peer timeout and must
# rejoin the running coordinator. Needs root and `ip netns` (iproute2): skipped (77) otherwise.
#   netns_farm.sh KILN SOURCE_DIR OUT_DIR [NFQ_NETEM]   figures: OUT_DIR/netns_farm/figures.tsv
# NFQ_NETEM (tests/cli/nfq_netem.cpp) stands in for sch_netem where the kernel lacks it.
set -u
kiln="$1"; src="$2"; out="$3/netns_farm"; nfq_netem="${4:-}"
rm -rf "$out"; mkdir -p "$out"
tag="k$$"
sw="${tag}sw"; co="${tag}co"; n1="${tag}n1"; n2="${tag}n2"
ip_co=10.77.0.1; ip_n1=10.77.0.11; ip_n2=10.77.0.12; port=4710
# Fast detection for the test; the defaults (1 s / 5 s) are what users get.
peer=(--peer-heartbeat-ms 300 --peer-timeout-ms 2000)
pids=()

. "$(dirname "$0")/netns_hosts.sh"
skip() { echo "netns_farm: SKIP: $*"; exit 77; }
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  netns_cleanup
}
trap cleanup EXIT
fail() {
  echo "netns_farm: FAIL: $*"
  for f in "$out"/*.log; do echo "--- $f"; tail -n 25 "$f"; done
  exit 1
}
now() { date +%s.%N; }
# Seconds from a `date +%s.%N` stamp to the first log line matching a pattern (the log's
# HH:MM:SS.mmm times are today's, as the stamp is).
since() { # since STAMP LOG PATTERN
  local t
  t=$(grep -m1 -E "$3" "$2" | cut -d' ' -f1) || return 1
  [ -n "$t" ] || return 1
  python3 -c 'import sys, datetime as d
stamp = float(sys.argv[1]); h, m, s = sys.argv[2].split(":")
day = d.datetime.fromtimestamp(stamp).replace(hour=0, minute=0, second=0, microsecond=0)
print(f"{day.timestamp() + int(h) * 3600 + int(m) * 60 + float(s) - stamp:.2f}")' "$1" "$t"
}
figure() { printf '%s\t%s\n' "$1" "$2" | tee -a "$out/figures.tsv"; }

[ "$(id -u)" -eq 0 ] || skip "needs root for ip netns"
command -v ip > /dev/null || skip "no ip (iproute2)"
netns_switch "$sw"
case $? in 0) ;; 1) skip "ip netns add is not allowed here" ;; *) fail "bridge" ;; esac
netns_host "$co" co "$ip_co" && netns_host "$n1" n1 "$ip_n1" && netns_host "$n2" n2 "$ip_n2" ||
  fail "hosts on the switch"

start_node() { # start_node NS ADDR LOG: a node on the host's own address; sets $pid
  : >> "$out/$3.log" # before the node's own redirect, so the first grep finds the file
  ip netns exec "$1" "$kiln" --threads 1 "${peer[@]}" node --backend cpu --bind "$2" \
    --port "$port" --cache-dir "$out/cache-$1" --stats-every 0 >> "$out/$3.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 300); do
    grep -q "published at $2:$port" "$out/$3.log" && return 0
    kill -0 "$pid" 2> /dev/null || fail "$3 exited before publishing"
    sleep 0.1
  done
  fail "$3 did not publish within 30 s"
}
# Small tasks keep jobs short; a new width per eval gives new programs, so every eval compiles
# on the nodes rather than answering from their caches.
unary=(relu leaky_relu sigmoid tanh gelu silu mish hardswish hardsigmoid hardtanh elu selu
  softplus softsign exp neg)
tasks() { # tasks COUNT WIDTH: a folder of COUNT one-op tasks on [64, WIDTH]; prints its path
  local dir="$out/tasks-$1-$2"
  mkdir -p "$dir"
  for op in "${unary[@]:0:$1}"; do
    printf 'name = "%s_%s"\nlevel = 1\ndtype = "float32"\noutputs = ["y"]\n[[inputs]]\nname = "x"\nshape = [64, %s]\ninit = "normal"\n[[ops]]\nout = "y"\nop = "%s"\nargs = ["x"]\n' \
      "$op" "$2" "$2" "$op" > "$dir/$op.toml"
  done
  echo "$dir"
}
remote=(--remote "$ip_n1:$port" --remote "$ip_n2:$port" --no-local)
coordinator_eval() { # coordinator_eval LOG PARALLEL TASK_FLAGS...: kiln eval on the coordinator
  local log="$1" par="$2"
  shift 2
  ip netns exec "$co" "$kiln" --threads 1 "${peer[@]}" eval --policy expert "$@" "${remote[@]}" \
    --parallel "$par" --cache-dir "$out/cache-co" > "$out/$log.log" 2>&1
}
# Waits until the eval behind LOG has connected to both nodes (loading and validating its tasks
# comes first and takes seconds on a loaded machine), then a second for jobs to be in flight.
connected() { # connected LOG
  for _ in $(seq 600); do
    [ "$(grep -c "pool node .*: 1 device" "$out/$1.log" 2> /dev/null)" -ge 2 ] && sleep 1 && return 0
    sleep 0.1
  done
  fail "the eval ($1) did not connect to both nodes within 60 s"
}
pool_field() { # pool_field LOG [NODE] KEY: a field of the router's stats, or of NODE's row
  python3 -c 'import json, sys
line = next(l for l in open(sys.argv[1]) if l.startswith("pool: "))
j = json.loads(line[len("pool: "):])
if len(sys.argv) == 4:
    j = next((n for n in j["nodes"] if n["name"] == sys.argv[2]), {})
print(j.get(sys.argv[-1], -1))' "$out/$1.log" "${@:2}"
}
passed_all() { grep -q "tasks $2  pass 100.0%" "$out/$1.log"; }

start_node "$n1" "$ip_n1" node1; node1=$pid
start_node "$n2" "$ip_n2" node2; node2=$pid

# 1. Remote only, across hosts: every job runs on the two nodes.
t0=$(now)
coordinator_eval farm 4 --suite "$(tasks 8 1000)" || fail "eval over two node hosts exited $?"
passed_all farm 8 || fail "eval over two node hosts did not pass all 8 tasks"
for a in "$ip_n1" "$ip_n2"; do
  [ "$(pool_field farm "$a:$port" routed)" -gt 0 ] || fail "node $a ran no job"
done
figure "eval_8_tasks_two_nodes_s" "$(python3 -c "print(round($(now) - $t0, 2))")"

# 2. A run whose pool is the two nodes only (expert episodes, no learner).
relu="$src/data/suites/level1/small/relu.toml"
ip netns exec "$co" "$kiln" --threads 1 run --set "tasks.suites=[\"$relu\"]" --set 'eval.policies=[]' \
  --set rollout.policy=\"expert\" --set rollout.episodes=6 --set rollout.max_concurrent=6 \
  --set rollout.verify_checks=1 --set rollout.timing_cap_ms=50 --set pool.local=false \
  --set "pool.remote=[\"$ip_n1:$port\",\"$ip_n2:$port\"]" --set pool.peer_heartbeat_ms=300 \
  --set pool.peer_timeout_ms=2000 --set "pool.cache_dir=\"$out/cache-co\"" \
  --set "run.out_dir=\"$out/runs\"" > "$out/run.log" 2>&1 || fail "kiln run over the farm exited $?"
grep -q "rollout done: 6 episodes" "$out/run.log" || fail "the farm run did not finish its episodes"

# 3. node1 SIGKILLed with jobs in flight, then restarted under its address while the same eval
#    runs on: its jobs finish on node2, and the new node1 rejoins the coordinator.
coordinator_eval killed 2 --suite "$(tasks 16 1001)" &
evpid=$!
connected killed
t_kill=$(now)
kill -KILL "$node1"
sleep 1
start_node "$n1" "$ip_n1" node1_again; node1=$pid
wait "$evpid" || fail "eval with a killed node exited $?"
passed_all killed 16 || fail "tasks were lost with the killed node"
d=$(since "$t_kill" "$out/killed.log" "pool $ip_n1:$port lost") || fail "the killed node was not seen lost"
figure "sigkill_detect_s" "$d"
d=$(since "$t_kill" "$out/killed.log" "pool $ip_n1:$port rejoined") ||
  fail "the restarted node did not rejoin"
figure "sigkill_restart_rejoin_s" "$d"

# 4. node2's link cut at the switch for 6 s (3x the peer timeout): no RST reaches anyone; the
#    heartbeat timeout finds it, its jobs go to node1; the link comes back and node2 rejoins.
coordinator_eval cut 2 --suite "$(tasks 16 1002)" &
evpid=$!
connected cut
t_cut=$(now)
ip -n "$sw" link set s-n2 down
sleep 6
ip -n "$sw" link set s-n2 up
wait "$evpid" || fail "eval across a cut link exited $?"
passed_all cut 16 || fail "tasks were lost across the cut link"
d=$(since "$t_cut" "$out/cut.log" "pool $ip_n2:$port lost") || fail "the cut node was not seen lost"
figure "link_cut_detect_s" "$d"
python3 -c "import sys; sys.exit(0 if float('$d') <= 2.0 + 0.3 + 1.5 else 1)" ||
  fail "detection took $d s, over the 2 s timeout + one heartbeat + 1.5 s"
grep -q "pool $ip_n2:$port rejoined" "$out/cut.log" || fail "node2 did not rejoin after the cut"
[ "$(pool_field cut "$ip_n2:$port" rejoined)" -eq 1 ] || fail "node2's row does not count its rejoin"
[ "$(pool_field cut failed)" -eq 0 ] || fail "jobs failed across the cut link"
figure "link_cut_jobs_retried" "$(pool_field cut retries)"

# 5. 50 ms and 5% loss on every packet each host sends (netem on each eth0, or where the kernel
#    has no sch_netem the same in user space: an NFQUEUE rule on eth0's output and nfq_netem).
hosts=("$co" "$n1" "$n2")
impair=""
if ip netns exec "$co" tc qdisc add dev eth0 root netem delay 50ms loss 5% 2> /dev/null; then
  ip netns exec "$n1" tc qdisc add dev eth0 root netem delay 50ms loss 5% &&
    ip netns exec "$n2" tc qdisc add dev eth0 root netem delay 50ms loss 5% || fail "netem"
  impair=netem
elif [ -x "$nfq_netem" ] && command -v iptables-legacy > /dev/null; then
  seed=1
  nfq_pids=()
  for ns in "${hosts[@]}"; do
    ip netns exec "$ns" iptables-legacy -A OUTPUT -o eth0 -j NFQUEUE --queue-num 0 ||
      fail "iptables NFQUEUE rule in $ns"
    ip netns exec "$ns" "$nfq_netem" 0 50 0.05 "$seed" > "$out/nfq-$ns.log" 2>&1 &
    pids+=("$!")
    nfq_pids+=("$!")
    seed=$((seed + 1))
  done
  for ns in "${hosts[@]}"; do
    for _ in $(seq 50); do grep -q "nfq_netem: queue" "$out/nfq-$ns.log" && break; sleep 0.1; done
    grep -q "nfq_netem: queue" "$out/nfq-$ns.log" || fail "nfq_netem did not start in $ns"
  done
  impair=nfqueue
fi
if [ -n "$impair" ]; then
  t0=$(now)
  coordinator_eval lossy 4 --suite "$(tasks 8 1003)" || fail "eval over lossy links exited $?"
  passed_all lossy 8 || fail "eval over lossy links did not pass all 8 tasks"
  figure "eval_8_tasks_${impair}_50ms_5pct_s" "$(python3 -c "print(round($(now) - $t0, 2))")"
  [ "$(pool_field lossy failed)" -eq 0 ] || fail "jobs failed over lossy links"
  figure "lossy_jobs_retried" "$(pool_field lossy retries)"
  grep -q "pool .* lost" "$out/lossy.log" && figure "lossy_nodes_lost" "$(grep -c "pool .* lost" "$out/lossy.log")"
  if [ "$impair" = netem ]; then
    for ns in "${hosts[@]}"; do ip netns exec "$ns" tc qdisc del dev eth0 root; done
  else
    for ns in "${hosts[@]}"; do ip netns exec "$ns" iptables-legacy -F OUTPUT; done
    kill -TERM "${nfq_pids[@]}" 2> /dev/null
    wait "${nfq_pids[@]}" 2> /dev/null
    for ns in "${hosts[@]}"; do
      figure "nfq_dropped_$ns" "$(grep -o "[0-9]* packets, [0-9]* dropped" "$out/nfq-$ns.log")"
    done
  fi
else
  echo "netns_farm: latency and loss: SKIP (no sch_netem in this kernel, and no nfq_netem / iptables-legacy)"
fi

# 6. Hostile peers on node1's port: random bytes, a BASP header claiming a 4 GiB payload, a
#    half-open connection left hanging, 200 connects in a burst. The node keeps serving.
ip netns exec "$co" python3 - "$ip_n1" "$port" > "$out/hostile.log" 2>&1 <<'EOF' || fail "hostile client"
import os, socket, struct, sys, time
host, port = sys.argv[1], int(sys.argv[2])
def conn():
    return socket.create_connection((host, port), timeout=5)
s = conn(); s.sendall(os.urandom(4096)); s.close()
# operation client_handshake, flags 0, payload_len 0xFFFFFFF0, then 24 bytes of zeros
s = conn(); s.sendall(struct.pack(">BBBBI", 1, 0, 0, 0, 0xFFFFFFF0) + bytes(24)); time.sleep(1); s.close()
hang = conn(); hang.sendall(b"\x00" * 7)  # a header never finished
burst = []
for _ in range(200):
    try:
        burst.append(conn())
    except OSError as e:
        print("connect refused in the burst:", e)
for b in burst:
    b.close()
print("hostile: sent")
time.sleep(1)
hang.close()
EOF
kill -0 "$node1" 2> /dev/null || fail "node1 died of hostile peers"
rss=$(awk '/VmHWM/ {print $2}' "/proc/$(pgrep -P "$node1" -x kiln || echo "$node1")/status")
figure "node_peak_rss_kib_after_hostile" "$rss"
# the 4 GiB header must not have been allocated (a node's own peak is a few hundred MB)
[ "$rss" -lt 1048576 ] || fail "node1's peak RSS reached $rss KiB after a hostile header"
coordinator_eval after_hostile 4 --suite "$(tasks 8 1004)" || fail "eval after hostile peers exited $?"
passed_all after_hostile 8 || fail "the farm did not pass after hostile peers"
kill -TERM "$node1"
wait "$node1" 2> /dev/null
grep -E "stopped; .* [1-9][0-9]* oversize frames" "$out/node1_again.log" ||
  fail "node1's stop line does not count the oversize frame"
grep -E "stopped; .* [1-9][0-9]* refused \(one address's share\)" "$out/node1_again.log" ||
  fail "node1's stop line does not count the burst past one address's share (64)"
echo "netns_farm: ok"
