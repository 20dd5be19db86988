//===- Sandbox.cpp - Run instrumented ifunc code and catch its traps ------===//
//
// Instrumented code (llvm-passes/Sandbox.cpp) reads TcSandboxState through
// tc_sandbox_state() once per function and checks each access inline
// against three ranges (target_args region, payload, shadow stack); what
// misses them comes here (tc_sandbox_check) to be tried against the
// declared regions, the grants and the module's globals before it traps.
// A trap siglongjmps to the runSandboxed() that started the innermost
// invocation on this thread; the state of the outer one is restored.
//
//===----------------------------------------------------------------------===//

#include "jit/Sandbox.h"

#include "tc/Passes.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <atomic>
#include <csetjmp>
#include <cstddef>
#include <cstring>
#include <memory>
#include <pthread.h>
#include <unistd.h>

using namespace llvm;

/// Read by instrumented code at fixed offsets (the pass's StateField):
/// change both together.
struct TcSandboxState {
  uint64_t PayloadLo, PayloadHi;
  uint64_t RegionLo, RegionHi;
  uint64_t ShadowLo, ShadowHi;
  int64_t Fuel;
  uint64_t StackLimit;
  uint64_t ShadowSP;
  /// The writable range the slow path matched last: a loop over a declared
  /// region goes out of line once, then inline.
  uint64_t CacheLo, CacheHi;
};
static_assert(offsetof(TcSandboxState, Fuel) == 48, "instrumentation layout");
static_assert(offsetof(TcSandboxState, ShadowSP) == 64,
              "instrumentation layout");
static_assert(offsetof(TcSandboxState, CacheLo) == 72,
              "instrumentation layout");

namespace {
struct SandboxFrame {
  sigjmp_buf Jmp;
  SandboxFrame *Prev = nullptr;
  const tc::SandboxPolicy *Policy = nullptr;
};

struct ThreadSandbox {
  TcSandboxState S{};
  std::unique_ptr<char[]> Shadow;
  size_t ShadowSize = 0;
  SandboxFrame *Top = nullptr;
  tc::SandboxTrap Last;
  std::vector<tc::SandboxPolicy::Range> Granted;
  uintptr_t StackLow = 0; ///< Lowest address of this thread's stack.
};

thread_local ThreadSandbox TS;
/// The state of the sandboxed invocation entered last in this process and
/// whether a stop was asked for it (requestSandboxStop).
std::atomic<TcSandboxState *> ActiveState{nullptr};
std::atomic<bool> StopRequested{false};

bool contains(uint64_t Lo, uint64_t Size, uint64_t A, uint64_t N) {
  return A - Lo <= Size && N <= Lo + Size - A;
}
} // namespace

extern "C" {
TcSandboxState *tc_sandbox_state() { return &TS.S; }

[[noreturn]] void tc_sandbox_trap(uint32_t Cause, uint64_t Addr) {
  ThreadSandbox &T = TS;
  if (!T.Top) {
    static const char Msg[] = "tc: sandbox trap outside sandboxed code\n";
    (void)!::write(2, Msg, sizeof Msg - 1);
    abort();
  }
  T.Last = tc::SandboxTrap{Cause, Addr, 0, T.Top->Policy->Fuel};
  if (Cause == tc::SandboxTrapFuel && StopRequested.exchange(false))
    T.Last.Cause = tc::SandboxTrapTimeLimit;
  siglongjmp(T.Top->Jmp, 1);
}

void tc_sandbox_check(uint64_t Addr, uint64_t Size, uint32_t Kind,
                      const void *Globals, uint64_t NumGlobals) {
  ThreadSandbox &T = TS;
  auto Hit = [&](uint64_t Lo, uint64_t N) {
    T.S.CacheLo = Lo;
    T.S.CacheHi = Lo + N;
  };
  if (T.Top) {
    for (const tc::SandboxPolicy::Range &R : T.Top->Policy->Regions)
      if (contains(uint64_t(R.Base), R.Size, Addr, Size))
        return Hit(uint64_t(R.Base), R.Size);
    for (const tc::SandboxPolicy::Range &R : T.Granted)
      if (contains(uint64_t(R.Base), R.Size, Addr, Size))
        return Hit(uint64_t(R.Base), R.Size);
  }
  struct GlobalEntry {
    uint64_t Addr, Size, Writable;
  };
  const auto *G = static_cast<const GlobalEntry *>(Globals);
  for (uint64_t I = 0; I < NumGlobals; ++I)
    if (contains(G[I].Addr, G[I].Size, Addr, Size) &&
        (G[I].Writable || Kind == tc::SandboxTrapLoad)) {
      if (G[I].Writable)
        Hit(G[I].Addr, G[I].Size);
      return;
    }
  if (T.Top) {
    T.Last = tc::SandboxTrap{Kind, Addr, Size, T.Top->Policy->Fuel};
    siglongjmp(T.Top->Jmp, 1);
  }
  tc_sandbox_trap(Kind, Addr);
}

void tc_sandbox_check_call(const void *Fn, const void *const *Table,
                           uint64_t N) {
  for (uint64_t I = 0; I < N; ++I)
    if (Table[I] == Fn)
      return;
  tc_sandbox_trap(tc::SandboxTrapCall, uint64_t(Fn));
}
} // extern "C"

