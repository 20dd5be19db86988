#!/usr/bin/env bash
# Checks GPU targets on a machine with an NVIDIA GPU, from a relocatable
# bundle alone (scripts/bundle.sh): nothing of a build tree and no package
# beyond the NVIDIA driver, python3, bash and tar/xz.
#   bash scripts/gpu-check.sh BUNDLE [--gpu N] [--full]
# BUNDLE is tc-VERSION-ARCH-linux.tar.xz or the directory it unpacks to.
# It runs, each bounded in time:
#   1. tc-serve --gpu-info (the device, the driver, the PTX version);
#   2. the GPU lit tests (test/lit/gpu, those that say REQUIRES: cuda) with
#      the bundle's tc-serve, tc-send, lit and FileCheck and the bundle's
#      example archives;
#   3. tc-bench tsi --gpu and tc-bench sss --gpu (--quick unless --full),
#      which check their own counts and sums;
# then prints `gpu-check: N passed, M failed` and the benchmarks' figures.
# Exit status 0 when everything passed. Meant for a 15-minute device slot,
# start-up included: unpacking takes seconds, the checks about two minutes.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
gpu=0
full=0
bundle=
die() { echo "gpu-check: error: $*" >&2; exit 1; }
while (($#)); do
  case $1 in
    --gpu) [[ $# -ge 2 ]] || die "--gpu needs a device number"; gpu=$2; shift 2 ;;
    --gpu=*) gpu=${1#*=}; shift ;;
    --full) full=1; shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$1'" ;;
    *) [[ -z $bundle ]] || die "one bundle only"; bundle=$1; shift ;;
  esac
done
[[ -n $bundle ]] || die "usage: gpu-check.sh BUNDLE [--gpu N] [--full]"
[[ $gpu =~ ^[0-9]+$ ]] || die "bad --gpu '$gpu'"
command -v python3 >/dev/null || die "python3 not found (lit needs it)"

work=$(mktemp -d /tmp/tc-gpu-check.XXXXXX)
cleanup() { rm -rf "$work"; }
trap cleanup EXIT

if [[ -d $bundle ]]; then
  top=$(cd "$bundle" && pwd)
else
  [[ -f $bundle ]] || die "no bundle '$bundle'"
  tar -xJf "$bundle" -C "$work" || die "cannot unpack '$bundle'"
  top=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'tc-*' | head -n1)
  [[ -n $top ]] || die "'$bundle' holds no tc-* directory"
fi
for f in bin/tc-serve bin/tc-send bin/tc-bench libexec/tc/lit libexec/tc/FileCheck; do
  [[ -x $top/$f ]] || die "the bundle has no $f"
done

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "gpu-check: PASS: $*"; }
fail() { failed=$((failed + 1)); echo "gpu-check: FAIL: $*"; }

# --- 1. the device ----------------------------------------------------------
if info=$(timeout 120 "$top/bin/tc-serve" --gpu "$gpu" --gpu-info 2>&1); then
  pass "tc-serve --gpu-info: ${info#tc-serve: }"
else
  fail "tc-serve --gpu-info: $info"
  echo "gpu-check: $passed passed, $failed failed"
  exit 1
fi

# --- 2. the GPU lit tests, against the bundle ---------------------------------
suite=$work/lit
mkdir -p "$suite/gpu" "$suite/Inputs"
cp -r "$root/test/lit/gpu/Inputs" "$suite/gpu/"
for t in "$root"/test/lit/gpu/*.test; do
  grep -q '^# REQUIRES: cuda' "$t" && cp "$t" "$suite/gpu/"
done
cp "$root/test/lit/runtime/Inputs/with-server.py" "$suite/Inputs/"
cat >"$suite/lit.cfg.py" <<EOF
# The GPU lit tests against a tc bundle (written by scripts/gpu-check.sh).
import os
import lit.formats
config.name = "tc-gpu"
config.test_format = lit.formats.ShTest(True)
config.suffixes = [".test"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join("$work", "out")
config.environment["PATH"] = os.pathsep.join(
    ["$top/bin", "$top/libexec/tc", os.environ.get("PATH", "/usr/bin:/bin")])
for var in ("HOME", "TMPDIR"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
config.environment["UCX_NET_DEVICES"] = "lo"
config.environment["CUDA_VISIBLE_DEVICES"] = "$gpu"
config.substitutions.append(("%tc_ifuncs", "$top/ifuncs"))
config.substitutions.append(("%python", "python3"))
config.substitutions.append(("%with_server",
    "python3 " + os.path.join(config.test_source_root, "Inputs",
                              "with-server.py")))
config.available_features.add("cuda")
EOF
echo "gpu-check: lit tests (test/lit/gpu, REQUIRES: cuda)"
lit_out=$work/lit.out
timeout 600 "$top/libexec/tc/lit" -v "$suite" >"$lit_out" 2>&1
lit_rc=$?
# Each test's verdict counts: "PASS: tc-gpu :: gpu/serve.test (1 of 5)".
while read -r verdict name; do
  case $verdict in
    PASS:) pass "lit $name" ;;
    FAIL:|XPASS:|UNRESOLVED:|TIMEOUT:) fail "lit $name" ;;
  esac
done < <(sed -n 's/^\(PASS:\|FAIL:\|XPASS:\|UNRESOLVED:\|TIMEOUT:\) tc-gpu :: \([^ ]*\).*/\1 \2/p' "$lit_out")
if ((lit_rc != 0)); then
  grep -q '^\(FAIL\|UNRESOLVED\|TIMEOUT\):' "$lit_out" || fail "lit (exit $lit_rc)"
  # What failed, for the report.
  sed -n '/^\*\*\*\*\*\*\*\*\*\*\*\*\*\*\*\*\*\*\*\* TEST/,/^\*\*\*\*\*\*\*\*\*\*$/p' "$lit_out" | tail -n 200
fi

# --- 3. the GPU benchmarks --------------------------------------------------
quick=--quick
((full)) && quick=
figures=$work/figures.txt
: >"$figures"
for scenario in tsi sss; do
  echo "gpu-check: tc-bench $scenario --gpu=$gpu $quick"
  if timeout 300 "$top/bin/tc-bench" "$scenario" "--gpu=$gpu" $quick \
      --ifunc-path "$top/ifuncs" >"$work/$scenario.out" 2>"$work/$scenario.err"; then
    pass "tc-bench $scenario --gpu"
    cat "$work/$scenario.out" >>"$figures"
  else
    fail "tc-bench $scenario --gpu (exit $?): $(tail -n 3 "$work/$scenario.err")"
  fi
done

echo "gpu-check: $passed passed, $failed failed"
echo "gpu-check: device: ${info#tc-serve: }"
cat "$figures"
((failed == 0))
