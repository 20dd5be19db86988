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
#include "llvm/Support/FileSystem.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <dirent.h>
#include <sched.h>
#include <sys/types.h>

using namespace tc;
using namespace tc::test;

namespace {

/// A second sender to a Pair's target: its own Runtime and connection.
struct Sender {
  std::unique_ptr<Runtime> R;
  ConnId Conn = 0;
  std::vector<RemoteError> Errors;
};

struct Pair {
  std::shared_ptr<LoopbackHub> Hub = createLoopbackHub();
  std::unique_ptr<Runtime> Source, Target;
  ConnId Conn = 0;
  uint64_t Counter = 0;
  std::vector<RemoteError> Errors;
  std::vector<std::unique_ptr<Sender>> Others;

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

  /// Connects another sender to the target (with Hello).
  Sender &addSender() {
    auto R = Runtime::create(createLoopbackTransport(Hub));
    EXPECT_TRUE(!!R);
    auto S = std::make_unique<Sender>();
    S->R = std::move(*R);
    auto C = S->R->connect("target", 1);
    EXPECT_TRUE(!!C);
    S->Conn = *C;
    S->R->onRemoteError(
        [E = &S->Errors](const RemoteError &X) { E->push_back(X); });
    Others.push_back(std::move(S));
    return *Others.back();
  }

  /// Progresses every side once; true if any did something.
  bool round() {
    bool Did = Source && Source->progress();
    for (auto &S : Others)
      Did |= S->R && S->R->progress();
    if (Target)
      Did |= Target->progress();
    return Did;
  }

  /// Progresses every side until \p Done or 20 s pass. When nothing
  /// happens, it waits for the target: a compile on its helper thread
  /// wakes it when it finishes.
  bool runUntil(const std::function<bool()> &Done) {
    auto End = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!Done()) {
      if (std::chrono::steady_clock::now() > End)
        return false;
      if (!round() && Target)
        llvm::consumeError(Target->wait(10));
    }
    return true;
  }

  /// Progresses every side until none has anything to do.
  void settle() {
    for (int I = 0; I < 1000 && round(); ++I) {
    }
  }

  std::shared_ptr<const Ifunc> reg(const std::string &Bytes,
                                   Runtime *On = nullptr) {
    auto F = (On ? On : Source.get())->registerArchive(Bytes);
    EXPECT_TRUE(!!F) << (F ? "" : llvm::toString(F.takeError()));
    return F ? *F : nullptr;
  }

  void send(const std::shared_ptr<const Ifunc> &F, uint64_t Arg) {
    sendOn(*Source, Conn, F, Arg);
  }
  void sendOn(Runtime &R, ConnId C, const std::shared_ptr<const Ifunc> &F,
              uint64_t Arg) {
    auto M = R.createMessage(F, &Arg, sizeof(Arg));
    ASSERT_TRUE(!!M) << llvm::toString(M.takeError());
    R.send(C, *M);
  }

