//===- Ptx.cpp - nvptx64 bitcode members to PTX, in-process ---------------===//

#include "gpu/Ptx.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/AsmParser/Parser.h"
#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/DerivedTypes.h"
#include "llvm/IR/Function.h"
#include "llvm/IR/GlobalVariable.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Triple.h"

#include <map>
#include <mutex>

using namespace llvm;

namespace tc {

unsigned ptxVersionForDriver(int DriverVersion) {
  // NVIDIA's PTX release history: the first CUDA release that loads each
  // PTX ISA version, newest first. Newer drivers get the newest listed.
  static const struct {
    int Cuda;
    unsigned Ptx;
  } Table[] = {
      {13010, 91}, {13000, 90}, {12090, 88}, {12080, 87}, {12070, 86},
      {12050, 85}, {12040, 84}, {12030, 83}, {12020, 82}, {12010, 81},
      {12000, 80}, {11080, 78}, {11070, 77}, {11060, 76}, {11050, 75},
      {11040, 74}, {11030, 73}, {11020, 72}, {11010, 71}, {11000, 70},
  };
  for (const auto &E : Table)
    if (DriverVersion >= E.Cuda)
      return E.Ptx;
  return 0;
}

std::optional<unsigned> parseSmArch(StringRef Arch, char *Suffix) {
  if (!Arch.consume_front("sm_"))
    return std::nullopt;
  char S = 0;
  if (Arch.ends_with("a") || Arch.ends_with("f")) {
    S = Arch.back();
    Arch = Arch.drop_back();
  }
  unsigned V;
  if (Arch.size() < 2 || Arch.size() > 4 ||
      Arch.find_first_not_of("0123456789") != StringRef::npos ||
      Arch.getAsInteger(10, V) || V < 10)
    return std::nullopt;
  if (Suffix)
    *Suffix = S;
  return V;
}

std::string ptxKernelName(StringRef Name) {
  return ("__tc_kernel_" + Name).str();
}

namespace {

std::once_flag InitNvptx;

void initNvptx() {
  std::call_once(InitNvptx, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}

/// One codegen pipeline for one sm and PTX version, built once and run on
/// many modules; it writes PTX text into Out.
struct Pipeline {
  std::unique_ptr<TargetMachine> TM;
  SmallVector<char, 0> Out;
  raw_svector_ostream OS{Out};
  legacy::PassManager PM; ///< Refers to TM and OS: declared after them.

  std::string run(Module &M) {
    Out.clear();
    PM.run(M);
    return std::string(Out.data(), Out.size());
  }
};

/// The PTX version in \p Ptx's `.version` line (78 for 7.8), or 0.
unsigned versionInPtx(StringRef Ptx) {
  size_t At = Ptx.find(".version ");
  if (At == StringRef::npos)
    return 0;
  StringRef V = Ptx.substr(At + 9).take_until(
      [](char C) { return C == '\n' || C == '\r'; });
  auto [Major, Minor] = V.trim().split('.');
  unsigned A, B;
  if (Major.getAsInteger(10, A) || Minor.getAsInteger(10, B))
    return 0;
  return A * 10 + B;
}

} // namespace

struct PtxCompiler::Impl {
  const Target *T = nullptr;
  std::string DeviceArch; ///< The sm plain members are lowered for.
  unsigned Cap = 0;       ///< The driver's PTX version (0: LLVM's defaults).
  unsigned Version = 0;   ///< What the device's pipeline writes.
  std::vector<unsigned> KnownPtx;   ///< LLVM's ptxNN features, ascending.
  std::vector<std::string> KnownSm; ///< LLVM's sm_ processors.

  std::mutex Mu; ///< Serialises compiles: everything below.
  std::map<std::string, std::unique_ptr<Pipeline>> Pipelines; ///< by sm
  std::unique_ptr<LLVMContext> Ctx;
  unsigned CtxModules = 0;

