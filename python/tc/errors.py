"""tc's errors as Python exceptions.

Every error carries tc's own message (what libtc reports, `tc_last_error()`)
and, where it came from libtc, the tc_status_t code. Three kinds have
classes of their own, each also a subclass of the built-in exception
Python code already catches for that kind of failure.
"""
import builtins

#: tc_status_t codes and their names (include/tc/tc.h).
STATUS_NAMES = {
    0: "TC_OK", 1: "TC_INPROGRESS", -1: "TC_ERR_INVALID_PARAM",
    -2: "TC_ERR_NO_MEMORY", -3: "TC_ERR_NOT_FOUND", -4: "TC_ERR_BAD_ARCHIVE",
    -5: "TC_ERR_IO", -6: "TC_ERR_UNREACHABLE", -7: "TC_ERR_CONNECTION_RESET",
    -8: "TC_ERR_PAYLOAD", -9: "TC_ERR_REMOTE", -10: "TC_ERR_TIMED_OUT",
    -11: "TC_ERR_UNSUPPORTED",
}
TIMED_OUT = -10
CONNECTION_RESET = -7
REMOTE = -9
BAD_ARCHIVE = -4


class Error(Exception):
    """A tc error: tc's message; `status` is the tc_status_t code (an int)
    when libtc reported it, else None."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        self.status = status

    @property
    def status_name(self):
        """The code's name, e.g. 'TC_ERR_TIMED_OUT' (None without one)."""
        return None if self.status is None else STATUS_NAMES.get(
            self.status, str(self.status))

    def __str__(self):
        return self.message


class TimeoutError(Error, builtins.TimeoutError):
    """A wait (flush, region read, barrier, wait_for) ran past its timeout.
    What it waited for may still end later; nothing is lost by that."""


class ConnectionLostError(Error, builtins.ConnectionError):
    """The connection to the peer went: closed by it, or lost (the message
    says which and why). Sends on the endpoint fail from then on."""


class RemoteError(Error):
    """The target rejected messages sent on an endpoint: `ifunc` names the
    ifunc when tc's message does (a trap, a refused archive, ...), `seq`
    is the message's sequence number on the connection; `errors` holds
    every rejection the wait collected, (seq, status, message) each, this
    one first."""

    def __init__(self, message, status=REMOTE, seq=None, ifunc=None,
                 errors=()):
        super().__init__(message, status)
        self.seq = seq
        self.ifunc = ifunc
        self.errors = list(errors)


class CompileError(Error):
    """tc.compile() or python3 -m tc.cc refused the source: `diagnostics`
    holds its lines, `FILE[:LINE]: error: ifunc 'NAME': ...` each."""

    def __init__(self, diagnostics):
        self.diagnostics = list(diagnostics)
        super().__init__("\n".join(self.diagnostics))


def error_for(status, message):
    """The exception for a libtc status and message."""
    if status == TIMED_OUT:
        return TimeoutError(message, status)
    if status == CONNECTION_RESET:
        return ConnectionLostError(message, status)
    if status == REMOTE:
        return RemoteError(message, status)
    return Error(message, status)
