# CMake toolchain file: cross-build tc's runtime side (TC_RUNTIME_ONLY) for
# aarch64 Linux with clang-22 and lld, against a Debian arm64 sysroot that
# scripts/build-aarch64.sh assembles from Debian's packages (LLVM 22's own
# arm64 headers, cmake exports and libLLVM.so, UCX, zstd, ...).
#
#   cmake -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
#         -DTC_AARCH64_SYSROOT=/var/cache/tc-aarch64/sysroot -DTC_RUNTIME_ONLY=ON
#
# Every library, header, package and pkg-config file is looked up inside the
# sysroot only, so nothing of the x86_64 system (in particular its
# /usr/lib/llvm-22/include/llvm/Config/llvm-config.h) leaks into the build.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

if(NOT TC_AARCH64_SYSROOT AND DEFINED ENV{TC_AARCH64_SYSROOT})
  set(TC_AARCH64_SYSROOT "$ENV{TC_AARCH64_SYSROOT}")
endif()
if(NOT TC_AARCH64_SYSROOT OR NOT EXISTS "${TC_AARCH64_SYSROOT}/usr/lib/llvm-22")
  message(FATAL_ERROR "aarch64 toolchain: set TC_AARCH64_SYSROOT to the arm64 "
                      "sysroot scripts/build-aarch64.sh assembles")
endif()
# try_compile projects see the same sysroot.
set(CMAKE_TRY_COMPILE_PLATFORM_VARIABLES TC_AARCH64_SYSROOT)
set(ENV{TC_AARCH64_SYSROOT} "${TC_AARCH64_SYSROOT}")

set(CMAKE_SYSROOT "${TC_AARCH64_SYSROOT}")
set(CMAKE_C_COMPILER clang-22)
set(CMAKE_CXX_COMPILER clang++-22)
set(CMAKE_C_COMPILER_TARGET aarch64-linux-gnu)
set(CMAKE_CXX_COMPILER_TARGET aarch64-linux-gnu)
# lld-22 (/usr/lib/llvm-22/bin/ld.lld, next to clang-22) links for any target.
foreach(kind EXE SHARED MODULE)
  set(CMAKE_${kind}_LINKER_FLAGS_INIT "-fuse-ld=lld")
endforeach()

set(CMAKE_FIND_ROOT_PATH "${TC_AARCH64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(LLVM_DIR "${TC_AARCH64_SYSROOT}/usr/lib/llvm-22/lib/cmake/llvm"
    CACHE PATH "LLVM 22's arm64 cmake package, inside the sysroot")

# pkg-config (UCX) reads the sysroot's .pc files and prefixes their paths.
set(ENV{PKG_CONFIG_DIR} "")
set(ENV{PKG_CONFIG_LIBDIR}
    "${TC_AARCH64_SYSROOT}/usr/lib/aarch64-linux-gnu/pkgconfig:${TC_AARCH64_SYSROOT}/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${TC_AARCH64_SYSROOT}")
