//===- MailboxTest.cpp - Mailbox rings on plain memory --------------------===//
//
// The mailbox logic of transport/Mailbox.h without UCX: a "put" here is a
// memcpy into a ring in this process, in the order UcxTransport does it
// (content, then signal), and credit goes back through a SenderFlags word.
//
//===----------------------------------------------------------------------===//

#include "transport/Mailbox.h"

#include "llvm/Support/Endian.h"

#include "gtest/gtest.h"

#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

using namespace tc;
using namespace tc::mailbox;

namespace {

/// A sender and a receiver around one ring in this process; the sender
/// writes through a Lane, as UcxTransport and the runtime do. The ring's
/// large-frame area (if its shape has one) is attached from the start, as
/// once the sender has asked for it.
struct Loop {
  Geometry G;
  std::vector<char> Ring, Area;
  alignas(64) char Flags[FlagsBytes] = {}; ///< The sender's SenderFlags.
  uint32_t AmSent = 0;
  uint64_t Sent = 0;
  Lane L;
  const Writer &W;
  Reader R;

  explicit Loop(Geometry G)
      : G(G), Ring(G.mappedBytes(), 0), Area(G.AreaBytes, 0),
        L(G, Ring.data(), Flags, &AmSent, &Sent), W(L.writer()), R(G) {
    storeWord(Flags + ReadyOffset, 1); // The receiver polls the ring.
    if (G.AreaBytes) {
      R.setArea(true);
      L.attachArea(Area.data());
    }
  }
  uint64_t released() const {
    return loadWord(Flags + ReleasedOffset, __ATOMIC_ACQUIRE);
  }

