#!/usr/bin/env bash
# `kiln bench router` across hosts in network namespaces (tests/cli/netns_hosts.sh): a coordinator
# host and 1, 2 and 4 node hosts, each node `kiln node --backend null`, so the figures are the
# router's own cost per job and the network's. One JSON line per node count on stdout. Needs root.
#   tools/bench_router_netns.sh KILN [JOBS] [IN_FLIGHT] [NODE_COUNTS] > router.jsonl
set -u
kiln="$(realpath "$1")"; jobs="${2:-20000}"; inflight="${3:-64}"; counts="${4:-1 2 4}"
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/../tests/cli/netns_hosts.sh"
logs="$(mktemp -d)"
tag="kb$$"; co="${tag}co"; port=4710
pids=()
trap 'for p in "${pids[@]}"; do kill -INT "$p" 2> /dev/null; done; wait 2> /dev/null; netns_cleanup' EXIT
[ "$(id -u)" -eq 0 ] || { echo "bench_router_netns: needs root for ip netns" >&2; exit 77; }
netns_switch "${tag}sw" || { echo "bench_router_netns: no network namespaces here" >&2; exit 77; }
netns_host "$co" co 10.78.0.1 || exit 1
max=0
for n in $counts; do [ "$n" -gt "$max" ] && max=$n; done
for i in $(seq "$max"); do
  ns="${tag}n$i"; ip="10.78.0.$((10 + i))"
  netns_host "$ns" "n$i" "$ip" || exit 1
  ip netns exec "$ns" "$kiln" --threads 1 node --backend null --bind "$ip" --port "$port" \
    --stats-every 0 > "$logs/node$i.log" 2>&1 &
  pids+=("$!")
done
for i in $(seq "$max"); do
  for _ in $(seq 100); do grep -q "published at" "$logs/node$i.log" && break; sleep 0.1; done
  grep -q "published at" "$logs/node$i.log" || { cat "$logs/node$i.log" >&2; exit 1; }
done
for n in $counts; do
  remote=()
  for i in $(seq "$n"); do remote+=(--remote "10.78.0.$((10 + i)):$port"); done
  ip netns exec "$co" "$kiln" --threads 1 bench router "${remote[@]}" --jobs "$jobs" \
    --in-flight "$inflight" --json || exit 1
done
