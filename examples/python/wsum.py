"""A weighted sum written in Python: the payload is pairs of float64
(value, weight); the target adds sum(value * weight) to the float64 at
byte 8 of its memory and counts the message in the uint64 at byte 0.

    python3 -m tc.cc wsum.py -o wsum.tcfb
"""
import tc


def pairs_sum(v, n):
    s = 0.0
    for i in range(n):
        s += v[2 * i] * v[2 * i + 1]
    return s


def wsum_main(payload, payload_size, target_args):
    n = payload_size // 16
    state = tc.f64(target_args, 2)
    state[1] += pairs_sum(tc.f64(payload, 2 * n), n)
    tc.u64(target_args, 1)[0] += 1


def wsum_payload_bound(source_args, source_args_size):
    return source_args_size


def wsum_payload_init(source_args, source_args_size, payload,
                      payload_size_ptr):
    if source_args_size % 16 != 0:
        return -1  # not whole (value, weight) pairs: no message
    src = tc.u8(source_args, source_args_size)
    dst = tc.u8(payload, source_args_size)
    for i in range(source_args_size):  # (a[:] = b would allocate a copy)
        dst[i] = src[i]
    tc.u64(payload_size_ptr, 1)[0] = source_args_size
    return 0
