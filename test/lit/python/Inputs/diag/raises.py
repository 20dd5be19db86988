import tc

def check(n):
    if n > 100:
        raise ValueError("too big")
    return n

def raises_main(payload, payload_size, target_args):
    tc.u64(target_args, 1)[0] = check(payload_size)

def raises_payload_bound(source_args, source_args_size):
    assert source_args_size < 10
    return 8

def raises_payload_init(source_args, source_args_size, payload, size_ptr):
    tc.u64(size_ptr, 1)[0] = check(source_args_size)
    return 0
