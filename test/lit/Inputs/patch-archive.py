#!/usr/bin/env python3
"""Damage a tc archive in one precise way, for tests of the reader.
Usage: patch-archive.py IN OUT EDIT...
  replace=OLD,NEW     replace the first occurrence of the ASCII string OLD with
                      NEW (same length, so no offset moves)
  replace-hex=OLD,NEW the same with bytes given in hex (NULs included)
  shrink=N,BYTES      make member N's image BYTES shorter (its ImageSize field;
                      the cut-off bytes become padding, zeroed as padding must
                      be); N = -1: the manifest's
  image=N,FILE        store FILE's bytes as member N's image, in place (they
                      must fit in the binary: no offset moves; what is left
                      of the old image becomes zero padding)"""
import struct
import sys

data = bytearray(open(sys.argv[1], "rb").read())
for edit in sys.argv[3:]:
    op, arg = edit.split("=", 1)
    if op in ("replace", "replace-hex"):
        old, new = (bytes.fromhex(s) if op == "replace-hex" else s.encode()
                    for s in arg.split(",", 1))
        assert len(old) == len(new), "replace keeps the length"
        at = data.find(old)
        assert at >= 0, "%r not found" % old
        data[at:at + len(old)] = new
    elif op in ("shrink", "image"):
        member, val = arg.split(",", 1)
        off = 0
        for _ in range(int(member) + 1):  # skip the manifest, earlier members
            off += struct.unpack_from("<Q", data, off + 8)[0]
        entry = off + struct.unpack_from("<Q", data, off + 16)[0]
        size = struct.unpack_from("<Q", data, entry + 32)[0]
        at = off + struct.unpack_from("<Q", data, entry + 24)[0]
        if op == "shrink":
            struct.pack_into("<Q", data, entry + 32, size - int(val))
            data[at + size - int(val):at + size] = bytes(int(val))
        else:
            image = open(val, "rb").read()
            end = off + struct.unpack_from("<Q", data, off + 8)[0]
            assert at + len(image) <= end, "the image fits in the binary"
            data[at:at + max(size, len(image))] = (
                image + bytes(max(size - len(image), 0)))
            struct.pack_into("<Q", data, entry + 32, len(image))
    else:
        sys.exit("unknown edit " + edit)
open(sys.argv[2], "wb").write(data)
