//===- TransportTest.cpp - The transport contract, loopback and UCX -------===//
//
// Each transport is held to Transport.h's contract: callbacks only from
// progress(), per-connection order, send completion exactly once from a later
// progress(), disconnects seen by the other side. UCX runs in one process
// over shared memory and TCP loopback, and against a second process
// (tc-transport-peer) that can be killed. Every wait is bounded by a
// deadline; nothing sleeps to synchronise.
//
//===----------------------------------------------------------------------===//

#include "transport/Transport.h"

#include "llvm/ADT/StringExtras.h"

#include "gtest/gtest.h"

#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <list>
#include <mutex>
#include <random>
#include <cstdlib>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char **environ;

using namespace tc;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

/// Records what a transport reports, and that it reports only from inside
/// progress().
struct Events final : TransportHandler {
  struct Got {
    ConnId Conn;
    std::string Header, Body;
  };
  const bool *InProgress = nullptr;
  std::vector<Got> Frames;
  /// Frames that came through onBufferedFrame (received into the
  /// transport's own buffer), and those of them whose body was not aligned.
  size_t Buffered = 0, Misaligned = 0;
  std::vector<ConnId> Accepts;
  std::vector<std::pair<ConnId, std::string>> Gone;
  /// Optional: reply from inside onFrame, as the runtime does.
  std::function<void(ConnId, llvm::StringRef, llvm::StringRef)> OnFrame;

  void onFrame(ConnId C, llvm::StringRef H, llvm::StringRef B) override {
    EXPECT_TRUE(*InProgress) << "onFrame outside progress()";
    Frames.push_back({C, H.str(), B.str()});
    if (OnFrame)
      OnFrame(C, H, B);
  }
  void onBufferedFrame(ConnId C, llvm::StringRef H,
                       llvm::MutableArrayRef<char> B) override {
    ++Buffered;
    Misaligned += reinterpret_cast<uintptr_t>(B.data()) %
                      TransportHandler::BufferedAlign !=
                  0;
    // The body is the handler's to write until it returns.
    for (char &Ch : B)
      Ch = char(~Ch);
    for (char &Ch : B)
      Ch = char(~Ch);
    onFrame(C, H, llvm::StringRef(B.data(), B.size()));
  }
  void onAccept(ConnId C) override {
    EXPECT_TRUE(*InProgress) << "onAccept outside progress()";
    Accepts.push_back(C);
  }
  void onDisconnect(ConnId C, llvm::StringRef Why) override {
    EXPECT_TRUE(*InProgress) << "onDisconnect outside progress()";
    Gone.emplace_back(C, Why.str());
  }
  bool gone(ConnId C) const {
    return llvm::any_of(Gone, [&](auto &G) { return G.first == C; });
  }
  /// Why \p C went, as onDisconnect said ("" if it did not).
  std::string why(ConnId C) const {
    for (auto &G : Gone)
      if (G.first == C)
        return G.second;
    return "";
  }
  /// Whether \p C went because its peer closed it (UcxTransport: the
  /// peer said goodbye), not because it was lost.
  bool closedByPeer(ConnId C) const {
    return llvm::StringRef(why(C)).ends_with(" closed by the peer");
  }
  bool lost(ConnId C) const {
    return llvm::StringRef(why(C)).contains(" lost: ");
  }
};

/// One transport and what it reported. The transport goes first.
struct Side {
  Events E;
  bool InProgress = false;
  std::unique_ptr<Transport> T;
  /// Send results, in completion order: "" is success.
  std::vector<std::string> Results;

  explicit Side(std::unique_ptr<Transport> TP) : T(std::move(TP)) {
    E.InProgress = &InProgress;
    T->setHandler(&E);
  }
  bool progress() {
    InProgress = true;
    bool Did = T->progress();
    InProgress = false;
    return Did;
  }
  /// Sends; the completion is checked to come from progress(), once.
  void send(ConnId C, llvm::StringRef H, llvm::StringRef B) {
    auto Once = std::make_shared<bool>(false);
    T->send(C, H, B, [this, Once](llvm::Error Err) {
      EXPECT_TRUE(InProgress) << "send completed outside progress()";
      EXPECT_FALSE(*Once) << "send completed twice";
      *Once = true;
      Results.push_back(Err ? llvm::toString(std::move(Err)) : "");
    });
  }
  /// Sends with trySendNow() (inline, or the mailbox), else with send().
  void sendNow(ConnId C, llvm::StringRef H, llvm::StringRef B) {
    if (!T->trySendNow(C, H, B))
      send(C, H, B);
  }
};

/// Progresses every side until \p Cond holds or \p TimeoutMs pass.
template <typename Pred>
bool pump(std::initializer_list<Side *> Sides, Pred Cond,
          int TimeoutMs = 5000) {
  auto Deadline = Clock::now() + milliseconds(TimeoutMs);
  while (true) {
    for (Side *S : Sides)
      S->progress();
    if (Cond())
      return true;
    if (Clock::now() > Deadline)
      return false;
    // Several transports in one thread: never block long on one of them.
    for (Side *S : Sides)
      if (llvm::Error E = S->T->wait(Sides.size() > 1 ? 1 : 50)) {
        ADD_FAILURE() << llvm::toString(std::move(E));
        return false;
      }
  }
}

std::string pattern(size_t N, unsigned Seed) {
  std::string S(N, '\0');
  for (size_t I = 0; I < N; ++I)
    S[I] = char((I * 131 + Seed * 7) >> 3);
  return S;
}

//===----------------------------------------------------------------------===//
// Loopback
//===----------------------------------------------------------------------===//

struct LoopbackPair {
  std::shared_ptr<LoopbackHub> Hub = createLoopbackHub();
  Side A{createLoopbackTransport(Hub)}, B{createLoopbackTransport(Hub)};
};

TEST(LoopbackTransport, FramesArriveInOrderAndCompleteOnlyInProgress) {
  LoopbackPair P;
  auto Port = P.B.T->listen("server", 0);
  ASSERT_TRUE(!!Port) << llvm::toString(Port.takeError());
  auto C = P.A.T->connect("server", *Port);
  ASSERT_TRUE(!!C) << llvm::toString(C.takeError());
  for (int I = 0; I < 50; ++I)
    P.A.send(*C, "h" + std::to_string(I), pattern(I * 10, I));
  EXPECT_TRUE(P.A.Results.empty()) << "completed inside send()";
  EXPECT_TRUE(P.B.E.Frames.empty()) << "delivered before progress()";
  ASSERT_TRUE(pump({&P.A, &P.B}, [&] {
    return P.A.Results.size() == 50 && P.B.E.Frames.size() == 50;
  }));
  ASSERT_EQ(P.B.E.Accepts.size(), 1u);
  for (int I = 0; I < 50; ++I) {
    EXPECT_EQ(P.A.Results[I], "");
    EXPECT_EQ(P.B.E.Frames[I].Conn, P.B.E.Accepts[0]);
    EXPECT_EQ(P.B.E.Frames[I].Header, "h" + std::to_string(I));
    EXPECT_EQ(P.B.E.Frames[I].Body, pattern(I * 10, I));
  }
}

TEST(LoopbackTransport, DisconnectIsSeenByThePeerAndFailsLaterSends) {
  LoopbackPair P;
  ASSERT_TRUE(!!P.B.T->listen("server", 7));
  auto C = P.A.T->connect("server", 7);
  ASSERT_TRUE(!!C);
  P.A.send(*C, "last", "words");
  P.A.T->disconnect(*C);
  P.A.send(*C, "late", "");
  ASSERT_TRUE(pump({&P.A, &P.B}, [&] {
    return P.A.Results.size() == 2 && !P.B.E.Gone.empty();
  }));
  EXPECT_EQ(P.A.Results[0], "");
  EXPECT_EQ(P.A.Results[1],
            "loopback: connection " + std::to_string(*C) + " is closed");
  // Sent before the disconnect: delivered before it is reported.
  ASSERT_EQ(P.B.E.Frames.size(), 1u);
  EXPECT_EQ(P.B.E.Frames[0].Header, "last");
  EXPECT_EQ(P.B.E.Gone[0].first, P.B.E.Accepts.at(0));
  EXPECT_TRUE(P.A.E.Gone.empty()) << "the closing side is not told";
}

TEST(LoopbackTransport, DestroyedTransportDisconnectsItsPeers) {
  LoopbackPair P;
  ASSERT_TRUE(!!P.B.T->listen("server", 1));
  auto C1 = P.A.T->connect("server", 1);
  auto Addr = P.A.T->address();
  ASSERT_TRUE(C1 && Addr);
  auto C2 = P.B.T->connectAddress(*Addr);
  ASSERT_TRUE(!!C2);
  ASSERT_TRUE(pump({&P.A, &P.B}, [&] {
    return P.A.E.Accepts.size() == 1 && P.B.E.Accepts.size() == 1;
  }));
  P.B.T.reset();
  ASSERT_TRUE(pump({&P.A}, [&] { return P.A.E.Gone.size() == 2; }));
  EXPECT_TRUE(P.A.E.gone(*C1));
  EXPECT_TRUE(P.A.E.gone(P.A.E.Accepts[0]));
}

TEST(LoopbackTransport, UnknownListenerAndAddressAreErrors) {
  LoopbackPair P;
  ASSERT_TRUE(!!P.B.T->listen("server", 5));
  auto C = P.A.T->connect("server", 6);
  ASSERT_FALSE(!!C);
  EXPECT_EQ(llvm::toString(C.takeError()),
            "loopback: nothing listens on server:6");
  auto Again = P.A.T->listen("server", 5);
  ASSERT_FALSE(!!Again);
  EXPECT_EQ(llvm::toString(Again.takeError()),
            "loopback: server:5 is already listened on");
  auto D = P.A.T->connectAddress("999");
  ASSERT_FALSE(!!D);
  EXPECT_EQ(llvm::toString(D.takeError()), "loopback: unknown address '999'");
}

TEST(LoopbackTransport, WaitSleepsUntilAnotherThreadSendsOrSignals) {
  LoopbackPair P;
  ASSERT_TRUE(!!P.B.T->listen("server", 1));
  auto C = P.A.T->connect("server", 1);
  ASSERT_TRUE(!!C);
  ASSERT_TRUE(pump({&P.B}, [&] { return P.B.E.Accepts.size() == 1; }));
  // Idle: wait() blocks for its timeout.
  auto T0 = Clock::now();
  ASSERT_FALSE(!!P.B.T->wait(100));
  EXPECT_GE(Clock::now() - T0, milliseconds(90));
  // A frame from another thread ends the wait long before its timeout.
  std::thread Sender([&] { P.A.send(*C, "x", "y"); });
  T0 = Clock::now();
  ASSERT_FALSE(!!P.B.T->wait(10000));
  EXPECT_LT(Clock::now() - T0, milliseconds(5000));
  Sender.join();
  ASSERT_TRUE(pump({&P.A, &P.B}, [&] { return P.B.E.Frames.size() == 1; }));
  std::thread Waker([&] { P.B.T->signal(); });
  T0 = Clock::now();
  ASSERT_FALSE(!!P.B.T->wait(10000));
  EXPECT_LT(Clock::now() - T0, milliseconds(5000));
  Waker.join();
}

//===----------------------------------------------------------------------===//
// UCX in one process
//===----------------------------------------------------------------------===//

struct Tls {
  const char *Name;
  const char *Transports;
  const char *NetDevices; ///< Null: UCX's default.
  friend std::ostream &operator<<(std::ostream &OS, const Tls &T) {
    return OS << T.Name;
  }
};
// Connection establishment by socket address needs UCX's TCP connection
// manager, so "shm" lists tcp too; UCX picks posix for the data lanes.
const Tls Shm{"shm", "posix,self,tcp", "lo"};
const Tls Tcp{"tcp", "tcp", "lo"};

/// A UCX transport on \p P's transports, with \p Opts for the rest.
std::unique_ptr<Transport> ucxWith(const Tls &P, UcxTransportOptions Opts) {
  if (P.NetDevices)
    setenv("UCX_NET_DEVICES", P.NetDevices, 1); // read by ucp_config_read
  Opts.Transports = P.Transports;
  auto T = createUcxTransport(Opts);
  if (P.NetDevices)
    unsetenv("UCX_NET_DEVICES");
  if (!T) {
    ADD_FAILURE() << llvm::toString(T.takeError());
    return nullptr;
  }
  return std::move(*T);
}

std::unique_ptr<Transport> ucx(const Tls &P, bool Coalesce = true,
                               size_t MaxCopiedBacklog = 32 << 20) {
  UcxTransportOptions Opts;
  Opts.Coalesce = Coalesce;
  Opts.MaxCopiedBacklog = MaxCopiedBacklog;
  return ucxWith(P, Opts);
}

