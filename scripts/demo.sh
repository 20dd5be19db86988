#!/usr/bin/env bash
# The main job, end to end on this machine: build tc, compile the TSI
# example ifunc with tc-cc for x86_64 and aarch64, start a tc-serve target,
# inject the ifunc with tc-send over UCX, show the target's memory changing,
# and stop the target. Installs missing packages first; safe to run again.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
bash scripts/build.sh build >/dev/null
bin=$root/build/bin
out=$root/build/demo
mkdir -p "$out"
export UCX_TLS=${UCX_TLS:-posix,self,tcp}

echo "== tc-cc: compile examples/tsi/tsi.c once per triple, into one archive"
(set -x; "$bin/tc-cc" examples/tsi/tsi.c -o "$out/tsi.tcfb")
"$bin/tc-ar" list "$out/tsi.tcfb"
"$bin/tc-ar" verify "$out/tsi.tcfb"

echo
echo "== tc-serve: a target process with 4 KiB of zeroed memory"
exec 3< <(exec "$bin/tc-serve" --listen 127.0.0.1:0 -v)
serve_pid=$!
cleanup() { kill -TERM "$serve_pid" 2>/dev/null || true; }
trap cleanup EXIT
# tc-serve -v names the code it runs, then the address it listens on.
ready=
while [[ $ready != *"listening on "* ]]; do
  read -r -t 30 ready <&3 || { echo "demo: tc-serve did not start" >&2; exit 1; }
  echo "$ready"
done
addr=${ready##* }

echo
echo "== tc-send: 1 message (the first carries the code), then read target memory"
(set -x; "$bin/tc-send" --to "$addr" "$out/tsi.tcfb" --count 1 --read-back 8)
echo "== tc-send: 41 more messages from a new sender (the archive travels again;
   the target recognises its hash and does not compile it again)"
(set -x; "$bin/tc-send" --to "$addr" "$out/tsi.tcfb" --count 41 --read-back 8)
echo "   (0x2a = 42: every message incremented the counter in the target)"

echo
echo "== stopping tc-serve; its log and counters:"
kill -TERM "$serve_pid"
trap - EXIT
while IFS= read -r -t 30 line <&3; do echo "$line"; done
wait "$serve_pid" 2>/dev/null || true
