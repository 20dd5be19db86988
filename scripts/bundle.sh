#!/usr/bin/env bash
# Packs a relocatable binary bundle of a tc build, as LLVM's release tarballs
# are: unpack it anywhere on an x86_64 Linux machine with glibc >= the build
# machine's (2.36 here) and run bin/tc-serve etc. with no package installed
# and no environment variable set.
#   bash scripts/bundle.sh [--build DIR] [-o FILE] [--xz-level N]
# Writes DIR/tc-VERSION-x86_64-linux.tar.xz (VERSION: the project's CMake
# version), one top directory tc-VERSION-x86_64-linux/ holding
#   bin/            tc-cc tc-ar tc-serve tc-send tc-bench ucx_perftest
#   lib/            libtc, TCPasses.so, every library those need that is not
#                   the base system (LLVM, clang-cpp, UCX, zstd, sodium, PMIx
#                   and what they load), lib/ucx/ (UCX's transport modules),
#                   lib/clang/N/include (clang's resource headers, for tc-cc),
#                   lib/clc/nvptx64--.bc (libclc: libm for tc-cc's GPU members),
#                   lib/cmake/TC and lib/pkgconfig (find_package(TC), tc.pc)
#   include/tc/     ifunc.h, tc.h
#   ifuncs/         the example archives (tc-bench's default ifunc path)
#   libexec/tc/     lit, FileCheck, not, split-file: to run lit tests from
#                   the bundle (share/tc/lit holds lit's Python package)
#   share/doc/tc/   the bundled libraries' copyright files
# Every ELF file has RUNPATH $ORIGIN-relative; UCX finds its modules in the
# ucx/ directory beside libucs.so.0 (its own rule). The base system, never
# bundled: glibc (libc, libm, libmvec, libpthread, libdl, librt, libresolv,
# libutil, libanl, ld-linux) and libgcc_s (which glibc itself loads to
# unwind); and the RDMA user-space drivers (libibverbs, libmlx5, librdmacm),
# which only UCX's InfiniBand modules load, and which must match the node's
# kernel driver. --xz-level sets xz's preset (default 9e; 0-1 for quick
# checks). Needs: a normal (not sanitized) build of this tree, patchelf, xz.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
out=
level=9e

die() { echo "bundle: error: $*" >&2; exit 1; }

while (($#)); do
  case $1 in
    --build) [[ $# -ge 2 ]] || die "--build needs a directory"; build=$2; shift 2 ;;
    --build=*) build=${1#*=}; shift ;;
    -o) [[ $# -ge 2 ]] || die "-o needs a file name"; out=$2; shift 2 ;;
    --xz-level) [[ $# -ge 2 ]] || die "--xz-level needs a preset"; level=$2; shift 2 ;;
    --xz-level=*) level=${1#*=}; shift ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
    *) die "unknown argument '$1' (usage: bundle.sh [--build DIR] [-o FILE] [--xz-level N])" ;;
  esac
done
[[ $level =~ ^[0-9]e?$ ]] || die "--xz-level '$level': want 0-9, optionally with e"
[[ -d $build ]] || die "no build directory '$build' (run scripts/build.sh first)"
build=$(cd "$build" && pwd)

# --- what the build must hold --------------------------------------------
cache=$build/CMakeCache.txt
[[ -f $cache ]] || die "'$build' is not a tc build (no CMakeCache.txt; run scripts/build.sh)"
cache_get() { sed -n "s/^$1:[A-Z]*=//p" "$cache" | head -n1; }
version=$(cache_get CMAKE_PROJECT_VERSION)
[[ -n $version ]] || die "'$build': no project version in CMakeCache.txt"
case $(cache_get TC_SANITIZE | tr a-z A-Z) in
  ''|OFF|0|FALSE|NO) ;;
  *) die "'$build' is a sanitizer build (TC_SANITIZE=$(cache_get TC_SANITIZE)); bundle a normal build" ;;
esac
arch=$(uname -m)
tools=(tc-cc tc-ar tc-serve tc-send tc-bench)
for f in "${tools[@]/#/bin/}" lib/libtc.so.0 lib/TCPasses.so ifuncs/tsi.tcfb; do
  [[ -e $build/$f ]] || die "'$build' has no $f (build it first: ninja -C '$build')"
done
machine=$(readelf -h "$build/bin/tc-serve" | sed -n 's/^ *Machine: *//p')
case $arch:$machine in
  x86_64:*X86-64*|aarch64:*AArch64*) ;;
  *) die "'$build' holds $machine programs; bundle.sh packs builds for this host ($arch)" ;;
