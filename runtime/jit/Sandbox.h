//===- Sandbox.h - Run instrumented ifunc code and catch its traps -*- C++ -*-=//
//
// The runtime half of sandboxed execution (llvm-passes/Sandbox.cpp is the
// other): the per-thread state instrumented code reads (the ranges it may
// touch, its fuel, its stack limits, its shadow stack), the functions it
// calls when a check fails, and runSandboxed(), which calls NAME_main under
// a sigsetjmp so that a trap ends that invocation only.
//
//===----------------------------------------------------------------------===//

#ifndef TC_RUNTIME_SANDBOX_H
#define TC_RUNTIME_SANDBOX_H

#include "jit/Jit.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tc {

/// What one sandboxed invocation may use (RuntimeOptions::Sandbox).
struct SandboxPolicy {
  /// Fuel per invocation: one unit per function entry and loop iteration.
  uint64_t Fuel = 100000000;
  /// Machine stack an invocation may use below its dispatcher's frame.
  size_t StackBytes = 1 << 20;
  /// Size of the per-thread shadow stack (escaping locals and VLAs).
  size_t ShadowStackBytes = 1 << 20;
  /// Bytes at target_args the code may touch (0: none beyond the regions).
  size_t TargetArgsSize = 0;
  /// Further memory the code may read and write.
  struct Range {
    const void *Base;
    size_t Size;
  };
  std::vector<Range> Regions;
};

/// Why an invocation was stopped.
struct SandboxTrap {
  unsigned Cause = 0; ///< A SandboxTrapCause.
  uint64_t Addr = 0;  ///< Faulting address or callee, if any.
  uint64_t Size = 0;  ///< Access size, for loads and stores.
  uint64_t Fuel = 0;  ///< The budget, for SandboxTrapFuel.
};

/// Runs \p Main sandboxed. Returns true if it returned normally; false,
/// with \p Trap filled in, if a check failed (the code's frames are gone).
bool runSandboxed(IfuncMainFn Main, void *Payload, size_t Size, void *Args,
                  const SandboxPolicy &Policy, SandboxTrap &Trap);

/// "out-of-bounds store of 8 bytes at 0x0", "fuel budget of N exhausted"...
std::string describeTrap(const SandboxTrap &T);

/// Makes the innermost sandboxed invocation on this thread trap at its
/// next function entry or loop iteration with SandboxTrapTimeLimit. Safe
/// to call from another thread or a signal handler; no effect when no
/// sandboxed code runs.
void requestSandboxStop();

/// Adds [Base, Base+Size) to what the running sandboxed invocation may
/// touch, until it returns (tc_msg_payload grants a message's payload).
/// No effect outside sandboxed code.
void sandboxGrant(void *Base, size_t Size);

/// The runtime functions instrumented code calls, for the JIT to bind.
struct SandboxRuntimeSymbol {
  const char *Name;
  void *Address;
};
std::vector<SandboxRuntimeSymbol> sandboxRuntimeSymbols();

} // namespace tc

#endif // TC_RUNTIME_SANDBOX_H
