#!/usr/bin/env bash
# mpirun's remote-shell agent for test hosts in network namespaces
# (scripts/netns.sh): where Open MPI would `ssh HOST COMMAND` to start its
# daemon (orted) on a host, this runs COMMAND in the namespace named HOST.
#
#   mpirun --hostfile F --mca plm_rsh_agent scripts/netns-rsh.sh \
#          --mca oob_tcp_if_include SUBNET.0/24 ...
#
# F names namespaces as hosts (`tcns0 slots=4`, one line each). The daemons
# reach mpirun over the bridge (oob_tcp_if_include: the netns.sh subnet),
# and the ranks each daemon starts live in its namespace. Such a daemon
# sometimes crashes writing hwloc's topology into a shared segment
# (hwloc_shmem_topology_write): the daemon runs with rtc_hwloc_vmhole none,
# which does without it.
# Each host keeps its Open MPI session directory apart: the namespaces
# share this machine's name and file system, so daemons of different hosts
# would share TMPDIR/ompi.NAME.UID/jf.N, and one that ends removes what
# another is creating ("A call to mkdir was unable to create the desired
# directory"). The daemon, and the ranks it starts, get TMPDIR/netns-rsh.HOST
# (TMPDIR: /tmp when unset); give mpirun a TMPDIR of its own to have that go
# with it.
# Root only, as netns.sh. A host that is not an existing namespace is one
# line and exit 1.
set -euo pipefail
[[ $# -ge 2 ]] || { echo "netns-rsh.sh: error: usage: netns-rsh.sh NAMESPACE COMMAND..." >&2; exit 1; }
ns=$1
shift
[[ $ns =~ ^[a-z0-9]+$ ]] && ip netns list | awk '{print $1}' | grep -qx "$ns" || {
  echo "netns-rsh.sh: error: '$ns' is not a network namespace here" >&2
  exit 1
}
tmp=${TMPDIR:-/tmp}/netns-rsh.$ns
mkdir -p "$tmp" || { echo "netns-rsh.sh: error: cannot make the session directory $tmp" >&2; exit 1; }
# As ssh does: the command line is a string for a shell on the "host".
exec ip netns exec "$ns" env TMPDIR="$tmp" OMPI_MCA_rtc_hwloc_vmhole=none /bin/sh -c "$*"