namespace tc {

/// Copies a state; Fuel atomically, since a watchdog thread may store to it
/// at any time (requestSandboxStop). ThreadSanitizer flagged the plain
/// struct copy this replaces.
static void copyState(TcSandboxState &To, const TcSandboxState &From) {
  constexpr size_t Fuel = offsetof(TcSandboxState, Fuel);
  constexpr size_t After = Fuel + sizeof(int64_t);
  std::memcpy(&To, &From, Fuel);
  __atomic_store_n(&To.Fuel, __atomic_load_n(&From.Fuel, __ATOMIC_RELAXED),
                   __ATOMIC_RELAXED);
  std::memcpy(reinterpret_cast<char *>(&To) + After,
              reinterpret_cast<const char *>(&From) + After,
              sizeof(TcSandboxState) - After);
}

static uintptr_t threadStackLow() {
  pthread_attr_t A;
  void *Addr = nullptr;
  size_t Size = 0;
  if (pthread_getattr_np(pthread_self(), &A) == 0) {
    pthread_attr_getstack(&A, &Addr, &Size);
    pthread_attr_destroy(&A);
  }
  return uintptr_t(Addr);
}

bool runSandboxed(IfuncMainFn Main, void *Payload, size_t Size, void *Args,
                  const SandboxPolicy &Policy, SandboxTrap &Trap) {
  ThreadSandbox &T = TS;
  if (!T.Top) {
    if (T.ShadowSize != Policy.ShadowStackBytes) {
      T.Shadow.reset(new char[Policy.ShadowStackBytes]);
      T.ShadowSize = Policy.ShadowStackBytes;
    }
    if (!T.StackLow)
      T.StackLow = threadStackLow();
    T.S.ShadowSP = uint64_t(T.Shadow.get()) + T.ShadowSize;
  }
  SandboxFrame F;
  F.Prev = T.Top;
  F.Policy = &Policy;
  TcSandboxState Saved;
  copyState(Saved, T.S);
  if (!F.Prev)
    StopRequested.store(false); // A stop asked for an earlier message.

  const size_t GrantMark = T.Granted.size();
  uintptr_t Here = uintptr_t(__builtin_frame_address(0));
  T.S.PayloadLo = uint64_t(Payload);
  T.S.PayloadHi = uint64_t(Payload) + Size;
  T.S.RegionLo = Args ? uint64_t(Args) : 0;
  T.S.RegionHi = Args ? uint64_t(Args) + Policy.TargetArgsSize : 0;
  if (Args && !Policy.TargetArgsSize) // The declared region holding it.
    for (const SandboxPolicy::Range &R : Policy.Regions)
      if (contains(uint64_t(R.Base), R.Size, uint64_t(Args), 0)) {
        T.S.RegionLo = uint64_t(R.Base);
        T.S.RegionHi = uint64_t(R.Base) + R.Size;
        break;
      }
  T.S.CacheLo = T.S.CacheHi = 0;
  T.S.ShadowLo = uint64_t(T.Shadow.get());
  T.S.ShadowHi = T.S.ShadowSP;
  __atomic_store_n(&T.S.Fuel, int64_t(Policy.Fuel), __ATOMIC_RELAXED);
  uintptr_t Floor = T.StackLow ? T.StackLow + (64 << 10) : 0;
  T.S.StackLimit = std::max<uintptr_t>(
      Floor, Here > Policy.StackBytes ? Here - Policy.StackBytes : 0);
  T.Top = &F;
  TcSandboxState *Outer = ActiveState.exchange(&T.S);
  bool Ok = true;
  if (sigsetjmp(F.Jmp, 0) == 0) {
    callJitted(Main, Payload, Size, Args);
  } else {
    Ok = false;
    Trap = T.Last;
  }
  ActiveState.store(Outer);
  T.Top = F.Prev;
  copyState(T.S, Saved);
  T.Granted.resize(GrantMark);
  return Ok;
}

void requestSandboxStop() {
  if (TcSandboxState *S = ActiveState.load()) {
    StopRequested.store(true);
    __atomic_store_n(&S->Fuel, int64_t(-1), __ATOMIC_RELAXED);
  }
}

void sandboxGrant(void *Base, size_t Size) {
  if (TS.Top)
    TS.Granted.push_back({Base, Size});
}

std::string describeTrap(const SandboxTrap &T) {
  std::string Addr = formatv("{0:x}", T.Addr).str();
  switch (T.Cause) {
  case SandboxTrapLoad:
  case SandboxTrapStore:
    return formatv("out-of-bounds {0} of {1} byte{2} at {3}",
                   T.Cause == SandboxTrapLoad ? "load" : "store", T.Size,
                   T.Size == 1 ? "" : "s", Addr)
        .str();
  case SandboxTrapCall:
    return "indirect call to " + Addr + ", which is not one of its functions";
  case SandboxTrapFuel:
    return formatv("fuel budget of {0} exhausted (a loop or recursion ran "
                   "too long)",
                   T.Fuel)
        .str();
  case SandboxTrapStack:
    return "stack overflow (recursion too deep or locals too large)";
  case SandboxTrapDivide:
    return "integer division by zero or overflow";
  case SandboxTrapUnreachable:
    return "reached unreachable code";
  case SandboxTrapInstruction:
    return "trap instruction (__builtin_trap)";
  case SandboxTrapTimeLimit:
    return "ran longer than the target's time limit (--max-run-ms)";
  }
  return formatv("trap {0}", T.Cause).str();
}

std::vector<SandboxRuntimeSymbol> sandboxRuntimeSymbols() {
  return {{"tc_sandbox_state", reinterpret_cast<void *>(&tc_sandbox_state)},
          {"tc_sandbox_check", reinterpret_cast<void *>(&tc_sandbox_check)},
          {"tc_sandbox_check_call",
           reinterpret_cast<void *>(&tc_sandbox_check_call)},
          {"tc_sandbox_trap", reinterpret_cast<void *>(&tc_sandbox_trap)}};
}

} // namespace tc
