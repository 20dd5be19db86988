//===- Jit.cpp - Load ifunc code into this process with LLVM ORC ----------===//
//
// One LLJIT per engine; one bare JITDylib per code identity whose link order
// is: the identity's own code, then its deps, then this process. Functions
// lose their "target-cpu"/"target-features"/"tune-cpu" attributes before
// codegen so the host CPU chosen by the target machine applies: a generic
// member gets this machine's full instruction set.
//
//===----------------------------------------------------------------------===//

#include "jit/Jit.h"
#include "jit/Sandbox.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/ExecutionEngine/Orc/CompileUtils.h"
#include "llvm/ExecutionEngine/Orc/EHFrameRegistrationPlugin.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/MapperJITLinkMemoryManager.h"
#include "llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h"
#include "llvm/IR/IntrinsicInst.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/BLAKE3.h"
#include "llvm/Support/DynamicLibrary.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SmallVectorMemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"

#include <chrono>

#if defined(__linux__) && defined(__aarch64__)
#include <sys/auxv.h>
#endif

using namespace llvm;
using namespace llvm::orc;

namespace tc {

char LoadError::ID = 0;

static Error loadError(LoadFailure K, Error E) {
  if (E.isA<LoadError>())
    return E;
  return make_error<LoadError>(K, toString(std::move(E)));
}

static std::once_flag InitTargets;

/// On AArch64 Linux, LLVM names the host CPU and its features from
/// /proc/cpuinfo. Where that file does not describe this CPU (a process
/// under qemu-user reads the x86 host's), LLVM reports "generic" with FP and
/// Advanced SIMD switched *off*, features every AArch64 Linux system has.
/// Then the CPU comes from MIDR_EL1, which Linux lets user space read
/// (HWCAP_CPUID; the kernel, or qemu, emulates the access), named by LLVM's
/// own table, and the bogus feature list is dropped so the CPU's defaults
/// apply. Elsewhere this changes nothing.
static void fixHostCpuFromMidr(JITTargetMachineBuilder &JTMB) {
#if defined(__linux__) && defined(__aarch64__) && defined(HWCAP_CPUID)
  if (JTMB.getCPU() != "generic")
    return;
  for (const std::string &F : JTMB.getFeatures().getFeatures())
    if (F == "+neon" || F == "+fp-armv8")
      return;
  JTMB.getFeatures() = SubtargetFeatures();
  if (!(getauxval(AT_HWCAP) & HWCAP_CPUID))
    return;
  uint64_t Midr;
  asm volatile("mrs %0, midr_el1" : "=r"(Midr));
  // The two lines of /proc/cpuinfo LLVM's parser reads.
  std::string Info = formatv("CPU implementer\t: {0:x2}\nCPU part\t: {1:x3}\n",
                             (Midr >> 24) & 0xff, (Midr >> 4) & 0xfff)
                         .str();
  StringRef Name = sys::detail::getHostCPUNameForARM(Info);
  if (!Name.empty())
    JTMB.setCPU(Name.str());
#else
  (void)JTMB;
#endif
}

namespace {
/// One codegen pipeline, built once and run on many modules. ORC's
/// compilers build a legacy pass manager with the whole codegen pipeline
/// for every module; for an ifunc that construction is half of a JIT
/// compile (scheduling ~150 passes, each setPreservesCFG() walking the pass
/// registry), more than running the passes. The pipeline and its object
/// streamer are made to be run again: every pass re-initialises per module,
/// the streamer is reset when a module is finished (llc's -compile-twice
/// runs one pass manager twice the same way).
struct Pipeline {
  std::unique_ptr<TargetMachine> TM;
  SmallVector<char, 0> Out;
  raw_svector_ostream OS{Out}; ///< The pipeline writes objects here.
  /// Declared after what its passes refer to (TM, OS): destroyed first.
  legacy::PassManager PM;