class UcxTransportTest : public ::testing::TestWithParam<Tls> {
protected:
  void SetUp() override {
    auto TA = ucx(GetParam()), TB = ucx(GetParam());
    ASSERT_TRUE(TA && TB);
    A = std::make_unique<Side>(std::move(TA));
    B = std::make_unique<Side>(std::move(TB));
  }
  /// A connects to B's listener; both sides see the connection.
  void connect() {
    auto Port = B->T->listen("127.0.0.1", 0);
    ASSERT_TRUE(!!Port) << llvm::toString(Port.takeError());
    ASSERT_NE(*Port, 0u);
    auto C = A->T->connect("127.0.0.1", *Port);
    ASSERT_TRUE(!!C) << llvm::toString(C.takeError());
    AC = *C;
    ASSERT_TRUE(pump({A.get(), B.get()},
                     [&] { return B->E.Accepts.size() == 1; }));
    BC = B->E.Accepts[0];
  }
  /// connect(), then probes until B's welcome gave A its token; the probes
  /// have all arrived and completed.
  void connectWithToken() {
    connect();
    ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
      A->send(AC, "probe", "");
      return A->T->stats().TokenFrames > 0;
    }));
    ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
      return A->Results.size() == B->E.Frames.size();
    }));
  }
  std::unique_ptr<Side> A, B;
  ConnId AC = 0, BC = 0;
};

TEST_P(UcxTransportTest, EagerAndRendezvousFramesArriveInOrder) {
  connect();
  const size_t MiB = 1 << 20;
  std::vector<std::string> Bodies = {pattern(5, 1), pattern(MiB, 2),
                                     pattern(1, 3), pattern(MiB + 3, 4),
                                     pattern(0, 5), pattern(100, 6)};
  for (size_t I = 0; I < Bodies.size(); ++I)
    A->send(AC, "frame" + std::to_string(I), Bodies[I]);
  EXPECT_TRUE(A->Results.empty()) << "completed inside send()";
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
    return A->Results.size() == Bodies.size() &&
           B->E.Frames.size() == Bodies.size();
  }));
  for (size_t I = 0; I < Bodies.size(); ++I) {
    EXPECT_EQ(A->Results[I], "") << I;
    EXPECT_EQ(B->E.Frames[I].Conn, BC);
    EXPECT_EQ(B->E.Frames[I].Header, "frame" + std::to_string(I));
    EXPECT_TRUE(B->E.Frames[I].Body == Bodies[I]) << "body " << I;
  }
}

TEST_P(UcxTransportTest, TokensReplaceReplyEndpointsAfterTheFirstFrame) {
  connect();
  A->send(AC, "first", "1");
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
    return B->E.Frames.size() == 1 && A->T->stats().TokenFrames == 0 &&
           A->Results.size() == 1;
  }));
  // The welcome is on its way; once A has it, frames carry B's token.
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
    A->send(AC, "again", "2");
    return A->T->stats().TokenFrames > 0;
  }));
  A->send(AC, "last", "3");
  // "first", the "again"s and "last", each counted once, as one kind.
  size_t Sent = A->T->stats().ReplyFrames + A->T->stats().TokenFrames;
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
    return B->E.Frames.size() == Sent && A->Results.size() == Sent;
  }));
  EXPECT_EQ(B->E.Frames.back().Header, "last");
  for (const auto &F : B->E.Frames)
    EXPECT_EQ(F.Conn, BC);
  EXPECT_EQ(B->T->stats().DroppedFrames, 0u);
}

TEST_P(UcxTransportTest, FramesSentWithRoomArriveIntactAndOnlyTheRoomIsUsed) {
  connect();
  // Buffers laid out as the runtime's: room, header, then bytes the
  // transport must not touch. Kept until the end: nothing is copied from
  // them late, but a transport that did would be caught by ASan.
  constexpr size_t Room = Transport::HeaderRoom;
  std::list<std::string> Bufs;
  std::vector<std::string> Headers, Bodies;
  size_t Done = 0;
  auto SendWithRoom = [&](const std::string &H, const std::string &B) {
    std::string &Buf = Bufs.emplace_back(std::string(Room, '\xAA') + H +
                                         std::string(4, '\xBB'));
    Headers.push_back(H);
    Bodies.push_back(B);
    A->T->sendWithRoom(AC, llvm::StringRef(Buf.data() + Room, H.size()),
                       Bodies.back(), [&](llvm::Error E) {
                         EXPECT_FALSE(E) << llvm::toString(std::move(E));
                         ++Done;
                       });
    EXPECT_EQ(Buf.substr(Room), H + std::string(4, '\xBB'))
        << "the header or what follows it changed";
  };
  // The first frame goes with REPLY (no token yet), the next ones with the
  // token written into the room: one at once, a burst that is batched, a
  // big one that UCX sends from a copy.
  SendWithRoom("first", "1");
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
    return B->E.Frames.size() == 1 && Done == 1 &&
           A->T->stats().TokenFrames == 0;
  }));
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
    if (A->T->stats().TokenFrames == 0)
      SendWithRoom("probe", "");
    return A->T->stats().TokenFrames > 0;
  }));
  for (int I = 0; I < 5; ++I)
    SendWithRoom("burst" + std::to_string(I), pattern(10 + I, I));
  SendWithRoom("big", pattern(100000, 9));
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
    return B->E.Frames.size() == Headers.size() && Done == Headers.size();
  }));
  for (size_t I = 0; I < Headers.size(); ++I) {
    EXPECT_EQ(B->E.Frames[I].Header, Headers[I]) << I;
    EXPECT_TRUE(B->E.Frames[I].Body == Bodies[I]) << "body " << I;
  }
}

TEST_P(UcxTransportTest, FramesBetweenProgressCallsLeaveAsBatchesInOrder) {
  for (bool Coalesce : {true, false}) {
    SCOPED_TRACE(Coalesce ? "coalescing" : "not coalescing");
    A = std::make_unique<Side>(ucx(GetParam(), Coalesce));
    B = std::make_unique<Side>(ucx(GetParam()));
    connect();
    // Set the connection up: probes until B's welcome gave A its token.
    ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
      A->send(AC, "probe", "");
      return A->T->stats().TokenFrames > 0;
    }));
    TransportStats S0 = A->T->stats();
    size_t Probes = S0.ReplyFrames + S0.TokenFrames;
    ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
      return B->E.Frames.size() == Probes && A->Results.size() == Probes;
    }));
    size_t Before = Probes;
    // Small frames and one too big to batch, all without progress().
    std::vector<std::string> Bodies;
    for (unsigned I = 0; I < 200; ++I)
      Bodies.push_back(pattern(I == 150 ? 3000 : I % 7, I));
    for (unsigned I = 0; I < Bodies.size(); ++I)
      A->send(AC, "b" + std::to_string(I), Bodies[I]);
    EXPECT_EQ(A->Results.size(), Probes) << "completed inside send()";
    ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
      return B->E.Frames.size() == Before + Bodies.size();
    }));
    for (unsigned I = 0; I < Bodies.size(); ++I) {
      const auto &F = B->E.Frames[Before + I];
      ASSERT_EQ(F.Header, "b" + std::to_string(I));
      EXPECT_TRUE(F.Body == Bodies[I]) << "body " << I;
      EXPECT_EQ(F.Conn, BC);
    }
    ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
      return A->Results.size() == Probes + Bodies.size();
    }));
    for (const std::string &R : A->Results)
      EXPECT_EQ(R, "");
    TransportStats S1 = A->T->stats();
    if (Coalesce) {
      EXPECT_GE(S1.Batches - S0.Batches, 2u); // split by the big frame
      EXPECT_GE(S1.BatchedFrames - S0.BatchedFrames, 190u);
    } else {
      EXPECT_EQ(S1.Batches, 0u);
    }
    EXPECT_EQ(B->T->stats().DroppedFrames, 0u);
  }
}

TEST_P(UcxTransportTest, BatchesLargerThanALargeBodyAreNotCountedAsCopies) {
  // A batch's body can be larger than a large frame's body
  // (Transport::LargeBody) without being a copy of one: sending it must not
  // take it off the connection's count of copied large bodies. It did: the
  // count wrapped below zero and every later send waited up to 5 s for
  // room (tc-bench sss hung).
  connect();
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
    A->send(AC, "probe", "");
    return A->T->stats().TokenFrames > 0;
  }));
  size_t Want = A->T->stats().ReplyFrames + A->T->stats().TokenFrames;
  for (unsigned Burst = 0; Burst < 4; ++Burst) {
    for (unsigned I = 0; I < 50; ++I, ++Want) {
      A->send(AC, "b", pattern(2000, I)); // Three to a batch: 6 KiB.
      ASSERT_EQ(A->T->stats().SendWaits, 0u) << "a send waited for room";
    }
    ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
      return B->E.Frames.size() == Want && A->Results.size() == Want;
    })) << "burst " << Burst;
  }
  // And a large frame after them.
  A->send(AC, "big", pattern(100000, 7));
  ASSERT_TRUE(pump({A.get(), B.get()},
                   [&] { return B->E.Frames.size() == Want + 1; }));
  TransportStats S = A->T->stats();
  EXPECT_GE(S.BatchedFrames, 100u);
  EXPECT_EQ(S.SendWaits, 0u) << "the large frame waited for room";
  for (const std::string &R : A->Results)
    EXPECT_EQ(R, "");
}

TEST_P(UcxTransportTest, SendGivesUpWaitingForLargeFramesOnlyThisThreadMoves) {
  // Both transports in this thread: while A's send() waits for its large
  // frames to leave, nobody progresses B, so none does. A gives up once
  // (after 50 ms without progress) and does not wait again until they have
  // left; every frame arrives once B progresses.
  ASSERT_NO_FATAL_FAILURE(connectWithToken());
  size_t Before = B->E.Frames.size();
  auto Body = std::make_shared<std::string>(pattern(100000, 5));
  const unsigned N = 30;
  for (unsigned I = 0; I < N; ++I)
    A->T->sendShared(AC, "L" + std::to_string(I), *Body, Body, nullptr);
  EXPECT_EQ(A->T->stats().SendWaits, 1u);
  ASSERT_TRUE(pump({A.get(), B.get()},
                   [&] { return B->E.Frames.size() == Before + N; }, 20000));
  for (unsigned I = 0; I < N; ++I) {
    EXPECT_EQ(B->E.Frames[Before + I].Header, "L" + std::to_string(I));
    EXPECT_TRUE(B->E.Frames[Before + I].Body == *Body) << I;
  }
}

TEST_P(UcxTransportTest, SendStopsWaitingForCopiesOnceThePeerStalls) {
  // A allows 1 MiB of copies; nobody progresses B (both in this thread).
  // A's send() over the bound waits, gives up after 5 s without progress,
  // and does not wait again while the copies are over half the bound:
  // the other sends return at once. Every frame arrives once B progresses.
  A = std::make_unique<Side>(ucx(GetParam(), true, 1 << 20));
  ASSERT_TRUE(A->T);
  ASSERT_NO_FATAL_FAILURE(connectWithToken());
  size_t Before = B->E.Frames.size(), Done = A->Results.size();
  const unsigned N = 40;
  std::vector<std::string> Bodies;
  for (unsigned I = 0; I < N; ++I) {
    Bodies.push_back(pattern(100000, I));
    A->send(AC, "C" + std::to_string(I), Bodies[I]);
  }
  TransportStats S = A->T->stats();
  EXPECT_EQ(S.SendWaits, 1u);
  EXPECT_EQ(S.SendWaitsGivenUp, 1u);
  ASSERT_TRUE(pump({A.get(), B.get()},
                   [&] { return B->E.Frames.size() == Before + N; }, 20000));
  for (unsigned I = 0; I < N; ++I) {
    EXPECT_EQ(B->E.Frames[Before + I].Header, "C" + std::to_string(I));
    EXPECT_TRUE(B->E.Frames[Before + I].Body == Bodies[I]) << I;
  }
  ASSERT_TRUE(pump({A.get(), B.get()},
                   [&] { return A->Results.size() == Done + N; }));
  for (size_t I = Done; I < A->Results.size(); ++I)
    EXPECT_EQ(A->Results[I], "");
}

TEST_P(UcxTransportTest, BatchesArriveWhereUcxWouldSendThemByRendezvous) {
  // A user's UCX_RNDV_THRESH (or UCX_MM_SEG_SIZE) below a batch's size:
  // UCX would pick rendezvous for the batch, which the receiver cannot
  // split in its callback. Batches are sent eager-only; none is lost.
  setenv("UCX_RNDV_THRESH", "512", 1);
  A = std::make_unique<Side>(ucx(GetParam()));
  B = std::make_unique<Side>(ucx(GetParam()));
  unsetenv("UCX_RNDV_THRESH");
  ASSERT_TRUE(A && B && A->T && B->T);
  connect();
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
    A->send(AC, "probe", "");
    return A->T->stats().TokenFrames > 0;
  }));
  TransportStats S0 = A->T->stats();
  size_t Before = S0.ReplyFrames + S0.TokenFrames;
  ASSERT_TRUE(pump({A.get(), B.get()},
                   [&] { return B->E.Frames.size() == Before; }));
  std::vector<std::string> Bodies;
  for (unsigned I = 0; I < 300; ++I)
    Bodies.push_back(pattern(100, I));
  for (unsigned I = 0; I < Bodies.size(); ++I)
    A->send(AC, "r" + std::to_string(I), Bodies[I]);
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
    return B->E.Frames.size() == Before + Bodies.size();
  }));
  for (unsigned I = 0; I < Bodies.size(); ++I) {
    const auto &F = B->E.Frames[Before + I];
    ASSERT_EQ(F.Header, "r" + std::to_string(I));
    EXPECT_TRUE(F.Body == Bodies[I]) << "body " << I;
  }
  EXPECT_GE(A->T->stats().Batches - S0.Batches, 2u); // ~4 KiB each
  EXPECT_EQ(B->T->stats().DroppedFrames, 0u);
}

