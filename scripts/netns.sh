#!/usr/bin/env bash
# Test "hosts" in network namespaces, for benchmarks over real TCP.
#
#   scripts/netns.sh up N [--prefix P] [--subnet A.B.C] [--hosts-file F]
#   scripts/netns.sh down [--prefix P]
#   scripts/netns.sh run N [--prefix P] [--subnet A.B.C] [--hosts-file F] \
#       -- COMMAND [ARGS...]
#
# `up` makes a bridge ${P}br0 with address SUBNET.1/24 in the root namespace
# and N namespaces ${P}ns0..${P}ns(N-1), each joined to the bridge by a veth
# pair: ${P}v$i on the bridge, eth0 inside with SUBNET.(10+i)/24, lo up and a
# default route via SUBNET.1. It then checks real TCP from every namespace
# to SUBNET.1 and to ${P}ns0, and writes a tc-bench hosts file (default
# ./tc-hosts.txt), printing its path:
#     # tc-bench hosts file written by scripts/netns.sh
#     client SUBNET.1
#     netns ${P}ns0 SUBNET.10
#     ...
# `tc-bench dapc --hosts FILE` then listens on the client address and starts
# its servers with `ip netns exec NAME ...`. `up` refuses if anything with
# that prefix exists or the subnet is in use, and undoes its own work if a
# step fails.
#
# `down` removes what `up` made for that prefix and nothing else: links are
# marked (ifalias) when made, namespaces are recognized by their marked eth0.
# Nothing there is not an error.
#
# `run` does `up`, runs COMMAND with TC_HOSTS_FILE set to the hosts file,
# always does `down` afterwards (also on Ctrl-C or SIGTERM), and exits with
# COMMAND's status.
#
# Defaults: prefix "tc" (1-8 lowercase letters/digits), subnet 10.199.0.
# Needs root and iproute2; python3 (optional) for the TCP check, else only
# link state and addresses are checked.
set -euo pipefail

readonly MARK="made by tc scripts/netns.sh"

die() { echo "netns.sh: error: $*" >&2; exit 1; }
note() { echo "netns.sh: $*" >&2; }

usage() {
  cat <<'EOF'
usage: netns.sh up N [--prefix P] [--subnet A.B.C] [--hosts-file F]
       netns.sh down [--prefix P]
       netns.sh run N [--prefix P] [--subnet A.B.C] [--hosts-file F] -- COMMAND [ARGS...]
EOF
}

# --- Arguments ---------------------------------------------------------------

# What runs here talks across the namespaces' veths: a UCX_NET_DEVICES=lo
# that the caller (lit, for every other test) set would keep it on loopback.
unset UCX_NET_DEVICES

cmd=${1:-}
case $cmd in
  up | down | run) shift ;;
  -h | --help) usage; exit 0 ;;
  "") usage >&2; die "missing command (up, down or run)" ;;
  *) die "unknown command '$cmd' (expected up, down or run)" ;;
esac
n=0
if [[ $cmd != down ]]; then
  [[ ${1:-} =~ ^[0-9]+$ ]] && ((10#$1 >= 1 && 10#$1 <= 200)) ||
    die "'$cmd' needs a namespace count from 1 to 200"
  n=$((10#$1))
  shift
fi
prefix=tc subnet=10.199.0 hosts_file=$PWD/tc-hosts.txt
command_args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --prefix | --subnet | --hosts-file)
      [[ $# -ge 2 ]] || die "missing value after $1"
      case $1 in
        --prefix) prefix=$2 ;;
        --subnet) subnet=$2 ;;
        --hosts-file) hosts_file=$2 ;;
      esac
      shift 2 ;;
    --) shift; command_args=("$@"); break ;;
    *) die "unknown argument '$1'" ;;
  esac
done
[[ $prefix =~ ^[a-z][a-z0-9]{0,7}$ ]] ||
  die "--prefix must be 1-8 lowercase letters and digits, starting with a letter"