  static Expected<std::unique_ptr<Pipeline>>
  create(JITTargetMachineBuilder &JTMB) {
    Expected<std::unique_ptr<TargetMachine>> TM = JTMB.createTargetMachine();
    if (!TM)
      return TM.takeError();
    auto P = std::make_unique<Pipeline>();
    P->TM = std::move(*TM);
    MCContext *Ctx;
    if (P->TM->addPassesToEmitMC(P->PM, Ctx, P->OS))
      return createStringError("the target cannot emit objects");
    return std::move(P);
  }

  std::unique_ptr<MemoryBuffer> run(Module &M) {
    Out.clear(); // Moved from by the compile before.
    PM.run(M);
    return std::make_unique<SmallVectorMemoryBuffer>(
        std::move(Out), M.getModuleIdentifier() + "-jitted-objectbuffer",
        /*RequiresNullTerminator=*/false);
  }
};
} // namespace

/// Compiles modules to objects with two codegen pipelines, each built
/// once: -O0 (fast instruction selection and register allocation, a third
/// of the passes) for small straight-line code, where it costs no run time
/// (isSmallStraightLine), and -O2 for everything else. Compiles are
/// serialised by a mutex: JitEngine is used from several threads.
class ReusedPipelineCompiler : public IRCompileLayer::IRCompiler {
public:
  static Expected<std::unique_ptr<ReusedPipelineCompiler>>
  create(JITTargetMachineBuilder JTMB, ObjectCache *Cache) {
    JTMB.setCodeGenOptLevel(CodeGenOptLevel::Default);
    Expected<std::unique_ptr<Pipeline>> Full = Pipeline::create(JTMB);
    if (!Full)
      return Full.takeError();
    JTMB.setCodeGenOptLevel(CodeGenOptLevel::None);
    Expected<std::unique_ptr<Pipeline>> Fast = Pipeline::create(JTMB);
    if (!Fast)
      return Fast.takeError();
    return std::unique_ptr<ReusedPipelineCompiler>(
        new ReusedPipelineCompiler(std::move(*Full), std::move(*Fast), Cache));
  }

  Expected<std::unique_ptr<MemoryBuffer>> operator()(Module &M) override {
    std::lock_guard<std::mutex> L(Mu);
    std::unique_ptr<MemoryBuffer> Obj =
        (isSmallStraightLine(M) ? Fast : Full)->run(M);
    if (Cache)
      Cache->notifyObjectCompiled(&M, Obj->getMemBufferRef());
    return std::move(Obj);
  }

  /// Compiles \p M with the -O0 pipeline whatever it holds, for the cache
  /// of nobody: JitEngine::prewarm() runs a larger module through it than
  /// the code it will compile, so that every path that code takes is warm.
  std::unique_ptr<MemoryBuffer> compileFast(Module &M) {
    std::lock_guard<std::mutex> L(Mu);
    return Fast->run(M);
  }

private:
  ReusedPipelineCompiler(std::unique_ptr<Pipeline> Full,
                         std::unique_ptr<Pipeline> Fast, ObjectCache *Cache)
      : IRCompiler(irManglingOptionsFromTargetOptions(Full->TM->Options)),
        Full(std::move(Full)), Fast(std::move(Fast)), Cache(Cache) {}

