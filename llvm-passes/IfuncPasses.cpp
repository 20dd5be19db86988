//===- IfuncPasses.cpp - Check an ifunc's ABI and cut it down to ship -----===//
//
// The ABI check compares each entry point with the signature the ifunc ABI
// gives it, for the module's own data layout (size_t is i64 on x86_64 and
// aarch64, i32 on 32-bit targets). Member preparation internalizes
// everything but the role's entry points, lets GlobalDCE drop what they do
// not reach, and then rejects what survives and cannot run on a target
// (thread-locals, sections, commons, aliases to external symbols, inline
// assembly), naming the symbol and the reason.
//
//===----------------------------------------------------------------------===//

#include "tc/Passes.h"

#include "GPUMember.h"

#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/DebugInfo.h"
#include "llvm/IR/DebugInfoMetadata.h"
#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Triple.h"
#include "llvm/Transforms/IPO/GlobalDCE.h"

using namespace llvm;

namespace tc {

namespace {

/// Collects diagnostics, one per line, each `file[:line]: error: ifunc
/// 'NAME': ...`: the line of the definition when debug info has it, else
/// the module's source file alone (a missing entry point has no line).
class Diagnostics {
  std::string Name;
  std::string File;
  std::string Text;

public:
  Diagnostics(const Module &M, StringRef Name)
      : Name(Name.str()), File(M.getSourceFileName()) {}
  void error(const GlobalValue *At, const Twine &Msg) {
    if (!Text.empty())
      Text += "\n";
    size_t Start = Text.size();
    if (const auto *F = dyn_cast_or_null<Function>(At))
      if (const DISubprogram *SP = F->getSubprogram())
        Text += (SP->getFilename() + ":" + Twine(SP->getLine()) + ": ").str();
    if (const auto *G = dyn_cast_or_null<GlobalVariable>(At)) {
      SmallVector<DIGlobalVariableExpression *, 1> GVEs;
      G->getDebugInfo(GVEs);
      if (!GVEs.empty())
        if (DIGlobalVariable *V = GVEs.front()->getVariable())
          Text += (V->getFilename() + ":" + Twine(V->getLine()) + ": ").str();
    }
    if (Text.size() == Start && !File.empty())
      Text += File + ": ";
    Text += ("error: ifunc '" + Name + "': " + Msg).str();
  }
  Error take() {
    if (Text.empty())
      return Error::success();
    return createStringError(Text);
  }
};

std::string typeName(Type *T) {
  std::string S;
  raw_string_ostream OS(S);
  T->print(OS);
  return S;
}

/// One entry point of the ABI: name suffix, C signature and LLVM types.
struct EntrySpec {
  const char *Suffix;
  const char *CReturn;
  const char *CSignature; ///< For "expected N (...)" messages.
  Type *Ret;
  SmallVector<Type *, 4> Params;
  SmallVector<const char *, 4> ParamNames;
};

SmallVector<EntrySpec, 3> entrySpecs(Module &M) {
  LLVMContext &Ctx = M.getContext();
  Type *Ptr = PointerType::get(Ctx, 0);
  Type *SizeT = M.getDataLayout().getIntPtrType(Ctx, 0);
  Type *Void = Type::getVoidTy(Ctx);
  Type *Int = Type::getInt32Ty(Ctx);
  return {
      {"_main", "void", "void *payload, size_t payload_size, void *target_args", Void,
       {Ptr, SizeT, Ptr}, {"void *", "size_t", "void *"}},
      {"_payload_bound", "size_t", "void *source_args, size_t source_args_size", SizeT,
       {Ptr, SizeT}, {"void *", "size_t"}},
      {"_payload_init", "int",
       "void *source_args, size_t source_args_size, void *payload, size_t "
       "*payload_size",
       Int,
       {Ptr, SizeT, Ptr, Ptr},
       {"void *", "size_t", "void *", "size_t *"}},
  };
}

std::string describe(Type *T, Type *SizeT, const char *CName) {
  if (StringRef(CName) == "size_t")
    return "size_t (" + typeName(SizeT) + " on this target)";
  if (StringRef(CName) == "int")
    return "int (i32)";
  return std::string(CName);
}

void checkEntry(Module &M, const IfuncOptions &Opts, const EntrySpec &S,
                Diagnostics &D) {
  std::string Sym = Opts.Name + S.Suffix;
  Type *SizeT = M.getDataLayout().getIntPtrType(M.getContext(), 0);
  GlobalValue *GV = M.getNamedValue(Sym);
  if (!GV) {
    D.error(nullptr, "'" + Sym + "' is missing, expected " + S.CReturn +
                         " " + Sym + "(" + S.CSignature + ")");
    return;
  }
  auto *F = dyn_cast<Function>(GV);
  if (!F) {
    D.error(GV, "'" + Sym + "' is not a function");
    return;
  }
  if (F->isDeclaration()) {
    D.error(F, "'" + Sym + "' is declared but not defined");
    return;
  }
  if (F->hasLocalLinkage())
    D.error(F, "'" + Sym + "' has internal linkage; it must be externally "
                           "visible (remove 'static')");
  else if (F->hasHiddenVisibility())
    D.error(F, "'" + Sym + "' has hidden visibility; it must be externally "
                           "visible");
  if (F->isVarArg())
    D.error(F, "'" + Sym + "' is variadic, expected (" + S.CSignature + ")");
  FunctionType *FT = F->getFunctionType();
  if (FT->getNumParams() != S.Params.size()) {
    D.error(F, formatv("'{0}' takes {1} parameter{2}, expected {3} ({4})", Sym,
                       FT->getNumParams(), FT->getNumParams() == 1 ? "" : "s",
                       S.Params.size(), S.CSignature));
  } else {
    for (unsigned I = 0; I < S.Params.size(); ++I)
      if (FT->getParamType(I) != S.Params[I])
        D.error(F, formatv("'{0}' parameter {1} is {2}, expected {3}", Sym,
                           I + 1, typeName(FT->getParamType(I)),
                           describe(S.Params[I], SizeT, S.ParamNames[I])));
  }
  if (FT->getReturnType() != S.Ret) {
    D.error(F, formatv("'{0}' returns {1}, expected {2}", Sym,
                       typeName(FT->getReturnType()),
                       describe(S.Ret, SizeT, S.CReturn)));
  }
}

/// Keeps \p Keep external, internalizes every other definition, drops the
/// "used" lists and runs GlobalDCE.
void internalizeAndStrip(Module &M, const StringSet<> &Keep) {
  for (const char *Used : {"llvm.used", "llvm.compiler.used"})
    if (GlobalVariable *G = M.getNamedGlobal(Used))
      G->eraseFromParent();
  for (GlobalValue &GV : M.global_values()) {
    if (GV.isDeclaration() || Keep.count(GV.getName()))
      continue;
    if (GV.getName().starts_with("llvm."))
      continue;
    // Private stays private: it keeps string constants out of the symbol
    // table of the object the target JIT links.
    if (!GV.hasLocalLinkage()) {
      GV.setLinkage(GlobalValue::InternalLinkage);
      GV.setVisibility(GlobalValue::DefaultVisibility);
    }
    if (auto *GO = dyn_cast<GlobalObject>(&GV))
      GO->setComdat(nullptr);
  }
  PassBuilder PB;
  LoopAnalysisManager LAM;
  FunctionAnalysisManager FAM;
  CGSCCAnalysisManager CGAM;
  ModuleAnalysisManager MAM;
  PB.registerModuleAnalyses(MAM);
  PB.registerCGSCCAnalyses(CGAM);
  PB.registerFunctionAnalyses(FAM);
  PB.registerLoopAnalyses(LAM);
  PB.crossRegisterProxies(LAM, FAM, CGAM, MAM);
  ModulePassManager MPM;
  MPM.addPass(GlobalDCEPass());
  MPM.run(M, MAM);
}

/// The CPU attributes Clang puts on every function of a translation unit.
constexpr const char *CPUAttrs[] = {"target-cpu", "target-features",
                                    "tune-cpu"};

bool sameCPUAttrs(const Function &A, const Function &B) {
  return llvm::all_of(CPUAttrs, [&](const char *Kind) {
    return A.getFnAttribute(Kind) == B.getFnAttribute(Kind);
  });
}

/// Things only the compiler host cares about; dropping them shrinks every
/// shipped member and changes no behaviour. \p Entry is the role's first
/// entry point: its CPU attributes are the translation unit's defaults.
void dropHostOnlyMetadata(Module &M, const Function &Entry, bool GPU) {
  for (const char *Name : {"llvm.ident", "llvm.errno.tbaa"})
    if (NamedMDNode *N = M.getNamedMetadata(Name))
      M.eraseNamedMetadata(N);
  M.setSourceFileName("");
  // The target JIT compiles for its own CPU, so the defaults would only pin
  // the member to the compiler's idea of a baseline CPU. A function whose
  // attributes differ (__attribute__((target("avx2"))) behind a runtime CPU
  // check) keeps them: without them its intrinsics could not be selected on
  // a host that lacks the feature.
  // A GPU member is lowered for the target's GPU as a whole (NVPTX has one
  // subtarget per module): every function loses them, libclc's too.
  SmallVector<Function *, 16> Default;
  for (Function &F : M)
    if (GPU || &F == &Entry || sameCPUAttrs(F, Entry))
      Default.push_back(&F);
  for (Function *F : Default)
    for (const char *Kind : CPUAttrs)
      F->removeFnAttr(Kind);
  // Clang spells out the stack-protector buffer size on every function;
  // without the attribute LLVM uses 8 (SSPLayoutInfo::DefaultSSPBufferSize,
  // private to LLVM), so that value says nothing.
  for (Function &F : M)
    if (F.getFnAttribute("stack-protector-buffer-size").getValueAsString() ==
        "8")
      F.removeFnAttr("stack-protector-buffer-size");
}

/// Removes the module flags named \p Names.
void dropModuleFlags(Module &M, std::initializer_list<StringRef> Names) {
  NamedMDNode *Flags = M.getModuleFlagsMetadata();
  if (!Flags)
    return;
  SmallVector<Module::ModuleFlagEntry, 8> Keep;
  M.getModuleFlagsMetadata(Keep);
  Flags->eraseFromParent();
  for (const Module::ModuleFlagEntry &E : Keep)
    if (!llvm::is_contained(Names, E.Key->getString()))
      M.addModuleFlag(E.Behavior, E.Key->getString(), E.Val);
}

/// No asynchronous unwind tables for functions that cannot throw (every C
/// ifunc): nothing unwinds through ifunc code (a fault is reported, a
/// sandbox trap longjmps past it), and a target that links .eh_frame maps,
/// protects and registers it at every load, a fifth of a warm first
/// contact (docs/tc-cc.md, "Unwind tables"). A function that may throw
/// keeps the tables exceptions need whatever its attributes say.
void dropUnwindTables(Module &M) {
  for (Function &F : M)
    if (F.doesNotThrow())
      F.removeFnAttr(Attribute::UWTable);
  dropModuleFlags(M, {"uwtable"});
}

/// Rejects what survived stripping and cannot run where the code goes.
/// A GPU member's thread-locals and inline assembly are checked by
/// gpu::checkDeviceCode, with the GPU's reasons.
void rejectUnshippable(Module &M, const StringSet<> &WasCommon,
                       const StringSet<> &AliasToExternal, bool GPU,
                       Diagnostics &D) {
  if (!M.getModuleInlineAsm().empty())
    D.error(nullptr, "module-level inline assembly cannot ship: it is written "
                     "for one ISA and runs outside any function");
  for (GlobalVariable &G : M.globals()) {
    if (G.getName().starts_with("llvm."))
      continue;
    if (G.isThreadLocal() && !GPU)
      D.error(&G, "thread-local variable '" + G.getName() +
                      "' is not supported: threads of the target process "
                      "are not the ifunc's");
    if (G.hasSection())
      D.error(&G, "global '" + G.getName() + "' is in explicit section '" +
                      G.getSection() +
                      "', which a JIT-loaded member cannot honour");
    if (WasCommon.count(G.getName()))
      D.error(&G, "common symbol '" + G.getName() +
                      "' cannot ship: give it an initializer or make it "
                      "static (-fno-common)");
  }
  for (Function &F : M) {
    if (F.hasSection())
      D.error(&F, "function '" + F.getName() + "' is in explicit section '" +
                      F.getSection() +
                      "', which a JIT-loaded member cannot honour");
    for (Instruction &I : instructions(F))
      if (auto *CB = dyn_cast<CallBase>(&I); CB && !GPU)
        if (auto *IA = dyn_cast<InlineAsm>(CB->getCalledOperand()))
          if (!StringRef(IA->getAsmString()).trim().empty())
            D.error(&F, "function '" + F.getName() +
                            "' uses inline assembly ('" +
                            StringRef(IA->getAsmString()).trim() +
                            "'), which may not run on every CPU of its "
                            "triple");
  }
  for (GlobalAlias &A : M.aliases())
    if (AliasToExternal.count(A.getName()))
      D.error(&A, "alias '" + A.getName() +
                      "' points to an external symbol, which a target "
                      "cannot bind");
  for (GlobalIFunc &I : M.ifuncs())
    D.error(&I, "GNU ifunc '" + I.getName() +
                    "' cannot ship: its resolver runs at load time");
}

/// \p GPU: an nvptx64 member; Keep then holds the kernel entry, and library
/// calls are resolved and checked for a GPU (GPUMember.h). \p Entry is the
/// function whose CPU attributes are the translation unit's defaults.
Error prepare(Module &M, const IfuncOptions &Opts, ArrayRef<StringRef> Keep,
              StringRef Entry, bool GPU) {
  Diagnostics D(M, Opts.Name);
  for (const char *List : {"llvm.global_ctors", "llvm.global_dtors"}) {
    GlobalVariable *G = M.getNamedGlobal(List);
    if (!G || !G->hasInitializer())
      continue;
    auto *Arr = dyn_cast<ConstantArray>(G->getInitializer());
    bool Ctor = StringRef(List).contains("ctors");
    for (unsigned I = 0; Arr && I < Arr->getNumOperands(); ++I) {
      auto *E = dyn_cast<ConstantStruct>(Arr->getOperand(I));
      Value *Fn = E ? E->getOperand(1)->stripPointerCasts() : nullptr;
      D.error(dyn_cast_or_null<GlobalValue>(Fn),
              Twine("global ") + (Ctor ? "constructor" : "destructor") + " '" +
                  (Fn ? Fn->getName() : StringRef("?")) +
                  "' would never run on a target");
    }
    G->eraseFromParent();
  }

  StringSet<> KeepSet, WasCommon, AliasToExternal;
  for (StringRef K : Keep)
    KeepSet.insert(K);
  for (GlobalVariable &G : M.globals())
    if (G.hasCommonLinkage())
      WasCommon.insert(G.getName());
  for (GlobalAlias &A : M.aliases())
    if (auto *Target = dyn_cast<GlobalValue>(
            A.getAliasee()->stripPointerCastsAndAliases()))
      if (Target->isDeclaration())
        AliasToExternal.insert(A.getName());

  internalizeAndStrip(M, KeepSet);
  if (GPU) {
    // After stripping: only what the kernel reaches needs the library.
    if (Error E = gpu::resolveDeviceCalls(
            M, Opts.DeviceMathLibrary.empty() ? StringRef(TC_LIBCLC_NVPTX)
                                              : StringRef(Opts.DeviceMathLibrary)))
      return E;
    internalizeAndStrip(M, KeepSet);
    // Named metadata only the compiler host reads.
    for (const char *Name : {"opencl.ocl.version", "nvvmir.version"})
      if (NamedMDNode *N = M.getNamedMetadata(Name))
        M.eraseNamedMetadata(N);
    gpu::checkDeviceCode(M, [&](const GlobalValue *At, const Twine &Msg) {
      D.error(At, Msg);
    });
  }
  rejectUnshippable(M, WasCommon, AliasToExternal, GPU, D);
  if (!Opts.KeepDebugInfo) {
    StripDebugInfo(M);
    // Debug-only module flags outlive StripDebugInfo.
    dropModuleFlags(M, {"Dwarf Version", "Debug Info Version",
                        "debug-info-assignment-tracking"});
  }
  if (!Opts.KeepUnwindTables)
    dropUnwindTables(M);
  dropHostOnlyMetadata(M, *M.getFunction(Entry), GPU);
  if (Error E = D.take())
    return E;
  std::string Broken;
  raw_string_ostream OS(Broken);
  if (verifyModule(M, &OS))
    return createStringError("ifunc '" + Opts.Name +
                             "': prepared module is invalid: " + OS.str());
  return Error::success();
}

} // namespace

/// NAME_threads, when the ifunc defines it, is TC_IFUNC_THREADS's
/// `const uint32_t NAME_threads = N;` with N > 0: a GPU target reads N from
/// the member's initializer at load time.
static void checkThreads(Module &M, const IfuncOptions &Opts,
                         Diagnostics &D) {
  std::string Sym = Opts.Name + "_threads";
  GlobalValue *GV = M.getNamedValue(Sym);
  if (!GV)
    return;
  auto *G = dyn_cast<GlobalVariable>(GV);
  auto Complain = [&](const Twine &What) {
    D.error(GV, "'" + Sym + "' " + What + ", expected 'const uint32_t " +
                    Sym + " = N;' with N > 0 (TC_IFUNC_THREADS)");
  };
  if (!G) {
    Complain("is not a variable");
    return;
  }
  if (G->isDeclaration()) {
    Complain("is declared but not defined");
    return;
  }
  if (!G->isConstant()) {
    Complain("is not constant");
    return;
  }
  if (G->hasLocalLinkage() || G->hasHiddenVisibility()) {
    Complain("is not externally visible");
    return;
  }
  auto *N = dyn_cast<ConstantInt>(G->getInitializer());
  if (!N || !N->getType()->isIntegerTy(32)) {
    Complain("is not a 32-bit integer");
    return;
  }
  if (N->isZero())
    Complain("is 0");
}

Error checkIfuncABI(Module &M, const IfuncOptions &Opts) {
  Diagnostics D(M, Opts.Name);
  for (const EntrySpec &S : entrySpecs(M))
    checkEntry(M, Opts, S, D);
  checkThreads(M, Opts, D);
  return D.take();
}

Error prepareTargetModule(Module &M, const IfuncOptions &Opts) {
  std::string Main = Opts.Name + "_main";
  if (Function *F = M.getFunction(Main); !F || F->isDeclaration())
    return createStringError("error: ifunc '%s': '%s' is not defined",
                             Opts.Name.c_str(), Main.c_str());
  if (!M.getTargetTriple().isNVPTX())
    return prepare(M, Opts, {Main}, Main, /*GPU=*/false);
  // The GPU member: the target launches the kernel entry, which calls
  // NAME_main (internal now, so the target's optimizer inlines it); it
  // reads NAME_threads, the launch shape, if the ifunc defines it.
  Expected<Function *> K = gpu::addKernel(M, Opts.Name);
  if (!K)
    return K.takeError();
  std::string Kernel = (*K)->getName().str();
  std::string Threads = Opts.Name + "_threads";
  SmallVector<StringRef, 2> Keep = {Kernel};
  if (GlobalVariable *G = M.getNamedGlobal(Threads); G && !G->isDeclaration())
    Keep.push_back(Threads);
  return prepare(M, Opts, Keep, Main, /*GPU=*/true);
}

Error prepareSourceModule(Module &M, const IfuncOptions &Opts) {
  std::string Bound = Opts.Name + "_payload_bound";
  std::string Init = Opts.Name + "_payload_init";
  for (const std::string &S : {Bound, Init})
    if (Function *F = M.getFunction(S); !F || F->isDeclaration())
      return createStringError("error: ifunc '%s': '%s' is not defined",
                               Opts.Name.c_str(), S.c_str());
  return prepare(M, Opts, {Bound, Init}, Bound, /*GPU=*/false);
}

} // namespace tc