/// A bare UCX worker that sends active messages of any id to a worker
/// address: a peer that does not speak tc's transport.
struct RawUcxPeer {
  ucp_context_h Ctx = nullptr;
  ucp_worker_h W = nullptr;
  ucp_ep_h Ep = nullptr;

  RawUcxPeer(const Tls &P, const std::string &Address) {
    ucp_config_t *Cfg;
    EXPECT_EQ(ucp_config_read(nullptr, nullptr, &Cfg), UCS_OK);
    EXPECT_EQ(ucp_config_modify(Cfg, "TLS", P.Transports), UCS_OK);
    if (P.NetDevices)
      EXPECT_EQ(ucp_config_modify(Cfg, "NET_DEVICES", P.NetDevices), UCS_OK);
    ucp_params_t PP{};
    PP.field_mask = UCP_PARAM_FIELD_FEATURES;
    PP.features = UCP_FEATURE_AM;
    EXPECT_EQ(ucp_init(&PP, Cfg, &Ctx), UCS_OK);
    ucp_config_release(Cfg);
    ucp_worker_params_t WP{};
    EXPECT_EQ(ucp_worker_create(Ctx, &WP, &W), UCS_OK);
    ucp_ep_params_t EP{};
    EP.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    EP.address = reinterpret_cast<const ucp_address_t *>(Address.data());
    EXPECT_EQ(ucp_ep_create(W, &EP, &Ep), UCS_OK);
  }
  /// Sends; \p Header and \p Body must live until done() (UCX may need
  /// the receiver to progress first, for wire-up).
  void send(unsigned Id, llvm::StringRef Header, llvm::StringRef Body) {
    ucp_request_param_t P{};
    ucs_status_ptr_t R = ucp_am_send_nbx(Ep, Id, Header.data(), Header.size(),
                                         Body.data(), Body.size(), &P);
    ASSERT_FALSE(UCS_PTR_IS_ERR(R));
    if (R)
      Sends.push_back(R);
  }
  /// Progresses; true once every send has completed (successfully).
  bool done() {
    ucp_worker_progress(W);
    llvm::erase_if(Sends, [](void *R) {
      ucs_status_t S = ucp_request_check_status(R);
      if (S == UCS_INPROGRESS)
        return false;
      EXPECT_EQ(S, UCS_OK);
      ucp_request_free(R);
      return true;
    });
    return Sends.empty();
  }
  std::vector<void *> Sends;
  ~RawUcxPeer() {
    for (void *R : Sends) {
      ucp_request_cancel(W, R);
      ucp_request_free(R);
    }
    ucp_request_param_t P{};
    ucs_status_ptr_t R = ucp_ep_close_nbx(Ep, &P);
    auto Deadline = Clock::now() + std::chrono::seconds(2);
    while (R && !UCS_PTR_IS_ERR(R) &&
           ucp_request_check_status(R) == UCS_INPROGRESS &&
           Clock::now() < Deadline)
      ucp_worker_progress(W);
    if (R && !UCS_PTR_IS_ERR(R))
      ucp_request_free(R);
    ucp_worker_destroy(W);
    ucp_cleanup(Ctx);
  }
};

TEST_P(UcxTransportTest, FramesSentNowAndQueuedKeepTheirOrder) {
  // trySendNow() sends small frames at once when nothing of the connection
  // waits; coalescing, it copies a frame into the batch that waits at the
  // end of the connection's backlog (one too big for an inline message
  // too, up to a third of a batch); otherwise it declines (the caller then
  // uses send()): before the peer's token is known, after the first frame
  // of a progress() round when there is no batch to join (send() opens
  // one), and for a frame too big to join a batch. Frames arrive in the
  // order of the calls either way.
  connect();
  std::vector<std::string> Bodies;
  std::vector<bool> Now;
  auto Send = [&](const std::string &Body) {
    std::string H = "f" + std::to_string(Bodies.size());
    bool Sent = A->T->trySendNow(AC, H, Body);
    if (!Sent)
      A->send(AC, H, Body);
    Bodies.push_back(Body);
    Now.push_back(Sent);
  };
  Send("first"); // No token yet: declined.
  EXPECT_FALSE(Now.back());
  // Probes until B's welcome gave A the token.
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
    Send("probe");
    return Now.back();
  }));
  size_t Behind = 0;
  for (int Round = 0; Round < 20; ++Round) {
    A->progress();
    uint64_t Batched = A->T->stats().BatchedFrames;
    // The first of its round: at once; after round 10, behind the
    // rendezvous frame (B does not progress here, so UCX holds it), into
    // the batch that waits there.
    Send(pattern(Round % 5, Round));
    EXPECT_TRUE(Now.back()) << Round;
    // The second: declined while there is no batch to join, so send()
    // opens one; after round 10, into the waiting batch.
    Send(pattern(3, Round));
    EXPECT_EQ(Now.back(), Round > 10) << Round;
    if (Round <= 10) {
      // Past an inline message's size: into the batch send() opened.
      Send(pattern(1000, Round));
      EXPECT_TRUE(Now.back()) << Round;
      // Past a third of a batch: declined, send() sends it alone.
      Send(pattern(3000, Round));
      EXPECT_FALSE(Now.back()) << Round;
    }
    // Rounds up to 10 send their batch in the next progress() call; the
    // later ones keep theirs waiting.
    if (Round > 10)
      EXPECT_EQ(A->T->stats().BatchedFrames, Batched) << Round;
    if (Round == 10) {
      A->progress();
      Send(pattern(1 << 20, 9)); // A rendezvous frame, held by UCX...
      Send("behind"); // ...so this one waits behind it.
      Behind = Now.size() - 1;
    }
  }
  EXPECT_FALSE(Now[Behind]);
  ASSERT_TRUE(pump({A.get(), B.get()},
                   [&] { return B->E.Frames.size() == Bodies.size(); }));
  for (size_t I = 0; I < Bodies.size(); ++I) {
    ASSERT_EQ(B->E.Frames[I].Header, "f" + std::to_string(I));
    EXPECT_TRUE(B->E.Frames[I].Body == Bodies[I]) << I;
  }
  // Only the frames sent with send() report completions.
  size_t Queued = llvm::count(Now, false);
  ASSERT_TRUE(pump({A.get(), B.get()},
                   [&] { return A->Results.size() == Queued; }));
  EXPECT_TRUE(llvm::all_of(A->Results, [](auto &R) { return R.empty(); }));
}

TEST_P(UcxTransportTest, FramesSentFromTheCallersBufferArriveWhole) {
  // trySendFrameNow() sends a frame laid out in the caller's buffer as it
  // is, the token written into the room before it; it sends at once and
  // declines exactly where trySendNow() does (the caller then uses send()
  // with the same bytes), and the frames arrive in the order of the calls,
  // whole, whatever the room held. (Over shared memory the connection has
  // a mailbox lane, so trySendNow() takes every frame: this checks that it
  // gets them as they were.)
  for (bool Coalesce : {true, false}) {
    SCOPED_TRACE(Coalesce ? "coalescing" : "not coalescing");
    A = std::make_unique<Side>(ucx(GetParam(), Coalesce));
    B = std::make_unique<Side>(ucx(GetParam()));
    connectWithToken();
    size_t Before = B->E.Frames.size();
    std::vector<std::string> Headers, Bodies;
    std::vector<bool> Now;
    auto Send = [&](size_t BodySize, unsigned Seed) {
      std::string H = "g" + std::to_string(Headers.size());
      std::string Body = pattern(BodySize, Seed);
      char Buf[Transport::FrameRoom + Transport::FrameNowMax];
      std::memset(Buf, 0xA5, sizeof Buf);
      char *Frame = Buf + Transport::FrameRoom;
      std::memcpy(Frame, H.data(), H.size());
      std::memcpy(Frame + H.size(), Body.data(), Body.size());
      bool Sent =
          A->T->trySendFrameNow(AC, Frame, H.size(), H.size() + Body.size());
      // What the transport may write is the room; the frame stays as it was.
      EXPECT_EQ(llvm::StringRef(Frame, H.size()), H);
      EXPECT_TRUE(llvm::StringRef(Frame + H.size(), Body.size()) == Body);
      if (!Sent)
        A->send(AC, llvm::StringRef(Frame, H.size()),
                llvm::StringRef(Frame + H.size(), Body.size()));
      Headers.push_back(H);
      Bodies.push_back(Body);
      Now.push_back(Sent);
    };
    for (unsigned Round = 0; Round < 30; ++Round) {
      B->progress(); // Takes what came, so UCX has room for the next.
      A->progress();
      Send(Round * 7, Round); // The first of its round: at once.
      EXPECT_TRUE(Now.back()) << Round;
      // The second: at once without coalescing; coalescing, declined (no
      // batch to join: send() opens one); the third joins that batch.
      Send(200, Round + 100);
      EXPECT_EQ(Now.back(), !Coalesce) << Round;
      Send(1, Round + 200);
      EXPECT_TRUE(Now.back()) << Round;
    }
    ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
      return B->E.Frames.size() == Before + Headers.size();
    }));
    for (size_t I = 0; I < Headers.size(); ++I) {
      ASSERT_EQ(B->E.Frames[Before + I].Header, Headers[I]) << I;
      EXPECT_TRUE(B->E.Frames[Before + I].Body == Bodies[I]) << I;
    }
  }
}

TEST_P(UcxTransportTest, ForgedTokensAndBadBatchesAreDroppedAndServingGoesOn) {
  connect();
  auto Addr = B->T->address();
  ASSERT_TRUE(!!Addr) << llvm::toString(Addr.takeError());
  // Token frame (0x7E) and batch (0x7F) with a token B never gave out, for
  // connection 1 (which exists: A's), and a batch whose header is not a
  // token at all. The buffers outlive the raw peer's sends.
  const std::string Forged("\x01\x00\x00\x00\x5a\x5a\x5a\x5a", 8);
  const std::string FrameHeader = Forged + "fake", NoToken = "abc";
  std::string Record("\x04\x00\x00\x00\x01\x00\x00\x00", 8);
  Record += "fakeX";
  // Inline frames (0x7A: token, header size, header, body in the data):
  // a forged token, data too short for a token and a size, and an AM
  // header where there must be none.
  const std::string InlineForged = Forged + "\x04" + "fakeX", Short = "tiny";
  {
    RawUcxPeer Raw(GetParam(), *Addr);
    Raw.send(0x7E, FrameHeader, "X");
    Raw.send(0x7F, Forged, Record);
    Raw.send(0x7F, NoToken, Record);
    Raw.send(0x7A, "", InlineForged);
    Raw.send(0x7A, "", Short);
    Raw.send(0x7A, NoToken, InlineForged);
    ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
      return Raw.done() && B->T->stats().DroppedFrames == 6;
    }));
  }
  EXPECT_TRUE(B->E.Frames.empty()) << "a forged frame was delivered";
  // B goes on serving its real peer.
  A->send(AC, "real", "1");
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] { return !B->E.Frames.empty(); }));
  EXPECT_EQ(B->E.Frames[0].Header, "real");
  EXPECT_EQ(B->E.Frames[0].Conn, BC);
}

TEST_P(UcxTransportTest, ServerRepliesOnTheAcceptedConnection) {
  connect();
  B->E.OnFrame = [&](ConnId C, llvm::StringRef H, llvm::StringRef Body) {
    B->send(C, ("re:" + H).str(), "");
  };
  A->send(AC, "ping", "1");
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] { return !A->E.Frames.empty(); }));
  EXPECT_EQ(A->E.Frames[0].Conn, AC);
  EXPECT_EQ(A->E.Frames[0].Header, "re:ping");
  EXPECT_TRUE(A->E.Accepts.empty());
  EXPECT_EQ(B->E.Accepts.size(), 1u);
}

TEST_P(UcxTransportTest, ConnectByWorkerAddressAndReply) {
  auto Addr = B->T->address();
  ASSERT_TRUE(!!Addr) << llvm::toString(Addr.takeError());
  auto C = A->T->connectAddress(*Addr);
  ASSERT_TRUE(!!C) << llvm::toString(C.takeError());
  // A body must outlive its send: keep the echoed copies.
  std::list<std::string> Echoed;
  B->E.OnFrame = [&](ConnId From, llvm::StringRef H, llvm::StringRef Body) {
    B->send(From, ("re:" + H).str(), Echoed.emplace_back(Body.str()));
  };
  std::string Big = pattern(1 << 20, 9);
  A->send(*C, "one", "a");
  A->send(*C, "two", Big);
  A->send(*C, "three", "c");
  ASSERT_TRUE(
      pump({A.get(), B.get()}, [&] { return A->E.Frames.size() == 3; }));
  // The peer learns of the connection with its first frame.
  ASSERT_EQ(B->E.Accepts.size(), 1u);
  for (auto &F : B->E.Frames)
    EXPECT_EQ(F.Conn, B->E.Accepts[0]);
  EXPECT_EQ(A->E.Frames[0].Header, "re:one");
  EXPECT_EQ(A->E.Frames[1].Header, "re:two");
  EXPECT_TRUE(A->E.Frames[1].Body == Big);
  EXPECT_EQ(A->E.Frames[2].Header, "re:three");
  for (auto &F : A->E.Frames)
    EXPECT_EQ(F.Conn, *C);
}

