//===- RawUcx.h - UCX without libtc, for tc-bench's references --*- C++ -*-===//
//
// The references tc-bench measures beside libtc (ucx_am: TSI on UCX active
// messages; ucx_put: a one-sided put ping-pong) are two processes of this
// machine, this one and a forked child on the server CPU, that set UCX up
// as libtc does (AM and WAKEUP features, RMA for puts, peer error handling,
// shared-memory error handling when UCX_TLS allows shared memory) and
// exchange what they need over a socket pair. These are the pieces both
// share; every function returns an error message, empty on success.
//
//===----------------------------------------------------------------------===//

#ifndef TC_EXAMPLES_BENCH_RAWUCX_H
#define TC_EXAMPLES_BENCH_RAWUCX_H

#include "Bench.h"

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace bench {

/// One process's UCX objects.
struct RawSide {
  ucp_context_h Ctx = nullptr;
  ucp_worker_h W = nullptr;
  ucp_ep_h Ep = nullptr;
};

/// Context and worker with \p Features (UCP_FEATURE_*).
std::string rawInit(RawSide &S, uint64_t Features);
/// Registers \p Cb (with \p Arg) for active messages \p Id on \p S's
/// worker, whole messages (UCP_AM_FLAG_WHOLE_MSG).
std::string rawSetAmHandler(RawSide &S, unsigned Id, ucp_am_recv_callback_t Cb,
                            void *Arg);
/// Swaps worker addresses over \p Fd and connects to the peer's.
std::string rawConnect(RawSide &S, int Fd);
/// An active-message side: rawInit (AM and WAKEUP features), the handler
/// \p Cb with \p Arg for \p AmId, and rawConnect over \p Fd.
std::string rawAmInit(RawSide &S, int Fd, unsigned AmId,
                      ucp_am_recv_callback_t Cb, void *Arg);
/// Sends a small active message with no header that UCX completes at once
/// from \p Data (UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL), progressing while UCX
/// has no room: what libtc does for a small frame.
std::string rawSendNow(RawSide &S, unsigned AmId, const void *Data,
                       size_t Size);

/// How long a reference waits for its peer before it gives up.
constexpr double RawTimeoutS = 60;

/// Progresses \p W until \p Done() holds; an error naming \p What after
/// RawTimeoutS seconds or a signal. The clock is read every 1024 polls.
template <typename Pred>
std::string rawProgressUntil(ucp_worker_h W, Pred Done, const char *What) {
  Deadline D;
  for (unsigned I = 0; !Done(); ++I) {
    ucp_worker_progress(W);
    if ((I & 1023) == 1023 && (D.passed(RawTimeoutS) || Interrupted))
      return std::string("timed out waiting for ") + What;
  }
  return "";
}
/// Closes the endpoint (bounded), the worker and the context.
void rawClose(RawSide &S);
/// Sends \p N bytes / a length-prefixed string over \p Fd, and back.
bool writeAll(int Fd, const void *P, size_t N);
bool readAll(int Fd, void *P, size_t N);
bool writeBlob(int Fd, const std::string &B);
bool readBlob(int Fd, std::string &B);
/// A server's last steps: waits for the client's goodbye byte on \p Fd
/// (the client is done: closing the endpoint cannot cut it off), unless
/// \p Err already says something failed; then an error about a client
/// that went away.
void rawAwaitGoodbye(int Fd, std::string &Err);
/// A server process's exit code: 0, or 1 after printing \p Err as
/// "tc-bench: error: NAME server: ...".
int rawServerExit(const char *Name, const std::string &Err);
/// Pins this process to \p Cpu (ignored when negative).
void pinTo(int Cpu);

/// Runs \p Serve(Fd) in a forked child and \p Drive(Fd) here, each with
/// its end of a socket pair; returns Drive's error, or the child's
/// failure. The child is ended by PID if the driver fails.
std::string runPair(int (*Serve)(int Fd, void *Arg), void *ServeArg,
                    std::string (*Drive)(int Fd, void *Arg), void *DriveArg);

} // namespace bench

#endif // TC_EXAMPLES_BENCH_RAWUCX_H
