//===- SenderFuzzer.cpp - libFuzzer target for what a sender receives ----===//
//
// The frame fuzzer checks the parser; this one drives the sending side of
// the protocol engine with the answers a hostile or broken target could
// send. A Runtime connects over the in-process loopback to a peer the
// input plays; the input is a list of steps: a frame from the peer (any
// type, any bytes: Hellos, errors, region data, code requests, fence
// answers for sequence numbers never used), or the sender's own next
// message (the first one carries code), fence or region read. At the end
// the peer closes the connection. Besides no crash (ASan, UBSan), what the
// sender reports holds together: every fence and read completes exactly
// once, by the end; a read gets at most the bytes it asked for; what is
// acknowledged never exceeds what was sent or what the last answered
// fence or read covered, and never goes back.
//
// One Runtime serves every input (making one costs a JIT); each input
// has a connection of its own, whose state the close removes.
//
//===----------------------------------------------------------------------===//

#include "protocol/Runtime.h"
#include "transport/Transport.h"

#include "IfuncBitcode.h"

#include "llvm/Support/Endian.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <vector>

using namespace llvm;
using namespace tc;

namespace {

/// The peer's side: it takes the connection and whatever the sender
/// sends, and answers only what the input says.
struct Peer : TransportHandler {
  std::deque<ConnId> Accepted;
  bool Gone = false;
  void onFrame(ConnId, StringRef, StringRef) override {}
  void onAccept(ConnId C) override { Accepted.push_back(C); }
  void onDisconnect(ConnId, StringRef) override { Gone = true; }
};

struct World {
  std::shared_ptr<LoopbackHub> Hub = createLoopbackHub();
  std::unique_ptr<Transport> PeerT = createLoopbackTransport(Hub);
  Peer P;
  std::unique_ptr<Runtime> R;
  Message Code; ///< A message of a registered ifunc (its first ships code).
};

[[noreturn]] void die(const Twine &Why) {
  std::fprintf(stderr, "tc-sender-fuzzer: %s\n", Why.str().c_str());
  std::abort();
}

World &world() {
  static World *W = [] {
    auto *W = new World;
    W->PeerT->setHandler(&W->P);
    if (Expected<uint16_t> Port = W->PeerT->listen("peer", 1); !Port)
      die(toString(Port.takeError()));
    RuntimeOptions O;
    O.CompileOnProgressThread = true;
    // The peer may send code too (every Runtime is a target as well): none
    // is admitted, so nothing the input makes up runs here.
    O.AllowedHashes = {ArchiveHash{}};
    auto R = Runtime::create(createLoopbackTransport(W->Hub), std::move(O));
    if (!R)
      die(toString(R.takeError()));
    W->R = std::move(*R);
    Expected<std::string> A =
        test::assembleArchive("add", test::adderIR("add"));
    if (!A)
      die(toString(A.takeError()));
    auto F = W->R->registerArchive(*A);
    if (!F)
      die(toString(F.takeError()));
    uint64_t One = 1;
    auto M = W->R->createMessage(*F, &One, sizeof One);
    if (!M)
      die(toString(M.takeError()));
    W->Code = std::move(*M);
    return W;
  }();
  return *W;
}

/// A fence or region read the sender made, and what became of it.
struct Waiter {
  uint64_t Covers = 0; ///< Messages sent before it.
  uint64_t Asked = 0;  ///< A read's length.
  bool Read = false;
  unsigned Calls = 0;
  bool Answered = false; ///< By the target (data, or its error), not a loss.
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *Data, size_t Size) {
  World &W = world();
  Runtime &R = *W.R;
  Expected<ConnId> C = R.connect("peer", 1);
  if (!C)
    die(toString(C.takeError()));
  // The peer's end of the connection.
  for (int I = 0; I < 4 && W.P.Accepted.empty(); ++I)
    W.PeerT->progress();
  if (W.P.Accepted.empty())
    die("the peer accepted nothing");
  ConnId PeerC = W.P.Accepted.front();
  W.P.Accepted.pop_front();
  W.P.Gone = false;

  std::vector<std::unique_ptr<Waiter>> Waiters;
  uint64_t LastAcked = 0, MaxCovered = 0;
  bool Lost = false;
  R.onDisconnect([&](ConnId Conn, StringRef, const Delivery &D) {
    if (Conn != *C)
      return;
    Lost = true;
    if (D.Acknowledged > D.Sent || D.Acknowledged < LastAcked)
      __builtin_trap();
  });
  auto Check = [&] {
    if (Lost)
      return;
    Delivery D = R.delivery(*C);
    // Acknowledged: never more than sent, than the last answered fence or
    // read covered, and never less than before.
    if (D.Acknowledged > D.Sent || D.Acknowledged > MaxCovered ||
        D.Acknowledged < LastAcked || D.Unsent > D.Sent)
      __builtin_trap();
    LastAcked = D.Acknowledged;
  };
  auto Step = [&] {
    W.PeerT->progress();
    R.progress();
    Check();
  };
  auto Track = [&](bool Read, uint64_t Asked) {
    Waiters.push_back(std::make_unique<Waiter>());
    Waiter *Wt = Waiters.back().get();
    Wt->Read = Read;
    Wt->Asked = Asked;
    Wt->Covers = R.delivery(*C).Sent;
    return Wt;
  };
  // A fence or read whose callback runs records what it covered.
  auto Done = [&](Waiter *Wt, bool ByTarget) {
    if (++Wt->Calls > 1)
      __builtin_trap();
    if (ByTarget) {
      Wt->Answered = true;
      MaxCovered = std::max(MaxCovered, Wt->Covers);
    }
  };

  while (Size >= 1) {
    uint8_t Op = Data[0] % 5;
    ++Data;
    --Size;
    switch (Op) {
    case 0: { // A frame from the peer: header length, body length, bytes.
      if (Size < 3)
        break;
      size_t HL = Data[0] % 40;
      size_t BL = support::endian::read16le(Data + 1);
      Data += 3;
      Size -= 3;
      HL = std::min(HL, Size);
      BL = std::min(BL, Size - HL);
      StringRef H(reinterpret_cast<const char *>(Data), HL);
      StringRef B(reinterpret_cast<const char *>(Data) + HL, BL);
      Data += HL + BL;
      Size -= HL + BL;
      W.PeerT->send(PeerC, H, B, nullptr);
      break;
    }
    case 1: // The sender's next message.
      R.send(*C, W.Code);
      break;
    case 2: // A local invoke.
      R.sendLocal(*C, "increment", "x");
      break;
    case 3: { // A fence.
      Waiter *Wt = Track(false, 0);
      R.fence(*C, [&, Wt](Error E) {
        // A target's error says the fence was processed; a lost
        // connection does not.
        bool ByTarget = !E || !E.isA<ConnectionError>();
        consumeError(std::move(E));
        Done(Wt, ByTarget);
      });
      break;
    }
    case 4: { // A region read of up to 255 bytes.
      uint64_t Len = Size ? Data[0] : 8;
      if (Size) {
        ++Data;
        --Size;
      }
      Waiter *Wt = Track(true, Len);
      R.readRegion(*C, Len, [&, Wt](Expected<std::string> D) {
        if (D && D->size() > Wt->Asked)
          __builtin_trap();
        bool ByTarget = D || !D.errorIsA<ConnectionError>();
        if (!D)
          consumeError(D.takeError());
        Done(Wt, ByTarget);
      });
      break;
    }
    }
    Step();
  }
  // The peer closes: whatever still waits fails, once.
  W.PeerT->disconnect(PeerC);
  for (int I = 0; I < 16 && !Lost; ++I)
    Step();
  if (!Lost || R.delivery(*C).Sent != 0)
    __builtin_trap(); // Reported, and its state gone.
  for (const auto &Wt : Waiters)
    if (Wt->Calls != 1)
      __builtin_trap();
  R.onDisconnect(nullptr);
  return 0;
}
