//===- RuntimeTest.cpp - The protocol engine over the loopback seam -------===//
//
// Two Runtimes in one process joined by the loopback transport: one sends,
// one runs. Each test drives both until a condition holds or a step limit
// is reached (no sleeps, no timeouts to tune).
//
//===----------------------------------------------------------------------===//

#include "IfuncIR.h"
#include "protocol/Runtime.h"

#include "tc/Version.h"

#include "gtest/gtest.h"

#include <cstring>
#include <functional>
#include <optional>

using namespace tc;
using namespace tc::test;

namespace {

struct Pair {
  std::shared_ptr<LoopbackHub> Hub = createLoopbackHub();
  std::unique_ptr<Runtime> Source, Target;
  ConnId Conn = 0;
  uint64_t Counter = 0;
  std::vector<RemoteError> Errors;

  explicit Pair(RuntimeOptions TargetOpts = {}, bool SayHello = true,
                RuntimeOptions SourceOpts = {}) {
    auto S = Runtime::create(createLoopbackTransport(Hub), SourceOpts);
    auto T = Runtime::create(createLoopbackTransport(Hub), TargetOpts);
    EXPECT_TRUE(S && T);
    Source = std::move(*S);
    Target = std::move(*T);
    Target->setTargetArgs(&Counter);
    auto Port = Target->transport().listen("target", 1);
    EXPECT_TRUE(!!Port);
    auto C = SayHello ? Source->connect("target", 1)
                      : Source->transport().connect("target", 1);
    EXPECT_TRUE(!!C);
    Conn = *C;
    Source->onRemoteError([this](const RemoteError &E) { Errors.push_back(E); });
  }

  /// Progresses both sides until \p Done or 10000 rounds.
  bool runUntil(const std::function<bool()> &Done) {
    for (int I = 0; I < 10000; ++I) {
      if (Done())
        return true;
      Source->progress();
      if (Target)
        Target->progress();
    }
    return Done();
  }

  std::shared_ptr<const Ifunc> reg(const std::string &Bytes) {
    auto F = Source->registerArchive(Bytes);
    EXPECT_TRUE(!!F) << (F ? "" : llvm::toString(F.takeError()));
    return F ? *F : nullptr;
  }

  void send(const std::shared_ptr<const Ifunc> &F, uint64_t Arg) {
    auto M = Source->createMessage(F, &Arg, sizeof(Arg));
    ASSERT_TRUE(!!M) << llvm::toString(M.takeError());
    Source->send(Conn, *M);
  }

