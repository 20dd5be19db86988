"""TSI written in Python: each message adds 1 to the 64-bit counter at the
start of the target's memory (target_args). The payload is one byte, as
examples/tsi/tsi.c's.

    python3 -m tc.cc tsi.py -o tsi.tcfb
"""
import tc


def tsi_main(payload, payload_size, target_args):
    tc.u64(target_args, 1)[0] += 1


def tsi_payload_bound(source_args, source_args_size):
    return 1


def tsi_payload_init(source_args, source_args_size, payload,
                     payload_size_ptr):
    tc.u64(payload_size_ptr, 1)[0] = 1
    return 0