  /// The pipeline for \p Arch, made on first use. Its PTX version is
  /// Cap, which must not be older than what \p Arch needs (LLVM stops the
  /// process on such a target machine, so it is checked first with one
  /// that writes LLVM's default, the oldest the architecture has).
  Expected<Pipeline &> pipeline(StringRef Arch) {
    auto It = Pipelines.find(Arch.str());
    if (It != Pipelines.end())
      return *It->second;
    Expected<std::unique_ptr<Pipeline>> P = make(Arch, 0);
    if (!P)
      return P.takeError();
    if (unsigned Version = Cap) {
      LLVMContext Ctx;
      Module Empty("tc.ptx.probe", Ctx);
      unsigned Min = versionInPtx(lower(Empty, **P));
      if (!Min)
        return createStringError("LLVM's NVPTX target wrote no .version");
      if (Min > Version)
        return createStringError(
            formatv("{0} needs PTX {1}.{2}; the driver reads up to {3}.{4}",
                    Arch, Min / 10, Min % 10, Version / 10, Version % 10)
                .str());
      P = make(Arch, Version);
      if (!P)
        return P.takeError();
    }
    Pipeline &Ref = **P;
    Pipelines.emplace(Arch.str(), std::move(*P));
    return Ref;
  }

  Expected<std::unique_ptr<Pipeline>> make(StringRef Arch, unsigned V) {
    std::string Features;
    if (V)
      Features = formatv("+ptx{0}", V).str();
    TargetOptions TO;
    std::unique_ptr<TargetMachine> TM(T->createTargetMachine(
        Triple(NvptxTriple), Arch, Features, TO, std::nullopt, std::nullopt,
        CodeGenOptLevel::Default));
    if (!TM)
      return createStringError("LLVM cannot make an NVPTX target machine "
                               "for " +
                               Arch);
    auto P = std::make_unique<Pipeline>();
    P->TM = std::move(TM);
    if (P->TM->addPassesToEmitFile(P->PM, P->OS, nullptr,
                                   CodeGenFileType::AssemblyFile))
      return createStringError("LLVM's NVPTX target cannot emit PTX");
    return std::move(P);
  }

  LLVMContext &context() {
    if (!Ctx || ++CtxModules > 256) {
      Ctx = std::make_unique<LLVMContext>();
      CtxModules = 1;
    }
    return *Ctx;
  }

  /// Retargets \p M to \p P's machine and lowers it; with \p Optimize,
  /// runs LLVM's -O2 module pipeline for that machine first.
  std::string lower(Module &M, Pipeline &P, bool Optimize = false) {
    M.setTargetTriple(Triple(NvptxTriple));
    M.setDataLayout(P.TM->createDataLayout());
    for (Function &F : M) {
      F.removeFnAttr("target-cpu");
      F.removeFnAttr("target-features");
      F.removeFnAttr("tune-cpu");
    }
    if (Optimize)
      optimize(M, *P.TM);
    return P.run(M);
  }

