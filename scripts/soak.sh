#!/usr/bin/env bash
# A target killed and restarted under its senders, again and again.
#
#   scripts/soak.sh [--build DIR] [--senders N] [--kills K] [--round-ms MS]
#                   [--final-count C] [--port P] [--keep]
#
# N tc-send processes stream TSI messages to one tc-serve (its region in a
# file, --region-file, so what ran survives it); after MS milliseconds of a
# round the target is stopped, the count it reached is read from the file,
# and it is killed (SIGKILL); it is started again at once on the same port,
# and N new senders stream to it. K times; then a last round in which each
# sender sends C messages and the target lives. Checked, each round:
#   - the target listens again on its port at once (no retry, no wait);
#   - every sender exits 1 with exactly one line, "tc-send: error: ...: X of
#     Y messages were not acknowledged (...)" (or 0 and no line, had it
#     finished): no abort, no UCX bug report, no hang;
#   - what ran lies between what the senders were told ran (acknowledged)
#     and that plus what they were told may have run;
# and at the end: the count is what ran before the last round plus the N x C
# messages of the last round, exactly (nothing ran twice, nothing was lost
# of what was acknowledged). It prints a line per round and the figures;
# exit 0 when everything held, 1 with a line saying what did not.
# docs/benchmarks.md ("Failures") has a run of some minutes.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
senders=3
kills=3
round_ms=700
final_count=20000
port=0
keep=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --senders) senders=$2; shift 2 ;;
    --kills) kills=$2; shift 2 ;;
    --round-ms) round_ms=$2; shift 2 ;;
    --final-count) final_count=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak.sh: error: unknown argument '$1' (try --help)" >&2; exit 1 ;;
  esac
done
for v in senders kills round_ms final_count port; do
  [[ ${!v} =~ ^[0-9]+$ ]] || { echo "soak.sh: error: bad --${v//_/-} '${!v}'" >&2; exit 1; }
done
(( senders >= 1 )) || { echo "soak.sh: error: --senders must be 1 or more" >&2; exit 1; }
serve=$build/bin/tc-serve send=$build/bin/tc-send archive=$build/ifuncs/tsi.tcfb
for f in "$serve" "$send" "$archive"; do
  [[ -e $f ]] || { echo "soak.sh: error: $f is missing (build first: bash scripts/build.sh)" >&2; exit 1; }
done
# HOST:PORT connections need tcp; loopback only (no other interface).
export UCX_TLS=${UCX_TLS:-posix,self,tcp} UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}

dir=$(mktemp -d /tmp/tc-soak.XXXXXX)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do
    kill -CONT "$p" 2>/dev/null || true
    kill -KILL "$p" 2>/dev/null || true
  done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if (( keep )); then echo "soak.sh: files kept in $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

fail() { echo "soak.sh: error: $*"; exit 1; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
count() { od -An -t u8 -N 8 "$dir/region" | tr -d ' '; }
is_stopped() { [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) == [Tt] ]]; }

# start_target: tc-serve on $port (0 the first time: it picks one), its
# region in $dir/region; sets target (PID) and port, or fails at once if it
# does not listen.
start_target() {
  local out=$dir/serve.$1.out
  "$serve" --listen "127.0.0.1:$port" --no-prewarm --region-file "$dir/region" \
    -v > "$out" 2>&1 &
  target=$!
  pids+=("$target")
  local deadline=$(( $(now_ms) + 20000 ))
  until grep -q "listening on\|error" "$out"; do
    (( $(now_ms) < deadline )) || fail "tc-serve did not start in 20 s"
    kill -0 "$target" 2>/dev/null || break
    sleep 0.005
  done
  local line
  line=$(grep -m1 "listening on\|error" "$out" || true)
  [[ $line =~ listening\ on\ 127\.0\.0\.1:([0-9]+)$ ]] ||
    fail "round $1: tc-serve could not listen on port $port at once: $line"
  port=${BASH_REMATCH[1]}
}

# start_senders ROUND COUNT: N tc-send processes; their PIDs in spids.
start_senders() {
  spids=()
  local i
  for (( i = 0; i < senders; ++i )); do
    "$send" --to "127.0.0.1:$port" "$archive" --count "$2" --timeout 10000 \
      > /dev/null 2> "$dir/send.$1.$i.err" &
    spids+=("$!")
    pids+=("$!")
  done
}

