//===- GpuWorker.cpp - The process that owns a GPU target's context -------===//

#include "gpu/GpuWorker.h"
#include "gpu/GpuCache.h"
#include "gpu/GpuChannel.h"
#include "gpu/CudaDriver.h"
#include "gpu/Ptx.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

using namespace llvm;
using namespace tc::cuda;
using namespace tc::gpu;

namespace tc {

/// Threads a block has at most (tc_thread_count() is the grid's total:
/// NAME_threads rounded up to whole blocks).
constexpr unsigned BlockThreads = 256;
/// Launches one stream has on the device at most; later commands of its
/// connection wait in the worker, so cuLaunchKernel never blocks on a full
/// launch queue behind a kernel that does not end.
constexpr unsigned MaxLaunchesInFlight = 256;
/// Commands taken per turn of the loop, so completions keep being polled.
constexpr unsigned DrainBatch = 512;
/// Launches a group holds at most: with several groups of a stream on the
/// device, the worker sees the first ones done (and gives the device more)
/// while the later ones run, and the time limit blames at most this many.
constexpr unsigned GroupLaunches = 64;
/// With nothing to do, the worker polls the command ring this long before
/// it sleeps on the futex (a message's next one is usually microseconds
/// away); with work on the device, this long before it polls more slowly.
constexpr uint64_t IdleSpinNs = 200000, BusySpinNs = 1000000;

std::vector<std::string> gpuWorkerArgs(const GpuWorkerOptions &O) {
  std::vector<std::string> A = {
      GpuWorkerFlag,
      "--shm-fd=" + std::to_string(O.ShmFd),
      "--sock-fd=" + std::to_string(O.SockFd),
      "--parent=" + std::to_string(O.Parent),
      "--device=" + std::to_string(O.Device),
      "--region-size=" + std::to_string(O.RegionSize),
      "--staging=" + std::to_string(O.StagingBytes),
      "--max-run-ms=" + std::to_string(O.MaxRunMs),
      "--library=" + O.Library};
  if (O.Trace)
    A.push_back("--trace");
  return A;
}

namespace {

bool parseWorkerArgs(int Argc, char **Argv, GpuWorkerOptions &O) {
  for (int I = 2; I < Argc; ++I) {
    StringRef A = Argv[I];
    auto Num = [&](StringRef Flag, auto &Out) {
      if (!A.consume_front(Flag))
        return false;
      unsigned long long V;
      if (A.getAsInteger(10, V))
        return false;
      Out = static_cast<std::remove_reference_t<decltype(Out)>>(V);
      return true;
    };
    if (Num("--shm-fd=", O.ShmFd) || Num("--sock-fd=", O.SockFd) ||
        Num("--parent=", O.Parent) || Num("--device=", O.Device) ||
        Num("--region-size=", O.RegionSize) ||
        Num("--staging=", O.StagingBytes) || Num("--max-run-ms=", O.MaxRunMs))
      continue;
    if (A.consume_front("--library=")) {
      O.Library = A.str();
      continue;
    }
    if (A == "--trace") {
      O.Trace = true;
      continue;
    }
    return false;
  }
  return O.ShmFd >= 0 && O.SockFd >= 0 && O.StagingBytes > 0;
}

/// One operation of a stream, on the device.
struct WOp {
  CmdKind Kind = CmdKind::Fence;
  uint64_t Tag = 0;
  bool Launch = false; ///< A kernel launched (counts for the time limit).
  /// Ends a group: the worker checks whether the device is done up to
  /// here (with Ev if later work was queued behind it, else with the
  /// stream's own query).
  bool End = false;
  CUevent Ev = nullptr;
  uint64_t Off = 0, Len = 0; ///< Read: where the bytes go in staging.
  uint64_t SubmitNs = 0;
  CUdeviceptr Free = 0; ///< Freed when done (a big payload, no pools).
  std::string Fail;     ///< Set: reported as Failed, in order.
};

struct WStream {
  uint64_t Conn = 0;
  CUstream S = nullptr;
  std::deque<WOp> Ops;     ///< On the device, oldest first.
  std::deque<Cmd> Waiting; ///< Not given to the device yet.
  uint64_t FrontSince = 0; ///< When the front group became the front.
  unsigned Launches = 0;   ///< Launch ops in Ops.
  unsigned Open = 0;       ///< Launches since the last end of a group.
  bool Closing = false;
};

struct WKernel {
  CUmodule M = nullptr;
  CUfunction F = nullptr;
  unsigned Grid = 1, Block = 1;
};

struct LinkJob {
  uint64_t Tag = 0;
  uint32_t Kernel = 0;
  const char *Ptx = nullptr; ///< In staging, NUL-terminated.
  size_t PtxLen = 0;
  std::string Path;
  uint32_t Threads = 0;
};

struct LinkResult {
  uint64_t Tag = 0;
  uint32_t Kernel = 0;
  std::string Error;
};

class Worker {
public:
  explicit Worker(const GpuWorkerOptions &O) : O(O) {}
  int run();

private:
  // Start-up.
  bool say(const std::string &Line);
  int refuse(const std::string &Why);
  Error discover();
  Error openContext();
  // The loop.
  bool drain();
  void handle(const Cmd &C);
  WStream &stream(uint64_t Conn);
  void submit(WStream &S, const Cmd &C);
  void closeGroup(WStream &S);
  bool poll();
  void complete(WStream &S, size_t Through);
  bool submitWaiting(WStream &S);
  bool finishLinks();
  void sleepUntilCommand();
  void pushDone(Done &D);
  void pushThrough(uint64_t Conn, uint64_t Tag);
  /// A driver call failed: fatal if the context is lost, else its text.
  std::string failure(CUresult R, const char *Call);
  [[noreturn]] void fatal(const std::string &Why, WStream *Overran = nullptr,
                          size_t Front = 0);
  Expected<WKernel> loadImage(const char *Image, bool IsPtx, const char *Entry,
                              uint32_t Threads, uint64_t &Nanos);
  CUevent takeEvent();
  void linker();
  char *staging(uint64_t Off) { return Ch.Staging + Off; }
  /// Where the device reads or writes staging bytes at \p Off: the shared
  /// area itself, or its pinned mirror when the driver would not register
  /// it.
  char *deviceSide(uint64_t Off) {
    return Pinned ? Pinned + Off : Ch.Staging + Off;
  }

