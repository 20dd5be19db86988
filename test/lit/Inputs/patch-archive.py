#!/usr/bin/env python3
"""Damage a tc archive in one precise way, for tests of the reader.
Usage: patch-archive.py IN OUT EDIT...
  replace=OLD,NEW     replace the first occurrence of the ASCII string OLD with
                      NEW (same length, so no offset moves)
  shrink=N,BYTES      make member N's image BYTES shorter (its ImageSize field;
                      the cut-off bytes become padding)"""
import struct
import sys

data = bytearray(open(sys.argv[1], "rb").read())
for edit in sys.argv[3:]:
    op, arg = edit.split("=", 1)
    if op == "replace":
        old, new = (s.encode() for s in arg.split(",", 1))
        assert len(old) == len(new), "replace keeps the length"
        at = data.find(old)
        assert at >= 0, "%r not found" % old
        data[at:at + len(old)] = new
    elif op == "shrink":
        member, cut = (int(s) for s in arg.split(","))
        off = 0
        for _ in range(member + 1):  # skip the manifest and earlier members
            off += struct.unpack_from("<Q", data, off + 8)[0]
        entry = off + struct.unpack_from("<Q", data, off + 16)[0]
        size = struct.unpack_from("<Q", data, entry + 32)[0]
        struct.pack_into("<Q", data, entry + 32, size - cut)
    else:
        sys.exit("unknown edit " + edit)
open(sys.argv[2], "wb").write(data)