# wait_senders ROUND: each must end (within 60 s) with exit 0 and no line,
# or exit 1 and one line with its figures; sums them into acked, maybe.
wait_senders() {
  acked=0 maybe=0 failed=0
  local i rc err lines re
  re=': ([0-9]+) of ([0-9]+) messages were not acknowledged \((.*)\)$'
  for (( i = 0; i < senders; ++i )); do
    local deadline=$(( $(now_ms) + 60000 ))
    while kill -0 "${spids[$i]}" 2>/dev/null; do
      (( $(now_ms) < deadline )) || fail "round $1: sender $i did not end within 60 s"
      sleep 0.01
    done
    rc=0
    wait "${spids[$i]}" || rc=$?
    err=$dir/send.$1.$i.err
    lines=$(wc -l < "$err")
    if (( rc == 0 && lines == 0 )); then
      acked=$(( acked + $2 ))
      continue
    fi
    (( rc == 1 && lines == 1 )) ||
      fail "round $1: sender $i exited $rc with $lines line(s): $(head -c 2000 "$err")"
    local line
    line=$(cat "$err")
    [[ $line =~ ^tc-send:\ error:\ .*127\.0\.0\.1:$port\ (lost|closed\ by\ the\ peer).*$re ]] ||
      fail "round $1: sender $i said: $line"
    local lost=${BASH_REMATCH[2]} total=${BASH_REMATCH[3]} detail=${BASH_REMATCH[4]}
    local a=$(( total - lost )) k=0
    [[ $detail =~ ([0-9]+)\ may\ have\ run ]] && k=${BASH_REMATCH[1]}
    acked=$(( acked + a )) maybe=$(( maybe + k )) failed=$(( failed + 1 ))
  done
}

echo "soak: $senders senders, $kills kills, rounds of ${round_ms} ms; files in $dir"
t0=$(now_ms)
start_target 0
restarts=()
ran=0 total_acked=0 total_ran=0 total_maybe=0 sender_lines=0
for (( r = 1; r <= kills; ++r )); do
  start_senders "$r" 1000000000
  before=$ran
  # The round's time counts from when every sender is connected (a loaded
  # machine may take a while to start them; one that connected only after
  # the kill would find the next target and stream to it).
  deadline=$(( $(now_ms) + 30000 ))
  until (( $(grep -c "accepted$" "$dir/serve.$(( r - 1 )).out") >= senders &&
           $(count) > before )); do
    (( $(now_ms) < deadline )) ||
      fail "round $r: the senders did not all connect and run within 30 s"
    sleep 0.005
  done
  sleep "$(awk "BEGIN{print $round_ms/1000}")"
  # Stopped, what ran is in the file and stays; then killed.
  kill -STOP "$target"
  deadline=$(( $(now_ms) + 10000 ))
  until is_stopped "$target"; do
    (( $(now_ms) < deadline )) || fail "round $r: tc-serve did not stop"
    sleep 0.001
  done
  ran=$(count)
  kill -KILL "$target"
  wait "$target" 2>/dev/null || true
  killed_at=$(now_ms)
  # Back at once, on the same port, before the senders have even ended.
  start_target "$r"
  restarts+=( $(( $(now_ms) - killed_at )) )
  wait_senders "$r" 0
  this=$(( ran - before ))
  (( this >= acked )) ||
    fail "round $r: $this messages ran, fewer than the $acked acknowledged"
  (( this <= acked + maybe )) ||
    fail "round $r: $this messages ran, more than the $acked acknowledged and $maybe that may have run"
  total_acked=$(( total_acked + acked )) total_ran=$(( total_ran + this ))
  total_maybe=$(( total_maybe + maybe )) sender_lines=$(( sender_lines + failed ))
  echo "soak: round $r: $this ran, $acked acknowledged, $maybe may have run; $failed sender line(s); listening again $(( restarts[r-1] )) ms after the kill"
done
# The last round: the target lives, every sender finishes.
start_senders final "$final_count"
wait_senders final "$final_count"
(( failed == 0 )) || fail "last round: $failed sender(s) failed"
# Every message of the last round was acknowledged: it ran, and is in the
# file.
final=$(count)
want=$(( ran + senders * final_count ))
(( final == want )) ||
  fail "the count is $final after the last round, not $ran + $senders x $final_count = $want"
kill -TERM "$target"
wait "$target" 2>/dev/null || true
secs=$(awk "BEGIN{printf \"%.1f\", ($(now_ms) - $t0) / 1000}")
sorted=$(printf '%s\n' "${restarts[@]:-0}" | sort -n)
median=$(echo "$sorted" | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
max=$(echo "$sorted" | tail -1)
echo "soak: restarts on port $port: $kills, each at once (listening $median ms after the kill, median; $max ms at most)"
echo "soak: killed rounds: $total_ran messages ran, $total_acked of them acknowledged to their senders, $total_maybe more told 'may have run'; $sender_lines sender lines, one per sender"
echo "soak: last round: $senders x $final_count messages, all acknowledged; count $final = $ran + $(( senders * final_count ))"
echo "soak: ok ($kills kills, $(( kills * senders + senders )) senders, $secs s)"
