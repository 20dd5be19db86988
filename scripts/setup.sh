#!/usr/bin/env bash
# Installs what tc needs to build, test and run on Debian 12, as root.
# Idempotent: installs only what is missing, and runs apt-get update only then.
set -euo pipefail

PACKAGES=(
  # build
  cmake ninja-build pkg-config g++ git python3 file
  # LLVM / Clang 22 (tools for lit/FileCheck, runtimes for sanitizers+fuzzers)
  llvm-22 llvm-22-dev llvm-22-tools clang-22 libclang-22-dev libclang-cpp22-dev
  libclang-rt-22-dev libzstd-dev zlib1g-dev libsodium-dev
  # UCX 1.13 and its perftest (the benchmarks' reference)
  libucx-dev ucx-utils
  # tests (iproute2: network namespaces for the multi-host benchmark test)
  libgtest-dev iproute2
  # scripts/plot.py (Debian's /usr/bin/python3; never pip)
  python3-matplotlib
  # the Python package (python/, docs/python.md): cffi over libtc, numba
  # (with llvmlite and numpy) for ifuncs written in Python, Python's headers
  # for the cffi extension
  python3-cffi python3-numba python3-dev
  # PMIx bootstrap (issue #20): libtc's wire-up under mpirun / srun, and
  # Open MPI's mpirun (a PMIx server) for its tests
  libpmix-dev openmpi-bin
  # Slurm (issue #36): a one-node cluster started by scripts/slurm-local.sh
  # for `srun --mpi=pmix` (the pmix plugin is in slurm-wlm-basic-plugins,
  # which slurmd pulls in; it dlopens libpmix-dev's libpmix.so)
  slurmctld slurmd slurm-client munge
  # MPI one-sided reference of tc-bench's mpi mode (examples/mpi-rma)
  libopenmpi-dev
  # aarch64 cross headers so tc-cc can compile ifuncs for Arm targets
  libc6-dev-arm64-cross libstdc++-12-dev-arm64-cross
  # libclc's nvptx64 bitcode (/usr/lib/clc/nvptx64--.bc): libm for GPU
  # members (tc-cc --offload-arch, issue #35)
  libclc-22
  # aarch64 cross build and its tests under qemu (scripts/build-aarch64.sh,
  # which also assembles the arm64 sysroot from Debian's arm64 packages)
  lld-22 qemu-user
  # the relocatable bundle (scripts/bundle.sh): RUNPATHs of the copied
  # libraries; xz-utils packs it
  patchelf xz-utils
)

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: error: missing packages (${missing[*]}); run as root" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#PACKAGES[@]} packages present"
fi