[[ $subnet =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] &&
  ((10#${BASH_REMATCH[1]} <= 255 && 10#${BASH_REMATCH[2]} <= 255 &&
    10#${BASH_REMATCH[3]} <= 255)) ||
  die "--subnet must be the first three parts of an IPv4 address, like 10.199.0"
if [[ $cmd == run ]]; then
  ((${#command_args[@]})) || die "'run' needs '-- COMMAND [ARGS...]'"
elif ((${#command_args[@]})); then
  die "'$cmd' takes no command after '--'"
fi
[[ $hosts_file == /* ]] || hosts_file=$PWD/$hosts_file

[[ $(id -u) == 0 ]] || die "must run as root (network namespaces need it)"
IP=$(command -v ip) || die "'ip' not found (install iproute2)"

# Every ip call is bounded in time: setup and teardown must never hang.
ip() { timeout 10 "$IP" "$@"; }

# --- Inventory ---------------------------------------------------------------

ns_pattern="^${prefix}ns[0-9]+$"
veth_pattern="^${prefix}v[0-9]+$"
bridge=${prefix}br0

namespaces() { ip netns list | awk '{print $1}' | grep -E "$ns_pattern" | sort -V || true; }

# Links in the root namespace whose name matches $1.
links() {
  ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}' |
    grep -E "$1" | sort -V || true
}

marked() { [[ $(cat "/sys/class/net/$1/ifalias" 2>/dev/null) == "$MARK" ]]; }

# A namespace is ours if its eth0 carries the mark, or if it holds nothing
# but lo (a leftover of an interrupted `up`).
ns_is_ours() {
  local alias others
  alias=$(ip netns exec "$1" cat /sys/class/net/eth0/ifalias 2>/dev/null) || true
  [[ $alias == "$MARK" ]] && return 0
  others=$(ip -n "$1" -o link show 2>/dev/null |
    awk -F': ' '{sub(/@.*/, "", $2); print $2}' | grep -vx lo || true)
  [[ -z $others ]]
}

# --- down --------------------------------------------------------------------

down() {
  local ns l removed=() ours=()
  # Decide which namespaces are ours while their eth0 still exists.
  for ns in $(namespaces); do
    if ns_is_ours "$ns"; then ours+=("$ns"); else
      note "leaving namespace $ns alone (not made by netns.sh)"; fi
  done
  # veths before namespaces: deleting one end removes both at once, while a
  # namespace's links go away asynchronously after `ip netns del`.
  for l in $(links "$veth_pattern") $(links "^${bridge}$"); do
    if marked "$l"; then
      ip link del "$l"
      removed+=("$l")
    else
      note "leaving link $l alone (not made by netns.sh)"
    fi
  done
  for ns in "${ours[@]}"; do
    ip netns del "$ns"
    removed+=("$ns")
  done
  if ((${#removed[@]})); then note "removed ${removed[*]}"; fi
}

# --- up ----------------------------------------------------------------------

made=()       # what this `up` has made so far, undone if a step fails
up_done=0

undo_up() {
  ((up_done)) && return 0
  local i
  for ((i = ${#made[@]} - 1; i >= 0; i--)); do
    case ${made[i]} in
      ns:*) ip netns del "${made[i]#ns:}" 2>/dev/null || true ;;
      link:*) ip link del "${made[i]#link:}" 2>/dev/null || true ;;
    esac
  done
  ((${#made[@]} == 0)) || note "setup failed; removed what it had made"
}

check_free() {
  local taken
  taken=$( (namespaces; links "$veth_pattern"; links "^${bridge}$") | tr '\n' ' ')
  [[ -z $taken ]] ||
    die "'$prefix' is in use (${taken% }); run 'netns.sh down --prefix $prefix' first"
  taken=$(ip -o -4 addr show to "${subnet}.0/24" | awk '{print $2}' | sort -u | tr '\n' ' ')
  [[ -z $taken ]] ||
    die "subnet ${subnet}.0/24 is already in use on ${taken% }; pick another --subnet"
}

# Real TCP over the veths: every namespace connects to the client address,
# and (with two or more) to ${prefix}ns0, which also catches bridged traffic
# dropped by netfilter (net.bridge.bridge-nf-call-iptables and a DROP policy).
check_tcp() {
  local py
  py=$(command -v /usr/bin/python3 python3 | head -n 1) || true
  if [[ -z $py ]]; then
    local i
    for ((i = 0; i < n; i++)); do
      ip -n "${prefix}ns$i" -br addr show dev eth0 |
        grep -q "UP.* ${subnet}.$((10 + i))/24" ||
        die "eth0 in ${prefix}ns$i is not up with ${subnet}.$((10 + i))"
    done
    note "python3 not found: checked link state and addresses only"
    return
  fi
  local out
  out=$(timeout 60 "$py" - "$IP" "$subnet" "$prefix" "$n" 2>&1 <<'PY'
import subprocess, sys

ip, subnet, prefix, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
names = ["%sns%d" % (prefix, i) for i in range(n)]
# Listens on ADDR, prints its port, then one line per connection received.
LISTENER = r"""
import socket, sys
srv = socket.create_server((sys.argv[1], 0))
srv.settimeout(8)
print(srv.getsockname()[1], flush=True)
for _ in range(int(sys.argv[2])):
    conn, _ = srv.accept()
    conn.settimeout(8)
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(256)
        if not chunk:
            break
        data += chunk
    print(data.decode(errors="replace").strip(), flush=True)
    conn.close()
"""

def check(where, addr, clients):
    inside = [ip, "netns", "exec", where] if where else []
    listener = subprocess.Popen(
        inside + [sys.executable, "-c", LISTENER, addr, str(len(clients))],
        stdout=subprocess.PIPE, text=True)
    try:
        port = listener.stdout.readline().strip()
        if not port:
            sys.exit("no TCP listener on %s" % addr)
        for ns in clients:
            try:
                subprocess.run(
                    [ip, "netns", "exec", ns, "bash", "-c",
                     'exec 3<>"/dev/tcp/$1/$2" && echo "$3" >&3',
                     "connect", addr, port, ns],
                    check=True, timeout=5, stderr=subprocess.DEVNULL)
            except (subprocess.SubprocessError, OSError):
                sys.exit("no TCP from %s to %s:%s%s" % (
                    ns, addr, port,
                    " (bridged traffic filtered? see "
                    "net.bridge.bridge-nf-call-iptables)" if where else ""))
        got, _ = listener.communicate(timeout=10)
        if sorted(got.split()) != sorted(clients):
            sys.exit("TCP to %s: expected %s, got %r"
                     % (addr, " ".join(clients), got))
    finally:
        listener.kill()
        listener.wait()

check(None, subnet + ".1", names)
if len(names) > 1:
    check(names[0], subnet + ".10", names[1:])
PY
  ) || die "TCP check failed: ${out##*$'\n'}"
}

up() {
  check_free
  trap undo_up EXIT
  # Each object is recorded before it is made: a signal may land in between.
  made+=("link:$bridge")
  ip link add "$bridge" type bridge
  ip link set "$bridge" alias "$MARK"
  ip addr add "${subnet}.1/24" dev "$bridge"
  ip link set "$bridge" up
  local i ns veth
  for ((i = 0; i < n; i++)); do
    ns=${prefix}ns$i veth=${prefix}v$i
    made+=("ns:$ns")
    ip netns add "$ns"
    made+=("link:$veth")
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" alias "$MARK"
    ip -n "$ns" link set eth0 alias "$MARK"
    ip link set "$veth" master "$bridge" up
    ip -n "$ns" addr add "${subnet}.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" route add default via "${subnet}.1"
  done
  check_tcp
  {
    echo "# tc-bench hosts file written by scripts/netns.sh"
    echo "client ${subnet}.1"
    for ((i = 0; i < n; i++)); do
      echo "netns ${prefix}ns$i ${subnet}.$((10 + i))"
    done
  } > "$hosts_file.tmp.$$"
  mv -f "$hosts_file.tmp.$$" "$hosts_file"
  up_done=1
  trap - EXIT
  note "$n namespace(s) up (${prefix}ns0..${prefix}ns$((n - 1)), TCP checked); hosts file:"
  echo "$hosts_file"
}

# --- main --------------------------------------------------------------------

# Signals end the script through its EXIT trap (undo or teardown).
trap 'exit 130' INT
trap 'exit 143' TERM

case $cmd in
  up) up ;;
  down) down ;;
  run)
    up >&2
    # The hosts file is run's own too: it goes with the namespaces.
    trap 'rm -f "$hosts_file"; down || note "teardown incomplete; run netns.sh down --prefix $prefix"' EXIT
    status=0
    TC_HOSTS_FILE=$hosts_file "${command_args[@]}" || status=$?
    exit "$status"
    ;;
esac