  std::mutex Mu;
  std::unique_ptr<Pipeline> Full, Fast;
  ObjectCache *Cache;
};

/// Code for which -O0 codegen is as good as -O2's: every defined function
/// is one basic block, calls nothing but intrinsics that do not become
/// library calls, and all of them together have at most 32 instructions.
/// There -O2 has nothing to gain but a folded load (TSI: a load, an add and
/// a store where -O2 adds to memory): no loop to optimise, no value live
/// across blocks or calls for the fast register allocator to spill.
bool isSmallStraightLine(const Module &M) {
  unsigned Insts = 0;
  for (const Function &F : M) {
    if (F.isDeclaration())
      continue;
    if (F.size() != 1)
      return false;
    for (const Instruction &I : F.front()) {
      if (++Insts > 32)
        return false;
      if (const auto *Call = dyn_cast<CallBase>(&I))
        if (!isa<IntrinsicInst>(Call) || isa<MemIntrinsic>(Call))
          return false;
    }
  }
  return true;
}

Expected<std::unique_ptr<JitEngine>> JitEngine::create(const JitOptions &Opts) {
  std::call_once(InitTargets, [] {
    InitializeNativeTarget();
    InitializeNativeTargetAsmPrinter();
    InitializeNativeTargetAsmParser();
  });
  std::unique_ptr<JitEngine> E(new JitEngine());
  E->Opts = Opts;
  Expected<JITTargetMachineBuilder> JTMB = JITTargetMachineBuilder::detectHost();
  if (!JTMB)
    return JTMB.takeError();
  if (!Opts.Triple.empty())
    JTMB->getTargetTriple() = llvm::Triple(Opts.Triple);
  fixHostCpuFromMidr(*JTMB);
  if (!Opts.CPU.empty())
    JTMB->setCPU(Opts.CPU);
  JTMB->setCodeGenOptLevel(CodeGenOptLevel::Default);
  E->Triple = JTMB->getTargetTriple().str();
  E->CPU = JTMB->getCPU();
  E->HostFeatures = JTMB->getFeatures().getString();
  LLJITBuilder B;
  B.setJITTargetMachineBuilder(std::move(*JTMB));
  // First contact from an object member or the disk cache is mostly ORC's
  // fixed cost per JITDylib and per link, so two defaults go:
  //  - no platform: the generic IR platform would set up initializer
  //    support in every JITDylib (a fifth of a cached load), but ifuncs have
  //    no constructors or destructors (IfuncPasses refuses them);
  //  - memory from 1 MiB reservations that freed code returns to, instead of
  //    an mmap, page faults and a munmap per link (a further third). EH
  //    frames are still registered, as LLJIT's default layer does.
  B.setPlatformSetUp(setUpInactivePlatform);
  B.setObjectLinkingLayerCreator(
      [](ExecutionSession &ES) -> Expected<std::unique_ptr<ObjectLayer>> {
        auto MM =
            MapperJITLinkMemoryManager::CreateWithMapper<InProcessMemoryMapper>(
                1 << 20);
        if (!MM)
          return MM.takeError();
        auto L = std::make_unique<ObjectLinkingLayer>(ES, std::move(*MM));
        auto EH = EHFrameRegistrationPlugin::Create(ES);
        if (!EH)
          return EH.takeError();
        L->addPlugin(std::move(*EH));
        return std::move(L);
      });
  if (!Opts.CacheDir.empty()) {
    if (std::error_code EC = sys::fs::create_directories(Opts.CacheDir))
      return createStringError(EC, "cache directory '%s': %s",
                               Opts.CacheDir.c_str(), EC.message().c_str());
    E->Cache = std::make_unique<DiskObjectCache>(Opts.CacheDir);
  }
  ObjectCache *C = E->Cache.get();
  JitEngine *Raw = E.get();
  B.setCompileFunctionCreator([C, Raw](JITTargetMachineBuilder JTMB)
                                  -> Expected<std::unique_ptr<
                                      IRCompileLayer::IRCompiler>> {
    auto Compiler = ReusedPipelineCompiler::create(std::move(JTMB), C);
    if (!Compiler)
      return Compiler.takeError();
    Raw->Compiler = Compiler->get(); // Owned by the engine's LLJIT.
    return std::move(*Compiler);
  });
  Expected<std::unique_ptr<LLJIT>> J = B.create();
  if (!J)
    return J.takeError();
  E->J = std::move(*J);
  if (Opts.Prewarm)
    if (Error Err = E->prewarm(*Opts.Prewarm))
      return std::move(Err);
  return std::move(E);
}

/// The first compile in a fresh process costs several times a later one:
/// libLLVM's code and tables fault in page by page, and LLVM sets things up
/// once (the subtarget for this CPU and features, the target's lowering
/// tables, the zstd dictionary's digest, ...). Prewarming pays that here,
/// at start, by taking a first contact's whole path with a real tc-cc
/// module: the dictionary's bitcode for this architecture (a small ifunc,
/// `tc_dict`) is written as a one-member archive, read back (decompression
/// with the dictionary, digests, hash), selected, checked, parsed,
/// compiled, linked and looked up in a JITDylib of its own, and unloaded.
/// Nothing of it stays but what LLVM keeps per process anyway: no code, no
/// disk-cache file (it neither reads nor fills the cache), no counter.
Error JitEngine::prewarm(LoadMode Mode) {
  auto Start = std::chrono::steady_clock::now();
  PrewarmThread = std::this_thread::get_id();
  auto Fail = [](Error E) {
    return createStringError("prewarming the JIT: %s",
                             toString(std::move(E)).c_str());
  };
  std::vector<DictionaryModule> Mods = builtinDictionaryModules();
  llvm::Triple Host(Triple);
  StringRef Arch = Host.getArchName();
  const DictionaryModule *Pick = &Mods.front();
  for (const DictionaryModule &D : Mods)
    if (D.Arch == Arch)
      Pick = &D;
  Archive A;
  A.Name = "tc_dict";
  Member M;
  M.Triple = llvm::Triple::normalize(Triple);
  M.Image = Pick->Bitcode.str();
  M.Compress = Compression::ZstdDict;
  A.Members.push_back(std::move(M));
  Expected<SmallString<0>> Bytes = writeArchive(A);
  if (!Bytes)
    return Fail(Bytes.takeError());
  Expected<Archive> Read = readArchive(MemoryBufferRef(*Bytes, "prewarm"));
  if (!Read)
    return Fail(Read.takeError());
  Prewarming = true;
  Expected<const LoadedIfunc &> L = load(
      *Read, Mode == LoadMode::Sandbox ? LoadMode::Sandbox : LoadMode::Bitcode);
  Prewarming = false;
  if (!L)
    return Fail(L.takeError());
  if (Error E = unload(Read->Hash))
    return Fail(std::move(E));
  // That module has a loop, so it took the -O2 pipeline. Small
  // straight-line code (TSI) takes the -O0 one, whose paths are cold yet:
  // run the same module through it, then link the object as an object
  // member would be (a few dozen instructions of TSI's warm every path).
  ThreadSafeContext TSCtx = context();
  Expected<std::unique_ptr<Module>> Mod =
      parse(Read->Members[0].Image, A.Name, TSCtx,
            [](Module &) { return Error::success(); });
  if (!Mod)
    return Fail(Mod.takeError());
  std::unique_ptr<MemoryBuffer> Obj = Compiler->compileFast(**Mod);
  TSCtx.withContextDo([&](LLVMContext *) { Mod->reset(); });
  Expected<JITDylib &> JD =
      J->getExecutionSession().createJITDylib("tc_dict.prewarm");
  if (!JD)
    return Fail(JD.takeError());
  Error E = J->addObjectFile(*JD, std::move(Obj));
  if (!E)
    E = J->lookup(*JD, "tc_dict_main").takeError();
  if (Error Both = joinErrors(std::move(E),
                              J->getExecutionSession().removeJITDylib(*JD)))
    return Fail(std::move(Both));
  PrewarmMillis = std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - Start)
                      .count();
  return Error::success();
}

