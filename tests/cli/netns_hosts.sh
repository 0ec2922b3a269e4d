# Hosts on one machine: network namespaces, each with its own eth0 and address, plugged into a
# bridge that lives in a "switch" namespace (a port per host: s-NAME, which a test can cut).
# Sourced by tests/cli/netns_farm.sh and tools/bench_router_netns.sh; needs root and iproute2.
#   netns_switch NS            the switch namespace with bridge br0 (1: netns denied; 2: no bridge)
#   netns_host NS NAME ADDR    a host namespace whose eth0 (ADDR/24) plugs into port s-NAME
#   netns_cleanup              deletes every namespace made here
netns_made=()
netns_sw=""

netns_switch() {
  ip netns add "$1" 2> /dev/null || return 1
  netns_made+=("$1")
  netns_sw="$1"
  ip -n "$1" link add br0 type bridge && ip -n "$1" link set br0 up &&
    ip -n "$1" link set lo up || return 2
}

netns_host() {
  ip netns add "$1" || return 1
  netns_made+=("$1")
  ip -n "$netns_sw" link add "s-$2" type veth peer name eth0 netns "$1" &&
    ip -n "$netns_sw" link set "s-$2" master br0 && ip -n "$netns_sw" link set "s-$2" up &&
    ip -n "$1" addr add "$3/24" dev eth0 && ip -n "$1" link set eth0 up &&
    ip -n "$1" link set lo up
}

netns_cleanup() {
  for ns in "${netns_made[@]}"; do ip netns del "$ns" 2> /dev/null; done
  netns_made=()
}
