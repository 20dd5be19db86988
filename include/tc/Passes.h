//===- tc/Passes.h - LLVM passes that make an ifunc shippable ---*- C++ -*-===//
//
// tc-cc runs these on every per-triple module; `opt -load-pass-plugin
// build/lib/TCPasses.so` runs them too (pass names below). They check the
// ifunc ABI for the module's own data layout and cut each module down to
// what one role needs: the target member keeps NAME_main and what it reaches,
// the source member keeps NAME_payload_bound and NAME_payload_init.
//
//===----------------------------------------------------------------------===//

#ifndef TC_PASSES_H
#define TC_PASSES_H

#include "llvm/IR/PassManager.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace llvm {
class Module;
class PassBuilder;
} // namespace llvm

namespace tc {

/// Options shared by the tc passes.
struct IfuncOptions {
  std::string Name;          ///< The ifunc name (NAME in NAME_main).
  bool KeepDebugInfo = false; ///< -g: keep debug info in shipped members.
  /// -fasynchronous-unwind-tables: keep the `uwtable` attribute (and its
  /// module flag) on functions that cannot throw. Without it they get no
  /// unwind tables (functions that may throw keep what exceptions need).
  bool KeepUnwindTables = false;
  /// libclc's nvptx64 bitcode, from which a GPU member's libm calls are
  /// linked (empty: Debian's /usr/lib/clc/nvptx64--.bc, TC_LIBCLC_NVPTX).
  std::string DeviceMathLibrary;
};

/// Checks that NAME_main, NAME_payload_bound and NAME_payload_init exist, are
/// defined, externally visible, and have exactly the ABI signatures for the
/// module's data layout, and that NAME_threads, if defined, is a constant
/// 32-bit integer above 0. All problems are reported, one per line, each
/// `[file:line: ]error: ifunc 'NAME': ...`.
llvm::Error checkIfuncABI(llvm::Module &M, const IfuncOptions &Opts);

/// Turns \p M into the target member: keeps NAME_main and what it reaches,
/// internalizes and strips the rest (source-side functions included), drops
/// llvm.used/llvm.compiler.used, unless KeepDebugInfo debug info, and
/// unless KeepUnwindTables the asynchronous unwind tables of functions that
/// cannot throw.
/// Constructs that cannot run on a target are rejected with an error naming
/// the symbol and the reason.
///
/// For an nvptx64 module (a GPU member) it adds the kernel entry
/// `ptx_kernel void __tc_kernel_NAME(ptr payload, i64 payload_size, ptr
/// target_args)`, which calls NAME_main, and keeps that and NAME_threads
/// (TC_IFUNC_THREADS) external; memcpy/memmove/memset calls become
/// intrinsics and libm calls are linked from libclc, internalized; then it
/// refuses what a GPU cannot run (docs/ifunc-abi.md, "GPU members").
llvm::Error prepareTargetModule(llvm::Module &M, const IfuncOptions &Opts);

/// Turns \p M into the source member: keeps NAME_payload_bound and
/// NAME_payload_init and what they reach; NAME_main is removed.
llvm::Error prepareSourceModule(llvm::Module &M, const IfuncOptions &Opts);

/// `tc-abi-check<name=NAME>`: checkIfuncABI as a module pass. Problems are
/// reported through the LLVMContext as errors (opt exits non-zero).
class IfuncABICheckPass : public llvm::PassInfoMixin<IfuncABICheckPass> {
public:
  explicit IfuncABICheckPass(IfuncOptions Opts) : Opts(std::move(Opts)) {}
  llvm::PreservedAnalyses run(llvm::Module &M, llvm::ModuleAnalysisManager &);

private:
  IfuncOptions Opts;
};

/// `tc-prepare-target<name=NAME[;g]>` and `tc-prepare-source<name=NAME[;g]>`.
class IfuncPreparePass : public llvm::PassInfoMixin<IfuncPreparePass> {
public:
  IfuncPreparePass(IfuncOptions Opts, bool Target)
      : Opts(std::move(Opts)), Target(Target) {}
  llvm::PreservedAnalyses run(llvm::Module &M, llvm::ModuleAnalysisManager &);

private:
  IfuncOptions Opts;
  bool Target;
};

/// Why sandboxed code trapped: the first argument of tc_sandbox_trap and
/// the kind passed to tc_sandbox_check. Part of the contract between the
/// instrumentation and the runtime (runtime/jit/Sandbox.cpp), not of the wire.
enum SandboxTrapCause : unsigned {
  SandboxTrapLoad = 1,        ///< A read outside the memory it may touch.
  SandboxTrapStore = 2,       ///< A write outside it.
  SandboxTrapCall = 3,        ///< An indirect call to a foreign address.
  SandboxTrapFuel = 4,        ///< The per-invocation fuel budget ran out.
  SandboxTrapStack = 5,       ///< Machine or shadow stack exhausted.
  SandboxTrapDivide = 6,      ///< Integer division by zero or overflow.
  SandboxTrapUnreachable = 7, ///< Reached an `unreachable` (UB in C).
  SandboxTrapInstruction = 8, ///< __builtin_trap() and friends.
  SandboxTrapTimeLimit = 9,   ///< Stopped by the runtime's time limit.
};

/// What sandboxModule lets the code call besides its own functions.
struct SandboxOptions {
  /// External functions allowed on top of defaultSandboxCalls(); their
  /// pointer arguments are not checked (printf and the like).
  std::vector<std::string> AllowCalls;
};

/// The external functions sandboxed code may call by default: value-only
/// libm functions, memcpy/memmove/memset/memcmp/bcmp (their ranges are
/// checked) and tc_msg_create/tc_msg_payload/tc_msg_send.
std::vector<std::string> defaultSandboxCalls();

/// Instruments \p M (a prepared target member) for sandboxed execution:
/// checked memory accesses, a shadow stack for escaping locals, checked
/// indirect calls, fuel on function entry and retreating edges, a stack
/// depth check on entry. Refuses (with one error naming every problem)
/// calls outside the policy, references to external variables, variadic
/// functions and intrinsics it cannot check. docs/ifunc-abi.md gives the
/// guarantees.
llvm::Error sandboxModule(llvm::Module &M, const SandboxOptions &Opts);

/// `tc-sandbox<allow=SYM;allow=SYM...>`: sandboxModule as a module pass.
class IfuncSandboxPass : public llvm::PassInfoMixin<IfuncSandboxPass> {
public:
  explicit IfuncSandboxPass(SandboxOptions Opts) : Opts(std::move(Opts)) {}
  llvm::PreservedAnalyses run(llvm::Module &M, llvm::ModuleAnalysisManager &);

private:
  SandboxOptions Opts;
};

/// Registers the passes above with \p PB (used by the opt plugin).
void registerIfuncPasses(llvm::PassBuilder &PB);

} // namespace tc

#endif // TC_PASSES_H