TEST_P(UcxTransportTest, DestroyedPeerIsReportedAsDisconnect) {
  connect();
  A->send(AC, "hello", "");
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] { return !B->E.Frames.empty(); }));
  A.reset();
  ASSERT_TRUE(pump({B.get()}, [&] { return B->E.gone(BC); }, 10000));
  EXPECT_TRUE(B->E.closedByPeer(BC)) << B->E.why(BC);
  B->send(BC, "late", "");
  ASSERT_TRUE(pump({B.get()}, [&] { return B->Results.size() == 1; }));
  EXPECT_EQ(B->Results[0], "connection " + std::to_string(BC) + " is closed");
}

TEST_P(UcxTransportTest, DisconnectIsSeenByThePeer) {
  connect();
  A->send(AC, "bye", "");
  A->T->disconnect(AC);
  A->send(AC, "late", "");
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
    return A->Results.size() == 2 && B->E.gone(BC);
  }, 10000));
  // In completion order: the late send fails at once, "bye" is flushed.
  EXPECT_EQ(A->Results[0], "connection " + std::to_string(AC) + " is closed");
  EXPECT_EQ(A->Results[1], "");
  EXPECT_TRUE(A->E.Gone.empty()) << "the closing side is not told";
  // The peer knows it was a close, not a failure.
  EXPECT_TRUE(B->E.closedByPeer(BC)) << B->E.why(BC);
}

TEST_P(UcxTransportTest, AddressPeerThatClosesIsReportedAfterItsFrames) {
  // UCX reports nothing when a peer that connected by worker address
  // closes (the endpoint here is UCX's reply endpoint): its goodbye ends
  // the connection, once every frame it sent before is delivered (with
  // frames in a mailbox ring and rendezvous frames: UcxMailbox.
  // APeerThatClosesIsReportedAfterEveryFrameItSent).
  auto Addr = B->T->address();
  ASSERT_TRUE(!!Addr) << llvm::toString(Addr.takeError());
  auto C = A->T->connectAddress(*Addr);
  ASSERT_TRUE(!!C) << llvm::toString(C.takeError());
  unsigned Sent = 0;
  auto Send = [&] { A->sendNow(*C, "m" + std::to_string(Sent++), "x"); };
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
    Send();
    return !B->E.Frames.empty();
  }, 10000));
  for (int I = 0; I < 20; ++I)
    Send();
  A->T->disconnect(*C);
  ConnId BC = B->E.Frames[0].Conn;
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] { return B->E.gone(BC); }, 10000));
  EXPECT_TRUE(B->E.closedByPeer(BC)) << B->E.why(BC);
  ASSERT_EQ(B->E.Frames.size(), Sent);
  for (unsigned I = 0; I < Sent; ++I)
    EXPECT_EQ(B->E.Frames[I].Header, "m" + std::to_string(I));
  // The connection is gone here: a send on it fails.
  B->send(BC, "late", "");
  ASSERT_TRUE(pump({B.get()}, [&] { return B->Results.size() == 1; }));
  EXPECT_EQ(B->Results[0], "connection " + std::to_string(BC) + " is closed");
}

TEST_P(UcxTransportTest, ConnectionToNothingFailsSendsThenDisconnects) {
  uint16_t Port;
  {
    // A port that was free a moment ago and has no listener now.
    auto Probe = ucx(GetParam());
    ASSERT_TRUE(Probe);
    auto P = Probe->listen("127.0.0.1", 0);
    ASSERT_TRUE(!!P) << llvm::toString(P.takeError());
    Port = *P;
  }
  auto C = A->T->connect("127.0.0.1", Port);
  ASSERT_TRUE(!!C) << llvm::toString(C.takeError());
  // Queued behind the connection; it must fail before onDisconnect.
  bool FailedFirst = false;
  A->T->send(*C, "h", "b", [&](llvm::Error E) {
    FailedFirst = !!E && A->E.Gone.empty();
    consumeError(std::move(E));
  });
  ASSERT_TRUE(pump({A.get()}, [&] { return A->E.gone(*C); }, 10000));
  EXPECT_TRUE(FailedFirst);
  EXPECT_NE(A->E.Gone[0].second.find("127.0.0.1:" + std::to_string(Port)),
            std::string::npos)
      << A->E.Gone[0].second;
}

TEST_P(UcxTransportTest, WaitReturnsWhenAFrameArrives) {
  connect();
  A->send(AC, "warm", "up");
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
    return A->Results.size() == 1 && B->E.Frames.size() == 1;
  }));
  while (A->progress() || B->progress())
    ;
  A->send(AC, "wake", "up");
  A->progress();
  auto T0 = Clock::now();
  ASSERT_FALSE(!!B->T->wait(10000));
  EXPECT_LT(Clock::now() - T0, milliseconds(5000)) << "wait() missed a frame";
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] { return B->E.Frames.size() == 2; }));
  // signal() from another thread ends a wait too.
  while (B->progress())
    ;
  std::thread Waker([&] { B->T->signal(); });
  T0 = Clock::now();
  ASSERT_FALSE(!!B->T->wait(10000));
  EXPECT_LT(Clock::now() - T0, milliseconds(5000)) << "wait() missed signal()";
  Waker.join();
}

TEST_P(UcxTransportTest, HandlersMayProgressAndWaitOnTheirOwnTransport) {
  // ifunc code may call tc_worker_progress() and tc_worker_wait() for its
  // own worker (docs/c-api.md, "Threads"); the runtime's handler is then
  // inside the transport's progress(), and for an active message or a
  // rendezvous inside ucp_worker_progress(), which UCX 1.13 must not
  // re-enter (it asserts and aborts). Small frames (mailbox slots on shm
  // once the ring is up, active messages before and on TCP) and large ones
  // (rendezvous) are all delivered, in order, while every handler
  // progresses, waits, replies and progresses again.
  connect();
  int Nested = 0;
  B->E.OnFrame = [&](ConnId C, llvm::StringRef H, llvm::StringRef) {
    ++Nested;
    B->T->progress();
    if (llvm::Error E = B->T->wait(0))
      ADD_FAILURE() << llvm::toString(std::move(E));
    B->send(C, H, "ack");
    B->T->progress();
  };
  const size_t MiB = 1 << 20;
  std::vector<std::string> Bodies;
  for (unsigned I = 0; I < 40; ++I)
    Bodies.push_back(pattern(I % 10 == 9 ? MiB + I : 8 + I, I));
  for (size_t I = 0; I < Bodies.size(); ++I) {
    A->send(AC, "f" + std::to_string(I), Bodies[I]);
    if (I % 4 == 3) // Let some arrive one by one, some together.
      ASSERT_TRUE(pump({A.get(), B.get()},
                       [&] { return B->E.Frames.size() == I + 1; }));
  }
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
    return A->E.Frames.size() == Bodies.size() &&
           A->Results.size() == Bodies.size();
  }));
  EXPECT_EQ(Nested, int(Bodies.size()));
  ASSERT_EQ(B->E.Frames.size(), Bodies.size());
  for (size_t I = 0; I < Bodies.size(); ++I) {
    EXPECT_EQ(A->Results[I], "") << I;
    EXPECT_EQ(B->E.Frames[I].Header, "f" + std::to_string(I));
    EXPECT_TRUE(B->E.Frames[I].Body == Bodies[I]) << "body " << I;
    EXPECT_EQ(A->E.Frames[I].Header, "f" + std::to_string(I));
    EXPECT_EQ(A->E.Frames[I].Body, "ack");
  }
  EXPECT_EQ(B->Results.size(), Bodies.size());
}

TEST_P(UcxTransportTest, OneByteRoundTrip) {
  connect();
  static const std::string One = "x"; // outlives every send of it
  B->E.OnFrame = [&](ConnId C, llvm::StringRef H, llvm::StringRef Body) {
    EXPECT_EQ(Body, One);
    B->send(C, H, One);
  };
  const int N = 2000, Warm = 200;
  Clock::time_point T0;
  for (int I = 0; I < N + Warm; ++I) {
    if (I == Warm)
      T0 = Clock::now();
    size_t Want = A->E.Frames.size() + 1;
    A->send(AC, "", One);
    auto Deadline = Clock::now() + std::chrono::seconds(5);
    while (A->E.Frames.size() < Want && Clock::now() < Deadline) {
      A->progress();
      B->progress();
    }
    ASSERT_EQ(A->E.Frames.size(), Want) << "round trip " << I << " timed out";
  }
  double Us =
      std::chrono::duration<double, std::micro>(Clock::now() - T0).count() / N;
  RecordProperty("round_trip_us", std::to_string(Us));
  std::cout << "[ measured ] 1-byte round trip over " << GetParam().Name
            << " (one process, one thread): " << Us << " us\n";
}

TEST(UcxTransport, UnresolvableHostIsAnError) {
  auto T = ucx(Tcp);
  ASSERT_TRUE(T);
  auto C = T->connect("no-such-host.invalid", 4242);
  ASSERT_FALSE(!!C);
  EXPECT_NE(llvm::toString(C.takeError())
                .find("cannot resolve 'no-such-host.invalid:4242'"),
            std::string::npos);
  auto L = T->listen("no-such-host.invalid", 4242);
  ASSERT_FALSE(!!L);
  consumeError(L.takeError());
}

TEST(UcxTransport, BadTransportListIsAnError) {
  UcxTransportOptions Opts;
  Opts.Transports = "no-such-transport";
  auto T = createUcxTransport(Opts);
  // UCX may accept an unknown name and then find no usable transport.
  if (T) {
    auto P = (*T)->listen("127.0.0.1", 0);
    EXPECT_FALSE(!!P);
    if (!P)
      consumeError(P.takeError());
  } else {
    std::string Msg = llvm::toString(T.takeError());
    EXPECT_NE(Msg.find("transports 'no-such-transport'"), std::string::npos)
        << Msg;
  }
}

INSTANTIATE_TEST_SUITE_P(Tls, UcxTransportTest, ::testing::Values(Shm, Tcp),
                         [](const auto &I) { return I.param.Name; });

//===----------------------------------------------------------------------===//
// Large frames (rendezvous) in one process
//===----------------------------------------------------------------------===//

// Shared memory as tc-bench uses it: posix only, connected by worker
// address (client-server connections need tcp in UCX_TLS, and then UCX
// keeps shared memory out of every endpoint with peer error handling).
const Tls ShmByAddress{"shm_address", "posix,self", nullptr};

class UcxLargeFrameTest : public UcxTransportTest {
protected:
  void SetUp() override {
    UcxTransportTest::SetUp();
    if (!byAddress()) {
      auto P = B->T->listen("127.0.0.1", 0);
      ASSERT_TRUE(!!P) << llvm::toString(P.takeError());
      Port = *P;
    }
    AC = connectToB(*A);
    // B knows an address peer from its first frame; A sends with B's token
    // from the welcome on.
    ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
      if (A->T->stats().TokenFrames == 0) {
        A->send(AC, "probe", "");
        ++Probes;
      }
      return A->T->stats().TokenFrames > 0 && B->E.Frames.size() == Probes &&
             A->Results.size() == Probes;
    }));
    ASSERT_EQ(B->E.Accepts.size(), 1u);
    BC = B->E.Accepts[0];
  }
  bool byAddress() const {
    return !llvm::StringRef(GetParam().Transports).contains("tcp");
  }
  /// Connects \p From to B (its listener, or its worker address).
  ConnId connectToB(Side &From) {
    auto Connect = [&]() -> llvm::Expected<ConnId> {
      if (!byAddress())
        return From.T->connect("127.0.0.1", Port);
      llvm::Expected<std::string> Addr = B->T->address();
      if (!Addr)
        return Addr.takeError();
      return From.T->connectAddress(*Addr);
    };
    llvm::Expected<ConnId> C = Connect();
    EXPECT_TRUE(!!C) << llvm::toString(C.takeError());
    return C ? *C : 0;
  }
  /// A sends \p N frames of \p Body; B takes the first rendezvous
  /// requests and starts receiving, while A, which does not progress, has
  /// not sent their data yet.
  bool startReceiving(const std::string &Body, unsigned N) {
    for (unsigned I = 0; I < N; ++I)
      A->send(AC, "big", Body);
    return pump({B.get()}, [&] {
      return B->T->stats().RecvBuffersAllocated > 0;
    }, 10000);
  }
  uint16_t Port = 0;
  size_t Probes = 0;
};

