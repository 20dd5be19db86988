"""Server-side sum written in Python: examples/sss/sss.c, line for line.
The payload is an array of uint64; the target adds them all to the sum at
byte 8 of its memory and counts the message at byte 0. bench.py runs the
two side by side.

    python3 -m tc.cc sss.py -o sss.tcfb
"""
import numpy as np

import tc


def sss_main(payload, payload_size, target_args):
    v = tc.u64(payload, payload_size // 8)
    s = np.uint64(0)
    for i in range(payload_size // 8):
        s += v[i]
    t = tc.u64(target_args, 2)
    t[1] += s
    t[0] += 1


def sss_payload_bound(source_args, source_args_size):
    return source_args_size


def sss_payload_init(source_args, source_args_size, payload,
                     payload_size_ptr):
    if source_args_size % 8 != 0:
        return -1
    src = tc.u8(source_args, source_args_size)
    dst = tc.u8(payload, source_args_size)
    for i in range(source_args_size):
        dst[i] = src[i]
    tc.u64(payload_size_ptr, 1)[0] = source_args_size
    return 0
