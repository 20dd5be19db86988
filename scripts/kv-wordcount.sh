#!/usr/bin/env bash
# The word count of FILE... on a distributed hash table (docs/kv.md).
#
#   bash scripts/kv-wordcount.sh --ranks N [--mpi | --alltoall] [--hosts H]
#       [--slurm] [--build DIR] [--timeout S] FILE...
#
# Prints every distinct word once as `COUNT WORD`, sorted by count (largest
# first), then by word. A word is a maximal run of ASCII letters and digits,
# lowercased; every other byte (and the end of a file) separates words.
#
# The job has N ranks; each owns a shard of the table and reads its slice
# of the files:
#   (default)   tc-kv: words go to their owner in batches, as kv_upsert
#               ifuncs that run there;
#   --mpi       tc-mpi-kv --mode rma: the table in MPI windows, updated with
#               one-sided operations (compare-and-swap, fetch-and-op, gets);
#   --alltoall  tc-mpi-kv --mode alltoall: the MPI_Alltoallv shuffle.
# Where it runs:
#   (default)   mpirun on this host, over shared memory;
#   --hosts H   mpirun across H network-namespace test hosts
#               (scripts/netns.sh, removed afterwards; mpirun starts its
#               daemons there through scripts/netns-rsh.sh), over TCP; the
#               ranks are spread over the hosts; as root;
#   --slurm     srun --mpi=pmix in a one-node Slurm cluster of its own
#               (scripts/slurm-local.sh run --new), over shared memory; as
#               root.
# The MPI versions run with a one-sided component that works there (osc sm
# on one host, pt2pt over TCP between hosts). The job is bounded by
# --timeout (default 300 s). A failure is one line,
# `kv-wordcount.sh: error: ...` (the job's own error line when it has one),
# and exit status 1.
set -uo pipefail

prog=kv-wordcount.sh
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "$prog: error: $*" >&2; exit 1; }

build=$here/../build ranks="" mode=tc hosts=0 slurm=0 timeout=300
files=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --ranks | --hosts | --build | --timeout)
      [[ $# -ge 2 ]] || die "missing value after $1"
      case $1 in
        --ranks) ranks=$2 ;;
        --hosts) hosts=$2 ;;
        --build) build=$2 ;;
        --timeout) timeout=$2 ;;
      esac
      shift 2 ;;
    --mpi | --alltoall)
      [[ $mode == tc || $mode == "${1#--}" ]] || die "--mpi and --alltoall exclude each other"
      mode=${1#--}
      shift ;;
    --slurm) slurm=1; shift ;;
    -h | --help) sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    --) shift; files+=("$@"); break ;;
    -*) die "unknown argument '$1' (try --help)" ;;
    *) files+=("$1"); shift ;;
  esac
done
[[ -n $ranks ]] || die "--ranks N is required (try --help)"
[[ $ranks =~ ^[1-9][0-9]*$ ]] || die "--ranks: '$ranks' is not a positive number"
[[ $hosts =~ ^[0-9]+$ ]] || die "--hosts: '$hosts' is not a number"
[[ $timeout =~ ^[1-9][0-9]*$ ]] || die "--timeout: '$timeout' is not a positive number"
((${#files[@]})) || die "no input files (try --help)"
((hosts && slurm)) && die "--hosts and --slurm exclude each other (the Slurm cluster has one node)"
((hosts > ranks)) && die "--hosts $hosts is more than the $ranks ranks"

# The files, checked here (one line, before anything starts) and made
# absolute (the ranks may start elsewhere).
abs=()
for f in "${files[@]}"; do
  [[ -e $f ]] || die "cannot open '$f': No such file or directory"
  [[ -f $f ]] || die "'$f' is not a regular file"
  [[ -r $f ]] || die "cannot open '$f': Permission denied"
  abs+=("$(cd "$(dirname "$f")" && pwd)/$(basename "$f")")
done

bin=$(cd "$build" 2>/dev/null && pwd)/bin
case $mode in
  tc)
    prog_args=("$bin/tc-kv")
    # More ranks than CPUs (namespace hosts share this machine's): ranks
    # sleep in barriers rather than spin.
    ((ranks > $(nproc))) && prog_args+=(--idle wait) ;;
  mpi) prog_args=("$bin/tc-mpi-kv" --mode rma) ;;
  alltoall) prog_args=("$bin/tc-mpi-kv" --mode alltoall) ;;
