"""tc for Python: drive tc from Python, and write ifuncs in Python.

    import tc
    w = tc.Worker()                        # or tc.Worker(pmix=True)
    ep = w.connect("127.0.0.1:13337")      # or w.connect_rank(3)
    f = w.register("wsum.tcfb")            # an archive path or its bytes
    ep.send(f, b"\\x01\\x02", count=1)
    ep.flush()
    data = ep.read_region(16)
    tc.Archive.open("wsum.tcfb").members

The driving side wraps libtc's C API (tc.h) through cffi (tc._tc_ffi).
Ifuncs written in Python are compiled by numba: python3 -m tc.cc SRC.py
-o OUT.tcfb, or tc.compile(); inside them tc.u8, tc.u32, tc.u64, tc.f32,
tc.f64 (and tc.i8 ... tc.i64, tc.u16) view memory at an address. Those
and tc.compile load numba on first use only. docs/python.md has it all.
"""
from ._config import VERSION as __version__
from .errors import (CompileError, ConnectionLostError, Error, RemoteError,
                     TimeoutError)
from ._api import Endpoint, Ifunc, Message, Worker
from .archive import Archive, Member

_VIEWS = ("u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64", "f32",
          "f64", "address")

__all__ = ["Worker", "Endpoint", "Ifunc", "Message", "Archive", "Member",
           "Error", "RemoteError", "TimeoutError", "ConnectionLostError",
           "CompileError", "compile", *_VIEWS]


def __getattr__(name):
    # numba is imported only by code that compiles ifuncs.
    if name in _VIEWS:
        from . import views
        return getattr(views, name)
    if name == "compile":
        from .cc import compile
        return compile
    raise AttributeError(f"module 'tc' has no attribute '{name}'")
