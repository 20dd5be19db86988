#!/usr/bin/env python3
"""Checks that a tc bundle (scripts/bundle.sh) is self-contained.

  check-bundle.py BUNDLE
      For every ELF file under BUNDLE/bin, lib and libexec: each library it
      needs (DT_NEEDED), as ldd resolves it with no LD_LIBRARY_PATH, is inside
      BUNDLE, unless it is the base system (glibc, the loader, libgcc_s; these
      must not be in the bundle) or, for UCX's modules in lib/ucx only, an
      RDMA user-space driver. For the programs, every library in ldd's whole
      list is inside BUNDLE or the base system.
  check-bundle.py BUNDLE --loaded LD_DEBUG_FILE_OR_DIR...
      Every library the runs logged with LD_DEBUG=libs loaded (the file each
      "find library" search ended on, and each object whose initialiser
      ran) is inside BUNDLE, the base system, or an RDMA driver and what it
      loads.

Prints one line per file checked and a summary; any failure prints
"FAIL ..." and the exit status is 1."""
import os
import re
import subprocess
import sys

BASE = {"linux-vdso.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1",
        "libc.so.6", "libm.so.6", "libmvec.so.1", "libpthread.so.0",
        "libdl.so.2", "librt.so.1", "libresolv.so.2", "libutil.so.1",
        "libanl.so.1", "libgcc_s.so.1"}
RDMA = {"libibverbs.so.1", "libmlx5.so.1", "librdmacm.so.1"}

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL " + msg)


def is_elf(path):
    if os.path.islink(path) or not os.path.isfile(path):
        return False
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True,
                         text=True, check=True).stdout
    return re.findall(r"\(NEEDED\).*\[(.*)\]", out)


def clean_env():
    env = dict(os.environ)
    for var in ("LD_LIBRARY_PATH", "LD_PRELOAD"):
        env.pop(var, None)
    return env


def ldd(path):
    """name -> resolved path (None when not found), in ldd's order."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True,
                         env=clean_env()).stdout
    found = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (not found|(\S+) \(0x[0-9a-f]+\))", line)
        if m:
            found[m.group(1)] = m.group(3)
    return found


def inside(path, root):
    real = os.path.realpath(path)
    return real == root or real.startswith(root + os.sep)


def check_tree(root):
    files = []
    for top in ("bin", "lib", "libexec"):
        for d, _, names in os.walk(os.path.join(root, top)):
            files += [os.path.join(d, n) for n in names]
    files = sorted(f for f in files if is_elf(f))
    bundled = sorted(n for n in os.listdir(os.path.join(root, "lib"))
                     if ".so" in n)
    for n in bundled:
        if n in BASE or n in RDMA:
            fail("lib/%s: the base system and RDMA drivers stay the node's" % n)
    for f in files:
        rel = os.path.relpath(f, root)
        in_ucx = os.path.dirname(rel) == os.path.join("lib", "ucx")
        where = ldd(f)
        ok = True
        for n in needed(f):
            p = where.get(n)
            if n in BASE:
                if p and inside(p, root):
                    fail("%s: %s resolves inside the bundle" % (rel, n))
                    ok = False
                continue
            if n in RDMA and in_ucx:
                continue
            if p is None:
                fail("%s: needs %s, not found" % (rel, n))
                ok = False
            elif not inside(p, root):
                fail("%s: needs %s, found outside the bundle at %s"
                     % (rel, n, p))
                ok = False
        if rel.startswith(("bin" + os.sep, "libexec" + os.sep)):
            for n, p in where.items():
                if n not in BASE and (p is None or not inside(p, root)):
                    fail("%s: loads %s from %s" % (rel, n, p or "nowhere"))
                    ok = False
        if ok:
            print("ok %s" % rel)
    print("checked %d ELF files, %d libraries bundled" %
          (len(files), len(bundled)))


def check_loaded(root, args):
    logs = []
    for a in args:
        if os.path.isdir(a):
            logs += sorted(os.path.join(a, n) for n in os.listdir(a)
                           if os.path.isfile(os.path.join(a, n)))
        else:
            logs.append(a)
    loaded = []
    for log in logs:
        search, last = None, None
        with open(log, errors="replace") as f:
            for line in f:
                body = line.split(":", 1)[1].strip() if ":" in line else ""
                m = re.match(r"find library=(\S+)", body)
                if m or not body:
                    if search and last:
                        loaded.append((search, last))
                    search, last = (m.group(1) if m else None), None
                    continue
                m = re.match(r"trying file=(\S+)", body)
                if m:
                    last = m.group(1)
                    continue
                m = re.match(r"calling init: (\S+)", body)
                if m:
                    if search and last:
                        loaded.append((search, last))
                    search, last = None, None
                    loaded.append((os.path.basename(m.group(1)), m.group(1)))
        if search and last:
            loaded.append((search, last))
    # What the RDMA drivers the UCX modules load need in turn.
    allowed = set()
    for name, path in loaded:
        if name in RDMA and os.path.exists(path):
            allowed |= {n for n, p in ldd(path).items()}
    outside = set()
    inside_count = set()
    for name, path in loaded:
        base = os.path.basename(path)
        if inside(path, root):
            inside_count.add(os.path.realpath(path))
        elif base in BASE or name in BASE or name in RDMA or name in allowed:
            continue
        else:
            outside.add(path)
    for p in sorted(outside):
        fail("loaded %s, outside the bundle" % p)
    if not loaded:
        fail("no library loads in the logs")
    print("%d libraries loaded from the bundle, %d from outside it (besides "
          "the base system and RDMA drivers)" % (len(inside_count),
                                                len(outside)))


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    root = os.path.realpath(args[0])
    if len(args) > 1 and args[1] == "--loaded":
        check_loaded(root, args[2:])
    else:
        check_tree(root)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
