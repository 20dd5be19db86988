#!/usr/bin/env bash
# Writes the archive fuzzer's seeds for format 3 (docs/archive-format.md)
# into archive-format/fuzz/corpus, from checked-in inputs, with a fixed
# signing key, so that a re-run writes the same bytes (for the same LLVM):
#   archive-format/fuzz/make-seeds.sh BUILD_DIR
# The format 2 seeds (tsi-thin, tsi-two-triples, zstd, deps-symbols,
# four-members) and the hand-written malformed-* ones
# (test/lit/tc-ar/malformed/*.test) are not made here.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "$1" && pwd)/bin
out=$src/archive-format/fuzz/corpus
in=$src/test/lit/tc-ar/Inputs
patch=(python3 "$src/test/lit/Inputs/patch-archive.py")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

# Two fixed Ed25519 keys (seeds), as tc-ar keygen writes them.
echo 'tc-ed25519-secret-key 18917cabeb617fdc91fb509bf825de2ef5b54a4a4b16183f1ed3ac0bb5dde9cd' > k1
echo 'tc-ed25519-secret-key 5a1c2e3f4b5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7' > k2

# Valid: every member stored with the dictionary (tc-cc's default), plain
# zstd, a thin copy (one member, two omitted digests), signed twice.
"$bin/tc-ar" create zstd-dict.tcfb --name tsi --deps "$in/tsi.deps" \
  --compress=zstd-dict "$in/tsi.x86_64.ll" "$in/tsi.aarch64.ll" \
  --role=source "$in/tsi.x86_64.ll"
"$bin/tc-ar" create v3-zstd.tcfb --name tsi --compress=zstd \
  "$in/tsi.x86_64.ll" "$in/tsi.aarch64.ll"
"$bin/tc-ar" thin zstd-dict.tcfb --target=x86_64-linux-gnu -o v3-thin.tcfb
"$bin/tc-ar" sign zstd-dict.tcfb --key k1 -o signed-twice.tcfb
"$bin/tc-ar" sign signed-twice.tcfb --key k2

# Damaged copies of those, one defect each.
sig=$("$bin/tc-ar" dump signed-twice.tcfb |
  sed -n 's/.*string tc.signatures = "ed25519 [0-9a-f]* \([0-9a-f]*\).*/\1/p')
flip=$(python3 -c "s='$sig'; print(('0' if s[0] != '0' else '1') + s[1:])")
"${patch[@]}" signed-twice.tcfb signature-does-not-verify.tcfb \
  "replace=$sig,$flip"
"${patch[@]}" signed-twice.tcfb malformed-signature-syntax.tcfb \
  replace=ed25519,ed25518
id=$("$bin/tc-ar" --version | sed -n 's/^zstd dictionary \([0-9a-f]*\) .*/\1/p')
"${patch[@]}" zstd-dict.tcfb malformed-unknown-dict.tcfb \
  "replace=$id,0123456789abcdef"
"${patch[@]}" zstd-dict.tcfb malformed-dict-key-missing.tcfb \
  replace=tc.dict,xx.dict
"${patch[@]}" zstd-dict.tcfb malformed-dict-without-zstd-dict.tcfb \
  replace-hex=7a7374642d6469637400,7a737464000000000000
"${patch[@]}" zstd-dict.tcfb malformed-truncated-zstd-dict.tcfb shrink=0,8
"${patch[@]}" v3-thin.tcfb malformed-v3-hash-key.tcfb replace=tc.name,tc.hash
"${patch[@]}" v3-thin.tcfb malformed-v3-size-key.tcfb replace=tc.dict,tc.size
"${patch[@]}" v3-thin.tcfb malformed-v3-manifest-image.tcfb shrink=-1,8
"$bin/tc-ar" extract v3-zstd.tcfb --target=x86_64-unknown-linux-gnu -o x86.bc
zstd -q -19 --no-content-size --no-check -c x86.bc > nosize.zst
"${patch[@]}" v3-zstd.tcfb malformed-v3-no-content-size.tcfb image=1,nosize.zst

cp zstd-dict.tcfb v3-zstd.tcfb v3-thin.tcfb signed-twice.tcfb \
  signature-does-not-verify.tcfb malformed-*.tcfb "$out/"
python3 "$src/test/lit/Inputs/hex2bin.py" <(sed -n '/^#--- a.hex/,$p' \
  "$src/test/lit/tc-ar/malformed/tc-version.test" | tail -n +2) \
  "$out/malformed-tc-version.tcfb"
