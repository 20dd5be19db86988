//===- RuntimeCode.cpp - The code cache and loading -----------------------===//
//
// The target side's code: admitting an archive a frame ships (the policy,
// signatures, the JIT), the code ids each connection binds to loaded code,
// the LRU of loaded identities and their eviction, and compiles on a helper
// thread, whose results progress() takes (finishCompiles()).
//
//===----------------------------------------------------------------------===//

#include "protocol/Runtime.h"
#include "protocol/RuntimeImpl.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"

#include <future>

using namespace llvm;

namespace tc {

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

Expected<const LoadedIfunc *> Runtime::admitCode(ConnId C, const Frame &F,
                                                 WireStatus &Why) {
  if (const LoadedIfunc *L = findLoaded(F.Hash)) {
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
  if ((O.Code = findLoaded(A->Hash)))
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
  // A member for the device runs there; everything else here.
  const Member *OnDevice = Device ? Device->memberFor(*A) : nullptr;
  Expected<const LoadedIfunc &> L =
      OnDevice ? Device->load(*A, *OnDevice) : Jit->load(*A, Opts.Mode);
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
    event(formatv("loaded {0} {1} ({2:f2} ms, {3}{4}), member {5} {6}{7}",
                  L.Name, toHex(L.Hash).substr(0, 16), L.LoadMillis,
                  imageKindName(L.Kind),
                  L.FromDiskCache ? ", from the disk cache" : "",
                  L.MemberTriple,
                  L.MemberCPU.empty() ? "generic" : L.MemberCPU,
                  L.Device ? ", " + Device->describe(L) : std::string()));
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
  if (Device && Device->busy())
    return Error::success(); // Only progress() learns what it finished.
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
  if (O.Code && findLoaded(Hash) != O.Code) {
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
  if (Device)
    Device->unload(H);
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

} // namespace tc
