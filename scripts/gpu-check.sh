#!/usr/bin/env bash
# Checks GPU targets on a machine with an NVIDIA GPU, from a relocatable
# bundle alone (scripts/bundle.sh): nothing of a build tree and no package
# beyond the NVIDIA driver, python3, bash and tar/xz.
#   bash scripts/gpu-check.sh BUNDLE [--gpu N] [--full] [--save DIR]
# BUNDLE is tc-VERSION-ARCH-linux.tar.xz or the directory it unpacks to.
# It runs, each bounded in time:
#   1. tc-serve --gpu-info (the device, the driver, the PTX version);
#   2. the GPU lit tests (test/lit/gpu, those that say REQUIRES: cuda) with
#      the bundle's tc-serve, tc-send, lit and FileCheck and the bundle's
#      example archives;
#   3. tc-bench tsi --gpu and tc-bench sss --gpu (--quick unless --full),
#      which check their own counts and sums, with --json;
# then prints `gpu-check: N passed, M failed` and the benchmarks' figures
# as docs/benchmarks.md's GPU tables (the figures, and where a message's
# time goes). Each benchmark that passed is saved in DIR (--save, default
# ./gpu-bench) as scripts/bench-tables.sh saves its runs: gpu-tsi.json and
# gpu-sss.json (the records), .cmd (the command), .run (the commit of this
# checkout, the load average at the start, the time), and gpu-device.json
# (tc-serve --gpu-info's line, the bundle's name); every step's whole output
# goes to DIR/logs (gpu-info.txt, lit.log, tsi.err, sss.err); an earlier
# run's files there are removed first. A step that fails prints its error
# and the end of its output (at most 200 lines). Copy the saved runs into
# docs/bench/ and run `bash scripts/bench-tables.sh --render` to fill the
# tables. Exit status 0 when everything passed. Meant for a 15-minute device
# slot, start-up included: unpacking takes seconds, the checks end within
# five minutes (each step is bounded: lit 3 minutes, each benchmark 1).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
gpu=0
full=0
bundle=
save=gpu-bench
die() { echo "gpu-check: error: $*" >&2; exit 1; }
while (($#)); do
  case $1 in
    --gpu) [[ $# -ge 2 ]] || die "--gpu needs a device number"; gpu=$2; shift 2 ;;
    --gpu=*) gpu=${1#*=}; shift ;;
    --full) full=1; shift ;;
    --save) [[ $# -ge 2 && -n $2 ]] || die "--save needs a directory"; save=$2; shift 2 ;;
    --save=*) save=${1#*=}; [[ -n $save ]] || die "--save needs a directory"; shift ;;
    -h|--help) sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    -*) die "unknown option '$1'" ;;
    *) [[ -z $bundle ]] || die "one bundle only"; bundle=$1; shift ;;
  esac
done
[[ -n $bundle ]] || die "usage: gpu-check.sh BUNDLE [--gpu N] [--full] [--save DIR]"
[[ $gpu =~ ^[0-9]+$ ]] || die "bad --gpu '$gpu'"
command -v python3 >/dev/null || die "python3 not found (lit needs it)"
mkdir -p "$save" 2>/dev/null && [[ -w $save ]] || die "cannot write to --save directory '$save'"
save=$(cd "$save" && pwd)
# DIR holds this run's files only: an earlier run's are removed first.
rm -f "$save"/gpu-{tsi,sss}.{json,cmd,run} "$save/gpu-device.json"
rm -rf "$save/logs"
mkdir -p "$save/logs" || die "cannot write to --save directory '$save'"
logs=$save/logs
# The end of a failed step's output, indented under its FAIL line.
show() { echo "gpu-check: $1 ($(wc -l <"$2") lines; the last 200):"; tail -n 200 "$2" | sed 's/^/  | /'; }

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
  printf '%s\n' "$info" >"$logs/gpu-info.txt"
  pass "tc-serve --gpu-info: ${info#tc-serve: }"
