//===- Runtime.cpp - tc's protocol engine ---------------------------------===//
//
// The state machine of docs/wire-format.md. Sender side: code ids per
// connection, CodeRequest answers, fences. Target side: a per-connection
// FIFO that holds frames whose code is not here yet, so order is kept and
// nothing runs on code it does not have.
//
//===----------------------------------------------------------------------===//

#include "protocol/Runtime.h"
#include "jit/Guard.h"
#include "transport/Bytes.h"

#include "tc/Version.h"

#include "llvm/Support/Endian.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <future>
#include <thread>

#include <cerrno>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

using namespace llvm;

namespace tc {

SourceCode::~SourceCode() {
  if (std::shared_ptr<JitEngine> J = Jit.lock())
    consumeError(J->unload(Hash, Role::Source));
}

Runtime::Runtime(std::unique_ptr<Transport> T, RuntimeOptions Opts,
                 std::shared_ptr<JitEngine> Jit)
    : T(std::move(T)), Opts(std::move(Opts)), Jit(std::move(Jit)) {
  this->T->setHandler(this);
  Self.TcVersion = TC_VERSION_STRING;
  Self.LlvmVersion = LLVM_VERSION_STRING;
  Self.Triple = this->Jit->triple();
  Self.CPU = this->Jit->cpu();
  Self.Features = this->Jit->features();
  Self.RunsBitcode = this->Opts.Mode != LoadMode::Object;
  Self.RunsObjects = this->Opts.Mode != LoadMode::Bitcode &&
                     this->Opts.Mode != LoadMode::Sandbox;
  Self.Dictionaries = this->Opts.Dictionaries ? *this->Opts.Dictionaries
                                              : dictionaryIds();
}

Expected<std::unique_ptr<Runtime>> Runtime::create(std::unique_ptr<Transport> T,
                                                   RuntimeOptions Opts) {
  // Compiles run on the helper thread: prewarm there, so that its stack
  // and malloc arena are in place too (JitEngine::prewarm).
  std::optional<LoadMode> OnHelper;
  JitOptions JO = Opts.Jit;
  if (JO.Prewarm && !Opts.CompileOnProgressThread && !Opts.CompileExecutor)
    std::swap(OnHelper, JO.Prewarm);
  Expected<std::unique_ptr<JitEngine>> J = JitEngine::create(JO);
  if (!J)
    return J.takeError();
  auto R = std::make_unique<Runtime>(std::move(T), std::move(Opts),
                                     std::move(*J));
  if (OnHelper)
    if (Error E = R->prewarmOnCompiler(*OnHelper))
      return std::move(E);
  return std::move(R);
}

/// Makes the calling thread (the compile helper) the one that gives way:
/// Linux's SCHED_IDLE policy (a thread's own), nice 19 where that fails.
/// A task that wakes preempts a running SCHED_IDLE task at once, whatever
/// its slice (kernel/sched/fair.c, check_preempt_wakeup_fair), so a
/// progress thread woken by a message takes the CPU back from the compile.
/// Nice 19 alone did not: EEVDF's RUN_TO_PARITY lets the running task
/// finish its slice (0.75-3 ms, whatever its weight) before a wakeup may
/// preempt it, and a compile is shorter than that, so each message that
/// came during one waited for its end (tc-bench tsi --modes stall: the
/// stream's p99 was one compile; docs/runtime.md). Only where the two share
/// one CPU: the compile then gets it whenever the progress thread is idle,
/// since that sleeps (finishCompiles). Elsewhere such a compile would
/// starve behind threads that spin on every other CPU (tc-bench --no-pin:
/// a nice-19 first contact took 98 ms). Where both calls fail, nothing
/// changes.
static void giveWayToProgress() {
#if defined(__linux__) && defined(SCHED_IDLE)
  sched_param P{};
  if (sched_setscheduler(0, SCHED_IDLE, &P) == 0) // 0: the calling thread.
    return;
#endif
#if defined(__linux__) && defined(SYS_gettid)
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
#endif
}

/// The default executor of off-thread compiles: one thread, started at the
/// first job, running jobs in order. One is enough: the codegen step of
/// compiles on one JitEngine runs one at a time anyway.
class Runtime::CompileThread {
public:
  /// \p GiveWay: the helper shares its one CPU with the progress thread,
  /// which sleeps whenever it is idle during a compile (finishCompiles):
  /// the helper runs under SCHED_IDLE there (giveWayToProgress).
  explicit CompileThread(bool GiveWay) : GiveWay(GiveWay) {}
  ~CompileThread() {
    {
      std::lock_guard<std::mutex> L(Mutex);
      Stop = true;
      Jobs.clear(); // Not started: their results would go unused.
    }
    Wake.notify_one();
    if (Thread.joinable())
      Thread.join(); // A compile under way finishes first (ORC cannot stop).
  }
  void post(std::function<void()> Job) {
    {
      std::lock_guard<std::mutex> L(Mutex);
      Jobs.push_back(std::move(Job));
      if (!Thread.joinable())
        Thread = std::thread([this] { run(); });
    }
    Wake.notify_one();
  }

private:
  void run() {
    if (GiveWay)
      giveWayToProgress();
    std::unique_lock<std::mutex> L(Mutex);
    for (;;) {
      Wake.wait(L, [&] { return Stop || !Jobs.empty(); });
      if (Stop)
        return;
      std::function<void()> Job = std::move(Jobs.front());
      Jobs.pop_front();
      L.unlock();
      Job();
      L.lock();
    }
  }

