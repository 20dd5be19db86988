//===- UcxAmSweep.cpp - sss and iput on UCX's own active messages ---------===//
//
// `tc-bench sss|iput` mode ucx_am: the server-side sum and the indirect put
// written straight on UCP, without libtc, with the payload tc sends and
// libtc's UCX setup (RawUcx.h), in this process and a forked one on the
// server CPU. What a UCX user writing them would do:
//  - the client sends one active message per call: a 4-byte function id as
//    the AM header (so the handler knows the function before rendezvous
//    data arrives), the payload as the AM data, from the one buffer it
//    keeps, with a completion callback; UCX picks eager or rendezvous. It
//    lets UCX hold at most MaxInFlight sends at a time;
//  - the server's handler looks the id up. An eager payload is copied into
//    a reused aligned buffer (the functions are written for an aligned,
//    writable payload, as the ifunc ABI gives them) and the function runs
//    at once. A rendezvous payload is received with ucp_am_recv_data_nbx
//    into an aligned buffer the server reuses (a free list: as many
//    buffers as receives were ever in flight at once), and the function
//    runs when the receive completes;
//  - the server answers pings with a 1-byte active message from its
//    progress loop, as tc-bench's libtc server does, and once more after
//    the rate run; then it reports its counters, sum and buffer hash over
//    the socket pair, and the client checks them as it checks tc's.
//
//===----------------------------------------------------------------------===//

#include "Bench.h"
#include "RawUcx.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace bench {
namespace {

constexpr unsigned CallAmId = 4, PongAmId = 5;
/// Sends UCX may hold at once before the client progresses until one
/// completes: libtc's limit for large frames (MaxLargeInFlight in
/// UcxTransportImpl.h). UCX 1.13 slows down with every send it holds: 5,000
/// 16 KiB rendezvous sends in flight ran at 1,900 msgs/s, 8 at a time at
/// 40,000 (docs/transport.md, "Large frames").
constexpr uint64_t MaxInFlight = 8;
/// Buffers are aligned for the functions (and to a cache line).
constexpr size_t Align = 64;

using LocalFn = void (*)(void *, size_t, void *);

struct FreeDeleter {
  void operator()(void *P) const { std::free(P); }
};
using AlignedBuf = std::unique_ptr<char, FreeDeleter>;

AlignedBuf alignedBuf(size_t Size) {
  size_t Bytes = (Size + Align - 1) / Align * Align;
  return AlignedBuf(static_cast<char *>(std::aligned_alloc(Align, Bytes)));
}

struct ServerSide;

/// A rendezvous receive buffer; on the free list between receives.
struct RecvBuf {
  ServerSide *S = nullptr;
  AlignedBuf Data;
  size_t Cap = 0, Len = 0;
  uint32_t Fn = 0;
};

struct ServerSide : RawSide {
  LocalFn Functions[2] = {sss_main, iput_main};
  void *Args[2];
  sss_target_t Sss{};
  iput_target_t Iput{};
  std::vector<unsigned char> IputBuf = std::vector<unsigned char>(1 << 20);
  uint64_t Bad = 0;
  /// Every rendezvous buffer made, and the ones not in use.
  std::vector<std::unique_ptr<RecvBuf>> Buffers;
  std::vector<RecvBuf *> Free;
  /// For eager payloads: the function's aligned copy.
  AlignedBuf Eager;
  size_t EagerCap = 0;

  ServerSide() : Args{&Sss, &Iput} {
    Iput.base = IputBuf.data();
    Iput.size = IputBuf.size();
  }
  uint64_t count() const { return Sss.count + Iput.count; }

