//===- Runtime.cpp - tc's protocol engine ---------------------------------===//
//
// The state machine of docs/wire-format.md. Sender side: code ids per
// connection, CodeRequest answers, fences. Target side: a per-connection
// FIFO that holds frames whose code is not here yet, so order is kept and
// nothing runs on code it does not have.
//
//===----------------------------------------------------------------------===//

#include "Runtime.h"
#include "Guard.h"

#include "llvm/Support/Endian.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cstring>

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
}

Expected<std::unique_ptr<Runtime>> Runtime::create(std::unique_ptr<Transport> T,
                                                   RuntimeOptions Opts) {
  Expected<std::unique_ptr<JitEngine>> J = JitEngine::create(Opts.Jit);
  if (!J)
    return J.takeError();
  return std::make_unique<Runtime>(std::move(T), std::move(Opts),
                                   std::move(*J));
}

Runtime::~Runtime() {
  // Tear the transport down first: its pending completions still refer to
  // buffers this object owns.
  T.reset();
}

void Runtime::event(const Twine &Msg) {
  if (EventCB)
    EventCB(Msg.str());
}

//===----------------------------------------------------------------------===//
// Source side
//===----------------------------------------------------------------------===//

/// Targets get the archive without source members; its hash is the code's
/// identity on the wire.
static Expected<std::pair<std::string, ArchiveHash>>
shippedArchive(const Archive &A) {
  Archive Shipped = A;
  llvm::erase_if(Shipped.Members,
                 [](const Member &M) { return M.TheRole == Role::Source; });
  if (Shipped.Members.empty())
    return createStringError("ifunc '%s': archive has no target members",
                             A.Name.c_str());
  Expected<SmallString<0>> Out = writeArchive(Shipped);
  if (!Out)
    return Out.takeError();
  return std::make_pair(Out->str().str(), Shipped.Hash);
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

  Expected<std::pair<std::string, ArchiveHash>> Out = shippedArchive(*A);
  if (!Out)
    return Out.takeError();
  F->Bytes = std::move(Out->first);
  F->Hash = Out->second;
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
  size_t Bound = F->Source->Bound(Args, SourceArgsSize);
  Message M;
  M.Code = std::move(F);
  M.Payload.assign(Bound, '\0');
  size_t Size = Bound;
  int RC = M.Code->Source->Init(Args, SourceArgsSize, M.Payload.data(), &Size);
  if (RC != 0)
    return createStringError("ifunc '%s': %s_payload_init returned %d",
                             M.Code->Name.c_str(), M.Code->Name.c_str(), RC);
  if (Size > Bound)
    return createStringError("ifunc '%s': %s_payload_init wrote %zu bytes, "
                             "more than the bound of %zu",
                             M.Code->Name.c_str(), M.Code->Name.c_str(), Size,
                             Bound);
  M.Payload.resize(Size);
  return std::move(M);
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

void Runtime::sendSmall(ConnId C, const SmallInvoke &I, StringRef Payload,
                        unique_function<void(Error)> &&Done) {
  char Buf[Transport::HeaderRoom + FrameHeaderSize];
  char *Header = Buf + Transport::HeaderRoom;
  encodeSmallInvoke(I, Payload.size(), Header);
  ++Counters.FramesSent;
  Counters.BytesSent += FrameHeaderSize + Payload.size();
  T->sendWithRoom(C, StringRef(Header, FrameHeaderSize), Payload,
                  std::move(Done));
}

void Runtime::send(ConnId C, const Message &M,
                   unique_function<void(Error)> Done) {
  Conn &S = conn(C);
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
    sendSmall(C, SmallInvoke{FrameType::Invoke, S.NextSeq++, S.LastSentId},
              M.Payload, std::move(Done));
    return;
  }
  Frame F;
  F.Type = FrameType::Invoke;
  F.Seq = S.NextSeq++;
  F.CodeId = S.LastSentId;
  F.Payload = M.Payload;
  F.Flags = FrameHasCode;
  F.Hash = M.Code->Hash;
  F.Archive = M.Code->Bytes;
  BodyBuf.assign(M.Payload);
  BodyBuf += M.Code->Bytes;
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
  ++Counters.CodeFrames;
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

void Runtime::know(Conn &S, uint32_t Id, const LoadedIfunc &L) {
  KnownCode &K = S.Known[Id];
  if (K.Code != &L)
    K = KnownCode{L.Hash, &L, ArgsSlot()};
  S.Requested.erase(Id);
}

void *Runtime::lookUpTargetArgs(StringRef Name, ArgsSlot &Slot) {
  auto Named = NamedTargetArgs.find(Name);
  Slot.Args = Named != NamedTargetArgs.end() ? Named->second : Opts.TargetArgs;
  Slot.Generation = ArgsGeneration;
  return Slot.Args;
}

Expected<const LoadedIfunc *> Runtime::preload(StringRef Bytes) {
  // Load what a sender of this archive would ship, so the identities match.
  WireStatus Why = WireStatus::BadArchive;
  Expected<Archive> A = readArchive(MemoryBufferRef(Bytes, "archive"));
  if (!A)
    return createStringError(wireStatusName(Why) + ": " +
                             toString(A.takeError()));
  Expected<std::pair<std::string, ArchiveHash>> Shipped = shippedArchive(*A);
  if (!Shipped)
    return createStringError(wireStatusName(Why) + ": " +
                             toString(Shipped.takeError()));
  Expected<const LoadedIfunc *> L = loadArchive(Shipped->first, nullptr, Why);
  if (!L)
    return createStringError(wireStatusName(Why) + ": " +
                             toString(L.takeError()));
  return L;
}

Expected<const LoadedIfunc *> Runtime::loadArchive(StringRef Bytes,
                                                   const ArchiveHash *Claimed,
                                                   WireStatus &Why) {
  Expected<Archive> A = readArchive(MemoryBufferRef(Bytes, "frame"));
  if (!A) {
    Why = WireStatus::BadArchive;
    return A.takeError();
  }
  if (Claimed && A->Hash != *Claimed) {
    Why = WireStatus::HashMismatch;
    return createStringError("archive hashes to %s, frame says %s",
                             toHex(A->Hash).c_str(), toHex(*Claimed).c_str());
  }
  if (const LoadedIfunc *L = Jit->find(A->Hash)) {
    touch(A->Hash);
    return L;
  }
  if (!Opts.AllowedHashes.empty() && !Opts.AllowedHashes.count(A->Hash)) {
    Why = WireStatus::PolicyRefused;
    return createStringError("ifunc '%s' (%s) is not in the allowed list",
                             A->Name.c_str(), toHex(A->Hash).c_str());
  }
  Expected<const LoadedIfunc &> L = Jit->load(*A, Opts.Mode);
  if (!L) {
    Why = WireStatus::JitFailed;
    Error E = L.takeError();
    handleAllErrors(
        std::move(E),
        [&](const LoadError &LE) {
          Why = statusOf(LE.kind());
          E = make_error<StringError>(LE.message(), inconvertibleErrorCode());
        },
        [&](const ErrorInfoBase &EI) {
          E = make_error<StringError>(EI.message(), inconvertibleErrorCode());
        });
    return std::move(E);
  }
  ++Counters.Compiles;
  Counters.CompileMillis += L->LoadMillis;
  Counters.DiskCacheHits += L->FromDiskCache;
  event(formatv("loaded {0} {1} ({2:f2} ms, {3}{4})", A->Name,
                toHex(A->Hash).substr(0, 16), L->LoadMillis,
                imageKindName(L->Kind),
                L->FromDiskCache ? ", from the disk cache" : ""));
  TargetArchives[A->Hash] = Bytes.str();
  touch(A->Hash);
  if (Opts.MaxLoaded && LRU.size() > Opts.MaxLoaded)
    evict(LRU.back());
  return &*L;
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
  for (auto &KV : Conns)
    for (auto It = KV.second.Known.begin(); It != KV.second.Known.end();)
      if (It->second.Hash == H)
        KV.second.Known.erase(It++); // DenseMap: erase keeps others valid.
      else
        ++It;
  ++Counters.Evictions;
  event("evicted " + toHex(H).substr(0, 16));
}

void Runtime::callMain(ConnId C, const SmallInvoke &About,
                       const LoadedIfunc *L, const char *LocalName,
                       IfuncMainFn Main, void *Args, StringRef Payload) {
  // Give the function an aligned, writable copy: the transport's buffer may
  // be neither. The function may re-enter the runtime and receive another
  // frame: that one gets the next level's buffer, so this payload stays.
  alignas(std::max_align_t) char Small[128];
  void *Buf = Small;
  if (Payload.size() > sizeof Small) {
    size_t Words = (Payload.size() + sizeof(std::max_align_t) - 1) /
                   sizeof(std::max_align_t);
    if (Scratch.size() <= Depth)
      Scratch.resize(Depth + 1);
    std::vector<std::max_align_t> &Level = Scratch[Depth];
    if (Level.size() < Words)
      Level.resize(Words);
    Buf = Level.data();
  }
  if (!Payload.empty())
    std::memcpy(Buf, Payload.data(), Payload.size());
  ++Depth;
  ConnId Outer = Current;
  Current = C;
  // Recorded for fault attribution and watchdogs (Guard.h).
  RunRecord Rec;
  Rec.Code = L;
  Rec.LocalName = LocalName;
  Rec.Conn = C;
  bool Trapped = false;
  SandboxTrap Trap;
  {
    RunScope Scope(Rec);
    if (L && L->Sandboxed)
      Trapped = !runSandboxed(Main, Buf, Payload.size(), Args, Opts.Sandbox,
                              Trap);
    else
      Main(Buf, Payload.size(), Args);
  }
  Current = Outer;
  --Depth;
  if (LLVM_UNLIKELY(Trapped)) {
    reportTrap(C, About, *L, Trap);
    return;
  }
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
  Conn &S = conn(C);
  sendSmall(C,
            SmallInvoke{FrameType::LocalInvoke, S.NextSeq++,
                        localFunctionId(Name)},
            Payload, std::move(Done));
}

bool Runtime::runSmall(ConnId C, Conn &S, const SmallInvoke &I,
                       StringRef Payload) {
  IfuncMainFn Main;
  void *Args;
  const LoadedIfunc *Code = nullptr;
  const char *LocalName = nullptr;
  if (I.Type == FrameType::Invoke) {
    auto K = S.Known.find(I.CodeId);
    if (K == S.Known.end())
      return false;
    ++Counters.CacheHits;
    const LoadedIfunc &L = *K->second.Code;
    touch(L);
    Main = L.Main;
    Code = &L;
    Args = targetArgs(L.Name, K->second.Args);
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
      ++Counters.Received;
      WireStatus Why = WireStatus::JitFailed;
      Expected<const LoadedIfunc *> Got = admitCode(C, F, Why);
      if (!Got) {
        sendError(C, F, Why, toString(Got.takeError()));
        return true;
      }
      KnownCode &K = S.Known[F.CodeId];
      callMain(C, SmallInvoke{F.Type, F.Seq, F.CodeId}, *Got, nullptr,
               (*Got)->Main, targetArgs((*Got)->Name, K.Args), F.Payload);
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
  while (It != Conns.end() && !It->second.Queue.empty()) {
    // Handle a copy: the ifunc may re-enter and touch this queue.
    Pending P = std::move(It->second.Queue.front());
    Expected<Frame> F = decodeFrame(P.Bytes);
    if (!F) { // Cannot happen: it decoded when it was queued.
      consumeError(F.takeError());
      It->second.Queue.pop_front();
      continue;
    }
    if (!handle(C, It->second, *F)) {
      It->second.Queue.front() = std::move(P);
      return;
    }
    It = Conns.find(C);
    if (It != Conns.end() && !It->second.Queue.empty())
      It->second.Queue.pop_front();
  }
}

void Runtime::onFrame(ConnId C, StringRef Header, StringRef Body) {
  // Steady state: a message for code that is here, nothing queued before it.
  SmallInvoke I;
  if (LLVM_LIKELY(decodeSmallInvoke(Header, Body, I))) {
    Conn &S = conn(C);
    if (LLVM_LIKELY(S.Queue.empty()) && runSmall(C, S, I, Body))
      return;
  }
  onOtherFrame(C, Header, Body);
}

void Runtime::onOtherFrame(ConnId C, StringRef Header, StringRef Body) {
  Expected<Frame> FOr = decodeFrame(Header, Body);
  if (!FOr) {
    std::string Msg = toString(FOr.takeError());
    Frame About;
    if (Header.size() >= 12) { // Best effort: echo seq and code id.
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
  const Frame &F = *FOr;
  Conn &S = conn(C);
  switch (F.Type) {
  case FrameType::Invoke:
  case FrameType::LocalInvoke:
  case FrameType::Fence:
  case FrameType::RegionRead:
    if (!S.Queue.empty() || !handle(C, S, F))
      conn(C).Queue.push_back(Pending{Header.str() + Body.str()});
    return;
  case FrameType::Code: {
    WireStatus Why = WireStatus::JitFailed;
    Expected<const LoadedIfunc *> L = admitCode(C, F, Why);
    if (!L) {
      std::string Msg = toString(L.takeError());
      // The queued invokes for this code id can never run: drop and report
      // each, so the sender hears about every message.
      auto &Q = conn(C).Queue;
      for (auto It = Q.begin(); It != Q.end();) {
        Expected<Frame> QF = decodeFrame(It->Bytes);
        if (QF && QF->Type == FrameType::Invoke && QF->CodeId == F.CodeId) {
          sendError(C, *QF, Why, Msg);
          It = Q.erase(It);
        } else {
          if (!QF)
            consumeError(QF.takeError());
          ++It;
        }
      }
      conn(C).Requested.erase(F.CodeId);
    }
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
    R.Archive = It->second->Bytes;
    sendFrame(C, R, It->second->Bytes, nullptr);
    return;
  }
  case FrameType::Error: {
    ++Counters.ErrorsReceived;
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
    Conns.erase(It);
    LastConn = nullptr;
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
