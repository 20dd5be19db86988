//===- Guard.h - Attribute faults and overruns to the running ifunc -*- C++ -*-=//
//
// Without the sandbox, ifunc code runs unchecked: a fault in it kills the
// process and a loop in it holds the dispatching thread. What the runtime
// can do is say which ifunc it was. The dispatcher (Runtime::callMain)
// records the running invocation in a RunRecord: per thread for signal
// handlers (a fault is delivered to the faulting thread), and process-wide
// in atomics for a watchdog thread. installFaultAttribution() makes fatal
// signals and exit() inside ifunc code print one line naming the ifunc,
// its hash, its connection and (for signals) the faulting address.
//
//===----------------------------------------------------------------------===//

#ifndef TC_RUNTIME_GUARD_H
#define TC_RUNTIME_GUARD_H

#include "jit/Jit.h"

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tc {

/// The connection a message came on (a transport's ConnId; the guard
/// only prints it).
using RunConnId = uint64_t;

/// One running invocation (innermost first through Outer).
struct RunRecord {
  const LoadedIfunc *Code = nullptr; ///< Null for a local function.
  const char *LocalName = nullptr;   ///< The local function's name.
  RunConnId Conn = 0;
  const RunRecord *Outer = nullptr;
};

namespace guard {
/// This thread's innermost invocation; read by fatal-signal handlers.
/// Every message reads and writes it twice, so it is as cheap as TLS gets:
/// `__thread` (constant-initialized, so no C++ TLS init wrapper is called)
/// and initial-exec (no __tls_get_addr call; libtc is loaded with the
/// program, or later within glibc's static TLS reserve, which one pointer
/// fits).
extern __thread const RunRecord *Current
    __attribute__((tls_model("initial-exec")));
/// Process-wide, for a watchdog: the invocation entered last and a counter
/// bumped on every entry and exit (single writer per Runtime thread).
extern std::atomic<const LoadedIfunc *> ActiveCode;
extern std::atomic<const char *> ActiveLocal;
extern std::atomic<RunConnId> ActiveConn;
extern std::atomic<unsigned> ActiveDepth;
extern std::atomic<uint64_t> Epoch;
} // namespace guard

/// Marks an invocation as running for its lifetime (Runtime::callMain).
class RunScope {
public:
  explicit RunScope(RunRecord &R) : R(R) {
    R.Outer = guard::Current;
    guard::Current = &R;
    publish(&R, guard::ActiveDepth.load(std::memory_order_relaxed) + 1);
  }
  ~RunScope() {
    guard::Current = R.Outer;
    publish(R.Outer, guard::ActiveDepth.load(std::memory_order_relaxed) - 1);
  }
  RunScope(const RunScope &) = delete;
  RunScope &operator=(const RunScope &) = delete;

private:
  static void publish(const RunRecord *R, unsigned Depth) {
    using namespace guard;
    ActiveCode.store(R ? R->Code : nullptr, std::memory_order_relaxed);
    ActiveLocal.store(R ? R->LocalName : nullptr, std::memory_order_relaxed);
    ActiveConn.store(R ? R->Conn : 0, std::memory_order_relaxed);
    ActiveDepth.store(Depth, std::memory_order_relaxed);
    Epoch.store(Epoch.load(std::memory_order_relaxed) + 1,
                std::memory_order_release);
  }
  RunRecord &R;
};

/// Appends text and numbers to a fixed buffer, truncating, always
/// NUL-terminated; allocates nothing (for signal handlers).
struct SignalSafeWriter {
  char *Buf;
  size_t Size, Len = 0;
  SignalSafeWriter(char *B, size_t S);
  SignalSafeWriter &operator<<(const char *S);
  SignalSafeWriter &dec(uint64_t V);
  SignalSafeWriter &hex(uint64_t V);
  /// \p V with two decimals ("12.34"), for non-negative values.
  SignalSafeWriter &fixed2(double V);
  /// write(2)s what was appended to \p FD.
  void flush(int FD) const;
};

/// Formats "ifunc 'NAME' (HASH16) from connection N" (or "local function
/// 'NAME' ...") into \p Buf, NUL-terminated; returns its length. Uses no
/// allocation: callable from a signal handler.
size_t formatRun(const LoadedIfunc *Code, const char *LocalName,
                 RunConnId Conn,
                 char *Buf, size_t Size);

/// Installs, for this process, handlers for SIGSEGV, SIGBUS, SIGILL, SIGFPE
/// and SIGABRT that, when the faulting thread runs ifunc code, write one
/// line "TOOL: fatal signal SIGSEGV (address 0x...) in ifunc ..." to
/// stderr, then die of the signal (its default action). Faults
/// outside ifunc code go to the handler that was there before (UCX's
/// backtrace printer, if UCX installed one). Also gives this thread an
/// alternate signal stack (a stack overflow can then be reported) and
/// registers an atexit hook that names an ifunc that called exit().
/// Call it after the transport is created (UCX installs its handlers
/// then) and from the thread that will dispatch.
void installFaultAttribution(const char *Tool);

/// Async-signal-safe write of \p S to fd 2.
void writeStderr(const char *S);

} // namespace tc

#endif // TC_RUNTIME_GUARD_H