TEST_P(UcxLargeFrameTest, ManyInFlightArriveInOrderIntoReusedBuffers) {
  // Sent without progress: UCX holds several rendezvous of the connection
  // at once, small frames queue behind them, and the receiver has several
  // receives in flight.
  std::vector<std::string> Bodies;
  for (unsigned I = 0; I < 96; ++I)
    Bodies.push_back(pattern(I % 8 == 7   ? (1 << 20) + I
                             : I % 3 == 2 ? 100 + I
                             : I % 3 == 1 ? 16384
                                          : 65536 + 8 * I,
                             I));
  for (unsigned I = 0; I < Bodies.size(); ++I)
    A->send(AC, "f" + std::to_string(I), Bodies[I]);
  EXPECT_EQ(A->Results.size(), Probes) << "completed inside send()";
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
    return B->E.Frames.size() == Probes + Bodies.size() &&
           A->Results.size() == Probes + Bodies.size();
  }, 20000));
  for (unsigned I = 0; I < Bodies.size(); ++I) {
    const auto &F = B->E.Frames[Probes + I];
    ASSERT_EQ(F.Header, "f" + std::to_string(I));
    EXPECT_TRUE(F.Body == Bodies[I]) << "body " << I;
    EXPECT_EQ(F.Conn, BC);
  }
  for (const std::string &R : A->Results)
    EXPECT_EQ(R, "");
  TransportStats S = B->T->stats();
  EXPECT_EQ(S.RecvBuffersAllocated + S.RecvBuffersReused, B->E.Buffered);
  EXPECT_EQ(B->E.Misaligned, 0u);
  // Over shared memory every frame above 4 KiB goes by rendezvous (UCX's
  // threshold there is lower); over TCP at least the 1 MiB ones do.
  EXPECT_GE(B->E.Buffered, byAddress() ? 64u : 12u);
  // A receive buffer serves many frames: at most the few in flight at once
  // were ever allocated.
  EXPECT_LE(S.RecvBuffersAllocated, B->E.Buffered / 2);
  EXPECT_EQ(B->T->stats().DroppedFrames, 0u);
}

TEST_P(UcxLargeFrameTest, SharedBodiesAreKeptByReferenceUntilSent) {
  constexpr size_t Room = Transport::HeaderRoom;
  auto Owner = std::make_shared<std::string>(pattern(300000, 5));
  std::weak_ptr<std::string> Weak = Owner;
  auto Small = std::make_shared<std::string>(pattern(100, 6));
  const unsigned N = 24;
  std::vector<std::string> Headers;
  std::list<std::string> Bufs;
  size_t Done = 0;
  for (unsigned I = 0; I < N; ++I) {
    Headers.push_back("s" + std::to_string(I));
    std::string &Buf = Bufs.emplace_back(std::string(Room, '\0') + Headers[I]);
    auto &Body = I % 4 == 3 ? Small : Owner;
    A->T->sendShared(AC, llvm::StringRef(Buf.data() + Room, Headers[I].size()),
                     *Body, Body, [&](llvm::Error E) {
                       EXPECT_FALSE(E) << llvm::toString(std::move(E));
                       ++Done;
                     });
  }
  std::string Expect = *Owner;
  Owner.reset();
  // UCX has not sent them all yet: the transport holds the body, not a
  // copy of it.
  EXPECT_FALSE(Weak.expired());
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
    return B->E.Frames.size() == Probes + N && Done == N;
  }, 20000));
  for (unsigned I = 0; I < N; ++I) {
    const auto &F = B->E.Frames[Probes + I];
    ASSERT_EQ(F.Header, Headers[I]);
    EXPECT_TRUE(F.Body == (I % 4 == 3 ? *Small : Expect)) << "body " << I;
  }
  // Every reference went with its send.
  EXPECT_TRUE(Weak.expired());
  EXPECT_EQ(Small.use_count(), 1);
}

TEST_P(UcxLargeFrameTest, ASharedBodyIsReferencedOnlyWhileUcxKeepsItsSend) {
  // A frame UCX sends at once (copied into its FIFO or socket) only borrows
  // its body for the call: no reference is taken, none is left. One UCX
  // keeps (rendezvous) holds its owner until it is sent, so the caller may
  // drop the body at once.
  constexpr size_t Room = Transport::HeaderRoom;
  std::string Buf = std::string(Room, '\0') + "h";
  llvm::StringRef Header(Buf.data() + Room, 1);
  auto Small = std::make_shared<std::string>(pattern(4096, 3));
  size_t Done = 0;
  auto Count = [&](llvm::Error E) {
    EXPECT_FALSE(E) << llvm::toString(std::move(E));
    ++Done;
  };
  uint64_t Held = A->T->stats().SendsHeld;
  A->T->sendShared(AC, Header, *Small, Small, Count);
  EXPECT_EQ(A->T->stats().SendsHeld, Held) << "UCX kept a lone 4 KiB send";
  EXPECT_EQ(Small.use_count(), 1);

  auto Big = std::make_shared<std::string>(pattern(1 << 20, 4));
  std::weak_ptr<std::string> Weak = Big;
  std::string Expect = *Big;
  A->T->sendShared(AC, Header, *Big, Big, Count);
  EXPECT_EQ(A->T->stats().SendsHeld, Held + 1) << "UCX sent 1 MiB at once";
  Big.reset();
  EXPECT_FALSE(Weak.expired()) << "UCX holds the send: the transport must "
                                  "hold its body";
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
    return B->E.Frames.size() == Probes + 2 && Done == 2;
  }, 20000));
  EXPECT_TRUE(B->E.Frames[Probes].Body == *Small);
  EXPECT_TRUE(B->E.Frames[Probes + 1].Body == Expect);
  EXPECT_TRUE(Weak.expired());
  EXPECT_EQ(Small.use_count(), 1);
}

TEST_P(UcxLargeFrameTest, DisconnectWhileLargeFramesAreBeingReceived) {
  const unsigned N = 32;
  auto Big = pattern(1 << 20, 8);
  ASSERT_TRUE(startReceiving(Big, N));
  size_t Delivered = B->E.Frames.size();
  B->T->disconnect(BC);
  // Every send completes once (either way); nothing more is delivered on
  // the closed connection, and no buffer UCX may still write into is freed
  // or reused under it (ASan).
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
    return A->Results.size() == Probes + N;
  }, 20000));
  EXPECT_EQ(B->E.Frames.size(), Delivered);
  // B serves on: a new connection gets large frames through.
  auto TC = ucx(GetParam());
  ASSERT_TRUE(TC);
  Side C(std::move(TC));
  ConnId CC = connectToB(C);
  ASSERT_NE(CC, 0u);
  size_t Before = B->E.Frames.size();
  C.send(CC, "after", Big);
  ASSERT_TRUE(pump({&C, B.get(), A.get()}, [&] {
    return B->E.Frames.size() == Before + 1 && C.Results.size() == 1;
  }, 20000));
  EXPECT_EQ(B->E.Frames.back().Header, "after");
  EXPECT_TRUE(B->E.Frames.back().Body == Big);
  EXPECT_EQ(C.Results[0], "");
}

TEST_P(UcxLargeFrameTest, DestroyedWhileLargeFramesAreBeingReceived) {
  const unsigned N = 8;
  ASSERT_TRUE(startReceiving(pattern(1 << 20, 9), N));
  // A does not progress, so the data never comes: B's destructor gives the
  // receives a bounded time, then discards their endpoint (UCX 1.13 would
  // abort destroying an endpoint with a receive in flight).
  B.reset();
  if (byAddress()) {
    // Over shared memory in one process nothing tells A that B is gone (the
    // process is alive); A's destructor calls nothing back: the sends UCX
    // still holds are dropped unrun (Transport.h), and it ends within its
    // bounded time although the peer never takes them.
    size_t Before = A->Results.size();
    auto T0 = std::chrono::steady_clock::now();
    A->T.reset();
    EXPECT_LT(std::chrono::steady_clock::now() - T0, std::chrono::seconds(5));
    EXPECT_EQ(A->Results.size(), Before);
  } else {
    // A sees the connection go, and its sends complete.
    ASSERT_TRUE(pump({A.get()}, [&] { return A->E.gone(AC); }, 30000));
    // Every send completed once, whatever became of it.
    EXPECT_EQ(A->Results.size(), Probes + N);
  }
}

INSTANTIATE_TEST_SUITE_P(Tls, UcxLargeFrameTest,
                         ::testing::Values(ShmByAddress, Tcp),
                         [](const auto &I) { return I.param.Name; });

//===----------------------------------------------------------------------===//
// UCX against another process
//===----------------------------------------------------------------------===//

/// tc-transport-peer, started and always reaped by PID.
class PeerProcess {
public:
  ~PeerProcess() { kill(); }

  /// Starts it and reads "listening on 127.0.0.1:PORT" within 10 s (with
  /// \p ByAddress, "address HEX" into Address, and returns 0).
  llvm::Expected<uint16_t> start(const Tls &P, bool ByAddress = false) {
    int Fds[2];
    if (pipe(Fds) != 0)
      return llvm::createStringError("pipe failed");
    posix_spawn_file_actions_t FA;
    posix_spawn_file_actions_init(&FA);
    posix_spawn_file_actions_adddup2(&FA, Fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&FA, Fds[0]);
    posix_spawn_file_actions_addclose(&FA, Fds[1]);
    std::vector<const char *> Argv = {TC_TRANSPORT_PEER_PATH, P.Transports};
    if (P.NetDevices)
      Argv.push_back(P.NetDevices);
    if (ByAddress)
      Argv.push_back("--address");
    Argv.push_back(nullptr);
    int RC = posix_spawn(&Pid, TC_TRANSPORT_PEER_PATH, &FA, nullptr,
                         const_cast<char **>(Argv.data()), environ);
    posix_spawn_file_actions_destroy(&FA);
    close(Fds[1]);
    Out = Fds[0];
    if (RC != 0) {
      Pid = -1;
      return llvm::createStringError("posix_spawn %s: %s",
                                     TC_TRANSPORT_PEER_PATH, strerror(RC));
    }
    std::string Line;
    auto Deadline = Clock::now() + std::chrono::seconds(10);
    while (Line.find('\n') == std::string::npos) {
      int Left = int(std::chrono::duration_cast<milliseconds>(Deadline -
                                                              Clock::now())
                         .count());
      pollfd PFd = {Out, POLLIN, 0};
      if (Left <= 0 || ::poll(&PFd, 1, Left) <= 0)
        return llvm::createStringError("no ready line from the peer in 10 s");
      char Buf[256];
      ssize_t N = read(Out, Buf, sizeof(Buf));
      if (N <= 0)
        return llvm::createStringError("peer exited before it was ready: '%s'",
                                       Line.c_str());
      Line.append(Buf, size_t(N));
    }
    if (ByAddress) {
      llvm::StringRef Hex = llvm::StringRef(Line).trim();
      if (!Hex.consume_front("address ") ||
          !llvm::tryGetFromHex(Hex, Address))
        return llvm::createStringError("bad ready line '%s'", Line.c_str());
      return 0;
    }
    unsigned Port;
    if (sscanf(Line.c_str(), "listening on 127.0.0.1:%u", &Port) != 1)
      return llvm::createStringError("bad ready line '%s'", Line.c_str());
    return uint16_t(Port);
  }
  std::string Address; ///< Its worker address, after start(P, true).

  /// The exit status once it has exited, or -1 if still running.
  int poll() {
    int Status;
    if (Pid > 0 && waitpid(Pid, &Status, WNOHANG) == Pid) {
      Pid = -1;
      Exit = Status;
    }
    return Pid > 0 ? -1 : Exit;
  }

  /// SIGKILL and reap.
  void kill() {
    if (Pid > 0) {
      ::kill(Pid, SIGKILL);
      waitpid(Pid, &Exit, 0);
      Pid = -1;
    }
    if (Out >= 0)
      close(Out);
    Out = -1;
  }

private:
  pid_t Pid = -1;
  int Out = -1;
  int Exit = 0;
};

class UcxPeerTest : public ::testing::TestWithParam<Tls> {
protected:
  void SetUp() override {
    auto T = ucx(GetParam());
    ASSERT_TRUE(T);
    Me = std::make_unique<Side>(std::move(T));
    auto P = Peer.start(GetParam());
    ASSERT_TRUE(!!P) << llvm::toString(P.takeError());
    Port = *P;
    auto C = Me->T->connect("127.0.0.1", Port);
    ASSERT_TRUE(!!C) << llvm::toString(C.takeError());
    Conn = *C;
  }
  PeerProcess Peer;
  uint16_t Port = 0;
  std::unique_ptr<Side> Me;
  ConnId Conn = 0;
};

TEST_P(UcxPeerTest, EchoesInOrderAndQuits) {
  std::vector<std::string> Bodies = {pattern(1, 1), pattern(1 << 20, 2),
                                     pattern(7, 3), pattern(3 << 19, 4),
                                     pattern(0, 5)};
  for (size_t I = 0; I < Bodies.size(); ++I)
    Me->send(Conn, "e" + std::to_string(I), Bodies[I]);
  ASSERT_TRUE(pump({Me.get()}, [&] {
    return Me->E.Frames.size() == Bodies.size();
  }, 10000));
  for (size_t I = 0; I < Bodies.size(); ++I) {
    EXPECT_EQ(Me->E.Frames[I].Conn, Conn);
    EXPECT_EQ(Me->E.Frames[I].Header, "e" + std::to_string(I));
    EXPECT_TRUE(Me->E.Frames[I].Body == Bodies[I]) << "body " << I;
  }
  Me->send(Conn, "quit", "");
  // Keep progressing: the peer's closing flush needs our side.
  int Exit = -1;
  ASSERT_TRUE(pump({Me.get()}, [&] { return (Exit = Peer.poll()) >= 0; },
                   10000));
  EXPECT_TRUE(WIFEXITED(Exit) && WEXITSTATUS(Exit) == 0) << Exit;
  ASSERT_TRUE(pump({Me.get()}, [&] { return Me->E.gone(Conn); }, 10000));
  EXPECT_TRUE(Me->E.closedByPeer(Conn)) << Me->E.why(Conn);
}