esac
for t in patchelf xz tar readelf objdump ldd cmake; do
  command -v "$t" >/dev/null || die "'$t' not found (bash scripts/setup.sh installs it)"
done
llvm_dir=$(cache_get LLVM_DIR)   # <prefix>/lib/cmake/llvm
llvm_bin=$(cd "$llvm_dir/../../.." 2>/dev/null && pwd)/bin
[[ -x $llvm_bin/FileCheck && -x $llvm_bin/lit ]] ||
  die "no FileCheck/lit in LLVM's tool directory '$llvm_bin' (llvm-22-tools)"
strip=$llvm_bin/llvm-strip
[[ -x $strip ]] || strip=$(command -v strip) || die "no strip"

name=tc-$version-$arch-linux
out=${out:-$build/$name.tar.xz}
[[ -d $(dirname "$out") ]] || die "no directory for the output '$out'"

stage=$(mktemp -d "${TMPDIR:-/tmp}/tc-bundle.XXXXXX")
trap 'rm -rf "$stage" "$out.tmp"' EXIT
top=$stage/$name
mkdir -p "$top"/{bin,lib/ucx,libexec/tc,ifuncs,share/tc,share/doc/tc}

# --- tc itself -------------------------------------------------------------
# The install rules give tc-cc, tc-ar, tc-serve, tc-send, libtc, the passes
# plugin, the headers and the CMake / pkg-config files, stripped.
cmake --install "$build" --prefix "$top" --strip >/dev/null
[[ -f $top/lib/libtc.so.0 ]] || die "cmake --install put libtc somewhere other than lib/"
install -m 755 "$build/bin/tc-bench" "$top/bin/"
"$strip" --strip-all "$top/bin/tc-bench"
cp "$build"/ifuncs/*.tcfb "$top/ifuncs/"

# Test tools: lit (Python, run by the node's python3) and LLVM's FileCheck,
# not and split-file, so lit tests can run from the bundle alone.
for t in FileCheck not split-file; do
  install -m 755 "$llvm_bin/$t" "$top/libexec/tc/"
done
lit_pkg=$(sed -n 's/^sys.path.insert(1, *"\(.*\)")$/\1/p' "$llvm_bin/lit")
[[ -d $lit_pkg/lit ]] || die "cannot find lit's Python package (from $llvm_bin/lit)"
cp -r "$lit_pkg/lit" "$top/share/tc/lit"
find "$top/share/tc/lit" -name '__pycache__' -prune -exec rm -rf {} +
rm -rf "$top/share/tc/lit/ExampleTests.ObjDir"
cat >"$top/libexec/tc/lit" <<'EOF'
#!/usr/bin/env python3
# lit from the tc bundle: its Python package is in ../../share/tc/lit.
import os, sys
here = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(1, os.path.join(here, "..", "..", "share", "tc"))
from lit.main import main
if __name__ == "__main__":
    main()
EOF
chmod 755 "$top/libexec/tc/lit"


# clang's resource headers (stddef.h, stdint.h, the intrinsics): tc-cc finds
# them at ../lib/clang/N/include from its own directory, as clang does.
resource=$("$llvm_bin/clang" -print-resource-dir)
[[ -d $resource/include ]] || die "no clang resource headers in '$resource'"
mkdir -p "$top/lib/clang/$(basename "$resource")"
cp -r "$resource/include" "$top/lib/clang/$(basename "$resource")/"

# libclc's nvptx64 bitcode, which tc-cc links GPU members' libm calls from:
# a relocated tc-cc takes <prefix>/lib/clc/nvptx64--.bc.
libclc=$(cache_get TC_LIBCLC_NVPTX)
[[ -f $libclc ]] || die "no libclc nvptx64 bitcode '$libclc' (libclc-22; bash scripts/setup.sh)"
mkdir -p "$top/lib/clc"
cp -L "$libclc" "$top/lib/clc/nvptx64--.bc"
chmod 644 "$top/lib/clc/nvptx64--.bc"

# UCX's transport modules: UCX loads lib<framework>_<name><ext> from the
# ucx/ directory beside libucs, <ext> being libucs's own name from its first
# dot (.so.0 here).
libucs=$(ldd "$build/bin/tc-serve" | awk '$1 == "libucs.so.0" { print $3 }')
[[ -f $libucs ]] || die "tc-serve does not load libucs.so.0"
for m in "$(dirname "$libucs")"/ucx/lib*.so.0; do
  [[ -e $m ]] || continue
  cp -L "$m" "$top/lib/ucx/$(basename "$m")"
done
# UCX's reference benchmark, which tc-bench runs from PATH when it is
# there: the one built with this UCX.
if perftest=$(command -v ucx_perftest) &&
   [[ $(ldd "$perftest" | awk '$1 == "libucs.so.0" { print $3 }') -ef $libucs ]]; then
  install -m 755 "$perftest" "$top/bin/"
fi

# --- the libraries they need ---------------------------------------------
base_re='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1|libc\.so\.6|libm\.so\.6|libmvec\.so\.1|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libresolv\.so\.2|libutil\.so\.1|libanl\.so\.1|libgcc_s\.so\.1)$'
hw_re='^(libibverbs\.so\.1|libmlx5\.so\.1|librdmacm\.so\.1)$'
# Z3 (23 MB, 7 MB packed) comes only through LLVM's static analyzer support
# (llvm::CreateZ3Solver, which tc never calls): objects whose references to
# it are all lazily bound PLT slots lose the dependency (lazy_only below).
lazy_re='^libz3\.so\.[0-9]+$'
is_elf() { [[ -f $1 && ! -L $1 && $(head -c4 "$1" | od -An -c | tr -d ' ') == '177ELF' ]]; }
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

# Walks the NEEDED graph from each original, resolving names the way the
# loader does for that file (ldd), and copies every library outside the base
# system into lib/ under its soname. Originals: the build's own files (their
# build RUNPATHs still find LLVM and PMIx) and the system's UCX modules.
declare -A copied=() lazy=()
copy_deps() { # FILE
  local f=$1 n p
  declare -A where=()
  while read -r n p; do where[$n]=$p; done < <(ldd "$f" 2>/dev/null |
    awk '$2 == "=>" { print $1, $3 }')
  for n in $(needed "$f"); do
    [[ $n =~ $base_re || $n =~ $hw_re ]] && continue
    if [[ $n =~ $lazy_re ]]; then lazy[$n]=${where[$n]:-}; continue; fi
    [[ -n ${copied[$n]+x} || -e $top/lib/$n || -e $top/lib/ucx/$n ]] && continue
    p=${where[$n]:-}
    [[ -n $p && $p != "not" && -f $p ]] || die "$(basename "$f") needs $n, which the loader cannot find here"
    copied[$n]=$p
    cp -L "$p" "$top/lib/$n"
    chmod 644 "$top/lib/$n"
    copy_deps "$p"
  done
}
for f in "${tools[@]/#/$build/bin/}" "$build/lib/libtc.so.0" "$build/lib/TCPasses.so" \
         "$top/bin/ucx_perftest" "$top"/lib/ucx/* "$top"/libexec/tc/*; do
  is_elf "$f" && copy_deps "$f"
done

# A library matching lazy_re is dropped from an object's NEEDED when every
# relocation by which the object could bind a symbol that library defines is
# a lazy PLT slot (JUMP_SLOT; a reference binds to a definition of the same
# version, an unversioned one to any; name@@V is the object's own symbol):
# the loader binds those only when called, and the object loads without the
# library (unless LD_BIND_NOW is set). Otherwise the library is bundled.
lazy_only() { # OBJECT LIBRARY
  awk 'NR == FNR { defs[$1] = defs[$1] " " $2 " "; next }
       NF >= 6 && $1 ~ /^[0-9a-f]+$/ && $5 !~ /@@/ {
         name = $5; ver = ""
         if (i = index(name, "@")) { ver = substr(name, i + 1); name = substr(name, 1, i - 1) }
         if ((name in defs) && (ver == "" || index(defs[name], " " ver " ")) &&
             $3 !~ /_JUMP_SLOT$/) bad = 1 }
       END { exit bad }' \
    <(readelf -W --dyn-syms "$2" | awk '$7 != "UND" && NF >= 8 {
        n = $8; v = ""; sub(/@@/, "@", n)
        if (i = index(n, "@")) { v = substr(n, i + 1); n = substr(n, 1, i - 1) }
        print n, v }') \
    <(readelf -W -r "$1")
}
for n in "${!lazy[@]}"; do
  p=${lazy[$n]}
  [[ -f $p ]] || die "cannot find $n, which LLVM needs"
  while IFS= read -r -d '' f; do
    is_elf "$f" && needed "$f" | grep -qx "$n" || continue
    if lazy_only "$f" "$p"; then
      patchelf --remove-needed "$n" "$f"
    elif [[ -z ${copied[$n]+x} ]]; then
      copied[$n]=$p
      cp -L "$p" "$top/lib/$n"
      chmod 644 "$top/lib/$n"
      copy_deps "$p"
    fi
  done < <(find "$top/bin" "$top/lib" "$top/libexec" -type f -print0)
done

# RUNPATH: relative to each file, so the tree works wherever it is unpacked.
# One that already leads to lib/ stays (libLLVM's $ORIGIN/../lib); files
# that need only the base system get none.
set_runpath() { # FILE RUNPATH
  local cur d n own=
  cur=$(readelf -d "$1" | sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p')
  for n in $(needed "$1"); do [[ $n =~ $base_re ]] || own=1; done
  if [[ -z $own ]]; then
    [[ -z $cur ]] || patchelf --remove-rpath "$1"
    return 0
  fi
  if [[ $cur == '$ORIGIN'* && $cur != *:* ]]; then
    d=$(realpath -m "$(dirname "$1")/${cur#'$ORIGIN'}")
    [[ $d == "$top/lib" ]] && return 0
  fi
  patchelf --set-rpath "$2" "$1"
}
for f in "$top"/bin/*; do is_elf "$f" && set_runpath "$f" '$ORIGIN/../lib'; done
for f in "$top"/lib/*; do is_elf "$f" && set_runpath "$f" '$ORIGIN'; done
for f in "$top"/lib/ucx/*; do is_elf "$f" && set_runpath "$f" '$ORIGIN:$ORIGIN/..'; done
for f in "$top"/libexec/tc/*; do is_elf "$f" && set_runpath "$f" '$ORIGIN/../../lib'; done

# Check what was built: every library each file needs directly, outside the
# base system and the RDMA drivers, resolves inside the tree (ldd with no
# LD_LIBRARY_PATH, the system's copies still there to be found instead).
while IFS= read -r -d '' f; do
  is_elf "$f" || continue
  declare -A where=()
  while read -r n p; do where[$n]=$p; done < <(
    env -u LD_LIBRARY_PATH -u LD_PRELOAD ldd "$f" 2>/dev/null |
    awk '$2 == "=>" { print $1, ($3 == "not" ? "" : $3) }')
  for n in $(needed "$f"); do
    [[ $n =~ $base_re || $n =~ $hw_re ]] && continue
    p=${where[$n]:-}
    [[ -n $p ]] || die "${f#"$top"/} needs $n, which is not in the bundle"
    [[ $(realpath "$p") == "$top"/* ]] ||
      die "${f#"$top"/} would load $n from '$p', not from the bundle"
  done
  unset where
done < <(find "$top/bin" "$top/lib" "$top/libexec" -type f -print0)

# The bundled libraries' copyright files, by Debian package.
for n in "${!copied[@]}"; do
  pkg=$(dpkg -S "$(realpath "${copied[$n]}")" 2>/dev/null | head -n1 | cut -d: -f1) || true
  [[ -n $pkg && -f /usr/share/doc/$pkg/copyright ]] || continue
  mkdir -p "$top/share/doc/tc/$pkg"
  cp "/usr/share/doc/$pkg/copyright" "$top/share/doc/tc/$pkg/"
done

# The oldest glibc that can run it: the newest GLIBC_x.y version any file needs.
glibc=$({ find "$top/bin" "$top/lib" "$top/libexec" -type f -print0 |
  xargs -0 objdump -T 2>/dev/null || true; } | { grep -o 'GLIBC_[0-9][0-9.]*' || true; } |
  sort -u -V | tail -n1)

# --- the archive -----------------------------------------------------------
# Sorted, owned by root, dated by the last commit: the same build gives the
# same tarball.
# The branch/call/jump filter for the machine's code: 4% smaller here.
case $arch in x86_64) bcj=--x86 ;; aarch64) bcj=--arm64 ;; *) bcj= ;; esac
mtime=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)}
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner \
    --mtime="@$mtime" -cf - "$name" | xz -T0 $bcj "--lzma2=preset=$level" >"$out.tmp"
mv -f "$out.tmp" "$out"
unpacked=$(du -sb "$top" | cut -f1)
echo "bundle: $out: $(stat -c %s "$out") bytes ($((unpacked / 1048576)) MiB unpacked, ${#copied[@]} libraries bundled, needs glibc >= ${glibc#GLIBC_})"
