#!/usr/bin/env bash
# %mpirun in lit tests: Open MPI's mpirun as root, oversubscribed on this
# machine, its out-of-band wire-up on loopback only, bounded in time
# (timeout -k: mpirun forwards the TERM to its ranks, KILL 10 s later), and
# with a session directory of its own: mpirun makes $TMPDIR/ompi.HOST.UID,
# and two mpiruns of concurrent tests sharing lit's TMPDIR race for it.
d=$(mktemp -d /tmp/tc-mpirun.XXXXXX) || exit 1
TMPDIR=$d timeout -k 10 120 mpirun --allow-run-as-root --oversubscribe \
  --mca oob_tcp_if_include lo "$@"
rc=$?
rm -rf "$d"
exit $rc