else
  printf '%s\n' "$info" >"$logs/gpu-info.txt"
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
mkdir -p "$suite/gpu-model/Inputs"
cp "$root/test/lit/gpu-model/Inputs/sigterm.py" "$suite/gpu-model/Inputs/"
cat >"$suite/lit.cfg.py" <<EOF
# The GPU lit tests against a tc bundle (written by scripts/gpu-check.sh).
import os
import lit.formats
config.name = "tc-gpu"
config.test_format = lit.formats.ShTest(True)
config.suffixes = [".test"]
config.excludes = ["Inputs", "gpu-model"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join("$work", "out")
config.environment["PATH"] = os.pathsep.join(
    ["$top/bin", "$top/libexec/tc", os.environ.get("PATH", "/usr/bin:/bin")])
for var in ("HOME", "TMPDIR", "TC_CUDA_LIBRARY"):
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
lit_out=$logs/lit.log
timeout 180 "$top/libexec/tc/lit" -v -a "$suite" >"$lit_out" 2>&1
lit_rc=$?
# Each test's verdict counts: "PASS: tc-gpu :: gpu/serve.test (1 of 5)".
while read -r verdict name; do
  case $verdict in
    PASS:) pass "lit $name" ;;
    FAIL:|XPASS:|UNRESOLVED:|TIMEOUT:) fail "lit $name" ;;
  esac
done < <(sed -n 's/^\(PASS:\|FAIL:\|XPASS:\|UNRESOLVED:\|TIMEOUT:\) tc-gpu :: \([^ ]*\).*/\1 \2/p' "$lit_out")
if ((lit_rc != 0)); then
  if ! grep -q '^\(FAIL\|UNRESOLVED\|TIMEOUT\):' "$lit_out"; then
    fail "lit (exit $lit_rc$( ((lit_rc == 124)) && echo ': timed out after 180 s'))"
    show "lit's output" "$lit_out"
  fi
  # What failed, for the report.
  sed -n '/^\*\*\*\*\*\*\*\*\*\*\*\*\*\*\*\*\*\*\*\* TEST/,/^\*\*\*\*\*\*\*\*\*\*$/p' "$lit_out" | tail -n 200
fi

# --- 3. the GPU benchmarks --------------------------------------------------
# Arguments "key value ..." as one JSON object of strings (no quoting by hand).
json_object() {
  python3 -c 'import json, sys; k = sys.argv[1::2]; v = sys.argv[2::2]; print(json.dumps(dict(zip(k, v)), indent=1))' "$@"
}
commit=$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo "?")
[[ -z $(git -C "$root" status --porcelain --untracked-files=no -- ':!docs' 2>/dev/null) ]] ||
  commit="$commit+changes"
quick=--quick
((full)) && quick=
saved=0
for scenario in tsi sss; do
  shown="bin/tc-bench $scenario --gpu=$gpu${quick:+ $quick} --json"
  echo "gpu-check: $shown"
  load=$(cut -d' ' -f1 /proc/loadavg)
  t0=$SECONDS
  if timeout 60 "$top/bin/tc-bench" "$scenario" "--gpu=$gpu" $quick --json \
      --ifunc-path "$top/ifuncs" >"$work/$scenario.json" 2>"$logs/$scenario.err"; then
    pass "tc-bench $scenario --gpu"
    cp "$work/$scenario.json" "$save/gpu-$scenario.json"
    printf '%s\n' "$shown" >"$save/gpu-$scenario.cmd"
    json_object commit "$commit" load "$load" seconds "$((SECONDS - t0))" \
      >"$save/gpu-$scenario.run"
    saved=$((saved + 1))
  else
    rc=$?
    # Its error line (the last that says error), then what it printed.
    why=$(grep -a 'error' "$logs/$scenario.err" | tail -n 1)
    [[ -n $why ]] || why=$(tail -n 1 "$logs/$scenario.err")
    ((rc == 124)) && why="timed out after 60 s${why:+; $why}"
    fail "tc-bench $scenario --gpu (exit $rc): $why"
    show "tc-bench $scenario --gpu's output" "$logs/$scenario.err"
  fi
done
if ((saved)); then
  json_object device "${info#tc-serve: }" bundle "$(basename "$top")" \
    >"$save/gpu-device.json"
fi

echo "gpu-check: $passed passed, $failed failed"
echo "gpu-check: device: ${info#tc-serve: }"
if ((saved)); then
  python3 "$root/scripts/bench-tables.py" --data "$save" --table gpu ||
    fail "bench-tables.py could not render $save"
  if [[ -f $save/gpu-tsi.json ]]; then
    python3 "$root/scripts/bench-tables.py" --data "$save" --table gpu-breakdown ||
      fail "bench-tables.py could not render $save"
  fi
  echo "gpu-check: saved in $save: copy its files into docs/bench/ and run bash scripts/bench-tables.sh --render"
fi
((failed == 0))
