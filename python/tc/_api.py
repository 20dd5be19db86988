"""Workers, endpoints, ifuncs and messages: libtc's C API (tc.h) for Python.

Every object wraps a libtc handle; a call into libtc is one call through
the cffi module tc._tc_ffi. Waits (flush, region reads, barriers,
wait_for) progress the worker in C, in slices of at most 100 ms, so
Ctrl-C stops them, and each has a timeout. Errors become exceptions with
libtc's message (tc.errors); libtc's own logging to stderr is off while
the package is loaded.
"""
import os
import re
import sys
import threading
import time
import weakref

from . import errors

# libtc's symbols global, as in a program linked with it: ifunc code that
# calls libtc (a chaser forwarding itself) resolves them in this process.
_flags = sys.getdlopenflags()
sys.setdlopenflags(_flags | os.RTLD_GLOBAL)
try:
    from ._tc_ffi import ffi, lib
finally:
    sys.setdlopenflags(_flags)

# The package raises what libtc would have logged.
lib.tc_set_error_logging(0)

_INPROGRESS = lib.TC_INPROGRESS
_SLICE_MS = 100  # longest stretch spent in C without looking at signals


def _last_error():
    return ffi.string(lib.tc_last_error()).decode("utf-8", "replace")


def _raise(status, what=None):
    message = _last_error() or (what or "") + ": " + ffi.string(
        lib.tc_status_string(status)).decode()
    raise errors.error_for(status, message)


def _check(status):
    if status != lib.TC_OK:
        _raise(status)


def _buffer(data):
    """A cdata over any bytes-like object, and its size in bytes."""
    if data is None:
        return ffi.NULL, 0
    b = ffi.from_buffer(data)
    return b, len(b)


def _address(obj):
    """The address of a buffer (kept alive by the caller) or an int."""
    if obj is None:
        return ffi.NULL, None
    if isinstance(obj, int):
        return ffi.cast("void *", obj), None
    b = ffi.from_buffer(obj, require_writable=True)
    return ffi.cast("void *", b), b


def _parse_host_port(where):
    m = re.fullmatch(r"\[(.+)\]:(\d+)|([^:\[\]]+):(\d+)", where)
    if not m:
        raise errors.Error(
            f"connect: '{where}' is not HOST:PORT (or [IPV6]:PORT)")
    host = m.group(1) or m.group(3)
    port = int(m.group(2) or m.group(4))
    if not 0 < port < 65536:
        raise errors.Error(f"connect: bad port in '{where}'")
    return host, port


class _Closable:
    """What every wrapper of a libtc handle does with its _close(check):
    close() raises what closing met, a `with` block leaving by an exception
    does not replace it with another, and collection closes quietly."""

    def close(self):
        """Closes the object (idempotent)."""
        self._close(True)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        self._close(exc_type is None)

    def __del__(self):
        try:
            self._close(False)
        except Exception:  # interpreter shutdown: lib may be gone
            pass


class _Op:
    """A flush, region read or barrier in flight (a tcpy_op_t)."""

    def __init__(self):
        self.h = lib.tcpy_op_new()
        if self.h == ffi.NULL:
            raise MemoryError("tc: out of memory")

    def started(self, status, what):
        if status != _INPROGRESS:
            self.h.done = 1  # no completion will come: ours to free
            self.release()
            _raise(status, what)

    def release(self):
        if self.h is not None:
            lib.tcpy_op_release(self.h)
            self.h = None


