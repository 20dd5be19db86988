#!/usr/bin/env bash
# The ThreadSanitizer stage: builds build-tsan/ (-DTC_SANITIZE=thread) and
# runs the runtime's unit tests, the C API tests and the end-to-end lit
# tests of the runtime and of GPU targets on the driver model under it; the
# third stage of scripts/test.sh. On the 2-core
# CI machine it takes about 9 minutes (README.md, "Sanitizer build").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# UCX's memory hooks patch mmap/malloc and collide with the sanitizer's
# interceptors (as with ASan); a data race fails the run.
export UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=no
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1 suppressions=$root/scripts/tsan.supp}
bash scripts/build.sh build-tsan -DTC_SANITIZE=thread -DTC_ENABLE_FUZZERS=OFF "$@"
UCX_TLS=posix,self,tcp UCX_NET_DEVICES=lo build-tsan/bin/tc-unittests
UCX_TLS=posix,self,tcp UCX_NET_DEVICES=lo build-tsan/bin/tc-capi-tests
/usr/lib/llvm-22/bin/lit -sv build-tsan/test/lit/runtime build-tsan/test/lit/gpu-model
