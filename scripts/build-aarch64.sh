#!/usr/bin/env bash
# Cross-builds tc's runtime side (libtc, tc-serve, tc-send, tc-ar, tc-bench,
# tc-unittests) for aarch64 Linux into build-aarch64/bin, to run under
# qemu-aarch64 (scripts/run-aarch64.sh) or on an Arm node.
#   bash scripts/build-aarch64.sh [extra cmake args...]
#
# Sets up what it needs, idempotently:
#  - host packages: qemu-user (runs the programs), lld-22 (links for aarch64),
#    clang-22; apt's arm64 package lists (dpkg --add-architecture arm64: that
#    changes only what apt can see, no :arm64 package is ever installed);
#  - an arm64 sysroot: Debian's arm64 packages (PACKAGES below) fetched with
#    `apt-get download` into $TC_AARCH64_CACHE/debs and unpacked with
#    `dpkg -x` into $TC_AARCH64_CACHE/sysroot. The cache defaults to
#    /var/cache/tc-aarch64 (shared by every checkout on the machine, outside
#    the repository); a stamp file skips all of it when the package list is
#    unchanged, so a re-run costs nothing and needs no network.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${TC_AARCH64_CACHE:-/var/cache/tc-aarch64}
sysroot=$cache/sysroot
dir=${TC_AARCH64_BUILD:-$root/build-aarch64}

# The arm64 packages, with their run-time dependencies spelled out (this is
# not apt resolving: only what building and running tc needs).
PACKAGES=(
  # C/C++ runtime, headers and crt files (clang finds gcc 12's in the sysroot)
  libc6 libc6-dev linux-libc-dev libcrypt1 libcrypt-dev libgcc-s1
  libgcc-12-dev libstdc++6 libstdc++-12-dev libatomic1
  # LLVM 22: arm64 headers (its own llvm-config.h), cmake exports, libLLVM,
  # and the libraries libLLVM loads
  libllvm22 llvm-22-dev llvm-22 llvm-22-tools libffi8 libedit2 libbsd0 libmd0
  # (LLVM's cmake exports check that libLTO, LLVMgold and lli exist)
  llvm-22-linker-tools llvm-22-runtime
  libtinfo6 libxml2 libicu72 liblzma5 libz3-4 libzstd1 zlib1g libzstd-dev
  zlib1g-dev
  # UCX 1.13 and what libucx0 loads
  libucx0 libucx-dev libnuma1 libibverbs1 librdmacm1 libnl-3-200
  libnl-route-3-200
  # libsodium (archive signatures), GoogleTest (tc-unittests under qemu)
  libsodium23 libsodium-dev libgtest-dev
)
HOST_PACKAGES=(qemu-user lld-22 clang-22)

log() { echo "build-aarch64: $*"; }
die() { echo "build-aarch64: error: $*" >&2; exit 1; }

setup_host() {
  local missing=() p status
  for p in "${HOST_PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] || missing+=("$p")
  done
  if ((${#missing[@]})); then
    [[ $(id -u) -eq 0 ]] || die "missing packages (${missing[*]}); run as root"
    log "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
}

setup_sysroot() {
  local want
  want=$(printf '%s\n' "${PACKAGES[@]}")
  if [[ -f "$cache/sysroot.stamp" && "$(cat "$cache/sysroot.stamp")" == "$want" ]]; then
    log "sysroot up to date: $sysroot"
    return
  fi
  mkdir -p "$cache/debs" || die "cannot create $cache (set TC_AARCH64_CACHE)"
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    [[ $(id -u) -eq 0 ]] || die "apt cannot see arm64 packages; run as root"
    log "adding arm64 to apt's architectures (package lists only)"
    dpkg --add-architecture arm64
    apt-get update -q
  fi
  local fetch=() p
  for p in "${PACKAGES[@]}"; do
    compgen -G "$cache/debs/${p}_*.deb" >/dev/null || fetch+=("$p:arm64")
  done
  if ((${#fetch[@]})); then
    log "downloading ${#fetch[@]} arm64 packages into $cache/debs"
    # apt's sandbox user may not write there; the download is still verified.
    (cd "$cache/debs" && apt-get download -q "${fetch[@]}" 2>&1 |
       grep -v 'Download is performed unsandboxed' || true)
    for p in "${PACKAGES[@]}"; do
      compgen -G "$cache/debs/${p}_*.deb" >/dev/null ||
        die "apt-get download $p:arm64 failed"
    done
  fi
  log "unpacking into $sysroot"
  local tmp=$cache/sysroot.new
  rm -rf "$tmp"
  mkdir -p "$tmp"
  for p in "${PACKAGES[@]}"; do
    dpkg -x "$(compgen -G "$cache/debs/${p}_*.deb" | sort -V | tail -1)" "$tmp"
  done
  # Absolute symlinks (libfoo.so -> /lib/aarch64-linux-gnu/libfoo.so.1) would
  # point into the host: make them relative, inside the sysroot.
  local link target
  while IFS= read -r -d '' link; do
    target=$(readlink "$link")
    [[ "$target" == /* ]] || continue
    ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$tmp$target")" "$link"
  done < <(find "$tmp" -type l -print0)
  rm -rf "$sysroot"
  mv "$tmp" "$sysroot"
  echo "$want" >"$cache/sysroot.stamp"
}

setup_host
# One assembler at a time (several checkouts share the cache).
mkdir -p "$cache" || die "cannot create $cache (set TC_AARCH64_CACHE)"
exec 9>"$cache/.lock"
flock 9
setup_sysroot
flock -u 9

# tc-cc stays a host tool: the archives are the same for every target, so the
# cross build builds no ifunc archive (TC_RUNTIME_ONLY) and tests use the
# host build's.
if [[ ! -f "$dir/build.ninja" ]]; then
  cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" \
    -DTC_AARCH64_SYSROOT="$sysroot" -DTC_RUNTIME_ONLY=ON "$@"
fi
ninja -C "$dir"
echo "$sysroot" >"$dir/sysroot.path"