  /// Sends a fence and waits for its reply.
  bool fence() {
    bool Done = false;
    Source->fence(Conn, [&](llvm::Error E) {
      EXPECT_FALSE(!!E);
      llvm::consumeError(std::move(E));
      Done = true;
    });
    return runUntil([&] { return Done; });
  }
};

TEST(Runtime, CodeTravelsOncePerConnection) {
  Pair P;
  auto F = P.reg(ifuncArchive("add", adderIR("add")));
  ASSERT_TRUE(F);
  for (int I = 1; I <= 5; ++I)
    P.send(F, I);
  ASSERT_TRUE(P.fence());
  EXPECT_EQ(P.Counter, 15u);
  const RuntimeCounters &C = P.Target->counters();
  EXPECT_EQ(C.Received, 5u);
  EXPECT_EQ(C.Executed, 5u);
  EXPECT_EQ(C.CodeFrames, 1u);
  EXPECT_EQ(C.CacheHits, 4u);
  EXPECT_EQ(C.Compiles, 1u);
  EXPECT_TRUE(P.Errors.empty());
}

TEST(Runtime, ShippedArchiveHasNoSourceMember) {
  Pair P;
  auto F = P.reg(ifuncArchive("add", adderIR("add")));
  ASSERT_TRUE(F);
  auto A = readArchive(llvm::MemoryBufferRef(F->Bytes, "shipped"));
  ASSERT_TRUE(!!A);
  for (const Member &M : A->Members)
    EXPECT_EQ(M.TheRole, Role::Target);
  EXPECT_EQ(A->Hash, F->Hash);
}

/// The adder archive with a second target member for another triple.
static std::string twoTripleArchive(Compression C = Compression::None) {
  Archive A;
  A.Name = "add";
  A.Members.push_back(hostMember(adderIR("add")));
  A.Members.back().Compress = C;
  Member Other = A.Members.back();
  Other.Triple = llvm::Triple(Other.Triple).isAArch64()
                     ? "x86_64-unknown-linux-gnu"
                     : "aarch64-unknown-linux-gnu";
  A.Members.push_back(Other);
  A.Members.push_back(hostMember(copyingSourceIR("add"), Role::Source));
  auto Bytes = writeArchive(A);
  EXPECT_TRUE(!!Bytes);
  return Bytes ? Bytes->str().str() : std::string();
}

/// Sends a Hello frame with \p Caps on \p C, as a peer would.
static void sendRawHello(Transport &T, ConnId C, const Capabilities &Caps) {
  std::string Body = encodeCapabilities(Caps);
  Frame H;
  H.Type = FrameType::Hello;
  H.Data = Body;
  std::string Header;
  encodeFrameHeader(H, Header);
  T.send(C, Header, Body, nullptr);
}

/// A Runtime connected (with Hello) to a target played by hand: OnFrame
/// sees every frame the Runtime sends, and may answer through Raw.
struct HandPlayedTarget : TransportHandler {
  std::shared_ptr<LoopbackHub> Hub = createLoopbackHub();
  std::unique_ptr<Runtime> S;
  std::unique_ptr<Transport> Raw = createLoopbackTransport(Hub);
  std::function<void(ConnId, llvm::StringRef, llvm::StringRef)> OnFrame;
  ConnId Conn = 0;
  std::optional<Message> M;