static void retargetToHost(Module &M, const DataLayout &DL,
                           const std::string &Triple) {
  M.setTargetTriple(llvm::Triple(Triple));
  M.setDataLayout(DL);
  for (Function &F : M) {
    F.removeFnAttr("target-cpu");
    F.removeFnAttr("target-features");
    F.removeFnAttr("tune-cpu");
  }
}

ThreadSafeContext JitEngine::context() {
  std::lock_guard<std::mutex> L(Mutex);
  if (++ContextModules > MaxModulesPerContext || !Context.withContextDo(
          [](LLVMContext *C) { return C != nullptr; })) {
    Context = ThreadSafeContext(std::make_unique<LLVMContext>());
    ContextModules = 1;
  }
  return Context;
}

Expected<std::unique_ptr<Module>>
JitEngine::parse(StringRef Bitcode, StringRef Name, ThreadSafeContext &TSCtx,
                 function_ref<Error(Module &)> Prepare) {
  // Everything that touches the module holds the context's lock: other
  // loads may parse into the same context meanwhile.
  return TSCtx.withContextDo(
      [&](LLVMContext *Ctx) -> Expected<std::unique_ptr<Module>> {
        Expected<std::unique_ptr<Module>> Mod =
            parseBitcodeFile(MemoryBufferRef(Bitcode, Name), *Ctx);
        if (!Mod)
          return createStringError("ifunc '%s': bad bitcode: %s",
                                   Name.str().c_str(),
                                   toString(Mod.takeError()).c_str());
        retargetToHost(**Mod, J->getDataLayout(), Triple);
        if (Error E = Prepare(**Mod))
          return std::move(E);
        return Mod;
      });
}

