#!/usr/bin/env bash
# What launching a tc job costs under Slurm's srun, next to Open MPI's
# mpirun, on one node. Runs where srun reaches a Slurm cluster (SLURM_CONF),
# e.g. in one of scripts/slurm-local.sh (as root):
#
#   scripts/slurm-local.sh run --new -- bash scripts/launch-bench.sh [OPTIONS]
#
# Options: --ranks LIST (default 2,4,8,16), --jobs N (5), --build DIR (the
# repository's build), --dapc ARGS | --no-dapc, --keep DIR, --timeout S.
#
# For each rank count N (--ranks), --jobs times, the two launchers one after
# the other (which goes first alternates):
#
#   mpirun -n N tc-mpi-chase -v --barriers 100 --chases 20
#   srun --mpi=pmix -n N --overcommit tc-mpi-chase -v --barriers 100 --chases 20
#
# (mpirun as the tests run it: --allow-run-as-root --oversubscribe, its
# wire-up on loopback, a TMPDIR of its own; UCX_TLS=posix,self,tcp unless
# set), each rank's output in files of its own. Each job is timed from the
# launcher's start to its exit; each rank prints how long its
# tc_worker_create took (publishing its UCX address and the PMIx fence that
# hands every rank all addresses), rank 0 the mean of 100 data-less fences
# and its 20 chases of depth 64, and its ok line. Then, unless --no-dapc,
# the DAPC sweep with tc-bench dapc --pmix as rank 0 and two tc-bench serve
# --pmix --blocking as ranks 1 and 2, under each launcher (srun with
# --multi-prog), over TCP on loopback; --dapc ARGS replaces the sweep's
# arguments (default: --transport tcp --depths 1,64,4096 --entries 1048576
# --count 100 --modes dapc,am).
#
# Prints one JSON array on stdout (scripts/launch-json.py: medians over the
# jobs, paired srun/mpirun ratios, tc-bench's dapc records with the
# launcher); --keep DIR keeps every job's output there. Every job is bounded
# (--timeout S, default 120; KILL 10 s after TERM). A job that fails, or
# says less than it should, stops the script with one line
# `launch-bench.sh: error: ...` and exit 1.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
prog=launch-bench.sh
ranks_list=2,4,8,16
jobs=5
build=$root/build
timeout_s=120
dapc_args="--transport tcp --depths 1,64,4096 --entries 1048576 --count 100 --modes dapc,am"
no_dapc=0
keep=""

die() { echo "$prog: error: $*" >&2; exit 1; }
note() { echo "$prog: $*" >&2; }
posint() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "bad $1 '$2'"; }

while (($#)); do
  case $1 in
    --ranks) [[ $# -ge 2 && $2 =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
        die "bad --ranks '${2:-}' (a list such as 2,4,8)"
      ranks_list=$2; shift 2 ;;
    --jobs) posint "$1" "${2:-}"; jobs=$2; shift 2 ;;
    --timeout) posint "$1" "${2:-}"; timeout_s=$2; shift 2 ;;
    --build) [[ $# -ge 2 ]] || die "--build needs a directory"; build=$2; shift 2 ;;
    --dapc) [[ $# -ge 2 ]] || die "--dapc needs arguments"; dapc_args=$2; shift 2 ;;
    --no-dapc) no_dapc=1; shift ;;
    --keep) [[ $# -ge 2 ]] || die "--keep needs a directory"; keep=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (try --help)" ;;
  esac
done

bin=$(cd "$build/bin" 2>/dev/null && pwd) || die "$build/bin not found: build first (bash scripts/build.sh $build)"
for t in tc-mpi-chase tc-bench; do
  [[ -x $bin/$t ]] || die "$bin/$t not found (tc-mpi-chase is built with PMIx: libpmix-dev)"
done
for t in mpirun srun sinfo; do
  command -v "$t" >/dev/null || die "$t not found (scripts/setup.sh installs Open MPI and Slurm)"
done
timeout 10 sinfo -h -o %T >/dev/null 2>&1 ||
  die "no Slurm cluster answers sinfo (run under: scripts/slurm-local.sh run -- bash scripts/$prog)"

if [[ -n $keep ]]; then
  [[ ! -e $keep || -z $(ls -A "$keep" 2>/dev/null) ]] || die "--keep: $keep is not empty"
  mkdir -p "$keep" || die "cannot make $keep"
  work=$(cd "$keep" && pwd)
else
  work=$(mktemp -d /tmp/tc-launch-bench.XXXXXX) || die "cannot make a directory in /tmp"
fi
out=$work/jobs
mkdir -p "$out"
job_pid=""
cleanup() {
  if [[ -n $job_pid ]]; then
    kill -TERM "$job_pid" 2>/dev/null
    wait "$job_pid" 2>/dev/null
  fi
  [[ -n $keep ]] || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# now_ms: bash's clock, in ms (no process started).
now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }

# launch DIR NAME CMD...: CMD bounded in time, in the background (so that a
# signal to this script is acted on at once); its output in DIR/launcher.*,
# its time in DIR/wall_ms. Dies with the first error line when it fails.
launch() {
  local d=$1 name=$2 t0 rc line
  shift 2
  t0=$(now_ms)
  timeout -k 10 "$timeout_s" "$@" >"$d/launcher.out" 2>"$d/launcher.err" &
  job_pid=$!
  wait "$job_pid"
  rc=$?
  job_pid=""
  echo $(($(now_ms) - t0)) >"$d/wall_ms"
  if ((rc != 0)); then
    line=$(cat "$d"/rank.*.err "$d/launcher.err" 2>/dev/null | grep -m1 -i 'error') ||
      line=$(grep -m1 . "$d/launcher.err" 2>/dev/null) || line="no error output"
    ((rc == 124 || rc == 137)) && line="did not end within $timeout_s s"
    die "$name: exit $rc: $line"
  fi
}

# mpirun's output per rank (--output-filename D: D/1/rank.R/std{out,err},
# R zero-padded to the width of the largest rank) as D/rank.R.{out,err},
# the layout srun writes.
flatten_mpirun() {
  local d=$1 r f
  for f in "$d"/mpirun/*/rank.*; do
    [[ -d $f ]] || continue
    r=$((10#${f##*/rank.}))
    [[ -f $f/stdout ]] && mv "$f/stdout" "$d/rank.$r.out"
    [[ -f $f/stderr ]] && mv "$f/stderr" "$d/rank.$r.err"
  done
  rm -rf "$d/mpirun"
}