  HandPlayedTarget(const std::string &Archive) {
    auto R = Runtime::create(createLoopbackTransport(Hub));
    EXPECT_TRUE(!!R);
    S = std::move(*R);
    Raw->setHandler(this);
    EXPECT_TRUE(!!Raw->listen("hand", 1));
    auto C = S->connect("hand", 1);
    EXPECT_TRUE(!!C);
    Conn = *C;
    auto F = S->registerArchive(Archive);
    EXPECT_TRUE(!!F);
    uint64_t Arg = 1;
    auto Msg = S->createMessage(*F, &Arg, sizeof Arg);
    EXPECT_TRUE(!!Msg);
    M = std::move(*Msg);
  }
  void onFrame(ConnId C, llvm::StringRef Header,
               llvm::StringRef Body) override {
    OnFrame(C, Header, Body);
  }
  void onDisconnect(ConnId, llvm::StringRef) override {}
  /// Progresses both sides until \p Done or 1000 rounds.
  void runUntil(const std::function<bool()> &Done) {
    for (int I = 0; I < 1000 && !Done(); ++I) {
      S->progress();
      Raw->progress();
    }
  }
};

TEST(Runtime, HelloLetsTheSenderShipOnlyTheMemberTheTargetRuns) {
  for (bool All : {false, true}) {
    RuntimeOptions SourceOpts;
    SourceOpts.ShipAllMembers = All;
    Pair P({}, /*SayHello=*/true, SourceOpts);
    std::vector<std::string> Events;
    P.Target->onEvent([&](llvm::StringRef E) { Events.push_back(E.str()); });
    auto F = P.reg(twoTripleArchive());
    ASSERT_TRUE(F);
    // Sent before the target's Hello is here: held, then shipped thin.
    P.send(F, 2);
    P.send(F, 3);
    ASSERT_TRUE(P.fence());
    EXPECT_EQ(P.Counter, 5u);
    EXPECT_TRUE(P.Errors.empty());
    const Capabilities *Peer = P.Source->peer(P.Conn);
    ASSERT_TRUE(Peer);
    EXPECT_EQ(Peer->Triple, P.Target->capabilities().Triple);
    EXPECT_EQ(Peer->CPU, P.Target->capabilities().CPU);
    std::string Code;
    for (const std::string &E : Events)
      if (llvm::StringRef(E).starts_with("code add "))
        Code = E;
    EXPECT_NE(Code.find(All ? "2 member(s), 1 omitted"
                            : "1 member(s), 2 omitted"),
              std::string::npos)
        << Code;
  }
}

TEST(Runtime, ATargetWithoutTheDictionaryGetsTheMemberAsPlainZstd) {
  uint64_t Sent[2];
  for (bool HasDict : {true, false}) {
    RuntimeOptions TargetOpts;
    if (!HasDict)
      TargetOpts.Dictionaries = std::vector<std::string>();
    Pair P(TargetOpts);
    auto F = P.reg(twoTripleArchive(Compression::ZstdDict));
    ASSERT_TRUE(F);
    P.send(F, 1);
    ASSERT_TRUE(P.fence());
    EXPECT_EQ(P.Counter, 1u);
    EXPECT_TRUE(P.Errors.empty());
    Sent[HasDict] = P.Source->counters().BytesSent;
  }
  // The dictionary saves the fixed bitcode overhead; without it the member
  // still travels compressed, and still runs.
  EXPECT_GT(Sent[false], Sent[true] + 100);
}

TEST(Runtime, APeerWithNoCommonWireVersionIsRefusedAndTheTargetServesOn) {
  Pair P;
  auto F = P.reg(ifuncArchive("add", adderIR("add")));
  P.send(F, 1);
  ASSERT_TRUE(P.fence());
  // A newer peer on a second connection says Hello with wire 2-2.
  auto C2 = P.Source->transport().connect("target", 1);
  ASSERT_TRUE(!!C2);
  Capabilities Newer = P.Source->capabilities();
  Newer.WireMin = Newer.WireMax = 2;
  Newer.TcVersion = "9.0.0";
  sendRawHello(P.Source->transport(), *C2, Newer);
  ASSERT_TRUE(P.runUntil([&] { return !P.Errors.empty(); }));
  EXPECT_EQ(P.Errors[0].Status, WireStatus::UnsupportedVersion);
  EXPECT_EQ(P.Errors[0].Message,
            "the peer speaks tc wire versions 2-2 (tc 9.0.0), this process "
            "1-1 (tc " TC_VERSION_STRING "): no version in common");
  // The first connection is served as before.
  P.send(F, 1);
  ASSERT_TRUE(P.fence());
  EXPECT_EQ(P.Counter, 2u);
}

TEST(Runtime, SendsToATargetWithNoCommonWireVersionFailWithOneError) {
  // The target answers our Hello with wire 3-3.
  HandPlayedTarget H(ifuncArchive("add", adderIR("add")));
  H.OnFrame = [&](ConnId C, llvm::StringRef Header, llvm::StringRef Body) {
    auto F = decodeFrame(Header, Body);
    if (!F || F->Type != FrameType::Hello) {
      llvm::consumeError(F.takeError());
      return;
    }
    Capabilities Caps = *decodeCapabilities(F->Data);
    Caps.WireMin = Caps.WireMax = 3;
    Caps.TcVersion = "7.0.0";
    sendRawHello(*H.Raw, C, Caps);
  };
  std::vector<std::string> Failures;
  auto Record = [&](llvm::Error E) {
    Failures.push_back(E ? llvm::toString(std::move(E)) : "ok");
  };
  H.S->send(H.Conn, *H.M, Record);
  H.S->fence(H.Conn, Record);
  H.runUntil([&] { return Failures.size() >= 2; });
  ASSERT_EQ(Failures.size(), 2u);
  std::string Want = "the peer speaks tc wire versions 3-3 (tc 7.0.0), this "
                     "process 1-1 (tc " TC_VERSION_STRING
                     "): no version in common";
  EXPECT_EQ(Failures[0], Want);
  EXPECT_EQ(Failures[1], Want);
  // Later sends fail at once, with the same words.
  H.S->send(H.Conn, *H.M, Record);
  ASSERT_EQ(Failures.size(), 3u);
  EXPECT_EQ(Failures[2], Want);
}

TEST(Runtime, APeerThatReadsOnlyArchiveFormat2GetsItsCopyInFormat2) {
  // One target answers our Hello as a tc from before format 3 did (no
  // archive record), one says it reads 2-3: each gets the thin copy in the
  // newest format it reads, with the same hash.
  for (bool Old : {true, false}) {
    HandPlayedTarget H(twoTripleArchive(Compression::ZstdDict));
    std::vector<std::string> Got; // archives of Invoke frames
    H.OnFrame = [&](ConnId C, llvm::StringRef Header, llvm::StringRef Body) {
      auto F = decodeFrame(Header, Body);
      if (!F) {
        llvm::consumeError(F.takeError());
        return;
      }
      if (F->Type == FrameType::Invoke) {
        Got.push_back(F->Archive.str());
        return;
      }
      if (F->Type != FrameType::Hello)
        return;
      Capabilities Caps = *decodeCapabilities(F->Data);
      EXPECT_EQ(Caps.ArchiveMin, OldestArchiveVersion);
      EXPECT_EQ(Caps.ArchiveMax, ArchiveVersion);
      std::string Record = encodeCapabilities(Caps);
      if (Old) // The archive record is the last one: 5 bytes.
        Record.resize(Record.size() - 5);
      Frame Hello;
      Hello.Type = FrameType::Hello;
      Hello.Data = Record;
      std::string Hd;
      encodeFrameHeader(Hello, Hd);
      H.Raw->send(C, Hd, Record, nullptr);
    };
    H.S->send(H.Conn, *H.M);
    H.runUntil([&] { return !Got.empty(); });
    ASSERT_EQ(Got.size(), 1u);
    ASSERT_TRUE(H.S->peer(H.Conn));
    EXPECT_EQ(H.S->peer(H.Conn)->ArchiveMax, Old ? 2u : ArchiveVersion);
    auto Shipped = readArchive(llvm::MemoryBufferRef(Got[0], "shipped"));
    ASSERT_TRUE(!!Shipped) << llvm::toString(Shipped.takeError());
    EXPECT_EQ(Shipped->FormatVersion, Old ? 2u : ArchiveVersion);
    EXPECT_EQ(Shipped->Members.size(), 1u);
    EXPECT_EQ(Shipped->Hash, H.M->Code->Hash);
  }
}

TEST(Runtime, APeerThatPredatesHelloGetsEveryTargetMember) {
  // A target that does not know Hello frames answers an Error about seq 0
  // (MalformedFrame); the held sends then go out as they always did.
  HandPlayedTarget H(twoTripleArchive());
  std::vector<std::string> Got; // archives of Invoke frames
  H.OnFrame = [&](ConnId C, llvm::StringRef Header, llvm::StringRef Body) {
    if (Header.size() >= 4 && uint8_t(Header[3]) == 10) {
      Frame E;
      E.Type = FrameType::Error;
      E.Status = WireStatus::MalformedFrame;
      E.Message = "malformed frame: unknown frame type 10";
      std::string Hd;
      encodeFrameHeader(E, Hd);
      H.Raw->send(C, Hd, E.Message, nullptr);
      return;
    }
    auto F = decodeFrame(Header, Body);
    if (F && F->Type == FrameType::Invoke)
      Got.push_back(F->Archive.str());
    else if (!F)
      llvm::consumeError(F.takeError());
  };
  H.S->send(H.Conn, *H.M);
  H.runUntil([&] { return !Got.empty(); });
  ASSERT_EQ(Got.size(), 1u);
  auto Shipped = readArchive(llvm::MemoryBufferRef(Got[0], "shipped"));
  ASSERT_TRUE(!!Shipped) << llvm::toString(Shipped.takeError());
  EXPECT_EQ(Shipped->Members.size(), 2u);
  EXPECT_EQ(H.S->peer(H.Conn), nullptr);
}

TEST(Runtime, WithoutHelloTheSenderShipsEveryTargetMember) {
  // A connection made on the transport directly says no Hello: nothing is
  // held and the sender cannot choose for the target.
  Pair P({}, /*SayHello=*/false);
  auto F = P.reg(twoTripleArchive());
  std::vector<std::string> Events;
  P.Target->onEvent([&](llvm::StringRef E) { Events.push_back(E.str()); });
  P.send(F, 4);
  ASSERT_TRUE(P.fence());
  EXPECT_EQ(P.Counter, 4u);
  EXPECT_EQ(P.Source->peer(P.Conn), nullptr);
  bool Whole = false;
  for (const std::string &E : Events)
    Whole |= E.find("2 member(s), 1 omitted") != std::string::npos;
  EXPECT_TRUE(Whole);
}

TEST(Runtime, EvictedCodeIsRequestedAgainAndNoMessageIsLost) {
  Pair P;
  auto F = P.reg(ifuncArchive("add", adderIR("add")));
  P.send(F, 1);
  ASSERT_TRUE(P.fence());
  P.Target->evict(F->Hash);
  for (int I = 0; I < 3; ++I)
    P.send(F, 10);
  ASSERT_TRUE(P.fence());
  EXPECT_EQ(P.Counter, 31u);
  EXPECT_EQ(P.Target->counters().CodeRequests, 1u);
  EXPECT_EQ(P.Target->counters().Compiles, 2u);
  EXPECT_EQ(P.Target->counters().Executed, 4u);
}

TEST(Runtime, BoundedCacheEvictsLeastRecentlyUsed) {
  RuntimeOptions O;
  O.MaxLoaded = 1;
  Pair P(O);
  auto A = P.reg(ifuncArchive("a", adderIR("a", 1)));
  auto B = P.reg(ifuncArchive("b", adderIR("b", 100)));
  P.send(A, 0);
  P.send(B, 0);
  P.send(A, 0); // A was evicted by B: asked for again, then runs.
  ASSERT_TRUE(P.fence());
  EXPECT_EQ(P.Counter, 102u);
  EXPECT_EQ(P.Target->counters().Evictions, 2u);
  EXPECT_EQ(P.Target->jit().size(), 1u);
}

TEST(Runtime, ChangedCodeUnderTheSameNameNeverRunsStale) {
  Pair P;
  auto V1 = P.reg(ifuncArchive("inc", adderIR("inc", 1)));
  P.send(V1, 0);
  ASSERT_TRUE(P.fence());
  auto V2 = P.reg(ifuncArchive("inc", adderIR("inc", 1000)));
  ASSERT_NE(V1->Hash, V2->Hash);
  EXPECT_EQ(P.Source->lookup("inc"), V2);
  P.send(V2, 0);
  ASSERT_TRUE(P.fence());
  EXPECT_EQ(P.Counter, 1001u);
  EXPECT_EQ(P.Target->counters().CodeFrames, 2u);
}

TEST(Runtime, MalformedFrameIsReportedAndTheTargetKeepsServing) {
  Pair P;
  auto F = P.reg(ifuncArchive("add", adderIR("add")));
  bool Sent = false;
  P.Source->transport().send(P.Conn, "not a frame header at all", "",
                             [&](llvm::Error E) {
                               llvm::consumeError(std::move(E));
                               Sent = true;
                             });
  P.send(F, 5);
  ASSERT_TRUE(P.fence());
  EXPECT_TRUE(Sent);
  EXPECT_EQ(P.Counter, 5u);
  ASSERT_EQ(P.Errors.size(), 1u);
  EXPECT_EQ(P.Errors[0].Status, WireStatus::MalformedFrame);
  EXPECT_EQ(P.Errors[0].Message,
            "malformed frame: bad magic 6e6f (expected 7463)");
  EXPECT_EQ(P.Target->counters().Errors.at(WireStatus::MalformedFrame), 1u);
}

TEST(Runtime, MissingSymbolIsReportedToTheSender) {
  Pair P;
  auto Bad = P.reg(ifuncArchive("bad", R"(
declare void @tc_nowhere_to_be_found()
define void @bad_main(ptr %p, i64 %n, ptr %t) {
  call void @tc_nowhere_to_be_found()
  ret void
})"));
  auto Good = P.reg(ifuncArchive("add", adderIR("add")));
  P.send(Bad, 0);
  P.send(Good, 2);
  ASSERT_TRUE(P.fence());
  EXPECT_EQ(P.Counter, 2u);
  ASSERT_EQ(P.Errors.size(), 1u);
  EXPECT_EQ(P.Errors[0].Status, WireStatus::MissingSymbol);
  EXPECT_EQ(P.Errors[0].Seq, 1u);
  EXPECT_NE(P.Errors[0].Message.find("symbol 'tc_nowhere_to_be_found'"),
            std::string::npos);
}

TEST(Runtime, AllowListRefusesOtherCode) {
  RuntimeOptions O;
  O.AllowedHashes.insert(ArchiveHash{}); // Nothing real hashes to zeros.
  Pair P(O);
  auto F = P.reg(ifuncArchive("add", adderIR("add")));
  P.send(F, 1);
  ASSERT_TRUE(P.fence());
  EXPECT_EQ(P.Counter, 0u);
  ASSERT_EQ(P.Errors.size(), 1u);
  EXPECT_EQ(P.Errors[0].Status, WireStatus::PolicyRefused);
}

TEST(Runtime, TwoIfuncsWithTheSameHelperName) {
  Pair P;
  auto Helper = [](const std::string &Name, int K) {
    return "define i64 @step(i64 %x) {\n  %y = add i64 %x, " +
           std::to_string(K) + "\n  ret i64 %y\n}\n" + "define void @" + Name +
           "_main(ptr %p, i64 %n, ptr %t) {\n  %v = load i64, ptr %t\n"
           "  %w = call i64 @step(i64 %v)\n  store i64 %w, ptr %t\n"
           "  ret void\n}\n";
  };
  auto A = P.reg(ifuncArchive("a", Helper("a", 1)));
  auto B = P.reg(ifuncArchive("b", Helper("b", 10)));
  P.send(A, 0);
  P.send(B, 0);
  ASSERT_TRUE(P.fence());
  EXPECT_EQ(P.Counter, 11u);
}

TEST(Runtime, DeregisteredCodeIsStillServedForMessagesAlreadySent) {
  Pair P;
  auto F = P.reg(ifuncArchive("add", adderIR("add")));
  P.send(F, 1);
  ASSERT_TRUE(P.fence());
  P.Target->evict(F->Hash);
  P.send(F, 1);
  P.Source->deregister(F);
  EXPECT_EQ(P.Source->lookup("add"), nullptr);
  ASSERT_TRUE(P.fence());
  EXPECT_EQ(P.Counter, 2u);
}

TEST(Runtime, RegionReadIsOrderedAfterEarlierMessages) {
  Pair P;
  uint64_t Region[2] = {0, 0};
  P.Target->setTargetArgs(Region);
  P.Target->setRegion(Region, sizeof(Region));
  auto F = P.reg(ifuncArchive("add", adderIR("add")));
  P.send(F, 7);
  P.send(F, 8);
  std::string Got;
  bool Done = false;
  P.Source->readRegion(P.Conn, 100, [&](llvm::Expected<std::string> D) {
    ASSERT_TRUE(!!D) << llvm::toString(D.takeError());
    Got = *D;
    Done = true;
  });
  ASSERT_TRUE(P.runUntil([&] { return Done; }));
  ASSERT_EQ(Got.size(), sizeof(Region)); // Capped at the region's size.
  uint64_t First;
  std::memcpy(&First, Got.data(), 8);
  EXPECT_EQ(First, 15u);
}

TEST(Runtime, RegionReadWithoutARegionFails) {
  Pair P;
  std::string Err;
  P.Source->readRegion(P.Conn, 8, [&](llvm::Expected<std::string> D) {
    Err = D ? "<no error>" : llvm::toString(D.takeError());
  });
  ASSERT_TRUE(P.runUntil([&] { return !Err.empty(); }));
  EXPECT_EQ(Err, "target: no region exposed: this target exposes no region");
}

TEST(Runtime, DisconnectFailsPendingFences) {
  Pair P;
  std::string Err;
  P.Source->fence(P.Conn, [&](llvm::Error E) {
    Err = E ? llvm::toString(std::move(E)) : "<no error>";
  });
  P.Target.reset();
  ASSERT_TRUE(P.runUntil([&] { return !Err.empty(); }));
  EXPECT_EQ(Err, "connection closed: peer closed the connection");
}

TEST(Runtime, SourceCodeIsUnloadedWhenTheLastUserGoes) {
  Pair P;
  std::string Bytes = ifuncArchive("add", adderIR("add"));
  auto Full = readArchive(llvm::MemoryBufferRef(Bytes, "a"));
  ASSERT_TRUE(!!Full);
  auto F1 = P.reg(Bytes);
  auto F2 = P.reg(Bytes); // Same code registered twice: shared, not doubled.
  EXPECT_EQ(F1->Source, F2->Source);
  uint64_t X = 1;
  auto M = P.Source->createMessage(F1, &X, 8);
  ASSERT_TRUE(!!M);
  P.Source->deregister(F2);
  F1.reset();
  F2.reset();
  // A message still holds the code: it stays loaded.
  EXPECT_NE(P.Source->jit().find(Full->Hash, Role::Source), nullptr);
  *M = Message();
  EXPECT_EQ(P.Source->jit().find(Full->Hash, Role::Source), nullptr);
}

extern "C" void tcTestLocalAdd(void *Payload, size_t Size, void *Args) {
  uint64_t V;
  std::memcpy(&V, Payload, sizeof(V));
  *static_cast<uint64_t *>(Args) += V + Size;
}

TEST(Runtime, LocalInvokeRunsALinkedFunctionInOrder) {
  Pair P;
  ASSERT_FALSE(!!P.Target->registerLocal("add", tcTestLocalAdd));
  auto F = P.reg(ifuncArchive("add", adderIR("add")));
  uint64_t V = 10;
  P.Source->sendLocal(P.Conn, "add", llvm::StringRef((const char *)&V, 8));
  P.send(F, 5); // An ifunc in between: order is kept across both kinds.
  P.Source->sendLocal(P.Conn, "nope", "");
  ASSERT_TRUE(P.fence());
  EXPECT_EQ(P.Counter, 10u + 8u + 5u);
  ASSERT_EQ(P.Errors.size(), 1u);
  EXPECT_EQ(P.Errors[0].Status, WireStatus::UnknownLocal);
  EXPECT_EQ(P.Target->counters().CodeFrames, 1u);
}

TEST(Runtime, PayloadInitErrorsAreReported) {
  Pair P;
  Archive A;
  A.Name = "neg";
  A.Members.push_back(hostMember(adderIR("neg", 1)));
  A.Members.push_back(hostMember(R"(
define i64 @neg_payload_bound(ptr %a, i64 %n) { ret i64 4 }
define i32 @neg_payload_init(ptr %a, i64 %n, ptr %p, ptr %s) {
  store i64 99, ptr %s
  ret i32 0
})",
                                 Role::Source));
  auto Bytes = writeArchive(A);
  ASSERT_TRUE(!!Bytes);
  auto F = P.reg(Bytes->str().str());
  uint64_t X = 0;
  auto M = P.Source->createMessage(F, &X, 8);
  ASSERT_FALSE(!!M);
  EXPECT_EQ(llvm::toString(M.takeError()),
            "ifunc 'neg': neg_payload_init wrote 99 bytes, more than the "
            "bound of 4");
}

} // namespace
