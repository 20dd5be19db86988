//===- Sandbox.cpp - Confine, restrict and meter an ifunc's target code ---===//
//
// The target runs this on a member's bitcode before codegen when it executes
// in sandbox mode (docs/ifunc-abi.md, "Sandboxed execution"). Every memory
// access that is not provably inside one of the function's own stack
// objects or globals is checked against the ranges the runtime publishes in
// its sandbox state inline (target_args region, payload, shadow stack, and
// the writable range the slow path matched last), then out of line
// (tc_sandbox_check: declared regions, grants, the module's globals).
// Stack objects whose address escapes move to a shadow stack the runtime
// owns, so no pointer the ifunc computes can reach a return address or a
// spilled register. Calls are limited to the module's own functions and to
// an allow-list of external symbols; indirect calls are checked against the
// module's function table. A fuel counter is decremented on function entry
// and on every retreating CFG edge; the machine stack depth is checked on
// function entry. Every failed check calls tc_sandbox_trap (noreturn).
//
//===----------------------------------------------------------------------===//

#include "tc/Passes.h"

#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Analysis/ValueTracking.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/IntrinsicInst.h"
#include "llvm/IR/MDBuilder.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Transforms/Utils/BasicBlockUtils.h"

using namespace llvm;

namespace tc {

namespace {

/// Offsets in the runtime's TcSandboxState (runtime/jit/Sandbox.h).
enum StateField : unsigned {
  PayloadLo = 0,
  RegionLo = 16,
  ShadowLo = 32,
  FuelOff = 48,
  StackLimitOff = 56,
  ShadowSPOff = 64,
  CacheLo = 72,
};

/// A pointer argument of an allowed external function that the sandbox
/// checks before the call: \p Arg addresses \p SizeArg bytes (or
/// \p FixedSize if SizeArg < 0); a null pointer is let through if
/// \p Nullable.
struct PtrArg {
  int Arg;
  int SizeArg;
  uint64_t FixedSize;
  bool Write;
  bool Nullable;
};

struct CallSpec {
  const char *Name;
  SmallVector<PtrArg, 2> Ptrs;
  int CallbackArg = -1; ///< Must be null or one of the module's functions.
};

const SmallVector<CallSpec, 0> &builtinCalls() {
  static const SmallVector<CallSpec, 0> Specs = [] {
    SmallVector<CallSpec, 0> S;
    for (const char *N : {"memcpy", "memmove"})
      S.push_back({N, {{0, 2, 0, true, false}, {1, 2, 0, false, false}}});
    S.push_back({"memset", {{0, 2, 0, true, false}}});
    for (const char *N : {"memcmp", "bcmp"})
      S.push_back({N, {{0, 2, 0, false, false}, {1, 2, 0, false, false}}});
    // libm functions that take and return values only.
    for (const char *N :
         {"sin",   "cos",       "tan",   "asin",   "acos",  "atan",
          "atan2", "sinh",      "cosh",  "tanh",   "asinh", "acosh",
          "atanh", "exp",       "exp2",  "expm1",  "log",   "log2",
          "log10", "log1p",     "pow",   "sqrt",   "cbrt",  "hypot",
          "fabs",  "floor",     "ceil",  "round",  "trunc", "rint",
          "nearbyint", "fmod",  "remainder", "fmin", "fmax", "fma",
          "copysign", "ldexp",  "scalbn", "erf",   "erfc",  "tgamma",
          "lround", "llround",  "lrint", "llrint", "fdim",  "logb",
          "ilogb"}) {
      S.push_back({N, {}});
    }
    // Their float variants (sinf, ...): the names must outlive the specs.
    static std::vector<std::string> F;
    for (size_t I = 0, E = S.size(); I < E; ++I)
      if (S[I].Ptrs.empty())
        F.push_back(std::string(S[I].Name) + "f");
    for (const std::string &N : F)
      S.push_back({N.c_str(), {}});
    // tc's own send API, as an ifunc uses it to forward itself.
    S.push_back({"tc_msg_payload", {{1, -1, 8, true, true}}});
    S.push_back({"tc_msg_create", {{1, 2, 0, false, false},
                                   {3, -1, 8, true, false}}});
    CallSpec Send{"tc_msg_send", {}};
    Send.CallbackArg = 2;
    S.push_back(Send);
    return S;
  }();
  return Specs;
}

bool isMemoryFreeIntrinsic(Intrinsic::ID ID) {
  switch (ID) {
  case Intrinsic::lifetime_start:
  case Intrinsic::lifetime_end:
  case Intrinsic::stacksave:
  case Intrinsic::stackrestore:
  case Intrinsic::assume:
  case Intrinsic::experimental_noalias_scope_decl:
  case Intrinsic::invariant_start:
  case Intrinsic::invariant_end:
  case Intrinsic::prefetch:
  case Intrinsic::sideeffect:
  case Intrinsic::pseudoprobe:
  case Intrinsic::dbg_declare:
  case Intrinsic::dbg_value:
  case Intrinsic::dbg_label:
    return true;
  default:
    return false;
  }
}

class Sandboxer {
public:
  Sandboxer(Module &M, const SandboxOptions &O)
      : M(M), DL(M.getDataLayout()), Ctx(M.getContext()),
        I64(Type::getInt64Ty(Ctx)), I32(Type::getInt32Ty(Ctx)),
        Ptr(PointerType::get(Ctx, 0)) {
    for (const CallSpec &S : builtinCalls())
      Specs[S.Name] = &S;
    for (const std::string &S : O.AllowCalls)
      Extra.insert(S);
  }

