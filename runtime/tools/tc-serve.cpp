//===- tc-serve.cpp - A ready-made tc target process ----------------------===//
//
// Listens for connections, runs every ifunc that arrives with one zeroed
// memory region as its target_args, lets senders read that region, and on
// SIGINT/SIGTERM prints its counters and exits 0 (at once, from the signal
// handler, if an ifunc is running). Idle, it blocks in the transport's
// wait: no CPU. Protected mode: it listens beyond loopback only with a
// policy on what runs, or told to run anyone's native code.
//
//===----------------------------------------------------------------------===//

#include "jit/Guard.h"
#include "bootstrap/Bootstrap.h"
#include "gpu/GpuTarget.h"
#include "gpu/GpuWorker.h"
#include "protocol/Runtime.h"
#include "ToolSupport.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace llvm;
using namespace tc;

static const char *const Usage =
    R"(USAGE: tc-serve (--listen HOST:PORT | --pmix) [options]

Runs ifuncs sent by tc-send or libtc senders. Also runs one function linked
into tc-serve itself, "increment" (adds 1 to the region's first 8 bytes),
for `tc-send --local increment`: the active-message baseline.

Protected mode: on an address that is not loopback (127.0.0.0/8, ::1, a
name that resolves only to those), tc-serve starts only with --trust,
--allow or --exec sandbox (not with --gpu: GPU code is not sandboxed), or
with --allow-untrusted-native.

OPTIONS:
  --listen HOST:PORT   Address to accept connections on (port 0: any)
  --allow-untrusted-native
                       Listen beyond loopback with no --trust, --allow or
                       --exec sandbox: run native code from anyone who can
                       reach the address
  --region-size N      Bytes of target memory passed as target_args (4096)
  --region-file FILE   The region is FILE, mapped shared (made or grown to
                       --region-size bytes of zeros where it is shorter):
                       what ifuncs write there outlives the process, a
                       SIGKILL included, and a restarted target with the
                       same FILE goes on from it
  --allow FILE         Only run archives whose hash (64 hex digits per line)
                       is listed in FILE
  --trust KEY.pub      Only run archives signed by this key (repeatable;
                       from tc-ar keygen); with --allow, both must admit
  --dep-dir DIR        Only load dependencies from DIR (repeatable)
  --max-loaded N       Keep at most N code identities loaded (0: no limit)
  --cache-dir DIR      Keep compiled objects in DIR, so a restarted target
                       (or another one sharing DIR) skips the JIT
  --exec MODE          auto | bitcode | object | sandbox. sandbox: JIT a
                       bitcode member instrumented so that it touches only
                       its payload, the region, its locals and globals,
                       calls only allowed functions and stops when its fuel
                       runs out; a trap ends that message only (the sender
                       gets a 'sandbox trap' error). docs/ifunc-abi.md
  --fuel N             Sandbox: fuel per message, one unit per function call
                       and loop iteration (100000000)
  --sandbox-allow SYM  Sandbox: also allow calls to SYM (repeatable); its
                       pointer arguments are not checked
  --max-run-ms N       Report a message that runs longer than N ms: in
                       sandbox mode it is stopped (a 'sandbox trap' error);
                       otherwise tc-serve names the ifunc and exits 1, as
                       code without the sandbox cannot be interrupted safely
  --no-prewarm         Do not take a first contact's path at start with a
                       built-in ifunc (by default tc-serve does, so that its
                       first message's compile costs what a later one does)
  --ifunc-path DIRS    Load every NAME.tcfb in these ':'-separated
                       directories at start, so their first messages find
                       the code ready (no JIT on first contact)
  --gpu [N]            Run ifuncs on CUDA device N (0): an archive's
                       nvptx64 member on the GPU, with the region in device
                       memory; its CPU member here when it has none for the
                       device. Needs the NVIDIA driver (libcuda.so.1, or
                       $TC_CUDA_LIBRARY) at run time. docs/runtime.md
  --gpu-trace          Count and time the GPU worker's driver calls and
                       the hops to it; with -v, print per launch where the
                       time went when tc-serve ends
  --gpu-info           Print the device of --gpu N (name, sm, driver, PTX
                       version, memory) and exit; exit 1 with the reason if
                       it cannot run ifuncs
  --gpu-ptx ARCHIVE    Print the PTX a GPU target would load for ARCHIVE's
                       nvptx64 member and exit. For the device of --gpu N,
                       or, without a driver, for --gpu-arch sm_XY (and the
                       PTX version of driver --gpu-cuda X.Y, else LLVM's
                       oldest for that sm)
  --pmix               Started by mpirun or srun --mpi=pmix: publish this
                       worker under its rank (senders use --to-rank), and
                       exit when every rank of the job has finished (a
                       PMIx barrier); --listen is then optional. The job's
                       ranks trust each other: no protected mode for them
                       (a --listen beside it still has it)
  -v                   One line per event
  --help, --version
)";

/// The target's region: aligned anonymous memory, or a file mapped shared
/// (--region-file), whose pages the kernel keeps when the process dies.
class RegionMemory {
public:
  static Expected<RegionMemory> zeroed(uint64_t Size) {
    void *P = std::aligned_alloc(64, (Size + 63) / 64 * 64);
    if (!P)
      return createStringError("cannot allocate the region");
    std::memset(P, 0, Size);
    return RegionMemory(P, Size, false);
  }
  static Expected<RegionMemory> mapFile(const std::string &Path,
                                        uint64_t Size) {
    int Fd = ::open(Path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    auto Fail = [&](const char *What) {
      std::string Msg = formatv("--region-file '{0}': {1}: {2}", Path, What,
                                strerror(errno));
      if (Fd >= 0)
        ::close(Fd);
      return createStringError(Msg);
    };
    if (Fd < 0)
      return Fail("open");
    struct stat St;
    if (fstat(Fd, &St) != 0)
      return Fail("fstat");
    if (uint64_t(St.st_size) < Size && ftruncate(Fd, off_t(Size)) != 0)
      return Fail("ftruncate");
    void *P = mmap(nullptr, Size, PROT_READ | PROT_WRITE, MAP_SHARED, Fd, 0);
    if (P == MAP_FAILED)
      return Fail("mmap");
    ::close(Fd);
    return RegionMemory(P, Size, true);
  }
  RegionMemory(RegionMemory &&O)
      : Base(std::exchange(O.Base, nullptr)), Size(O.Size), Mapped(O.Mapped) {
  }
  RegionMemory &operator=(RegionMemory &&) = delete;
  ~RegionMemory() {
    if (Base && Mapped)
      munmap(Base, Size);
    else
      std::free(Base);
  }
  void *get() const { return Base; }

private:
  RegionMemory(void *Base, uint64_t Size, bool Mapped)
      : Base(Base), Size(Size), Mapped(Mapped) {}
  void *Base;
  uint64_t Size;
  bool Mapped;
};

static std::atomic<bool> Stop{false};
/// Set by the watchdog before it stops the process over a runaway ifunc.
static std::atomic<bool> Runaway{false};
static const RuntimeCounters *CounterSource = nullptr;

/// The built-in local function: the TSI ifunc, linked in ahead of time.
extern "C" void tcServeIncrement(void *, size_t, void *Region) {
  ++*static_cast<uint64_t *>(Region);
}
static std::atomic<Transport *> SignalTarget{nullptr};

/// Writes the counters; async-signal-safe (no allocation, write(2) only),
/// so the signal handler can use it while an ifunc runs.
static void printCounters(const RuntimeCounters &C) {
  char Buf[1024];
  uint64_t Errors = 0;
  for (const auto &KV : C.Errors)
    Errors += KV.second;
  SignalSafeWriter W(Buf, sizeof Buf);
  W << "tc-serve: received ";
  W.dec(C.Received) << ", executed ";
  W.dec(C.Executed) << ", code frames ";
  W.dec(C.CodeFrames) << ", cache hits ";
  W.dec(C.CacheHits) << ", compiles ";
  W.dec(C.Compiles) << " (";
  W.fixed2(C.CompileMillis) << " ms), code requests ";
  W.dec(C.CodeRequests) << ", evictions ";
  W.dec(C.Evictions) << ", errors ";
  W.dec(Errors) << ", disk cache hits ";
  W.dec(C.DiskCacheHits) << "\n";
  W.flush(1);
  for (const auto &KV : C.Errors) {
    SignalSafeWriter E(Buf, sizeof Buf);
    E << "tc-serve: errors: " << wireStatusName(KV.first).data() << ": ";
    E.dec(KV.second) << "\n";
    E.flush(1);
  }
}

extern "C" void onSignal(int) {
  if (guard::ActiveDepth.load(std::memory_order_relaxed) && CounterSource) {
    // An ifunc holds the dispatching thread and may never return to the
    // loop below: name it, print the counters and leave from here.
    char Buf[512], Run[400];
    formatRun(guard::ActiveCode.load(), guard::ActiveLocal.load(),
              guard::ActiveConn.load(), Run, sizeof Run);
    SignalSafeWriter W(Buf, sizeof Buf);
    W << "tc-serve: stopping while " << Run << " runs\n";
    W.flush(1);
    printCounters(*CounterSource);
    _exit(Runaway ? 1 : 0);
  }
  Stop = true;
  if (Transport *T = SignalTarget)
    T->signal();
}

/// --max-run-ms: samples the dispatcher every half limit; an invocation
/// seen running at three samples in a row ran for at least the limit.
static void watchdog(unsigned LimitMs, std::atomic<bool> &Quit) {
  auto Period = std::chrono::milliseconds(std::max(1u, LimitMs / 2));
  uint64_t LastEpoch = ~uint64_t(0);
  unsigned Seen = 0;
  while (!Quit.load()) {
    std::this_thread::sleep_for(Period);
    uint64_t E = guard::Epoch.load(std::memory_order_acquire);
    if (!guard::ActiveDepth.load(std::memory_order_relaxed) || E != LastEpoch) {
      LastEpoch = E;
      Seen = 0;
      continue;
    }
    if (++Seen < 2)
      continue;
    Seen = 0;
    const LoadedIfunc *Code = guard::ActiveCode.load();
    if (Code && Code->Sandboxed) {
      requestSandboxStop(); // It traps at its next call or loop iteration.
      continue;
    }
    char Buf[512], Run[400];
    formatRun(Code, guard::ActiveLocal.load(), guard::ActiveConn.load(), Run,
              sizeof Run);
    SignalSafeWriter W(Buf, sizeof Buf);
    W << "tc-serve: " << Run << " has run longer than --max-run-ms=";
    W.dec(LimitMs) << "; ending the process\n";
    W.flush(2);
    Runaway = true;
    kill(getpid(), SIGTERM); // The handler prints the counters.
    return;
  }
}

/// One line about a GPU target's device.
static std::string describeGpu(const tc::GpuInfo &I) {
  return formatv("gpu {0}: {1}, {2}, {3} multiprocessors, {4} MiB, CUDA "
                 "driver {5}, PTX {6}.{7} for {8}",
                 I.Device, I.Name, I.Arch, I.Multiprocessors, I.Memory >> 20,
                 cuda::driverVersionText(I.DriverVersion), I.PtxVersion / 10,
                 I.PtxVersion % 10, I.CodeArch)
      .str();
}

/// tc-serve --gpu-ptx: the PTX a GPU target would load for \p Path's
/// nvptx64 member, with two comment lines saying what it is and how it is
/// launched, on stdout.
static int printPtx(const char *Tool, StringRef Path, std::optional<int> Gpu,
                    StringRef Arch, StringRef Cuda) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> B = MemoryBuffer::getFile(Path);
  if (!B)
    return toolError(Tool, "'" + Path + "': " + B.getError().message());
  Expected<Archive> A = readArchive((*B)->getMemBufferRef());
  if (!A)
    return toolError(Tool, "'" + Path + "': " + toString(A.takeError()));
  std::string DeviceArch = Arch.str();
  unsigned PtxVersion = 0;
  std::unique_ptr<GpuTarget> G;
  if (!Cuda.empty()) {
    unsigned Major, Minor;
    auto [Ma, Mi] = Cuda.split('.');
    if (Ma.getAsInteger(10, Major) || Mi.getAsInteger(10, Minor) ||
        Minor > 9 || !(PtxVersion = ptxVersionForDriver(
                           int(Major * 1000 + Minor * 10))))
      return toolError(Tool, "bad --gpu-cuda '" + Cuda +
                                 "' (a CUDA version X.Y, 11.0 or later)");
  }
  if (DeviceArch.empty()) {
    GpuOptions O;
    O.Device = Gpu.value_or(0);
    O.Prewarm = false;
    Expected<std::unique_ptr<GpuTarget>> T = GpuTarget::create(O);
    if (!T)
      return toolError(Tool, toString(T.takeError()) +
                                 " (--gpu-arch sm_XY prints PTX without one)");
    G = std::move(*T);
    DeviceArch = G->info().Arch;
    if (!PtxVersion)
      PtxVersion = ptxVersionForDriver(G->info().DriverVersion);
  }
  Expected<std::unique_ptr<PtxCompiler>> C =
      PtxCompiler::create(DeviceArch, PtxVersion);
  if (!C)
    return toolError(Tool, toString(C.takeError()));
  Expected<const Member *> M = selectMember(*A, NvptxTriple, DeviceArch,
                                            Role::Target, ImageKind::Bitcode);
  if (!M)
    return toolError(Tool, "'" + Path + "': " + toString(M.takeError()));
  Expected<PtxModule> P = (*C)->compile((*M)->Image, A->Name, (*M)->CPU);
  if (!P)
    return toolError(Tool, toString(P.takeError()));
  std::string Shape =
      !P->Threads ? "1 thread (no " + A->Name + "_threads)"
      : *P->Threads == FillDeviceThreads
          ? "as many blocks of 256 threads as fill the device (" + A->Name +
                "_threads 0xffffffff)"
          : formatv("{0} threads ({1}_threads)", *P->Threads, A->Name).str();
  outs() << formatv("// tc: ifunc {0} ({1}), member {2}{3}{4}, for a {5} "
                    "device as {6}, PTX {7}.{8}\n",
                    A->Name, toHex(A->Hash).substr(0, 16), (*M)->Triple,
                    (*M)->CPU.empty() ? "" : " ", (*M)->CPU, DeviceArch,
                    P->Arch, P->PtxVersion / 10, P->PtxVersion % 10)
         << "// tc: launch: " << Shape << "\n"
         << P->Ptx;
  outs().flush();
  return 0;
}

/// Loads every NAME.tcfb in the ':'-separated \p Dirs (sorted by name, so
/// runs are repeatable). Any archive that cannot be loaded stops the start:
/// a daemon should not come up missing code it was told to serve.
static Error preloadIfuncs(Runtime &R, StringRef Dirs) {
  SmallVector<StringRef, 4> Parts;
  Dirs.split(Parts, ':', -1, false);
  for (StringRef Dir : Parts) {
    if (!sys::fs::is_directory(Dir))
      return createStringError("--ifunc-path: '%s' is not a directory",
                               Dir.str().c_str());
    std::vector<std::string> Files;
    std::error_code EC;
    for (sys::fs::directory_iterator It(Dir, EC), End; It != End && !EC;
         It.increment(EC))
      if (sys::path::extension(It->path()) == ".tcfb")
        Files.push_back(It->path());
    if (EC)
      return createStringError(EC, "--ifunc-path: '%s': %s",
                               Dir.str().c_str(), EC.message().c_str());
    llvm::sort(Files);
    for (const std::string &F : Files) {
      ErrorOr<std::unique_ptr<MemoryBuffer>> B = MemoryBuffer::getFile(F);
      if (!B)
        return createStringError(B.getError(), "'%s': %s", F.c_str(),
                                 B.getError().message().c_str());
      Expected<const LoadedIfunc *> L = R.preload((*B)->getBuffer());
      if (!L)
        return createStringError("'%s': %s", F.c_str(),
                                 toString(L.takeError()).c_str());
    }
  }
  return Error::success();
}

/// Whether \p A is a loopback address: 127.0.0.0/8, ::1, or 127.0.0.0/8
/// mapped into IPv6 (::ffff:127.x.y.z).
static bool isLoopback(const sockaddr *A) {
  if (A->sa_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in *>(A)->sin_addr.s_addr) >>
            24) == 127;
  if (A->sa_family != AF_INET6)
    return false;
  const in6_addr &V6 = reinterpret_cast<const sockaddr_in6 *>(A)->sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(&V6) ||
         (IN6_IS_ADDR_V4MAPPED(&V6) && V6.s6_addr[12] == 127);
}

