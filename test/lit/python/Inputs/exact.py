"""Python ifuncs (tsi, wsum, sss from examples/python) sent to the target at
$TC_ADDR; prints what the target's region holds after each, which is
exact on every ISA. usage: exact.py TSI.tcfb WSUM.tcfb SSS.tcfb"""
import os
import struct
import sys

import numpy as np

import tc

with tc.Worker() as w, w.connect(os.environ["TC_ADDR"]) as ep:
    tsi, wsum, sss = (w.register(p) for p in sys.argv[1:4])
    ep.send(tsi, count=3)
    print("tsi:", struct.unpack("<Q", ep.read_region(8))[0])
    # 1*2 + 3*4 + 5*0.5 + 0.1*10 = 17.5 (0.1 * 10 rounds to exactly 1.0)
    ep.send(wsum, np.array([1, 2, 3, 4, 5, 0.5, 0.1, 10], dtype=np.float64))
    n, s = struct.unpack("<Qd", ep.read_region(16))
    print(f"wsum: {n} {s!r} {s.hex()}")
    # sss adds to the same 8 bytes wsum wrote: start from its bits.
    base = struct.unpack("<QQ", ep.read_region(16))[1]
    words = np.arange(1, 4097, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    ep.send(sss, words, count=2)
    n, s = struct.unpack("<QQ", ep.read_region(16))
    want = (base + 2 * int(words.sum(dtype=np.uint64))) % (1 << 64)
    print(f"sss: {n} {s:#x} exact={s == want}")