TEST_P(UcxPeerTest, KilledPeerIsReportedAsDisconnect) {
  Me->send(Conn, "hello", "there");
  ASSERT_TRUE(pump({Me.get()}, [&] { return !Me->E.Frames.empty(); }, 10000));
  Peer.kill();
  // Keep sending: whatever is in flight must fail, never hang or crash.
  auto Big = pattern(1 << 20, 7);
  for (int I = 0; I < 4; ++I)
    Me->send(Conn, "after", Big);
  ASSERT_TRUE(pump({Me.get()}, [&] { return Me->E.gone(Conn); }, 20000));
  // A killed peer said no goodbye: its connection is lost, not closed.
  EXPECT_TRUE(Me->E.lost(Conn)) << Me->E.why(Conn);
  ASSERT_TRUE(pump({Me.get()}, [&] { return Me->Results.size() == 5; }));
  EXPECT_EQ(Me->Results[0], "");
}

TEST_P(UcxPeerTest, CopiesOfLargeFramesAreBoundedBySendWaiting) {
  // We allow 2 MiB of copies and send 32 frames of 1 MiB without calling
  // progress(): 8 go to UCX, which cannot finish them before we progress,
  // and the third copy queued behind them makes send() wait for room. The
  // peer echoes every frame; echoes that arrive meanwhile are delivered by
  // our next progress() (Events checks: only from inside it), in order.
  Me = std::make_unique<Side>(ucx(GetParam(), true, 2 << 20));
  auto C = Me->T->connect("127.0.0.1", Port);
  ASSERT_TRUE(!!C) << llvm::toString(C.takeError());
  Me->send(*C, "warm", "");
  ASSERT_TRUE(pump({Me.get()}, [&] { return Me->E.Frames.size() == 1; },
                   10000));
  const unsigned N = 32;
  std::vector<std::string> Bodies;
  for (unsigned I = 0; I < N; ++I) {
    Bodies.push_back(pattern(1 << 20, I));
    Me->send(*C, std::to_string(I), Bodies[I]);
  }
  EXPECT_GE(Me->T->stats().SendWaits, 1u);
  ASSERT_TRUE(pump({Me.get()}, [&] {
    return Me->E.Frames.size() == N + 1 && Me->Results.size() == N + 1;
  }, 30000));
  for (unsigned I = 0; I < N; ++I) {
    EXPECT_EQ(Me->E.Frames[I + 1].Header, std::to_string(I));
    EXPECT_TRUE(Me->E.Frames[I + 1].Body == Bodies[I]) << "body " << I;
  }
  for (const std::string &R : Me->Results)
    EXPECT_EQ(R, "");
}

TEST_P(UcxPeerTest, SharedLargeFramesAheadOfTheWindowMakeSendWait) {
  // Shared bodies are no copies, but a sender more than MaxLargeWaiting
  // large frames ahead of the 8 in UCX progresses UCX inside send() (as a
  // UCX user keeping a window of sends does) instead of queueing ahead of
  // a pipeline only progress() moves. The peer progresses on its own.
  Me = std::make_unique<Side>(ucx(GetParam()));
  auto C = Me->T->connect("127.0.0.1", Port);
  ASSERT_TRUE(!!C) << llvm::toString(C.takeError());
  Me->send(*C, "warm", "");
  ASSERT_TRUE(pump({Me.get()}, [&] { return Me->E.Frames.size() == 1; },
                   10000));
  const unsigned N = 40;
  auto Body = std::make_shared<std::string>(pattern(256 << 10, 3));
  for (unsigned I = 0; I < N; ++I)
    Me->T->sendShared(*C, std::to_string(I), *Body, Body, nullptr);
  EXPECT_GE(Me->T->stats().SendWaits, 1u);
  ASSERT_TRUE(pump({Me.get()},
                   [&] { return Me->E.Frames.size() == N + 1; }, 30000));
  for (unsigned I = 0; I < N; ++I) {
    EXPECT_EQ(Me->E.Frames[I + 1].Header, std::to_string(I));
    EXPECT_TRUE(Me->E.Frames[I + 1].Body == *Body) << "body " << I;
  }
}

TEST_P(UcxPeerTest, PeerDeathWhileAFrameIsBeingReceivedIsADisconnect) {
  // The peer echoes a 1 MiB frame and dies: we take its rendezvous request
  // and start receiving, and the data never comes. Whether its request
  // reaches us before we learn of its death is up to the scheduler (on a
  // loaded 2-CPU machine about 1 attempt in 30 learns of the death first;
  // CI saw it once): that attempt must end in a disconnect too, and the
  // test tries again with a new peer, up to 5 times, until a receive was
  // under way when the peer died.
  auto Big = pattern(1 << 20, 3);
  auto Receives = [&] {
    TransportStats S = Me->T->stats();
    return S.RecvBuffersAllocated + S.RecvBuffersReused;
  };
  std::list<PeerProcess> Others;
  ConnId Dying = Conn;
  bool Started = false;
  for (int Attempt = 0; Attempt < 5 && !Started; ++Attempt) {
    if (Attempt) {
      auto Port = Others.emplace_back().start(GetParam());
      ASSERT_TRUE(!!Port) << llvm::toString(Port.takeError());
      auto NC = Me->T->connect("127.0.0.1", *Port);
      ASSERT_TRUE(!!NC) << llvm::toString(NC.takeError());
      Dying = *NC;
    }
    size_t Frames = Me->E.Frames.size(), Results = Me->Results.size();
    // First a round trip each way, so both endpoints are wired up and the
    // peer has our token.
    Me->send(Dying, "warm", Big);
    ASSERT_TRUE(pump({Me.get()},
                     [&] { return Me->E.Frames.size() == Frames + 1; },
                     20000));
    uint64_t Before = Receives();
    Me->send(Dying, "die", Big);
    ASSERT_TRUE(pump({Me.get()}, [&] { return Me->E.gone(Dying); }, 20000));
    Started = Receives() > Before;
    EXPECT_EQ(Me->E.Frames.size(), Frames + 1);
    ASSERT_TRUE(pump({Me.get()},
                     [&] { return Me->Results.size() == Results + 2; }));
  }
  EXPECT_TRUE(Started) << "the echo's receive never started in 5 attempts";
  Me->E.Frames.clear();
  // We serve on: a new peer echoes a large frame.
  PeerProcess Other;
  auto Port = Other.start(GetParam());
  ASSERT_TRUE(!!Port) << llvm::toString(Port.takeError());
  auto C = Me->T->connect("127.0.0.1", *Port);
  ASSERT_TRUE(!!C) << llvm::toString(C.takeError());
  Me->send(*C, "again", Big);
  ASSERT_TRUE(pump({Me.get()}, [&] { return Me->E.Frames.size() == 1; },
                   20000));
  EXPECT_EQ(Me->E.Frames[0].Header, "again");
  EXPECT_TRUE(Me->E.Frames[0].Body == Big);
}

INSTANTIATE_TEST_SUITE_P(Tls, UcxPeerTest, ::testing::Values(Shm, Tcp),
                         [](const auto &I) { return I.param.Name; });

//===----------------------------------------------------------------------===//
// Mailboxes (UcxTransport over shared memory, peers connected by address)
//===----------------------------------------------------------------------===//

// Shared memory only: endpoints get peer error handling on posix (see
// wantSharedMemoryErrorHandling), and UCX maps the peers' rings.
const Tls ShmOnly{"shm-only", "posix,self", nullptr};

/// Two transports of this process, A connected to B by address, with A
/// writing into the ring B offered once setUp() returns.
struct MailboxPair {
  std::unique_ptr<Side> A, B;
  ConnId C = 0;
  std::vector<std::string> Headers, Bodies;

  /// With \p AOpts and \p BOpts for A's and B's transports.
  void setUp(const UcxTransportOptions &AOpts = UcxTransportOptions(),
             const UcxTransportOptions &BOpts = UcxTransportOptions()) {
    A = std::make_unique<Side>(ucxWith(ShmOnly, AOpts));
    B = std::make_unique<Side>(ucxWith(ShmOnly, BOpts));
    ASSERT_TRUE(A->T && B->T);
    auto Addr = B->T->address();
    ASSERT_TRUE(!!Addr) << llvm::toString(Addr.takeError());
    auto Conn = A->T->connectAddress(*Addr);
    ASSERT_TRUE(!!Conn) << llvm::toString(Conn.takeError());
    C = *Conn;
    // The first frames go as AMs; B's welcome offers the ring, A accepts.
    ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
      send("probe", true);
      return A->T->stats().MailboxSent > 0;
    }));
  }
  /// Sends the next frame, with trySendNow() (the mailbox if it can) or
  /// send() (always an AM).
  void send(const std::string &Body, bool Now) {
    std::string H = "f" + std::to_string(Headers.size());
    if (!Now || !A->T->trySendNow(C, H, Body))
      A->send(C, H, Body);
    Headers.push_back(H);
    Bodies.push_back(Body);
  }
  /// Sends the next frame as the runtime's fast path does: written through
  /// A's lane while it is open and takes it, else as send() above.
  unsigned ByLane = 0, LaneClosed = 0;
  void sendByLane(const std::string &Body) {
    std::string H = "f" + std::to_string(Headers.size());
    std::shared_ptr<mailbox::Lane> L = A->T->lane(C);
    ASSERT_TRUE(L) << "A accepted B's ring, so it has a lane";
    bool Written = false;
    if (!L->isOpen()) {
      ++LaneClosed;
    } else {
      mailbox::Lane::Wrote W = L->write(H, Body);
      if (W == mailbox::Lane::Wrote::Doorbell)
        A->T->laneDoorbell(C);
      Written = W == mailbox::Lane::Wrote::Yes ||
                W == mailbox::Lane::Wrote::Doorbell;
    }
    ByLane += Written;
    if (!Written && !A->T->trySendNow(C, H, Body))
      A->send(C, H, Body);
    Headers.push_back(H);
    Bodies.push_back(Body);
  }
  /// A's lane reads \p Open; a frame sent as the runtime sends it is taken
  /// by the lane exactly when it is open, and arrives in order.
  void sendThroughLane(bool Open, const std::string &Body) {
    std::shared_ptr<mailbox::Lane> L = A->T->lane(C);
    ASSERT_TRUE(L);
    EXPECT_EQ(L->isOpen(), Open);
    unsigned Before = ByLane;
    sendByLane(Body);
    EXPECT_EQ(ByLane, Before + Open);
    expectAllInOrder();
  }
  /// Sends frames of \p Bytes until one finds B's ring full (and waits).
  void fillRing(size_t Bytes) {
    uint64_t Full0 = A->T->stats().MailboxNoCredit;
    for (int I = 0; I < 1000 && A->T->stats().MailboxNoCredit == Full0; ++I)
      send(pattern(Bytes, I), true);
    ASSERT_GT(A->T->stats().MailboxNoCredit, Full0)
        << "the ring never ran full";
  }
  /// Everything sent arrived at B, in order.
  void expectAllInOrder() {
    ASSERT_TRUE(pump({A.get(), B.get()},
                     [&] { return B->E.Frames.size() == Headers.size(); },
                     10000))
        << B->E.Frames.size() << " of " << Headers.size();
    for (size_t I = 0; I < Headers.size(); ++I) {
      ASSERT_EQ(B->E.Frames[I].Header, Headers[I]);
      ASSERT_TRUE(B->E.Frames[I].Body == Bodies[I]) << I;
      EXPECT_EQ(B->E.Frames[I].Conn, B->E.Frames[0].Conn);
    }
  }
};

TEST(UcxMailbox, FramesKeepTheirOrderAcrossMailboxAndActiveMessages) {
  // Frames through the lane (the runtime's fast path) or trySendNow() go
  // by mailbox, in one slot or a span of several, or (too big for a span)
  // in the ring's large-frame area; frames too big for the area, frames
  // sent with send() (a completion to report), and frames when the ring
  // has no credit go as AMs. B delivers all of them in the order A sent
  // them.
  MailboxPair P;
  P.setUp();
  std::mt19937 Rng(5);
  for (int Burst = 0; Burst < 60; ++Burst) {
    // Bursts without B's progress fill the 128-slot ring.
    for (int I = 0; I < 150; ++I) {
      switch (Rng() % 6) {
      case 0:
        P.sendByLane(pattern(Rng() % 40, I));
        break;
      case 1:
      case 2:
        P.send(pattern(Rng() % 40, I), true);
        break;
      case 3:
        P.send(pattern(Rng() % 40, I), false);
        break;
      case 4: { // A span of 2 to 64 slots, the area, or more than it takes.
        unsigned Kind = Rng() % 8;
        P.send(pattern(Kind < 4    ? 100 + Rng() % 500
                       : Kind == 4 ? 100 + Rng() % 8070
                       : Kind < 7  ? 8171 + Rng() % 50000
                                   : 65600,
                       I),
               true);
        break;
      }
      default:
        P.send(pattern(Rng() % 8 ? 9 : 70000, I), Rng() % 2); // Rendezvous.
      }
      if (I % 25 == 0)
        P.A->progress();
    }
    for (int K = 0; K < 5; ++K) {
      P.A->progress();
      P.B->progress();
    }
    // Now and then everything arrives: the frames waiting for credit are
    // written, and the lane opens again.
    if (Burst % 4 == 3)
      P.expectAllInOrder();
  }
  P.expectAllInOrder();
  TransportStats SA = P.A->T->stats(), SB = P.B->T->stats();
  EXPECT_GT(SA.MailboxSent, 100u);
  EXPECT_GT(SA.MailboxAreaFrames, 100u);
  EXPECT_GT(SA.MailboxNoCredit, 0u) << "the ring never ran full";
  // The lane wrote frames, and was closed while frames waited for credit
  // (had it stayed open, its frames would have overtaken them).
  EXPECT_GT(P.ByLane, 20u) << P.LaneClosed << " closed";
  EXPECT_GT(P.LaneClosed, 0u);
  EXPECT_EQ(SB.MailboxReceived, SA.MailboxSent);
  EXPECT_EQ(SB.DroppedFrames, 0u);
}

