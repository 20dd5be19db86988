//===- GpuTarget.cpp - Run ifuncs' GPU members on one CUDA device ---------===//

#include "gpu/GpuTarget.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/BLAKE3.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstring>

using namespace llvm;
using namespace tc::cuda;
using Clock = std::chrono::steady_clock;

namespace tc {

/// Threads a block has at most (tc_thread_count() is the grid's total:
/// NAME_threads rounded up to whole blocks).
constexpr unsigned BlockThreads = 256;
/// Staging allocations are aligned to this.
constexpr size_t StageAlign = 256;

/// A piece of the staging ring, released in allocation order.
struct GpuTarget::Alloc {
  size_t Begin = 0, End = 0; ///< Ring positions (counted over all laps).
  bool Done = false;
};

/// One operation on a connection's stream.
struct GpuTarget::Op {
  GpuDone::Kind What = GpuDone::Launch;
  uint64_t Tag = 0;
  const GpuKernel *Kernel = nullptr; ///< Launch.
  Alloc *Mem = nullptr; ///< Its payload or read buffer in the ring.
  CUdeviceptr Big = 0;  ///< A payload too large for the ring.
  uint64_t Length = 0;  ///< Read: bytes.
  std::string Data;     ///< Read: a buffer too large for the ring.
  /// Set on the last operation of a group: done when every operation of
  /// the group (since the previous event) is.
  CUevent Event = nullptr;
};

struct GpuTarget::Stream {
  uint64_t Conn = 0;
  CUstream S = nullptr;
  std::deque<Op> Ops;
  /// When the front group became the front: its time limit runs from here.
  Clock::time_point FrontSince;
  bool Closing = false; ///< closeConnection(): destroyed once empty.
};

void GpuTarget::event(const Twine &Msg) {
  if (EventCB)
    EventCB(Msg.str());
}

static Error loadError(LoadFailure K, const Twine &Msg) {
  return make_error<LoadError>(K, Msg.str());
}

//===----------------------------------------------------------------------===//
// Start-up and the context
//===----------------------------------------------------------------------===//

Expected<std::unique_ptr<GpuTarget>> GpuTarget::create(const GpuOptions &O) {
  std::unique_ptr<GpuTarget> G(new GpuTarget());
  G->Opts = O;
  if (O.RegionSize == 0)
    return createStringError("a GPU target needs a region of at least 1 byte");
  Expected<std::unique_ptr<Driver>> D = Driver::load(O.Library);
  if (!D)
    return D.takeError();
  G->D = std::move(*D);
  Driver &Cu = *G->D;
  GpuInfo &I = G->Info;
  I.Library = Cu.library();
  I.Device = O.Device;
  if (CUresult R = Cu.cuInit(0)) {
    if (R == CUDA_ERROR_NO_DEVICE)
      return createStringError("no CUDA device: the driver (" + Cu.library() +
                               ") found none (cuInit: " + Cu.describe(R) + ")");
    return Cu.check(R, "cuInit");
  }
  if (Error E = TC_CU(Cu, cuDriverGetVersion, &I.DriverVersion))
    return std::move(E);
  int Count = 0;
  if (Error E = TC_CU(Cu, cuDeviceGetCount, &Count))
    return std::move(E);
  if (Count == 0)
    return createStringError("no CUDA device: the driver (" + Cu.library() +
                             ") found none");
  if (O.Device < 0 || O.Device >= Count)
    return createStringError(formatv("no CUDA device {0}: this machine has "
                                     "{1} (0 to {2})",
                                     O.Device, Count, Count - 1)
                                 .str());
  if (Error E = TC_CU(Cu, cuDeviceGet, &G->Dev, O.Device))
    return std::move(E);
  char Name[256] = {};
  if (Error E = TC_CU(Cu, cuDeviceGetName, Name, int(sizeof Name - 1), G->Dev))
    return std::move(E);
  I.Name = Name;
  int Major = 0, Minor = 0, MapHost = 0;
  if (Error E = joinErrors(
          joinErrors(
              TC_CU(Cu, cuDeviceGetAttribute, &Major,
                    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, G->Dev),
              TC_CU(Cu, cuDeviceGetAttribute, &Minor,
                    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, G->Dev)),
          joinErrors(TC_CU(Cu, cuDeviceGetAttribute, &I.Multiprocessors,
                           CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, G->Dev),
                     TC_CU(Cu, cuDeviceGetAttribute, &MapHost,
                           CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, G->Dev))))
    return std::move(E);
  if (Error E = TC_CU(Cu, cuDeviceTotalMem, &I.Memory, G->Dev))
    return std::move(E);
  I.Arch = formatv("sm_{0}{1}", Major, Minor).str();
  if (!MapHost)
    return createStringError(
        formatv("CUDA device {0} ({1}) cannot map host memory, which a GPU "
                "target hands payloads to kernels in",
                O.Device, I.Name)
            .str());

  unsigned Ptx = ptxVersionForDriver(I.DriverVersion);
  if (!Ptx)
    return createStringError(
        formatv("the CUDA driver is version {0}; a GPU target needs 11.0 or "
                "later",
                driverVersionText(I.DriverVersion))
            .str());
  Expected<std::unique_ptr<PtxCompiler>> PC = PtxCompiler::create(I.Arch, Ptx);
  if (!PC)
    return createStringError("CUDA device " + std::to_string(O.Device) + " (" +
                             I.Name + ", " + I.Arch + ", driver " +
                             driverVersionText(I.DriverVersion) +
                             "): " + toString(PC.takeError()));
  G->Ptx = std::move(*PC);
  I.CodeArch = G->Ptx->arch();
  I.PtxVersion = G->Ptx->ptxVersion();
  if (!O.CacheDir.empty())
    if (std::error_code EC = sys::fs::create_directories(O.CacheDir))
      return createStringError(EC, "cache directory '%s': %s",
                               O.CacheDir.c_str(), EC.message().c_str());

  if (Error E = G->openContext())
    return std::move(E);

  if (O.Prewarm) {
    // Lower, link and load a built-in kernel once: LLVM's NVPTX paths and
    // the driver's JIT (whose first link in a process costs several times
    // a later one) are then warm for the first real load.
    auto Start = Clock::now();
    Expected<std::string> P = G->Ptx->prewarm();
    if (!P)
      return P.takeError();
    GpuKernel K;
    K.Kernel = "__tc_kernel_tc_prewarm";
    K.Info.Name = "tc_prewarm";
    Expected<std::string> Cubin = G->link(*P, "tc_prewarm");
    if (!Cubin)
      return createStringError("prewarming the GPU: " +
                               toString(Cubin.takeError()));
    K.Cubin = std::move(*Cubin);
    {
      std::lock_guard<std::mutex> L(G->CtxMutex);
      if (Error E = G->loadModule(K))
        return createStringError("prewarming the GPU: " +
                                 toString(std::move(E)));
    }
    consumeError(TC_CU(Cu, cuModuleUnload, K.Module));
    I.PrewarmMillis =
        std::chrono::duration<double, std::milli>(Clock::now() - Start).count();
  }
  return std::move(G);
}

Error GpuTarget::openContext() {
  Driver &Cu = *D;
  if (Error E = TC_CU(Cu, cuDevicePrimaryCtxRetain, &Ctx, Dev))
    return E;
  if (Error E = TC_CU(Cu, cuCtxSetCurrent, Ctx))
    return E;
  if (Error E = TC_CU(Cu, cuMemAlloc, &Region, Opts.RegionSize))
    return createStringError(
        formatv("cannot allocate the region ({0} bytes) on CUDA device {1}: "
                "{2}",
                Opts.RegionSize, Opts.Device, toString(std::move(E)))
            .str());
  if (Error E = TC_CU(Cu, cuMemsetD8, Region, 0, Opts.RegionSize))
    return E;
  size_t Ring = std::max<size_t>(Opts.StagingBytes / StageAlign * StageAlign,
                                 StageAlign * 16);
  void *Host = nullptr;
  if (Error E = TC_CU(Cu, cuMemHostAlloc, &Host, Ring,
                      CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE))
    return E;
  Staging = static_cast<char *>(Host);
  Opts.StagingBytes = Ring;
  if (Error E = TC_CU(Cu, cuMemHostGetDevicePointer, &StagingDev, Host, 0))
    return E;
  Head = Tail = 0;
  return Error::success();
}

void GpuTarget::closeContext() {
  // Every call may fail on a lost context; what it would free goes with
  // the context's reset.
  Driver &Cu = *D;
  for (auto &KV : Streams)
    if (KV.second->S)
      (void)Cu.cuStreamDestroy(KV.second->S);
  Streams.clear();
  Closing = 0;
  for (CUevent E : FreeEvents)
    (void)Cu.cuEventDestroy(E);
  FreeEvents.clear();
  Allocs.clear();
  if (Staging)
    (void)Cu.cuMemFreeHost(Staging);
  Staging = nullptr;
  StagingDev = 0;
  if (Region)
    (void)Cu.cuMemFree(Region);
  Region = 0;
}

GpuTarget::~GpuTarget() {
  if (!D || !Ctx)
    return;
  // With work in flight (a kernel that may never end), freeing its memory
  // would wait for it: releasing the context, the last reference to it,
  // resets it and ends that work. Idle, everything is freed first.
  if (!InFlight) {
    closeContext();
    for (auto &KV : Kernels)
      if (KV.second->Module && KV.second->Generation == Generation)
        (void)D->cuModuleUnload(KV.second->Module);
  }
  (void)D->cuDevicePrimaryCtxRelease(Dev);
}

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

const Member *GpuTarget::memberFor(const Archive &A) const {
  Expected<const Member *> M =
      selectMember(A, NvptxTriple, Info.Arch, Role::Target, ImageKind::Bitcode);
  if (!M) {
    consumeError(M.takeError());
    return nullptr;
  }
  return *M;
}

const GpuKernel *GpuTarget::kernel(const ArchiveHash &H) const {
  std::lock_guard<std::mutex> L(KernelsMutex);
  auto It = Kernels.find(H);
  return It == Kernels.end() ? nullptr : It->second.get();
}

const LoadedIfunc *GpuTarget::find(const ArchiveHash &H) const {
  const GpuKernel *K = kernel(H);
  return K ? &K->Info : nullptr;
}

std::string GpuTarget::cacheKey(const Archive &A, const Member &M,
                                StringRef CodeArch) const {
  return CacheKey()
      .field("tc-cubin-cache-v1")
      .field(StringRef(reinterpret_cast<const char *>(A.Hash.data()),
                       A.Hash.size()))
      .field(M.Triple)
      .field(M.CPU)
      .field(M.Features)
      .field(CodeArch)
      .field(std::to_string(Info.PtxVersion))
      .field(Info.Arch)
      .field(std::to_string(Info.DriverVersion))
      .field(LLVM_VERSION_STRING)
      .hex();
}

/// A cache file: BLAKE3 of the rest (32 bytes), NAME_threads (u32, 0:
/// absent), the cubin. Written to a unique name and renamed into place.
static std::string cachePath(StringRef Dir, StringRef Key) {
  SmallString<256> P(Dir);
  sys::path::append(P, Key + ".cubin");
  return std::string(P);
}

static bool readCache(StringRef Path, std::optional<uint32_t> &Threads,
                      std::string &Cubin) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> B = MemoryBuffer::getFile(
      Path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!B || (*B)->getBufferSize() < 32 + 4 + 1)
    return false;
  StringRef All = (*B)->getBuffer();
  StringRef Rest = All.drop_front(32);
  BLAKE3Result<32> Sum = BLAKE3::hash(arrayRefFromStringRef(Rest));
  if (StringRef(reinterpret_cast<const char *>(Sum.data()), 32) !=
      All.take_front(32))
    return false; // Damaged: link again and write it over.
  uint32_t T = support::endian::read32le(Rest.data());
  Threads = T ? std::optional<uint32_t>(T) : std::nullopt;
  Cubin = Rest.drop_front(4).str();
  return true;
}