  Error run();

private:
  Error validate();
  void declareRuntime();
  void buildTables();
  void instrument(Function &F);
  void replaceByvalArgs(Function &F);
  void moveEscapingAllocas(Function &F, Value *St,
                           SmallVectorImpl<AllocaInst *> &Dynamic);
  bool isSafeAccess(Value *P, uint64_t Size) const;
  void emitCheck(Instruction *Before, Value *St, Value *P, Value *Size,
                 unsigned Kind, bool Nullable = false);
  /// Loads the ranges that stay fixed while a function runs (a nested
  /// message restores them before it returns) once, after \p St.
  void loadFixedRanges(Value *St);
  struct FixedRange {
    Value *Lo, *Hi, *Width;
  };
  SmallVector<FixedRange, 3> Fixed;
  void emitTrapIf(Instruction *Before, Value *Cond, unsigned Cause,
                  Value *Addr = nullptr);
  Value *field(IRBuilder<> &B, Value *St, unsigned Off) {
    return B.CreateConstInBoundsGEP1_64(Type::getInt8Ty(Ctx), St, Off);
  }

  Module &M;
  const DataLayout &DL;
  LLVMContext &Ctx;
  Type *I64, *I32;
  PointerType *Ptr;
  StringMap<const CallSpec *> Specs;
  StringSet<> Extra;
  FunctionCallee StateFn, CheckFn, TrapFn, CallCheckFn;
  GlobalVariable *Globals = nullptr, *Funcs = nullptr;
  uint64_t NumGlobals = 0, NumFuncs = 0;
  /// Allocas that stay on the machine stack: every access is a load,
  /// store or mem intrinsic at a constant, in-bounds offset.
  SmallPtrSet<const AllocaInst *, 16> Kept;
};

/// The access \p U makes through pointer operand \p P at constant offset
/// \p Off of an object of \p ObjSize bytes stays inside it.
bool inBoundsUse(const DataLayout &DL, const Use &U, int64_t Off,
                 uint64_t ObjSize) {
  auto Fits = [&](uint64_t N) {
    return Off >= 0 && uint64_t(Off) + N <= ObjSize;
  };
  const User *Usr = U.getUser();
  if (const auto *L = dyn_cast<LoadInst>(Usr))
    return !L->isVolatile() && Fits(DL.getTypeStoreSize(L->getType()));
  if (const auto *S = dyn_cast<StoreInst>(Usr))
    return U.getOperandNo() == S->getPointerOperandIndex() &&
           Fits(DL.getTypeStoreSize(S->getValueOperand()->getType()));
  if (const auto *MI = dyn_cast<MemIntrinsic>(Usr)) {
    const auto *Len = dyn_cast<ConstantInt>(MI->getLength());
    return U.getOperandNo() < 2 && Len && Fits(Len->getZExtValue());
  }
  if (const auto *II = dyn_cast<IntrinsicInst>(Usr))
    return II->isLifetimeStartOrEnd();
  return false;
}

/// True when every use of \p A is an in-bounds access at a constant offset
/// (through at most one constant GEP), so its address never escapes.
bool staysOnStack(const DataLayout &DL, AllocaInst *A) {
  if (!A->isStaticAlloca())
    return false;
  std::optional<TypeSize> Size = A->getAllocationSize(DL);
  if (!Size || Size->isScalable())
    return false;
  uint64_t ObjSize = Size->getFixedValue();
  for (const Use &U : A->uses()) {
    if (const auto *G = dyn_cast<GetElementPtrInst>(U.getUser())) {
      APInt Off(DL.getIndexTypeSizeInBits(G->getType()), 0);
      if (G->getPointerOperand() != A ||
          !G->accumulateConstantOffset(DL, Off))
        return false;
      for (const Use &GU : G->uses())
        if (!inBoundsUse(DL, GU, Off.getSExtValue(), ObjSize))
          return false;
      continue;
    }
    if (!inBoundsUse(DL, U, 0, ObjSize))
      return false;
  }
  return true;
}

Error Sandboxer::validate() {
  std::string Problems;
  auto Problem = [&](const Twine &T) {
    if (!Problems.empty())
      Problems += "; ";
    Problems += T.str();
  };
  StringSet<> Reported;
  for (GlobalVariable &G : M.globals())
    if (G.isDeclaration() && !G.getName().starts_with("llvm.") &&
        !G.use_empty() && Reported.insert(G.getName()).second)
      Problem("refers to external variable '" + G.getName() +
              "', which the sandbox cannot confine");
  for (Function &F : M) {
    if (!F.isDeclaration())
      continue;
    if (F.isIntrinsic())
      continue;
    bool Allowed = Specs.count(F.getName()) || Extra.count(F.getName());
    for (const Use &U : F.uses()) {
      const auto *CB = dyn_cast<CallBase>(U.getUser());
      bool IsCallee = CB && CB->isCallee(&U);
      if (!IsCallee) {
        if (Reported.insert(F.getName()).second)
          Problem("takes the address of external function '" + F.getName() +
                  "', which the sandbox does not allow");
      } else if (!Allowed && Reported.insert(F.getName()).second) {
        Problem("calls '" + F.getName() +
                "', which the sandbox policy does not allow");
      }
    }
  }
  for (Function &F : M) {
    if (F.isDeclaration())
      continue;
    if (F.isVarArg())
      Problem("function '" + F.getName() +
              "' is variadic, which the sandbox does not support");
    for (Instruction &I : instructions(F)) {
      if (auto *BO = dyn_cast<BinaryOperator>(&I))
        if (BO->getType()->isVectorTy() &&
            (BO->getOpcode() == Instruction::SDiv ||
             BO->getOpcode() == Instruction::UDiv ||
             BO->getOpcode() == Instruction::SRem ||
             BO->getOpcode() == Instruction::URem)) {
          Problem("function '" + F.getName() +
                  "' divides integer vectors, which the sandbox does not "
                  "check");
          break;
        }
      auto *II = dyn_cast<IntrinsicInst>(&I);
      if (!II)
        continue;
      Intrinsic::ID ID = II->getIntrinsicID();
      if (isa<MemIntrinsic>(II) || isMemoryFreeIntrinsic(ID) ||
          ID == Intrinsic::trap || ID == Intrinsic::ubsantrap ||
          ID == Intrinsic::debugtrap || !II->mayReadOrWriteMemory())
        continue;
      if (Reported.insert(II->getCalledFunction()->getName()).second)
        Problem("function '" + F.getName() + "' uses intrinsic '" +
                II->getCalledFunction()->getName() +
                "', which the sandbox does not check");
    }
  }
  if (Problems.empty())
    return Error::success();
  return createStringError(Problems);
}

void Sandboxer::declareRuntime() {
  Type *Void = Type::getVoidTy(Ctx);
  StateFn = M.getOrInsertFunction("tc_sandbox_state",
                                  FunctionType::get(Ptr, false));
  CheckFn = M.getOrInsertFunction(
      "tc_sandbox_check",
      FunctionType::get(Void, {I64, I64, I32, Ptr, I64}, false));
  CallCheckFn = M.getOrInsertFunction(
      "tc_sandbox_check_call", FunctionType::get(Void, {Ptr, Ptr, I64}, false));
  TrapFn = M.getOrInsertFunction(
      "tc_sandbox_trap", FunctionType::get(Void, {I32, I64}, false));
  for (FunctionCallee C : {StateFn, CheckFn, CallCheckFn, TrapFn}) {
    auto *F = cast<Function>(C.getCallee());
    F->addFnAttr(Attribute::NoUnwind);
    if (C.getCallee() == TrapFn.getCallee()) {
      F->addFnAttr(Attribute::NoReturn);
      F->addFnAttr(Attribute::Cold);
    }
  }
  cast<Function>(StateFn.getCallee())
      ->setMemoryEffects(MemoryEffects::none());
}

void Sandboxer::buildTables() {
  // {address, size, writable} per defined global; the module's functions.
  StructType *Entry = StructType::get(Ctx, {Ptr, I64, I64});
  SmallVector<Constant *, 16> GEntries;
  for (GlobalVariable &G : M.globals()) {
    if (G.isDeclaration() || G.getName().starts_with("llvm."))
      continue;
    uint64_t Size = DL.getTypeAllocSize(G.getValueType());
    GEntries.push_back(ConstantStruct::get(
        Entry, {&G, ConstantInt::get(I64, Size),
                ConstantInt::get(I64, G.isConstant() ? 0 : 1)}));
  }
  SmallVector<Constant *, 16> FEntries;
  for (Function &F : M)
    if (!F.isDeclaration())
      FEntries.push_back(&F);
  NumGlobals = GEntries.size();
  NumFuncs = FEntries.size();
  auto *GT = ArrayType::get(Entry, NumGlobals);
  Globals = new GlobalVariable(M, GT, true, GlobalValue::PrivateLinkage,
                               ConstantArray::get(GT, GEntries),
                               "tc.sandbox.globals");
  auto *FT = ArrayType::get(Ptr, NumFuncs);
  Funcs = new GlobalVariable(M, FT, true, GlobalValue::PrivateLinkage,
                             ConstantArray::get(FT, FEntries),
                             "tc.sandbox.functions");
}

bool Sandboxer::isSafeAccess(Value *P, uint64_t Size) const {
  APInt Off(64, 0);
  Value *Base = P->stripAndAccumulateConstantOffsets(DL, Off,
                                                     /*AllowNonInbounds=*/true);
  int64_t O = Off.getSExtValue();
  if (O < 0)
    return false;
  if (auto *A = dyn_cast<AllocaInst>(Base)) {
    if (!Kept.count(A))
      return false;
    return uint64_t(O) + Size <= A->getAllocationSize(DL)->getFixedValue();
  }
  return false;
}

void Sandboxer::emitTrapIf(Instruction *Before, Value *Cond, unsigned Cause,
                           Value *Addr) {
  MDBuilder MDB(Ctx);
  Instruction *Then = SplitBlockAndInsertIfThen(
      Cond, Before->getIterator(), /*Unreachable=*/true,
      MDB.createUnlikelyBranchWeights());
  IRBuilder<> B(Then);
  B.CreateCall(TrapFn, {ConstantInt::get(I32, Cause),
                        Addr ? Addr : ConstantInt::get(I64, 0)});
}

void Sandboxer::emitCheck(Instruction *Before, Value *St, Value *P,
                          Value *Size, unsigned Kind, bool Nullable) {
  IRBuilder<> B(Before);
  Value *A = B.CreatePtrToInt(P, I64);
  Value *N = B.CreateZExtOrTrunc(Size, I64);
  Value *Ok = Nullable ? B.CreateICmpEQ(A, ConstantInt::get(I64, 0)) : nullptr;
  auto In = [&](Value *Lo, Value *Hi, Value *Width) {
    Value *R = B.CreateAnd(B.CreateICmpULE(B.CreateSub(A, Lo), Width),
                           B.CreateICmpULE(N, B.CreateSub(Hi, A)));
    Ok = Ok ? B.CreateOr(Ok, R) : R;
  };
  for (const FixedRange &R : Fixed)
    In(R.Lo, R.Hi, R.Width);
  // The slow path's last match changes under the function: load it here.
  Value *CLo = B.CreateLoad(I64, field(B, St, CacheLo));
  Value *CHi = B.CreateLoad(I64, field(B, St, CacheLo + 8));
  In(CLo, CHi, B.CreateSub(CHi, CLo));
  MDBuilder MDB(Ctx);
  Instruction *Then = SplitBlockAndInsertIfThen(
      B.CreateNot(Ok), Before->getIterator(), /*Unreachable=*/false,
      MDB.createUnlikelyBranchWeights());
  IRBuilder<> TB(Then);
  TB.CreateCall(CheckFn, {A, N, ConstantInt::get(I32, Kind), Globals,
                          ConstantInt::get(I64, NumGlobals)});
}

void Sandboxer::loadFixedRanges(Value *St) {
  Fixed.clear();
  IRBuilder<> B(cast<Instruction>(St)->getNextNode());
  for (unsigned R : {RegionLo, PayloadLo, ShadowLo}) {
    Value *Lo = B.CreateLoad(I64, field(B, St, R));
    Value *Hi = B.CreateLoad(I64, field(B, St, R + 8));
    Fixed.push_back({Lo, Hi, B.CreateSub(Hi, Lo)});
  }
}

void Sandboxer::replaceByvalArgs(Function &F) {
  // A byval argument is a copy in the caller's outgoing area: give the
  // body its own copy, which the alloca rules below then place.
  IRBuilder<> B(&*F.getEntryBlock().getFirstInsertionPt());
  for (Argument &Arg : F.args()) {
    if (!Arg.hasByValAttr() || Arg.use_empty())
      continue;
    Type *T = Arg.getParamByValType();
    AllocaInst *Copy = B.CreateAlloca(T, nullptr, Arg.getName() + ".copy");
    Copy->setAlignment(Arg.getParamAlign().valueOrOne());
    Arg.replaceAllUsesWith(Copy);
    B.CreateMemCpy(Copy, Copy->getAlign(), &Arg, Arg.getParamAlign(),
                   DL.getTypeAllocSize(T));
  }
}

void Sandboxer::moveEscapingAllocas(Function &F, Value *St,
                                    SmallVectorImpl<AllocaInst *> &Dynamic) {
  SmallVector<AllocaInst *, 8> Static;
  for (Instruction &I : instructions(F))
    if (auto *A = dyn_cast<AllocaInst>(&I)) {
      if (Kept.count(A))
        continue;
      if (A->isStaticAlloca())
        Static.push_back(A);
      else
        Dynamic.push_back(A);
    }
  if (Static.empty())
    return;
  // One shadow frame for the static ones, carved on entry (after St).
  auto *StI = cast<Instruction>(St);
  IRBuilder<> B(StI->getNextNode());
  uint64_t Frame = 0;
  SmallVector<uint64_t, 8> Offsets;
  for (AllocaInst *A : Static) {
    uint64_t Align = std::max<uint64_t>(A->getAlign().value(), 16);
    Frame = alignTo(Frame, Align);
    Offsets.push_back(Frame);
    Frame += A->getAllocationSize(DL)->getFixedValue();
  }
  Frame = alignTo(Frame, 16);
  Value *SP = B.CreateLoad(I64, field(B, St, ShadowSPOff), "shadow.sp");
  Value *New = B.CreateAnd(B.CreateSub(SP, ConstantInt::get(I64, Frame)),
                           ConstantInt::get(I64, ~uint64_t(15)));
  Value *Lo = B.CreateLoad(I64, field(B, St, ShadowLo));
  Value *Over = B.CreateOr(B.CreateICmpULT(New, Lo), B.CreateICmpUGT(New, SP));
  Instruction *After = B.CreateStore(New, field(B, St, ShadowSPOff));
  // Every A's offset is relative to the (16-aligned) new SP; larger
  // alignments are rounded by the frame's layout only up to 16.
  IRBuilder<> RB(After->getNextNode());
  Value *Base = RB.CreateIntToPtr(New, Ptr, "shadow.frame");
  for (unsigned I = 0; I < Static.size(); ++I) {
    Value *P = RB.CreateConstInBoundsGEP1_64(Type::getInt8Ty(Ctx), Base,
                                             Offsets[I]);
    SmallVector<Instruction *, 4> Dead;
    for (User *U : Static[I]->users())
      if (auto *II = dyn_cast<IntrinsicInst>(U))
        if (II->isLifetimeStartOrEnd())
          Dead.push_back(II);
    for (Instruction *D : Dead)
      D->eraseFromParent();
    P->takeName(Static[I]);
    Static[I]->replaceAllUsesWith(P);
    Static[I]->eraseFromParent();
  }
  emitTrapIf(After, Over, SandboxTrapStack);
  // Pop on every return.
  for (BasicBlock &BB : F)
    if (auto *R = dyn_cast<ReturnInst>(BB.getTerminator())) {
      IRBuilder<> PB(R);
      PB.CreateStore(SP, field(PB, St, ShadowSPOff));
    }
}

void Sandboxer::instrument(Function &F) {
  replaceByvalArgs(F);
  // Retreating edges, before any block is split: the fuel check goes in
  // front of the terminator of each block that has one.
  SmallVector<Instruction *, 8> BackEdges;
  {
    SmallPtrSet<BasicBlock *, 32> Visited, OnStack;
    SmallVector<std::pair<BasicBlock *, succ_iterator>, 32> Stack;
    BasicBlock *Entry = &F.getEntryBlock();
    Visited.insert(Entry);
    OnStack.insert(Entry);
    Stack.push_back({Entry, succ_begin(Entry)});
    SmallPtrSet<BasicBlock *, 8> Marked;
    while (!Stack.empty()) {
      auto &[BB, It] = Stack.back();
      if (It == succ_end(BB)) {
        OnStack.erase(BB);
        Stack.pop_back();
        continue;
      }
      BasicBlock *S = *It++;
      if (OnStack.count(S)) {
        if (Marked.insert(BB).second)
          BackEdges.push_back(BB->getTerminator());
      } else if (Visited.insert(S).second) {
        OnStack.insert(S);
        Stack.push_back({S, succ_begin(S)});
      }
    }
  }

  // Decide which allocas stay on the machine stack.
  for (Instruction &I : instructions(F))
    if (auto *A = dyn_cast<AllocaInst>(&I))
      if (staysOnStack(DL, A))
        Kept.insert(A);

  // Collect the work before changing the CFG.
  SmallVector<Instruction *, 32> Work;
  for (Instruction &I : instructions(F))
    if (auto *II = dyn_cast<IntrinsicInst>(&I);
        II && II->isLifetimeStartOrEnd())
      continue; // Erased with the allocas that move.
    else if (isa<LoadInst, StoreInst, AtomicRMWInst, AtomicCmpXchgInst, CallBase,
            UnreachableInst>(I) ||
        (isa<BinaryOperator>(I) &&
         (I.getOpcode() == Instruction::SDiv ||
          I.getOpcode() == Instruction::UDiv ||
          I.getOpcode() == Instruction::SRem ||
          I.getOpcode() == Instruction::URem)))
      Work.push_back(&I);

  // Entry: the state, fuel and the machine stack's depth.
  BasicBlock &EB = F.getEntryBlock();
  IRBuilder<> B(&*EB.getFirstNonPHIOrDbgOrAlloca());
  Value *St = B.CreateCall(StateFn, {}, "sandbox");
  loadFixedRanges(St);
  SmallVector<AllocaInst *, 2> Dynamic;
  moveEscapingAllocas(F, St, Dynamic);
  {
    IRBuilder<> EBld(cast<Instruction>(St)->getNextNode());
    Value *FuelP = field(EBld, St, FuelOff);
    Value *Fuel = EBld.CreateSub(EBld.CreateLoad(I64, FuelP),
                                 ConstantInt::get(I64, 1));
    Instruction *Store = EBld.CreateStore(Fuel, FuelP);
    Value *Out = EBld.CreateICmpSLT(Fuel, ConstantInt::get(I64, 0));
    Function *FA = Intrinsic::getOrInsertDeclaration(
        &M, Intrinsic::frameaddress, {Ptr});
    Value *Frame = EBld.CreatePtrToInt(
        EBld.CreateCall(FA, {ConstantInt::get(I32, 0)}), I64);
    Value *Limit = EBld.CreateLoad(I64, field(EBld, St, StackLimitOff));
    Value *Deep = EBld.CreateICmpULT(Frame, Limit);
    Instruction *Next = cast<Instruction>(Deep)->getNextNode();
    (void)Store;
    emitTrapIf(Next, Deep, SandboxTrapStack, Frame);
    emitTrapIf(cast<Instruction>(Deep)->getParent()->getTerminator(), Out,
               SandboxTrapFuel);
  }

  for (AllocaInst *A : Dynamic) {
    // Variable-sized objects come from the shadow stack too.
    IRBuilder<> DB(A);
    Value *N = DB.CreateZExtOrTrunc(A->getArraySize(), I64);
    Value *Bytes = DB.CreateMul(
        N, ConstantInt::get(I64, DL.getTypeAllocSize(A->getAllocatedType())));
    Value *SP = DB.CreateLoad(I64, field(DB, St, ShadowSPOff));
    Value *New = DB.CreateAnd(DB.CreateSub(SP, Bytes),
                              ConstantInt::get(I64, ~uint64_t(15)));
    Value *Lo = DB.CreateLoad(I64, field(DB, St, ShadowLo));
    Value *Over = DB.CreateOr(DB.CreateICmpULT(New, Lo),
                              DB.CreateICmpUGT(New, SP));
    Instruction *Store = DB.CreateStore(New, field(DB, St, ShadowSPOff));
    Value *P = DB.CreateIntToPtr(New, Ptr);
    P->takeName(A);
    A->replaceAllUsesWith(P);
    A->eraseFromParent();
    emitTrapIf(Store, Over, SandboxTrapStack);
  }
  if (!Dynamic.empty()) {
    // Restore the shadow stack pointer on return (the static frame, if
    // any, already does).
    IRBuilder<> SB(cast<Instruction>(St)->getNextNode());
    Value *SP0 = SB.CreateLoad(I64, field(SB, St, ShadowSPOff));
    for (BasicBlock &BB : F)
      if (auto *R = dyn_cast<ReturnInst>(BB.getTerminator())) {
        IRBuilder<> PB(R);
        PB.CreateStore(SP0, field(PB, St, ShadowSPOff));
      }
  }

  for (Instruction *I : Work) {
    auto Check = [&](Value *P, uint64_t Size, unsigned Kind) {
      if (!isSafeAccess(P, Size))
        emitCheck(I, St, P, ConstantInt::get(I64, Size), Kind);
    };
    if (auto *L = dyn_cast<LoadInst>(I)) {
      Check(L->getPointerOperand(), DL.getTypeStoreSize(L->getType()),
            SandboxTrapLoad);
    } else if (auto *S = dyn_cast<StoreInst>(I)) {
      Check(S->getPointerOperand(),
            DL.getTypeStoreSize(S->getValueOperand()->getType()),
            SandboxTrapStore);
    } else if (auto *RMW = dyn_cast<AtomicRMWInst>(I)) {
      Check(RMW->getPointerOperand(),
            DL.getTypeStoreSize(RMW->getValOperand()->getType()),
            SandboxTrapStore);
    } else if (auto *CX = dyn_cast<AtomicCmpXchgInst>(I)) {
      Check(CX->getPointerOperand(),
            DL.getTypeStoreSize(CX->getNewValOperand()->getType()),
            SandboxTrapStore);
    } else if (isa<UnreachableInst>(I)) {
      IRBuilder<> UB(I);
      UB.CreateCall(TrapFn, {ConstantInt::get(I32, SandboxTrapUnreachable),
                             ConstantInt::get(I64, 0)});
    } else if (auto *BO = dyn_cast<BinaryOperator>(I)) {
      Value *D = BO->getOperand(1);
      if (auto *C = dyn_cast<ConstantInt>(D))
        if (!C->isZero() && !C->isMinusOne())
          continue;
      IRBuilder<> DB(I);
      Value *Bad = DB.CreateICmpEQ(D, ConstantInt::get(D->getType(), 0));
      if (BO->getOpcode() == Instruction::SDiv ||
          BO->getOpcode() == Instruction::SRem) {
        unsigned W = D->getType()->getIntegerBitWidth();
        Value *Min = DB.CreateICmpEQ(
            BO->getOperand(0),
            ConstantInt::get(D->getType(), APInt::getSignedMinValue(W)));
        Value *M1 = DB.CreateICmpEQ(D, ConstantInt::getSigned(D->getType(), -1));
        Bad = DB.CreateOr(Bad, DB.CreateAnd(Min, M1));
      }
      emitTrapIf(I, Bad, SandboxTrapDivide);
    } else if (auto *CB = dyn_cast<CallBase>(I)) {
      if (auto *MI = dyn_cast<MemIntrinsic>(CB)) {
        auto *Len = dyn_cast<ConstantInt>(MI->getLength());
        uint64_t CLen = Len ? Len->getZExtValue() : 0;
        if (!Len || !isSafeAccess(MI->getDest(), CLen))
          emitCheck(I, St, MI->getDest(), MI->getLength(), SandboxTrapStore);
        if (auto *MT = dyn_cast<MemTransferInst>(MI))
          if (!Len || !isSafeAccess(MT->getSource(), CLen))
            emitCheck(I, St, MT->getSource(), MI->getLength(),
                      SandboxTrapLoad);
        continue;
      }
      Function *Callee = CB->getCalledFunction();
      if (Callee && Callee->isIntrinsic()) {
        Intrinsic::ID ID = Callee->getIntrinsicID();
        if (ID == Intrinsic::trap || ID == Intrinsic::ubsantrap ||
            ID == Intrinsic::debugtrap) {
          IRBuilder<> TB(I);
          TB.CreateCall(TrapFn, {ConstantInt::get(I32, SandboxTrapInstruction),
                                 ConstantInt::get(I64, 0)});
        }
        continue;
      }
      if (!Callee) {
        IRBuilder<> CB2(I);
        CB2.CreateCall(CallCheckFn, {CB->getCalledOperand(), Funcs,
                                     ConstantInt::get(I64, NumFuncs)});
      } else if (Callee->isDeclaration()) {
        auto It = Specs.find(Callee->getName());
        if (It != Specs.end()) {
          for (const PtrArg &PA : It->second->Ptrs) {
            Value *Size = PA.SizeArg >= 0 ? CB->getArgOperand(PA.SizeArg)
                                          : ConstantInt::get(I64, PA.FixedSize);
            emitCheck(I, St, CB->getArgOperand(PA.Arg), Size,
                      PA.Write ? SandboxTrapStore : SandboxTrapLoad,
                      PA.Nullable);
          }
          if (It->second->CallbackArg >= 0) {
            Value *Cb = CB->getArgOperand(It->second->CallbackArg);
            IRBuilder<> CB2(I);
            Value *IsNull = CB2.CreateICmpEQ(Cb, ConstantPointerNull::get(Ptr));
            Instruction *Then = SplitBlockAndInsertIfThen(
                CB2.CreateNot(IsNull), I->getIterator(), false);
            IRBuilder<> TB(Then);
            TB.CreateCall(CallCheckFn,
                          {Cb, Funcs, ConstantInt::get(I64, NumFuncs)});
          }
        }
      }
      // Calls to the module's functions: those are instrumented themselves;
      // byval copies are made by the callee from the caller's object, so
      // the caller's pointer is checked here.
      for (unsigned A = 0; A < CB->arg_size(); ++A)
        if (CB->isByValArgument(A))
          Check(CB->getArgOperand(A),
                DL.getTypeAllocSize(CB->getParamByValType(A)),
                SandboxTrapLoad);
    }
  }

  for (Instruction *T : BackEdges) {
    IRBuilder<> FB(T);
    Value *FuelP = field(FB, St, FuelOff);
    Value *Fuel =
        FB.CreateSub(FB.CreateLoad(I64, FuelP), ConstantInt::get(I64, 1));
    FB.CreateStore(Fuel, FuelP);
    emitTrapIf(T, FB.CreateICmpSLT(Fuel, ConstantInt::get(I64, 0)),
               SandboxTrapFuel);
  }
}

Error Sandboxer::run() {
  if (M.getNamedMetadata("tc.sandboxed"))
    return createStringError("module is already sandboxed");
  if (Error E = validate())
    return E;
  declareRuntime();
  buildTables();
  SmallVector<Function *, 16> Fns;
  for (Function &F : M)
    if (!F.isDeclaration())
      Fns.push_back(&F);
  for (Function *F : Fns) {
    Kept.clear();
    instrument(*F);
  }
  M.getOrInsertNamedMetadata("tc.sandboxed");
  std::string Broken;
  raw_string_ostream OS(Broken);
  if (verifyModule(M, &OS))
    return createStringError("sandboxed module is invalid: " + OS.str());
  return Error::success();
}

} // namespace

Error sandboxModule(Module &M, const SandboxOptions &Opts) {
  return Sandboxer(M, Opts).run();
}

std::vector<std::string> defaultSandboxCalls() {
  std::vector<std::string> Out;
  for (const CallSpec &S : builtinCalls())
    Out.push_back(S.Name);
  return Out;
}

} // namespace tc
