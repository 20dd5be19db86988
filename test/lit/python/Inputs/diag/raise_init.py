import tc


def check(n):
    if n > 8:
        raise ValueError("at most 8 bytes")
    return n


def raise_init_main(payload, payload_size, target_args):
    tc.u64(target_args, 1)[0] += payload_size


def raise_init_payload_bound(source_args, source_args_size):
    return 8


def raise_init_payload_init(source_args, source_args_size, payload,
                            size_ptr):
    tc.u64(size_ptr, 1)[0] = check(source_args_size)
    return 0