  std::mutex Mutex;
  std::condition_variable Wake;
  std::deque<std::function<void()>> Jobs;
  bool Stop = false;
  const bool GiveWay;
  std::thread Thread;
};

Runtime::~Runtime() {
  // A compile under way finishes before its thread is joined; its result,
  // and every job not started, are dropped. The job signals the transport,
  // so the transport goes after it.
  Compiler.reset();
  // Tear the transport down first: its pending completions still refer to
  // buffers this object owns.
  T.reset();
}

void Runtime::event(const Twine &Msg) {
  if (EventCB)
    EventCB(Msg.str());
}

//===----------------------------------------------------------------------===//
// Connections and the Hello exchange
//===----------------------------------------------------------------------===//

Expected<ConnId> Runtime::connect(StringRef Host, uint16_t Port) {
  return started(T->connect(Host, Port), /*Hold=*/true);
}

Expected<ConnId> Runtime::connectAddress(StringRef Address) {
  // UCX matches the endpoints two workers create to each other's addresses
  // into one pair, so the peer's answer may arrive on a connection id other
  // than the one we asked on: do not wait for it here. Code shipped before
  // a Hello arrives on this connection carries every target member.
  return started(T->connectAddress(Address), /*Hold=*/false);
}

Expected<ConnId> Runtime::started(Expected<ConnId> C, bool Hold) {
  if (!C)
    return C.takeError();
  Conn &S = conn(*C);
  S.Blocked = S.AwaitingHello = Hold;
  sendHello(*C, S);
  return C;
}

const Capabilities *Runtime::peer(ConnId C) const {
  auto It = Conns.find(C);
  return It != Conns.end() && It->second.Peer ? &*It->second.Peer : nullptr;
}

void Runtime::sendHello(ConnId C, Conn &S) {
  S.HelloSent = true;
  std::string Body = encodeCapabilities(Self);
  Frame F;
  F.Type = FrameType::Hello;
  F.Data = Body;
  sendFrame(C, F, Body, nullptr);
}

template <typename DoneFn, typename ResendFn>
void Runtime::holdOrFail(Conn &S, DoneFn Done, ResendFn Resend) {
  auto Shared = std::make_shared<DoneFn>(std::move(Done));
  Held H{[Shared, Resend = std::move(Resend)]() mutable {
           Resend(std::move(*Shared));
         },
         [Shared](Error E) {
           if (*Shared)
             (*Shared)(std::move(E));
           else
             consumeError(std::move(E));
         }};
  if (S.AwaitingHello)
    S.Outbox.push_back(std::move(H));
  else
    H.Fail(createStringError(S.Failure));
}

void Runtime::releaseOutbox(ConnId C) {
  // Each held send runs as if it were made now: it takes its sequence
  // number and code id, and ships the member the peer runs.
  for (;;) {
    auto It = Conns.find(C);
    if (It == Conns.end() || It->second.Outbox.empty())
      return;
    Held Next = std::move(It->second.Outbox.front());
    It->second.Outbox.pop_front();
    if (It->second.Failure.empty())
      Next.Run();
    else
      Next.Fail(createStringError(It->second.Failure));
  }
}

void Runtime::onHello(ConnId C, const Frame &F) {
  Conn &S = conn(C);
  Expected<Capabilities> Caps = decodeCapabilities(F.Data);
  if (!Caps) {
    sendError(C, F, WireStatus::MalformedFrame, toString(Caps.takeError()));
    return;
  }
  bool Overlap = Caps->WireMin <= WireVersionMax &&
                 WireVersionMin <= Caps->WireMax;
  if (!Overlap) {
    std::string Msg =
        formatv("the peer speaks tc wire versions {0}-{1} (tc {2}), this "
                "process {3}-{4} (tc {5}): no version in common",
                unsigned(Caps->WireMin), unsigned(Caps->WireMax),
                Caps->TcVersion, unsigned(WireVersionMin),
                unsigned(WireVersionMax), TC_VERSION_STRING)
            .str();
    if (!S.HelloSent) // Tell the connecting side why nothing will run.
      sendError(C, F, WireStatus::UnsupportedVersion, Msg);
    else
      event(formatv("connection {0}: {1}", C, Msg));
    S.Failure = Msg;
    S.Blocked = true;
    S.AwaitingHello = false;
    releaseOutbox(C);
    return;
  }
  event(formatv("connection {0}: peer {1}", C, describeCapabilities(*Caps)));
  S.Compact = Caps->WireMax >= CompactWireVersion;
  S.Peer = std::move(*Caps);
  if (!S.HelloSent)
    sendHello(C, S);
  if (S.AwaitingHello) {
    S.Blocked = S.AwaitingHello = false;
    releaseOutbox(C);
  }
}

StringRef Runtime::shippedBytes(const Ifunc &F, const Conn &S) {
  if (!S.Peer || Opts.ShipAllMembers)
    return F.Bytes;
  std::optional<ImageKind> Kind;
  if (!S.Peer->RunsBitcode)
    Kind = ImageKind::Object;
  else if (!S.Peer->RunsObjects)
    Kind = ImageKind::Bitcode;
  Expected<const Member *> Pick = selectMember(
      F.Parsed, S.Peer->Triple, S.Peer->CPU, Role::Target, Kind);
  if (!Pick) {
    // Nothing for this peer: ship every target member, so the target
    // itself says what it lacks (Error NoMember) as it always has.
    consumeError(Pick.takeError());
    return F.Bytes;
  }
  // The newest archive format both read (a peer from before format 3 did
  // not say, and reads 2); with none in common it gets the file as it is
  // and says what it cannot read.
  unsigned Version = std::min<unsigned>(S.Peer->ArchiveMax, ArchiveVersion);
  if (Version < std::max<unsigned>(S.Peer->ArchiveMin, OldestArchiveVersion))
    return F.Bytes;
  auto [It, New] = ShippedFor.try_emplace(std::make_tuple(
      F.Hash, memberDigest(**Pick), S.Peer->Dictionaries, Version));
  if (New) {
    Archive Thin =
        thinArchive(F.Parsed, [&](const Member &M) { return &M == *Pick; });
    // A member compressed with a dictionary the peer lacks goes as plain
    // zstd: same hash, a few hundred bytes more.
    withoutDictionaries(Thin, S.Peer->Dictionaries, Compression::Zstd);
    Expected<SmallString<0>> Out = writeArchive(Thin, Version);
    if (!Out) { // Cannot happen: it was read from a valid archive.
      consumeError(Out.takeError());
      ShippedFor.erase(It);
      return F.Bytes;
    }
    It->second = Out->str().str();
  }
  return It->second;
}

//===----------------------------------------------------------------------===//
// Source side
//===----------------------------------------------------------------------===//

/// Targets get the archive without source members (listed by digest only,
/// so the hash, the code's identity on the wire, is the archive's own).
static Expected<std::string> shippedArchive(const Archive &A) {
  Archive Shipped = thinArchive(
      A, [](const Member &M) { return M.TheRole == Role::Target; });
  if (Shipped.Members.empty())
    return createStringError("ifunc '%s': archive has no target members",
                             A.Name.c_str());
  Expected<SmallString<0>> Out = writeArchive(Shipped);
  if (!Out)
    return Out.takeError();
  return Out->str().str();
}

Expected<std::shared_ptr<const Ifunc>>
Runtime::registerArchive(StringRef Bytes) {
  Expected<Archive> A = readArchive(MemoryBufferRef(Bytes, "archive"));
  if (!A)
    return A.takeError();
  auto F = std::make_shared<Ifunc>();
  F->Name = A->Name;
  Expected<const LoadedIfunc &> Src = Jit->load(*A, LoadMode::Auto,
                                                Role::Source);
  if (!Src)
    return createStringError("ifunc '%s': cannot load its source side: %s",
                             A->Name.c_str(),
                             toString(Src.takeError()).c_str());
  F->Source = &*Src;
  std::weak_ptr<SourceCode> &Slot = SourceCodes[A->Hash];
  F->SourceHold = Slot.lock();
  if (!F->SourceHold) {
    F->SourceHold = std::make_shared<SourceCode>();
    F->SourceHold->Jit = Jit;
    F->SourceHold->Hash = A->Hash;
    Slot = F->SourceHold;
  }

  Expected<std::string> Out = shippedArchive(*A);
  if (!Out)
    return Out.takeError();
  F->Bytes = std::move(*Out);
  F->Hash = A->Hash;
  F->Parsed = std::move(*A);
  Registered[F->Name] = F;
  event("registered " + F->Name + " " + toHex(F->Hash).substr(0, 16));
  return std::shared_ptr<const Ifunc>(F);
}

Expected<std::shared_ptr<const Ifunc>>
Runtime::registerByName(StringRef Name, StringRef SearchPath) {
  SmallVector<StringRef, 4> Dirs;
  SearchPath.split(Dirs, ':', -1, /*KeepEmpty=*/false);
  for (StringRef D : Dirs) {
    SmallString<256> P(D);
    sys::path::append(P, Name + ".tcfb");
    ErrorOr<std::unique_ptr<MemoryBuffer>> B = MemoryBuffer::getFile(P);
    if (!B)
      continue;
    Expected<std::shared_ptr<const Ifunc>> F =
        registerArchive((*B)->getBuffer());
    if (!F)
      return createStringError("'%s': %s", P.c_str(),
                               toString(F.takeError()).c_str());
    if ((*F)->Name != Name)
      return createStringError("'%s' holds ifunc '%s', not '%s'", P.c_str(),
                               (*F)->Name.c_str(), Name.str().c_str());
    return F;
  }
  return createStringError("no %s.tcfb in the ifunc search path '%s'",
                           Name.str().c_str(), SearchPath.str().c_str());
}

void Runtime::deregister(const std::shared_ptr<const Ifunc> &F) {
  auto It = Registered.find(F->Name);
  if (It != Registered.end() && It->second == F)
    Registered.erase(It);
}

std::shared_ptr<const Ifunc> Runtime::lookup(StringRef Name) const {
  auto It = Registered.find(Name.str());
  return It == Registered.end() ? nullptr : It->second;
}

Expected<Message> Runtime::createMessage(std::shared_ptr<const Ifunc> F,
                                         const void *SourceArgs,
                                         size_t SourceArgsSize) {
  void *Args = const_cast<void *>(SourceArgs);
  size_t Bound = callJitted(F->Source->Bound, Args, SourceArgsSize);
  Message M;
  M.Code = std::move(F);
  M.Payload = std::make_shared<std::string>(Bound, '\0');
  size_t Size = Bound;
  int RC = callJitted(M.Code->Source->Init, Args, SourceArgsSize,
                      M.Payload->data(), &Size);
  if (RC != 0)
    return createStringError("ifunc '%s': %s_payload_init returned %d",
                             M.Code->Name.c_str(), M.Code->Name.c_str(), RC);
  if (Size > Bound)
    return createStringError("ifunc '%s': %s_payload_init wrote %zu bytes, "
                             "more than the bound of %zu",
                             M.Code->Name.c_str(), M.Code->Name.c_str(), Size,
                             Bound);
  M.Payload->resize(Size);
  return std::move(M);
}

std::string &writableMessagePayload(Message &M) {
  if (M.Payload.use_count() > 1)
    M.Payload = std::make_shared<std::string>(*M.Payload);
  return *M.Payload;
}

void Runtime::sendFrame(ConnId C, const Frame &F, StringRef Body,
                        unique_function<void(Error)> &&Done) {
  // The transport copies what it must keep past send(): the header lives
  // on the stack, and the runtime allocates nothing per frame. The room in
  // front is the transport's (Transport::sendWithRoom).
  char Buf[Transport::HeaderRoom + FrameCodeHeaderSize];
  char *Header = Buf + Transport::HeaderRoom;
  size_t Size = encodeFrameHeader(F, Header);
  ++Counters.FramesSent;
  Counters.BytesSent += Size + Body.size();
  T->sendWithRoom(C, StringRef(Header, Size), Body, std::move(Done));
}

/// Writes the header of \p I (compact when the peer reads compact frames,
/// else the full 24 bytes) and returns its size.
static LLVM_ATTRIBUTE_ALWAYS_INLINE size_t encodeInvokeHeader(
    bool Compact, const SmallInvoke &I, size_t PayloadSize, char *Header) {
  static_assert(CompactHeaderMax <= FrameHeaderSize, "room for both");
  if (LLVM_LIKELY(Compact))
    return encodeCompactInvoke(I, PayloadSize, Header);
  encodeSmallInvoke(I, PayloadSize, Header);
  return FrameHeaderSize;
}

void Runtime::lookUpConn(ConnId C) {
  auto [It, New] = Conns.try_emplace(C);
  if (New)
    It->second.Lane = T->lane(C);
  LastConn = &It->second;
  LastConnId = C;
}

void Runtime::adoptLanes() {
  LaneGen = T->laneGeneration();
  for (auto &[C, S] : Conns)
    if (!S.Lane)
      S.Lane = T->lane(C);
}

bool Runtime::laneSend(ConnId C, Conn &S, const SmallInvoke &I,
                       StringRef Payload) {
  if (!S.Lane || !S.Compact || !S.Lane->isOpen())
    return false;
  size_t Size = compactInvokeSize(I, Payload.size());
  mailbox::Lane::Wrote W = S.Lane->write(Size, Payload, [&](char *Out) {
    return encodeCompactInvoke(I, Payload.size(), Out);
  });
  if (LLVM_UNLIKELY(W != mailbox::Lane::Wrote::Yes)) {
    if (W != mailbox::Lane::Wrote::Doorbell)
      return false; // Full, or not for this frame: the transport decides.
    T->laneDoorbell(C);
  }
  ++Counters.FramesSent;
  ++Counters.LaneFrames;
  Counters.BytesSent += Size + Payload.size();
  return true;
}

void Runtime::sendSmall(ConnId C, Conn &S, const SmallInvoke &I,
                        StringRef Payload,
                        unique_function<void(Error)> &&Done,
                        const std::shared_ptr<std::string> *Owner) {
  // Steady state over a mailbox: the frame is encoded straight into the
  // peer's ring, without a call into the transport.
  if (!Done && laneSend(C, S, I, Payload))
    return;
  sendByTransport(C, S, I, Payload, std::move(Done), Owner);
}

void Runtime::sendByTransport(ConnId C, Conn &S, const SmallInvoke &I,
                              StringRef Payload,
                              unique_function<void(Error)> &&Done,
                              const std::shared_ptr<std::string> *Owner) {
  // Steady state of the active-message path: no completion to keep and a
  // small payload, laid out once, as the transport sends it.
  if (!Done && Payload.size() <= FrameNowPayloadMax &&
      FrameHeaderSize + Payload.size() <= T->sendNowMax())
    return sendLaidOut(C, S, I, Payload);
  char Buf[Transport::HeaderRoom + FrameHeaderSize];
  char *Header = Buf + Transport::HeaderRoom;
  size_t Size = encodeInvokeHeader(S.Compact, I, Payload.size(), Header);
  ++Counters.FramesSent;
  Counters.BytesSent += Size + Payload.size();
  // Steady state: no completion to keep, and the transport sends at once.
  if (!Done && Size + Payload.size() <= T->sendNowMax() &&
      T->trySendNow(C, StringRef(Header, Size), Payload))
    return;
  if (Owner && Payload.size() > Transport::ShareMin)
    return T->sendShared(C, StringRef(Header, Size), Payload, *Owner,
                         std::move(Done));
  T->sendWithRoom(C, StringRef(Header, Size), Payload, std::move(Done));
}

void Runtime::sendLaidOut(ConnId C, Conn &S, const SmallInvoke &I,
                          StringRef Payload) {
  alignas(8) char Buf[Transport::FrameRoom + Transport::FrameNowMax];
  char *Frame = Buf + Transport::FrameRoom;
  size_t Size = encodeInvokeHeader(S.Compact, I, Payload.size(), Frame);
  copyBytes(Frame + Size, Payload.data(), Payload.size());
  ++Counters.FramesSent;
  Counters.BytesSent += Size + Payload.size();
  if (T->trySendFrameNow(C, Frame, Size, Size + Payload.size()))
    return;
  T->sendWithRoom(C, StringRef(Frame, Size),
                  StringRef(Frame + Size, Payload.size()),
                  unique_function<void(Error)>());
}

void Runtime::send(ConnId C, const Message &M) {
  Conn &S = conn(C);
  if (LLVM_LIKELY(!S.Blocked && S.LastSent == M.Code &&
                  !Opts.AlwaysShipCode))
    return sendSmall(
        C, S, SmallInvoke{FrameType::Invoke, S.NextSeq++, S.LastSentId},
        *M.Payload, unique_function<void(Error)>(), &M.Payload);
  send(C, M, unique_function<void(Error)>());
}

void Runtime::send(ConnId C, const Message &M,
                   unique_function<void(Error)> Done) {
  Conn &S = conn(C);
  if (LLVM_UNLIKELY(S.Blocked))
    return holdOrFail(S, std::move(Done),
                      [this, C, M](unique_function<void(Error)> D) {
                        send(C, M, std::move(D));
                      });
  // The code id of this identity here; the last ifunc sent is remembered,
  // so a run of one ifunc's messages skips the lookup.
  bool Sent = true;
  if (S.LastSent != M.Code) {
    auto [It, New] = S.SentCode.try_emplace(M.Code->Hash, S.NextCodeId);
    if (New) {
      Sent = false;
      S.ById[S.NextCodeId++] = M.Code;
    }
    S.LastSent = M.Code;
    S.LastSentId = It->second;
  }
  if (Sent && !Opts.AlwaysShipCode) {
    sendSmall(C, S, SmallInvoke{FrameType::Invoke, S.NextSeq++, S.LastSentId},
              *M.Payload, std::move(Done), &M.Payload);
    return;
  }
  Frame F;
  F.Type = FrameType::Invoke;
  F.Seq = S.NextSeq++;
  F.CodeId = S.LastSentId;
  F.Payload = *M.Payload;
  F.Flags = FrameHasCode;
  F.Hash = M.Code->Hash;
  F.Archive = shippedBytes(*M.Code, S);
  BodyBuf.assign(*M.Payload);
  BodyBuf += F.Archive;
  sendFrame(C, F, BodyBuf, std::move(Done));
}

/// Runs and forgets the waiter registered for \p Seq, if there is one.
/// Returns false (leaving \p Result untouched) when there is none.
template <typename Fn, typename Arg>
static bool finishWaiter(std::map<uint32_t, Fn> &Waiters, uint32_t Seq,
                         Arg &&Result) {
  auto It = Waiters.find(Seq);
  if (It == Waiters.end())
    return false;
  Fn Done = std::move(It->second);
  Waiters.erase(It);
  if (Done)
    Done(std::forward<Arg>(Result));
  return true;
}

void Runtime::fence(ConnId C, unique_function<void(Error)> Done) {
  Conn &S = conn(C);
  if (S.Blocked)
    return holdOrFail(S, std::move(Done),
                      [this, C](unique_function<void(Error)> D) {
                        fence(C, std::move(D));
                      });
  Frame F;
  F.Type = FrameType::Fence;
  F.Seq = S.NextSeq++;
  S.Fences[F.Seq] = std::move(Done);
  sendFrame(C, F, StringRef(), [this, C, Seq = F.Seq](Error E) {
    auto It = Conns.find(C);
    if (E && (It == Conns.end() ||
              !finishWaiter(It->second.Fences, Seq, std::move(E))))
      consumeError(std::move(E));
  });
}

void Runtime::readRegion(ConnId C, uint64_t Length,
                         unique_function<void(Expected<std::string>)> Done) {
  Conn &S = conn(C);
  if (S.Blocked)
    return holdOrFail(
        S, std::move(Done),
        [this, C, Length](unique_function<void(Expected<std::string>)> D) {
          readRegion(C, Length, std::move(D));
        });
  Frame F;
  F.Type = FrameType::RegionRead;
  F.Seq = S.NextSeq++;
  F.Length = Length;
  S.Reads[F.Seq] = std::move(Done);
  sendFrame(C, F, StringRef(), [this, C, Seq = F.Seq](Error E) {
    auto It = Conns.find(C);
    if (E && (It == Conns.end() ||
              !finishWaiter(It->second.Reads, Seq, std::move(E))))
      consumeError(std::move(E));
  });
}

//===----------------------------------------------------------------------===//
// Target side
//===----------------------------------------------------------------------===//

void Runtime::sendError(ConnId C, const Frame &About, WireStatus S,
                        StringRef Msg) {
  ++Counters.Errors[S];
  event(formatv("error seq={0} code={1}: {2}: {3}", About.Seq, About.CodeId,
                wireStatusName(S), Msg));
  Frame E;
  E.Type = FrameType::Error;
  E.Seq = About.Seq;
  E.CodeId = About.CodeId;
  E.Status = S;
  E.Message = Msg.take_front(4096);
  sendFrame(C, E, E.Message, nullptr);
}

static WireStatus statusOf(LoadFailure K) {
  switch (K) {
  case LoadFailure::NoMember:
    return WireStatus::NoMember;
  case LoadFailure::DepLoadFailed:
    return WireStatus::DepLoadFailed;
  case LoadFailure::MissingSymbol:
    return WireStatus::MissingSymbol;
  case LoadFailure::CompileFailed:
    return WireStatus::JitFailed;
  case LoadFailure::PolicyRefused:
    return WireStatus::PolicyRefused;
  }
  return WireStatus::JitFailed;
}

void Runtime::touch(const LoadedIfunc &L) {
  if (&L == LruFront) // A run of one identity's messages stops here.
    return;
  touch(L.Hash);
  LruFront = &L;
}

void Runtime::touch(const ArchiveHash &H) {
  LruFront = nullptr;
  if (!LRU.empty() && LRU.front() == H)
    return; // The common case: the same code again.
  auto It = std::find(LRU.begin(), LRU.end(), H);
  if (It != LRU.end())
    LRU.splice(LRU.begin(), LRU, It);
  else
    LRU.push_front(H);
}

Expected<const LoadedIfunc *> Runtime::admitCode(ConnId C, const Frame &F,
                                                 WireStatus &Why) {
  if (const LoadedIfunc *L = Jit->find(F.Hash)) {
    // Identity already loaded (from another connection, preloaded, or
    // resent): the hash names it, so the archive need not be parsed again.
    know(conn(C), F.CodeId, *L);
    touch(F.Hash);
    return L;
  }
  Expected<const LoadedIfunc *> L = loadArchive(F.Archive, &F.Hash, Why);
  if (!L)
    return L.takeError();
  know(conn(C), F.CodeId, **L);
  return L;
}

Runtime::KnownCode &Runtime::know(Conn &S, uint32_t Id, const LoadedIfunc &L) {
  S.LastKnown = nullptr; // Known may grow and move its entries.
  KnownCode &K = S.Known[Id];
  if (K.Code != &L)
    K = KnownCode{L.Hash, &L, ArgsSlot()};
  S.Requested.erase(Id);
  return K;
}

void *Runtime::lookUpTargetArgs(StringRef Name, ArgsSlot &Slot) {
  auto Named = NamedTargetArgs.find(Name);
  Slot.Args = Named != NamedTargetArgs.end() ? Named->second : Opts.TargetArgs;
  Slot.Generation = ArgsGeneration;
  return Slot.Args;
}

Expected<const LoadedIfunc *> Runtime::preload(StringRef Bytes) {
  // The archive's hash is the identity senders use, whichever of its
  // members they ship.
  WireStatus Why = WireStatus::BadArchive;
  Expected<const LoadedIfunc *> L = loadArchive(Bytes, nullptr, Why);
  if (!L)
    return createStringError(wireStatusName(Why) + ": " +
                             toString(L.takeError()));
  return L;
}

Expected<const LoadedIfunc *> Runtime::loadArchive(StringRef Bytes,
                                                   const ArchiveHash *Claimed,
                                                   WireStatus &Why) {
  LoadOutcome O = loadCode(Bytes, Claimed);
  return finishLoad(O, Bytes, Claimed != nullptr, Why);
}

Runtime::LoadOutcome Runtime::loadCode(StringRef Bytes,
                                       const ArchiveHash *Claimed) const {
  LoadOutcome O;
  auto Fail = [&](WireStatus Why, Error E) {
    O.Why = Why;
    O.Error = toString(std::move(E));
    return std::move(O);
  };
  Expected<Archive> A = readArchive(MemoryBufferRef(Bytes, "frame"));
  if (!A)
    return Fail(WireStatus::BadArchive, A.takeError());
  O.Parsed = true;
  O.Name = A->Name;
  O.Hash = A->Hash;
  O.Members = A->Members.size();
  O.Omitted = A->Omitted.size();
  if (Claimed && A->Hash != *Claimed)
    return Fail(WireStatus::HashMismatch,
                createStringError("archive hashes to %s, frame says %s",
                                  toHex(A->Hash).c_str(),
                                  toHex(*Claimed).c_str()));
  if ((O.Code = Jit->find(A->Hash)))
    return O;
  // The policy (fixed at construction: this may run on the helper thread).
  if (!Opts.AllowedHashes.empty() && !Opts.AllowedHashes.count(A->Hash))
    return Fail(WireStatus::PolicyRefused,
                createStringError("ifunc '%s' (%s) is not in the allowed list",
                                  A->Name.c_str(), toHex(A->Hash).c_str()));
  // Signed archives (tc-serve --trust): the message names why.
  if (!Opts.TrustedKeys.empty())
    if (Error E = checkSignatures(*A, Opts.TrustedKeys))
      return Fail(WireStatus::PolicyRefused,
                  createStringError("ifunc '%s' (%s): %s", A->Name.c_str(),
                                    toHex(A->Hash).c_str(),
                                    toString(std::move(E)).c_str()));
  Expected<const LoadedIfunc &> L = Jit->load(*A, Opts.Mode);
  if (!L) {
    WireStatus Why = WireStatus::JitFailed;
    std::string Msg;
    handleAllErrors(
        L.takeError(),
        [&](const LoadError &LE) {
          Why = statusOf(LE.kind());
          Msg = LE.message();
        },
        [&](const ErrorInfoBase &EI) { Msg = EI.message(); });
    O.Why = Why;
    O.Error = std::move(Msg);
    return O;
  }
  O.Code = &*L;
  O.Fresh = true;
  return O;
}

Expected<const LoadedIfunc *> Runtime::finishLoad(LoadOutcome &O,
                                                  StringRef Bytes,
                                                  bool Claimed,
                                                  WireStatus &Why) {
  if (Claimed && O.Parsed)
    event(formatv("code {0} {1}: {2} bytes, {3} member(s), {4} omitted",
                  O.Name, toHex(O.Hash).substr(0, 16), Bytes.size(), O.Members,
                  O.Omitted));
  if (!O.Code) {
    Why = O.Why;
    return createStringError(O.Error);
  }
  const LoadedIfunc &L = *O.Code;
  if (O.Fresh) {
    ++Counters.Compiles;
    Counters.CompileMillis += L.LoadMillis;
    Counters.DiskCacheHits += L.FromDiskCache;
    event(formatv("loaded {0} {1} ({2:f2} ms, {3}{4}), member {5} {6}",
                  L.Name, toHex(L.Hash).substr(0, 16), L.LoadMillis,
                  imageKindName(L.Kind),
                  L.FromDiskCache ? ", from the disk cache" : "",
                  L.MemberTriple,
                  L.MemberCPU.empty() ? "generic" : L.MemberCPU));
    TargetArchives[L.Hash] = Bytes.str();
  }
  touch(L.Hash);
  if (O.Fresh && Opts.MaxLoaded && LRU.size() > Opts.MaxLoaded)
    evict(LRU.back());
  return &L;
}

//===----------------------------------------------------------------------===//
// Compiles off the progress thread
//===----------------------------------------------------------------------===//

Error Runtime::wait(int TimeoutMs) {
  if (CompilesInFlight) {
    std::lock_guard<std::mutex> L(FinishedMutex);
    if (!Finished.empty())
      return Error::success(); // progress() has results to take.
  }
  // A compile that finishes from now on signals the transport.
  return T->wait(TimeoutMs);
}

void Runtime::compileFor(const ArchiveHash &Hash, CompileWaiter W) {
  auto [It, New] = Compiling.try_emplace(Hash);
  CompileJob &J = It->second;
  for (const CompileWaiter &X : J.Waiters)
    if (X.Conn == W.Conn && X.Type == W.Type && X.Seq == W.Seq)
      return; // Handled again (its queue drained): it waits already.
  if (!New) {
    J.Waiters.push_back(std::move(W));
    return;
  }
  J.Archive = W.Archive;
  J.Waiters.push_back(std::move(W));
  ++CompilesInFlight;
  // The job owns what it reads (the archive); the Runtime outlives it (the
  // destructor joins the helper thread).
  std::function<void()> Job = [this, Hash, Bytes = J.Archive] {
    LoadOutcome O = loadCode(*Bytes, &Hash);
    {
      std::lock_guard<std::mutex> L(FinishedMutex);
      Finished.emplace_back(Hash, std::move(O));
    }
    T->signal();
  };
  if (Opts.CompileExecutor)
    return Opts.CompileExecutor(std::move(Job));
  startCompiler();
  Compiler->post(std::move(Job));
}

void Runtime::startCompiler() {
  if (Compiler)
    return;
  // The helper inherits this thread's CPUs: with only one, they share it.
  cpu_set_t Cpus;
  NapWhileCompiling = sched_getaffinity(0, sizeof Cpus, &Cpus) == 0 &&
                      CPU_COUNT(&Cpus) == 1;
  Compiler = std::make_unique<CompileThread>(NapWhileCompiling);
}

Error Runtime::prewarmOnCompiler(LoadMode Mode) {
  startCompiler();
  std::promise<Error> Done;
  std::future<Error> Result = Done.get_future();
  Compiler->post([&] { Done.set_value(Jit->prewarm(Mode)); });
  return Result.get();
}

bool Runtime::finishCompiles(bool Busy) {
  std::vector<std::pair<ArchiveHash, LoadOutcome>> Batch;
  {
    std::lock_guard<std::mutex> L(FinishedMutex);
    Batch.swap(Finished);
  }
  // Nothing to do but wait for a compile that runs on this very CPU (the
  // process may use only one): sleep until a frame arrives, the compile
  // signals its end, or 1 ms, so that it has the CPU. A loop that spins on
  // progress would otherwise take half of it (and a yield would give it a
  // whole time slice, 1.4 ms, while messages wait); the helper runs under
  // SCHED_IDLE, so whatever wakes this thread takes the CPU back at once.
  if (Batch.empty() && !Busy && NapWhileCompiling) {
    if (Error E = T->wait(1))
      consumeError(std::move(E));
    std::lock_guard<std::mutex> L(FinishedMutex);
    Batch.swap(Finished);
  }
  for (auto &[Hash, O] : Batch) {
    --CompilesInFlight;
    compiled(Hash, O);
  }
  return Busy || !Batch.empty();
}

void Runtime::compiled(const ArchiveHash &Hash, LoadOutcome &O) {
  auto It = Compiling.find(Hash);
  if (It == Compiling.end())
    return; // Cannot happen: one result per job.
  CompileJob J = std::move(It->second);
  Compiling.erase(It);
  if (O.Code && Jit->find(Hash) != O.Code) {
    // Evicted (Runtime::evict) before this result was taken: the code is
    // gone, so its waiters start again.
    for (CompileWaiter &W : J.Waiters)
      if (Conns.count(W.Conn))
        compileFor(Hash, std::move(W));
    return;
  }
  WireStatus Why = WireStatus::JitFailed;
  Expected<const LoadedIfunc *> L =
      finishLoad(O, *J.Archive, /*Claimed=*/true, Why);
  if (!L) {
    std::string Msg = toString(L.takeError());
    for (CompileWaiter &W : J.Waiters) {
      auto C = Conns.find(W.Conn);
      if (C == Conns.end())
        continue; // Disconnected meanwhile.
      if (W.Archive != J.Archive) {
        // Another copy of the identity: it may be one that loads.
        compileFor(Hash, std::move(W));
        continue;
      }
      if (W.Type == FrameType::Code) {
        failCode(W.Conn, W.CodeId, Why, Msg);
      } else {
        // The Invoke at the front of its queue: drop it, with the reason.
        std::deque<Pending> &Q = C->second.Queue;
        if (!Q.empty()) {
          Expected<Frame> F = decodeFrame(Q.front().Bytes);
          if (!F) {
            consumeError(F.takeError());
          } else if (F->Type == FrameType::Invoke && F->Seq == W.Seq) {
            sendError(W.Conn, *F, Why, Msg);
            Q.pop_front();
          }
        }
      }
      drain(W.Conn);
    }
    return;
  }
  // Loaded: every waiter's code id names it; then their queues run. Drain
  // only after binding all: a message that runs may evict the code, and
  // eviction forgets the code ids it binds.
  for (const CompileWaiter &W : J.Waiters) {
    auto C = Conns.find(W.Conn);
    if (C != Conns.end())
      know(C->second, W.CodeId, **L);
  }
  for (const CompileWaiter &W : J.Waiters)
    drain(W.Conn);
}

void Runtime::failCode(ConnId C, uint32_t CodeId, WireStatus Why,
                       StringRef Msg) {
  auto S = Conns.find(C);
  if (S == Conns.end())
    return;
  // The queued invokes for this code id can never run: drop and report
  // each, so the sender hears about every message.
  auto &Q = S->second.Queue;
  for (auto It = Q.begin(); It != Q.end();) {
    Expected<Frame> QF = decodeFrame(It->Bytes);
    if (QF && QF->Type == FrameType::Invoke && QF->CodeId == CodeId) {
      sendError(C, *QF, Why, Msg);
      It = Q.erase(It);
    } else {
      if (!QF)
        consumeError(QF.takeError());
      ++It;
    }
  }
  S->second.Requested.erase(CodeId);
}

void Runtime::evictAll() {
  while (!LRU.empty())
    evict(LRU.back());
}

void Runtime::evict(const ArchiveHash &Which) {
  // A copy: callers may pass an element of LRU, which is removed below.
  const ArchiveHash H = Which;
  if (Error E = Jit->unload(H))
    event("unload failed: " + toString(std::move(E)));
  TargetArchives.erase(H);
  LRU.remove(H);
  LruFront = nullptr;
  for (auto &KV : Conns) {
    KV.second.LastKnown = nullptr;
    for (auto It = KV.second.Known.begin(); It != KV.second.Known.end();)
      if (It->second.Hash == H)
        KV.second.Known.erase(It++); // DenseMap: erase keeps others valid.
      else
        ++It;
  }
  ++Counters.Evictions;
  event("evicted " + toHex(H).substr(0, 16));
}

void *Runtime::scratch(size_t Size) {
  size_t Words =
      (Size + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t);
  if (Scratch.size() <= Depth)
    Scratch.resize(Depth + 1);
  std::vector<std::max_align_t> &Level = Scratch[Depth];
  if (Level.size() < Words)
    Level.resize(Words);
  return Level.data();
}

void Runtime::callMain(ConnId C, const SmallInvoke &About,
                       const LoadedIfunc *L, const char *LocalName,
                       IfuncMainFn Main, void *Args, StringRef Payload) {
  // Give the function an aligned, writable copy: the transport's buffer may
  // be neither. The function may re-enter the runtime and receive another
  // frame: that one gets the next level's buffer, so this payload stays.
  // A large frame's body is already both (onBufferedFrame): it runs there.
  alignas(std::max_align_t) char Small[128];
  void *Buf = Small;
  if (LLVM_UNLIKELY(!Lent.empty()) && inLent(Payload)) {
    Buf = const_cast<char *>(Payload.data());
    Lent = {};
  } else {
    if (LLVM_UNLIKELY(Payload.size() > sizeof Small))
      Buf = scratch(Payload.size());
    copyBytes(static_cast<char *>(Buf), Payload.data(), Payload.size());
  }
  if (LLVM_UNLIKELY(L && L->Sandboxed))
    return callSandboxed(C, About, *L, Args, Buf, Payload.size());
  ++Depth;
  ConnId Outer = Current;
  Current = C;
  // Recorded for fault attribution and watchdogs (Guard.h).
  RunRecord Rec;
  Rec.Code = L;
  Rec.LocalName = LocalName;
  Rec.Conn = C;
  {
    RunScope Scope(Rec);
    callJitted(Main, Buf, Payload.size(), Args);
  }
  Current = Outer;
  --Depth;
  ++Counters.Executed;
}

void Runtime::callSandboxed(ConnId C, const SmallInvoke &About,
                            const LoadedIfunc &L, void *Args, void *Payload,
                            size_t Size) {
  ++Depth;
  ConnId Outer = Current;
  Current = C;
  RunRecord Rec;
  Rec.Code = &L;
  Rec.Conn = C;
  SandboxTrap Trap;
  bool Trapped;
  {
    RunScope Scope(Rec);
    Trapped = !runSandboxed(L.Main, Payload, Size, Args, Opts.Sandbox, Trap);
  }
  Current = Outer;
  --Depth;
  if (Trapped)
    reportTrap(C, About, L, Trap);
  else
    ++Counters.Executed;
}

void Runtime::reportTrap(ConnId C, const SmallInvoke &About,
                         const LoadedIfunc &L, const SandboxTrap &Trap) {
  // The invocation is over; the target goes on. The sender learns which
  // code trapped and why (the connection may be gone if the code closed
  // it before trapping: then only the counters and the event remain).
  ++Counters.SandboxTraps;
  Frame F;
  F.Type = About.Type;
  F.Seq = About.Seq;
  F.CodeId = About.CodeId;
  std::string Msg = formatv("ifunc '{0}' ({1}): {2}", L.Name,
                            toHex(L.Hash).substr(0, 16), describeTrap(Trap))
                        .str();
  if (Conns.count(C))
    sendError(C, F, WireStatus::SandboxTrap, Msg);
  else
    ++Counters.Errors[WireStatus::SandboxTrap];
}

Error Runtime::registerLocal(StringRef Name, IfuncMainFn Fn) {
  uint32_t Id = localFunctionId(Name);
  auto [It, New] = Locals.try_emplace(Id, LocalFn{Name.str(), Fn, ArgsSlot()});
  if (!New && It->second.Name != Name)
    return createStringError("local function '%s' has the same id as '%s'",
                             Name.str().c_str(), It->second.Name.c_str());
  It->second.Fn = Fn;
  return Error::success();
}

void Runtime::sendLocal(ConnId C, StringRef Name, StringRef Payload,
                        unique_function<void(Error)> Done) {
  sendLocal(C, localFunctionId(Name), Payload, std::move(Done));
}

void Runtime::sendLocal(ConnId C, uint32_t Id, StringRef Payload,
                        unique_function<void(Error)> Done) {
  Conn &S = conn(C);
  if (LLVM_UNLIKELY(S.Blocked))
    return holdOrFail(S, std::move(Done),
                      [this, C, Id, Payload = Payload.str()](
                          unique_function<void(Error)> D) {
                        sendLocal(C, Id, Payload, std::move(D));
                      });
  sendSmall(C, S, SmallInvoke{FrameType::LocalInvoke, S.NextSeq++, Id},
            Payload, std::move(Done));
}

bool Runtime::runSmall(ConnId C, Conn &S, const SmallInvoke &I,
                       StringRef Payload) {
  IfuncMainFn Main;
  void *Args;
  const LoadedIfunc *Code = nullptr;
  const char *LocalName = nullptr;
  if (I.Type == FrameType::Invoke) {
    KnownCode *K = S.LastKnown;
    if (LLVM_UNLIKELY(!K || S.LastKnownId != I.CodeId)) {
      auto It = S.Known.find(I.CodeId);
      if (It == S.Known.end())
        return false;
      K = S.LastKnown = &It->second;
      S.LastKnownId = I.CodeId;
    }
    ++Counters.CacheHits;
    const LoadedIfunc &L = *K->Code;
    touch(L);
    Main = L.Main;
    Code = &L;
    Args = targetArgs(L.Name, K->Args);
  } else {
    auto It = Locals.find(I.CodeId);
    if (It == Locals.end())
      return false;
    Main = It->second.Fn;
    LocalName = It->second.Name.c_str();
    Args = targetArgs(It->second.Name, It->second.Args);
  }
  ++Counters.Received;
  callMain(C, I, Code, LocalName, Main, Args, Payload);
  return true;
}

bool Runtime::handle(ConnId C, Conn &S, const Frame &F) {
  // S may be gone once a function ran (it can re-enter and see C close):
  // nothing below uses it after a call.
  switch (F.Type) {
  case FrameType::Invoke: {
    if (F.Flags & FrameHasCode) {
      // Counted (Received, CodeFrames) when it arrived: it may come here
      // again, after waiting for its compile.
      const LoadedIfunc *L = Jit->find(F.Hash);
      if (L) {
        // Already loaded (here or for another connection): the hash names
        // it, so the archive need not be parsed again.
        touch(F.Hash);
      } else if (!Opts.CompileOnProgressThread) {
        compileFor(F.Hash,
                   CompileWaiter{C, F.Type, F.Seq, F.CodeId,
                                 std::make_shared<const std::string>(
                                     F.Archive.str())});
        return false;
      } else {
        WireStatus Why = WireStatus::JitFailed;
        Expected<const LoadedIfunc *> Got =
            loadArchive(F.Archive, &F.Hash, Why);
        if (!Got) {
          sendError(C, F, Why, toString(Got.takeError()));
          return true;
        }
        L = *Got;
      }
      KnownCode &K = know(S, F.CodeId, *L); // Resets S.LastKnown.
      callMain(C, SmallInvoke{F.Type, F.Seq, F.CodeId}, L, nullptr, L->Main,
               targetArgs(L->Name, K.Args), F.Payload);
      return true;
    }
    if (runSmall(C, S, SmallInvoke{F.Type, F.Seq, F.CodeId}, F.Payload))
      return true;
    // Code we do not have: ask for it (once) and wait.
    if (S.Requested.insert(F.CodeId).second) {
      ++Counters.CodeRequests;
      event(formatv("code id {0} unknown: requesting it", F.CodeId));
      Frame R;
      R.Type = FrameType::CodeRequest;
      R.Seq = F.Seq;
      R.CodeId = F.CodeId;
      sendFrame(C, R, StringRef(), nullptr);
    }
    return false;
  }
  case FrameType::LocalInvoke:
    if (!runSmall(C, S, SmallInvoke{F.Type, F.Seq, F.CodeId}, F.Payload)) {
      ++Counters.Received;
      sendError(C, F, WireStatus::UnknownLocal,
                formatv("no local function with id {0:x}", F.CodeId).str());
    }
    return true;
  case FrameType::Fence: {
    Frame R;
    R.Type = FrameType::FenceDone;
    R.Seq = F.Seq;
    sendFrame(C, R, StringRef(), nullptr);
    return true;
  }
  case FrameType::RegionRead: {
    if (!Opts.Region) {
      sendError(C, F, WireStatus::NoRegion, "this target exposes no region");
      return true;
    }
    Frame R;
    R.Type = FrameType::RegionData;
    R.Seq = F.Seq;
    R.Data = StringRef(static_cast<const char *>(Opts.Region),
                       std::min<uint64_t>(F.Length, Opts.RegionSize));
    sendFrame(C, R, R.Data, nullptr);
    return true;
  }
  default:
    return true;
  }
}

void Runtime::drain(ConnId C) {
  auto It = Conns.find(C);
  if (It == Conns.end() || It->second.Draining)
    return; // A message of C runs (and re-entered): its drain goes on.
  It->second.Draining = true;
  while (!It->second.Queue.empty()) {
    // Handle a copy: the ifunc may re-enter and touch this queue.
    Pending P = std::move(It->second.Queue.front());
    Expected<Frame> F = decodeFrame(P.Bytes);
    if (!F) { // Cannot happen: it decoded when it was queued.
      consumeError(F.takeError());
      It->second.Queue.pop_front();
      continue;
    }
    bool Done = handle(C, It->second, *F);
    It = Conns.find(C);
    if (It == Conns.end())
      return; // Closed while its message ran.
    if (!Done) { // Waits for code; nothing ran.
      It->second.Queue.front() = std::move(P);
      break;
    }
    if (!It->second.Queue.empty())
      It->second.Queue.pop_front();
  }
  It->second.Draining = false;
}

void Runtime::onFrame(ConnId C, StringRef Header, StringRef Body) {
  // Steady state: a message for code that is here, nothing queued before it.
  Conn &S = conn(C);
  SmallInvoke I;
  if (LLVM_LIKELY(isCompactHeader(Header))) {
    // A compact frame takes the next sequence number, decoded or not, so
    // the ones after it keep theirs.
    I.Seq = ++S.RecvSeq;
    if (LLVM_LIKELY(decodeCompactInvoke(Header, Body, I) && S.Queue.empty() &&
                    runSmall(C, S, I, Body)))
      return;
    return onOtherFrame(C, Header, Body, I.Seq);
  }
  if (decodeSmallInvoke(Header, Body, I)) {
    S.RecvSeq = I.Seq;
    if (S.Queue.empty() && runSmall(C, S, I, Body))
      return;
  }
  onOtherFrame(C, Header, Body, 0);
}

void Runtime::onBufferedFrame(ConnId C, StringRef Header,
                              MutableArrayRef<char> Body) {
  // Saved and restored: a function running on an outer buffer may re-enter
  // progress() and be handed another one.
  MutableArrayRef<char> Outer = std::exchange(Lent, Body);
  onFrame(C, Header, StringRef(Body.data(), Body.size()));
  Lent = Outer;
}

bool Runtime::inLent(StringRef Payload) const {
  return Payload.data() >= Lent.data() &&
         Payload.data() + Payload.size() <= Lent.data() + Lent.size() &&
         reinterpret_cast<uintptr_t>(Payload.data()) %
                 alignof(std::max_align_t) ==
             0;
}

void Runtime::onOtherFrame(ConnId C, StringRef Header, StringRef Body,
                           uint32_t CompactSeq) {
  bool Compact = isCompactHeader(Header);
  Expected<Frame> FOr = decodeFrame(Header, Body);
  if (!FOr) {
    std::string Msg = toString(FOr.takeError());
    Frame About;
    About.Seq = CompactSeq;
    if (!Compact && Header.size() >= 12) { // Best effort: echo seq, code id.
      About.Seq = support::endian::read32le(Header.data() + 4);
      About.CodeId = support::endian::read32le(Header.data() + 8);
    }
    bool Version = StringRef(Msg).starts_with("unsupported frame version");
    sendError(C, About,
              Version ? WireStatus::UnsupportedVersion
                      : WireStatus::MalformedFrame,
              Msg);
    return;
  }
  if (Compact)
    FOr->Seq = CompactSeq;
  const Frame &F = *FOr;
  Conn &S = conn(C);
  switch (F.Type) {
  case FrameType::Invoke:
  case FrameType::LocalInvoke:
  case FrameType::Fence:
  case FrameType::RegionRead:
    S.RecvSeq = F.Seq;
    if (F.Type == FrameType::Invoke && (F.Flags & FrameHasCode)) {
      ++Counters.Received;
      ++Counters.CodeFrames;
    }
    if (!S.Queue.empty() || !handle(C, S, F)) {
      // Queued frames are kept whole; a compact one with its sequence
      // number written out, since its place in the stream implied it.
      Frame Full = F;
      Full.Compact = false;
      conn(C).Queue.push_back(Pending{Compact ? encodeFrame(Full)
                                              : Header.str() + Body.str()});
    }
    return;
  case FrameType::Code: {
    ++Counters.CodeFrames;
    if (!Opts.CompileOnProgressThread && !Jit->find(F.Hash)) {
      // The answer to our CodeRequest: the Invoke that asked waits at the
      // front of the queue, and everything later behind it, until the
      // compile is done; Requested keeps them from asking again.
      S.Requested.insert(F.CodeId);
      compileFor(F.Hash, CompileWaiter{C, F.Type, F.Seq, F.CodeId,
                                       std::make_shared<const std::string>(
                                           F.Archive.str())});
      return;
    }
    WireStatus Why = WireStatus::JitFailed;
    Expected<const LoadedIfunc *> L = admitCode(C, F, Why);
    if (!L)
      failCode(C, F.CodeId, Why, toString(L.takeError()));
    drain(C);
    return;
  }
  case FrameType::CodeRequest: {
    auto It = S.ById.find(F.CodeId);
    if (It == S.ById.end()) {
      sendError(C, F, WireStatus::CodeUnavailable,
                formatv("code id {0} was never sent here", F.CodeId).str());
      return;
    }
    event(formatv("resending code id {0} ({1})", F.CodeId,
                  It->second->Name));
    Frame R;
    R.Type = FrameType::Code;
    R.Seq = F.Seq;
    R.CodeId = F.CodeId;
    R.Hash = It->second->Hash;
    R.Archive = shippedBytes(*It->second, S);
    sendFrame(C, R, R.Archive, nullptr);
    return;
  }
  case FrameType::Error: {
    ++Counters.ErrorsReceived;
    if (F.Seq == 0 && S.AwaitingHello) {
      // About our Hello. A tc that predates Hello calls it malformed:
      // send as to such a peer (every target member). A peer with no wire
      // version in common says so: every send here fails with its words.
      if (F.Status == WireStatus::UnsupportedVersion)
        S.Failure = "target: " + F.Message.str();
      else
        S.Blocked = false;
      S.AwaitingHello = false;
      event(formatv("connection {0}: the peer refused our hello: {1}", C,
                    F.Message));
      releaseOutbox(C);
      return;
    }
    if (F.Status == WireStatus::CodeUnavailable && S.Requested.count(F.CodeId)) {
      // We asked a sender for code it does not have: drop what waits on it.
      auto &Q = S.Queue;
      for (auto It = Q.begin(); It != Q.end();) {
        Expected<Frame> QF = decodeFrame(It->Bytes);
        if (QF && QF->Type == FrameType::Invoke && QF->CodeId == F.CodeId) {
          ++Counters.Errors[WireStatus::CodeUnavailable];
          It = Q.erase(It);
        } else {
          if (!QF)
            consumeError(QF.takeError());
          ++It;
        }
      }
      S.Requested.erase(F.CodeId);
      drain(C);
      return;
    }
    if (S.Reads.count(F.Seq)) {
      finishWaiter(S.Reads, F.Seq,
                   createStringError("target: " + wireStatusName(F.Status) +
                                     ": " + F.Message));
      return;
    }
    RemoteError RE{C, F.Seq, F.Status, F.Message.str()};
    if (RemoteErrorCB)
      RemoteErrorCB(RE);
    return;
  }
  case FrameType::RegionData:
    finishWaiter(S.Reads, F.Seq, F.Data.str());
    return;
  case FrameType::Hello:
    onHello(C, F);
    return;
  case FrameType::FenceDone:
    finishWaiter(S.Fences, F.Seq, Error::success());
    return;
  }
}

void Runtime::onAccept(ConnId C) {
  conn(C);
  event(formatv("connection {0} accepted", C));
  if (AcceptCB)
    AcceptCB(C);
}

void Runtime::onDisconnect(ConnId C, StringRef Why) {
  auto It = Conns.find(C);
  if (It != Conns.end()) {
    auto Fences = std::move(It->second.Fences);
    auto Reads = std::move(It->second.Reads);
    auto Outbox = std::move(It->second.Outbox);
    Conns.erase(It);
    LastConn = nullptr;
    // Its frames that wait for compiles are gone with it: a result is not
    // used for it (the compile itself finishes, for the other waiters and
    // the cache).
    for (auto &KV : Compiling)
      llvm::erase_if(KV.second.Waiters,
                     [C](const CompileWaiter &W) { return W.Conn == C; });
    for (Held &H : Outbox)
      H.Fail(createStringError("connection closed: " + Why));
    for (auto &KV : Fences)
      if (KV.second)
        KV.second(createStringError("connection closed: " + Why));
    for (auto &KV : Reads)
      KV.second(createStringError("connection closed: " + Why));
  }
  event(formatv("connection {0} closed: {1}", C, Why));
  if (DisconnectCB)
    DisconnectCB(C, Why);
}

} // namespace tc
