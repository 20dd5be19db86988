from numba import types
from numba.extending import intrinsic
import tc

@intrinsic
def pause(typingctx):
    def codegen(context, builder, sig, args):
        import llvmlite.ir as ir
        fn = builder.module.declare_intrinsic("llvm.x86.sse2.pause", fnty=ir.FunctionType(ir.VoidType(), []))
        builder.call(fn, [])
        return context.get_dummy_value()
    return types.none(), codegen

def x86_main(payload, payload_size, target_args):
    pause()

def x86_payload_bound(source_args, source_args_size):
    return 0

def x86_payload_init(source_args, source_args_size, payload, size_ptr):
    return 0