JitEngine::~JitEngine() {
  std::vector<JITDylibSP> JDs;
  for (auto &KV : Loaded)
    JDs.push_back(KV.second.JD);
  if (J && !JDs.empty())
    consumeError(J->getExecutionSession().removeJITDylibs(std::move(JDs)));
}

size_t JitEngine::size() const {
  std::lock_guard<std::mutex> L(Mutex);
  return Loaded.size();
}

const LoadedIfunc *JitEngine::find(const ArchiveHash &Hash, Role R) const {
  std::lock_guard<std::mutex> L(Mutex);
  auto It = Loaded.find({Hash, R});
  return It == Loaded.end() ? nullptr : &It->second.Info;
}

/// Resolves a dep name to what dlopen should load, enforcing the allowed
/// directories: a bare soname is searched in each, a path must lie in one.
static Expected<std::string> resolveDep(StringRef Dep,
                                        ArrayRef<std::string> Dirs) {
  if (Dirs.empty())
    return Dep.str();
  if (Dep.contains('/')) {
    SmallString<256> Real;
    if (std::error_code EC = sys::fs::real_path(Dep, Real))
      return createStringError(EC, "dependency '%s': %s", Dep.str().c_str(),
                               EC.message().c_str());
    for (const std::string &D : Dirs) {
      SmallString<256> RealDir;
      if (!sys::fs::real_path(D, RealDir) &&
          sys::path::parent_path(Real) == RealDir)
        return std::string(Real);
    }
    return createStringError("dependency '%s' is outside the allowed "
                             "directories",
                             Dep.str().c_str());
  }
  for (const std::string &D : Dirs) {
    SmallString<256> P(D);
    sys::path::append(P, Dep);
    if (sys::fs::exists(P))
      return std::string(P);
  }
  return createStringError("dependency '%s' is not in any allowed directory",
                           Dep.str().c_str());
}

Error JitEngine::addDeps(ArrayRef<std::string> Deps, StringRef Name,
                         JITDylib &JD) {
  char Prefix = J->getDataLayout().getGlobalPrefix();
  for (const std::string &Dep : Deps) {
    Expected<std::string> Path = resolveDep(Dep, Opts.DepDirs);
    if (!Path)
      return make_error<LoadError>(
          LoadFailure::PolicyRefused,
          "ifunc '" + Name.str() + "': " + toString(Path.takeError()));
    auto G = DynamicLibrarySearchGenerator::Load(Path->c_str(), Prefix);
    if (!G)
      return createStringError("ifunc '%s': cannot load dependency '%s': %s",
                               Name.str().c_str(), Dep.c_str(),
                               toString(G.takeError()).c_str());
    JD.addGenerator(std::move(*G));
  }
  auto Process = DynamicLibrarySearchGenerator::GetForCurrentProcess(Prefix);
  if (!Process)
    return Process.takeError();
  JD.addGenerator(std::move(*Process));
  return Error::success();
}

