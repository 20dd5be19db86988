#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for running tc jobs under srun:
#
#   scripts/slurm-local.sh up      [OPTIONS]      start it (or find it running)
#   scripts/slurm-local.sh down    [--dir DIR]    stop it and remove its directory
#   scripts/slurm-local.sh status  [--dir DIR]    exit 0 if it is up
#   scripts/slurm-local.sh check                  are the packages there? (starts nothing)
#   scripts/slurm-local.sh run [OPTIONS] [--new|--keep] [--timeout S] -- CMD [ARGS...]
#
# `up` starts munged, slurmctld and slurmd from a configuration it writes into
# one directory (DIR, default /tmp/tc-slurm-local, or $TC_SLURM_DIR), waits
# until the node is idle and prints `export SLURM_CONF=DIR/slurm.conf` on
# stdout (so `eval "$(scripts/slurm-local.sh up)"` points srun, sinfo, ... at
# it). `run` runs CMD with SLURM_CONF set: in the cluster at DIR if that one
# is up (and leaves it up), otherwise in one it starts for CMD alone (at DIR
# with --dir or --keep, else in a fresh /tmp/tc-slurm.XXXXXX) and stops when
# CMD ends, unless --keep; with --new always in one of its own, in a fresh
# directory (the tests do that). Its exit status is CMD's.
#
# Everything of one cluster lives in its directory: slurm.conf, munge's key,
# socket, pid and seed files, slurmctld's state, slurmd's spool, TmpFS and
# the logs (DIR/log). The daemons listen on ports of their own (--port P:
# slurmctld P, slurmd P+1; default a free pair in 20000-29999), so a
# system-wide Slurm or munge, or another cluster of this script, is never
# touched: the script ends only the processes it started, by PID, after
# checking that each one's command line names DIR (slurmstepd: that it is a
# slurmstepd whose working directory is DIR).
#
# Plugins: proctrack/linuxproc (tracks a job's processes through the process
# tree in /proc) and task/none (no binding), so no cgroup is needed and no
# cgroup.conf is read: the other choices, proctrack/cgroup and task/cgroup,
# need a writable cgroup hierarchy this script would have to share with the
# system's; proctrack/pgid loses processes that start their own process
# group. select/cons_tres with CR_CPU. The node declares --cpus N CPUs
# (default 8, or the real count if larger; SlurmdParameters=config_overrides
# accepts more than the hardware has), so a job with more ranks than cores
# starts without --overcommit, as mpirun --oversubscribe does. Runs as root
# (slurmd starts tasks as the job's user).
#
# Every wait is bounded (--idle-timeout, default 60 s, for the node to become
# idle; stopping takes about a minute at most); a failure is one line
# `slurm-local.sh: error: ...` on stderr and exit status 1.
set -uo pipefail

prog=slurm-local.sh
self=$(readlink -f "$0")
plugin_dir_hint=/usr/lib/x86_64-linux-gnu/slurm-wlm

err() { echo "$prog: error: $*" >&2; }
die() { err "$*"; exit 1; }
note() { ((verbose)) && echo "$prog: $*" >&2; return 0; }

usage() {
  sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//;p}' "$self"
  cat <<'EOF'
Options:
  --dir DIR            the cluster's directory (default $TC_SLURM_DIR or /tmp/tc-slurm-local)
  --cpus N             CPUs the node declares (default max(8, cores))
  --port P             slurmctld on port P, slurmd on P+1 (default: a free pair)
  --idle-timeout S     seconds to wait for the node to become idle (default 60)
  --keep               run: leave the cluster running afterwards (at DIR)
  --new                run: a cluster of its own even if one is up at DIR
  --timeout S          run: end CMD (TERM, KILL 10 s later) after S seconds
  -v                   say what is done and how long it took
EOF
}

# ---- options ---------------------------------------------------------------
verb=${1:-}
[[ -n "$verb" ]] || { usage >&2; exit 1; }
shift
dir=""
cpus=""
port=""
idle_timeout=60
keep=0
new=0
cmd_timeout=""
verbose=0
case "$verb" in
  -h | --help | help) usage; exit 0 ;;
  up | down | status | check | run | _reap) ;;
  *) die "unknown command '$verb' (up, down, status, check, run; --help)" ;;