  GpuWorkerOptions O;
  Channel Ch;
  std::unique_ptr<Driver> D;
  CUdevice Dev = 0;
  CUcontext Ctx = nullptr;
  CUdeviceptr Region = 0, StagingDev = 0;
  char *Pinned = nullptr;   ///< Set in copy mode.
  std::string RegisterWhy;  ///< Why the driver would not register staging.
  std::string Name, Arch;
  int DriverVersion = 0, Multiprocessors = 0;
  size_t Memory = 0;
  uint64_t CmdTail = 0, DoneHead = 0;
  std::map<uint64_t, WStream> Streams;
  std::vector<WStream *> Touched;
  std::unordered_map<uint32_t, WKernel> Kernels;
  std::unordered_map<uint64_t, CUdeviceptr> Bigs;
  std::unordered_map<uint64_t, std::string> BigErrors;
  std::vector<CUevent> FreeEvents;
  uint64_t InFlight = 0, Waiting = 0;
  bool Tracing = false;
  bool NoPools = false; ///< cuMemAllocAsync is not supported here.
  // The link thread (CacheLink), whose results the loop reports.
  std::thread Linker;
  std::mutex LinkMu;
  std::condition_variable LinkCV;
  std::deque<LinkJob> LinkJobs;
  std::vector<LinkResult> LinkResults;
  unsigned LinksPending = 0; ///< The loop's count.
};

bool Worker::say(const std::string &Line) {
  std::string L = Line + "\n";
  const char *P = L.data();
  size_t N = L.size();
  while (N) {
    ssize_t W = ::send(O.SockFd, P, N, MSG_NOSIGNAL);
    if (W < 0 && errno == EINTR)
      continue;
    if (W <= 0)
      return false;
    P += W;
    N -= size_t(W);
  }
  return true;
}

int Worker::refuse(const std::string &Why) {
  std::string One = Why;
  std::replace(One.begin(), One.end(), '\n', ' ');
  say("error " + One);
  return 1;
}

Error Worker::discover() {
  Expected<std::unique_ptr<Driver>> L = Driver::load(O.Library);
  if (!L)
    return L.takeError();
  D = std::move(*L);
  Driver &Cu = *D;
  if (Tracing)
    Cu.trace(Ch.H->Trace);
  if (CUresult R = Cu.cuInit(0)) {
    if (R == CUDA_ERROR_NO_DEVICE)
      return createStringError("no CUDA device: the driver (" + Cu.library() +
                               ") found none (cuInit: " + Cu.describe(R) + ")");
    return Cu.check(R, "cuInit");
  }
  if (Error E = TC_CU(Cu, cuDriverGetVersion, &DriverVersion))
    return E;
  int Count = 0;
  if (Error E = TC_CU(Cu, cuDeviceGetCount, &Count))
    return E;
  if (Count == 0)
    return createStringError("no CUDA device: the driver (" + Cu.library() +
                             ") found none");
  if (O.Device < 0 || O.Device >= Count)
    return createStringError(formatv("no CUDA device {0}: this machine has "
                                     "{1} (0 to {2})",
                                     O.Device, Count, Count - 1)
                                 .str());
  if (Error E = TC_CU(Cu, cuDeviceGet, &Dev, O.Device))
    return E;
  char N[256] = {};
  if (Error E = TC_CU(Cu, cuDeviceGetName, N, int(sizeof N - 1), Dev))
    return E;
  Name = N;
  int Major = 0, Minor = 0, MapHost = 0;
  if (Error E = joinErrors(
          joinErrors(
              TC_CU(Cu, cuDeviceGetAttribute, &Major,
                    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, Dev),
              TC_CU(Cu, cuDeviceGetAttribute, &Minor,
                    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, Dev)),
          joinErrors(TC_CU(Cu, cuDeviceGetAttribute, &Multiprocessors,
                           CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, Dev),
                     TC_CU(Cu, cuDeviceGetAttribute, &MapHost,
                           CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, Dev))))
    return E;
  if (Error E = TC_CU(Cu, cuDeviceTotalMem, &Memory, Dev))
    return E;
  Arch = formatv("sm_{0}{1}", Major, Minor).str();
  if (!MapHost)
    return createStringError(
        formatv("CUDA device {0} ({1}) cannot map host memory, which a GPU "
                "target hands payloads to kernels in",
                O.Device, Name)
            .str());
  if (DriverVersion < 11020)
    return createStringError(
        formatv("the CUDA driver is version {0}; a GPU target needs 11.2 or "
                "later",
                driverVersionText(DriverVersion))
            .str());
  return Error::success();
}

Error Worker::openContext() {
  Driver &Cu = *D;
  if (Error E = TC_CU(Cu, cuDevicePrimaryCtxRetain, &Ctx, Dev))
    return E;
  if (Error E = TC_CU(Cu, cuCtxSetCurrent, Ctx))
    return E;
  if (Error E = TC_CU(Cu, cuMemAlloc, &Region, O.RegionSize))
    return createStringError(
        formatv("cannot allocate the region ({0} bytes) on CUDA device {1}: "
                "{2}",
                O.RegionSize, O.Device, toString(std::move(E)))
            .str());
  if (Error E = TC_CU(Cu, cuMemsetD8, Region, 0, O.RegionSize))
    return E;
  // The staging area, where the target writes payloads: registered with
  // the driver and mapped for the device, or else mirrored in pinned
  // memory of our own (one more copy per payload).
  Error R = TC_CU(Cu, cuMemHostRegister, Ch.Staging, O.StagingBytes,
                  CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE);
  if (!R)
    R = TC_CU(Cu, cuMemHostGetDevicePointer, &StagingDev, Ch.Staging, 0);
  if (R) {
    RegisterWhy = toString(std::move(R));
    void *Host = nullptr;
    if (Error E = TC_CU(Cu, cuMemHostAlloc, &Host, O.StagingBytes,
                        CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE))
      return E;
    Pinned = static_cast<char *>(Host);
    if (Error E = TC_CU(Cu, cuMemHostGetDevicePointer, &StagingDev, Host, 0))
      return E;
  }
  // Events for groups, made now rather than on the first messages.
  for (int I = 0; I < 16; ++I) {
    CUevent E = nullptr;
    if (Error Err = TC_CU(Cu, cuEventCreate, &E, CU_EVENT_DISABLE_TIMING))
      return Err;
    FreeEvents.push_back(E);
  }
  return Error::success();
}

int Worker::run() {
  // End with the target, whatever happens to it.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (O.Parent && ::getppid() != O.Parent)
    return 1;
  // Signals for the target's process group are the target's to act on.
  std::signal(SIGINT, SIG_IGN);
  std::signal(SIGTERM, SIG_IGN);
  std::signal(SIGHUP, SIG_IGN);
  uint64_t Start = monoNanos();
  size_t Bytes = channelBytes(O.StagingBytes);
  void *Base =
      ::mmap(nullptr, Bytes, PROT_READ | PROT_WRITE, MAP_SHARED, O.ShmFd, 0);
  if (Base == MAP_FAILED)
    return refuse(std::string("the GPU worker cannot map its channel: ") +
                  std::strerror(errno));
  Ch.attach(Base, O.StagingBytes, /*Init=*/false);
  if (Ch.H->Magic != ChannelMagic || Ch.H->Version != ChannelVersion ||
      Ch.H->StagingBytes != O.StagingBytes)
    return refuse("the GPU worker's channel is not this build's");
  Tracing = O.Trace;
  if (Error E = discover())
    return refuse(toString(std::move(E)));
  if (Error E = openContext())
    return refuse(toString(std::move(E)));
  Linker = std::thread([this] { linker(); });
  bool Told = say("name " + Name) && say("arch " + Arch) &&
              say("driver " + std::to_string(DriverVersion)) &&
              say("sms " + std::to_string(Multiprocessors)) &&
              say("memory " + std::to_string(Memory)) &&
              say(Pinned ? "staging copied " + RegisterWhy
                         : std::string("staging shared")) &&
              say(formatv("ready {0:f1}", double(monoNanos() - Start) / 1e6));
  if (!Told)
    _exit(1); // The target is gone.

  uint64_t IdleSince = 0;
  for (;;) {
    bool Did = drain();
    Did |= poll();
    if (LinksPending)
      Did |= finishLinks();
    Ch.H->Heartbeat.fetch_add(1, std::memory_order_relaxed);
    if (Did) {
      IdleSince = 0;
      continue;
    }
    uint64_t Now = monoNanos();
    if (!IdleSince)
      IdleSince = Now;
    if (!InFlight && !Waiting && !LinksPending) {
      if (Now - IdleSince >= IdleSpinNs) {
        sleepUntilCommand();
        IdleSince = 0;
      }
    } else if (Now - IdleSince >= BusySpinNs) {
      // A long kernel: poll every 20 us rather than spin a core.
      timespec T{0, 20000};
      nanosleep(&T, nullptr);
    }
  }
}

void Worker::sleepUntilCommand() {
  Header &H = *Ch.H;
  uint32_t W = H.Wake.load(std::memory_order_acquire);
  H.Sleeping.store(1, std::memory_order_seq_cst);
  if (H.CmdHead.load(std::memory_order_seq_cst) == CmdTail) {
    H.Pipe.Sleeps.fetch_add(1, std::memory_order_relaxed);
    futexWait(H.Wake, W, 100000000); // 100 ms: the heartbeat goes on.
  }
  H.Sleeping.store(0, std::memory_order_relaxed);
}

//===----------------------------------------------------------------------===//
// Commands
//===----------------------------------------------------------------------===//

bool Worker::drain() {
  Header &H = *Ch.H;
  uint64_t Head = H.CmdHead.load(std::memory_order_acquire);
  if (Head == CmdTail)
    return false;
  unsigned N = 0;
  while (CmdTail != Head && N++ < DrainBatch) {
    Cmd C = Ch.Cmds[CmdTail % CmdSlots];
    H.CmdTail.store(++CmdTail, std::memory_order_release);
    if (Tracing && C.SentNs) {
      H.Pipe.CmdHops.fetch_add(1, std::memory_order_relaxed);
      H.Pipe.CmdHopNs.fetch_add(monoNanos() - C.SentNs,
                                std::memory_order_relaxed);
    }
    handle(C);
  }
  // What was queued this turn is one group per stream.
  for (WStream *S : Touched)
    if (!S->Ops.empty()) {
      S->Ops.back().End = true;
      S->Open = 0;
    }
  Touched.clear();
  return true;
}

WStream &Worker::stream(uint64_t Conn) {
  auto [It, New] = Streams.try_emplace(Conn);
  WStream &S = It->second;
  S.Closing = false;
  if (New) {
    S.Conn = Conn;
    if (CUresult R = D->cuStreamCreate(&S.S, CU_STREAM_NON_BLOCKING))
      fatal(toString(D->check(R, "cuStreamCreate")));
  }
  return S;
}

void Worker::handle(const Cmd &C) {
  switch (C.Kind) {
  case CmdKind::Prewarm:
  case CmdKind::Load: {
    const char *Image = staging(C.Off);
    const char *Entry = Image + C.Len + 1;
    uint64_t Ns = 0;
    Expected<WKernel> K = loadImage(Image, C.Flags & FlagPtx, Entry,
                                    uint32_t(C.A), Ns);
    Done R{};
    R.Kind = C.Kind == CmdKind::Load ? DoneKind::Loaded : DoneKind::Prewarmed;
    R.Tag = C.Tag;
    R.Kernel = C.Kernel;
    if (!K) {
      std::string Why = toString(K.takeError());
      R.setText(Why.data(), Why.size());
    } else if (C.Kind == CmdKind::Prewarm) {
      (void)D->cuModuleUnload(K->M);
      R.Ok = 1;
      R.C = Ns;
    } else {
      R.Ok = 1;
      R.A = K->Grid;
      R.B = K->Block;
      R.C = Ns;
      auto It = Kernels.find(C.Kernel);
      if (It != Kernels.end())
        (void)D->cuModuleUnload(It->second.M);
      Kernels[C.Kernel] = *K;
    }
    pushDone(R);
    return;
  }
  case CmdKind::Unload: {
    auto It = Kernels.find(C.Kernel);
    if (It == Kernels.end())
      return;
    (void)D->cuModuleUnload(It->second.M);
    Kernels.erase(It);
    return;
  }
  case CmdKind::CacheLink: {
    LinkJob J;
    J.Tag = C.Tag;
    J.Kernel = C.Kernel;
    J.Ptx = staging(C.Off);
    J.PtxLen = C.Len;
    J.Path = std::string(staging(C.Off) + C.Len + 1);
    J.Threads = uint32_t(C.A);
    {
      std::lock_guard<std::mutex> L(LinkMu);
      LinkJobs.push_back(std::move(J));
    }
    ++LinksPending;
    LinkCV.notify_one();
    return;
  }
  case CmdKind::Close: {
    auto It = Streams.find(C.Conn);
    if (It == Streams.end())
      return;
    It->second.Closing = true;
    return; // poll() destroys it once its work is done.
  }
  case CmdKind::Launch:
  case CmdKind::Fence:
  case CmdKind::Read:
  case CmdKind::BigAlloc:
  case CmdKind::BigCopy: {
    WStream &S = stream(C.Conn);
    if (!S.Waiting.empty() ||
        (C.Kind == CmdKind::Launch && S.Launches >= MaxLaunchesInFlight)) {
      S.Waiting.push_back(C);
      ++Waiting;
      return;
    }
    submit(S, C);
    Touched.push_back(&S);
    return;
  }
  }
}

std::string Worker::failure(CUresult R, const char *Call) {
  std::string Why = toString(D->check(R, Call));
  if (isContextLost(R))
    fatal(Why);
  return Why;
}

void Worker::closeGroup(WStream &S) {
  CUevent E = takeEvent();
  if (CUresult R = D->cuEventRecord(E, S.S)) {
    FreeEvents.push_back(E);
    fatal(toString(D->check(R, "cuEventRecord")));
  }
  S.Ops.back().Ev = E;
}

void Worker::submit(WStream &S, const Cmd &C) {
  // Work queued behind a group that ended: mark where it ends with an
  // event. A fence does no work on the device: it joins that group instead
  // (done when the group is), which saves a driver call per round trip.
  if (!S.Ops.empty() && S.Ops.back().End && !S.Ops.back().Ev) {
    if (C.Kind == CmdKind::Fence)
      S.Ops.back().End = false;
    else
      closeGroup(S);
  }
  WOp Op;
  Op.Kind = C.Kind;
  Op.Tag = C.Tag;
  // Traced: how long the device takes with a launch on an idle stream.
  if (Tracing && S.Ops.empty())
    Op.SubmitNs = monoNanos();
  switch (C.Kind) {
  case CmdKind::Launch: {
    auto K = Kernels.find(C.Kernel);
    CUdeviceptr P = 0;
    bool Big = C.Flags & FlagBig;
    if (K == Kernels.end()) {
      Op.Fail = "its code is not loaded on the device";
    } else if (Big) {
      auto B = Bigs.find(C.A);
      if (B == Bigs.end()) {
        auto W = BigErrors.find(C.A);
        Op.Fail = "its payload could not be put in device memory" +
                  (W == BigErrors.end() ? std::string() : ": " + W->second);
      } else {
        P = B->second;
      }
    } else {
      if (Pinned && C.Len)
        std::memcpy(Pinned + C.Off, staging(C.Off), C.Len);
      P = StagingDev + C.Off;
    }
    if (Op.Fail.empty()) {
      uint64_t N = C.Len;
      CUdeviceptr T = Region;
      void *Params[] = {&P, &N, &T};
      const WKernel &W = K->second;
      if (CUresult R = D->cuLaunchKernel(W.F, W.Grid, 1, 1, W.Block, 1, 1, 0,
                                         S.S, Params, nullptr))
        Op.Fail = failure(R, "cuLaunchKernel");
      else
        Op.Launch = true;
    }
    if (Big) {
      auto B = Bigs.find(C.A);
      if (B != Bigs.end()) {
        // Freed on the stream, after the kernel that reads it; without
        // pools, when the launch is seen done.
        if (NoPools)
          Op.Free = B->second;
        else if (CUresult R = D->cuMemFreeAsync(B->second, S.S))
          (void)failure(R, "cuMemFreeAsync");
        Bigs.erase(B);
      }
      BigErrors.erase(C.A);
    }
    break;
  }
  case CmdKind::Fence:
    break;
  case CmdKind::Read:
    Op.Off = C.Off;
    Op.Len = C.Len;
    if (C.Len)
      if (CUresult R = D->cuMemcpyDtoHAsync(deviceSide(C.Off), Region + C.A,
                                            C.Len, S.S))
        Op.Fail = failure(R, "cuMemcpyDtoHAsync");
    break;
  case CmdKind::BigAlloc: {
    CUdeviceptr P = 0;
    CUresult R = CUDA_ERROR_NOT_SUPPORTED;
    if (!NoPools) {
      R = D->cuMemAllocAsync(&P, C.Len, S.S);
      // A device or driver without memory pools (some virtualised GPUs):
      // plain allocations, freed once the launch that uses one is done.
      NoPools = R == CUDA_ERROR_NOT_SUPPORTED;
    }
    if (NoPools)
      R = D->cuMemAlloc(&P, C.Len);
    if (R)
      BigErrors[C.A] = failure(R, NoPools ? "cuMemAlloc" : "cuMemAllocAsync");
    else
      Bigs[C.A] = P;
    break;
  }
  case CmdKind::BigCopy: {
    auto B = Bigs.find(C.A);
    if (B == Bigs.end())
      break; // The launch that uses it says why.
    if (Pinned)
      std::memcpy(Pinned + C.Off, staging(C.Off), C.Len);
    if (CUresult R = D->cuMemcpyHtoDAsync(B->second + C.B, deviceSide(C.Off),
                                          C.Len, S.S)) {
      BigErrors[C.A] = failure(R, "cuMemcpyHtoDAsync");
      (void)D->cuMemFreeAsync(B->second, S.S);
      Bigs.erase(B);
    }
    break;
  }
  default:
    break;
  }
  // A fence, a read and a failure end their group: they are answered as
  // soon as the device is done up to them.
  if (C.Kind == CmdKind::Fence || C.Kind == CmdKind::Read ||
      !Op.Fail.empty() || (Op.Launch && ++S.Open >= GroupLaunches))
    Op.End = true;
  if (Op.End)
    S.Open = 0;
  if (S.Ops.empty())
    S.FrontSince = monoNanos();
  S.Launches += Op.Launch;
  S.Ops.push_back(std::move(Op));
  ++InFlight;
}

CUevent Worker::takeEvent() {
  if (!FreeEvents.empty()) {
    CUevent E = FreeEvents.back();
    FreeEvents.pop_back();
    return E;
  }
  CUevent E = nullptr;
  if (CUresult R = D->cuEventCreate(&E, CU_EVENT_DISABLE_TIMING))
    fatal(toString(D->check(R, "cuEventCreate")));
  return E;
}

//===----------------------------------------------------------------------===//
// Completions
//===----------------------------------------------------------------------===//

bool Worker::poll() {
  if (!InFlight && !Waiting) {
    // Streams closed with nothing left go now.
    for (auto It = Streams.begin(); It != Streams.end();) {
      if (It->second.Closing) {
        (void)D->cuStreamDestroy(It->second.S);
        It = Streams.erase(It);
      } else {
        ++It;
      }
    }
    return false;
  }
  bool Did = false;
  uint64_t Now = monoNanos();
  for (auto It = Streams.begin(); It != Streams.end();) {
    WStream &S = It->second;
    while (!S.Ops.empty()) {
      // The front group ends at the first op with an event, else it is
      // all that is on the device (the stream's own query answers).
      size_t G = 0;
      unsigned Launches = 0;
      while (G + 1 < S.Ops.size() && !S.Ops[G].Ev) {
        Launches += S.Ops[G].Launch;
        ++G;
      }
      Launches += S.Ops[G].Launch;
      CUevent Ev = S.Ops[G].Ev;
      CUresult R = Ev ? D->cuEventQuery(Ev) : D->cuStreamQuery(S.S);
      if (R == CUDA_SUCCESS) {
        complete(S, G);
        S.FrontSince = Now;
        Did = true;
        continue;
      }
      if (R != CUDA_ERROR_NOT_READY)
        fatal(toString(D->check(R, Ev ? "cuEventQuery" : "cuStreamQuery")));
      if (O.MaxRunMs && Launches &&
          Now - S.FrontSince > uint64_t(O.MaxRunMs) * 1000000u * Launches)
        fatal(formatv("ran longer than the target's time limit ({0} ms)",
                      O.MaxRunMs)
                  .str(),
              &S, G);
      break;
    }
    Did |= submitWaiting(S);
    if (S.Closing && S.Ops.empty() && S.Waiting.empty()) {
      (void)D->cuStreamDestroy(S.S);
      It = Streams.erase(It);
      continue;
    }
    ++It;
  }
  return Did;
}

bool Worker::submitWaiting(WStream &S) {
  bool Did = false;
  while (!S.Waiting.empty() && (S.Waiting.front().Kind != CmdKind::Launch ||
                                S.Launches < MaxLaunchesInFlight)) {
    Cmd C = S.Waiting.front();
    S.Waiting.pop_front();
    --Waiting;
    submit(S, C);
    Did = true;
  }
  if (Did) {
    S.Ops.back().End = true;
    S.Open = 0;
  }
  return Did;
}

void Worker::complete(WStream &S, size_t Through) {
  uint64_t OkThrough = 0;
  bool HaveOk = false;
  uint64_t Now = Tracing ? monoNanos() : 0;
  for (size_t I = 0; I <= Through; ++I) {
    WOp &Op = S.Ops.front();
    if (Op.Ev)
      FreeEvents.push_back(Op.Ev);
    if (Op.Launch) {
      --S.Launches;
      if (Op.SubmitNs) {
        Ch.H->Pipe.Completions.fetch_add(1, std::memory_order_relaxed);
        Ch.H->Pipe.DeviceNs.fetch_add(Now - Op.SubmitNs,
                                      std::memory_order_relaxed);
      }
    }
    if (Pinned && Op.Kind == CmdKind::Read && Op.Len)
      std::memcpy(staging(Op.Off), Pinned + Op.Off, Op.Len);
    if (Op.Free)
      (void)D->cuMemFree(Op.Free);
    if (!Op.Fail.empty()) {
      if (HaveOk)
        pushThrough(S.Conn, OkThrough);
      HaveOk = false;
      Done R{};
      R.Kind = DoneKind::Failed;
      R.Conn = S.Conn;
      R.Tag = Op.Tag;
      R.setText(Op.Fail.data(), Op.Fail.size());
      pushDone(R);
    } else {
      OkThrough = Op.Tag;
      HaveOk = true;
    }
    S.Ops.pop_front();
    --InFlight;
  }
  if (HaveOk)
    pushThrough(S.Conn, OkThrough);
}

void Worker::pushThrough(uint64_t Conn, uint64_t Tag) {
  Done R{};
  R.Kind = DoneKind::Through;
  R.Ok = 1;
  R.Conn = Conn;
  R.Tag = Tag;
  pushDone(R);
}

void Worker::pushDone(Done &D) {
  Header &H = *Ch.H;
  // The target takes completions on every turn of its loop; a full ring
  // means it is busy elsewhere for a moment.
  while (DoneHead - H.DoneTail.load(std::memory_order_acquire) >= DoneSlots) {
    timespec T{0, 10000};
    nanosleep(&T, nullptr);
  }
  // Traced: the hop of a completion that finds the ring empty.
  D.SentNs = Tracing && DoneHead == H.DoneTail.load(std::memory_order_relaxed)
                 ? monoNanos()
                 : 0;
  Ch.Dones[DoneHead % DoneSlots] = D;
  H.DoneHead.store(++DoneHead, std::memory_order_release);
}

void Worker::fatal(const std::string &Why, WStream *Overran, size_t Front) {
  // What each stream had given the device: those commands may have run,
  // or run in part; the later ones never did.
  for (auto &KV : Streams) {
    if (KV.second.Ops.empty())
      continue;
    Done S{};
    S.Kind = DoneKind::Submitted;
    S.Conn = KV.first;
    S.Tag = KV.second.Ops.back().Tag;
    pushDone(S);
  }
  Done F{};
  F.Kind = DoneKind::Fatal;
  F.setText(Why.data(), Why.size());
  if (Overran) {
    F.A = 1;
    F.Conn = Overran->Conn;
    F.B = Overran->Ops.front().Tag;
    F.Tag = Overran->Ops[Front].Tag;
  }
  pushDone(F);
  // The driver tears the context down with the process, a kernel that
  // does not end included; nothing here may wait for the device.
  ::kill(::getpid(), SIGKILL);
  _exit(1);
}

//===----------------------------------------------------------------------===//
// Loading and linking
//===----------------------------------------------------------------------===//

Expected<WKernel> Worker::loadImage(const char *Image, bool IsPtx,
                                    const char *Entry, uint32_t Threads,
                                    uint64_t &Nanos) {
  Driver &Cu = *D;
  WKernel K;
  char Log[4096] = {};
  uint64_t T0 = monoNanos();
  Ch.H->InLongCall.store(1, std::memory_order_relaxed);
  CUresult R;
  const char *Call = IsPtx ? "cuModuleLoadDataEx" : "cuModuleLoadData";
  if (IsPtx) {
    // The driver JITs the PTX for this device; no link step.
    CUjit_option Keys[] = {CU_JIT_ERROR_LOG_BUFFER,
                           CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *Values[] = {Log,
                      reinterpret_cast<void *>(uintptr_t(sizeof Log - 1))};
    R = Cu.cuModuleLoadDataEx(&K.M, Image, 2, Keys, Values);
  } else {
    R = Cu.cuModuleLoadData(&K.M, Image);
  }
  Ch.H->InLongCall.store(0, std::memory_order_relaxed);
  Nanos = monoNanos() - T0;
  if (R) {
    std::string Msg = failure(R, Call);
    StringRef Detail = StringRef(Log).trim();
    if (!Detail.empty())
      Msg += ": " + Detail.str();
    std::replace(Msg.begin(), Msg.end(), '\n', ' ');
    return createStringError(Msg);
  }
  auto Fail = [&](CUresult Code, const char *What) {
    std::string Msg = failure(Code, What);
    (void)Cu.cuModuleUnload(K.M);
    return createStringError(Msg);
  };
  if (CUresult E = Cu.cuModuleGetFunction(&K.F, K.M, Entry))
    return Fail(E, "cuModuleGetFunction");
  // The launch shape: blocks of up to 256 threads (fewer if the kernel's
  // registers allow fewer), enough of them for NAME_threads, or as many
  // as the device keeps resident for "fill the device".
  int MaxBlock = 0;
  if (CUresult E = Cu.cuFuncGetAttribute(
          &MaxBlock, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, K.F))
    return Fail(E, "cuFuncGetAttribute");
  unsigned BlockMax =
      std::max(1u, std::min(BlockThreads, unsigned(std::max(MaxBlock, 1))));
  if (Threads == FillDeviceThreads) {
    int PerSM = 0;
    if (CUresult E = Cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            &PerSM, K.F, int(BlockMax), 0))
      return Fail(E, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    K.Block = BlockMax;
    K.Grid = unsigned(std::max(PerSM, 1)) *
             unsigned(std::max(Multiprocessors, 1));
  } else {
    Threads = std::max(Threads, 1u);
    K.Block = std::min(Threads, BlockMax);
    K.Grid = unsigned((uint64_t(Threads) + K.Block - 1) / K.Block);
  }
  return K;
}

void Worker::linker() {
  Driver &Cu = *D;
  (void)Cu.cuCtxSetCurrent(Ctx);
  for (;;) {
    LinkJob J;
    {
      std::unique_lock<std::mutex> L(LinkMu);
      LinkCV.wait(L, [&] { return !LinkJobs.empty(); });
      J = std::move(LinkJobs.front());
      LinkJobs.pop_front();
    }
    LinkResult Res;
    Res.Tag = J.Tag;
    Res.Kernel = J.Kernel;
    char Log[4096] = {};
    CUjit_option Keys[] = {CU_JIT_ERROR_LOG_BUFFER,
                           CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *Values[] = {Log, reinterpret_cast<void *>(uintptr_t(sizeof Log - 1))};
    CUlinkState State = nullptr;
    Error E = TC_CU(Cu, cuLinkCreate, 2, Keys, Values, &State);
    if (!E)
      E = TC_CU(Cu, cuLinkAddData, State, CU_JIT_INPUT_PTX,
                const_cast<char *>(J.Ptx), J.PtxLen + 1, "ifunc.ptx", 0,
                nullptr, nullptr);
    void *Out = nullptr;
    size_t Size = 0;
    if (!E)
      E = TC_CU(Cu, cuLinkComplete, State, &Out, &Size);
    if (!E)
      writeCubinCache(J.Path,
                      J.Threads ? std::optional<uint32_t>(J.Threads)
                                : std::nullopt,
                      StringRef(static_cast<const char *>(Out), Size));
    else
      Res.Error = toString(std::move(E));
    if (State)
      (void)Cu.cuLinkDestroy(State);
    std::lock_guard<std::mutex> L(LinkMu);
    LinkResults.push_back(std::move(Res));
  }
}

bool Worker::finishLinks() {
  std::vector<LinkResult> Got;
  {
    std::lock_guard<std::mutex> L(LinkMu);
    Got.swap(LinkResults);
  }
  for (LinkResult &Res : Got) {
    Done R{};
    R.Kind = DoneKind::Linked;
    R.Tag = Res.Tag;
    R.Kernel = Res.Kernel;
    R.Ok = Res.Error.empty();
    R.setText(Res.Error.data(), Res.Error.size());
    pushDone(R);
    --LinksPending;
  }
  return !Got.empty();
}

} // namespace

int gpuWorkerMain(int Argc, char **Argv) {
  GpuWorkerOptions O;
  if (!parseWorkerArgs(Argc, Argv, O)) {
    // Not started by a GPU target: nobody reads a socket.
    std::fprintf(stderr, "tc-serve: error: --gpu-worker is started by "
                         "tc-serve --gpu itself\n");
    return 1;
  }
  // Lives until the process ends (its link thread too): never destroyed.
  auto *W = new Worker(O);
  return W->run();
}

} // namespace tc