static void writeCache(StringRef Path, std::optional<uint32_t> Threads,
                       StringRef Cubin) {
  std::string Rest(4, '\0');
  support::endian::write32le(Rest.data(), Threads ? *Threads : 0);
  Rest += Cubin;
  SmallString<256> Tmp;
  int FD;
  if (sys::fs::createUniqueFile(Path + ".tmp-%%%%%%%%", FD, Tmp))
    return; // A cache that cannot be written is only slower.
  raw_fd_ostream OS(FD, /*shouldClose=*/true);
  BLAKE3Result<32> Sum = BLAKE3::hash(arrayRefFromStringRef(Rest));
  OS.write(reinterpret_cast<const char *>(Sum.data()), Sum.size());
  OS << Rest;
  OS.close();
  if (OS.has_error() || sys::fs::rename(Tmp, Path)) {
    OS.clear_error();
    sys::fs::remove(Tmp);
  }
}

Expected<std::string> GpuTarget::link(StringRef Ptx, StringRef Name) {
  Driver &Cu = *D;
  std::lock_guard<std::mutex> L(CtxMutex);
  if (Error E = TC_CU(Cu, cuCtxSetCurrent, Ctx))
    return std::move(E);
  char Log[4096] = {};
  CUjit_option Keys[] = {CU_JIT_ERROR_LOG_BUFFER,
                         CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *Values[] = {Log, reinterpret_cast<void *>(uintptr_t(sizeof Log - 1))};
  CUlinkState State = nullptr;
  if (Error E = TC_CU(Cu, cuLinkCreate, 2, Keys, Values, &State))
    return std::move(E);
  // The PTX with its terminating NUL, as the driver reads text.
  std::string Text = Ptx.str();
  std::string Unit = (Name + ".ptx").str();
  Error E = TC_CU(Cu, cuLinkAddData, State, CU_JIT_INPUT_PTX, Text.data(),
                  Text.size() + 1, Unit.c_str(), 0, nullptr, nullptr);
  void *Out = nullptr;
  size_t Size = 0;
  if (!E)
    E = TC_CU(Cu, cuLinkComplete, State, &Out, &Size);
  std::string Cubin;
  if (!E)
    Cubin.assign(static_cast<const char *>(Out), Size); // Owned by State.
  (void)Cu.cuLinkDestroy(State);
  if (E) {
    std::string Msg = toString(std::move(E));
    StringRef Detail = StringRef(Log).trim();
    if (!Detail.empty())
      Msg += ": " + Detail.str();
    std::replace(Msg.begin(), Msg.end(), '\n', ' ');
    return createStringError(Msg);
  }
  return Cubin;
}

Error GpuTarget::loadModule(GpuKernel &K) {
  Driver &Cu = *D;
  if (Error E = TC_CU(Cu, cuCtxSetCurrent, Ctx))
    return E;
  CUmodule M = nullptr;
  if (Error E = TC_CU(Cu, cuModuleLoadData, &M, K.Cubin.data()))
    return E;
  CUfunction F = nullptr;
  auto Fail = [&](Error E) {
    (void)Cu.cuModuleUnload(M);
    return E;
  };
  if (Error E = TC_CU(Cu, cuModuleGetFunction, &F, M, K.Kernel.c_str()))
    return Fail(std::move(E));
  // The launch shape: blocks of up to 256 threads (fewer if the kernel's
  // registers allow fewer), enough of them for NAME_threads, or as many
  // as the device keeps resident for "fill the device".
  int MaxBlock = 0;
  if (Error E = TC_CU(Cu, cuFuncGetAttribute, &MaxBlock,
                      CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, F))
    return Fail(std::move(E));
  unsigned BlockMax =
      std::max(1u, std::min(BlockThreads, unsigned(std::max(MaxBlock, 1))));
  if (K.Threads == FillDeviceThreads) {
    int PerSM = 0;
    if (Error E = TC_CU(Cu, cuOccupancyMaxActiveBlocksPerMultiprocessor, &PerSM,
                        F, int(BlockMax), 0))
      return Fail(std::move(E));
    K.Block = BlockMax;
    K.Grid = unsigned(std::max(PerSM, 1)) *
             unsigned(std::max(Info.Multiprocessors, 1));
  } else {
    K.Block = std::min(K.Threads, BlockMax);
    K.Grid = unsigned((uint64_t(K.Threads) + K.Block - 1) / K.Block);
  }
  K.Module = M;
  K.Function = F;
  K.Generation = Generation;
  return Error::success();
}

Expected<const LoadedIfunc &> GpuTarget::load(const Archive &A,
                                              const Member &M) {
  if (const GpuKernel *K = kernel(A.Hash))
    return K->Info;
  auto Start = Clock::now();
  auto K = std::make_unique<GpuKernel>();
  K->Info.Hash = A.Hash;
  K->Info.Name = A.Name;
  K->Info.Kind = ImageKind::Bitcode;
  K->Info.MemberTriple = M.Triple;
  K->Info.MemberCPU = M.CPU;
  K->Info.Device = K.get();
  K->Kernel = ptxKernelName(A.Name);
  std::string Id =
      "ifunc '" + A.Name + "' (" + toHex(A.Hash).substr(0, 16) + ")";

  // The sm the PTX is for: the device's, or an "a"/"f" member's own.
  char Suffix = 0;
  K->CodeArch = Info.CodeArch;
  if (parseSmArch(M.CPU, &Suffix) && Suffix)
    K->CodeArch = M.CPU;
  std::string Path;
  std::optional<uint32_t> Threads;
  bool Cached = false;
  if (!Opts.CacheDir.empty()) {
    Path = cachePath(Opts.CacheDir, cacheKey(A, M, K->CodeArch));
    Cached = readCache(Path, Threads, K->Cubin);
  }
  if (!Cached) {
    Expected<PtxModule> P = Ptx->compile(M.Image, A.Name, M.CPU);
    if (!P)
      return loadError(LoadFailure::CompileFailed, toString(P.takeError()));
    auto Lowered = Clock::now();
    K->PtxMillis =
        std::chrono::duration<double, std::milli>(Lowered - Start).count();
    K->PtxBytes = P->Ptx.size();
    Threads = P->Threads;
    Expected<std::string> Cubin = link(P->Ptx, A.Name);
    if (!Cubin)
      return loadError(LoadFailure::CompileFailed,
                       Id + ": the CUDA driver cannot link its PTX for " +
                           Info.Arch + ": " + toString(Cubin.takeError()));
    K->Cubin = std::move(*Cubin);
    K->LinkMillis =
        std::chrono::duration<double, std::milli>(Clock::now() - Lowered)
            .count();
    if (!Path.empty())
      writeCache(Path, Threads, K->Cubin);
  }
  K->Threads = Threads.value_or(1);
  {
    std::lock_guard<std::mutex> L(CtxMutex);
    if (Error E = loadModule(*K))
      return loadError(LoadFailure::CompileFailed,
                       Id + ": the CUDA driver cannot load its code: " +
                           toString(std::move(E)));
  }
  K->Info.FromDiskCache = Cached;
  K->Info.LoadMillis =
      std::chrono::duration<double, std::milli>(Clock::now() - Start).count();

  std::lock_guard<std::mutex> L(KernelsMutex);
  auto [It, New] = Kernels.try_emplace(A.Hash);
  if (!New) { // Another thread loaded it meanwhile: keep that one.
    std::lock_guard<std::mutex> C(CtxMutex);
    if (K->Generation == Generation)
      (void)D->cuModuleUnload(K->Module);
    return It->second->Info;
  }
  ++Counters.Loads;
  if (Cached)
    ++Counters.DiskCacheHits;
  It->second = std::move(K);
  return It->second->Info;
}

std::string GpuTarget::describe(const LoadedIfunc &L) const {
  const auto &K = *static_cast<const GpuKernel *>(L.Device);
  return formatv("on gpu {0} as {1}, {2} x {3} threads", Info.Device,
                 K.CodeArch, K.Grid, K.Block)
      .str();
}

void GpuTarget::unload(const ArchiveHash &H) {
  std::unique_ptr<GpuKernel> K;
  {
    std::lock_guard<std::mutex> L(KernelsMutex);
    auto It = Kernels.find(H);
    if (It == Kernels.end())
      return;
    K = std::move(It->second);
    Kernels.erase(It);
  }
  if (K->Launched) { // Its module goes when its last launch is done.
    Doomed.push_back(std::move(K));
    return;
  }
  std::lock_guard<std::mutex> C(CtxMutex);
  if (K->Module && K->Generation == Generation)
    (void)D->cuModuleUnload(K->Module);
}

Error GpuTarget::ensureModule(GpuKernel &K) {
  if (LLVM_LIKELY(K.Generation == Generation))
    return Error::success();
  // The context was made again since: load the module from its cubin.
  std::lock_guard<std::mutex> L(CtxMutex);
  return loadModule(K);
}

//===----------------------------------------------------------------------===//
// Streams, staging, events
//===----------------------------------------------------------------------===//

Expected<GpuTarget::Stream *> GpuTarget::stream(uint64_t Conn) {
  auto It = Streams.find(Conn);
  if (LLVM_LIKELY(It != Streams.end() && !It->second->Closing))
    return It->second.get();
  if (It != Streams.end()) { // Closed but busy: a new connection reuses it.
    It->second->Closing = false;
    --Closing;
    return It->second.get();
  }
  auto S = std::make_unique<Stream>();
  S->Conn = Conn;
  if (Error E = TC_CU(*D, cuStreamCreate, &S->S, CU_STREAM_NON_BLOCKING))
    return std::move(E);
  Stream *Raw = S.get();
  Streams.emplace(Conn, std::move(S));
  return Raw;
}

bool GpuTarget::busy(uint64_t Conn) const {
  auto It = Streams.find(Conn);
  if (It != Streams.end() && !It->second->Ops.empty())
    return true;
  for (const GpuDone &R : Ready)
    if (R.Conn == Conn)
      return true;
  return false;
}

void GpuTarget::closeConnection(uint64_t Conn) {
  auto It = Streams.find(Conn);
  if (It == Streams.end())
    return;
  if (!It->second->Ops.empty()) {
    if (!It->second->Closing)
      ++Closing;
    It->second->Closing = true;
    return;
  }
  (void)D->cuStreamDestroy(It->second->S);
  Streams.erase(It);
}

Expected<CUevent> GpuTarget::takeEvent() {
  if (!FreeEvents.empty()) {
    CUevent E = FreeEvents.back();
    FreeEvents.pop_back();
    return E;
  }
  CUevent E = nullptr;
  if (Error Err = TC_CU(*D, cuEventCreate, &E, CU_EVENT_DISABLE_TIMING))
    return std::move(Err);
  return E;
}

void GpuTarget::giveEvent(CUevent E) { FreeEvents.push_back(E); }

Expected<GpuTarget::Alloc *> GpuTarget::stage(size_t Size) {
  size_t Cap = Opts.StagingBytes;
  size_t Need = std::max<size_t>(alignTo(Size, StageAlign), StageAlign);
  if (Need > Cap / 2)
    return nullptr;
  for (unsigned Tries = 0;; ++Tries) {
    size_t Begin = Head;
    if (Begin % Cap + Need > Cap) // Never wraps: skip to the next lap.
      Begin += Cap - Begin % Cap;
    if (Begin + Need - Tail <= Cap) {
      auto A = std::make_unique<Alloc>();
      A->Begin = Begin;
      A->End = Head = Begin + Need;
      Alloc *Raw = A.get();
      Allocs.push_back(std::move(A));
      return Raw;
    }
    if (Tries > 0) // Everything finished and still no room: cannot be.
      return createStringError("the GPU staging ring is inconsistent");
    // Full: wait for every operation in flight, then take their results.
    for (auto &KV : Streams) {
      Stream &S = *KV.second;
      if (!S.Ops.empty() && !S.Ops.back().Event) {
        Expected<CUevent> E = takeEvent();
        if (!E)
          return E.takeError();
        if (Error Err = TC_CU(*D, cuEventRecord, *E, S.S)) {
          giveEvent(*E);
          return std::move(Err);
        }
        S.Ops.back().Event = *E;
      }
    }
    if (Error E = TC_CU(*D, cuCtxSynchronize))
      return std::move(E);
    for (auto &KV : Streams)
      while (!KV.second->Ops.empty())
        finishGroup(*KV.second);
  }
}

void GpuTarget::release(Alloc *A) {
  A->Done = true;
  while (!Allocs.empty() && Allocs.front()->Done) {
    Tail = Allocs.front()->End;
    Allocs.pop_front();
  }
}

//===----------------------------------------------------------------------===//
// Operations
//===----------------------------------------------------------------------===//

std::string GpuTarget::describe(const Op &O) const {
  return formatv("ifunc '{0}' ({1})", O.Kernel->Info.Name,
                 toHex(O.Kernel->Info.Hash).substr(0, 16))
      .str();
}

Error GpuTarget::launch(uint64_t Conn, const LoadedIfunc &L, StringRef Payload,
                        uint64_t Tag) {
  if (!Broken.empty())
    return createStringError(Broken);
  // Its module is ours to reload.
  GpuKernel &K =
      *const_cast<GpuKernel *>(static_cast<const GpuKernel *>(L.Device));
  Expected<Stream *> SE = stream(Conn);
  if (!SE)
    return SE.takeError();
  Stream &S = **SE;
  if (Error E = ensureModule(K))
    return E;
  Op O;
  O.What = GpuDone::Launch;
  O.Tag = Tag;
  O.Kernel = &K;
  CUdeviceptr P;
  Expected<Alloc *> A = stage(Payload.size());
  if (!A)
    return failLaunch(A.takeError());
  if (*A) {
    O.Mem = *A;
    size_t At = O.Mem->Begin % Opts.StagingBytes;
    if (!Payload.empty())
      std::memcpy(Staging + At, Payload.data(), Payload.size());
    P = StagingDev + At;
  } else {
    // Larger than the ring can hold: one copy to device memory, freed
    // when the launch is done.
    ++Counters.LargePayloads;
    if (Error E = TC_CU(*D, cuMemAlloc, &O.Big, Payload.size()))
      return failLaunch(std::move(E));
    // On the stream, so the kernel after it sees the bytes; from pageable
    // memory the driver has taken them when the call returns.
    if (Error E = TC_CU(*D, cuMemcpyHtoDAsync, O.Big, Payload.data(),
                        Payload.size(), S.S)) {
      (void)D->cuMemFree(O.Big);
      return failLaunch(std::move(E));
    }
    P = O.Big;
  }
  uint64_t N = Payload.size();
  CUdeviceptr T = Region;
  void *Params[] = {&P, &N, &T};
  if (Error E = TC_CU(*D, cuLaunchKernel, K.Function, K.Grid, 1, 1, K.Block, 1,
                      1, 0, S.S, Params, nullptr)) {
    if (O.Mem)
      release(O.Mem);
    if (O.Big)
      (void)D->cuMemFree(O.Big);
    return failLaunch(std::move(E));
  }
  if (S.Ops.empty())
    S.FrontSince = Clock::now();
  S.Ops.push_back(std::move(O));
  ++InFlight;
  ++K.Launched;
  ++Counters.Launches;
  return Error::success();
}

Error GpuTarget::failLaunch(Error E) {
  CUresult Code = errorCode(E);
  if (!isContextLost(Code))
    return E;
  // A fault of earlier work, found by this call: the context is gone.
  std::string Cause = toString(std::move(E));
  recover(nullptr, Cause);
  return createStringError("not launched: the GPU context had failed (" +
                           Cause + ") and was made again");
}

/// Adds \p O to \p S and records its event (a fence or read ends a group).
void GpuTarget::pushMarker(Stream &S, Op O) {
  if (S.Ops.empty())
    S.FrontSince = Clock::now();
  S.Ops.push_back(std::move(O));
  ++InFlight;
  Expected<CUevent> E = takeEvent();
  Error Err = E ? TC_CU(*D, cuEventRecord, *E, S.S) : E.takeError();
  if (!Err) {
    S.Ops.back().Event = *E;
    return;
  }
  if (E)
    giveEvent(*E);
  recover(nullptr, toString(std::move(Err)));
}

void GpuTarget::fence(uint64_t Conn, uint64_t Tag) {
  Op O;
  O.What = GpuDone::Fence;
  O.Tag = Tag;
  auto It = Streams.find(Conn);
  if (It == Streams.end() || It->second->Ops.empty()) {
    // Nothing in flight here: done at once.
    GpuDone R;
    R.What = GpuDone::Fence;
    R.Conn = Conn;
    R.Tag = Tag;
    Ready.push_back(std::move(R));
    return;
  }
  pushMarker(*It->second, std::move(O));
}

void GpuTarget::read(uint64_t Conn, uint64_t Length, uint64_t Tag) {
  Length = std::min<uint64_t>(Length, Opts.RegionSize);
  GpuDone R;
  R.What = GpuDone::Read;
  R.Conn = Conn;
  R.Tag = Tag;
  if (!Broken.empty()) {
    R.Ok = false;
    R.Why = Broken;
    Ready.push_back(std::move(R));
    return;
  }
  Expected<Stream *> SE = stream(Conn);
  Expected<Alloc *> A = nullptr;
  if (SE)
    A = stage(Length);
  else
    A = SE.takeError();
  if (!A) {
    recover(nullptr, toString(A.takeError()));
    R.Data.assign(Length, '\0'); // The region is new and zeroed.
    Ready.push_back(std::move(R));
    return;
  }
  Stream &S = **SE;
  Op O;
  O.What = GpuDone::Read;
  O.Tag = Tag;
  O.Length = Length;
  O.Mem = *A;
  void *Dst;
  if (O.Mem) {
    Dst = Staging + O.Mem->Begin % Opts.StagingBytes;
  } else {
    // Larger than the ring: into pageable memory, which the driver copies
    // before the call returns (after the stream's earlier work).
    O.Data.resize(Length);
    Dst = O.Data.data();
  }
  Error E = Length ? TC_CU(*D, cuMemcpyDtoHAsync, Dst, Region, Length, S.S)
                   : Error::success();
  if (E) {
    if (O.Mem)
      release(O.Mem);
    recover(nullptr, toString(std::move(E)));
    R.Data.assign(Length, '\0');
    Ready.push_back(std::move(R));
    return;
  }
  pushMarker(S, std::move(O));
}

void GpuTarget::finishGroup(Stream &S) {
  bool Last = false;
  while (!Last && !S.Ops.empty()) {
    Op &O = S.Ops.front();
    Last = O.Event != nullptr;
    GpuDone R;
    R.What = O.What;
    R.Conn = S.Conn;
    R.Tag = O.Tag;
    if (O.What == GpuDone::Read) {
      if (O.Mem)
        R.Data.assign(Staging + O.Mem->Begin % Opts.StagingBytes, O.Length);
      else
        R.Data = std::move(O.Data);
    }
    if (O.Mem)
      release(O.Mem);
    if (O.Big)
      (void)D->cuMemFree(O.Big);
    if (O.Event)
      giveEvent(O.Event);
    if (O.Kernel)
      landed(*O.Kernel);
    Ready.push_back(std::move(R));
    --InFlight;
    S.Ops.pop_front();
  }
}

void GpuTarget::landed(const GpuKernel &KC) {
  GpuKernel &K = const_cast<GpuKernel &>(KC);
  if (--K.Launched || Doomed.empty())
    return;
  // unload() left it here until its last launch was done.
  for (auto It = Doomed.begin(); It != Doomed.end(); ++It)
    if (It->get() == &K) {
      if (K.Module && K.Generation == Generation)
        (void)D->cuModuleUnload(K.Module);
      Doomed.erase(It);
      return;
    }
}

bool GpuTarget::poll(function_ref<void(GpuDone &)> Done) {
  if (InFlight || Closing) {
    Clock::time_point Now = Clock::now();
    bool Recovered = false;
    for (auto It = Streams.begin(); !Recovered && It != Streams.end();) {
      Stream &S = *It->second;
      // Close the launches made since the last poll into one group.
      if (!S.Ops.empty() && !S.Ops.back().Event) {
        Expected<CUevent> E = takeEvent();
        Error Err = E ? TC_CU(*D, cuEventRecord, *E, S.S) : E.takeError();
        if (Err) {
          if (E)
            giveEvent(*E);
          recover(nullptr, toString(std::move(Err)));
          Recovered = true;
          break;
        }
        S.Ops.back().Event = *E;
      }
      while (!S.Ops.empty()) {
        // The front group ends at the first operation with an event.
        unsigned Launches = 0;
        CUevent Ev = nullptr;
        for (const Op &O : S.Ops) {
          Launches += O.What == GpuDone::Launch;
          if ((Ev = O.Event))
            break;
        }
        CUresult R = D->cuEventQuery(Ev);
        if (R == CUDA_SUCCESS) {
          finishGroup(S);
          S.FrontSince = Now;
          continue;
        }
        if (R == CUDA_ERROR_NOT_READY) {
          if (Opts.MaxRunMs && Launches &&
              Now - S.FrontSince > std::chrono::milliseconds(
                                       uint64_t(Opts.MaxRunMs) * Launches)) {
            recover(&S,
                    formatv("ran longer than the target's time limit ({0} "
                            "ms)",
                            Opts.MaxRunMs)
                        .str());
            Recovered = true;
          }
          break;
        }
        recover(nullptr, toString(D->check(R, "cuEventQuery")));
        Recovered = true;
        break;
      }
      if (Recovered)
        break;
      if (S.Ops.empty() && S.Closing) {
        (void)D->cuStreamDestroy(S.S);
        --Closing;
        It = Streams.erase(It);
        continue;
      }
      ++It;
    }
  }
  if (Ready.empty())
    return false;
  std::vector<GpuDone> Out;
  Out.swap(Ready);
  for (GpuDone &R : Out)
    Done(R);
  return true;
}

//===----------------------------------------------------------------------===//
// Faults
//===----------------------------------------------------------------------===//

void GpuTarget::recover(Stream *Overran, const std::string &Cause) {
  // Whom to blame. A fault is found by the first driver call after it,
  // whichever stream that call is about, and then every call fails: the
  // launch that faulted is one of those in flight, and when only one is,
  // it is known. A launch that overran is in the front group of Overran,
  // which the time limit measured.
  auto Suspect = [&](const Stream &S, size_t Index) {
    if (S.Ops[Index].What != GpuDone::Launch)
      return false;
    if (!Overran)
      return true;
    if (&S != Overran)
      return false;
    for (size_t I = 0; I < Index; ++I)
      if (S.Ops[I].Event)
        return false; // Past the front group.
    return true;
  };
  unsigned Suspects = 0;
  std::string Culprit;
  for (auto &KV : Streams)
    for (size_t I = 0; I < KV.second->Ops.size(); ++I)
      if (Suspect(*KV.second, I)) {
        if (!Suspects++)
          Culprit = describe(KV.second->Ops[I]) +
                    formatv(" from connection {0}", KV.second->Conn).str();
      }
  if (Suspects > 1)
    Culprit = formatv("one of {0} launches ({1}, ...)", Suspects, Culprit);
  std::string After = !Suspects ? "a failure (" + Cause + ")"
                      : Overran ? Culprit + " " + Cause
                                : Culprit + " faulted: " + Cause;
  const char *Lost = "; the GPU context was made again and the region's "
                     "contents are lost";
  unsigned NFaulted = 0, NLost = 0;
  for (auto &KV : Streams) {
    Stream &S = *KV.second;
    for (size_t I = 0; I < S.Ops.size(); ++I) {
      Op &O = S.Ops[I];
      GpuDone R;
      R.What = O.What;
      R.Conn = S.Conn;
      R.Tag = O.Tag;
      if (O.What == GpuDone::Launch) {
        R.Ok = false;
        std::string Who =
            describe(O) + formatv(" from connection {0}", S.Conn).str();
        if (!Suspect(S, I)) {
          ++NLost;
          R.Why = Who +
                  " did not run, or its effects were lost: the GPU "
                  "context was made again after " +
                  After;
        } else if (Overran) {
          ++NFaulted;
          std::string Which =
              Suspects > 1
                  ? formatv(" (this message or one of the {0} launched with "
                            "it)",
                            Suspects - 1)
                        .str()
                  : "";
          R.Why = Who + Which + " " + Cause + " and was stopped" + Lost;
        } else {
          ++NFaulted;
          std::string Which =
              Suspects > 1
                  ? formatv(", or one of the {0} other launches in flight "
                            "with it did",
                            Suspects - 1)
                        .str()
                  : "";
          R.Why = Who + " faulted on the GPU" + Which + ": " + Cause + Lost;
        }
      } else if (O.What == GpuDone::Read) {
        R.Data.assign(O.Length, '\0'); // The new region: zeroed.
      }
      Ready.push_back(std::move(R));
      --InFlight;
    }
    S.Ops.clear();
  }
  {
    std::lock_guard<std::mutex> L(KernelsMutex);
    for (auto &KV : Kernels)
      KV.second->Launched = 0;
  }
  Doomed.clear(); // Their modules go with the context.
  Counters.Faults += NFaulted;
  Counters.Lost += NLost;
  if (Overran)
    Counters.Overruns += NFaulted;
  ++Counters.Resets;

  {
    std::lock_guard<std::mutex> L(CtxMutex);
    closeContext();
    Driver &Cu = *D;
    (void)Cu.cuDevicePrimaryCtxReset(Dev);
    (void)Cu.cuDevicePrimaryCtxRelease(Dev);
    Ctx = nullptr;
    ++Generation; // Every module is reloaded at its next launch.
    if (Error E = openContext()) {
      Broken = "the GPU could not be used again after " + After + ": " +
               toString(std::move(E));
      event("gpu: " + Broken);
      return;
    }
  }
  event(formatv("gpu: context made again after {0}: {1} launch(es) failed, "
                "{2} lost; the region is zeroed",
                After, NFaulted, NLost));
}

} // namespace tc
