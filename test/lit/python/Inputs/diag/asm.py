from numba import types
from numba.extending import intrinsic
import tc

@intrinsic
def cycles(typingctx):
    def codegen(context, builder, sig, args):
        import llvmlite.ir as ir
        fty = ir.FunctionType(ir.IntType(64), [])
        return builder.asm(fty, "rdtsc", "=A", [], side_effect=True)
    return types.uint64(), codegen

def asm_main(payload, payload_size, target_args):
    tc.u64(target_args, 1)[0] = cycles()

def asm_payload_bound(source_args, source_args_size):
    return 0

def asm_payload_init(source_args, source_args_size, payload, size_ptr):
    return 0
