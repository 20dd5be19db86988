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
};

/// Checks that NAME_main, NAME_payload_bound and NAME_payload_init exist, are
/// defined, externally visible, and have exactly the ABI signatures for the
/// module's data layout. All problems are reported, one per line, each
/// `[file:line: ]error: ifunc 'NAME': ...`.
llvm::Error checkIfuncABI(llvm::Module &M, const IfuncOptions &Opts);

/// Turns \p M into the target member: keeps NAME_main and what it reaches,
/// internalizes and strips the rest (source-side functions included), drops
/// llvm.used/llvm.compiler.used and, unless KeepDebugInfo, debug info.
/// Constructs that cannot run on a target are rejected with an error naming
/// the symbol and the reason.
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

/// Registers the passes above with \p PB (used by the opt plugin).
void registerIfuncPasses(llvm::PassBuilder &PB);

} // namespace tc

#endif // TC_PASSES_H