/// A mix of frames around the first one that needs the large-frame area
/// (sent with trySendNow(): a span, an area frame, an AM beside them, a
/// small one), \p N times; B progresses only now and then, so the area's
/// offer arrives while frames are on their way. Returns how many frames
/// were too big for a span.
unsigned mixAroundLargeFrames(MailboxPair &P, unsigned N, unsigned Seed) {
  std::mt19937 Rng(Seed);
  unsigned Large = 0;
  for (unsigned I = 0; I < N; ++I) {
    switch (Rng() % 5) {
    case 0:
      P.send(pattern(Rng() % 60, I), true); // One slot.
      break;
    case 1:
      P.send(pattern(200 + Rng() % 3000, I), true); // A span.
      break;
    case 2:
      P.send(pattern(Rng() % 60, I), false); // An AM.
      break;
    default:
      P.send(pattern(9000 + Rng() % 40000, I), true); // The area's.
      ++Large;
    }
    if (Rng() % 8 == 0)
      P.A->progress();
    if (Rng() % 16 == 0)
      P.B->progress();
  }
  return Large;
}

TEST(UcxMailbox, AConnectionWithoutLargeFramesRegistersNoArea) {
  // Slots, spans and AMs, none too big for a span: B registers its ring
  // and nothing more, A its flags; nobody asks for an area.
  MailboxPair P;
  P.setUp();
  for (unsigned I = 0; I < 400; ++I)
    P.send(pattern(I % 3 ? I % 100 : 8000, I), I % 5 != 0);
  P.expectAllInOrder();
  TransportStats SA = P.A->T->stats(), SB = P.B->T->stats();
  EXPECT_GT(SA.MailboxSent, 200u);
  EXPECT_EQ(SA.MailboxAreaRequests, 0u);
  EXPECT_EQ(SB.MailboxAreas, 0u);
  EXPECT_EQ(SA.MailboxAreas, 0u);
  mailbox::Geometry G;
  // UCX may round a registration up to its pages.
  EXPECT_GE(SB.MailboxRegisteredBytes, G.mappedBytes());
  EXPECT_LT(SB.MailboxRegisteredBytes, G.mappedBytes() + 8192)
      << "more than the ring";
  EXPECT_GE(SA.MailboxRegisteredBytes, mailbox::FlagsBytes);
  EXPECT_LE(SA.MailboxRegisteredBytes, 8192u) << "more than the flags";
}

TEST(UcxMailbox, TheFirstLargeFrameGetsAnAreaAndEveryFrameArrivesInOrder) {
  // The first frame too big for a span asks B for its area and goes as an
  // AM; the frames after it go as AMs until the area is mapped, then into
  // it, each in its place among the slots, spans and AMs around them.
  MailboxPair P;
  P.setUp();
  P.expectAllInOrder();
  uint64_t Before = P.B->T->stats().MailboxRegisteredBytes;
  EXPECT_EQ(P.B->T->stats().MailboxAreas, 0u);
  unsigned Large = mixAroundLargeFrames(P, 600, 11);
  P.expectAllInOrder();
  TransportStats SA = P.A->T->stats(), SB = P.B->T->stats();
  EXPECT_EQ(SA.MailboxAreaRequests, 1u) << "asked once";
  // The first went as an AM (and those sent before the area came).
  EXPECT_LT(SA.MailboxAreaFrames, Large);
  EXPECT_EQ(SB.MailboxAreas, 1u);
  EXPECT_GE(SB.MailboxRegisteredBytes, Before + (256 << 10));
  EXPECT_GT(SA.MailboxAreaFrames, 50u) << "the area was not used";
  EXPECT_EQ(SB.MailboxReceived, SA.MailboxSent);
  EXPECT_EQ(SB.DroppedFrames, 0u);
  EXPECT_EQ(SA.DroppedFrames, 0u);
}

TEST(UcxMailbox, AnAreaTheReceiverDeclinesLeavesLargeFramesToActiveMessages) {
  // B registers no area (its bound is 0 areas): it declines, and A's large
  // frames go as AMs, all of them arriving, in order.
  UcxTransportOptions NoAreas;
  NoAreas.MailboxMaxAreas = 0;
  MailboxPair P;
  P.setUp(UcxTransportOptions(), NoAreas);
  P.expectAllInOrder();
  mixAroundLargeFrames(P, 400, 12);
  P.expectAllInOrder();
  // Once declined, A's lane does not take such frames any more.
  EXPECT_FALSE(P.A->T->lane(P.C)->takes(20000));
  P.send(pattern(20000, 1), true);
  P.expectAllInOrder();
  TransportStats SA = P.A->T->stats(), SB = P.B->T->stats();
  EXPECT_EQ(SA.MailboxAreaRequests, 1u);
  EXPECT_EQ(SB.MailboxAreasDeclined, 1u);
  EXPECT_EQ(SB.MailboxAreas, 0u);
  EXPECT_EQ(SA.MailboxAreaFrames, 0u);
  EXPECT_GT(SA.MailboxSent, 100u) << "slots and spans still go by mailbox";
  EXPECT_EQ(SB.DroppedFrames, 0u);
}

TEST(UcxMailbox, AnAreaTheSenderCannotMapIsGivenBack) {
  // A cannot map the area B offers (fault injection): it tells B, which
  // unregisters it, and A's large frames go as AMs, all arriving in order.
  UcxTransportOptions Unmappable;
  Unmappable.TestUnmappableAreas = true;
  MailboxPair P;
  P.setUp(Unmappable, UcxTransportOptions());
  P.expectAllInOrder();
  uint64_t Ring = P.B->T->stats().MailboxRegisteredBytes;
  mixAroundLargeFrames(P, 400, 13);
  P.expectAllInOrder();
  ASSERT_TRUE(pump({P.A.get(), P.B.get()},
                   [&] { return P.B->T->stats().MailboxAreas == 0; }))
      << "B kept the area";
  TransportStats SA = P.A->T->stats(), SB = P.B->T->stats();
  EXPECT_EQ(SA.MailboxAreaRequests, 1u);
  EXPECT_EQ(SB.MailboxAreasDeclined, 0u) << "B offered it";
  EXPECT_EQ(SB.MailboxRegisteredBytes, Ring);
  EXPECT_EQ(SA.MailboxAreaFrames, 0u);
  EXPECT_FALSE(P.A->T->lane(P.C)->takes(20000));
  EXPECT_EQ(SB.DroppedFrames, 0u);
}

TEST(UcxMailbox, ConnectingToAPeerThatConnectedFirstGivesItsConnection) {
  // A connects to B by address and B hears from it first; then B connects
  // to A's address. UCX matches B's endpoint to the one it made for A and
  // hands that back: it is the connection B already has, not a second one
  // (on which B would wait for answers that arrive on the first: a PMIx
  // job's flushes hung so). Frames and answers go both ways on it, and
  // each side's close is the other's.
  auto A = std::make_unique<Side>(ucx(ShmOnly)),
       B = std::make_unique<Side>(ucx(ShmOnly));
  ASSERT_TRUE(A->T && B->T);
  auto AddrA = A->T->address(), AddrB = B->T->address();
  ASSERT_TRUE(AddrA && AddrB);
  auto CA = A->T->connectAddress(*AddrB);
  ASSERT_TRUE(!!CA) << llvm::toString(CA.takeError());
  A->send(*CA, "hello", "from A");
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] { return B->E.Frames.size() == 1; }));
  ASSERT_EQ(B->E.Accepts.size(), 1u);
  ConnId FromA = B->E.Frames[0].Conn;
  auto CB = B->T->connectAddress(*AddrA);
  ASSERT_TRUE(!!CB) << llvm::toString(CB.takeError());
  EXPECT_EQ(*CB, FromA) << "a second connection on the same endpoint";
  // Answers come back on the connection asked on, both ways.
  A->E.OnFrame = [&](ConnId C, llvm::StringRef H, llvm::StringRef) {
    if (H == "ask")
      A->T->send(C, "answer", "A", nullptr);
  };
  B->E.OnFrame = [&](ConnId C, llvm::StringRef H, llvm::StringRef) {
    if (H == "ask")
      B->T->send(C, "answer", "B", nullptr);
  };
  for (int I = 0; I < 20; ++I) {
    A->send(*CA, "ask", "");
    B->send(*CB, "ask", "");
  }
  auto Answers = [](Side &S, ConnId C) {
    unsigned N = 0;
    for (auto &F : S.E.Frames)
      N += F.Header == "answer" && F.Conn == C;
    return N;
  };
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
    return Answers(*A, *CA) == 20 && Answers(*B, *CB) == 20;
  })) << Answers(*A, *CA) << " " << Answers(*B, *CB);
  EXPECT_TRUE(A->E.Accepts.empty());
  EXPECT_EQ(B->E.Accepts.size(), 1u);
  // B closes it (its endpoint now): A is told.
  B->T->disconnect(*CB);
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] { return A->E.gone(*CA); }, 10000));
  EXPECT_TRUE(A->E.closedByPeer(*CA)) << A->E.why(*CA);
}

TEST(UcxMailbox, APeerThatClosesIsReportedAfterEveryFrameItSent) {
  // A (connected by address: B's side is UCX's reply endpoint, of which UCX
  // reports no close) sends rendezvous frames, frames into B's ring behind
  // them (they wait for their turn), and closes at once. Its goodbye, an
  // AM, reaches B while the rendezvous data is still coming: B delivers
  // every frame, in order, and only then reports the connection closed.
  MailboxPair P;
  P.setUp();
  P.expectAllInOrder();
  if (::testing::Test::HasFatalFailure())
    return;
  ConnId BC = P.B->E.Frames[0].Conn;
  uint64_t InRing = P.A->T->stats().MailboxSent;
  for (int Round = 0; Round < 4; ++Round) {
    P.send(pattern(1 << 20, Round), false); // Rendezvous.
    for (int I = 0; I < 8; ++I)
      P.send(pattern(5, Round), true); // The ring.
  }
  EXPECT_GT(P.A->T->stats().MailboxSent, InRing) << "frames in the ring";
  P.A->T->disconnect(P.C);
  ASSERT_TRUE(pump({P.A.get(), P.B.get()}, [&] { return P.B->E.gone(BC); },
                   10000));
  EXPECT_TRUE(P.B->E.closedByPeer(BC)) << P.B->E.why(BC);
  ASSERT_EQ(P.B->E.Frames.size(), P.Headers.size());
  for (size_t I = 0; I < P.Headers.size(); ++I) {
    EXPECT_EQ(P.B->E.Frames[I].Header, P.Headers[I]);
    EXPECT_TRUE(P.B->E.Frames[I].Body == P.Bodies[I]) << I;
  }
}

TEST(UcxMailbox, FramesQueuedBehindARendezvousComeAfterIt) {
  // A large eager frame (above Transport::LargeBody, under UCX's
  // rendezvous threshold) goes to UCX while a rendezvous frame before it is
  // still in flight, and reaches B while B still receives that one: it
  // waits in the connection's queue. On a connection with a ring, the
  // rendezvous frame's turn first drains the ring; the frames queued behind
  // it must still come after it.
  MailboxPair P;
  P.setUp();
  P.expectAllInOrder();
  for (int Round = 0; Round < 10; ++Round) {
    P.send(pattern(70000, Round), false); // Rendezvous.
    P.send(pattern(5000, Round), false);  // Eager, large.
    P.send(pattern(5, Round), true);      // The ring.
    P.send(pattern(6000, Round), false);
  }
  P.expectAllInOrder();
  EXPECT_EQ(P.B->T->stats().DroppedFrames, 0u);
}

TEST(UcxMailbox, NoRingOverTcp) {
  // UCX cannot map a peer's memory over TCP: the offer is declined (B then
  // unregisters the ring) and every frame goes as an AM.
  auto A = std::make_unique<Side>(ucx(Tcp)), B = std::make_unique<Side>(ucx(Tcp));
  ASSERT_TRUE(A->T && B->T);
  auto Addr = B->T->address();
  ASSERT_TRUE(!!Addr);
  auto C = A->T->connectAddress(*Addr);
  ASSERT_TRUE(!!C);
  unsigned Sent = 0;
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
    if (!A->T->trySendNow(*C, "x", "1"))
      A->send(*C, "x", "1");
    ++Sent;
    return A->T->stats().TokenFrames > 5;
  }));
  ASSERT_TRUE(pump({A.get(), B.get()},
                   [&] { return B->E.Frames.size() == Sent; }));
  EXPECT_EQ(A->T->stats().MailboxSent, 0u);
  EXPECT_EQ(B->T->stats().MailboxReceived, 0u);
  EXPECT_FALSE(A->T->lane(*C)) << "a lane without a ring";
  EXPECT_EQ(A->T->stats().MailboxRingsDeclined, 1u);
  ASSERT_TRUE(pump({A.get(), B.get()}, [&] {
    return B->T->stats().MailboxRegisteredBytes == 0;
  })) << "B kept the ring it offered";
  EXPECT_EQ(B->T->stats().DroppedFrames, 0u);
}

