#!/usr/bin/env bash
# Configures and builds one tc build tree with clang-22.
#   scripts/build.sh [BUILD_DIR [extra cmake args...]]   (default: build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-build}
shift || true
cd "$root"
if [[ ! -f "$dir/build.ninja" ]]; then
  CC=clang-22 CXX=clang++-22 cmake -S . -B "$dir" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTC_ENABLE_FUZZERS=ON "$@"
fi
ninja -C "$dir"
