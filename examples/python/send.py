"""TSI and the weighted sum, written in Python (tsi.py, wsum.py), compiled
with tc.compile and sent from Python to a tc-serve:

    build/bin/tc-serve --listen 127.0.0.1:13337 &
    PYTHONPATH=build/python python3 examples/python/send.py 127.0.0.1:13337

TSI counts in the first 8 bytes of the target's memory and wsum adds its
weighted sum to the double at byte 8 (and counts too); after each, the
script reads that memory back and prints it.
"""
import os
import struct
import sys

import numpy as np

import tc


def main():
    where = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:13337"
    here = os.path.dirname(os.path.abspath(__file__))
    with tc.Worker() as w, w.connect(where) as ep:
        tsi = w.register(tc.compile(os.path.join(here, "tsi.py")))
        wsum = w.register(tc.compile(os.path.join(here, "wsum.py")))
        ep.send(tsi, count=5)
        count, = struct.unpack("<Q", ep.read_region(8))
        print(f"tsi: the target counted {count} messages")
        values = np.array([1.0, 2.0, 3.0])
        weights = np.array([0.5, 0.25, 2.0])
        pairs = np.column_stack([values, weights]).ravel()  # v0 w0 v1 w1 ...
        ep.send(wsum, pairs, count=2)
        count, total = struct.unpack("<Qd", ep.read_region(16))
        print(f"wsum: {count} messages, weighted sum {total} "
              f"(2 x {float(values @ weights)})")


if __name__ == "__main__":
    main()
