#!/usr/bin/env bash
# The main job, end to end on this machine: build tc, compile the TSI example
# ifunc for x86_64 and aarch64, pack both into one fat archive, and show it
# with tc-ar (list, dump, verify) and with LLVM's own llvm-objdump.
# Installs missing packages first; safe to run again.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
bash scripts/build.sh build >/dev/null
bin=$root/build/bin
llvm=/usr/lib/llvm-22/bin
out=$root/build/demo
mkdir -p "$out"

echo "== compiling examples/tsi/tsi.c for x86_64 and aarch64"
if [[ -x $bin/tc-cc ]]; then
  (set -x; "$bin/tc-cc" examples/tsi/tsi.c -o "$out/tsi.tcfb")
else
  for t in x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu; do
    (set -x; "$llvm/clang" -O2 -c -emit-llvm --target=$t -Iinclude \
       examples/tsi/tsi.c -o "$out/tsi.$t.bc")
  done
  (set -x; "$bin/tc-ar" create "$out/tsi.tcfb" --name tsi "$out"/tsi.*.bc)
fi
echo
echo "== tc-ar list"
"$bin/tc-ar" list "$out/tsi.tcfb"
echo
echo "== tc-ar verify"
"$bin/tc-ar" verify "$out/tsi.tcfb"
echo
echo "== tc-ar dump"
"$bin/tc-ar" dump "$out/tsi.tcfb"
echo
echo "== llvm-objdump --offloading (LLVM's own reader)"
"$llvm/llvm-objdump" --offloading "$out/tsi.tcfb"
echo
echo "== member for this host: $("$llvm/llvm-config" --host-target)"
"$bin/tc-ar" extract "$out/tsi.tcfb" --target="$("$llvm/llvm-config" --host-target)" -o "$out/host.bc"
"$llvm/llvm-dis" "$out/host.bc" -o - | grep -E 'target triple|define'
echo
echo "demo: archive at $out/tsi.tcfb ($(stat -c %s "$out/tsi.tcfb") bytes)"
