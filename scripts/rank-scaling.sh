#!/usr/bin/env bash
# What a rank of a tc job costs as the job grows: one command, one table.
#
#   scripts/rank-scaling.sh [--build DIR] [--ranks "2 4 8 16 32"]
#       [--hosts "2 4 8"] [--host-ranks N] [--messages M] [--chases C]
#       [--depth D] [--host-chases C] [--timeout S] [--no-netns] [--slurm]
#       [--json]
#
# Runs the TSI all-to-all (tc-mpi-tsi: every rank sends M messages to every
# other rank and checks its count) and the DAPC chase (tc-mpi-chase
# --report: C chases of depth D from rank 0) under mpirun
#   - on this host, at each rank count of --ranks, over shared memory
#     (UCX_TLS=posix,self: mailboxes);
#   - across network-namespace test hosts (scripts/netns.sh), --host-ranks
#     ranks (default 16) spread over each host count of --hosts, over TCP
#     (UCX_TLS=tcp, UCX_NET_DEVICES=eth0), with --host-chases chases (default
#     300): mpirun starts its daemon in each namespace through
#     scripts/netns-rsh.sh (its plm_rsh_agent) and talks to them over the
#     namespaces' bridge;
#   - with --slurm, the all-to-all again under srun --mpi=pmix in a one-node
#     Slurm cluster (scripts/slurm-local.sh), at each rank count of --ranks.
# Each program's rank 0 gathers every rank's figures (examples/mpi-chase/
# rank_report.h); the table shows, per run, the median over the ranks and
# for some figures the maximum:
#   wireup   tc_worker_create with the PMIx bootstrap: publish + fence (ms)
#   barrier  one job-wide barrier afterwards, a PMIx fence without data (ms)
#   connect  endpoints to every peer, each flushed once (ms)
#   work     the all-to-all (send, flush, barrier) or the chases (ms)
#   wall     the whole mpirun or srun, start to exit (s)
#   RSS, PSS, Private_Dirty  /proc/PID/smaps_rollup at the end of the work (MiB)
#   registered  what the worker registered for mailboxes (KiB), areas: how
#            many large-frame areas (none unless a large frame was sent)
# --json prints the table as one JSON object instead (columns, rows of
# cells as shown, the note under it), which scripts/bench-tables.sh saves.
# A run that fails prints its row as FAILED and the script exits 1 at the
# end. Every run is bounded by --timeout (default 180 s; mpirun or srun is
# ended, its ranks with it); namespaces and clusters are removed on exit.
# Needs root (mpirun as root, namespaces, Slurm), Open MPI with PMIx, and a
# build with TC_WITH_PMIX (build/bin/tc-mpi-tsi).
set -uo pipefail

prog=rank-scaling.sh
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "$prog: error: $*" >&2; exit 1; }
note() { echo "$prog: $*" >&2; }

build=$here/../build ranks="2 4 8 16 32" hosts="2 4 8" host_ranks=16
messages=100 chases=3000 depth=256 host_chases=300 timeout=180
netns=1 slurm=0 json=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --build | --ranks | --hosts | --host-ranks | --messages | --chases | \
    --depth | --host-chases | --timeout)
      [[ $# -ge 2 ]] || die "missing value after $1"
      v=$2
      case $1 in
        --build) build=$v ;;
        --ranks) ranks=$v ;;
        --hosts) hosts=$v ;;
        --host-ranks) host_ranks=$v ;;
        --messages) messages=$v ;;
        --chases) chases=$v ;;
        --depth) depth=$v ;;
        --host-chases) host_chases=$v ;;
        --timeout) timeout=$v ;;
      esac
      shift 2 ;;
    --no-netns) netns=0; shift ;;
    --slurm) slurm=1; shift ;;
    --json) json=1; shift ;;
    -h | --help) sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (try --help)" ;;
  esac
