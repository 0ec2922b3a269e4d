#!/usr/bin/env bash
# kiln bench router over two `kiln node --backend null` on loopback: every job answered, each node
# used, the figures present (jobs/s, latency, CPU per job in each process).
#   bench_router.sh KILN SOURCE_DIR
set -u
kiln="$1"; src="$2"
out="$(mktemp -d)"
pids=()
trap 'for p in "${pids[@]}"; do kill -KILL "$p" 2> /dev/null; done; rm -rf "$out"' EXIT
fail() { echo "bench_router: FAIL: $*"; tail -n 20 "$out"/*.log; exit 1; }
remote=()
for i in 1 2; do
  "$kiln" --threads 1 node --backend null --port 0 --stats-every 0 > "$out/node$i.log" 2>&1 &
  pids+=("$!")
  for _ in $(seq 100); do grep -q "published at" "$out/node$i.log" && break; sleep 0.1; done
  addr=$(grep -o "published at [0-9.:]*" "$out/node$i.log" | cut -d' ' -f3) || fail "node $i"
  remote+=(--remote "$addr")
done
"$kiln" --threads 1 bench router "${remote[@]}" --jobs 3000 --in-flight 32 --json \
  --suite "$src/data/suites/level1/cpu/relu.toml" > "$out/bench.json" 2> "$out/bench.log" ||
  fail "kiln bench router exited $?"
cat "$out/bench.json"
python3 - "$out/bench.json" <<'PY' || fail "figures"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["nodes"] == 2 and j["jobs"] == 3000 and j["jobs_failed"] == 0 and j["failed"] == 0, j
assert sum(n["routed"] for n in j["per_node"]) == 3000, j["per_node"]
assert all(n["routed"] > 0 and n["cpu_us_per_job"] > 0 for n in j["per_node"]), j["per_node"]
assert j["jobs_per_s"] > 0 and j["coordinator_cpu_us_per_job"] > 0 and j["latency_ms_p99"] > 0, j
PY