  /// tc-cc optimized each function of the member but left NAME_main a
  /// function of its own, internal (docs/ifunc-abi.md, "GPU members"): the
  /// target inlines it into the kernel, where NVPTX's lowering knows the
  /// kernel's pointers are global memory (ld.global, not generic loads),
  /// and simplifies what that exposes. The -O2 pipeline, with the NVPTX
  /// machine's own passes (as clang runs it for nvptx64).
  static void optimize(Module &M, TargetMachine &TM) {
    LoopAnalysisManager LAM;
    FunctionAnalysisManager FAM;
    CGSCCAnalysisManager CGAM;
    ModuleAnalysisManager MAM;
    PassBuilder PB(&TM);
    PB.registerModuleAnalyses(MAM);
    PB.registerCGSCCAnalyses(CGAM);
    PB.registerFunctionAnalyses(FAM);
    PB.registerLoopAnalyses(LAM);
    PB.crossRegisterProxies(LAM, FAM, CGAM, MAM);
    ModulePassManager MPM =
        PB.buildPerModuleDefaultPipeline(OptimizationLevel::O2);
    MPM.run(M, MAM);
  }
};

PtxCompiler::PtxCompiler() : I(std::make_unique<Impl>()) {}
PtxCompiler::~PtxCompiler() = default;

const std::string &PtxCompiler::arch() const { return I->DeviceArch; }
unsigned PtxCompiler::ptxVersion() const { return I->Version; }

Expected<std::unique_ptr<PtxCompiler>>
PtxCompiler::create(StringRef DeviceArch, unsigned PtxVersion) {
  initNvptx();
  std::unique_ptr<PtxCompiler> C(new PtxCompiler());
  Impl &I = *C->I;
  std::string Err;
  I.T = TargetRegistry::lookupTarget(Triple(NvptxTriple), Err);
  if (!I.T)
    return createStringError("this LLVM has no NVPTX target: " + Err);
  char Suffix = 0;
  std::optional<unsigned> Want = parseSmArch(DeviceArch, &Suffix);
  if (!Want || Suffix)
    return createStringError(
        formatv("'{0}' is not a device architecture (sm_XY, e.g. sm_90)",
                DeviceArch)
            .str());

  // What this LLVM knows: its sm_ processors and ptxNN features.
  {
    std::unique_ptr<MCSubtargetInfo> STI(
        I.T->createMCSubtargetInfo(Triple(NvptxTriple), "", ""));
    if (!STI)
      return createStringError("LLVM's NVPTX target has no subtarget info");
    for (const SubtargetSubTypeKV &P : STI->getAllProcessorDescriptions())
      I.KnownSm.push_back(P.Key);
    for (const SubtargetFeatureKV &F : STI->getAllProcessorFeatures()) {
      StringRef K = F.Key;
      unsigned V;
      if (K.consume_front("ptx") && !K.getAsInteger(10, V))
        I.KnownPtx.push_back(V);
    }
    llvm::sort(I.KnownPtx);
  }
  // The newest plain sm LLVM knows that is not newer than the device.
  unsigned Best = 0;
  for (StringRef K : I.KnownSm) {
    char S = 0;
    std::optional<unsigned> V = parseSmArch(K, &S);
    if (V && !S && *V <= *Want && *V > Best)
      Best = *V;
  }
  if (!Best)
    return createStringError(
        formatv("LLVM's NVPTX target knows no architecture up to {0}",
                DeviceArch)
            .str());
  I.DeviceArch = formatv("sm_{0}", Best).str();

  if (PtxVersion) {
    // The newest version LLVM writes that the driver reads.
    unsigned Cap = 0;
    for (unsigned V : I.KnownPtx)
      if (V <= PtxVersion)
        Cap = V;
    if (!Cap)
      return createStringError(
          formatv("the driver reads PTX up to {0}.{1}, older than every "
                  "version LLVM writes",
                  PtxVersion / 10, PtxVersion % 10)
              .str());
    I.Cap = Cap;
  }
  // The device's pipeline now: an architecture the driver's PTX is too old
  // for fails here, at start.
  Expected<Pipeline &> P = I.pipeline(I.DeviceArch);
  if (!P)
    return P.takeError();
  {
    LLVMContext Ctx;
    Module Empty("tc.ptx.probe", Ctx);
    I.Version = versionInPtx(I.lower(Empty, *P));
    if (!I.Version)
      return createStringError("LLVM's NVPTX target wrote no .version");
  }
  return std::move(C);
}

/// Checks what a GPU member must hold: the kernel for \p Name, and
/// NAME_threads if it is there. Returns NAME_threads's value, if any.
static Expected<std::optional<uint32_t>> checkEntry(const Module &M,
                                                    StringRef Name) {
  std::string K = ptxKernelName(Name);
  auto Fail = [&](const Twine &Why) {
    return createStringError(
        ("ifunc '" + Name + "': its nvptx64 member " + Why).str());
  };
  const Function *F = M.getFunction(K);
  if (!F || F->isDeclaration())
    return Fail("defines no kernel " + K);
  if (F->getCallingConv() != CallingConv::PTX_Kernel)
    return Fail("has " + K + " but it is not a kernel (ptx_kernel)");
  FunctionType *FT = F->getFunctionType();
  if (!FT->getReturnType()->isVoidTy() || FT->getNumParams() != 3 ||
      !FT->getParamType(0)->isPointerTy() ||
      !FT->getParamType(1)->isIntegerTy(64) ||
      !FT->getParamType(2)->isPointerTy())
    return Fail("has " + K +
                " with the wrong signature (expected void(ptr, i64, ptr))");
  std::optional<uint32_t> Threads;
  if (const GlobalVariable *G = M.getNamedGlobal((Name + "_threads").str())) {
    const auto *CI = G->hasDefinitiveInitializer()
                         ? dyn_cast<ConstantInt>(G->getInitializer())
                         : nullptr;
    if (!G->isConstant() || !CI || CI->getBitWidth() != 32)
      return Fail("has " + Name +
                  "_threads but not as a const uint32_t "
                  "with a value");
    Threads = uint32_t(CI->getZExtValue());
    if (*Threads == 0)
      return Fail("asks for 0 threads (" + Name + "_threads)");
  }
  return Threads;
}

Expected<PtxModule> PtxCompiler::compile(StringRef Bitcode, StringRef Name,
                                         StringRef MemberArch) {
  // An "a" or "f" member uses what only its own architecture (family) has:
  // it is lowered for that; every other member for the device.
  char Suffix = 0;
  std::string Arch = I->DeviceArch;
  if (!MemberArch.empty()) {
    if (!parseSmArch(MemberArch, &Suffix))
      return createStringError(
          formatv("ifunc '{0}': its nvptx64 member's CPU '{1}' is not an "
                  "sm_XY architecture",
                  Name, MemberArch)
              .str());
    if (Suffix)
      Arch = MemberArch.str();
  }
  std::lock_guard<std::mutex> L(I->Mu);
  Expected<Pipeline &> P = I->pipeline(Arch);
  if (!P)
    return P.takeError();
  LLVMContext &Ctx = I->context();
  Expected<std::unique_ptr<Module>> M =
      parseBitcodeFile(MemoryBufferRef(Bitcode, Name), Ctx);
  if (!M)
    return createStringError(formatv("ifunc '{0}': bad nvptx64 bitcode: {1}",
                                     Name, toString(M.takeError()))
                                 .str());
  Expected<std::optional<uint32_t>> Threads = checkEntry(**M, Name);
  if (!Threads)
    return Threads.takeError();
  PtxModule Out;
  Out.Kernel = ptxKernelName(Name);
  Out.Arch = Arch;
  Out.Threads = *Threads;
  Out.Ptx = I->lower(**M, *P, /*Optimize=*/true);
  Out.PtxVersion = versionInPtx(Out.Ptx);
  M->reset(); // In the shared context, under the lock.
  if (Out.Ptx.find(".entry " + Out.Kernel) == std::string::npos)
    return createStringError(
        formatv("ifunc '{0}': LLVM wrote no .entry {1}", Name, Out.Kernel)
            .str());
  return Out;
}

/// A kernel with a loop, a branch, a load and an atomic: what an ifunc's
/// lowering takes, so that prewarm() sets up the paths it needs.
static const char PrewarmIR[] = R"(
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @__tc_kernel_tc_prewarm(ptr %p, i64 %n, ptr %t) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %w = lshr i64 %n, 3
  %z = icmp eq i64 %w, 0
  br i1 %z, label %done, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %s = phi i64 [ 0, %entry ], [ %s1, %loop ]
  %a = getelementptr i64, ptr %p, i64 %i
  %v = load i64, ptr %a, align 8
  %s1 = add i64 %s, %v
  %i1 = add i64 %i, 1
  %c = icmp ult i64 %i1, %w
  br i1 %c, label %loop, label %done
done:
  %r = phi i64 [ 0, %entry ], [ %s1, %loop ]
  %x = zext i32 %tid to i64
  %y = add i64 %r, %x
  %old = atomicrmw add ptr %t, i64 %y monotonic
  ret void
}
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
)";

Expected<std::string> PtxCompiler::prewarm() {
  std::lock_guard<std::mutex> L(I->Mu);
  Expected<Pipeline &> P = I->pipeline(I->DeviceArch);
  if (!P)
    return P.takeError();
  SMDiagnostic Diag;
  std::unique_ptr<Module> M =
      parseAssemblyString(PrewarmIR, Diag, I->context());
  if (!M)
    return createStringError("prewarming the PTX compiler: " +
                             Diag.getMessage().str());
  std::string Ptx = I->lower(*M, *P);
  M.reset();
  if (Ptx.find(".entry __tc_kernel_tc_prewarm") == std::string::npos)
    return createStringError("prewarming the PTX compiler: no kernel written");
  return Ptx;
}

} // namespace tc