/// Protected mode's test: whether \p Host, resolved as the transport
/// resolves a listen address (getaddrinfo, any family, stream sockets,
/// AI_PASSIVE; an empty host is the wildcard), yields only loopback
/// addresses. The transport binds the first of them; requiring all keeps
/// the answer true whichever that is.
static Expected<bool> listensOnLoopbackOnly(StringRef Host, uint16_t Port) {
  addrinfo Hints{}, *Res = nullptr;
  Hints.ai_family = AF_UNSPEC;
  Hints.ai_socktype = SOCK_STREAM;
  Hints.ai_flags = AI_PASSIVE;
  std::string H = Host.str(), P = std::to_string(Port);
  if (int RC = getaddrinfo(H.empty() ? nullptr : H.c_str(), P.c_str(), &Hints,
                           &Res))
    return createStringError("cannot resolve '%s:%u': %s", H.c_str(),
                             unsigned(Port), gai_strerror(RC));
  bool All = Res != nullptr;
  for (const addrinfo *I = Res; I; I = I->ai_next)
    All = All && isLoopback(I->ai_addr);
  freeaddrinfo(Res);
  return All;
}

static Expected<std::set<ArchiveHash>> readAllowList(StringRef Path) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> B = MemoryBuffer::getFile(Path);
  if (!B)
    return createStringError(B.getError(), "'%s': %s", Path.str().c_str(),
                             B.getError().message().c_str());
  std::set<ArchiveHash> Out;
  SmallVector<StringRef, 8> Lines;
  (*B)->getBuffer().split(Lines, '\n');
  unsigned N = 0;
  for (StringRef L : Lines) {
    ++N;
    L = L.trim();
    if (L.empty() || L.starts_with("#"))
      continue;
    std::string Raw;
    if (L.size() != 64 || !tryGetFromHex(L, Raw))
      return createStringError("'%s':%u: not a 64-digit hex hash",
                               Path.str().c_str(), N);
    ArchiveHash H;
    std::copy(Raw.begin(), Raw.end(), H.begin());
    Out.insert(H);
  }
  // The runtime reads an empty list as no list: every archive would run.
  if (Out.empty())
    return createStringError("'%s' lists no hash", Path.str().c_str());
  return Out;
}

