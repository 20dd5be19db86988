//===- GPUMember.cpp - The nvptx64 member: kernel, libm, checks -----------===//
//
// A GPU member is the same ifunc compiled for nvptx64-nvidia-cuda. The
// target finds its code through a kernel entry tc-cc adds, runs it as many
// threads, has no C library and no stack to spare: what the member calls
// must be inside it. Here the kernel is generated, library calls a GPU can
// run are resolved inside the member (libclc's nvptx64 bitcode supplies
// libm), and what is left that a GPU cannot run is reported.
//
//===----------------------------------------------------------------------===//

#include "GPUMember.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/IR/CallingConv.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/IntrinsicInst.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/Module.h"
#include "llvm/IRReader/IRReader.h"
#include "llvm/Linker/Linker.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <vector>

using namespace llvm;

namespace tc {
namespace gpu {

std::string kernelName(StringRef Name) { return ("__tc_kernel_" + Name).str(); }

Expected<Function *> addKernel(Module &M, StringRef Name) {
  LLVMContext &Ctx = M.getContext();
  std::string Main = (Name + "_main").str();
  std::string Kernel = kernelName(Name);
  Function *F = M.getFunction(Main);
  Type *Ptr = PointerType::get(Ctx, 0);
  FunctionType *FT = FunctionType::get(
      Type::getVoidTy(Ctx), {Ptr, Type::getInt64Ty(Ctx), Ptr}, false);
  if (!F || F->isDeclaration())
    return createStringError("error: ifunc '%s': '%s' is not defined",
                             Name.str().c_str(), Main.c_str());
  if (F->getFunctionType() != FT)
    return createStringError("error: ifunc '%s': '%s' does not have the "
                             "type void (ptr, i64, ptr)",
                             Name.str().c_str(), Main.c_str());
  if (M.getNamedValue(Kernel))
    return createStringError("error: ifunc '%s': the module already defines "
                             "'%s', the kernel entry tc-cc generates",
                             Name.str().c_str(), Kernel.c_str());
  Function *K =
      Function::Create(FT, GlobalValue::ExternalLinkage, Kernel, M);
  K->setCallingConv(CallingConv::PTX_Kernel);
  K->addFnAttr(Attribute::NoUnwind);
  const char *ArgNames[] = {"payload", "payload_size", "target_args"};
  SmallVector<Value *, 3> Args;
  for (Argument &A : K->args()) {
    A.setName(ArgNames[A.getArgNo()]);
    Args.push_back(&A);
  }
  IRBuilder<> B(BasicBlock::Create(Ctx, "entry", K));
  B.CreateCall(F, Args);
  B.CreateRetVoid();
  return K;
}

namespace {

/// A C libm function and the OpenCL builtin libclc defines for it. Sig
/// gives the parameters: T the floating-point type, i int, P a pointer to
/// the next one. The OpenCL name is mangled from it (_Z3powdd, _Z5frexpfPi).
struct MathFn {
  const char *C;       ///< The double version's C name; float adds 'f'.
  const char *OpenCL;  ///< The builtin's name.
  const char *Sig;
  bool IntResult;      ///< Returns int (ilogb) rather than T.
};

// Value functions of <math.h> (C99 and the GNU exp10) that libclc's
// nvptx64 library defines with the same meaning. nearbyint is rint in the
// only rounding mode a GPU kernel has; scalbn is ldexp (FLT_RADIX 2).
constexpr MathFn MathFns[] = {
    {"acos", "acos", "T", false},     {"acosh", "acosh", "T", false},
    {"asin", "asin", "T", false},     {"asinh", "asinh", "T", false},
    {"atan", "atan", "T", false},     {"atan2", "atan2", "TT", false},
    {"atanh", "atanh", "T", false},   {"cbrt", "cbrt", "T", false},
    {"ceil", "ceil", "T", false},     {"copysign", "copysign", "TT", false},
    {"cos", "cos", "T", false},       {"cosh", "cosh", "T", false},
    {"erf", "erf", "T", false},       {"erfc", "erfc", "T", false},
    {"exp", "exp", "T", false},       {"exp10", "exp10", "T", false},
    {"exp2", "exp2", "T", false},     {"expm1", "expm1", "T", false},
    {"fabs", "fabs", "T", false},     {"fdim", "fdim", "TT", false},
    {"floor", "floor", "T", false},   {"fma", "fma", "TTT", false},
    {"fmax", "fmax", "TT", false},    {"fmin", "fmin", "TT", false},
    {"fmod", "fmod", "TT", false},    {"frexp", "frexp", "TPi", false},
    {"hypot", "hypot", "TT", false},  {"ilogb", "ilogb", "T", true},
    {"ldexp", "ldexp", "Ti", false},  {"lgamma", "lgamma", "T", false},
    {"log", "log", "T", false},       {"log10", "log10", "T", false},
    {"log1p", "log1p", "T", false},   {"log2", "log2", "T", false},
    {"logb", "logb", "T", false},     {"modf", "modf", "TPT", false},
    {"nearbyint", "rint", "T", false}, {"nextafter", "nextafter", "TT", false},
    {"pow", "pow", "TT", false},      {"remainder", "remainder", "TT", false},
    {"remquo", "remquo", "TTPi", false}, {"rint", "rint", "T", false},
    {"round", "round", "T", false},   {"scalbn", "ldexp", "Ti", false},
    {"sin", "sin", "T", false},       {"sinh", "sinh", "T", false},
    {"sqrt", "sqrt", "T", false},     {"tan", "tan", "T", false},
    {"tanh", "tanh", "T", false},     {"tgamma", "tgamma", "T", false},
    {"trunc", "trunc", "T", false},
};

/// Math intrinsics the NVPTX backend cannot select (it would need a libm
/// call), and the libclc builtin each becomes.
struct MathIntrinsic {
  Intrinsic::ID ID;
  const char *OpenCL;
  const char *Sig;
};
constexpr MathIntrinsic MathIntrinsics[] = {
    {Intrinsic::sin, "sin", "T"},     {Intrinsic::cos, "cos", "T"},
    {Intrinsic::tan, "tan", "T"},     {Intrinsic::asin, "asin", "T"},
    {Intrinsic::acos, "acos", "T"},   {Intrinsic::atan, "atan", "T"},
    {Intrinsic::atan2, "atan2", "TT"}, {Intrinsic::sinh, "sinh", "T"},
    {Intrinsic::cosh, "cosh", "T"},   {Intrinsic::tanh, "tanh", "T"},
    {Intrinsic::exp, "exp", "T"},     {Intrinsic::exp2, "exp2", "T"},
    {Intrinsic::exp10, "exp10", "T"}, {Intrinsic::log, "log", "T"},
    {Intrinsic::log2, "log2", "T"},   {Intrinsic::log10, "log10", "T"},
    {Intrinsic::pow, "pow", "TT"},    {Intrinsic::powi, "pown", "Ti"},
};

/// Intrinsics a GPU member must not keep: the NVPTX backend has no
/// lowering for them (it would call libm). Those of MathIntrinsics on f32
/// and f64 have been replaced before the check.
bool unlowerableIntrinsic(Intrinsic::ID ID) {
  for (const MathIntrinsic &MI : MathIntrinsics)
    if (MI.ID == ID)
      return true;
  switch (ID) {
  case Intrinsic::sincos:
  case Intrinsic::sincospi:
  case Intrinsic::lround:
  case Intrinsic::llround:
  case Intrinsic::lrint:
  case Intrinsic::llrint:
    return true;
  default:
    return false;
  }
}

/// The Itanium-mangled OpenCL name of \p Name for \p Sig over \p T (float
/// or double), or "" for another type.
std::string openCLName(StringRef Name, StringRef Sig, Type *T) {
  char TCode;
  if (T->isFloatTy())
    TCode = 'f';
  else if (T->isDoubleTy())
    TCode = 'd';
  else
    return "";
  std::string Out = "_Z" + std::to_string(Name.size()) + Name.str();
  for (char C : Sig)
    Out += C == 'T' ? TCode : C;
  return Out;
}

/// The LLVM function type of \p Sig over \p T.
FunctionType *signatureType(StringRef Sig, Type *T, bool IntResult) {
  LLVMContext &Ctx = T->getContext();
  SmallVector<Type *, 3> Params;
  for (size_t I = 0; I < Sig.size(); ++I) {
    if (Sig[I] == 'P') {
      Params.push_back(PointerType::get(Ctx, 0));
      ++I; // The pointee code.
    } else {
      Params.push_back(Sig[I] == 'T' ? T : Type::getInt32Ty(Ctx));
    }
  }
  return FunctionType::get(IntResult ? Type::getInt32Ty(Ctx) : T, Params,
                           false);
}

/// Declares libclc's \p OpenCL builtin for \p Sig over \p T; null when the
/// module already has that name with another type.
Function *declareOpenCL(Module &M, StringRef OpenCL, StringRef Sig, Type *T,
                        bool IntResult = false) {
  std::string Name = openCLName(OpenCL, Sig, T);
  if (Name.empty())
    return nullptr;
  FunctionType *FT = signatureType(Sig, T, IntResult);
  if (Function *F = M.getFunction(Name))
    return F->getFunctionType() == FT ? F : nullptr;
  return Function::Create(FT, GlobalValue::ExternalLinkage, Name, M);
}

/// Replaces each declaration of a C libm function of MathFns by the libclc
/// builtin; true if any was.
bool mapLibmCalls(Module &M) {
  StringMap<const MathFn *> ByName;
  for (const MathFn &F : MathFns) {
    ByName[F.C] = &F;
    ByName[(Twine(F.C) + "f").str()] = &F;
    ByName[(Twine(F.C) + "l").str()] = &F; // long double is double here.
  }
  bool Changed = false;
  for (Function &F : make_early_inc_range(M.functions())) {
    if (!F.isDeclaration() || F.isIntrinsic())
      continue;
    const MathFn *MF = ByName.lookup(F.getName());
    if (!MF)
      continue;
    // The float type from the name: sinf is float; sin and sinl double.
    Type *T = F.getName().ends_with("f") && F.getName() != MF->C
                  ? Type::getFloatTy(M.getContext())
                  : Type::getDoubleTy(M.getContext());
    if (F.getFunctionType() != signatureType(MF->Sig, T, MF->IntResult))
      continue; // Not the libm function: left for the check to name.
    Function *CL = declareOpenCL(M, MF->OpenCL, MF->Sig, T, MF->IntResult);
    if (!CL)
      continue;
    F.replaceAllUsesWith(CL);
    F.eraseFromParent();
    Changed = true;
  }
  return Changed;
}

/// A call of \p CL on \p Args, or, for vector arguments, one per lane.
Value *callLanes(IRBuilder<> &B, Function *CL, ArrayRef<Value *> Args,
                 Type *Ret) {
  auto *VT = dyn_cast<FixedVectorType>(Ret);
  if (!VT)
    return B.CreateCall(CL, Args);
  Value *Out = PoisonValue::get(VT);
  for (unsigned L = 0; L < VT->getNumElements(); ++L) {
    SmallVector<Value *, 3> Lane;
    for (Value *A : Args)
      Lane.push_back(A->getType()->isVectorTy() ? B.CreateExtractElement(A, L)
                                                : A);
    Out = B.CreateInsertElement(Out, B.CreateCall(CL, Lane), L);
  }
  return Out;
}

/// Replaces the math intrinsics NVPTX cannot lower (on f32 and f64, scalar
/// or fixed vectors) by libclc builtins, sincos by sin and cos, and
/// lround/llround/lrint/llrint by round/rint and a conversion; true if a
/// libclc builtin is now called.
bool mapMathIntrinsics(Module &M) {
  bool NeedLibrary = false;
  for (Function &F : make_early_inc_range(M.functions())) {
    if (!F.isIntrinsic())
      continue;
    Intrinsic::ID ID = F.getIntrinsicID();
    for (User *U : make_early_inc_range(F.users())) {
      auto *CI = dyn_cast<CallInst>(U);
      if (!CI || CI->getCalledFunction() != &F)
        continue;
      IRBuilder<> B(CI);
      Type *Ret = CI->getType();
      Value *New = nullptr;
      switch (ID) {
      case Intrinsic::lround:
      case Intrinsic::llround:
      case Intrinsic::lrint:
      case Intrinsic::llrint: {
        bool Round = ID == Intrinsic::lround || ID == Intrinsic::llround;
        Value *X = CI->getArgOperand(0);
        Value *R = B.CreateUnaryIntrinsic(
            Round ? Intrinsic::round : Intrinsic::rint, X);
        New = B.CreateFPToSI(R, Ret);
        break;
      }
      case Intrinsic::sincos: {
        Value *X = CI->getArgOperand(0);
        Type *T = X->getType()->getScalarType();
        Function *Sin = declareOpenCL(M, "sin", "T", T);
        Function *Cos = declareOpenCL(M, "cos", "T", T);
        if (!Sin || !Cos)
          break;
        Value *S = callLanes(B, Sin, {X}, X->getType());
        Value *C = callLanes(B, Cos, {X}, X->getType());
        New = B.CreateInsertValue(
            B.CreateInsertValue(PoisonValue::get(Ret), S, 0), C, 1);
        NeedLibrary = true;
        break;
      }
      default:
        for (const MathIntrinsic &MI : MathIntrinsics) {
          if (MI.ID != ID)
            continue;
          Type *T = Ret->getScalarType();
          if (ID == Intrinsic::powi &&
              !CI->getArgOperand(1)->getType()->isIntegerTy(32))
            break;
          Function *CL = declareOpenCL(M, MI.OpenCL, MI.Sig, T);
          if (!CL)
            break;
          SmallVector<Value *, 2> Args(CI->args());
          New = callLanes(B, CL, Args, Ret);
          NeedLibrary = true;
          break;
        }
      }
      if (!New)
        continue;
      if (auto *I = dyn_cast<Instruction>(New); I && isa<FPMathOperator>(I))
        I->copyFastMathFlags(CI);
      New->takeName(CI);
      CI->replaceAllUsesWith(New);
      CI->eraseFromParent();
    }
    if (F.use_empty())
      F.eraseFromParent();
  }
  return NeedLibrary;
}

/// Calls to memcpy/memmove/memset (left as calls by -fno-builtin) become
/// LLVM's intrinsics, which the NVPTX backend expands into loops.
void mapMemCalls(Module &M) {
  LLVMContext &Ctx = M.getContext();
  Type *Ptr = PointerType::get(Ctx, 0);
  Type *I64 = Type::getInt64Ty(Ctx);
  for (const char *Name : {"memcpy", "memmove", "memset"}) {
    Function *F = M.getFunction(Name);
    if (!F || !F->isDeclaration())
      continue;
    bool Set = StringRef(Name) == "memset";
    FunctionType *FT = FunctionType::get(
        Ptr, {Ptr, Set ? Type::getInt32Ty(Ctx) : Ptr, I64}, false);
    if (F->getFunctionType() != FT)
      continue;
    for (User *U : make_early_inc_range(F->users())) {
      auto *CI = dyn_cast<CallInst>(U);
      if (!CI || CI->getCalledFunction() != F)
        continue;
      IRBuilder<> B(CI);
      Value *Dst = CI->getArgOperand(0);
      Value *Len = CI->getArgOperand(2);
      if (Set)
        B.CreateMemSet(Dst, B.CreateTrunc(CI->getArgOperand(1), B.getInt8Ty()),
                       Len, MaybeAlign());
      else if (StringRef(Name) == "memcpy")
        B.CreateMemCpy(Dst, MaybeAlign(), CI->getArgOperand(1), MaybeAlign(),
                       Len);
      else
        B.CreateMemMove(Dst, MaybeAlign(), CI->getArgOperand(1), MaybeAlign(),
                        Len);
      CI->replaceAllUsesWith(Dst);
      CI->eraseFromParent();
    }
    if (F->use_empty())
      F->eraseFromParent();
  }
}

} // namespace

Error resolveDeviceCalls(Module &M, StringRef Library) {
  mapMemCalls(M);
  bool Need = mapLibmCalls(M);
  Need |= mapMathIntrinsics(M);
  if (!Need)
    return Error::success();
  SMDiagnostic Diag;
  std::unique_ptr<Module> Lib = getLazyIRFileModule(Library, Diag,
                                                    M.getContext());
  if (!Lib)
    return createStringError("libm on the GPU needs libclc's nvptx64 "
                             "bitcode '%s' (Debian package libclc-22): %s",
                             Library.str().c_str(),
                             Diag.getMessage().str().c_str());
  // Only its code comes in: its triple (nvptx64-unknown-unknown) and data
  // layout name the same target, and its module flags and named metadata
  // (OpenCL version, ident) mean nothing to the member.
  Lib->setTargetTriple(M.getTargetTriple());
  Lib->setDataLayout(M.getDataLayout());
  for (NamedMDNode &N : make_early_inc_range(Lib->named_metadata()))
    Lib->eraseNamedMetadata(&N);
  if (Linker::linkModules(M, std::move(Lib), Linker::LinkOnlyNeeded))
    return createStringError("cannot link libclc's '%s' into the GPU member",
                             Library.str().c_str());
  return Error::success();
}

namespace {

/// The first function that uses \p V, through constants if need be.
const Function *userFunction(const Value *V) {
  SmallVector<const Value *, 8> Work = {V};
  SmallPtrSet<const Value *, 8> Seen;
  while (!Work.empty()) {
    const Value *Cur = Work.pop_back_val();
    for (const User *U : Cur->users()) {
      if (const auto *I = dyn_cast<Instruction>(U))
        return I->getFunction();
      if (isa<Constant>(U) && Seen.insert(U).second)
        Work.push_back(U);
    }
  }
  return nullptr;
}

/// Reports call-graph cycles: direct calls, and an indirect call counted as
/// a call of every function whose address is taken. Tarjan's algorithm,
/// iterative so that a deep call chain cannot overflow tc-cc's stack.
void checkRecursion(Module &M, ReportFn Report) {
  std::vector<const Function *> Nodes;
  DenseMap<const Function *, unsigned> Index;
  for (const Function &F : M)
    if (!F.isDeclaration()) {
      Index[&F] = Nodes.size();
      Nodes.push_back(&F);
    }
  std::vector<unsigned> AddressTaken;
  for (unsigned I = 0; I < Nodes.size(); ++I)
    if (Nodes[I]->hasAddressTaken())
      AddressTaken.push_back(I);
  std::vector<std::vector<unsigned>> Edges(Nodes.size());
  std::vector<bool> Indirect(Nodes.size());
  for (unsigned I = 0; I < Nodes.size(); ++I)
    for (const Instruction &Inst : instructions(*Nodes[I])) {
      const auto *CB = dyn_cast<CallBase>(&Inst);
      if (!CB || CB->isInlineAsm())
        continue;
      const auto *Callee =
          dyn_cast<Function>(CB->getCalledOperand()->stripPointerCasts());
      if (!Callee) {
        Indirect[I] = true;
        llvm::append_range(Edges[I], AddressTaken);
      } else if (auto It = Index.find(Callee); It != Index.end()) {
        Edges[I].push_back(It->second);
      }
    }

  const unsigned None = ~0u;
  std::vector<unsigned> Order(Nodes.size(), None), Low(Nodes.size());
  std::vector<bool> OnStack(Nodes.size());
  std::vector<unsigned> Stack;
  unsigned Next = 0;
  for (unsigned Root = 0; Root < Nodes.size(); ++Root) {
    if (Order[Root] != None)
      continue;
    // (node, next edge to look at)
    std::vector<std::pair<unsigned, unsigned>> DFS = {{Root, 0}};
    Order[Root] = Low[Root] = Next++;
    Stack.push_back(Root);
    OnStack[Root] = true;
    while (!DFS.empty()) {
      auto &[N, E] = DFS.back();
      if (E < Edges[N].size()) {
        unsigned To = Edges[N][E++];
        if (Order[To] == None) {
          Order[To] = Low[To] = Next++;
          Stack.push_back(To);
          OnStack[To] = true;
          DFS.push_back({To, 0});
        } else if (OnStack[To]) {
          Low[N] = std::min(Low[N], Order[To]);
        }
        continue;
      }
      unsigned Done = N;
      DFS.pop_back();
      if (!DFS.empty())
        Low[DFS.back().first] = std::min(Low[DFS.back().first], Low[Done]);
      if (Low[Done] != Order[Done])
        continue;
      std::vector<unsigned> SCC;
      unsigned W;
      do {
        W = Stack.back();
        Stack.pop_back();
        OnStack[W] = false;
        SCC.push_back(W);
      } while (W != Done);
      bool Cycle = SCC.size() > 1 || llvm::is_contained(Edges[Done], Done);
      if (!Cycle)
        continue;
      std::sort(SCC.begin(), SCC.end());
      bool ThroughPointer = llvm::any_of(SCC, [&](unsigned I) {
        return Indirect[I];
      });
      std::string Names;
      for (unsigned I : SCC)
        Names += (Names.empty() ? "'" : ", '") + Nodes[I]->getName().str() +
                 "'";
      std::string What =
          SCC.size() == 1 ? "function " + Names + " calls itself"
                          : "functions " + Names + " call each other";
      if (ThroughPointer)
        What += " (an indirect call counts as a call of every function "
                "whose address is taken)";
      Report(Nodes[SCC.front()],
             What + ": a GPU member cannot recurse (the GPU's per-thread "
                    "stack is small and fixed); write it as a loop");
    }
  }
}

std::string nameOf(const Function *F) {
  return F ? "function '" + F->getName().str() + "'" : "the member";
}

} // namespace

void checkDeviceCode(Module &M, ReportFn Report) {
  for (const GlobalVariable &G : M.globals()) {
    if (G.getName().starts_with("llvm."))
      continue;
    if (G.isThreadLocal())
      Report(&G, "thread-local variable '" + G.getName() +
                     "' is not supported in a GPU member: a GPU has no "
                     "thread-local storage");
    else if (G.isDeclaration() && !G.use_empty())
      Report(userFunction(&G),
             nameOf(userFunction(&G)) + " references '" + G.getName() +
                 "', a variable outside the member, which a GPU member "
                 "cannot reach");
  }
  for (const Function &F : M) {
    if (F.isIntrinsic())
      continue;
    if (F.isDeclaration()) {
      if (F.use_empty())
        continue;
      const Function *By = userFunction(&F);
      std::string Who = nameOf(By);
      std::string Callee = "'" + F.getName().str() + "'";
      if (F.getName().starts_with("tc_"))
        Report(By, Who + " calls " + Callee +
                       " from libtc: ifunc code on a GPU does not inject "
                       "further messages");
      else if (F.isVarArg())
        Report(By, Who + " calls variadic function " + Callee +
                       ": a GPU member cannot make variadic calls");
      else if (F.getName() == "vprintf") // clang's nvptx form of printf
        Report(By, Who + " calls printf (vprintf on nvptx): a GPU member "
                         "cannot make variadic calls");
      else
        Report(By, Who + " calls " + Callee +
                       ", which a GPU member cannot call: only memcpy, "
                       "memmove, memset and the libm functions libclc "
                       "provides are resolved for the GPU "
                       "(docs/ifunc-abi.md)");
      continue;
    }
    if (F.isVarArg())
      Report(&F, "function '" + F.getName() +
                     "' is variadic: a GPU member cannot make variadic "
                     "calls");
    SmallPtrSet<const Function *, 4> Reported;
    bool WideAtomic = false;
    for (const Instruction &I : instructions(F)) {
      // PTX atomics are 32 and 64 bits (8 and 16 go through a 32-bit
      // compare-and-swap); LLVM 22 cannot lower wider ones for nvptx.
      Type *AT = nullptr;
      if (const auto *RMW = dyn_cast<AtomicRMWInst>(&I))
        AT = RMW->getValOperand()->getType();
      else if (const auto *CX = dyn_cast<AtomicCmpXchgInst>(&I))
        AT = CX->getNewValOperand()->getType();
      else if (const auto *L = dyn_cast<LoadInst>(&I); L && L->isAtomic())
        AT = L->getType();
      else if (const auto *S = dyn_cast<StoreInst>(&I); S && S->isAtomic())
        AT = S->getValueOperand()->getType();
      if (AT && !WideAtomic &&
          M.getDataLayout().getTypeSizeInBits(AT).getFixedValue() > 64) {
        WideAtomic = true;
        Report(&F, "function '" + F.getName() + "' uses a " +
                       Twine(M.getDataLayout()
                                 .getTypeSizeInBits(AT)
                                 .getFixedValue()) +
                       "-bit atomic operation: GPU atomics are 32 and 64 "
                       "bits (8 and 16 through a 32-bit compare-and-swap)");
      }
      const auto *CB = dyn_cast<CallBase>(&I);
      if (!CB)
        continue;
      if (const auto *IA = dyn_cast<InlineAsm>(CB->getCalledOperand())) {
        StringRef Asm = StringRef(IA->getAsmString()).trim();
        if (!Asm.empty())
          Report(&F, "function '" + F.getName() +
                         "' uses inline assembly ('" + Asm +
                         "'), which a GPU member cannot ship: tc cannot "
                         "check that it is PTX for every GPU the member "
                         "runs on (host assembly under #ifdef __x86_64__ "
                         "reaches the GPU compile too: guard it with "
                         "#ifndef __NVPTX__)");
        continue;
      }
      const Function *Callee = CB->getCalledFunction();
      if (!Callee) {
        if (CB->getFunctionType()->isVarArg())
          Report(&F, "function '" + F.getName() +
                         "' makes a variadic call through a pointer: a GPU "
                         "member cannot make variadic calls");
        continue;
      }
      if (Callee->isIntrinsic() &&
          unlowerableIntrinsic(Callee->getIntrinsicID()) &&
          Reported.insert(Callee).second)
        Report(&F, "function '" + F.getName() + "' uses '" +
                       Callee->getName() +
                       "', which has no GPU lowering (libclc covers float "
                       "and double only)");
    }
  }
  checkRecursion(M, Report);
}

} // namespace gpu
} // namespace tc