Error checkSymbolsResolve(ArrayRef<std::string> Symbols,
                          ArrayRef<std::string> Deps, StringRef IfuncName) {
  for (const std::string &S : Symbols) {
    // Deps were loaded permanently above, so the process-wide search sees
    // them as well as everything this process linked.
    if (sys::DynamicLibrary::SearchForAddressOfSymbol(S))
      continue;
    std::string DepList = Deps.empty() ? "none" : join(Deps, ", ");
    return createStringError(
        "ifunc '%s': symbol '%s' is not defined in this process or its deps "
        "(%s)",
        IfuncName.str().c_str(), S.c_str(), DepList.c_str());
  }
  return Error::success();
}

CacheKey &CacheKey::field(StringRef S) {
  uint8_t Len[8];
  support::endian::write64le(Len, S.size());
  H.update(ArrayRef<uint8_t>(Len, 8));
  H.update(S);
  return *this;
}

std::string CacheKey::hex() {
  BLAKE3Result<32> R = H.final();
  return toHex(ArrayRef<uint8_t>(R.data(), R.size()), /*LowerCase=*/true);
}

/// Everything that decides what machine code a member compiles to.
std::string JitEngine::cacheKey(const Archive &A, const Member &M,
                                bool Sandbox) const {
  CacheKey K;
  // v2: small straight-line code is compiled at -O0 (ReusedPipelineCompiler).
  K.field("tc-object-cache-v2")
      .field(StringRef(reinterpret_cast<const char *>(A.Hash.data()),
                       A.Hash.size()))
      .field(roleName(M.TheRole))
      .field(M.Triple)
      .field(M.CPU)
      .field(M.Features)
      .field(Triple)
      .field(CPU)
      .field(J->getTargetTriple().str())
      .field(HostFeatures)
      .field(LLVM_VERSION_STRING);
  // Sandboxed and plain objects of one member never share an entry; nor do
  // objects sandboxed under different call policies.
  K.field(Sandbox ? "sandbox-v1" : "plain");
  if (Sandbox) {
    std::vector<std::string> Allow = Opts.Sandbox.AllowCalls;
    llvm::sort(Allow);
    for (const std::string &S : Allow)
      K.field(S);
  }
  return K.hex();
}

std::string DiskObjectCache::pathFor(StringRef Key) const {
  SmallString<256> P(Dir);
  sys::path::append(P, Key + ".o");
  return std::string(P);
}

std::unique_ptr<MemoryBuffer> DiskObjectCache::getObject(const Module *) {
  // JitEngine::compile() has looked for the object already (and links it
  // itself when found): a module reaching the compiler is a miss.
  return nullptr;
}

std::unique_ptr<MemoryBuffer> DiskObjectCache::getObject(StringRef Key) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> B = MemoryBuffer::getFile(
      pathFor(Key), /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!B || (*B)->getBufferSize() < 32)
    return nullptr;
  StringRef All = (*B)->getBuffer();
  StringRef Obj = All.drop_front(32);
  BLAKE3Result<32> Sum = BLAKE3::hash(arrayRefFromStringRef(Obj));
  if (StringRef(reinterpret_cast<const char *>(Sum.data()), 32) !=
      All.take_front(32))
    return nullptr; // Damaged: compile again (and overwrite it).
  return MemoryBuffer::getMemBufferCopy(Obj, Key);
}

void DiskObjectCache::notifyObjectCompiled(const Module *M,
                                           MemoryBufferRef Obj) {
  // JitEngine::compile() names every module it wants cached by its key (64
  // lowercase hex digits); others (the prewarm module) are not kept.
  StringRef Key = M->getModuleIdentifier();
  if (Key.size() != 64 ||
      Key.find_first_not_of("0123456789abcdef") != StringRef::npos)
    return;
  std::string Final = pathFor(Key);
  SmallString<256> Tmp;
  int FD;
  if (sys::fs::createUniqueFile(Final + ".tmp-%%%%%%%%", FD, Tmp))
    return; // A cache that cannot be written is only slower.
  raw_fd_ostream OS(FD, /*shouldClose=*/true);
  BLAKE3Result<32> Sum = BLAKE3::hash(arrayRefFromStringRef(Obj.getBuffer()));
  OS.write(reinterpret_cast<const char *>(Sum.data()), Sum.size());
  OS << Obj.getBuffer();
  OS.close();
  if (OS.has_error() || sys::fs::rename(Tmp, Final)) {
    OS.clear_error();
    sys::fs::remove(Tmp);
  }
}