  /// Sends a fence and waits for its reply.
  bool fence() { return fenceOn(*Source, Conn); }
  bool fenceOn(Runtime &R, ConnId C) {
    bool Done = false;
    R.fence(C, [&](llvm::Error E) {
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
  // A newer peer on a second connection says Hello with wire 4-4.
  auto C2 = P.Source->transport().connect("target", 1);
  ASSERT_TRUE(!!C2);
  Capabilities Newer = P.Source->capabilities();
  Newer.WireMin = Newer.WireMax = 4;
  Newer.TcVersion = "9.0.0";
  sendRawHello(P.Source->transport(), *C2, Newer);
  ASSERT_TRUE(P.runUntil([&] { return !P.Errors.empty(); }));
  EXPECT_EQ(P.Errors[0].Status, WireStatus::UnsupportedVersion);
  EXPECT_EQ(P.Errors[0].Message,
            "the peer speaks tc wire versions 4-4 (tc 9.0.0), this process "
            "1-3 (tc " TC_VERSION_STRING "): no version in common");
  // The first connection is served as before.
  P.send(F, 1);
  ASSERT_TRUE(P.fence());
  EXPECT_EQ(P.Counter, 2u);
}

TEST(Runtime, SendsToATargetWithNoCommonWireVersionFailWithOneError) {
  // The target answers our Hello with wire 4-4.
  HandPlayedTarget H(ifuncArchive("add", adderIR("add")));
  H.OnFrame = [&](ConnId C, llvm::StringRef Header, llvm::StringRef Body) {
    auto F = decodeFrame(Header, Body);
    if (!F || F->Type != FrameType::Hello) {
      llvm::consumeError(F.takeError());
      return;
    }
    Capabilities Caps = *decodeCapabilities(F->Data);
    Caps.WireMin = Caps.WireMax = 4;
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
  std::string Want = "the peer speaks tc wire versions 4-4 (tc 7.0.0), this "
                     "process 1-3 (tc " TC_VERSION_STRING
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
  EXPECT_TRUE(llvm::StringRef(Err).starts_with("loopback connection ") &&
              closedByPeer(Err))
        << Err;
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

TEST(Runtime, CompactFramesTakeTheNextSequenceNumberEvenWhenQueued) {
  // After the Hello (wire 1-3 on both sides) cached messages and local
  // invokes go as compact frames, whose sequence numbers are not on the
  // wire: the target counts them. Errors must still name the right ones,
  // also for frames that waited in the queue for code (they are kept
  // whole, with their number written out).
  Pair P;
  ASSERT_FALSE(!!P.Target->registerLocal("add", tcTestLocalAdd));
  auto F = P.reg(ifuncArchive("add", adderIR("add")));
  uint64_t V = 10;
  P.send(F, 1);                                          // seq 1, with code
  P.Source->sendLocal(P.Conn, "nope", "");               // seq 2, compact
  P.send(F, 1);                                          // seq 3, compact
  ASSERT_TRUE(P.fence());                                // seq 4
  ASSERT_NE(P.Source->peer(P.Conn), nullptr);
  EXPECT_EQ(P.Source->peer(P.Conn)->WireMax, WireVersionMax);
  P.Target->evict(F->Hash);
  P.send(F, 1);                      // seq 5: unknown code id now, queued
  P.Source->sendLocal(P.Conn, "nope", "");               // seq 6, queued
  P.Source->sendLocal(P.Conn, "add",
                      llvm::StringRef((const char *)&V, 8)); // seq 7
  P.Source->sendLocal(P.Conn, "nope", "");               // seq 8
  ASSERT_TRUE(P.fence());                                // seq 9
  ASSERT_EQ(P.Errors.size(), 3u);
  EXPECT_EQ(P.Errors[0].Seq, 2u);
  EXPECT_EQ(P.Errors[1].Seq, 6u);
  EXPECT_EQ(P.Errors[2].Seq, 8u);
  for (const RemoteError &E : P.Errors)
    EXPECT_EQ(E.Status, WireStatus::UnknownLocal);
  EXPECT_EQ(P.Counter, 1u + 1u + 1u + 10u + 8u);
  EXPECT_EQ(P.Target->counters().CodeRequests, 1u);
}

TEST(Runtime, APeerOfWireVersion1GetsFullFrames) {
  // A target that says wire 1-1 in its Hello cannot read compact frames:
  // its sender keeps the 24-byte header.
  HandPlayedTarget H(ifuncArchive("add", adderIR("add")));
  std::vector<std::string> Headers;
  H.OnFrame = [&](ConnId C, llvm::StringRef Header, llvm::StringRef Body) {
    Headers.push_back(Header.str());
    auto F = decodeFrame(Header, Body);
    if (!F) {
      llvm::consumeError(F.takeError());
      return;
    }
    if (F->Type == FrameType::Hello) {
      Capabilities Caps = *decodeCapabilities(F->Data);
      Caps.WireMin = Caps.WireMax = 1;
      sendRawHello(*H.Raw, C, Caps);
    }
  };
  H.S->send(H.Conn, *H.M);
  H.S->send(H.Conn, *H.M);
  H.S->sendLocal(H.Conn, "x", "");
  H.runUntil([&] { return Headers.size() >= 4; });
  ASSERT_EQ(Headers.size(), 4u); // Hello, the first with code, two more.
  for (size_t I = 1; I < Headers.size(); ++I)
    EXPECT_FALSE(isCompactHeader(Headers[I])) << I;
  EXPECT_EQ(Headers[2].size(), FrameHeaderSize);
  EXPECT_EQ(Headers[3].size(), FrameHeaderSize);
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

//===----------------------------------------------------------------------===//
// Compiles off the progress thread
//===----------------------------------------------------------------------===//

/// NAME_main multiplying *target_args by 10: with an adder, the result
/// says in which order the two ran.
static std::string timesTenIR(const std::string &Name) {
  return "define void @" + Name + "_main(ptr %p, i64 %n, ptr %t) {\n"
         "  %v = load i64, ptr %t\n  %d = mul i64 %v, 10\n"
         "  store i64 %d, ptr %t\n  ret void\n}\n";
}

/// Target options whose compiles wait in \p Held until the test runs them.
static RuntimeOptions
holdingCompiles(std::vector<std::function<void()>> &Held) {
  RuntimeOptions O;
  O.CompileExecutor = [&Held](std::function<void()> Job) {
    Held.push_back(std::move(Job));
  };
  return O;
}

/// Runs the held compiles (on this thread: the target takes their results
/// in its next progress()).
static void release(std::vector<std::function<void()>> &Held) {
  std::vector<std::function<void()>> Jobs = std::move(Held);
  Held.clear();
  for (auto &J : Jobs)
    J();
}

TEST(Runtime, OtherConnectionsRunWhileACompileIsPending) {
  std::vector<std::function<void()>> Held;
  Pair P(holdingCompiles(Held));
  Sender &Other = P.addSender();
  auto Slow = P.reg(ifuncArchive("slow", adderIR("slow", 1000)));
  auto Fast = P.reg(ifuncArchive("fast", adderIR("fast", 1)), Other.R.get());
  P.sendOn(*Other.R, Other.Conn, Fast, 0);
  ASSERT_TRUE(P.runUntil([&] { return Held.size() == 1; }));
  release(Held);
  ASSERT_TRUE(P.fenceOn(*Other.R, Other.Conn));
  EXPECT_EQ(P.Counter, 1u);

  // The first connection's new code compiles; meanwhile the other
  // connection's cached messages run, and its fence is answered.
  P.send(Slow, 0);
  ASSERT_TRUE(P.runUntil([&] { return Held.size() == 1; }));
  for (int I = 0; I < 3; ++I)
    P.sendOn(*Other.R, Other.Conn, Fast, 0);
  ASSERT_TRUE(P.fenceOn(*Other.R, Other.Conn));
  EXPECT_EQ(P.Counter, 4u);
  EXPECT_EQ(Held.size(), 1u);
  release(Held);
  ASSERT_TRUE(P.fence());
  EXPECT_EQ(P.Counter, 1004u);
  EXPECT_EQ(P.Target->counters().Compiles, 2u);
  EXPECT_TRUE(P.Errors.empty());
  EXPECT_TRUE(Other.Errors.empty());
}

TEST(Runtime, MessagesBehindACompileOnItsConnectionWaitInOrder) {
  std::vector<std::function<void()>> Held;
  Pair P(holdingCompiles(Held));
  P.Target->setRegion(&P.Counter, sizeof P.Counter);
  auto Add = P.reg(ifuncArchive("add", adderIR("add", 1)));
  auto Mul = P.reg(ifuncArchive("mul", timesTenIR("mul")));
  P.send(Add, 0);
  ASSERT_TRUE(P.runUntil([&] { return Held.size() == 1; }));
  release(Held);
  ASSERT_TRUE(P.fence());
  ASSERT_EQ(P.Counter, 1u);

  // mul's first contact waits for its compile; the cached add, the region
  // read and the fence behind it on this connection wait with it.
  P.send(Mul, 0);
  P.send(Add, 0);
  std::string Read;
  P.Source->readRegion(P.Conn, 8, [&](llvm::Expected<std::string> D) {
    Read = D ? *D : llvm::toString(D.takeError());
  });
  bool Fenced = false;
  P.Source->fence(P.Conn, [&](llvm::Error E) {
    llvm::consumeError(std::move(E));
    Fenced = true;
  });
  ASSERT_TRUE(P.runUntil([&] { return Held.size() == 1; }));
  P.settle();
  EXPECT_EQ(P.Counter, 1u);
  EXPECT_TRUE(Read.empty());
  EXPECT_FALSE(Fenced);
  release(Held);
  ASSERT_TRUE(P.runUntil([&] { return Fenced; }));
  EXPECT_EQ(P.Counter, 11u); // (1 * 10) + 1: mul ran first.
  uint64_t Seen = 0;
  ASSERT_EQ(Read.size(), sizeof Seen);
  std::memcpy(&Seen, Read.data(), sizeof Seen);
  EXPECT_EQ(Seen, 11u);
}

TEST(Runtime, TwoFirstContactsOfOneIdentityCompileOnce) {
  std::vector<std::function<void()>> Held;
  Pair P(holdingCompiles(Held));
  Sender &Other = P.addSender();
  std::string Bytes = ifuncArchive("add", adderIR("add"));
  auto F1 = P.reg(Bytes);
  auto F2 = P.reg(Bytes, Other.R.get());
  P.send(F1, 2);
  P.sendOn(*Other.R, Other.Conn, F2, 3);
  ASSERT_TRUE(
      P.runUntil([&] { return P.Target->counters().CodeFrames == 2; }));
  P.settle();
  EXPECT_EQ(Held.size(), 1u);
  EXPECT_EQ(P.Counter, 0u);
  release(Held);
  ASSERT_TRUE(P.fence());
  ASSERT_TRUE(P.fenceOn(*Other.R, Other.Conn));
  EXPECT_EQ(P.Counter, 5u);
  EXPECT_EQ(P.Target->counters().Compiles, 1u);
  EXPECT_TRUE(Held.empty());
}

TEST(Runtime, ADisconnectDuringACompileLeavesTheOthersServed) {
  std::vector<std::function<void()>> Held;
  Pair P(holdingCompiles(Held));
  Sender &Other = P.addSender();
  std::string Bytes = ifuncArchive("add", adderIR("add"));
  auto F1 = P.reg(Bytes);
  auto F2 = P.reg(Bytes, Other.R.get());
  std::vector<ConnId> Closed;
  P.Target->onDisconnect(
      [&](ConnId C, llvm::StringRef, const Delivery &) {
        Closed.push_back(C);
      });
  // Both connections wait for one compile; the first goes away.
  P.send(F1, 100);
  P.sendOn(*Other.R, Other.Conn, F2, 1);
  ASSERT_TRUE(
      P.runUntil([&] { return P.Target->counters().CodeFrames == 2; }));
  F1.reset();
  P.Source.reset();
  ASSERT_TRUE(P.runUntil([&] { return Closed.size() == 1; }));
  release(Held);
  ASSERT_TRUE(P.fenceOn(*Other.R, Other.Conn));
  EXPECT_EQ(P.Counter, 1u); // Only the living connection's message ran.
  EXPECT_EQ(P.Target->counters().Compiles, 1u);

  // The only waiter goes away: the result still fills the cache.
  Sender &Third = P.addSender();
  auto Mul = P.reg(ifuncArchive("mul", timesTenIR("mul")), Third.R.get());
  P.sendOn(*Third.R, Third.Conn, Mul, 0);
  ASSERT_TRUE(P.runUntil([&] { return Held.size() == 1; }));
  Mul.reset();
  Third.R.reset();
  ASSERT_TRUE(P.runUntil([&] { return Closed.size() == 2; }));
  release(Held);
  P.settle();
  EXPECT_EQ(P.Counter, 1u);
  EXPECT_EQ(P.Target->counters().Compiles, 2u);
  EXPECT_EQ(P.Target->jit().size(), 2u);
  P.sendOn(*Other.R, Other.Conn, F2, 1);
  ASSERT_TRUE(P.fenceOn(*Other.R, Other.Conn));
  EXPECT_EQ(P.Counter, 2u);
}

TEST(Runtime, AFailedOffThreadCompileIsReportedAndOthersRunMeanwhile) {
  std::vector<std::function<void()>> Held;
  Pair P(holdingCompiles(Held));
  Sender &Other = P.addSender();
  auto Bad = P.reg(ifuncArchive("bad", R"(
declare void @tc_nowhere_to_be_found()
define void @bad_main(ptr %p, i64 %n, ptr %t) {
  call void @tc_nowhere_to_be_found()
  ret void
})"));
  auto Good = P.reg(ifuncArchive("add", adderIR("add")));
  auto Fast = P.reg(ifuncArchive("fast", adderIR("fast", 1)), Other.R.get());
  P.sendOn(*Other.R, Other.Conn, Fast, 0);
  ASSERT_TRUE(P.runUntil([&] { return Held.size() == 1; }));
  release(Held);
  ASSERT_TRUE(P.fenceOn(*Other.R, Other.Conn));

  P.send(Bad, 0);
  P.send(Good, 10);
  ASSERT_TRUE(P.runUntil([&] { return Held.size() == 1; }));
  P.sendOn(*Other.R, Other.Conn, Fast, 0);
  ASSERT_TRUE(P.fenceOn(*Other.R, Other.Conn));
  EXPECT_EQ(P.Counter, 2u);
  release(Held); // bad fails; add's compile starts behind it.
  ASSERT_TRUE(
      P.runUntil([&] { return Held.size() == 1 && !P.Errors.empty(); }));
  ASSERT_EQ(P.Errors.size(), 1u);
  EXPECT_EQ(P.Errors[0].Status, WireStatus::MissingSymbol);
  EXPECT_EQ(P.Errors[0].Seq, 1u);
  EXPECT_NE(P.Errors[0].Message.find("symbol 'tc_nowhere_to_be_found'"),
            std::string::npos);
  release(Held);
  ASSERT_TRUE(P.fence());
  EXPECT_EQ(P.Counter, 12u);
  EXPECT_EQ(P.Target->counters().Errors.at(WireStatus::MissingSymbol), 1u);
}

/// A connection to a Pair's target on which the test writes frames itself.
struct RawSender : TransportHandler {
  std::unique_ptr<Transport> T;
  ConnId Conn = 0;
  std::vector<Frame> Got;
  std::vector<std::string> Bodies; ///< Keeps what Got's frames refer to.

  explicit RawSender(Pair &P) : T(createLoopbackTransport(P.Hub)) {
    T->setHandler(this);
    auto C = T->connect("target", 1);
    EXPECT_TRUE(!!C);
    Conn = *C;
  }
  void onFrame(ConnId, llvm::StringRef Header, llvm::StringRef Body) override {
    Bodies.push_back(Header.str() + Body.str());
    auto F = decodeFrame(Bodies.back());
    if (F)
      Got.push_back(*F);
    else
      llvm::consumeError(F.takeError());
  }
  void onDisconnect(ConnId, llvm::StringRef) override {}
  void send(const Frame &F, llvm::StringRef Body) {
    std::string Header;
    encodeFrameHeader(F, Header);
    T->send(Conn, Header, Body, nullptr);
  }
  const Frame *find(FrameType Type) const {
    for (const Frame &F : Got)
      if (F.Type == Type)
        return &F;
    return nullptr;
  }
};

TEST(Runtime, ACodeFrameThatFailsOffThreadDropsWhatWaitedForIt) {
  Pair P;
  RawSender Raw(P);
  std::string Bytes = ifuncArchive("add", adderIR("add"));
  auto A = readArchive(llvm::MemoryBufferRef(Bytes, "a"));
  ASSERT_TRUE(!!A);
  // Two Invokes of a code id the target never got: it asks for the code.
  Frame I;
  I.Type = FrameType::Invoke;
  I.CodeId = 7;
  uint64_t One = 1;
  I.Payload = llvm::StringRef(reinterpret_cast<const char *>(&One), 8);
  for (uint32_t Seq : {1u, 2u}) {
    I.Seq = Seq;
    Raw.send(I, I.Payload);
  }
  auto Pump = [&](const std::function<bool()> &Done) {
    return P.runUntil([&] {
      Raw.T->progress();
      return Done();
    });
  };
  ASSERT_TRUE(Pump([&] { return Raw.find(FrameType::CodeRequest); }));
  EXPECT_EQ(Raw.find(FrameType::CodeRequest)->CodeId, 7u);
  // The answer names another hash than the archive's: HashMismatch for
  // both waiting messages, found on the helper thread.
  Frame C;
  C.Type = FrameType::Code;
  C.CodeId = 7;
  C.Hash = A->Hash;
  C.Hash[0] ^= 1;
  std::string Shipped = P.reg(Bytes)->Bytes;
  C.Archive = Shipped;
  Raw.send(C, C.Archive);
  ASSERT_TRUE(Pump([&] {
    return P.Target->counters().Errors.count(WireStatus::HashMismatch) &&
           P.Target->counters().Errors.at(WireStatus::HashMismatch) == 2;
  }));
  ASSERT_TRUE(Pump([&] {
    size_t N = 0;
    for (const Frame &F : Raw.Got)
      N += F.Type == FrameType::Error;
    return N == 2;
  }));
  EXPECT_EQ(P.Counter, 0u);
  // The target serves on: the right hash this time.
  I.Seq = 3;
  Raw.send(I, I.Payload);
  ASSERT_TRUE(Pump([&] { return P.Target->counters().CodeRequests == 2; }));
  C.Hash = A->Hash;
  Raw.send(C, C.Archive);
  ASSERT_TRUE(Pump([&] { return P.Counter == 1; }));
  EXPECT_EQ(P.Target->counters().Compiles, 1u);
}

TEST(Runtime, ABadCopyOfAnIdentityDoesNotFailAGoodOneWaitingWithIt) {
  std::vector<std::function<void()>> Held;
  Pair P(holdingCompiles(Held));
  RawSender Raw(P);
  std::string Bytes = ifuncArchive("add", adderIR("add"));
  auto F = P.reg(Bytes);
  // The raw sender claims the identity with bytes that are no archive;
  // then the real sender ships it. One compile starts, with the bad copy.
  Frame I;
  I.Type = FrameType::Invoke;
  I.Seq = 1;
  I.CodeId = 1;
  I.Flags = FrameHasCode;
  I.Hash = F->Hash;
  I.Archive = "not an archive";
  Raw.send(I, I.Archive);
  ASSERT_TRUE(P.runUntil([&] { return Held.size() == 1; }));
  P.send(F, 5);
  ASSERT_TRUE(
      P.runUntil([&] { return P.Target->counters().CodeFrames == 2; }));
  P.settle();
  ASSERT_EQ(Held.size(), 1u);
  release(Held); // The bad copy fails; the good one compiles next.
  ASSERT_TRUE(P.runUntil([&] {
    Raw.T->progress();
    return Raw.find(FrameType::Error) && Held.size() == 1;
  }));
  EXPECT_EQ(Raw.find(FrameType::Error)->Status, WireStatus::BadArchive);
  release(Held);
  ASSERT_TRUE(P.fence());
  EXPECT_EQ(P.Counter, 5u);
  EXPECT_TRUE(P.Errors.empty());
}

TEST(Runtime, DestroyingATargetWhileItCompilesJoinsTheCompile) {
  // The progress() call that takes the frame in and posts its compile may
  // also take the compile's result, when this thread loses its CPU for as
  // long as the compile lasts (a loaded machine). Then the target was not
  // destroyed during a compile: try again, a bounded number of times.
  for (int Attempt = 0; Attempt < 20; ++Attempt) {
    Pair P;
    auto F = P.reg(ifuncArchive("add", adderIR("add")));
    P.send(F, 1);
    std::string Err;
    P.Source->fence(P.Conn, [&](llvm::Error E) {
      Err = E ? llvm::toString(std::move(E)) : "<no error>";
    });
    // The frame is in: its compile is on the helper thread (or about to
    // be), and the fence waits behind it.
    ASSERT_TRUE(
        P.runUntil([&] { return P.Target->counters().CodeFrames == 1; }));
    if (P.Target->counters().Compiles != 0)
      continue; // Compiled and run already.
    P.Target.reset();
    ASSERT_TRUE(P.runUntil([&] { return !Err.empty(); }));
    EXPECT_TRUE(llvm::StringRef(Err).starts_with("loopback connection ") &&
              closedByPeer(Err))
        << Err;
    EXPECT_EQ(P.Counter, 0u);
    return;
  }
  FAIL() << "the compile finished within the progress() call that started "
            "it in every attempt";
}

TEST(Runtime, SeveralSendersChurnCodeThroughTheHelperThread) {
  // Three senders, three identities each, on a target that keeps two
  // loaded: first contacts, evictions, CodeRequests answered by Code frames
  // compiling on the helper thread, while cached messages run.
  RuntimeOptions O;
  O.MaxLoaded = 2;
  Pair P(O);
  std::vector<Sender *> All;
  for (int I = 0; I < 3; ++I)
    All.push_back(&P.addSender());
  std::vector<std::vector<std::shared_ptr<const Ifunc>>> Fs(All.size());
  for (size_t S = 0; S < All.size(); ++S)
    for (int K : {1, 10, 100}) {
      std::string Name = "f" + std::to_string(K);
      Fs[S].push_back(
          P.reg(ifuncArchive(Name, adderIR(Name, K)), All[S]->R.get()));
    }
  uint64_t Want = 0;
  for (int Round = 0; Round < 4; ++Round)
    for (size_t S = 0; S < All.size(); ++S)
      for (size_t K = 0; K < 3; ++K) {
        size_t Pick = (K + S + Round) % 3;
        P.sendOn(*All[S]->R, All[S]->Conn, Fs[S][Pick], 0);
        Want += Pick == 0 ? 1 : Pick == 1 ? 10 : 100;
      }
  for (Sender *S : All)
    ASSERT_TRUE(P.fenceOn(*S->R, S->Conn));
  EXPECT_EQ(P.Counter, Want);
  EXPECT_LE(P.Target->jit().size(), 2u);
  for (Sender *S : All)
    EXPECT_TRUE(S->Errors.empty());
  EXPECT_TRUE(P.Target->counters().Errors.empty());
}

TEST(Runtime, CompilesOnTheProgressThreadWhenAsked) {
  for (bool OnProgressThread : {false, true}) {
    RuntimeOptions O;
    O.CompileOnProgressThread = OnProgressThread;
    O.MaxLoaded = 1;
    Pair P(O);
    std::vector<std::string> Events;
    P.Target->onEvent([&](llvm::StringRef E) { Events.push_back(E.str()); });
    auto A = P.reg(ifuncArchive("a", adderIR("a", 1)));
    auto B = P.reg(ifuncArchive("b", adderIR("b", 100)));
    P.send(A, 0);
    if (OnProgressThread) {
      // Compiled inside that progress() call.
      P.settle();
      EXPECT_EQ(P.Counter, 1u);
    }
    P.send(B, 0);
    P.send(A, 0); // Evicted by B: asked for again (a Code frame).
    ASSERT_TRUE(P.fence());
    EXPECT_EQ(P.Counter, 102u);
    const RuntimeCounters &C = P.Target->counters();
    EXPECT_EQ(C.Compiles, 3u);
    EXPECT_EQ(C.CodeFrames, 3u);
    EXPECT_EQ(C.Received, 3u);
    EXPECT_EQ(C.CodeRequests, 1u);
    EXPECT_EQ(C.Evictions, 2u);
    // Each load says what came, then what it loaded.
    std::vector<std::string> Loads;
    for (const std::string &E : Events)
      for (const char *What : {"code a ", "code b ", "loaded a ", "loaded b "})
        if (llvm::StringRef(E).starts_with(What))
          Loads.push_back(E.substr(0, std::strlen(What) - 1));
    EXPECT_EQ(Loads, (std::vector<std::string>{"code a", "loaded a", "code b",
                                               "loaded b", "code a",
                                               "loaded a"}));
  }
}

} // namespace

TEST(Runtime, PrewarmRunsOnTheThreadThatWillCompile) {
  auto Hub = createLoopbackHub();
  for (bool OnProgressThread : {false, true}) {
    SCOPED_TRACE(OnProgressThread ? "compiles on the progress thread"
                                  : "compiles on the helper");
    RuntimeOptions O;
    O.Jit.Prewarm = LoadMode::Bitcode;
    O.CompileOnProgressThread = OnProgressThread;
    auto R = Runtime::create(createLoopbackTransport(Hub), O);
    ASSERT_TRUE(static_cast<bool>(R)) << llvm::toString(R.takeError());
    EXPECT_TRUE((*R)->jit().prewarmMillis());
    // The helper starts at create() to prewarm, so that its own stack and
    // malloc arena are warm for the first compile; without one, create()
    // prewarms on the calling thread (the progress thread). A thread id,
    // not a count of the process's threads: a helper another test just
    // joined may still be listed for a moment (and qemu-user has threads
    // of its own), which made a count flaky under qemu.
    if (OnProgressThread)
      EXPECT_EQ((*R)->jit().prewarmThread(), std::this_thread::get_id());
    else
      EXPECT_NE((*R)->jit().prewarmThread(), std::this_thread::get_id());
    EXPECT_NE((*R)->jit().prewarmThread(), std::thread::id());
    EXPECT_EQ((*R)->jit().size(), 0u); // The built-in module is gone.
  }
}

/// This process's threads that run under SCHED_IDLE.
static int idleThreads() {
  int N = 0;
  DIR *D = opendir("/proc/self/task");
  if (!D)
    return -1;
  while (dirent *E = readdir(D)) {
    pid_t Tid = static_cast<pid_t>(std::atoi(E->d_name));
    if (Tid > 0 && sched_getscheduler(Tid) == SCHED_IDLE)
      ++N;
  }
  closedir(D);
  return N;
}

TEST(Runtime, TheCompileHelperGivesWayOnlyOnTheProgressThreadsOneCpu) {
  // Where the progress thread may use one CPU, the helper shares it and
  // runs under SCHED_IDLE, so that a message's wakeup preempts a compile at
  // once (nice 19 alone waited out the compile's slice under EEVDF). With
  // more CPUs it keeps its policy: SCHED_IDLE would starve it behind
  // threads that spin on the others.
  cpu_set_t Saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof Saved, &Saved), 0);
  if (CPU_COUNT(&Saved) < 2)
    GTEST_SKIP() << "one CPU: the helper always shares it";
  auto Hub = createLoopbackHub();
  RuntimeOptions O;
  O.Jit.Prewarm = LoadMode::Bitcode; // Starts the helper in create().
  ASSERT_EQ(idleThreads(), 0);
  {
    auto R = Runtime::create(createLoopbackTransport(Hub), O);
    ASSERT_TRUE(static_cast<bool>(R)) << llvm::toString(R.takeError());
    EXPECT_EQ(idleThreads(), 0) << "helper of a thread with "
                                << CPU_COUNT(&Saved) << " CPUs";
  }
  cpu_set_t One;
  CPU_ZERO(&One);
  for (int C = 0; C < CPU_SETSIZE; ++C)
    if (CPU_ISSET(C, &Saved)) {
      CPU_SET(C, &One);
      break;
    }
  ASSERT_EQ(sched_setaffinity(0, sizeof One, &One), 0);
  {
    auto R = Runtime::create(createLoopbackTransport(Hub), O);
    // Undo the pinning before anything can fail.
    ASSERT_EQ(sched_setaffinity(0, sizeof Saved, &Saved), 0);
    ASSERT_TRUE(static_cast<bool>(R)) << llvm::toString(R.takeError());
    EXPECT_EQ(idleThreads(), 1) << "helper of a thread with one CPU";
  }
}
