#!/usr/bin/env bash
# Test "hosts" in network namespaces, for benchmarks over real TCP.
#
#   scripts/netns.sh up N [--prefix P] [--subnet A.B.C] [--hosts-file F]
#   scripts/netns.sh down [--prefix P]
#   scripts/netns.sh run N [--prefix P] [--subnet A.B.C] -- COMMAND...
#
# `up` makes a bridge ${P}br0 (SUBNET.1/24) in the root namespace and N
# namespaces ${P}ns0.. each joined to it by a veth pair (SUBNET.10+i inside,
# on eth0), and writes a tc-bench hosts file (default ./tc-hosts.txt):
#     client SUBNET.1
#     netns ${P}ns0 SUBNET.10
#     ...
# `tc-bench dapc --hosts FILE` then starts its servers inside those
# namespaces. `down` removes exactly what `up` made for that prefix. `run`
# does up, runs COMMAND with TC_HOSTS_FILE set, and always does down.
# Needs root and iproute2. Default prefix "tc", subnet 10.199.0.
set -euo pipefail

die() { echo "netns.sh: error: $*" >&2; exit 1; }

cmd=${1:-}
[[ -n $cmd ]] || die "usage: netns.sh up N | down | run N -- COMMAND..."
shift
n=0
if [[ $cmd == up || $cmd == run ]]; then
  [[ ${1:-} =~ ^[0-9]+$ && $1 -ge 1 && $1 -le 200 ]] ||
    die "'$cmd' needs a namespace count from 1 to 200"
  n=$1
  shift
fi
prefix=tc subnet=10.199.0 hosts_file=$PWD/tc-hosts.txt
while [[ $# -gt 0 ]]; do
  case $1 in
    --prefix) prefix=${2:?}; shift 2 ;;
    --subnet) subnet=${2:?}; shift 2 ;;
    --hosts-file) hosts_file=${2:?}; shift 2 ;;
    --) shift; break ;;
    *) die "unknown argument '$1'" ;;
  esac
done
[[ $prefix =~ ^[a-z][a-z0-9]{0,7}$ ]] ||
  die "--prefix must be 1-8 lowercase letters and digits"
[[ $subnet =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "--subnet must look like 10.199.0"
[[ $(id -u) == 0 ]] || die "must run as root (ip netns)"
command -v ip >/dev/null || die "'ip' not found (install iproute2)"

down() {
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^${prefix}ns[0-9]+$" || true); do
    ip netns del "$ns"
  done
  ip link show "${prefix}br0" >/dev/null 2>&1 && ip link del "${prefix}br0"
  # veth ends in the root namespace go with their peers; remove strays.
  local l
  for l in $(ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' |
             grep -E "^${prefix}v[0-9]+$" || true); do
    ip link del "$l"
  done
}

up() {
  if ip link show "${prefix}br0" >/dev/null 2>&1 ||
     ip netns list | grep -qE "^${prefix}ns[0-9]+( |$)"; then
    die "namespaces with prefix '$prefix' exist; run 'netns.sh down --prefix $prefix'"
  fi
  ip link add "${prefix}br0" type bridge
  ip addr add "${subnet}.1/24" dev "${prefix}br0"
  ip link set "${prefix}br0" up
  {
    echo "# tc-bench hosts file written by scripts/netns.sh"
    echo "client ${subnet}.1"
  } > "$hosts_file"
  local i ns
  for ((i = 0; i < n; i++)); do
    ns=${prefix}ns$i
    ip netns add "$ns"
    ip link add "${prefix}v$i" type veth peer name eth0 netns "$ns"
    ip link set "${prefix}v$i" master "${prefix}br0" up
    ip -n "$ns" addr add "${subnet}.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" route add default via "${subnet}.1"
    echo "netns $ns ${subnet}.$((10 + i))" >> "$hosts_file"
  done
  echo "netns.sh: $n namespace(s) up; hosts file $hosts_file"
}

case $cmd in
  up) up ;;
  down) down ;;
  run)
    [[ $# -gt 0 ]] || die "'run' needs '-- COMMAND...'"
    trap down EXIT
    trap 'exit 130' INT TERM
    up >&2
    TC_HOSTS_FILE=$hosts_file "$@"
    ;;
  *) die "unknown command '$cmd' (expected up, down or run)" ;;
esac
