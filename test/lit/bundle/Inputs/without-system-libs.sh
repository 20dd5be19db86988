#!/bin/sh
# Runs COMMAND with the system's libraries out of reach but the base system:
# in the mount namespace `unshare --mount` gives it, /usr/lib/llvm-22 becomes
# a tmpfs holding copies of glibc's libraries, the loader and libgcc_s, and
# that tmpfs is mounted over /usr/lib/x86_64-linux-gnu (and over
# /lib/x86_64-linux-gnu where that is another directory); /usr/lib/clc is
# empty. So no LLVM, UCX, zstd, libclc, ... of the system can be loaded;
# tools outside the namespace see nothing of it, and it all goes when
# COMMAND ends.
#   unshare --mount --propagation private sh without-system-libs.sh COMMAND...
set -eu
lib=/usr/lib/x86_64-linux-gnu
mount -t tmpfs -o size=64m,mode=755 tmpfs /usr/lib/llvm-22
for n in ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libmvec.so.1 \
         libpthread.so.0 libdl.so.2 librt.so.1 libresolv.so.2 libutil.so.1 \
         libanl.so.1 libgcc_s.so.1; do
  if [ -e "$lib/$n" ]; then cp -L "$lib/$n" /usr/lib/llvm-22/; fi
done
# libclc, which tc-cc links GPU members' libm from.
if [ -d /usr/lib/clc ]; then
  mount -t tmpfs -o size=1m,mode=755 tmpfs /usr/lib/clc
fi
# Hide the other directory first: the last mount takes the tools away.
if [ ! /lib/x86_64-linux-gnu -ef "$lib" ]; then
  mount --bind /usr/lib/llvm-22 /lib/x86_64-linux-gnu
fi
mount --bind /usr/lib/llvm-22 "$lib"
exec "$@"