class Worker(_Closable):
    """A tc worker: a context and a worker of libtc, its UCX worker and JIT.

    tc.Worker() is a sender (and, with listen()/set_region()/target_args,
    a target); tc.Worker(pmix=True) is a rank of an mpirun or
    srun --mpi=pmix job: its creation meets every rank in the launcher's
    fence (within `timeout` seconds), then connect_rank() reaches any rank.
    A worker and what it made belong to the thread that uses it. Use it as
    a context manager, or close() it.
    """

    def __init__(self, pmix=False, *, target_args=None, ifunc_path=None,
                 timeout=60.0):
        self._h = None
        self._ctx = None
        self._pw = None
        self._keep = {}           # buffers libtc points into
        self._eps = weakref.WeakValueDictionary()  # handle -> Endpoint
        self._children = weakref.WeakSet()  # ifuncs, messages: close() frees
        cp = ffi.new("tc_context_params_t *")
        path = None
        if ifunc_path is not None:
            path = ffi.new("char[]", os.fsencode(ifunc_path))
            cp.field_mask |= lib.TC_CONTEXT_PARAM_FIELD_IFUNC_PATH
            cp.ifunc_path = path
        ctx = ffi.new("tc_context_h *")
        _check(lib.tc_context_create(cp, ctx))
        self._ctx = ctx[0]
        self._pw = lib.tcpy_worker_new()
        wp = ffi.new("tc_worker_params_t *")
        lib.tcpy_worker_params(self._pw, wp)
        if target_args is not None:
            wp.field_mask |= lib.TC_WORKER_PARAM_FIELD_TARGET_ARGS
            wp.target_args, self._keep[None] = _address(target_args)
        if pmix:
            wp.field_mask |= lib.TC_WORKER_PARAM_FIELD_BOOTSTRAP
            wp.bootstrap = lib.TC_BOOTSTRAP_PMIX
        out = ffi.new("tc_worker_h *")
        if pmix:
            # The fence waits for every rank: bounded here, on a thread of
            # its own (the worker is used only after it returned).
            result = []
            t = threading.Thread(
                target=lambda: result.append(
                    (lib.tc_worker_create(self._ctx, wp, out),
                     _last_error())),
                name="tc-pmix-wireup", daemon=True)
            t.start()
            t.join(timeout)
            if not result:
                self._ctx = self._pw = None  # the thread still uses them
                raise errors.TimeoutError(
                    f"Worker(pmix=True): the PMIx wire-up did not end within "
                    f"{timeout:g} s (is every rank of the job up?)",
                    errors.TIMED_OUT)
            status, message = result[0]
            if status != lib.TC_OK:
                self.close()
                raise errors.error_for(status, message)
        else:
            status = lib.tc_worker_create(self._ctx, wp, out)
            if status != lib.TC_OK:
                message = _last_error()
                self.close()
                raise errors.error_for(status, message)
        self._h = out[0]
        self.pmix = bool(pmix)

    # --- lifetime ---------------------------------------------------------
    def close(self):
        """Closes every endpoint (each flushes what was sent on it since its
        last wait: Endpoint.close), then destroys the ifuncs, messages, the
        worker and its context; raises the first error the flushes met.
        Idempotent."""
        self._close(True)

    def _close(self, check):
        failure = None
        for ep in list(self._eps.values()):
            try:
                ep._close(check)
            except errors.Error as e:
                failure = failure or e
        for child in list(self._children):
            child._close(check)
        if self._h is not None:
            lib.tc_worker_destroy(self._h)
            self._h = None
        if self._pw is not None:
            lib.tcpy_worker_free(self._pw)
            self._pw = None
        if self._ctx is not None:
            lib.tc_context_destroy(self._ctx)
            self._ctx = None
        self._keep.clear()
        if failure is not None:
            raise failure

    def _handle(self):
        if self._h is None:
            raise errors.Error("the worker is closed")
        return self._h

    # --- connections ------------------------------------------------------
    def connect(self, where, port=None):
        """An endpoint to the worker listening at 'HOST:PORT' (or HOST, PORT).
        Sends may start at once; they leave when the peer answered."""
        host, port = (where, port) if port is not None else \
            _parse_host_port(where)
        out = ffi.new("tc_ep_h *")
        _check(lib.tc_ep_connect(self._handle(), host.encode(), port, out))
        return self._endpoint(out[0], f"{host}:{port}")

    def connect_rank(self, rank):
        """An endpoint to rank `rank` of the job (a pmix=True worker), by the
        address that rank published: no listener needed."""
        out = ffi.new("tc_ep_h *")
        _check(lib.tc_ep_connect_rank(self._handle(), rank, out))
        return self._endpoint(out[0], f"rank {rank}")

    def connect_address(self, address):
        """An endpoint to a worker by its `address` (bytes, Worker.address):
        over shared memory between processes of one host when UCX_TLS
        allows it."""
        out = ffi.new("tc_ep_h *")
        _check(lib.tc_ep_connect_address(self._handle(), address,
                                         len(address), out))
        return self._endpoint(out[0], "address")

    def _endpoint(self, h, peer):
        ep = Endpoint(self, h, peer)
        self._eps[h] = ep
        return ep

    def listen(self, host="127.0.0.1", port=0):
        """Accepts connections at host:port (0: any free port, returned).
        Whoever connects runs code in this process (docs/c-api.md)."""
        out = ffi.new("uint16_t *")
        _check(lib.tc_worker_listen(self._handle(), host.encode(), port, out))
        return out[0]

    @property
    def address(self):
        """This worker's UCX address (bytes), for connect_address()."""
        a = ffi.new("void **")
        n = ffi.new("size_t *")
        _check(lib.tc_worker_get_address(self._handle(), a, n))
        try:
            return bytes(ffi.buffer(a[0], n[0]))
        finally:
            lib.tc_worker_release_address(self._h, a[0])

    @property
    def rank(self):
        """This process's rank in the job (pmix=True)."""
        return self._rank_size()[0]

    @property
    def size(self):
        """The number of ranks in the job (pmix=True)."""
        return self._rank_size()[1]

    def _rank_size(self):
        r = ffi.new("uint32_t *")
        s = ffi.new("uint32_t *")
        _check(lib.tc_worker_query_rank(self._handle(), r, s))
        return r[0], s[0]

    # --- code -------------------------------------------------------------
    def register(self, archive):
        """An ifunc from an archive: a path (str, os.PathLike) or its bytes.
        Its source member is JIT-compiled here for Ifunc.message/send."""
        if isinstance(archive, (str, os.PathLike)):
            with open(archive, "rb") as f:
                data = f.read()
        else:
            data = bytes(archive)
        out = ffi.new("tc_ifunc_h *")
        _check(lib.tc_ifunc_register_archive(self._handle(), data, len(data),
                                             out))
        f = Ifunc(self, out[0], data)
        self._children.add(f)
        return f

    # --- target side ------------------------------------------------------
    def set_target_args(self, target_args, name=None):
        """What NAME_main gets as target_args when this worker runs it: a
        writable buffer (kept alive by the worker) or an address; for the
        ifunc `name`, else for every ifunc."""
        ptr, keep = _address(target_args)
        _check(lib.tc_worker_set_target_args(
            self._handle(), ffi.NULL if name is None else name.encode(), ptr))
        self._keep[("args", name)] = keep

    def set_region(self, buffer):
        """Exposes a writable buffer (kept alive by the worker) to senders'
        region reads (Endpoint.read_region); None: nothing."""
        if buffer is None:
            _check(lib.tc_worker_set_region(self._handle(), ffi.NULL, 0))
            self._keep.pop("region", None)
            return
        b = ffi.from_buffer(buffer, require_writable=True)
        _check(lib.tc_worker_set_region(self._handle(), b, len(b)))
        self._keep["region"] = b

    # --- progress ---------------------------------------------------------
    def progress(self):
        """One pass of the progress engine; True if anything happened."""
        return bool(lib.tc_worker_progress(self._handle()))

    def wait_for(self, condition, timeout=10.0):
        """Progresses the worker (running arriving ifuncs and completions)
        until condition() is true; tc.TimeoutError after `timeout` s."""
        w = self._handle()
        end = time.monotonic() + timeout
        while not condition():
            if self._collect_errors():
                self._raise_remote()
            left = end - time.monotonic()
            if left <= 0:
                raise errors.TimeoutError(
                    f"wait_for: the condition did not hold within "
                    f"{timeout:g} s", errors.TIMED_OUT)
            lib.tcpy_progress_some(w, min(_SLICE_MS, int(left * 1000) + 1))
        return True

    def _raise_remote(self):
        """Raises the first endpoint's RemoteError, if one has any."""
        for ep in list(self._eps.values()):
            ep._raise_remote()

    def barrier(self, timeout=60.0):
        """The job-wide barrier (pmix=True): returns once every rank entered
        it; tc.Error when it failed (a rank died)."""
        op = _Op()
        op.started(lib.tcpy_barrier(self._handle(), op.h), "barrier")
        self._wait(op, timeout, "barrier")
        op.release()

    def stats(self):
        """The worker's counters (tc_worker_stats_t) as a dict."""
        s = ffi.new("tc_worker_stats_t *")
        _check(lib.tc_worker_query_stats(self._handle(), s))
        return {f: getattr(s, f) for f, _ in ffi.typeof(s[0]).fields}

    def _wait(self, op, timeout, what):
        """Progresses until `op` completed; its status as an exception."""
        w = self._handle()
        end = time.monotonic() + timeout
        try:
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    raise errors.TimeoutError(
                        f"{what}: timed out after {timeout:g} s",
                        errors.TIMED_OUT)
                if lib.tcpy_progress_until(
                        w, op.h, min(_SLICE_MS, int(left * 1000) + 1)):
                    break
        except BaseException:
            op.release()  # the completion frees it when it comes
            self._collect_errors()
            raise
        self._collect_errors()
        if op.h.status != lib.TC_OK:
            message = ffi.string(lib.tcpy_op_message(op.h)).decode(
                "utf-8", "replace")
            status = op.h.status
            op.release()
            raise errors.error_for(status, f"{what}: {message}")

    def _collect_errors(self):
        """Hands the remote errors the worker got to their endpoints."""
        ep = ffi.new("tc_ep_h *")
        seq = ffi.new("uint32_t *")
        status = ffi.new("tc_status_t *")
        buf = ffi.new("char[]", 4097)
        got = False
        while lib.tcpy_take_error(self._pw, ep, seq, status, buf, len(buf)):
            owner = self._eps.get(ep[0])
            if owner is not None:
                got = True
                owner._errors.append(
                    (seq[0], status[0], ffi.string(buf).decode(
                        "utf-8", "replace")))
        return got