int main(int argc, char **argv) {
  // A GPU target's worker process (runtime/gpu/GpuWorker.h): tc-serve
  // --gpu starts this executable again with --gpu-worker first.
  if (argc > 1 && StringRef(argv[1]) == GpuWorkerFlag)
    return gpuWorkerMain(argc, argv);
  const char *Tool = "tc-serve";
  std::string RegionFile;
  std::string Listen, RegionSize = "4096", Allow, MaxLoaded = "0",
                      Exec = "auto", IfuncPath, V, OptError, Fuel, MaxRunMs;
  bool Verbose = false, Pmix = false, Prewarm = true, Untrusted = false,
       GpuInfo = false, GpuTrace = false;
  std::optional<int> Gpu;
  std::string GpuPtx, GpuArch, GpuCuda;
  RuntimeOptions Opts;
  for (int I = 1; I < argc; ++I) {
    StringRef A = argv[I];
    if (std::optional<int> Exit = standardFlag(Tool, Usage, A))
      return *Exit;
    if (A == "--gpu" || A.starts_with("--gpu=")) {
      // --gpu, --gpu N or --gpu=N.
      StringRef N = A.consume_front("--gpu=") ? A : StringRef();
      if (N.empty() && I + 1 < argc && StringRef(argv[I + 1]).size() &&
          StringRef(argv[I + 1]).find_first_not_of("0123456789") ==
              StringRef::npos)
        N = argv[++I];
      int Dev = 0;
      if (!N.empty() && (N.getAsInteger(10, Dev) || Dev < 0))
        return toolError(Tool, "bad --gpu '" + N + "'");
      Gpu = Dev;
    } else if (takeOption(argc, argv, I, "--gpu-ptx", GpuPtx, OptError) ||
               takeOption(argc, argv, I, "--gpu-arch", GpuArch, OptError) ||
               takeOption(argc, argv, I, "--gpu-cuda", GpuCuda, OptError)) {
    } else if (A == "--gpu-info") {
      GpuInfo = true;
    } else if (A == "--gpu-trace") {
      GpuTrace = true;
    } else if (A == "-v") {
      Verbose = true;
    } else if (A == "--pmix") {
      Pmix = true;
    } else if (A == "--no-prewarm") {
      Prewarm = false;
    } else if (A == "--allow-untrusted-native") {
      Untrusted = true;
    } else if (takeOption(argc, argv, I, "--listen", Listen, OptError) ||
               takeOption(argc, argv, I, "--region-size", RegionSize, OptError) ||
               takeOption(argc, argv, I, "--region-file", RegionFile,
                          OptError) ||
               takeOption(argc, argv, I, "--allow", Allow, OptError) ||
               takeOption(argc, argv, I, "--max-loaded", MaxLoaded, OptError) ||
               takeOption(argc, argv, I, "--exec", Exec, OptError) ||
               takeOption(argc, argv, I, "--ifunc-path", IfuncPath, OptError)) {
    } else if (takeOption(argc, argv, I, "--fuel", Fuel, OptError) ||
               takeOption(argc, argv, I, "--max-run-ms", MaxRunMs,
                          OptError)) {
    } else if (takeOption(argc, argv, I, "--sandbox-allow", V, OptError)) {
      Opts.Jit.Sandbox.AllowCalls.push_back(V);
    } else if (takeOption(argc, argv, I, "--cache-dir", V, OptError)) {
      Opts.Jit.CacheDir = V;
    } else if (takeOption(argc, argv, I, "--trust", V, OptError)) {
      auto B = MemoryBuffer::getFile(V);
      if (!B)
        return toolError(Tool, "'" + V + "': " + B.getError().message());
      Expected<PublicKey> K = parsePublicKey((*B)->getBuffer());
      if (!K)
        return toolError(Tool, "'" + V + "': " + toString(K.takeError()));
      Opts.TrustedKeys.push_back(*K);
    } else if (takeOption(argc, argv, I, "--dep-dir", V, OptError)) {
      Opts.Jit.DepDirs.push_back(V);
    } else if (!OptError.empty()) {
      return toolError(Tool, OptError);
    } else {
      return toolError(Tool, "unknown argument '" + A + "' (try --help)");
    }
  }
  if (!GpuPtx.empty())
    return printPtx(Tool, GpuPtx, Gpu, GpuArch, GpuCuda);
  if (GpuInfo) {
    GpuOptions O;
    O.Device = Gpu.value_or(0);
    O.Prewarm = false;
    Expected<std::unique_ptr<GpuTarget>> G = GpuTarget::create(O);
    if (!G)
      return toolError(Tool, toString(G.takeError()));
    outs() << "tc-serve: " << describeGpu((*G)->info()) << "\n";
    return 0;
  }
  if (!GpuArch.empty() || !GpuCuda.empty())
    return toolError(Tool, "--gpu-arch and --gpu-cuda go with --gpu-ptx");
  if (Listen.empty() && !Pmix)
    return toolError(Tool, "missing --listen HOST:PORT (or --pmix)");
  std::pair<std::string, uint16_t> HostPort;
  if (!Listen.empty()) {
    auto HP = parseHostPort(Listen);
    if (!HP)
      return toolError(Tool, toString(HP.takeError()));
    HostPort = *HP;
  }
  const auto *HP = &HostPort;
  uint64_t Size;
  if (StringRef(RegionSize).getAsInteger(10, Size) || Size == 0 ||
      Size > (uint64_t(1) << 32))
    return toolError(Tool, "bad --region-size '" + RegionSize + "'");
  if (StringRef(MaxLoaded).getAsInteger(10, Opts.MaxLoaded))
    return toolError(Tool, "bad --max-loaded '" + MaxLoaded + "'");
  if (Exec == "auto")
    Opts.Mode = LoadMode::Auto;
  else if (Exec == "bitcode")
    Opts.Mode = LoadMode::Bitcode;
  else if (Exec == "object")
    Opts.Mode = LoadMode::Object;
  else if (Exec == "sandbox")
    Opts.Mode = LoadMode::Sandbox;
  else
    return toolError(Tool, "bad --exec '" + Exec +
                               "' (expected auto, bitcode, object or "
                               "sandbox)");
  if (!Fuel.empty() &&
      (StringRef(Fuel).getAsInteger(10, Opts.Sandbox.Fuel) ||
       Opts.Sandbox.Fuel == 0 || Opts.Sandbox.Fuel > uint64_t(INT64_MAX)))
    return toolError(Tool, "bad --fuel '" + Fuel + "'");
  unsigned MaxRun = 0;
  if (!MaxRunMs.empty() &&
      (StringRef(MaxRunMs).getAsInteger(10, MaxRun) || MaxRun == 0))
    return toolError(Tool, "bad --max-run-ms '" + MaxRunMs + "'");
  if (Opts.Mode != LoadMode::Sandbox &&
      (!Fuel.empty() || !Opts.Jit.Sandbox.AllowCalls.empty()))
    return toolError(Tool, "--fuel and --sandbox-allow need --exec sandbox");
  if (!Allow.empty()) {
    auto L = readAllowList(Allow);
    if (!L)
      return toolError(Tool, toString(L.takeError()));
    Opts.AllowedHashes = std::move(*L);
  }
  // Protected mode: a listener beyond loopback runs code from anyone who
  // reaches it, so it needs a policy on what runs or an explicit opt-in.
  // --pmix alone opens no listener: its peers are the ranks of its job.
  // The sandbox confines CPU code only: GPU code reaches all device memory
  // and what the driver maps for the device, so --exec sandbox is no
  // policy for a GPU target.
  if (!Listen.empty() && !Untrusted && Opts.TrustedKeys.empty() &&
      Opts.AllowedHashes.empty() && (Opts.Mode != LoadMode::Sandbox || Gpu)) {
    Expected<bool> Loopback = listensOnLoopbackOnly(HP->first, HP->second);
    if (!Loopback)
      return toolError(Tool, toString(Loopback.takeError()));
    if (!*Loopback)
      return toolError(
          Tool, "refusing to run native code from anyone who can reach " +
                    Listen + " (not a loopback address): give --trust "
                    "KEY.pub, --allow HASHFILE or " +
                    (Gpu ? "" : "--exec sandbox, or ") +
                    (Gpu ? "--allow-untrusted-native to run it anyway (GPU "
                           "code is not sandboxed)"
                         : "--allow-untrusted-native to run it anyway"));
  }

  // The region: zeroed, aligned for any type an ifunc may keep there; or
  // a file's pages, which keep what was written when the process dies.
  if (!RegionFile.empty() && Gpu)
    return toolError(Tool, "--region-file is for a CPU target: a GPU "
                           "target's region lives in device memory");
  Expected<RegionMemory> Region = RegionFile.empty()
                                      ? RegionMemory::zeroed(Size)
                                      : RegionMemory::mapFile(RegionFile, Size);
  if (!Region)
    return toolError(Tool, toString(Region.takeError()));
  Opts.TargetArgs = Region->get();
  Opts.Region = Region->get();
  Opts.RegionSize = Size;
  Opts.Sandbox.TargetArgsSize = Size;
  if (Prewarm)
    Opts.Jit.Prewarm = Opts.Mode;

  // A GPU target: the device, its context and its region first, so that a
  // machine without one fails before anything listens.
  std::shared_ptr<GpuTarget> G;
  if (Gpu) {
    GpuOptions GO;
    GO.Device = *Gpu;
    GO.RegionSize = Size;
    GO.CacheDir = Opts.Jit.CacheDir;
    GO.MaxRunMs = MaxRun;
    GO.Prewarm = Prewarm;
    GO.Trace = GpuTrace;
    Expected<std::unique_ptr<GpuTarget>> GT = GpuTarget::create(GO);
    if (!GT)
      return toolError(Tool, toString(GT.takeError()));
    G = std::move(*GT);
    Opts.Device = G;
  }

  auto T = createUcxTransport();
  if (!T)
    return toolError(Tool, toString(T.takeError()));
  auto RT = Runtime::create(std::move(*T), std::move(Opts));
  if (!RT)
    return toolError(Tool, toString(RT.takeError()));
  Runtime &R = **RT;
  if (Error E = R.registerLocal("increment", tcServeIncrement))
    return toolError(Tool, toString(std::move(E)));
  if (Verbose) {
    // Each line as it happens: -v output is read by tools (tc-bench --gpu)
    // while the target runs.
    R.onEvent([](StringRef E) {
      outs() << "tc-serve: " << E << "\n";
      outs().flush();
    });
    outs() << "tc-serve: running " << R.jit().triple() << " code for cpu "
           << R.jit().cpu() << "\n";
    if (G) {
      outs() << "tc-serve: " << describeGpu(G->info()) << "\n";
      const tc::GpuInfo &I = G->info();
      outs() << formatv("tc-serve: gpu: worker pid {0} ready in {1:f1} ms; "
                        "{2}\n",
                        G->workerPid(), I.WorkerStartMillis,
                        I.StagingCopied.empty()
                            ? std::string("payloads are read in place")
                            : "payloads are copied once more (the driver "
                              "would not map the staging area: " +
                                  I.StagingCopied + ")");
      G->onEvent([](StringRef E) {
        outs() << "tc-serve: " << E << "\n";
        outs().flush();
      });
    }
    if (std::optional<double> Ms = R.jit().prewarmMillis())
      outs() << formatv("tc-serve: prewarmed the JIT ({0:f2} ms)\n", *Ms);
  }
  if (!IfuncPath.empty())
    if (Error E = preloadIfuncs(R, IfuncPath))
      return toolError(Tool, toString(std::move(E)));
  uint16_t Port = 0;
  if (!Listen.empty()) {
    auto P = R.transport().listen(HP->first, HP->second);
    if (!P)
      return toolError(Tool, toString(P.takeError()));
    Port = *P;
  }

  // After the transport: ours must be the fatal-signal handlers that run
  // first (UCX's backtrace printer stays for faults outside ifunc code).
  installFaultAttribution(Tool);
  SignalTarget = &R.transport();
  CounterSource = &R.counters();
  // Whichever way main() ends, a signal then no longer reaches for them
  // (the Runtime goes right after this).
  struct Unhook {
    ~Unhook() {
      SignalTarget = nullptr;
      CounterSource = nullptr;
    }
  } UnhookSignals;
  std::signal(SIGINT, onSignal);
  std::signal(SIGTERM, onSignal);
  std::atomic<bool> QuitWatchdog{false};
  std::thread Watchdog;
  if (MaxRun) {
    // Signals go to this thread, which dispatches, not to the watchdog.
    sigset_t Block, Old;
    sigemptyset(&Block);
    sigaddset(&Block, SIGINT);
    sigaddset(&Block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &Block, &Old);
    Watchdog = std::thread(watchdog, MaxRun, std::ref(QuitWatchdog));
    pthread_sigmask(SIG_SETMASK, &Old, nullptr);
  }
  // --- PMIx bootstrap (issue #20): publish, fence, then serve until every
  // rank has entered the closing barrier.
  std::unique_ptr<Bootstrap> Boot;
  if (Pmix) {
    auto B = joinJob(R.transport().address(),
                     Listen.empty() ? std::string()
                                    : HP->first + ":" + std::to_string(Port));
    if (!B)
      return toolError(Tool, "--pmix: " + toString(B.takeError()));
    Boot = std::move(*B);
    if (Error E = Boot->barrierAsync([](bool) {
          Stop = true;
          if (Transport *T = SignalTarget)
            T->signal();
        }))
      return toolError(Tool, toString(std::move(E)));
    outs() << "tc-serve: rank " << Boot->rank() << " of " << Boot->size()
           << ", pid " << ::getpid() << "\n";
  }
  // --- end PMIx bootstrap
  if (Verbose) {
    // For clients that connect by worker address (tc-bench over shared
    // memory, as it does with its own servers).
    Expected<std::string> Addr = R.transport().address();
    if (Addr)
      outs() << "tc-serve: worker address " << toHex(*Addr, true) << "\n";
    else
      consumeError(Addr.takeError());
  }
  if (!Listen.empty())
    outs() << "tc-serve: listening on " << HP->first << ":" << Port << "\n";
  outs().flush();

  std::string Failed;
  while (!Stop) {
    if (R.progress())
      continue;
    if (Error E = R.wait(-1)) {
      Failed = toString(std::move(E));
      break;
    }
  }

  QuitWatchdog = true;
  if (Watchdog.joinable())
    Watchdog.join();
  if (!Failed.empty())
    return toolError(Tool, Failed);
  outs().flush();
  printCounters(R.counters());
  if (G) {
    const GpuCounters &C = G->counters();
    outs() << formatv("tc-serve: gpu: launches {0}, faults {1} (over the "
                      "time limit {2}), lost {3}, worker restarts {4}, loads "
                      "{5} ({6} from the disk cache), large payloads {7}\n",
                      C.Launches, C.Faults, C.Overruns, C.Lost, C.Restarts,
                      C.Loads, C.DiskCacheHits, C.LargePayloads);
    if (GpuTrace && Verbose)
      for (const std::string &L : G->traceReport())
        outs() << "tc-serve: " << L << "\n";
    outs().flush();
  }
  return 0;
}
