//===- RuntimeDispatch.cpp - Frames received and run ----------------------===//
//
// The target side's dispatch: frames handed over by the transport
// (onFrame(); the steady state, a small invoke of code that is here, runs
// at once), every other frame type, the per-connection queue of frames
// waiting for code, running ifuncs and local functions, and Error frames.
//
//===----------------------------------------------------------------------===//

#include "protocol/Runtime.h"
#include "protocol/RuntimeImpl.h"
#include "jit/Guard.h"
#include "transport/Bytes.h"

#include "llvm/Support/Endian.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

using namespace llvm;

namespace tc {

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

void *Runtime::lookUpTargetArgs(StringRef Name, ArgsSlot &Slot) {
  auto Named = NamedTargetArgs.find(Name);
  Slot.Args = Named != NamedTargetArgs.end() ? Named->second : Opts.TargetArgs;
  Slot.Generation = ArgsGeneration;
  return Slot.Args;
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
  if (LLVM_UNLIKELY(L && L->Device))
    return launchOnDevice(C, About, *L, Payload);
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
      const LoadedIfunc *L = findLoaded(F.Hash);
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
    if (Device) { // Answered once the device did the earlier messages.
      queueOnDevice(C, F);
      return true;
    }
    Frame R;
    R.Type = FrameType::FenceDone;
    R.Seq = F.Seq;
    sendFrame(C, R, StringRef(), nullptr);
    return true;
  }
  case FrameType::RegionRead: {
    if (Device) { // The device's region, after the earlier messages.
      queueOnDevice(C, F);
      return true;
    }
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
    if (!Opts.CompileOnProgressThread && !findLoaded(F.Hash)) {
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
      acknowledge(S, F.Seq); // The read was processed, after the messages.
      S.Asked.erase(F.Seq);
      // errc::operation_not_permitted: the target refused (the C API's
      // TC_ERR_REMOTE).
      finishWaiter(
          S.Reads, F.Seq,
          make_error<StringError>(
              "target: " + wireStatusName(F.Status) + ": " + F.Message,
              std::make_error_code(std::errc::operation_not_permitted)));
      return;
    }
    RemoteError RE{C, F.Seq, F.Status, F.Message.str()};
    if (RemoteErrorCB)
      RemoteErrorCB(RE);
    return;
  }
  case FrameType::RegionData: {
    auto A = S.Asked.find(F.Seq);
    if (A == S.Asked.end() || !S.Reads.count(F.Seq))
      return; // No read of ours: dropped.
    uint64_t Asked = A->second;
    S.Asked.erase(A);
    if (F.Data.size() > Asked) { // Not what was asked: not believed.
      finishWaiter(S.Reads, F.Seq,
                   createStringError(formatv("target: {0} bytes for a read "
                                             "of {1}",
                                             F.Data.size(), Asked)
                                         .str()));
      return;
    }
    acknowledge(S, F.Seq);
    finishWaiter(S.Reads, F.Seq, F.Data.str());
    return;
  }
  case FrameType::Hello:
    onHello(C, F);
    return;
  case FrameType::FenceDone:
    if (S.Fences.count(F.Seq))
      acknowledge(S, F.Seq);
    finishWaiter(S.Fences, F.Seq, Error::success());
    return;
  }
}

} // namespace tc
