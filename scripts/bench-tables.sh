#!/usr/bin/env bash
# Regenerates the tables and plots of docs/benchmarks.md.
#
#   bash scripts/bench-tables.sh [--only LIST] [--quick] [--data DIR] [--build DIR]
#   bash scripts/bench-tables.sh --render [--data DIR]
#
# Without --render: runs every benchmark below with tc-bench --json (from the
# repository root, tc-bench from BUILD/bin, default build), saves each run's
# output as DIR/NAME.json, its command as DIR/NAME.cmd and how it ran (tc's
# commit, the load average when it began, its wall time) as DIR/NAME.run
# (default DIR: docs/bench), records the machine in DIR/machine.json, draws
# the plots (scripts/plot.py into DIR/plots/NAME) and rewrites the tables
# between the markers of docs/benchmarks.md (scripts/bench-tables.py).
# --only runs the named runs alone (a comma-separated subset of the names
# below) and renders from them and the saved rest. --quick passes --quick to
# the tsi, sss and iput runs and to their mpi-* runs over shared memory
# (smaller sweeps, fewer messages and rounds; the command above each table
# says so): for a machine too loaded for the full runs (sss at 64 KiB times
# out there), not for the tables to keep. --render runs nothing: it draws
# and renders from the saved files only.
#
# Runs: tsi, tsi-breakdown, first-contact, sss, iput, sandbox-tsi,
# sandbox-dapc, dapc (TCP between network namespaces: scripts/netns.sh, as
# root), launch-hosts and launch-mpirun (Open MPI's mpirun with PMIx),
# slurm-launch (scripts/launch-bench.sh in a one-node Slurm cluster of its
# own, scripts/slurm-local.sh, as root), rank-scaling (scripts/rank-scaling.sh
# --slurm: 2-32 ranks here, 2-8 network-namespace hosts, srun; as root),
# and the MPI RMA runs (tc-bench's
# mode mpi: tc-mpi-rma under mpirun): mpi-tsi, mpi-sss, mpi-iput and
# mpi-dapc over shared memory, the same with -tcp over loopback TCP (tsi,
# sss and iput with --quick there: MPI's TCP paths are slow enough to make
# the full runs long), and mpi-dapc-netns across network namespaces (as
# root); kv, kv-tcp and kv-netns (tc-bench kv: tc-kv beside the MPI RMA
# and all-to-all versions at 2 and 4 ranks over shared memory, loopback
# TCP and across 4 network-namespace hosts, as root; --quick passes
# --quick to the first two). The GPU table's runs come from
# scripts/gpu-check.sh on a machine with a GPU (docs/bench/gpu-*: copied
# in, never run here).
# docs/benchmarks.md shows each run's time and their total. A run that fails
# stops the script (exit 1) and leaves the saved files of the runs before it.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
data=docs/bench
build=build
only=""
quick=""
render_only=0

die() { echo "bench-tables.sh: error: $*" >&2; exit 1; }
note() { echo "bench-tables.sh: $*" >&2; }