esac
posint() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "bad $1 '$2'"; }
while (($#)); do
  case "$1" in
    --dir) (($# > 1)) || die "--dir needs a value"; dir=$2; shift 2 ;;
    --cpus) posint "$1" "${2:-}"; cpus=$2; shift 2 ;;
    --port) posint "$1" "${2:-}"; port=$2; shift 2
      ((port >= 1024 && port < 65535)) || die "bad --port '$port' (1024-65534)" ;;
    --idle-timeout) posint "$1" "${2:-}"; idle_timeout=$2; shift 2 ;;
    --timeout) posint "$1" "${2:-}"; cmd_timeout=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --new) new=1; shift ;;
    -v) verbose=1; shift ;;
    --) shift; break ;;
    *) die "unknown argument '$1' (try --help)" ;;
  esac
done
if [[ "$verb" == run ]]; then
  (($#)) || die "run: no command (run [OPTIONS] -- CMD [ARGS...])"
elif [[ "$verb" != _reap ]] && (($#)); then
  die "unexpected argument '$1' (try --help)"
fi
if [[ "$verb" != run ]] && ((keep || new)) || [[ "$verb" != run && -n "$cmd_timeout" ]]; then
  die "--keep, --new and --timeout go with run"
fi
((keep && new)) && die "--keep or --new, not both"
default_dir=${TC_SLURM_DIR:-/tmp/tc-slurm-local}
named_dir=0
[[ -n "$dir" ]] && named_dir=1
dir=${dir:-$default_dir}
[[ "$dir" == /* ]] || dir="$PWD/$dir"
dir=${dir%/}
[[ -n "$dir" && "$dir" != / ]] || die "bad --dir"

# ---- processes -------------------------------------------------------------
# alive PID: the process exists and is not a zombie.
alive() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) }
  [[ "${s%% *}" != Z ]]
}
# starttime PID: when PID started (clock ticks since boot), which tells it
# from a later process that got the same PID.
starttime() {
  local s f
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  read -r -a f <<<"${s##*) }"
  echo "${f[19]}"
}
# cmdline_has PID TEXT: PID's command line contains TEXT.
cmdline_has() {
  local c
  c=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null) || return 1
  [[ "$c" == *"$2"* ]]
}
# ours D NAME: the PID of daemon NAME of the cluster at D, if it runs.
ours() {
  local pid
  pid=$(cat "$1/pid.$2" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] && alive "$pid" && cmdline_has "$pid" "$1/" &&
    echo "$pid"
}
# The slurmstepd processes of the cluster at D (they run in slurmd's
# working directory, D).
stepds() {
  local p
  for p in /proc/[0-9]*; do
    [[ "$(cat "$p/comm" 2>/dev/null)" == slurmstepd ]] || continue
    [[ "$(readlink "$p/cwd" 2>/dev/null)" == "$1" ]] && echo "${p#/proc/}"
  done
}
# stop_pids SECONDS PID...: TERM, then KILL those still there after SECONDS.
stop_pids() {
  local t=$1 p left
  shift
  (($#)) || return 0
  kill -TERM "$@" 2>/dev/null
  for ((i = 0; i < t * 10; ++i)); do
    left=0
    for p in "$@"; do alive "$p" && left=1; done
    ((left)) || return 0
    sleep 0.1
  done
  for p in "$@"; do alive "$p" && kill -KILL "$p" 2>/dev/null; done
  sleep 0.2
  return 0
}

# ---- the cluster -----------------------------------------------------------
marker=.tc-slurm-local
daemons=(munged slurmctld slurmd)

# is_up D: all three daemons of D run and the node answers in a state that
# takes jobs (not down, drained or not responding).
is_up() {
  local d=$1 n state
  [[ -f "$d/$marker" ]] || return 1
  for n in "${daemons[@]}"; do ours "$d" "$n" >/dev/null || return 1; done
  state=$(SLURM_CONF="$d/slurm.conf" timeout 10 sinfo -h -N -o %T 2>/dev/null) ||
    return 1
  [[ "$state" =~ ^(idle|mixed|allocated|completing)$ ]]
}

# stop_cluster D: cancel its jobs, end its slurmstepds and daemons (by PID),
# remove D. Quiet and idempotent; bounded (about a minute at most, about 1 s
# when all goes well).
stop_cluster() {
  local d=$1 n pid pids=() jobs
  [[ -f "$d/$marker" ]] || return 0
  pid=$(cat "$d/pid.reaper" 2>/dev/null) && [[ "$pid" =~ ^[0-9]+$ ]] &&
    [[ "$pid" != "${reaper_self:-}" ]] && alive "$pid" &&
    cmdline_has "$pid" "_reap" && cmdline_has "$pid" "$d" &&
    kill -TERM "$pid" 2>/dev/null
  if ours "$d" slurmctld >/dev/null; then
    jobs=$(SLURM_CONF="$d/slurm.conf" timeout 10 squeue -h -o %A 2>/dev/null)
    if [[ -n "$jobs" ]]; then
      # shellcheck disable=SC2086
      SLURM_CONF="$d/slurm.conf" timeout 10 scancel $jobs 2>/dev/null
      for ((i = 0; i < 150; ++i)); do
        [[ -z "$(stepds "$d")" ]] && break
        sleep 0.1
      done
    fi
  fi
  mapfile -t pids < <(stepds "$d")
  stop_pids 5 "${pids[@]}"
  for n in slurmd slurmctld munged; do
    pid=$(ours "$d" "$n") && stop_pids 10 "$pid"
  done
  rm -rf -- "$d"
}

# free_port P: nothing listens on TCP port P (IPv4 or IPv6).
free_port() {
  local hex
  hex=$(printf '%04X' "$1")
  ! grep -q "^ *[0-9]*: [0-9A-F]*:$hex [0-9A-F]*:[0-9A-F]* 0A " \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# listens PID PORT: process PID has a TCP socket listening on PORT.
listens() {
  local hex inode
  hex=$(printf '%04X' "$2")
  while read -r inode; do
    [[ -n "$(find "/proc/$1/fd" -lname "socket:\[$inode\]" 2>/dev/null)" ]] && return 0
  done < <(awk -v h=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == h { print $10 }' \
             /proc/net/tcp /proc/net/tcp6 2>/dev/null)
  return 1
}

# check: the packages and the PMIx plugin, without starting anything.
check() {
  local t missing=() mpis
  ((EUID == 0)) || { err "must run as root (slurmd starts tasks as the job's user)"; return 1; }
  for t in munged slurmctld slurmd srun sinfo squeue scancel; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
  done
  if ((${#missing[@]})); then
    err "${missing[*]} not found (Debian: munge slurmctld slurmd slurm-client; scripts/setup.sh installs them)"
    return 1
  fi
  t=$(mktemp -d /tmp/tc-slurm-check.XXXXXX) || { err "cannot make a directory in /tmp"; return 1; }
  printf 'ClusterName=tccheck\nSlurmctldHost=%s(127.0.0.1)\nNodeName=%s CPUs=1\nPartitionName=p Nodes=%s\n' \
    "$host" "$host" "$host" >"$t/slurm.conf"
  mpis=$(SLURM_CONF="$t/slurm.conf" timeout 20 srun --mpi=list 2>&1)
  rm -rf -- "$t"
  if ! grep -qE '^[[:space:]]*pmix$' <<<"$mpis"; then
    err "srun --mpi=list has no pmix (Debian's slurm-wlm-basic-plugins has it: $plugin_dir_hint/mpi_pmix.so)"
    return 1
  fi
  return 0
}

# start_cluster D: write D's configuration, start the three daemons, wait
# until the node is idle. On failure: one error line, D stopped and removed,
# return 1. (The caller has run check.)
start_cluster() {
  local d=$1 n p t0=$SECONDS tries pid state ctld_port cores ok=0 failed=""
  local deadline=$((SECONDS + idle_timeout))
  if [[ -e "$d" ]]; then
    if [[ -f "$d/$marker" ]]; then
      stop_cluster "$d" # a stale cluster of this script
    elif [[ -n "$(ls -A "$d" 2>/dev/null)" ]]; then
      err "$d exists and is not a $prog directory"; return 1
    fi
  fi
  mkdir -p "$d" || { err "cannot make $d"; return 1; }
  touch "$d/$marker"
  # munged wants every directory above its socket searchable by all.
  chmod 711 "$d"
  mkdir -p "$d/munge" "$d/state" "$d/spool" "$d/tmp" "$d/log"
  chmod 755 "$d/munge"
  if command -v mungekey >/dev/null 2>&1; then
    mungekey --create --keyfile="$d/munge/munge.key" 2>"$d/log/mungekey.err"
  else
    head -c 1024 /dev/urandom >"$d/munge/munge.key"
  fi
  chmod 400 "$d/munge/munge.key"
  : >"$d/plugstack.conf"
  cores=$(nproc)
  cpus=${cpus:-$((cores > 8 ? cores : 8))}

  # munged, with its own key, socket, pid, seed and log files.
  start_daemon "$d" munged munged -F --key-file="$d/munge/munge.key" \
    --socket="$d/munge/munge.socket" --pid-file="$d/munge/munged.pid" \
    --seed-file="$d/munge/munged.seed" --log-file="$d/log/munged.log"
  while ((SECONDS < deadline)); do
    [[ -S "$d/munge/munge.socket" ]] && break
    alive "$(cat "$d/pid.munged")" || break
    sleep 0.1
  done
  if [[ ! -S "$d/munge/munge.socket" ]]; then
    err "munged did not start: $(last_error "$d/log/munged.out")"
    stop_cluster "$d"; return 1
  fi

  # slurmctld, then slurmd, on a free pair of ports (another start may take
  # the same pair meanwhile: then try another, three times at most). Each
  # listens within a few seconds or exits (a port in use is fatal to both).
  for ((tries = 0; tries < 3; ++tries)); do
    if [[ -n "$port" ]]; then
      ctld_port=$port
    else
      for ((i = 0; i < 200; ++i)); do
        ctld_port=$((20000 + (RANDOM % 5000) * 2))
        free_port "$ctld_port" && free_port $((ctld_port + 1)) && break
      done
    fi
    write_conf "$d" "$ctld_port"
    failed=""
    for n in slurmctld slurmd; do
      : >"$d/log/$n.out"
      if [[ $n == slurmctld ]]; then
        start_daemon "$d" slurmctld slurmctld -D -i -f "$d/slurm.conf"
        p=$ctld_port
      else
        start_daemon "$d" slurmd slurmd -D -f "$d/slurm.conf"
        p=$((ctld_port + 1))
      fi
      pid=$(cat "$d/pid.$n")
      until listens "$pid" "$p"; do
        if ! alive "$pid" || ((SECONDS >= deadline)); then break; fi
        sleep 0.1
      done
      listens "$pid" "$p" || { failed=$n; break; }
    done
    [[ -z "$failed" ]] && { ok=1; break; }
    for n in slurmd slurmctld; do
      pid=$(ours "$d" "$n") && stop_pids 10 "$pid"
    done
    if [[ -n "$port" ]] || ! grep -qi "address already in use" \
        "$d/log/$failed.out" 2>/dev/null; then
      break
    fi
  done
  if ((!ok)); then
    if grep -qiE 'error|fatal' "$d/log/$failed.out" 2>/dev/null; then
      err "$failed did not start (ports $ctld_port, $((ctld_port + 1))): $(last_error "$d/log/$failed.out")"
    else
      err "$failed did not listen on port $p within ${idle_timeout} s"
    fi
    stop_cluster "$d"; return 1
  fi

  # The node registers and becomes idle.
  while :; do
    for n in "${daemons[@]}"; do
      if ! ours "$d" "$n" >/dev/null; then
        err "$n exited while the node came up: $(last_error "$d/log/$n.out")"
        stop_cluster "$d"; return 1
      fi
    done
    state=$(SLURM_CONF="$d/slurm.conf" timeout 10 sinfo -h -N -o %T 2>/dev/null)
    [[ "$state" == idle ]] && break
    if ((SECONDS >= deadline)); then
      n=$(grep -iE 'error|fatal' "$d/log/slurmd.out" "$d/log/slurmctld.out" 2>/dev/null | tail -n 1)
      err "node $host not idle within ${idle_timeout} s (state: ${state:-no answer from slurmctld})${n:+; last error: ${n#*:}}"
      stop_cluster "$d"; return 1
    fi
    sleep 0.2
  done
  note "node $host idle ($cpus CPUs) after $((SECONDS - t0)) s: slurmctld port $ctld_port, slurmd $((ctld_port + 1)), $d"
  return 0
}

# start_daemon D NAME CMD...: CMD in the background, in a session of its own
# (no terminal's signals reach it), working directory D; its PID in D/pid.NAME.
start_daemon() {
  local d=$1 name=$2
  shift 2
  (cd "$d" && exec setsid "$@" </dev/null >>"$d/log/$name.out" 2>&1 9>&-) &
  echo $! >"$d/pid.$name"
  disown $!
}

# last_error FILE: the last error or fatal line of a daemon's output.
last_error() {
  local l
  l=$(grep -iE 'error|fatal' "$1" 2>/dev/null | tail -n 1)
  [[ -n "$l" ]] || l=$(tail -n 1 "$1" 2>/dev/null)
  echo "${l:-no output}"
}

write_conf() {
  local d=$1 p=$2
  cat >"$d/slurm.conf" <<EOF
# Written by scripts/slurm-local.sh: a one-node cluster in $d.
ClusterName=tclocal
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$p
SlurmdPort=$((p + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge/munge.socket
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
TmpFS=$d/tmp
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
PlugStackConfig=$d/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
KillWait=5
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

host=$(hostname -s 2>/dev/null || hostname)
[[ -n "$host" ]] || die "cannot tell this host's name"

# A named directory is locked while it is started or stopped, through the
# file DIR.lock beside it (removed with the directory; a process that locked
# a lock file just removed retries with the new one). A private directory
# needs no lock.
lock() {
  local lf="$1.lock" deadline=$((SECONDS + 120)) left
  while :; do
    exec 9>>"$lf" || die "cannot lock $1 ($lf)"
    left=$((deadline - SECONDS))
    flock -w $((left > 0 ? left : 1)) 9 ||
      die "$1 is locked by another $prog (waited 120 s)"
    [[ "$(stat -L -c %d:%i /proc/self/fd/9 2>/dev/null)" == \
       "$(stat -c %d:%i "$lf" 2>/dev/null)" ]] && return 0
    exec 9>&-
  done
}
unlock() { exec 9>&-; }
# not_foreign D: D is absent, empty or a directory of this script (checked
# before locking, so that no lock file is put beside anything else).
not_foreign() {
  [[ ! -e "$1" || -f "$1/$marker" || -z "$(ls -A "$1" 2>/dev/null)" ]] ||
    die "$1 is not a $prog directory"
}
# unlock_remove D: D is gone; so goes its lock file, then the lock.
unlock_remove() { rm -f -- "$1.lock"; exec 9>&-; }

# ---- verbs -----------------------------------------------------------------
case "$verb" in
  check)
    check || exit 1
    note "ok: $(slurmctld -V), munge $(munged -V 2>&1 | awk '{print $1}'), srun --mpi=pmix"
    exit 0 ;;
  status)
    if is_up "$dir"; then
      echo "$prog: up: $dir (export SLURM_CONF=$dir/slurm.conf)"; exit 0
    fi
    echo "$prog: down: $dir"; exit 1 ;;
  up)
    check || exit 1
    not_foreign "$dir"
    lock "$dir"
    if is_up "$dir"; then
      echo "$prog: already up at $dir" >&2
    else
      verbose=1
      start_cluster "$dir" || { unlock_remove "$dir"; exit 1; }
    fi
    unlock
    echo "export SLURM_CONF=$dir/slurm.conf"
    exit 0 ;;
  down)
    not_foreign "$dir"
    lock "$dir"
    if [[ -f "$dir/$marker" ]]; then
      stop_cluster "$dir"
      echo "$prog: stopped $dir" >&2
    else
      echo "$prog: not running at $dir" >&2
    fi
    unlock_remove "$dir"
    exit 0 ;;
  _reap)
    # Internal: started by `run`; once the process PID (with start time
    # START) is gone without having stopped the cluster at DIR (it was
    # killed), ends its command and stops the cluster.
    pid=$1 start=$2
    reaper_self=$$
    trap 'exit 0' TERM
    while [[ "$(starttime "$pid")" == "$start" ]] && alive "$pid"; do sleep 1; done
    trap '' TERM
    # That script's command, if it outlived it, then the cluster.
    if read -r cpid cstart <"$dir/pid.cmd" 2>/dev/null &&
        [[ "$(starttime "$cpid")" == "$cstart" ]]; then
      stop_pids 10 "$cpid"
    fi
    if [[ -e "$dir.lock" ]]; then
      lock "$dir"; stop_cluster "$dir"; unlock_remove "$dir"
    else
      stop_cluster "$dir"
    fi
    exit 0 ;;
esac

# ---- run -------------------------------------------------------------------
started=""   # the cluster this run started and stops
started_named=0  # ... at a named directory (locked when stopped)
if ((!named_dir && !keep && !new)) && is_up "$dir"; then
  note "using the cluster at $dir"
elif ((new || (!named_dir && !keep))); then
  check || exit 1
  dir=$(mktemp -d /tmp/tc-slurm.XXXXXX) || die "cannot make a directory in /tmp"
  start_cluster "$dir" || { rm -rf -- "$dir"; exit 1; }
  started=$dir
else
  check || exit 1
  not_foreign "$dir"
  lock "$dir"
  if is_up "$dir"; then
    note "using the cluster at $dir"
  else
    start_cluster "$dir" || { unlock_remove "$dir"; exit 1; }
    ((keep)) || { started=$dir; started_named=1; }
  fi
  unlock
fi

cmd_pid=""
# shellcheck disable=SC2317 # called from the traps
cleanup() {
  if [[ -n "$cmd_pid" ]] && alive "$cmd_pid"; then
    kill -TERM "$cmd_pid" 2>/dev/null
    for ((i = 0; i < 100; ++i)); do alive "$cmd_pid" || break; sleep 0.1; done
    alive "$cmd_pid" && kill -KILL "$cmd_pid" 2>/dev/null
  fi
  if [[ -n "$started" ]]; then
    local t0=$SECONDS d=$started
    started=""
    if ((started_named)); then
      lock "$d"; stop_cluster "$d"; unlock_remove "$d"
    else
      stop_cluster "$d"
    fi
    note "stopped $d in $((SECONDS - t0)) s"
  fi
}
trap 'cleanup' EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM
trap 'cleanup; exit 129' HUP

if [[ -n "$started" ]]; then
  # Should this script be killed outright, a watcher in a session of its
  # own still ends CMD and stops the cluster.
  (exec setsid bash "$self" _reap --dir "$started" -- "$$" "$(starttime $$)" \
     </dev/null >/dev/null 2>&1) &
  echo $! >"$started/pid.reaper"
fi

# CMD, with the cluster's configuration and no Slurm variables of an outer
# job; in the background so that a signal to this script is acted on at once.
for v in $(compgen -v SLURM_); do unset "$v"; done
export SLURM_CONF=$dir/slurm.conf
if [[ -n "$cmd_timeout" ]]; then
  timeout -k 10 "$cmd_timeout" "$@" <&0 &
else
  "$@" <&0 &
fi
cmd_pid=$!
[[ -z "$started" ]] || echo "$cmd_pid $(starttime "$cmd_pid")" >"$started/pid.cmd"
wait "$cmd_pid"
rc=$?
cmd_pid=""
if [[ -n "$cmd_timeout" ]] && ((rc == 124 || rc == 137)); then
  err "$1 did not end within $cmd_timeout s"
fi
exit "$rc"