Expected<LoadedIfunc> JitEngine::compile(const Archive &A, const Member &M,
                                         JITDylib &JD, bool Sandbox) {
  auto Start = std::chrono::steady_clock::now();
  // A cached object links like an object member: no bitcode parsing, no
  // IR layer. Only a miss goes through the compiler, which then fills the
  // cache (notifyObjectCompiled, under the same key).
  std::string Key;
  std::unique_ptr<MemoryBuffer> Cached;
  if (Cache && M.Kind == ImageKind::Bitcode && !Prewarming) {
    Key = cacheKey(A, M, Sandbox);
    Cached = static_cast<DiskObjectCache &>(*Cache).getObject(Key);
  }
  bool FromCache = Cached != nullptr;
  if (Sandbox) {
    // The instrumentation's runtime, bound in this code's own JITDylib: it
    // need not be exported by the process.
    SymbolMap Syms;
    for (const SandboxRuntimeSymbol &S : sandboxRuntimeSymbols())
      Syms[J->mangleAndIntern(S.Name)] = {ExecutorAddr::fromPtr(S.Address),
                                          JITSymbolFlags::Exported};
    if (Error E = JD.define(absoluteSymbols(std::move(Syms))))
      return std::move(E);
  }
  if (Cached) {
    if (Error E = J->addObjectFile(JD, std::move(Cached)))
      return std::move(E);
  } else if (M.Kind == ImageKind::Bitcode) {
    ThreadSafeContext TSCtx = context();
    Expected<std::unique_ptr<Module>> Mod =
        parse(M.Image, A.Name, TSCtx, [&](Module &Mod) -> Error {
          if (Sandbox)
            if (Error E = sandboxModule(Mod, Opts.Sandbox))
              return make_error<LoadError>(
                  LoadFailure::PolicyRefused,
                  formatv("ifunc '{0}' ({1}): the sandbox refuses it: {2}",
                          A.Name, toHex(A.Hash).substr(0, 16),
                          toString(std::move(E)))
                      .str());
          if (!Key.empty())
            Mod.setModuleIdentifier(Key);
          return Error::success();
        });
    if (!Mod)
      return Mod.takeError();
    if (Error E = J->addIRModule(
            JD, ThreadSafeModule(std::move(*Mod), std::move(TSCtx))))
      return std::move(E);
  } else {
    if (Error E = J->addObjectFile(
            JD, MemoryBuffer::getMemBufferCopy(M.Image, A.Name + ".o")))
      return std::move(E);
  }
  LoadedIfunc L;
  L.Hash = A.Hash;
  L.Name = A.Name;
  L.Kind = M.Kind;
  L.MemberTriple = M.Triple;
  L.MemberCPU = M.CPU;
  L.Sandboxed = Sandbox;
  auto Lookup = [&](const std::string &Sym) -> Expected<ExecutorAddr> {
    Expected<ExecutorAddr> Addr = J->lookup(JD, Sym);
    if (!Addr)
      return createStringError("ifunc '%s': cannot compile '%s': %s",
                               A.Name.c_str(), Sym.c_str(),
                               toString(Addr.takeError()).c_str());
    return Addr;
  };
  if (M.TheRole == Role::Target) {
    Expected<ExecutorAddr> Main = Lookup(A.Name + "_main");
    if (!Main)
      return Main.takeError();
    L.Main = Main->toPtr<IfuncMainFn>();
  } else {
    Expected<ExecutorAddr> Bound = Lookup(A.Name + "_payload_bound");
    if (!Bound)
      return Bound.takeError();
    Expected<ExecutorAddr> Init = Lookup(A.Name + "_payload_init");
    if (!Init)
      return Init.takeError();
    L.Bound = Bound->toPtr<IfuncBoundFn>();
    L.Init = Init->toPtr<IfuncInitFn>();
  }
  L.FromDiskCache = FromCache;
  L.LoadMillis = std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - Start)
                     .count();
  return L;
}

