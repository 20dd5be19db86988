//===- PassPlugin.cpp - The tc passes as new-PM passes and an opt plugin --===//
//
//   opt -load-pass-plugin=build/lib/TCPasses.so \
//       -passes='tc-abi-check<name=tsi>,tc-prepare-target<name=tsi>' in.ll
//   opt -load-pass-plugin=build/lib/TCPasses.so -passes=tc-sandbox in.ll
//
//===----------------------------------------------------------------------===//

#include "tc/Passes.h"

#include "llvm/IR/DiagnosticInfo.h"
#include "llvm/IR/Module.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Plugins/PassPlugin.h"

using namespace llvm;

namespace tc {

/// Prints \p E's lines exactly as tc-cc does, then fails the pipeline with
/// one error diagnostic (opt exits non-zero on it).
static void diagnose(Module &M, StringRef Pass, Error E) {
  std::string Text = toString(std::move(E));
  errs() << Text << "\n";
  size_t N = StringRef(Text).count('\n') + 1;
  M.getContext().diagnose(DiagnosticInfoGeneric(
      Pass + ": " + Twine(N) + (N == 1 ? " problem" : " problems"), DS_Error));
}

PreservedAnalyses IfuncABICheckPass::run(Module &M, ModuleAnalysisManager &) {
  if (Error E = checkIfuncABI(M, Opts))
    diagnose(M, "tc-abi-check", std::move(E));
  return PreservedAnalyses::all();
}

PreservedAnalyses IfuncPreparePass::run(Module &M, ModuleAnalysisManager &) {
  Error E = Target ? prepareTargetModule(M, Opts) : prepareSourceModule(M, Opts);
  if (E)
    diagnose(M, Target ? "tc-prepare-target" : "tc-prepare-source",
             std::move(E));
  return PreservedAnalyses::none();
}

PreservedAnalyses IfuncSandboxPass::run(Module &M, ModuleAnalysisManager &) {
  if (Error E = sandboxModule(M, Opts))
    diagnose(M, "tc-sandbox",
             createStringError("error: " + toString(std::move(E))));
  return PreservedAnalyses::none();
}

/// Parses `name=NAME;g;uwtable;libclc=PATH` pass parameters.
static Expected<IfuncOptions> parseOptions(StringRef Params, StringRef Pass) {
  IfuncOptions O;
  SmallVector<StringRef, 2> Parts;
  Params.split(Parts, ';', -1, false);
  for (StringRef P : Parts) {
    if (P.consume_front("name="))
      O.Name = P.str();
    else if (P == "g")
      O.KeepDebugInfo = true;
    else if (P == "uwtable")
      O.KeepUnwindTables = true;
    else if (P.consume_front("libclc="))
      O.DeviceMathLibrary = P.str();
    else
      return createStringError("%s: unknown parameter '%s' (expected "
                               "name=NAME, g, uwtable or libclc=PATH)",
                               Pass.str().c_str(), P.str().c_str());
  }
  if (O.Name.empty())
    return createStringError("%s: missing name=NAME", Pass.str().c_str());
  return O;
}

void registerIfuncPasses(PassBuilder &PB) {
  PB.registerPipelineParsingCallback(
      [](StringRef Name, ModulePassManager &MPM,
         ArrayRef<PassBuilder::PipelineElement>) {
        if (Name == "tc-sandbox" || Name.starts_with("tc-sandbox<")) {
          StringRef Params = Name.drop_front(strlen("tc-sandbox"));
          SandboxOptions O;
          if (!Params.empty()) {
            if (!Params.consume_front("<") || !Params.consume_back(">")) {
              errs() << "tc-sandbox: expected tc-sandbox or "
                        "tc-sandbox<allow=SYM;allow=SYM...>\n";
              return false;
            }
            SmallVector<StringRef, 4> Parts;
            Params.split(Parts, ';', -1, false);
            for (StringRef P : Parts) {
              if (!P.consume_front("allow=") || P.empty()) {
                errs() << "tc-sandbox: unknown parameter '" << P
                       << "' (expected allow=SYM)\n";
                return false;
              }
              O.AllowCalls.push_back(P.str());
            }
          }
          MPM.addPass(IfuncSandboxPass(std::move(O)));
          return true;
        }
        for (StringRef Pass :
             {"tc-abi-check", "tc-prepare-target", "tc-prepare-source"}) {
          if (!Name.consume_front(Pass))
            continue;
          StringRef Params = Name;
          if (!Params.consume_front("<") || !Params.consume_back(">")) {
            errs() << Pass << ": expected " << Pass << "<name=NAME>\n";
            return false;
          }
          Expected<IfuncOptions> O = parseOptions(Params, Pass);
          if (!O) {
            errs() << toString(O.takeError()) << "\n";
            return false;
          }
          if (Pass == "tc-abi-check")
            MPM.addPass(IfuncABICheckPass(std::move(*O)));
          else
            MPM.addPass(
                IfuncPreparePass(std::move(*O), Pass == "tc-prepare-target"));
          return true;
        }
        return false;
      });
}

} // namespace tc

extern "C" LLVM_ATTRIBUTE_WEAK PassPluginLibraryInfo llvmGetPassPluginInfo() {
  return {LLVM_PLUGIN_API_VERSION, "TCPasses", "0.1",
          [](PassBuilder &PB) { tc::registerIfuncPasses(PB); }};
}
