#!/usr/bin/env bash
# Runs one program of the aarch64 cross build under qemu-aarch64 with the
# arm64 sysroot scripts/build-aarch64.sh assembled:
#   scripts/run-aarch64.sh PROGRAM [ARGS...]
# PROGRAM is a name in build-aarch64/bin (tc-serve, tc-send, tc-bench, ...)
# or a path. QEMU_CPU selects the emulated CPU (qemu's -cpu; default max).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${TC_AARCH64_BUILD:-$root/build-aarch64}
if (($# < 1)); then
  echo "usage: scripts/run-aarch64.sh PROGRAM [ARGS...]" >&2
  exit 2
fi
prog=$1
shift
[[ "$prog" == */* ]] || prog=$dir/bin/$prog
if [[ ! -f "$dir/sysroot.path" || ! -x "$prog" ]]; then
  echo "run-aarch64: error: $prog not built; run bash scripts/build-aarch64.sh" >&2
  exit 1
fi
exec qemu-aarch64 -L "$(cat "$dir/sysroot.path")" "$prog" "$@"