Expected<const LoadedIfunc &> JitEngine::load(const Archive &A, LoadMode Mode,
                                               Role R) {
  if (const LoadedIfunc *L = find(A.Hash, R))
    return *L;

  bool Sandbox = Mode == LoadMode::Sandbox && R == Role::Target;
  std::optional<ImageKind> Kind;
  if (Mode != LoadMode::Auto && !(Mode == LoadMode::Sandbox && !Sandbox))
    Kind = Mode == LoadMode::Object ? ImageKind::Object : ImageKind::Bitcode;
  Expected<const Member *> Sel =
      selectMember(A, Triple, CPU, R, Kind);
  if (!Sel && Sandbox) {
    // Native code cannot be instrumented: say so rather than "no member".
    Expected<const Member *> Obj =
        selectMember(A, Triple, CPU, R, ImageKind::Object);
    if (Obj) {
      consumeError(Sel.takeError());
      return make_error<LoadError>(
          LoadFailure::PolicyRefused,
          formatv("ifunc '{0}' ({1}): sandbox mode runs bitcode only and "
                  "this archive has only an object member for this host",
                  A.Name, toHex(A.Hash).substr(0, 16))
              .str());
    }
    consumeError(Obj.takeError());
  }
  if (!Sel)
    return loadError(LoadFailure::NoMember,
                     createStringError("ifunc '%s': %s", A.Name.c_str(),
                                       toString(Sel.takeError()).c_str()));
  const Member *M = *Sel;

  std::string JDName = A.Name + "." + toHex(A.Hash).substr(0, 16) + "." +
                       roleName(R).str();
  Expected<JITDylib &> JD = J->getExecutionSession().createJITDylib(JDName);
  if (!JD)
    return JD.takeError();
  auto Fail = [&](Error E) -> Expected<const LoadedIfunc &> {
    consumeError(J->getExecutionSession().removeJITDylib(*JD));
    return std::move(E);
  };
  // The archive's deps serve both roles: the source member's payload
  // functions run in the sending process, which loads them for it as a
  // target does for its member (a payload_init that compresses with libbz2
  // needs libbz2 in the sender as much as NAME_main needs it to inflate).
  if (Error E = addDeps(A.Deps, A.Name, *JD))
    return Fail(loadError(LoadFailure::DepLoadFailed, std::move(E)));
  if (Error E = checkSymbolsResolve(M->Symbols, A.Deps, A.Name))
    return Fail(loadError(LoadFailure::MissingSymbol, std::move(E)));
  Expected<LoadedIfunc> L = compile(A, *M, *JD, Sandbox);
  if (!L)
    return Fail(loadError(LoadFailure::CompileFailed, L.takeError()));

  std::lock_guard<std::mutex> Lock(Mutex);
  auto [It, Inserted] = Loaded.try_emplace(Key{A.Hash, R});
  if (!Inserted) {
    // Another thread loaded the same identity meanwhile; keep its copy.
    consumeError(J->getExecutionSession().removeJITDylib(*JD));
    return It->second.Info;
  }
  It->second.Info = std::move(*L);
  It->second.JD = &*JD;
  return It->second.Info;
}

Error JitEngine::unload(const ArchiveHash &Hash, Role R) {
  JITDylib *JD;
  {
    std::lock_guard<std::mutex> L(Mutex);
    auto It = Loaded.find({Hash, R});
    if (It == Loaded.end())
      return Error::success();
    JD = It->second.JD;
    Loaded.erase(It);
  }
  return J->getExecutionSession().removeJITDylib(*JD);
}

} // namespace tc
