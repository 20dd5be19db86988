def missing_main(payload, payload_size, target_args):
    pass

def missing_payload_bound(source_args):
    return 0