  /// writeSlot(): false when the frame does not fit or there is no credit
  /// (UcxTransport then sends it as an active message or waits).
  bool send(const std::string &H, const std::string &B, uint32_t Am = 0) {
    AmSent = Am;
    return L.write(H, B) == Lane::Wrote::Yes;
  }
  /// pollRings(): the next frame, if its slot is signalled.
  bool take(std::string &H, std::string &B, uint32_t *Am = nullptr) {
    char *Slot = Ring.data() + R.slotOffset(R.next());
    uint64_t Signal;
    std::memcpy(&Signal, Slot + SignalOffset, 8);
    if (!R.isNext(Signal))
      return false;
    uint32_t Span = R.spanOf(Signal);
    EXPECT_NE(Span, 0u);
    auto M = readSlot(llvm::StringRef(Slot, size_t(Span) * G.SlotBytes));
    EXPECT_TRUE(!!M) << llvm::toString(M.takeError());
    if (!M)
      return false;
    if (M->InArea) {
      EXPECT_TRUE(R.resolveArea(Area.data(), *M));
      R.takeArea(*M);
    }
    H = M->Header.str();
    B = M->Body.str();
    if (Am)
      *Am = M->AmBefore;
    R.take(Span);
    R.forget(Slot, Span);
    if (uint64_t New = R.release())
      storeWord(Flags + ReleasedOffset, New);
    if (uint64_t New = R.releaseArea())
      storeWord(Flags + AreaReleasedOffset, New);
    return true;
  }
};

TEST(Mailbox, RingWrapsAndSlotsAreReusedInOrder) {
  Geometry G;
  G.SlotBytes = 64;
  G.Slots = 8;
  G.BankSlots = 2;
  Loop L(G);
  std::mt19937 Rng(3);
  // Ten laps, the receiver taking a few at a time: every frame arrives, in
  // order, and a slot left from the lap before never reads as new.
  unsigned Sent = 0, Got = 0;
  while (Got < 80) {
    for (unsigned K = Rng() % 5; K && Sent < 80; --K) {
      std::string Body(Rng() % 40, char('a' + Sent % 26));
      if (!L.send("h" + std::to_string(Sent), Body))
        break;
      ++Sent;
    }
    std::string H, B;
    for (unsigned K = Rng() % 5; K && L.take(H, B); --K) {
      ASSERT_EQ(H, "h" + std::to_string(Got));
      EXPECT_TRUE(B.empty() || B[0] == char('a' + Got % 26));
      ++Got;
    }
  }
  EXPECT_EQ(L.W.next(), 80u);
  EXPECT_EQ(L.R.next(), 80u);
  std::string H, B;
  EXPECT_FALSE(L.take(H, B)) << "an old lap's slot read as new";
}

TEST(Mailbox, CreditIsWholeBanksAndTheSenderStopsAtAFullRing) {
  Geometry G;
  G.SlotBytes = 64;
  G.Slots = 8;
  G.BankSlots = 4;
  Loop L(G);
  for (int I = 0; I < 8; ++I)
    ASSERT_TRUE(L.send("x", ""));
  EXPECT_FALSE(L.send("x", "")) << "wrote over an unreleased slot";
  std::string H, B;
  // Three taken: no whole bank yet, no credit back.
  for (int I = 0; I < 3; ++I)
    ASSERT_TRUE(L.take(H, B));
  EXPECT_EQ(L.released(), 0u);
  EXPECT_FALSE(L.send("x", ""));
  // The fourth frees the first bank: four slots of credit.
  ASSERT_TRUE(L.take(H, B));
  EXPECT_EQ(L.released(), 4u);
  for (int I = 0; I < 4; ++I)
    EXPECT_TRUE(L.send("y", "")) << I;
  EXPECT_FALSE(L.send("y", ""));
  // release() reports only new banks.
  EXPECT_EQ(L.R.release(), 0u);
}

TEST(Mailbox, FramesSpanSlotsUpToHalfTheRing) {
  Geometry G; // 128 slots of 128 bytes
  EXPECT_EQ(G.mappedBytes(), 128u * 128 + 63 * 128) << "the ring and its tail";
  G.AreaBytes = 0; // The ring alone.
  Loop L(G);
  EXPECT_EQ(G.spanMax(), 64u);
  EXPECT_EQ(G.maxFrame(), 64u * 128 - 16);
  EXPECT_EQ(G.mappedBytes(), 128u * 128 + 63 * 128);
  // 112 bytes fill one slot; one more takes two; 8,176 take 64.
  ASSERT_TRUE(L.send(std::string(3, 'h'), std::string(109, 'b')));
  EXPECT_EQ(L.W.next(), 1u);
  ASSERT_TRUE(L.send(std::string(3, 'h'), std::string(110, 'c')));
  EXPECT_EQ(L.W.next(), 3u);
  ASSERT_TRUE(L.send(std::string(3, 'h'), std::string(8173, 'd')));
  EXPECT_EQ(L.W.next(), 67u);
  EXPECT_FALSE(L.send(std::string(3, 'h'), std::string(8174, 'e')))
      << "a span over half the ring";
  EXPECT_EQ(L.W.next(), 67u);
  std::string H, B;
  for (auto [Size, C] : {std::pair<size_t, char>{109, 'b'}, {110, 'c'},
                         {8173, 'd'}}) {
    ASSERT_TRUE(L.take(H, B));
    EXPECT_EQ(B, std::string(Size, C));
  }
  EXPECT_FALSE(L.take(H, B));
  // The geometry's rules bound a span by the credit that must come back.
  EXPECT_EQ((Geometry{64, 8, 8}.spanMax()), 1u);
  EXPECT_EQ((Geometry{64, 8, 4}.spanMax()), 4u);
  EXPECT_EQ((Geometry{64, 8, 2}.spanMax()), 4u);
  EXPECT_EQ((Geometry{64, 2, 1}.spanMax()), 1u);
  EXPECT_EQ((Geometry{65536, 64, 16}.maxFrame()), 65535u);
}

TEST(Mailbox, SpansWrapIntoTheTailAndArriveWhole) {
  Geometry G;
  G.SlotBytes = 64;
  G.Slots = 16;
  G.BankSlots = 4; // Spans of up to 8 slots: frames up to 496 bytes.
  Loop L(G);
  std::mt19937 Rng(7);
  // Thirty laps of frames of one to eight slots, each body a pattern of its
  // own: every frame arrives whole, in order, wherever its span starts.
  unsigned Sent = 0, Got = 0;
  auto BodyOf = [](unsigned N, size_t Size) {
    std::string B(Size, '\0');
    for (size_t I = 0; I < Size; ++I)
      B[I] = char(N * 31 + I);
    return B;
  };
  std::vector<size_t> Sizes;
  while (Got < 200) {
    for (unsigned K = Rng() % 4; K && Sent < 200; --K) {
      size_t Size = Rng() % 480;
      if (!L.send("h" + std::to_string(Sent), BodyOf(Sent, Size)))
        break;
      Sizes.push_back(Size);
      ++Sent;
    }
    std::string H, B;
    for (unsigned K = Rng() % 4; K && L.take(H, B); --K) {
      ASSERT_EQ(H, "h" + std::to_string(Got));
      ASSERT_EQ(B, BodyOf(Got, Sizes[Got])) << Got;
      ++Got;
    }
  }
  EXPECT_GT(L.W.next(), 16u * 30) << "fewer laps than meant";
  std::string H, B;
  EXPECT_FALSE(L.take(H, B));
}

TEST(Mailbox, ASpanWaitsForCreditForAllItsSlots) {
  Loop L(Geometry{64, 8, 2}); // Spans of up to 4 slots.
  std::string Two(60, 't'); // 16 + 1 + 60 bytes: two slots.
  ASSERT_TRUE(L.send("a", ""));
  for (int I = 0; I < 3; ++I)
    ASSERT_EQ(L.L.write("b", Two), Lane::Wrote::Yes) << I;
  // One slot of credit left: a two-slot frame waits, a one-slot one not.
  EXPECT_EQ(L.L.write("c", Two), Lane::Wrote::NoCredit);
  EXPECT_EQ(L.W.next(), 7u);
  EXPECT_EQ(L.L.write("d", ""), Lane::Wrote::Yes);
  EXPECT_EQ(L.L.write("e", ""), Lane::Wrote::NoCredit);
  // The receiver takes the first two frames (three slots): one bank back.
  std::string H, B;
  ASSERT_TRUE(L.take(H, B));
  ASSERT_TRUE(L.take(H, B));
  EXPECT_EQ(L.released(), 2u);
  EXPECT_EQ(L.L.write("c", Two), Lane::Wrote::Yes);
  EXPECT_EQ(L.L.write("e", ""), Lane::Wrote::NoCredit);
  for (const char *Want : {"b", "b", "d", "c"}) {
    ASSERT_TRUE(L.take(H, B));
    EXPECT_EQ(H, Want);
  }
  EXPECT_FALSE(L.take(H, B));
}

TEST(Mailbox, PayloadInsideASpanNeverReadsAsTheNextSignal) {
  Loop L(Geometry{64, 8, 2}); // Spans of up to 4 slots.
  // A frame over slots 0 and 1 whose bytes at slot 1's signal word are the
  // signal the receiver will wait for there in the next lap (message
  // number 9, one slot): frame byte 48 is at slot offset 64.
  std::string Body(100, 'x');
  uint64_t Forged = signalOf(9, 1);
  std::memcpy(&Body[48 - 1], &Forged, 8); // After a 1-byte header.
  ASSERT_TRUE(L.send("A", Body));
  for (int I = 0; I < 6; ++I)
    ASSERT_TRUE(L.send("s", ""));
  std::string H, B;
  for (int I = 0; I < 7; ++I)
    ASSERT_TRUE(L.take(H, B));
  // Slot 1's word was zeroed when the frame was taken.
  EXPECT_EQ(loadWord(L.Ring.data() + 64, __ATOMIC_RELAXED), 0u);
  // Next lap: number 8 in slot 0 arrives; nothing was written at 9.
  ASSERT_TRUE(L.send("n", ""));
  ASSERT_TRUE(L.take(H, B));
  EXPECT_EQ(H, "n");
  EXPECT_FALSE(L.take(H, B)) << "a frame's payload read as a signal";
}

TEST(Mailbox, SignalWordsNameTheSpanAndABadSpanIsADefect) {
  Geometry G; // spanMax 64
  Reader R(G);
  EXPECT_TRUE(R.isNext(signalOf(0, 1)));
  EXPECT_EQ(R.spanOf(signalOf(0, 1)), 1u);
  EXPECT_EQ(R.spanOf(signalOf(0, 64)), 64u);
  EXPECT_EQ(R.spanOf(signalOf(0, 65)), 0u) << "a span the ring cannot hold";
  EXPECT_FALSE(R.isNext(0)) << "a zeroed word";
  EXPECT_FALSE(R.isNext(signalOf(1, 1)));
  R.take(5);
  EXPECT_TRUE(R.isNext(signalOf(5, 2)));
  EXPECT_FALSE(R.isNext(signalOf(5 - 128, 2))) << "the slot's last lap";
  // The count wraps at 48 bits; the span's bits keep a signal from 0.
  EXPECT_EQ(signalOf(CountMask, 1), uint64_t(1) << SpanShift);
}

TEST(Mailbox, TheAmCountTravelsWithTheFrame) {
  Loop L{Geometry()};
  ASSERT_TRUE(L.send("a", "1", 0));
  ASSERT_TRUE(L.send("b", "2", 7));
  ASSERT_TRUE(L.send("c", "3", 0xffffffffu));
  std::string H, B;
  uint32_t Am;
  for (uint32_t Want : {0u, 7u, 0xffffffffu}) {
    ASSERT_TRUE(L.take(H, B, &Am));
    EXPECT_EQ(Am, Want);
  }
}

TEST(Mailbox, ALaneWaitsForItsReceiverAndSaysWhenToRingItsDoorbell) {
  Geometry G;
  G.SlotBytes = 64;
  G.Slots = 4;
  G.BankSlots = 2;
  G.AreaBytes = 0;
  std::vector<char> Ring(G.mappedBytes(), 0);
  alignas(64) char Flags[FlagsBytes] = {};
  uint32_t AmSent = 5;
  uint64_t Sent = 0;
  Lane L(G, Ring.data(), Flags, &AmSent, &Sent);
  EXPECT_FALSE(L.isOpen()) << "a lane opens closed";
  // Until the receiver says it polls the ring, nothing is written.
  EXPECT_EQ(L.write("h", "b"), Lane::Wrote::No);
  EXPECT_EQ(L.writer().next(), 0u);
  storeWord(Flags + ReadyOffset, 1);
  // A header made in place: what the runtime's fast path writes.
  EXPECT_EQ(L.write(2, "body",
                    [](char *Out) {
                      Out[0] = 'h';
                      Out[1] = 'i';
                      return size_t(2);
                    }),
            Lane::Wrote::Yes);
  auto M = readSlot(llvm::StringRef(Ring.data(), G.SlotBytes));
  ASSERT_TRUE(!!M) << llvm::toString(M.takeError());
  EXPECT_EQ(M->Header, "hi");
  EXPECT_EQ(M->Body, "body");
  EXPECT_EQ(M->AmBefore, 5u);
  EXPECT_EQ(Sent, 1u);
  // Too big for a span of two 64-byte slots (half the ring): not written,
  // the next slot stays free.
  EXPECT_EQ(L.write("h", std::string(112, 'b')), Lane::Wrote::No);
  // The receiver sleeps: the frame is written and its doorbell asked for.
  storeWord(Flags + AsleepOffset, 1);
  EXPECT_EQ(L.write("h", "2"), Lane::Wrote::Doorbell);
  storeWord(Flags + AsleepOffset, 0);
  EXPECT_EQ(L.write("h", "3"), Lane::Wrote::Yes);
  EXPECT_EQ(L.write("h", "4"), Lane::Wrote::Yes);
  EXPECT_EQ(L.write("h", "5"), Lane::Wrote::NoCredit) << "wrote over slot 0";
  EXPECT_EQ(Sent, 4u);
  // A bank back: two more.
  storeWord(Flags + ReleasedOffset, 2);
  EXPECT_EQ(L.write("h", "5"), Lane::Wrote::Yes);
  EXPECT_EQ(L.write("h", "6"), Lane::Wrote::Yes);
  EXPECT_EQ(L.write("h", "7"), Lane::Wrote::NoCredit);
  // Opened and closed by the transport; closed for good when the ring goes.
  L.setOpen(true);
  EXPECT_TRUE(L.isOpen());
  L.setOpen(false);
  EXPECT_FALSE(L.isOpen());
  L.close();
  L.setOpen(true);
  EXPECT_FALSE(L.isOpen()) << "a closed lane opened again";
}

TEST(Mailbox, GeometryRules) {
  auto Msg = [](uint32_t SlotBytes, uint32_t Slots, uint32_t Bank) {
    Geometry G{SlotBytes, Slots, Bank};
    llvm::Error E = G.check();
    return E ? llvm::toString(std::move(E)) : std::string("ok");
  };
  EXPECT_EQ(Msg(256, 64, 16), "ok");
  EXPECT_EQ(Msg(64, 1, 1), "ok");
  EXPECT_EQ(Msg(100, 64, 16),
            "mailbox slots of 100 bytes (a multiple of 64 from 64 to 65536)");
  EXPECT_EQ(Msg(0, 64, 16),
            "mailbox slots of 0 bytes (a multiple of 64 from 64 to 65536)");
  EXPECT_EQ(Msg(256, 48, 16),
            "mailbox of 48 slots (a power of two up to 65536)");
  EXPECT_EQ(Msg(256, 64, 128),
            "mailbox banks of 128 slots (a power of two up to the 64 slots)");
  EXPECT_EQ(Msg(256, 64, 0),
            "mailbox banks of 0 slots (a power of two up to the 64 slots)");
  auto Area = [](uint32_t Bytes) {
    Geometry G;
    G.AreaBytes = Bytes;
    llvm::Error E = G.check();
    return E ? llvm::toString(std::move(E)) : std::string("ok");
  };
  EXPECT_EQ(Area(0), "ok");
  EXPECT_EQ(Area(4096), "ok");
  EXPECT_EQ(Area(1 << 24), "ok");
  for (uint32_t Bad : {2048u, 5000u, 1u << 25})
    EXPECT_EQ(Area(Bad), "a mailbox area of " + std::to_string(Bad) +
                             " bytes (0, or a power of two from 4096 to 16 "
                             "MiB)");
  EXPECT_EQ(Geometry().areaMaxFrame(), 65535u) << "sizes are 16-bit";
  Geometry Small;
  Small.AreaBytes = 64 << 10;
  EXPECT_EQ(Small.areaMaxFrame(), 16384u) << "a quarter of the area";
}

TEST(Mailbox, RecordsRoundTripAndEveryCutOrExtensionIsRefused) {
  Offer O;
  O.Shape = Geometry{128, 32, 8, 8192};
  O.RingAddress = 0x7f00deadbeef;
  O.RemoteKey = "packed-key-bytes";
  std::string B = encodeOffer(O);
  auto D = decodeOffer(B);
  ASSERT_TRUE(!!D) << llvm::toString(D.takeError());
  EXPECT_EQ(D->Shape.SlotBytes, 128u);
  EXPECT_EQ(D->Shape.Slots, 32u);
  EXPECT_EQ(D->Shape.BankSlots, 8u);
  EXPECT_EQ(D->Shape.AreaBytes, 8192u);
  EXPECT_EQ(D->RingAddress, O.RingAddress);
  EXPECT_EQ(D->RemoteKey, O.RemoteKey);
  EXPECT_EQ(encodeOffer(*D), B);
  for (size_t Len = 0; Len < B.size(); ++Len) {
    auto Cut = decodeOffer(llvm::StringRef(B).take_front(Len));
    EXPECT_FALSE(!!Cut) << Len;
    if (!Cut)
      llvm::consumeError(Cut.takeError());
  }
  // The error an offer with one defect is refused with.
  auto Refusal = [](const std::string &Bad) {
    auto R = decodeOffer(Bad);
    return R ? std::string("accepted") : llvm::toString(R.takeError());
  };
  EXPECT_EQ(Refusal(B + "!"),
            "malformed mailbox offer: 44 bytes, the remote key needs 43");
  std::string Bad = B;
  Bad[0] = 3; // An area behind the ring: not this ring.
  EXPECT_EQ(Refusal(Bad),
            "malformed mailbox offer: version 3 (this runtime reads 4)");
  Bad = B;
  llvm::support::endian::write32le(&Bad[13], 3000); // Not a power of two.
  EXPECT_EQ(Refusal(Bad), "malformed mailbox offer: a mailbox area of 3000 "
                          "bytes (0, or a power of two from 4096 to 16 MiB)");
  Bad = B;
  llvm::support::endian::write32le(&Bad[5], 33); // Not a power of two.
  EXPECT_EQ(Refusal(Bad), "malformed mailbox offer: mailbox of 33 slots (a "
                          "power of two up to 65536)");

  Accept A;
  A.FlagsAddress = 42;
  A.RemoteKey = "k";
  std::string AB = encodeAccept(A);
  auto AD = decodeAccept(AB);
  ASSERT_TRUE(!!AD) << llvm::toString(AD.takeError());
  EXPECT_EQ(AD->FlagsAddress, 42u);
  EXPECT_EQ(AD->RemoteKey, "k");
  for (size_t Len = 0; Len < AB.size(); ++Len) {
    auto Cut = decodeAccept(llvm::StringRef(AB).take_front(Len));
    EXPECT_FALSE(!!Cut) << Len;
    if (!Cut)
      llvm::consumeError(Cut.takeError());
  }
  A.RemoteKey.clear();
  auto Empty = decodeAccept(encodeAccept(A));
  ASSERT_FALSE(!!Empty);
  EXPECT_EQ(llvm::toString(Empty.takeError()),
            "malformed mailbox accept: remote key of 0 bytes");
}

TEST(Mailbox, AreaOffersRoundTripAndEveryDefectIsRefused) {
  AreaOffer O;
  O.AreaBytes = 256 << 10;
  O.Address = 0x7f0012345000;
  O.RemoteKey = "area-key";
  std::string B = encodeAreaOffer(O);
  EXPECT_EQ(B.size(), 15u + 8);
  auto D = decodeAreaOffer(B);
  ASSERT_TRUE(!!D) << llvm::toString(D.takeError());
  EXPECT_FALSE(D->declined());
  EXPECT_EQ(D->AreaBytes, 256u << 10);
  EXPECT_EQ(D->Address, O.Address);
  EXPECT_EQ(D->RemoteKey, "area-key");
  EXPECT_EQ(encodeAreaOffer(*D), B);
  auto Refusal = [](const std::string &Bad) {
    auto R = decodeAreaOffer(Bad);
    return R ? std::string("accepted") : llvm::toString(R.takeError());
  };
  for (size_t Len = 0; Len < B.size(); ++Len)
    EXPECT_NE(Refusal(B.substr(0, Len)), "accepted") << Len;
  EXPECT_EQ(Refusal(B.substr(0, 3)),
            "malformed mailbox area offer: 3 bytes, need at least 15");
  EXPECT_EQ(Refusal(B + "!"),
            "malformed mailbox area offer: 24 bytes, the remote key needs 23");
  std::string Bad = B;
  Bad[0] = 3;
  EXPECT_EQ(Refusal(Bad),
            "malformed mailbox area offer: version 3 (this runtime reads 4)");
  Bad = B;
  llvm::support::endian::write32le(&Bad[1], 5000);
  EXPECT_EQ(Refusal(Bad), "malformed mailbox area offer: a mailbox area of "
                          "5000 bytes (0, or a power of two from 4096 to 16 "
                          "MiB)");
  Bad = B;
  llvm::support::endian::write16le(&Bad[13], 0);
  EXPECT_EQ(Refusal(Bad.substr(0, 15)),
            "malformed mailbox area offer: remote key of 0 bytes");
  // Declined: 15 bytes, size 0, no address, no key; nothing else goes.
  std::string No = encodeAreaOffer(AreaOffer());
  EXPECT_EQ(No, std::string("\x04", 1) + std::string(14, '\0'));
  auto ND = decodeAreaOffer(No);
  ASSERT_TRUE(!!ND) << llvm::toString(ND.takeError());
  EXPECT_TRUE(ND->declined());
  for (size_t At : {5u, 13u}) {
    Bad = No;
    Bad[At] = 1;
    EXPECT_EQ(Refusal(Bad), "malformed mailbox area offer: a declined area "
                            "with an address or a remote key")
        << At;
  }
  EXPECT_EQ(Refusal(No + "k"), "malformed mailbox area offer: a declined "
                               "area with an address or a remote key");
}

TEST(Mailbox, MalformedSlotsAreRefused) {
  std::vector<char> Slot(64, 0);
  char *C = Slot.data() + ContentOffset;
  auto Read = [&] {
    auto M = readSlot(llvm::StringRef(Slot.data(), Slot.size()));
    return M ? std::string("ok") : llvm::toString(M.takeError());
  };
  encodeSlotContent(C, 0, "hdr", "body");
  EXPECT_EQ(Read(), "ok");
  C[7] = 2;
  EXPECT_EQ(Read(), "malformed mailbox slot: kind 2");
  C[7] = 0;
  llvm::support::endian::write16le(C + 4, 49); // 16 + 49 > 64
  EXPECT_EQ(Read(),
            "malformed mailbox slot: a frame of 49 bytes in a slot of 64");
  llvm::support::endian::write16le(C + 4, 7);
  C[6] = 0;
  EXPECT_EQ(Read(),
            "malformed mailbox slot: a header of 0 bytes in a frame of 7");
  C[6] = 8;
  EXPECT_EQ(Read(),
            "malformed mailbox slot: a header of 8 bytes in a frame of 7");
  EXPECT_EQ(llvm::toString(readSlot("short").takeError()),
            "malformed mailbox slot: 5 bytes");
  // A frame in the area: the slot holds its position, and its header must
  // be within its size; the slot must have room for the position.
  encodeSlotSizes(C, 0, 3, 500, SlotInArea);
  llvm::support::endian::write64le(C + 8, 1234);
  auto M = readSlot(llvm::StringRef(Slot.data(), Slot.size()));
  ASSERT_TRUE(!!M) << llvm::toString(M.takeError());
  EXPECT_TRUE(M->InArea);
  EXPECT_EQ(M->AreaPos, 1234u);
  EXPECT_EQ(M->AreaFrame, 500u);
  EXPECT_EQ(M->AreaHeader, 3u);
  EXPECT_TRUE(M->Header.empty() && M->Body.empty());
  encodeSlotSizes(C, 0, 0, 500, SlotInArea);
  EXPECT_EQ(Read(), "malformed mailbox slot: a header of 0 bytes in an area "
                    "frame of 500");
  encodeSlotSizes(C, 0, 3, 500, SlotInArea);
  EXPECT_EQ(llvm::toString(
                readSlot(llvm::StringRef(Slot.data(), 20)).takeError()),
            "malformed mailbox slot: 20 bytes, an area frame's position "
            "needs 24");
}

TEST(Mailbox, LargeFramesGoThroughTheAreaInTheRingsOrder) {
  // Frames too big for a span go into the area, announced by a slot: they
  // arrive in the order of the writes with the frames in slots, the area's
  // end is skipped where a frame does not fit before it, and the area's
  // credit holds the writer back until the receiver took what is there.
  Geometry G{64, 8, 2, 4096}; // Spans up to 4 slots (240 B); area frames
                              // up to 1 KiB.
  EXPECT_EQ(G.areaMaxFrame(), 1024u);
  Loop L(G);
  EXPECT_FALSE(L.L.takes(1025));
  EXPECT_EQ(L.L.write("h", std::string(1024, 'x')), Lane::Wrote::No);
  std::mt19937 Rng(7);
  std::deque<std::pair<std::string, std::string>> InFlight;
  unsigned Sent = 0, Got = 0, AreaFull = 0;
  while (Got < 400) {
    for (unsigned K = Rng() % 6; K && Sent < 400; --K) {
      size_t Size = Rng() % 3 ? Rng() % 1000 : Rng() % 100;
      std::string H = "h" + std::to_string(Sent);
      std::string B(Size, char('a' + Sent % 26));
      uint64_t Area0 = L.L.areaFrames();
      Lane::Wrote W = L.L.write(H, B);
      if (W == Lane::Wrote::NoCredit) {
        AreaFull += H.size() + Size > G.maxFrame();
        break;
      }
      ASSERT_EQ(W, Lane::Wrote::Yes) << Sent;
      EXPECT_EQ(L.L.areaFrames() - Area0, H.size() + Size > G.maxFrame() ? 1u : 0u);
      InFlight.emplace_back(H, B);
      ++Sent;
    }
    std::string H, B;
    for (unsigned K = Rng() % 6; K && L.take(H, B); --K) {
      ASSERT_FALSE(InFlight.empty());
      ASSERT_EQ(H, InFlight.front().first);
      ASSERT_EQ(B, InFlight.front().second) << H;
      InFlight.pop_front();
      ++Got;
    }
  }
  EXPECT_GT(L.L.areaFrames(), 100u);
  EXPECT_GT(AreaFull, 0u) << "the area never ran full";
  EXPECT_GT(L.L.areaFrames() * 500, 4u * G.AreaBytes) << "no lap of the area";

  // The receiver's checks of a position the sender wrote.
  Reader R(G);
  R.setArea(true);
  const char *Area = L.Area.data();
  SlotMessage M;
  M.InArea = true;
  M.AreaHeader = 2;
  M.AreaFrame = 1000;
  M.AreaPos = 0;
  EXPECT_TRUE(R.resolveArea(Area, M));
  EXPECT_EQ(M.Header.data(), Area);
  EXPECT_EQ(M.Body.size(), 998u);
  R.takeArea(M);
  EXPECT_EQ(R.releaseArea(), 1000u);
  EXPECT_EQ(R.releaseArea(), 0u) << "nothing new";
  for (uint64_t Pos : {999u, 3500u, 4096u + 1000u}) {
    M.AreaPos = Pos; // Before what was taken; across the end; a lap ahead.
    EXPECT_FALSE(R.resolveArea(Area, M)) << Pos;
  }
  M.AreaPos = 4096; // The next lap's start, skipping the end: in order.
  EXPECT_TRUE(R.resolveArea(Area, M));
  M.AreaPos = 1000;
  M.AreaFrame = 1025; // Over a quarter of the area.
  EXPECT_FALSE(R.resolveArea(Area, M));
  Reader NoArea(Geometry{64, 8, 2, 0});
  M.AreaFrame = 10;
  EXPECT_FALSE(NoArea.resolveArea(Area, M));
  Reader NotYet(G); // An area offered, not registered yet (or given back).
  M.AreaPos = 0;
  EXPECT_FALSE(NotYet.resolveArea(Area, M));
  NotYet.setArea(true);
  EXPECT_TRUE(NotYet.resolveArea(Area, M));
  NotYet.setArea(false);
  EXPECT_FALSE(NotYet.resolveArea(Area, M));
}

TEST(Mailbox, ALaneWritesLargeFramesOnlyOnceItsAreaIsAttached) {
  // The area comes later, when the transport has asked for it: until then
  // a frame too big for a span is not written (it goes as an active
  // message) and the lane says it wants the area; then it goes into the
  // area, after the frames written before, in the ring's order.
  Geometry G{64, 8, 2, 4096};
  std::vector<char> Ring(G.mappedBytes(), 0), Area(G.AreaBytes, 0);
  alignas(64) char Flags[FlagsBytes] = {};
  uint32_t AmSent = 0;
  uint64_t Sent = 0;
  Lane L(G, Ring.data(), Flags, &AmSent, &Sent);
  std::string Big(500, 'x');
  EXPECT_TRUE(L.takes(500)) << "the area may still come";
  EXPECT_FALSE(L.wantsArea(500)) << "the receiver does not poll the ring yet";
  storeWord(Flags + ReadyOffset, 1);
  EXPECT_TRUE(L.wantsArea(500));
  EXPECT_FALSE(L.wantsArea(100)) << "a span holds it";
  EXPECT_FALSE(L.wantsArea(1025)) << "over a quarter of the area";
  EXPECT_EQ(L.write("h", "small"), Lane::Wrote::Yes);
  EXPECT_EQ(L.write("h", Big), Lane::Wrote::No);
  EXPECT_EQ(L.areaFrames(), 0u);
  EXPECT_FALSE(L.hasArea());
  L.attachArea(Area.data());
  EXPECT_TRUE(L.hasArea());
  EXPECT_FALSE(L.wantsArea(500)) << "it has one";
  EXPECT_EQ(L.write("h", Big), Lane::Wrote::Yes);
  EXPECT_EQ(L.areaFrames(), 1u);
  EXPECT_EQ(std::string(Area.data() + 1, 500), Big);
  // The receiver reads both in order, the second from the area.
  Reader R(G);
  R.setArea(true);
  auto Slot = [&](uint64_t N) {
    return llvm::StringRef(Ring.data() + R.slotOffset(N), G.SlotBytes);
  };
  auto M = readSlot(Slot(0));
  ASSERT_TRUE(!!M) << llvm::toString(M.takeError());
  EXPECT_EQ(M->Body, "small");
  M = readSlot(Slot(1));
  ASSERT_TRUE(!!M) << llvm::toString(M.takeError());
  ASSERT_TRUE(M->InArea);
  ASSERT_TRUE(R.resolveArea(Area.data(), *M));
  EXPECT_EQ(M->Body, Big);
  // Declined (or not mappable): no area, and the lane no longer takes such
  // frames at all.
  Lane Declined(G, Ring.data(), Flags, &AmSent, &Sent);
  Declined.noArea();
  EXPECT_FALSE(Declined.takes(500));
  EXPECT_FALSE(Declined.wantsArea(500));
  EXPECT_TRUE(Declined.takes(100));
  Declined.attachArea(Area.data());
  EXPECT_FALSE(Declined.hasArea()) << "attached after it was declined";
  // No area offered at all.
  Lane None(Geometry{64, 8, 2, 0}, Ring.data(), Flags, &AmSent, &Sent);
  EXPECT_FALSE(None.takes(500));
  EXPECT_FALSE(None.wantsArea(500));
}

} // namespace
