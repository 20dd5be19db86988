#!/usr/bin/env python3
"""Flips every padding byte of a tc archive, one at a time (bit N % 8 of
the byte at archive offset N, so every bit position is tried), and runs a
command on each copy; every copy must be refused with the reader's message
naming that byte (its binary, its offset in the binary and in the archive)
and its value.

usage: flip-padding.py ARCHIVE WORKFILE COMMAND...

The padding is found here, from docs/archive-format.md, without the reader:
every byte of a binary that is not its header, entry, string table, one of
its strings (with the NUL) or its image. COMMAND runs with WORKFILE as its
last argument. Prints one summary line, then the first refusal."""
import struct
import subprocess
import sys


def padding(data):
    """(archive offset, binary's name, binary's offset) of every padding
    byte, and the number of binaries."""
    out, off, n = [], 0, 0
    while off < len(data):
        size, entry, _ = struct.unpack_from("<QQQ", data, off + 8)
        str_off, nstr, img_off, img_size = struct.unpack_from(
            "<QQQQ", data, off + entry + 8)
        used = [(0, 32), (entry, entry + 40),
                (str_off, str_off + 16 * nstr), (img_off, img_off + img_size)]
        for i in range(nstr):
            for at in struct.unpack_from("<QQ", data, off + str_off + 16 * i):
                end = data.index(b"\0", off + at) - off
                used.append((at, end + 1))
        name = "manifest" if n == 0 else "member %d" % (n - 1)
        for b in range(size):
            if not any(lo <= b < hi for lo, hi in used):
                out.append((off + b, name, off))
        off += size
        n += 1
    return out, n


def main():
    archive, work, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
    data = open(archive, "rb").read()
    pads, binaries = padding(data)
    if not pads:
        sys.exit("flip-padding.py: no padding found")
    nonzero = [p for p, _, _ in pads if data[p] != 0]
    if nonzero:
        sys.exit("flip-padding.py: the writer left non-zero padding at %s"
                 % nonzero)
    first = None
    for p, name, off in pads:
        mut = bytearray(data)
        mut[p] ^= 1 << (p % 8)
        open(work, "wb").write(mut)
        r = subprocess.run(cmd + [work], capture_output=True, text=True)
        want = ("%s at offset %d: padding byte at offset %d (archive offset "
                "%d) is 0x%02x; padding must be zero\n"
                % (name, off, p - off, p, 1 << (p % 8)))
        if r.returncode == 0 or want not in r.stderr:
            sys.exit("flip-padding.py: byte %d: exit %d, %r (expected %r)"
                     % (p, r.returncode, r.stderr, want))
        if first is None:
            first = r.stderr.strip()
    print("%d padding bytes in %d binaries (%d in members), all zero, each "
          "flip refused" % (len(pads), binaries,
                            sum(name != "manifest" for _, name, _ in pads)))
    print(first)


if __name__ == "__main__":
    main()