esac
[[ -x ${prog_args[0]} ]] ||
  die "${prog_args[0]} not found (build first; tc-kv needs PMIx, tc-mpi-kv MPI)"
if ((slurm)); then
  command -v srun >/dev/null || die "srun not found (scripts/setup.sh installs Slurm)"
else
  command -v mpirun >/dev/null || die "mpirun not found (package openmpi-bin)"
fi
if ((hosts || slurm)) && [[ $(id -u) != 0 ]]; then
  die "--hosts and --slurm need root (network namespaces, Slurm's daemons)"
fi

work=$(mktemp -d /tmp/tc-kv-wordcount.XXXXXX) || die "no temporary directory"
prefix=tckw
cleanup() {
  ((hosts)) && bash "$here/netns.sh" down --prefix "$prefix" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
out=$work/counts

# The first line worth showing of a failed job: a rank's own error line,
# else the first line of text (mpirun's, srun's, the script's).
fail() {
  local line
  line=$(grep -m1 -E '^tc-(mpi-)?kv: rank [0-9]+: error: ' "$work/log")
  [[ -n $line ]] || line=$(grep -m1 -E '[[:alnum:]]' "$work/log")
  die "${line:-the job failed with no output (exit $1)}"
}

# MCA settings for the MPI versions (environment: srun passes it on).
mpi_env=()
if [[ $mode != tc ]]; then
  if ((hosts)); then
    # TCP even between ranks of one host: netns-rsh.sh leaves every host
    # this machine's name, and Open MPI's shared-memory BTL (vader) then
    # pairs ranks of different hosts and crashes.
    mpi_env=(OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,tcp OMPI_MCA_osc=pt2pt)
  else
    mpi_env=(OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_osc=sm)
  fi
fi

rc=0
if ((slurm)); then
  cpus=8
  ((ranks > cpus)) && cpus=$ranks
  printf '%q ' env UCX_TLS=posix,self "${mpi_env[@]}" timeout -k 10 "$timeout" \
    srun --mpi=pmix -n "$ranks" "${prog_args[@]}" --output "$out" "${abs[@]}" \
    > "$work/job.sh"
  bash "$here/slurm-local.sh" run --new --cpus "$cpus" --timeout $((timeout + 60)) -- \
    bash "$work/job.sh" > "$work/log" 2>&1 || rc=$?
elif ((hosts)); then
  subnet=10.199.41
  bash "$here/netns.sh" down --prefix "$prefix" >/dev/null 2>&1
  bash "$here/netns.sh" up "$hosts" --prefix "$prefix" --subnet "$subnet" \
    --hosts-file "$work/netns-hosts" > "$work/log" 2>&1 || fail $?
  per=$(((ranks + hosts - 1) / hosts))
  for ((i = 0; i < hosts; ++i)); do echo "${prefix}ns$i slots=$per"; done > "$work/hostfile"
  env_args=(-x UCX_TLS=tcp -x UCX_NET_DEVICES=eth0)
  for e in "${mpi_env[@]}"; do env_args+=(-x "$e"); done
  btl=()
  [[ $mode != tc ]] && btl=(--mca btl_tcp_if_include "$subnet.0/24")
  TMPDIR=$work timeout -k 10 "$timeout" mpirun --allow-run-as-root --oversubscribe \
    --hostfile "$work/hostfile" --mca plm_rsh_agent "$here/netns-rsh.sh" \
    --mca oob_tcp_if_include "$subnet.0/24" "${btl[@]}" "${env_args[@]}" \
    -n "$ranks" "${prog_args[@]}" --output "$out" "${abs[@]}" > "$work/log" 2>&1 || rc=$?
else
  root=()
  [[ $(id -u) == 0 ]] && root=(--allow-run-as-root)
  env_args=(-x UCX_TLS=posix,self)
  for e in "${mpi_env[@]}"; do env_args+=(-x "$e"); done
  TMPDIR=$work timeout -k 10 "$timeout" mpirun "${root[@]}" --oversubscribe \
    --mca oob_tcp_if_include lo "${env_args[@]}" \
    -n "$ranks" "${prog_args[@]}" --output "$out" "${abs[@]}" > "$work/log" 2>&1 || rc=$?
fi
((rc == 124 || rc == 137)) && die "the job did not end within $timeout s"
((rc == 0)) || fail "$rc"
[[ -f $out ]] || fail "$rc"
cat "$out"