class Endpoint(_Closable):
    """A connection to a peer worker (Worker.connect, connect_rank)."""

    def __init__(self, worker, h, peer):
        self.worker = worker
        self._h = h
        self.peer = peer
        self._errors = []
        self._unflushed = False  # sends since the last wait

    def close(self, timeout=10.0):
        """Closes the connection. Messages sent since the last flush or
        region read are flushed first (within `timeout` s), so closing
        drops none of them: libtc holds the first sends of a connection
        until the peer has answered, and a connection closed before that
        would lose them. Raises what that flush raises (RemoteError,
        TimeoutError), but a connection that is gone already (the peer
        closed it first, as the ranks of a job that ends do) is no error
        here: there is nothing left to close. Idempotent."""
        self._close(True, timeout)

    def _close(self, check, timeout=10.0):
        if self._h is None:
            return
        try:
            if self._unflushed and self.worker._h is not None:
                try:
                    self.flush(timeout)
                except errors.ConnectionLostError:
                    pass
                except errors.Error:
                    if check:
                        raise
        finally:
            if self.worker._h is not None:
                lib.tc_ep_destroy(self._h)
            self.worker._eps.pop(self._h, None)
            self._h = None

    def __repr__(self):
        return f"<tc.Endpoint {self.peer}{' closed' if self._h is None else ''}>"

    @property
    def handle(self):
        """The tc_ep_h as an int, for C code that sends on it (through
        target_args, as the DAPC chaser does)."""
        return int(ffi.cast("uintptr_t", self._handle()))

    def _handle(self):
        if self._h is None:
            raise errors.Error(f"the endpoint to {self.peer} is closed")
        self.worker._handle()
        return self._h

    def send(self, what, args=b"", count=1):
        """Sends `count` messages: of the ifunc `what`, whose payload its
        payload_init makes from `args` (bytes or any buffer: bytearray,
        memoryview, numpy arrays), or the Message `what` as it is. Returns
        at once; flush() says when the target ran them. The worker
        progresses after every 64 sends of a stream."""
        h = self._h
        w = self.worker
        if h is None or w._h is None:
            self._handle()
        self._unflushed = True
        if type(what) is Ifunc:
            f = what._h
            if f is None:
                what._handle()
            if type(args) is bytes:
                s = lib.tcpy_send_args(w._pw, w._h, h, f, args, len(args),
                                       count)
            else:
                b = ffi.from_buffer(args)
                s = lib.tcpy_send_args(w._pw, w._h, h, f,
                                       ffi.cast("char *", b), len(b), count)
        elif type(what) is Message:
            s = lib.tcpy_send(w._pw, w._h, h, what._handle(), count)
        else:
            raise TypeError("send: expected a tc.Ifunc or tc.Message, got "
                            + type(what).__name__)
        if s != _INPROGRESS:
            if s == lib.TC_ERR_CONNECTION_RESET:
                self._unflushed = False  # nothing to flush any more
            _raise(s, "send")

    def flush(self, timeout=10.0):
        """Waits until the target processed (ran or rejected) every message
        sent before; tc.RemoteError if it rejected any since the last wait,
        tc.TimeoutError after `timeout` s, tc.ConnectionLostError if the
        connection went."""
        self._await(lib.tcpy_flush, "flush", timeout)
        self._raise_remote()

    def read_region(self, size, timeout=10.0):
        """Reads up to `size` bytes of the memory the target exposes
        (tc-serve's region), after every message sent before: bytes."""
        op = self._await(lambda h, o: lib.tcpy_read_region(h, size, o),
                         "read_region", timeout, keep=True)
        data = bytes(ffi.buffer(op.h.data, op.h.size)) if op.h.size else b""
        op.release()
        self._raise_remote()
        return data

    def _await(self, start, what, timeout, keep=False):
        """Starts a flush or region read and waits for it: what was sent
        before has been processed once it ends, or cannot be once the
        connection went."""
        op = _Op()
        try:
            op.started(start(self._handle(), op.h), what)
            self.worker._wait(op, timeout, what)
        except errors.ConnectionLostError:
            self._unflushed = False
            raise
        self._unflushed = False
        if not keep:
            op.release()
        return op

    def _raise_remote(self):
        if not self._errors:
            return
        errs, self._errors = self._errors, []
        seq, status, message = errs[0]
        m = re.search(r"ifunc '([A-Za-z_][A-Za-z0-9_]*)'", message)
        more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
        name = errors.STATUS_NAMES.get(status, str(status))
        raise errors.RemoteError(
            f"target {self.peer} rejected message {seq} ({name}): "
            f"{message}{more}", status, seq, m.group(1) if m else None, errs)


