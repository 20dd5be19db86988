"""Memory views for ifuncs written in Python (numba's nopython mode).

An ifunc's pointers are integers (addresses); tc.u64(address, n) is a
numba carray of n uint64 there, and so on for each type. They compile to
plain loads and stores. address(array) is the address of an array's data.
"""
import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

# What numba compiles from here on keeps its unoptimized IR, which tc.cc
# needs: these views are compiled on first use, maybe before tc.cc is.
from . import _lower  # noqa: F401  (installs the hook)


@intrinsic
def _pointer(typingctx, address):
    """An integer address as numba's void pointer (carray's first operand)."""
    if not isinstance(address, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return types.voidptr(address), codegen


def _view(dtype, name):
    def view(address, count):
        return numba.carray(_pointer(address), count, dtype)

    view.__name__ = view.__qualname__ = name
    view.__doc__ = (f"{name}(address, count): a numba carray of `count` "
                    f"{np.dtype(dtype).name} at `address`.")
    return numba.njit(view)


u8 = _view(np.uint8, "u8")
u16 = _view(np.uint16, "u16")
u32 = _view(np.uint32, "u32")
u64 = _view(np.uint64, "u64")
i8 = _view(np.int8, "i8")
i16 = _view(np.int16, "i16")
i32 = _view(np.int32, "i32")
i64 = _view(np.int64, "i64")
f32 = _view(np.float32, "f32")
f64 = _view(np.float64, "f64")


@numba.njit
def address(array):
    """The address of an array's first element (an int)."""
    return array.ctypes.data
