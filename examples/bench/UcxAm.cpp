//===- UcxAm.cpp - TSI on UCX's own active messages, without libtc -------===//
//
// `tc-bench tsi` mode ucx_am: the active-message baseline of the papers,
// written straight on UCP. Two processes of this machine (this one and a
// forked child on the server CPU) exchange worker addresses over a socket
// pair and send each other UCX active messages whose data is a function id
// and the one-byte TSI payload. The receiving handler looks the id up,
// copies the payload out as any handler that keeps it must, and calls
// tsi_main, which is linked in: what a UCX user writing TSI would do. The
// UCX setup is libtc's (AM and WAKEUP features, peer error handling, shared
// memory error handling when UCX_TLS allows shared memory), so the figures
// compare the runtime with UCX doing the same work under the same
// guarantees; ucx_perftest, whose handler does no work, is the other
// reference.
//
//===----------------------------------------------------------------------===//

#include "Bench.h"
#include "RawUcx.h"
#include "Stamps.h"

#include <ucp/api/ucp.h>

#include <algorithm>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern "C" void tsi_main(void *Payload, size_t Size, void *TargetArgs);

namespace bench {
namespace {

constexpr unsigned TsiAmId = 3;

/// The id -> function table a UCX AM program keeps; TSI is entry 0.
using LocalFn = void (*)(void *, size_t, void *);
LocalFn Functions[] = {tsi_main};

/// One side's state; the handler's argument.
struct Side : RawSide {
  uint64_t Counter = 0; ///< TSI's target: incremented by every message.
  uint64_t Bad = 0;     ///< Messages that were not an id + payload.
};

ucs_status_t onTsi(void *Arg, const void *, size_t, void *Data, size_t Length,
                   const ucp_am_recv_param_t *) {
  auto *S = static_cast<Side *>(Arg);
  uint32_t Id;
  if (Length < sizeof Id) {
    ++S->Bad;
    return UCS_OK;
  }
  std::memcpy(&Id, Data, sizeof Id);
  if (Id >= sizeof Functions / sizeof *Functions) {
    ++S->Bad;
    return UCS_OK;
  }
  alignas(std::max_align_t) char Payload[64];
  size_t Size = std::min(Length - sizeof Id, sizeof Payload);
  std::memcpy(Payload, static_cast<char *>(Data) + sizeof Id, Size);
  Functions[Id](Payload, Size, &S->Counter);
  return UCS_OK;
}

/// Sets up \p S with the TSI handler and connects it to the peer on \p Fd.
std::string init(Side &S, int Fd) {
  return rawAmInit(S, Fd, TsiAmId, onTsi, &S);
}

/// The message: function id 0 (TSI), then the one-byte payload.
const unsigned char Message[5] = {0, 0, 0, 0, 1};

/// Sends one message, completing at once when UCX can (as libtc does).
std::string send(Side &S) {
  return rawSendNow(S, TsiAmId, Message, sizeof Message);
}

/// Progresses until \p S's counter reaches \p Want.
std::string await(Side &S, uint64_t Want) {
  return rawProgressUntil(S.W, [&] { return S.Counter >= Want; },
                          "the peer's messages");
}

struct Sizes {
  uint64_t Warmup, Iters, Msgs;
  UcxAmFigures Out;
  HopStamps *Stamps; ///< Shared with the forked server; may be null.
};

/// The server: answers each of the first Warmup + Iters messages, then
/// counts Msgs more and answers once. Returns the process exit code.
int serve(int Fd, void *Arg) {
  const Sizes &N = *static_cast<Sizes *>(Arg);
  uint64_t Pings = N.Warmup + N.Iters, Msgs = N.Msgs;
  Side S;
  std::string Err = init(S, Fd);
  for (uint64_t I = 1; Err.empty() && I <= Pings; ++I)
    if ((Err = await(S, I)).empty())
      Err = stampedAnswer(N.Stamps, [&] { return send(S); });
  if (Err.empty() && (Err = await(S, Pings + Msgs)).empty())
    Err = send(S);
  // Wait for the client to be done before closing the endpoint under it.
  rawAwaitGoodbye(Fd, Err);
  if (Err.empty() && S.Bad)
    Err = std::to_string(S.Bad) + " malformed messages";
  if (Err.empty() && S.Counter != Pings + Msgs)
    Err = "ran " + std::to_string(S.Counter) + " increments, expected " +
          std::to_string(Pings + Msgs);
  rawClose(S);
  return rawServerExit("ucx_am", Err);
}

std::string drive(int Fd, void *Arg) {
  Sizes &N = *static_cast<Sizes *>(Arg);
  Side S;
  std::string Err = init(S, Fd);
  // Ping-pong: each side's handler runs TSI; the client's counter counts
  // the pongs.
  auto T0 = Clock::now();
  for (uint64_t I = 1; Err.empty() && I <= N.Warmup + N.Iters; ++I) {
    if (I == N.Warmup + 1)
      T0 = Clock::now();
    uint64_t Before = N.Stamps ? stampNow() : 0;
    if ((Err = send(S)).empty()) {
      uint64_t After = N.Stamps ? stampNow() : 0;
      Err = await(S, I);
      if (N.Stamps)
        N.Stamps->client(I - 1, Before, After, stampNow());
    }
  }
  if (Err.empty())
    N.Out.LatencyUs = secondsSince(T0) / double(N.Iters) / 2 * 1e6;
  // Rate: back to back, progressing every 16 sends; the server answers once
  // it has run them all.
  T0 = Clock::now();
  for (uint64_t I = 0; Err.empty() && I < N.Msgs; ++I) {
    Err = send(S);
    if ((I & 15) == 15)
      ucp_worker_progress(S.W);
  }
  if (Err.empty() && (Err = await(S, N.Warmup + N.Iters + 1)).empty())
    N.Out.Rate = double(N.Msgs) / secondsSince(T0);
  char Bye = 0;
  writeAll(Fd, &Bye, 1);
  if (Err.empty() && S.Bad)
    Err = std::to_string(S.Bad) + " malformed messages";
  rawClose(S);
  return Err;
}

} // namespace

UcxAmFigures ucxAmTsi(uint64_t Warmup, uint64_t Iters, uint64_t Msgs,
                      HopStamps *Stamps) {
  Sizes N{Warmup, Iters, Msgs, {}, Stamps};
  std::string Err = runPair(serve, &N, drive, &N);
  if (!Err.empty())
    die("ucx_am: " + Err);
  return N.Out;
}

} // namespace bench