class Ifunc(_Closable):
    """A registered ifunc (Worker.register)."""

    def __init__(self, worker, h, archive):
        self.worker = worker
        self._h = h
        self._archive = archive
        self.hash = bytes(ffi.buffer(lib.tc_ifunc_hash(h), 32))

    @property
    def name(self):
        """The ifunc's name, from its archive."""
        from .archive import Archive
        return Archive.open(self._archive).name

    def message(self, args=b""):
        """A Message whose payload payload_init made from `args`; it may be
        changed through Message.payload and sent again."""
        b, n = _buffer(args)
        out = ffi.new("tc_msg_h *")
        _check(lib.tc_msg_create(self._handle(), ffi.NULL if n == 0 else b,
                                 n, out))
        m = Message(self, out[0])
        self.worker._children.add(m)
        return m

    def close(self):
        """Deregisters the ifunc (messages made from it still send)."""
        self._close(True)

    def _close(self, check):
        if self._h is not None:
            if self.worker._h is not None:
                lib.tc_ifunc_deregister(self._h)
            self.worker._children.discard(self)
            self._h = None

    def _handle(self):
        if self._h is None:
            raise errors.Error("the ifunc is closed")
        self.worker._handle()
        return self._h

    def __repr__(self):
        return f"<tc.Ifunc {self.hash.hex()[:16]}>"


class Message(_Closable):
    """A message of one ifunc (Ifunc.message), to send again and again."""

    def __init__(self, ifunc, h):
        self.ifunc = ifunc
        self._h = h

    @property
    def payload(self):
        """The payload as a writable memoryview. A send may share a large
        payload until it has left: take the view again after each send
        and write only through that one."""
        n = ffi.new("size_t *")
        p = lib.tc_msg_payload(self._handle(), n)
        return memoryview(ffi.buffer(p, n[0]))

    @property
    def handle(self):
        """The tc_msg_h as an int, for C code that sends it (through
        target_args)."""
        return int(ffi.cast("uintptr_t", self._handle()))

    def _close(self, check):
        if self._h is not None:
            if self.ifunc.worker._h is not None:
                lib.tc_msg_free(self._h)
            self.ifunc.worker._children.discard(self)
            self._h = None

    def _handle(self):
        if self._h is None:
            raise errors.Error("the message is closed")
        return self._h

