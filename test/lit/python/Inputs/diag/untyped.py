import os
import tc


def untyped_main(payload, payload_size, target_args):
    tc.u64(target_args, 1)[0] = os.getpid()


def untyped_payload_bound(source_args, source_args_size):
    return 0


def untyped_payload_init(source_args, source_args_size, payload, size_ptr):
    return 0
