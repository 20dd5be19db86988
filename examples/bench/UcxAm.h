//===- UcxAm.h - The raw-UCX references' shared set-up -----------*- C++ -*-===//
//
// tc-bench's `ucx_am` rows (tsi: UcxAm.cpp; sss and iput: UcxAmSweep.cpp)
// run the benchmark's work straight on UCP, without libtc, in this process
// and a forked one on the server CPU. Both sides are set up as libtc sets
// up its own transport (AM and WAKEUP features, a single-threaded worker,
// peer error handling, shared-memory error handling when UCX_TLS allows
// shared memory), so the figures compare the runtime with UCX doing the
// same work under the same guarantees.
//
//===----------------------------------------------------------------------===//

#ifndef TC_EXAMPLES_BENCH_UCXAM_H
#define TC_EXAMPLES_BENCH_UCXAM_H

#include "Bench.h"

#include <ucp/api/ucp.h>

#include <initializer_list>
#include <string>

namespace bench {
namespace ucx {

/// How long a reference waits for its peer before it gives up.
constexpr double TimeoutS = 60;

/// One side: context, worker, and the endpoint to the other side.
struct Peer {
  ucp_context_h Ctx = nullptr;
  ucp_worker_h W = nullptr;
  ucp_ep_h Ep = nullptr;
};

/// An active-message handler to register (UCP_AM_FLAG_WHOLE_MSG).
struct Handler {
  unsigned Id;
  ucp_am_recv_callback_t Cb;
  void *Arg;
};

/// Creates \p P's context and worker with libtc's UCX setup and registers
/// \p Hs. Returns an error message, or empty.
std::string init(Peer &P, std::initializer_list<Handler> Hs);
/// Swaps worker addresses over \p Fd and connects to the peer's (peer
/// error handling on). Returns an error message, or empty.
std::string connect(Peer &P, int Fd);
/// Closes the endpoint (forced, bounded) and frees the worker and context.
void close(Peer &P);

/// Sends a small active message (no header) that UCX can complete at once
/// from \p Data (UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL), progressing while UCX
/// has no room: what libtc does for a small frame. An error, or empty.
std::string sendNow(Peer &P, unsigned AmId, const void *Data, size_t Size);

bool writeAll(int Fd, const void *P, size_t N);
bool readAll(int Fd, void *P, size_t N);

/// Progresses \p W until \p Done() holds; an error message after TimeoutS
/// seconds or a signal. The clock is read only every 1024 polls.
template <typename Pred>
std::string progressUntil(ucp_worker_h W, Pred Done, const char *What) {
  Deadline D;
  for (unsigned I = 0; !Done(); ++I) {
    ucp_worker_progress(W);
    if ((I & 1023) == 1023 && (D.passed(TimeoutS) || Interrupted))
      return std::string("timed out waiting for ") + What;
  }
  return "";
}

/// A server process forked from this one (pinned to ServerCpu), joined to
/// us by a socket pair.
struct Forked {
  pid_t Pid = -1;
  int Fd = -1; ///< Our end of the socket pair.
};
/// Forks; the child runs \p Serve on its end of the socket pair, pinned to
/// ServerCpu, and exits with what it returns. Dies if it cannot fork.
Forked fork(int (*Serve)(int Fd, void *Arg), void *Arg, const char *Name);
/// Closes our end and reaps the child (SIGTERM first when \p Err already
/// says something failed: it may be waiting for messages). Appends to
/// \p Err when the child failed.
void reap(Forked &F, std::string &Err);

} // namespace ucx
} // namespace bench

#endif // TC_EXAMPLES_BENCH_UCXAM_H