while (($#)); do
  case $1 in
    --render) render_only=1; shift ;;
    --quick) quick=--quick; shift ;;
    --only) [[ $# -ge 2 ]] || die "--only needs a list"; only=$2; shift 2 ;;
    --data) [[ $# -ge 2 ]] || die "--data needs a directory"; data=$2; shift 2 ;;
    --build) [[ $# -ge 2 ]] || die "--build needs a directory"; build=$2; shift 2 ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

readonly RUNS="tsi tsi-breakdown first-contact sss iput sandbox-tsi sandbox-dapc dapc launch-hosts launch-mpirun slurm-launch rank-scaling mpi-tsi mpi-tsi-tcp mpi-sss mpi-sss-tcp mpi-iput mpi-iput-tcp mpi-dapc mpi-dapc-tcp mpi-dapc-netns kv kv-tcp kv-netns"
# The runs scripts/plot.py draws (the others' figures are in these).
readonly PLOTS="tsi tsi-breakdown first-contact sss iput dapc"
for r in ${only//,/ }; do
  [[ " $RUNS " == *" $r "* ]] || die "unknown run '$r' in --only (expected one of: $RUNS)"
done
wanted() { [[ -z $only || ",$only," == *",$1,"* ]]; }

py=/usr/bin/python3
[[ -x $py ]] || die "$py not found (Debian's python3, with python3-matplotlib for the plots)"
mkdir -p "$data"

bench=$build/bin/tc-bench
# Servers started here (launch-hosts), stopped by PID on any exit.
pids=()
tmp=$(mktemp -d /tmp/tc-bench-tables.XXXXXX)
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Arguments "key value ..." as one JSON object of strings on stdout, by
# python (no quoting by hand).
json_object() {
  "$py" -c 'import json, sys; k = sys.argv[1::2]; v = sys.argv[2::2]; print(json.dumps(dict(zip(k, v)), indent=1))' "$@"
}

# run NAME SHOWN -- COMMAND...: runs COMMAND (its stdout the JSON), saves
# DIR/NAME.json, SHOWN (the command as a reader types it) as DIR/NAME.cmd
# and how it ran as DIR/NAME.run.
run() {
  local name=$1 shown=$2 load
  shift 3
  wanted "$name" || return 0
  note "$name: $shown"
  local t0=$SECONDS
  load=$(cut -d' ' -f1 /proc/loadavg)
  "$@" > "$tmp/$name.json" || die "$name: the run failed (exit $?): $shown"
  mv "$tmp/$name.json" "$data/$name.json"
  printf '%s\n' "$shown" > "$data/$name.cmd"
  json_object commit "$commit" load "$load" seconds "$((SECONDS - t0))" \
    > "$data/$name.run"
  note "$name: $((SECONDS - t0)) s"
}

# The commit the runs measure (tc-bench's build is assumed to be of it).
commit=$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo "?")
[[ -z $(git -C "$root" status --porcelain --untracked-files=no -- \
  ':!docs' 2>/dev/null) ]] || commit="$commit+changes"

machine() {
  local model os ucx llvm
  model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
  os=$(. /etc/os-release && echo "${PRETTY_NAME:-?}")
  ucx=$(ucx_info -v 2>/dev/null | sed -n 's/^# \(Library version:\|Version\) //p' | head -1)
  llvm=$(/usr/lib/llvm-22/bin/llvm-config --version 2>/dev/null || true)
  json_object arch "$(uname -m)" cpus "$(nproc)" cpu_model "$model" \
    os "$os" kernel "$(uname -r)" ucx "${ucx:-?}" llvm "${llvm:-?}" \
    > "$data/machine.json"
}

# launch-hosts: two running servers named in a hosts file, as one starts
# them by hand on a cluster.
launch_hosts() {
  local hosts=$tmp/hosts i f line
  : > "$hosts"
  for i in 0 1; do
    f=$tmp/server$i.out
    UCX_TLS=tcp UCX_NET_DEVICES=lo "$bench" serve --listen 127.0.0.1:0 --blocking > "$f" 2>&1 &
    pids+=($!)
    for _ in $(seq 600); do
      line=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$f" | head -1)
      [[ -n $line ]] && break
      kill -0 "${pids[-1]}" 2>/dev/null || die "launch-hosts: server $i ended: $(tail -1 "$f")"
      sleep 0.1
    done
    [[ -n $line ]] || die "launch-hosts: server $i did not listen within 60 s"
    echo "server $line" >> "$hosts"
  done
  local rc=0
  UCX_TLS=tcp UCX_NET_DEVICES=lo "$bench" dapc --hosts "$hosts" --servers 2 $LAUNCH_ARGS || rc=$?
  for i in "${pids[@]}"; do kill "$i" 2>/dev/null || true; done
  for i in "${pids[@]}"; do wait "$i" 2>/dev/null || true; done
  pids=()
  return $rc
}

# launch-mpirun: the same sweep, the servers ranks 1 and 2 of an mpirun job
# (a session directory of its own, wire-up on loopback; each rank's output
# in its own files, of which rank 0's stdout is the JSON).
launch_mpirun() {
  local d=$tmp/mpirun out
  mkdir -p "$d"
  UCX_TLS=tcp UCX_NET_DEVICES=lo TMPDIR=$d timeout -k 10 600 \
    mpirun --allow-run-as-root --oversubscribe --mca oob_tcp_if_include lo \
    --output-filename "$d/out" \
    -n 1 "$bench" dapc --pmix $LAUNCH_ARGS : -n 2 "$bench" serve --pmix --blocking >&2
  out=$(echo "$d"/out/*/rank.0/stdout)
  [[ -f $out ]] || die "launch-mpirun: rank 0 wrote no output"
  cat "$out"
}

# tc_bench NAME ARGS...: run NAME is `tc-bench ARGS --json`.
tc_bench() {
  local name=$1
  shift
  run "$name" "build/bin/tc-bench $* --json" -- "$bench" "$@" --json --quiet
}

# dapc_netns N ARGS: tc-bench dapc ARGS across N network-namespace hosts.
dapc_netns() {
  bash scripts/netns.sh run "$1" --prefix tcbt --subnet 10.197.0 \
    --hosts-file "$tmp/netns-hosts" -- \
    sh -c "\"$bench\" dapc --transport tcp --hosts \"\$TC_HOSTS_FILE\" $2"
}

# kv_netns N ARGS: tc-bench kv ARGS across N network-namespace hosts.
kv_netns() {
  bash scripts/netns.sh run "$1" --prefix tcbk --subnet 10.197.1 \
    --hosts-file "$tmp/netns-hosts" -- \
    sh -c "\"$bench\" kv --transport tcp --hosts \"\$TC_HOSTS_FILE\" $2"
}

# slurm-launch: scripts/launch-bench.sh in a Slurm cluster of its own
# (stopped after it, or by its watcher should this script be killed).
slurm_launch() {
  bash scripts/slurm-local.sh run --new --timeout 1200 -- \
    bash scripts/launch-bench.sh --build "$build" --dapc "${LAUNCH_ARGS% --json --quiet}"
}

readonly TSI_MODES=am,cached,cached-unbatched,mailbox,uncached,object,ucx_am,ucx_put,ucx_perftest
readonly DAPC_ARGS="--servers 1,2,4 --depths 1,64,4096 --entries 1048576 --count 10 --json --quiet"
readonly LAUNCH_ARGS="--transport tcp --depths 1,64,4096 --entries 1048576 --count 100 --modes dapc,am --json --quiet"
readonly SANDBOX_DAPC="--servers 1,2 --depths 64,4096 --entries 1048576 --count 30 --modes dapc,sandbox"
# MPI RMA (mode mpi). Over TCP tsi, sss and iput run --quick; the osc
# components are tc-bench's candidates for the transport.
readonly MPI_TSI="--modes cached,mailbox,mpi --rounds 3 --no-perftest"
readonly MPI_TSI_TCP="--transport tcp --quick --modes cached,mpi --no-perftest"
readonly MPI_SWEEP="--sizes 16,1024,16384 --rounds 3 --modes injected,mpi"
readonly MPI_SWEEP_TCP="--transport tcp --quick --sizes 16,1024,16384 --modes injected,mpi"
readonly MPI_DAPC="--servers 2 --depths 1,64,1024 --entries 1048576 --count 30 --modes dapc,mpi"
readonly MPI_DAPC_TCP="--transport tcp --servers 2 --depths 1,64,1024 --entries 1048576 --count 10 --modes dapc,mpi"
readonly MPI_DAPC_NETNS="--servers 1,2 --depths 64,256,1024 --entries 1048576 --count 10 --modes dapc,mpi"

if ((!render_only)); then
  [[ -x $bench ]] || die "$bench not found: build first (bash scripts/build.sh $build)"
  t_all=$SECONDS
  machine
  tc_bench tsi tsi --modes "$TSI_MODES" $quick
  tc_bench tsi-breakdown tsi --modes cached,cached-unbatched,mailbox,ucx_am,ucx_put \
    --rounds 3 --no-perftest --breakdown $quick
  tc_bench first-contact tsi --modes first-contact,stall $quick
  tc_bench sss sss $quick
  tc_bench iput iput $quick
  tc_bench sandbox-tsi tsi --modes cached,sandbox --rounds 5 --no-perftest $quick
  run sandbox-dapc "build/bin/tc-bench dapc $SANDBOX_DAPC --json" -- \
    "$bench" dapc $SANDBOX_DAPC --json --quiet
  for r in dapc mpi-dapc-netns slurm-launch rank-scaling kv-netns; do
    if wanted "$r"; then
      [[ $(id -u) == 0 ]] || die "$r: needs root (network namespaces, Slurm's daemons; or leave it out: --only)"
    fi
  done
  run dapc "scripts/netns.sh run 4 -- sh -c 'build/bin/tc-bench dapc --transport tcp --hosts \$TC_HOSTS_FILE ${DAPC_ARGS% --quiet}'" -- \
    dapc_netns 4 "$DAPC_ARGS"
  run launch-hosts "build/bin/tc-bench serve --listen 127.0.0.1:0 --blocking (twice, named in HOSTS); build/bin/tc-bench dapc --hosts HOSTS --servers 2 ${LAUNCH_ARGS% --quiet}" -- \
    launch_hosts
  run launch-mpirun "mpirun -n 1 build/bin/tc-bench dapc --pmix ${LAUNCH_ARGS% --quiet} : -n 2 build/bin/tc-bench serve --pmix --blocking" -- \
    launch_mpirun
  run slurm-launch "scripts/slurm-local.sh run --new -- bash scripts/launch-bench.sh --dapc '${LAUNCH_ARGS% --json --quiet}'" -- \
    slurm_launch
  run rank-scaling "scripts/rank-scaling.sh --slurm --json" -- \
    bash scripts/rank-scaling.sh --build "$build" --slurm --json
  tc_bench mpi-tsi tsi $MPI_TSI $quick
  tc_bench mpi-tsi-tcp tsi $MPI_TSI_TCP
  tc_bench mpi-sss sss $MPI_SWEEP $quick
  tc_bench mpi-sss-tcp sss $MPI_SWEEP_TCP
  tc_bench mpi-iput iput $MPI_SWEEP $quick
  tc_bench mpi-iput-tcp iput $MPI_SWEEP_TCP
  tc_bench mpi-dapc dapc $MPI_DAPC
  tc_bench mpi-dapc-tcp dapc $MPI_DAPC_TCP
  run mpi-dapc-netns "scripts/netns.sh run 2 -- sh -c 'build/bin/tc-bench dapc --transport tcp --hosts \$TC_HOSTS_FILE $MPI_DAPC_NETNS --json'" -- \
    dapc_netns 2 "$MPI_DAPC_NETNS --json --quiet"
  tc_bench kv kv $quick
  tc_bench kv-tcp kv --transport tcp $quick
  run kv-netns "scripts/netns.sh run 4 -- sh -c 'build/bin/tc-bench kv --transport tcp --hosts \$TC_HOSTS_FILE --json'" -- \
    kv_netns 4 "--json --quiet"
  note "all runs: $((SECONDS - t_all)) s"
fi

for p in $PLOTS; do
  [[ -f $data/$p.json ]] || continue
  rm -rf "$data/plots/$p"
  mkdir -p "$data/plots/$p"
  "$py" scripts/plot.py -o "$data/plots/$p" "$data/$p.json" > /dev/null ||
    die "plot.py failed on $data/$p.json"
done
"$py" scripts/bench-tables.py --data "$data" docs/benchmarks.md
note "docs/benchmarks.md: tables rendered from $data"
