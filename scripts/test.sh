#!/usr/bin/env bash
# Builds tc and runs every test: first the normal build (build/), then the
# AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan/), each
# through ctest (lit suite + every GoogleTest case), then the runtime's
# tests under ThreadSanitizer (scripts/tsan.sh). Installs missing
# packages first. Exit status is non-zero if anything fails.
set -euo pipefail
# Under CI the heterogeneous (qemu) tests must run: lit fails if they cannot.
export CI=${CI:-true}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh

run_suite() {
  local dir=$1
  shift
  echo "== building $dir"
  bash scripts/build.sh "$dir" "$@"
  # The aarch64 cross build (runtime side, into build-aarch64) whose programs
  # the lit tests in test/lit/aarch64 run under qemu-aarch64; built once,
  # used by both stages (the emulated programs are not sanitized: the x86_64
  # side of those tests is, in the second stage).
  if [[ "$dir" == build ]]; then
    echo "== building build-aarch64"
    bash scripts/build-aarch64.sh
  fi
  echo "== testing $dir"
  (cd "$dir" && ctest --output-on-failure --timeout 1200 -j2)
}

run_suite build

# The sanitizer stage. LeakSanitizer is off: libLLVM and UCX keep
# process-lifetime allocations. UCX's memory hooks patch mmap/malloc at
# load time, which collides with ASan's interceptors: turn them off (tc does
# not need them; they serve UCX's registration cache for RDMA).
export ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1
export UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=no
run_suite build-asan -DTC_SANITIZE=ON

# The ThreadSanitizer stage: the runtime's unit, C API and end-to-end tests
# (about 8 minutes here; the two stages above about 8 together).
echo "== ThreadSanitizer stage (scripts/tsan.sh)"
bash scripts/tsan.sh
