import numpy as np
import tc

def alloc_main(payload, payload_size, target_args):
    tmp = np.zeros(payload_size)
    tc.f64(target_args, 1)[0] = tmp.sum()

def alloc_payload_bound(source_args, source_args_size):
    return 0

def alloc_payload_init(source_args, source_args_size, payload, size_ptr):
    print("init", source_args_size)
    return 0
