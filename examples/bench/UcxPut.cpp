//===- UcxPut.cpp - A one-sided put ping-pong on raw UCX ------------------===//
//
// `tc-bench tsi` reference ucx_put, beside the mailbox mode: what UCX's own
// one-sided put costs one way, measured as ucx_perftest's put latency test
// measures it. Two processes (this one and a forked child on the server
// CPU) each register a buffer (ucp_mem_map, allocated by UCX so shared
// memory can map it), swap addresses and packed keys over a socket pair,
// and then bounce: one puts a message of the given size whose last 8 bytes
// are the round's number into the other's buffer with ucp_put_nbi, the
// other polls those 8 bytes and puts the same back. Same UCX setup as libtc
// with mailboxes (AM, RMA and WAKEUP features, peer error handling).
//
//===----------------------------------------------------------------------===//

#include "Bench.h"
#include "RawUcx.h"
#include "Stamps.h"

#include <cstring>

namespace bench {
namespace {

constexpr size_t BufferBytes = 4096;

/// One side: its buffer and the peer's.
struct PutSide : RawSide {
  ucp_mem_h Mem = nullptr;
  volatile char *Buf = nullptr;
  ucp_rkey_h PeerKey = nullptr;
  uint64_t PeerAddr = 0;
  std::string Message; ///< What this side puts; its tail is the round.
};

struct PutRun {
  uint64_t Warmup, Iters;
  size_t Size;
  HopStamps *Stamps; ///< Shared with the forked server; may be null.
  double LatencyUs = 0;
};

std::string setUp(PutSide &S, int Fd, size_t Size) {
  std::string Err = rawInit(S, UCP_FEATURE_AM | UCP_FEATURE_RMA |
                                   UCP_FEATURE_WAKEUP);
  if (Err.empty())
    Err = rawConnect(S, Fd);
  if (!Err.empty())
    return Err;
  ucp_mem_map_params_t P{};
  P.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                 UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  P.address = nullptr;
  P.length = BufferBytes;
  P.flags = UCP_MEM_MAP_ALLOCATE;
  if (ucs_status_t St = ucp_mem_map(S.Ctx, &P, &S.Mem); St != UCS_OK)
    return std::string("ucp_mem_map: ") + ucs_status_string(St);
  ucp_mem_attr_t A{};
  A.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
  if (ucs_status_t St = ucp_mem_query(S.Mem, &A); St != UCS_OK)
    return std::string("ucp_mem_query: ") + ucs_status_string(St);
  S.Buf = static_cast<volatile char *>(A.address);
  std::memset(A.address, 0, BufferBytes);
  void *Packed;
  size_t Len;
  if (ucs_status_t St = ucp_rkey_pack(S.Ctx, S.Mem, &Packed, &Len);
      St != UCS_OK)
    return std::string("ucp_rkey_pack: ") + ucs_status_string(St);
  std::string Key(static_cast<const char *>(Packed), Len);
  ucp_rkey_buffer_release(Packed);
  uint64_t Addr = reinterpret_cast<uint64_t>(A.address);
  std::string PeerKey;
  if (!writeAll(Fd, &Addr, sizeof Addr) || !writeBlob(Fd, Key) ||
      !readAll(Fd, &S.PeerAddr, sizeof S.PeerAddr) || !readBlob(Fd, PeerKey))
    return "the peer process did not send its buffer's key";
  if (ucs_status_t St = ucp_ep_rkey_unpack(S.Ep, PeerKey.data(), &S.PeerKey);
      St != UCS_OK)
    return std::string("ucp_ep_rkey_unpack: ") + ucs_status_string(St);
  S.Message.assign(Size, '\x5a');
  return "";
}

void tearDown(PutSide &S) {
  if (S.PeerKey)
    ucp_rkey_destroy(S.PeerKey);
  if (S.Mem)
    ucp_mem_unmap(S.Ctx, S.Mem);
  rawClose(S);
}

/// Puts round \p I's message into the peer's buffer.
std::string put(PutSide &S, uint64_t I) {
  std::memcpy(&S.Message[S.Message.size() - 8], &I, 8);
  ucs_status_t St = ucp_put_nbi(S.Ep, S.Message.data(), S.Message.size(),
                                S.PeerAddr, S.PeerKey);
  if (St == UCS_INPROGRESS) // Not over shared memory: wait for it.
    St = ucp_worker_flush(S.W);
  return St == UCS_OK ? "" : std::string("ucp_put_nbi: ") +
                                 ucs_status_string(St);
}

/// Polls this side's buffer until round \p I's message is there.
std::string await(PutSide &S, uint64_t I, size_t Size) {
  // Progress: RMA over TCP needs it; shm does not.
  return rawProgressUntil(
      S.W,
      [&] {
        uint64_t Got;
        std::memcpy(&Got, const_cast<const char *>(S.Buf) + Size - 8, 8);
        return Got == I;
      },
      "the peer's put");
}

int serve(int Fd, void *Arg) {
  const PutRun &R = *static_cast<PutRun *>(Arg);
  PutSide S;
  std::string Err = setUp(S, Fd, R.Size);
  for (uint64_t I = 1; Err.empty() && I <= R.Warmup + R.Iters; ++I)
    if ((Err = await(S, I, R.Size)).empty())
      Err = stampedAnswer(R.Stamps, [&] { return put(S, I); });
  rawAwaitGoodbye(Fd, Err);
  tearDown(S);
  return rawServerExit("ucx_put", Err);
}

std::string drive(int Fd, void *Arg) {
  PutRun &R = *static_cast<PutRun *>(Arg);
  PutSide S;
  std::string Err = setUp(S, Fd, R.Size);
  auto T0 = Clock::now();
  for (uint64_t I = 1; Err.empty() && I <= R.Warmup + R.Iters; ++I) {
    if (I == R.Warmup + 1)
      T0 = Clock::now();
    uint64_t Before = R.Stamps ? stampNow() : 0;
    if ((Err = put(S, I)).empty()) {
      uint64_t After = R.Stamps ? stampNow() : 0;
      Err = await(S, I, R.Size);
      if (R.Stamps)
        R.Stamps->client(I - 1, Before, After, stampNow());
    }
  }
  if (Err.empty())
    R.LatencyUs = secondsSince(T0) / double(R.Iters) / 2 * 1e6;
  char Bye = 0;
  writeAll(Fd, &Bye, 1);
  tearDown(S);
  return Err;
}

} // namespace

double ucxPutLatency(uint64_t Warmup, uint64_t Iters, size_t Size,
                     HopStamps *Stamps) {
  PutRun R{Warmup, Iters, std::max<size_t>(Size, 8), Stamps};
  std::string Err = runPair(serve, &R, drive, &R);
  if (!Err.empty())
    die("ucx_put: " + Err);
  return R.LatencyUs;
}

} // namespace bench