mpirun_args=(--oversubscribe --mca oob_tcp_if_include lo)
((EUID == 0)) && mpirun_args=(--allow-run-as-root "${mpirun_args[@]}")
chase_args=(-v --barriers 100 --chases 20 --depth 64)

run_mpirun() { # DIR NAME ARGS...
  local d=$1 name=$2
  shift 2
  mkdir -p "$d/tmp"
  TMPDIR=$d/tmp launch "$d" "$name" mpirun "${mpirun_args[@]}" \
    --output-filename "$d/mpirun" "$@"
  flatten_mpirun "$d"
  rm -rf "$d/tmp"
}

chase() { # LAUNCHER N J
  local d=$out/chase-$1-$2-$3
  mkdir -p "$d"
  if [[ $1 == mpirun ]]; then
    run_mpirun "$d" "mpirun -n $2 tc-mpi-chase (job $3)" -n "$2" \
      "$bin/tc-mpi-chase" "${chase_args[@]}"
  else
    launch "$d" "srun -n $2 tc-mpi-chase (job $3)" srun --mpi=pmix -n "$2" \
      --overcommit --output="$d/rank.%t.out" --error="$d/rank.%t.err" \
      "$bin/tc-mpi-chase" "${chase_args[@]}"
  fi
}

export UCX_TLS=${UCX_TLS:-posix,self,tcp}
t_all=$SECONDS
IFS=, read -r -a ranks <<<"$ranks_list"
for n in "${ranks[@]}"; do
  for ((j = 1; j <= jobs; ++j)); do
    if ((j % 2)); then
      chase mpirun "$n" "$j"; chase srun "$n" "$j"
    else
      chase srun "$n" "$j"; chase mpirun "$n" "$j"
    fi
  done
  note "tc-mpi-chase over $n ranks: $jobs jobs under each launcher ($((SECONDS - t_all)) s so far)"
done

if ((!no_dapc)); then
  # shellcheck disable=SC2206 # the sweep's arguments, split as given
  dargs=($dapc_args --json --quiet)
  d=$out/dapc-mpirun
  mkdir -p "$d"
  UCX_TLS=tcp UCX_NET_DEVICES=lo run_mpirun "$d" "mpirun tc-bench dapc" \
    -n 1 "$bin/tc-bench" dapc --pmix "${dargs[@]}" : \
    -n 2 "$bin/tc-bench" serve --pmix --blocking
  d=$out/dapc-srun
  mkdir -p "$d"
  {
    echo "0 $bin/tc-bench dapc --pmix ${dargs[*]}"
    echo "1-2 $bin/tc-bench serve --pmix --blocking"
  } >"$work/dapc.conf"
  UCX_TLS=tcp UCX_NET_DEVICES=lo launch "$d" "srun tc-bench dapc" \
    srun --mpi=pmix -n 3 --overcommit --multi-prog \
    --output="$d/rank.%t.out" --error="$d/rank.%t.err" "$work/dapc.conf"
  note "tc-bench dapc under each launcher ($((SECONDS - t_all)) s so far)"
fi

/usr/bin/python3 "$root/scripts/launch-json.py" "$out" || exit 1