done
for n in $ranks $hosts $host_ranks $messages $chases $depth $host_chases $timeout; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "'$n' is not a positive number"
done
bin=$(cd "$build" 2>/dev/null && pwd)/bin
[[ -x $bin/tc-mpi-tsi && -x $bin/tc-mpi-chase ]] ||
  die "no tc-mpi-tsi and tc-mpi-chase in $build/bin (build with PMIx first)"
command -v mpirun >/dev/null || die "mpirun not found (package openmpi-bin)"
[[ $(id -u) == 0 ]] || die "run as root (mpirun as root, namespaces)"

work=$(mktemp -d /tmp/tc-rank-scaling.XXXXXX) || die "no temporary directory"
prefix=tcrs
cleanup() {
  ((netns)) && bash "$here/netns.sh" down --prefix "$prefix" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

failed=0
rows=()
# One run's row: WHERE PROGRAM RANKS HOSTS WALL OUTPUT_FILE (rank 0's stdout).
row() {
  local where=$1 what=$2 n=$3 h=$4 wall=$5 out=$6 tag
  tag=tc-mpi-${what%% *}
  if ! grep -q ": ok$" "$out"; then
    rows+=("| $where | $what | $n | $h | FAILED ($(grep -m1 'error' "$out" | cut -c1-60)) |||||||||")
    # The whole story on stderr: the launcher's and every rank's lines.
    note "$where, $what, $n ranks failed; its output:"
    sed 's/^/  | /' "$out" >&2
    failed=1
    return
  fi
  # "TAG: N ranks: COLUMN min A median B max C" -> B (or C).
  med() { awk -v t="$tag:" -v c="$1" '$1 == t && $3 == "ranks:" && $4 == c {print $8}' "$out"; }
  max() { awk -v t="$tag:" -v c="$1" '$1 == t && $3 == "ranks:" && $4 == c {print $10}' "$out"; }
  mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }
  rows+=("| $where | $what | $n | $h | $wall | $(printf '%.0f / %.0f' "$(med wireup_ms)" "$(max wireup_ms)") | $(printf '%.2f' "$(med barrier_ms)") | $(printf '%.0f / %.0f' "$(med connect_ms)" "$(max connect_ms)") | $(printf '%.0f' "$(med work_ms)") | $(mib "$(med rss_kib)") | $(mib "$(med pss_kib)") | $(mib "$(med private_dirty_kib)") / $(mib "$(max private_dirty_kib)") | $(awk -v b="$(med registered_bytes)" 'BEGIN {printf "%.0f", b / 1024}') | $(max areas) |")
}

# mpirun as the tests run it: as root, oversubscribed, a session directory
# of its own, bounded.
run_mpirun() {
  local out=$1
  shift
  local d
  d=$(mktemp -d "$work/ompi.XXXXXX")
  TMPDIR=$d timeout -k 10 "$timeout" mpirun --allow-run-as-root \
    --oversubscribe "$@" > "$out" 2>&1
}

seconds() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}'; }
now() { date +%s.%N; }

# --- This host, shared memory -------------------------------------------
for n in $ranks; do
  for what in "tsi" "chase"; do
    out=$work/host.$what.$n
    note "this host: $n ranks, $what"
    t0=$(now)
    if [[ $what == tsi ]]; then
      run_mpirun "$out" --mca oob_tcp_if_include lo -x UCX_TLS=posix,self \
        -n "$n" "$bin/tc-mpi-tsi" --messages "$messages"
    else
      run_mpirun "$out" --mca oob_tcp_if_include lo -x UCX_TLS=posix,self \
        -n "$n" "$bin/tc-mpi-chase" --chases "$chases" --depth "$depth" \
        --entries 65536 --report --timeout 60000
    fi
    row "this host, shm" "${what/chase/chase $chases x $depth}" "$n" 1 "$(seconds "$t0" "$(now)")" "$out"
  done
done