  RecvBuf *take(size_t Len) {
    while (!Free.empty()) {
      RecvBuf *B = Free.back();
      Free.pop_back();
      if (B->Cap >= Len)
        return B;
      B->Data = alignedBuf(Len); // Too small: grow it.
      B->Cap = Len;
      return B;
    }
    Buffers.push_back(std::make_unique<RecvBuf>());
    RecvBuf *B = Buffers.back().get();
    B->S = this;
    B->Data = alignedBuf(Len);
    B->Cap = Len;
    return B;
  }
  void run(RecvBuf *B) {
    Functions[B->Fn](B->Data.get(), B->Len, Args[B->Fn]);
    Free.push_back(B);
  }
};

void onRecvDone(void *Req, ucs_status_t St, size_t, void *User) {
  auto *B = static_cast<RecvBuf *>(User);
  if (St == UCS_OK) {
    B->S->run(B);
  } else {
    ++B->S->Bad;
    B->S->Free.push_back(B);
  }
  ucp_request_free(Req);
}

ucs_status_t onCall(void *Arg, const void *Header, size_t HeaderLen,
                    void *Data, size_t Length,
                    const ucp_am_recv_param_t *Param) {
  auto *S = static_cast<ServerSide *>(Arg);
  uint32_t Id;
  if (HeaderLen != sizeof Id) {
    ++S->Bad;
    return UCS_OK;
  }
  std::memcpy(&Id, Header, sizeof Id);
  if (Id >= sizeof S->Functions / sizeof *S->Functions) {
    ++S->Bad;
    return UCS_OK;
  }
  if (Param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    RecvBuf *B = S->take(Length);
    B->Len = Length;
    B->Fn = Id;
    ucp_request_param_t P;
    P.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    P.cb.recv_am = onRecvDone;
    P.user_data = B;
    ucs_status_ptr_t R =
        ucp_am_recv_data_nbx(S->W, Data, B->Data.get(), Length, &P);
    if (R == nullptr) {
      S->run(B);
    } else if (UCS_PTR_IS_ERR(R)) {
      ++S->Bad;
      S->Free.push_back(B);
    }
    return UCS_INPROGRESS;
  }
  if (S->EagerCap < Length) {
    S->Eager = alignedBuf(Length);
    S->EagerCap = Length;
  }
  std::memcpy(S->Eager.get(), Data, Length);
  S->Functions[Id](S->Eager.get(), Length, S->Args[Id]);
  return UCS_OK;
}

/// The client's side: counts pongs and the sends UCX still holds.
struct ClientSide : RawSide {
  uint64_t Pongs = 0;
  uint64_t Held = 0;
  uint64_t Failed = 0;
};

ucs_status_t onPong(void *Arg, const void *, size_t, void *, size_t,
                    const ucp_am_recv_param_t *) {
  ++static_cast<ClientSide *>(Arg)->Pongs;
  return UCS_OK;
}

void onSendDone(void *Req, ucs_status_t St, void *User) {
  auto *C = static_cast<ClientSide *>(User);
  --C->Held;
  C->Failed += St != UCS_OK;
  ucp_request_free(Req);
}

/// The pong: one byte, completing at once when UCX can.
std::string sendPong(RawSide &S) {
  static const unsigned char One = 1;
  return rawSendNow(S, PongAmId, &One, 1);
}

/// What a run does: the server's part (Pings, Msgs), and the client's.
struct Plan {
  uint64_t Pings, Msgs;
  bool Sum;
  const void *Payload;
  size_t Size;
  uint64_t Warmup, Iters;
  UcxAmFigures Out;
  ServerStats Stats;
};

/// What the server reports when it is done.
struct Report {
  uint64_t SssCount, SssSum, IputCount, IputRejected, IputHash, Bad;
};

int serve(int Fd, void *Arg) {
  const Plan &N = *static_cast<Plan *>(Arg);
  ServerSide S;
  std::string Err = rawAmInit(S, Fd, CallAmId, onCall, &S);
  auto Await = [&](uint64_t Want) {
    return rawProgressUntil(S.W, [&] { return S.count() >= Want; },
                            "the client's messages");
  };
  for (uint64_t I = 1; Err.empty() && I <= N.Pings; ++I)
    if ((Err = Await(I)).empty())
      Err = sendPong(S);
  if (Err.empty() && (Err = Await(N.Pings + N.Msgs)).empty())
    Err = sendPong(S);
  // Wait for the client to be done before closing the endpoint under it.
  rawAwaitGoodbye(Fd, Err);
  Report R{S.Sss.count,    S.Sss.sum,
           S.Iput.count,   S.Iput.rejected,
           fnv1a(S.IputBuf.data(), S.IputBuf.size()), S.Bad};
  if (Err.empty() && !writeAll(Fd, &R, sizeof R))
    Err = "cannot report to the client";
  rawClose(S);
  return rawServerExit("ucx_am", Err);
}

/// The client: ping-pongs, then the rate run.
std::string drive(int Fd, void *Arg) {
  Plan &N = *static_cast<Plan *>(Arg);
  const uint64_t Warmup = N.Warmup, Iters = N.Iters, Msgs = N.Msgs;
  const void *Payload = N.Payload;
  const size_t Size = N.Size;
  ClientSide C;
  std::string Err = rawAmInit(C, Fd, PongAmId, onPong, &C);
  const uint32_t Fn = N.Sum ? 0 : 1;
  ucp_request_param_t P;
  P.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  P.cb.send = onSendDone;
  P.user_data = &C;
  auto Send = [&] {
    ucs_status_ptr_t R =
        ucp_am_send_nbx(C.Ep, CallAmId, &Fn, sizeof Fn, Payload, Size, &P);
    if (UCS_PTR_IS_ERR(R))
      Err = std::string("ucp_am_send_nbx: ") +
            ucs_status_string(UCS_PTR_STATUS(R));
    else if (R)
      ++C.Held;
  };
  auto Await = [&](uint64_t Want) {
    if (Err.empty())
      Err = rawProgressUntil(C.W, [&] { return C.Pongs >= Want; },
                             "the server's answer");
  };
  UcxAmFigures &F = N.Out;
  auto T0 = Clock::now();
  for (uint64_t I = 1; Err.empty() && I <= N.Pings; ++I) {
    if (I == Warmup + 1)
      T0 = Clock::now();
    Send();
    Await(I);
  }
  if (Err.empty())
    F.LatencyUs = secondsSince(T0) / double(Iters) / 2 * 1e6;
  // Rate: back to back, progressing every 16 sends; the server answers once
  // it has run them all.
  T0 = Clock::now();
  for (uint64_t I = 0; Err.empty() && I < Msgs; ++I) {
    Send();
    if ((I & 15) == 15)
      ucp_worker_progress(C.W);
    // Bounded, as every wait here: a server that died unreaped still looks
    // alive to UCX over shared memory, and its sends would never complete.
    if (C.Held >= MaxInFlight)
      Err = rawProgressUntil(C.W, [&] { return C.Held < MaxInFlight; },
                             "room for another send");
  }
  Await(N.Pings + 1);
  if (Err.empty())
    F.Rate = double(Msgs) / secondsSince(T0);
  if (Err.empty())
    Err = rawProgressUntil(C.W, [&] { return C.Held == 0; },
                           "the last sends to complete");
  if (Err.empty() && C.Failed)
    Err = std::to_string(C.Failed) + " sends failed";
  char Bye = 0;
  Report R{};
  if (Err.empty() &&
      (!writeAll(Fd, &Bye, 1) || !readAll(Fd, &R, sizeof R)))
    Err = "the server did not report";
  if (Err.empty() && R.Bad)
    Err = std::to_string(R.Bad) + " messages the server could not run";
  rawClose(C);
  N.Stats = ServerStats{};
  N.Stats.SssCount = R.SssCount;
  N.Stats.SssSum = R.SssSum;
  N.Stats.IputCount = R.IputCount;
  N.Stats.IputRejected = R.IputRejected;
  N.Stats.IputHash = R.IputHash;
  return Err;
}

} // namespace

UcxAmFigures ucxAmSweep(bool Sum, const void *Payload, size_t Size,
                        uint64_t Warmup, uint64_t Iters, uint64_t Msgs,
                        ServerStats &Stats) {
  Plan N{Warmup + Iters, Msgs, Sum, Payload, Size, Warmup, Iters, {}, {}};
  std::string Err = runPair(serve, &N, drive, &N);
  if (!Err.empty())
    die("ucx_am: " + Err);
  Stats = N.Stats;
  return N.Out;
}

} // namespace bench