TEST(UcxMailbox, ALaneStaysClosedWhileFramesWaitForCredit) {
  // A fills B's ring; the frame after waits in A for credit. B then takes
  // every frame (credit is back) before A progresses: a frame through the
  // lane now would overtake the waiting one, so the lane must be closed
  // until A has written it.
  MailboxPair P;
  P.setUp();
  P.expectAllInOrder();
  ASSERT_NO_FATAL_FAILURE(P.fillRing(8));
  for (int K = 0; K < 20; ++K)
    P.B->progress();
  P.sendThroughLane(/*Open=*/false, "after");
  // Once the waiting frames are written, the lane opens again.
  P.sendThroughLane(/*Open=*/true, "later");
}

/// An echo peer process over shared memory, connected by address, which
/// echoes through our mailbox ring: we allow \p MyBound bytes of copies
/// (the peer 64 KiB with \p PeerBound), and frames went by mailbox (both
/// ways with \p Both).
struct MailboxEchoPeer {
  PeerProcess Peer;
  std::unique_ptr<Side> Me;
  ConnId C = 0;

  void start(size_t MyBound, bool PeerBound, bool Both) {
    if (PeerBound)
      setenv("TC_TRANSPORT_PEER_MAX_COPIED", "65536", 1);
    auto Port = Peer.start(ShmOnly, /*ByAddress=*/true);
    unsetenv("TC_TRANSPORT_PEER_MAX_COPIED");
    ASSERT_TRUE(!!Port) << llvm::toString(Port.takeError());
    Me = std::make_unique<Side>(ucx(ShmOnly, true, MyBound));
    ASSERT_TRUE(Me->T);
    auto Conn = Me->T->connectAddress(Peer.Address);
    ASSERT_TRUE(!!Conn) << llvm::toString(Conn.takeError());
    C = *Conn;
    size_t Warm = 0; // One at a time, until frames go by mailbox.
    auto Ready = [&] {
      return Me->T->stats().MailboxSent &&
             (!Both || Me->T->stats().MailboxReceived);
    };
    ASSERT_TRUE(pump({Me.get()}, [&] {
      if (Me->E.Frames.size() == Warm && !Ready()) {
        Me->sendNow(C, "warm", "");
        ++Warm;
      }
      return Ready() && Me->E.Frames.size() == Warm;
    }, 10000));
  }
  /// Sends \p N frames of 2,000 bytes (spans of 16 slots of the peer's
  /// ring) without progress(), with \p Nap the first while the peer naps;
  /// \p AfterSends gets our stats right after. Then every echo arrives, in
  /// order.
  void flood(unsigned N, bool Nap, TransportStats &AfterSends) {
    size_t Before = Me->E.Frames.size();
    std::vector<std::string> Bodies, Headers;
    for (unsigned I = 0; I < N; ++I) {
      Bodies.push_back(pattern(2000, I));
      Headers.push_back(I || !Nap ? std::to_string(I) : "nap");
      Me->sendNow(C, Headers[I], Bodies[I]);
    }
    AfterSends = Me->T->stats();
    ASSERT_TRUE(pump({Me.get()},
                     [&] { return Me->E.Frames.size() == Before + N; }, 30000))
        << Me->E.Frames.size() - Before << " of " << N << " echoes";
    for (unsigned I = 0; I < N; ++I) {
      ASSERT_EQ(Me->E.Frames[Before + I].Header, Headers[I]);
      ASSERT_TRUE(Me->E.Frames[Before + I].Body == Bodies[I]) << "body " << I;
    }
    for (const std::string &R : Me->Results)
      EXPECT_EQ(R, "");
  }
};

TEST(UcxMailbox, FramesWaitingForCreditAreBoundedBySendWaiting) {
  // We allow 64 KiB of copies and send 1,000 frames of 2,000 bytes without
  // calling progress(), the first while the peer naps: its ring fills, the
  // frames after wait in Pending, and once those are over the bound,
  // sending waits until the peer has taken half of them. Every echo
  // arrives, in order.
  MailboxEchoPeer P;
  ASSERT_NO_FATAL_FAILURE(
      P.start(64 << 10, /*PeerBound=*/false, /*Both=*/false));
  TransportStats S0 = P.Me->T->stats(), S1;
  const unsigned N = 1000;
  ASSERT_NO_FATAL_FAILURE(P.flood(N, /*Nap=*/true, S1));
  EXPECT_GT(S1.MailboxNoCredit, S0.MailboxNoCredit) << "the ring never ran full";
  EXPECT_GE(S1.SendWaits, S0.SendWaits + 1) << "Pending grew without bound";
  EXPECT_GT(P.Me->T->stats().MailboxSent - S0.MailboxSent, N / 2);
}

TEST(UcxMailbox, PeersWaitingForRoomInEachOthersRingsBothGoOn) {
  // The peer allows 64 KiB of copies, we 1 MiB. We send 1,000 frames of
  // 2,000 bytes without progress(); the peer echoes each one from inside
  // its drain of our frames. Outside waits we take none of its echoes: they
  // fill our ring and then its pending queue, and it waits for room in our
  // ring, taking no more of ours; our frames then queue past 1 MiB and we
  // wait for room in its ring (or we wait first, when the peer is the
  // slower one, and it fills our ring meanwhile). Each side takes the
  // frames of its own rings while it waits, so neither waits for the other
  // until it gives up (5 s without progress; without that, one of them
  // does). Every echo arrives, in order.
  MailboxEchoPeer P;
  ASSERT_NO_FATAL_FAILURE(P.start(1 << 20, /*PeerBound=*/true, /*Both=*/true));
  TransportStats S1;
  const unsigned N = 1000;
  ASSERT_NO_FATAL_FAILURE(P.flood(N, /*Nap=*/false, S1));
  TransportStats S = P.Me->T->stats();
  EXPECT_GE(S.SendWaits, 1u);
  EXPECT_EQ(S.SendWaitsGivenUp, 0u) << "we waited for the peer until 5 s";
  EXPECT_GT(S.MailboxReceived, N / 2) << "the echoes did not use our ring";
  // The peer never gave up either.
  size_t Before = P.Me->E.Frames.size();
  P.Me->send(P.C, "stats", "");
  ASSERT_TRUE(pump({P.Me.get()},
                   [&] { return P.Me->E.Frames.size() == Before + 1; }));
  unsigned long Waits = 0, GivenUp = 0;
  ASSERT_EQ(sscanf(P.Me->E.Frames.back().Body.c_str(), "%lu %lu", &Waits,
                   &GivenUp),
            2)
      << P.Me->E.Frames.back().Body;
  EXPECT_EQ(GivenUp, 0u) << "the peer waited for us until 5 s (" << Waits
                          << " waits)";
}

TEST(UcxMailbox, FramesWaitingForCreditLeaveWithTheNextSend) {
  // A fills B's ring; the frames after wait in A for credit. B takes
  // everything in the ring (credit is back). A's next send writes the
  // waiting frames, then itself, without A's progress(): B gets them all,
  // in order, progressing alone.
  MailboxPair P;
  P.setUp();
  P.expectAllInOrder();
  ASSERT_NO_FATAL_FAILURE(P.fillRing(300));
  for (int I = 0; I < 20; ++I) // Behind those, in Pending.
    P.send(pattern(300, 100 + I), true);
  ASSERT_TRUE(pump({P.B.get()}, [&] {
    return P.B->T->stats().MailboxReceived == P.A->T->stats().MailboxSent;
  }));
  size_t Waiting = P.Headers.size() - P.B->E.Frames.size();
  ASSERT_GT(Waiting, 20u);
  P.send("after", true);
  EXPECT_TRUE(P.A->T->lane(P.C)->isOpen()) << "frames still wait";
  ASSERT_TRUE(pump({P.B.get()},
                   [&] { return P.B->E.Frames.size() == P.Headers.size(); }))
      << P.B->E.Frames.size() << " of " << P.Headers.size();
  P.expectAllInOrder();
}

TEST(UcxMailbox, ALaneClosesForGoodWithItsConnection) {
  // The runtime keeps its lane past the connection: once A closes it, the
  // lane reads closed, and nothing can be written into the gone ring.
  MailboxPair P;
  P.setUp();
  std::shared_ptr<mailbox::Lane> L = P.A->T->lane(P.C);
  P.sendThroughLane(/*Open=*/true, "x");
  P.A->T->disconnect(P.C);
  EXPECT_FALSE(L->isOpen());
  EXPECT_FALSE(P.A->T->lane(P.C));
}

TEST(UcxMailbox, ASleepingReceiverIsWokenByADoorbell) {
  // B sleeps in wait() on a thread of its own (after its spin); a frame A
  // writes into B's ring then comes with a doorbell, which wakes it long
  // before its 20 s timeout. A cycle in which B's spin saw the frame first
  // has no doorbell; cycles repeat until one had one.
  MailboxPair P;
  P.setUp();
  P.expectAllInOrder();
  bool Rang = false;
  for (int Cycle = 0; Cycle < 50 && !Rang; ++Cycle) {
    std::mutex M;
    std::condition_variable CV;
    bool Woke = false;
    std::chrono::steady_clock::duration Slept{};
    std::thread Sleeper([&] {
      auto T0 = Clock::now();
      llvm::Error E = P.B->T->wait(20000);
      EXPECT_FALSE(!!E);
      llvm::consumeError(std::move(E));
      std::lock_guard<std::mutex> G(M);
      Slept = Clock::now() - T0;
      Woke = true;
      CV.notify_all();
    });
    uint64_t Rings0 = P.A->T->stats().Doorbells;
    {
      // Let the sleeper get past its spin, then write one frame.
      std::unique_lock<std::mutex> L(M);
      CV.wait_for(L, milliseconds(5), [&] { return Woke; });
    }
    // Through the lane: the writer rings the doorbell (laneDoorbell()).
    P.sendByLane(pattern(3, Cycle));
    {
      std::unique_lock<std::mutex> L(M);
      ASSERT_TRUE(CV.wait_for(L, std::chrono::seconds(10), [&] { return Woke; }))
          << "the receiver slept through a frame";
    }
    Sleeper.join();
    EXPECT_LT(Slept, std::chrono::seconds(10));
    Rang = P.A->T->stats().Doorbells > Rings0;
    P.expectAllInOrder();
  }
  EXPECT_TRUE(Rang) << "no cycle found the receiver asleep";
}

TEST(UcxMailbox, KilledPeerIsReportedDuringMailboxTraffic) {
  // A peer process echoing through its mailbox into ours is killed in the
  // middle of the traffic: the connection is reported lost, no send hangs,
  // and this process goes on. Over shared memory UCX notices a dead peer by
  // its keepalive (every 20 s by default, as on the AM path): 1 s here, for
  // both processes.
  setenv("UCX_KEEPALIVE_INTERVAL", "1s", 1);
  struct Unset {
    ~Unset() { unsetenv("UCX_KEEPALIVE_INTERVAL"); }
  } Restore;
  PeerProcess Peer;
  auto Port = Peer.start(ShmOnly, /*ByAddress=*/true);
  ASSERT_TRUE(!!Port) << llvm::toString(Port.takeError());
  auto Me = std::make_unique<Side>(ucx(ShmOnly));
  ASSERT_TRUE(Me->T);
  auto C = Me->T->connectAddress(Peer.Address);
  ASSERT_TRUE(!!C) << llvm::toString(C.takeError());
  unsigned Sent = 0;
  auto Send = [&] { Me->sendNow(*C, "m" + std::to_string(Sent++), "x"); };
  // Until frames flow through the mailboxes both ways. At most 16 wait for
  // their echo: a sender that outran a peer short of CPU would keep a
  // backlog of active messages, which mailbox frames never overtake.
  ASSERT_TRUE(pump({Me.get()}, [&] {
    if (Sent < Me->E.Frames.size() + 16)
      Send();
    return Me->T->stats().MailboxSent > 10 &&
           Me->T->stats().MailboxReceived > 10;
  }, 10000));
  Peer.kill();
  // Keep writing: the ring of a dead process takes puts for a while; the
  // loss is noticed by UCX's keepalive, never by a hang.
  ASSERT_TRUE(pump({Me.get()}, [&] {
    if (!Me->E.gone(*C))
      Send();
    return Me->E.gone(*C);
  }, 20000));
  EXPECT_TRUE(Me->E.lost(*C)) << Me->E.why(*C);
  // Sends after the loss fail at once.
  Me->send(*C, "after", "x");
  size_t Before = Me->Results.size();
  ASSERT_TRUE(pump({Me.get()}, [&] { return Me->Results.size() > Before; }));
  EXPECT_NE(Me->Results.back(), "");
  EXPECT_FALSE(Me->T->trySendNow(*C, "after", "x"));
}

} // namespace