# --- Network-namespace hosts, TCP ----------------------------------------
if ((netns)); then
  for h in $hosts; do
    note "$h namespace hosts: $host_ranks ranks"
    bash "$here/netns.sh" down --prefix "$prefix" >/dev/null 2>&1
    if ! bash "$here/netns.sh" up "$h" --prefix "$prefix" --subnet 10.198.9 \
      --hosts-file "$work/hosts.txt" >"$work/netns.log" 2>&1; then
      rows+=("| $h netns hosts, tcp | - | $host_ranks | $h | FAILED (netns.sh up: $(tail -1 "$work/netns.log" | cut -c1-60)) |||||||||")
      failed=1
      continue
    fi
    per=$(((host_ranks + h - 1) / h))
    : > "$work/hostfile"
    for ((i = 0; i < h; ++i)); do echo "${prefix}ns$i slots=$per" >> "$work/hostfile"; done
    for what in "tsi" "chase"; do
      out=$work/netns.$what.$h
      t0=$(now)
      args=(--hostfile "$work/hostfile" --mca plm_rsh_agent "$here/netns-rsh.sh"
            --mca oob_tcp_if_include 10.198.9.0/24 -x UCX_TLS=tcp
            -x UCX_NET_DEVICES=eth0 -n "$host_ranks")
      if [[ $what == tsi ]]; then
        run_mpirun "$out" "${args[@]}" "$bin/tc-mpi-tsi" --messages "$messages"
      else
        run_mpirun "$out" "${args[@]}" "$bin/tc-mpi-chase" --chases "$host_chases" \
          --depth "$depth" --entries 65536 --report --timeout 60000
      fi
      row "$h netns hosts, tcp" "${what/chase/chase $host_chases x $depth}" "$host_ranks" "$h" "$(seconds "$t0" "$(now)")" "$out"
    done
    bash "$here/netns.sh" down --prefix "$prefix" >/dev/null 2>&1
  done
fi

# --- Slurm, one node -------------------------------------------------------
if ((slurm)); then
  note "Slurm: the all-to-all at $ranks ranks"
  max_n=0
  for n in $ranks; do ((n > max_n)) && max_n=$n; done
  # One cluster for all of them; each srun bounded by --time-limit's own
  # timeout below.
  script=$work/slurm-runs.sh
  {
    echo 'set -u'
    for n in $ranks; do
      echo "t0=\$(date +%s.%N)"
      echo "UCX_TLS=posix,self timeout -k 10 $timeout srun --mpi=pmix -n $n $bin/tc-mpi-tsi --messages $messages > $work/slurm.tsi.$n 2>&1"
      echo "echo \"\$t0 \$(date +%s.%N)\" > $work/slurm.time.$n"
    done
  } > "$script"
  bash "$here/slurm-local.sh" run --new --cpus "$max_n" \
    --timeout $((timeout * $(wc -w <<<"$ranks") + 60)) -- bash "$script" \
    > "$work/slurm.log" 2>&1
  for n in $ranks; do
    read -r a b < "$work/slurm.time.$n" 2>/dev/null || { a=0 b=0; }
    [[ -f $work/slurm.tsi.$n ]] || echo "error: $(tail -1 "$work/slurm.log")" > "$work/slurm.tsi.$n"
    row "this host, srun, shm" tsi "$n" 1 "$(seconds "$a" "$b")" "$work/slurm.tsi.$n"
  done
fi

header="| where | program | ranks | hosts | wall s | wireup ms (median / max) | barrier ms | connect ms (median / max) | work ms | RSS MiB | PSS MiB | Private_Dirty MiB (median / max) | registered KiB | areas |"
note_line="tsi: $messages messages from every rank to each other rank; chase: C chases of depth $depth from rank 0 over 65,536 entries; figures are medians over the ranks (max where shown)."
if ((json)); then
  # The markdown rows, split into cells (a FAILED row keeps its empty ones).
  printf '%s\n' "$header" "${rows[@]}" | python3 -c '
import json, sys
cells = lambda l: [c.strip() for c in l.strip()[1:-1].split("|")]
lines = sys.stdin.read().splitlines()
print(json.dumps({"columns": cells(lines[0]), "rows": [cells(l) for l in lines[1:]],
                  "note": sys.argv[1]}, indent=1))' "$note_line" || die "cannot write JSON"
else
  echo "$header"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "$note_line"
fi
exit $failed
