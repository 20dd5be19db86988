#!/usr/bin/env bash
# Instructions per phase of a target's first contacts, counted by callgrind
# (repeatable on a noisy machine, unlike a clock): starts BUILD_DIR's
# tc-serve under valgrind, sends each ARCHIVE once with tc-send (a new code
# identity each: a first contact), and prints for each what the target's
# Runtime::loadArchive cost and how that splits (docs/benchmarks.md,
# "Where a first contact's instructions go"):
#   scripts/jit-phases.sh BUILD_DIR [--exec MODE] [--no-prewarm] ARCHIVE...
# Each ARCHIVE must be a code identity the target has not loaded yet (a
# second send of one is a cache hit). Send several (fca fcb tsi, from
# BUILD_DIR/ifuncs) to see a warm target: the first load of a fresh process
# also pays LLVM's one-time set-up unless tc-serve prewarms. Valgrind 3.19
# cannot read clang 22's DWARF 5, so the script runs a copy of tc-serve
# without debug info (symbols stay).
set -euo pipefail
[[ $# -ge 2 ]] || { sed -n 2,12p "$0"; exit 2; }
bin=$(cd "$1" && pwd)/bin
shift
serve_args=()
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --exec) serve_args+=(--exec "$2"); shift 2 ;;
    --no-prewarm) serve_args+=(--no-prewarm); shift ;;
    *) echo "jit-phases.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
tmp=$(mktemp -d)
pid=
cleanup() {
  [[ -n $pid ]] && kill -INT "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
objcopy --strip-debug "$bin/tc-serve" "$tmp/tc-serve"
export UCX_TLS=tcp UCX_NET_DEVICES=lo
valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" \
  --toggle-collect='tc::Runtime::loadArchive*' \
  "$tmp/tc-serve" --listen 127.0.0.1:0 "${serve_args[@]}" > "$tmp/serve.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  grep -aq 'listening on' "$tmp/serve.log" && break
  sleep 0.1
done
addr=$(grep -ao 'listening on [0-9.:]*' "$tmp/serve.log" | cut -d' ' -f3)
[[ -n $addr ]] || { echo "jit-phases.sh: tc-serve did not start" >&2; cat "$tmp/serve.log" >&2; exit 1; }
callgrind_control -z "$pid" > /dev/null 2>&1
n=0
for a in "$@"; do
  "$bin/tc-send" --to "$addr" "$a" --timeout 300000 > /dev/null
  callgrind_control -d "$(basename "$a")" "$pid" > /dev/null 2>&1
  n=$((n + 1))
done
python3 - "$tmp" "$n" "$@" <<'EOF'
import glob, re, subprocess, sys
tmp, n, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
# Inclusive cost of each phase's function(s); "other" is the rest of
# loadArchive (ORC's lookup and materialization, the LLVMContext, freeing).
phases = [
    ("archive read", [r"tc::readArchive\("]),
    ("select, deps, symbols", [r"tc::selectMember\(", r"tc::JitEngine::addDeps\(",
                               r"tc::checkSymbolsResolve\("]),
    ("bitcode parse", [r"llvm::parseBitcodeFile\("]),
    ("codegen", [r"ReusedPipelineCompiler::operator\(\)\(llvm::Module&\)"]),
    ("JITLink", [r"\?\?\?:llvm::orc::ObjectLinkingLayer::emit\("]),
]
files = sorted(glob.glob(tmp + "/cg.out.*"), key=lambda f: int(f.rsplit(".", 1)[1]))
print("%-14s %10s" % ("archive", "total") + "".join(" %22s" % p for p, _ in phases) + " %10s" % "other")
for name, f in zip(names, files[-n:]):
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", f],
                         capture_output=True, text=True).stdout
    def cost(pattern):
        for line in out.splitlines():
            m = re.match(r"\s*([\d,]+) \(", line)
            if m and re.search(pattern, line):
                return int(m.group(1).replace(",", ""))
        return 0
    total = cost(r"tc::Runtime::loadArchive\(")
    parts = [sum(cost(p) for p in pats) for _, pats in phases]
    print("%-14s %10d" % (name.rsplit("/", 1)[-1], total) +
          "".join(" %22d" % c for c in parts) + " %10d" % (total - sum(parts)))
EOF
