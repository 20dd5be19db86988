//===- tc-serve.cpp - A ready-made tc target process ----------------------===//
//
// Listens for connections, runs every ifunc that arrives with one zeroed
// memory region as its target_args, lets senders read that region, and on
// SIGINT/SIGTERM prints its counters and exits 0. Idle, it blocks in the
// transport's wait: no CPU.
//
//===----------------------------------------------------------------------===//

#include "Bootstrap.h"
#include "Runtime.h"
#include "ToolSupport.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <unistd.h>

using namespace llvm;
using namespace tc;

static const char *const Usage =
    R"(USAGE: tc-serve (--listen HOST:PORT | --pmix) [options]

Runs ifuncs sent by tc-send or libtc senders. Also runs one function linked
into tc-serve itself, "increment" (adds 1 to the region's first 8 bytes),
for `tc-send --local increment`: the active-message baseline.

OPTIONS:
  --listen HOST:PORT   Address to accept connections on (port 0: any)
  --region-size N      Bytes of target memory passed as target_args (4096)
  --allow FILE         Only run archives whose hash (64 hex digits per line)
                       is listed in FILE
  --dep-dir DIR        Only load dependencies from DIR (repeatable)
  --max-loaded N       Keep at most N code identities loaded (0: no limit)
  --cache-dir DIR      Keep compiled objects in DIR, so a restarted target
                       (or another one sharing DIR) skips the JIT
  --exec MODE          auto | bitcode | object
  --ifunc-path DIRS    Load every NAME.tcfb in these ':'-separated
                       directories at start, so their first messages find
                       the code ready (no JIT on first contact)
  --pmix               Started by mpirun or srun --mpi=pmix: publish this
                       worker under its rank (senders use --to-rank), and
                       exit when every rank of the job has finished (a
                       PMIx barrier); --listen is then optional
  -v                   One line per event
  --help, --version
)";

static std::atomic<bool> Stop{false};

/// The built-in local function: the TSI ifunc, linked in ahead of time.
extern "C" void tcServeIncrement(void *, size_t, void *Region) {
  ++*static_cast<uint64_t *>(Region);
}
static std::atomic<Transport *> SignalTarget{nullptr};

extern "C" void onSignal(int) {
  Stop = true;
  if (Transport *T = SignalTarget)
    T->signal();
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
  return Out;
}

int main(int argc, char **argv) {
  const char *Tool = "tc-serve";
  std::string Listen, RegionSize = "4096", Allow, MaxLoaded = "0",
                      Exec = "auto", IfuncPath, V, OptError;
  bool Verbose = false, Pmix = false;
  RuntimeOptions Opts;
  for (int I = 1; I < argc; ++I) {
    StringRef A = argv[I];
    if (std::optional<int> Exit = standardFlag(Tool, Usage, A))
      return *Exit;
    if (A == "-v") {
      Verbose = true;
    } else if (A == "--pmix") {
      Pmix = true;
    } else if (takeOption(argc, argv, I, "--listen", Listen, OptError) ||
               takeOption(argc, argv, I, "--region-size", RegionSize, OptError) ||
               takeOption(argc, argv, I, "--allow", Allow, OptError) ||
               takeOption(argc, argv, I, "--max-loaded", MaxLoaded, OptError) ||
               takeOption(argc, argv, I, "--exec", Exec, OptError) ||
               takeOption(argc, argv, I, "--ifunc-path", IfuncPath, OptError)) {
    } else if (takeOption(argc, argv, I, "--cache-dir", V, OptError)) {
      Opts.Jit.CacheDir = V;
    } else if (takeOption(argc, argv, I, "--dep-dir", V, OptError)) {
      Opts.Jit.DepDirs.push_back(V);
    } else if (!OptError.empty()) {
      return toolError(Tool, OptError);
    } else {
      return toolError(Tool, "unknown argument '" + A + "' (try --help)");
    }
  }
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
  else
    return toolError(Tool, "bad --exec '" + Exec +
                               "' (expected auto, bitcode or object)");
  if (!Allow.empty()) {
    auto L = readAllowList(Allow);
    if (!L)
      return toolError(Tool, toString(L.takeError()));
    Opts.AllowedHashes = std::move(*L);
  }

  // The region: zeroed, aligned for any type an ifunc may keep there.
  std::unique_ptr<void, decltype(&std::free)> Region(
      std::aligned_alloc(64, (Size + 63) / 64 * 64), &std::free);
  if (!Region)
    return toolError(Tool, "cannot allocate the region");
  std::memset(Region.get(), 0, Size);
  Opts.TargetArgs = Region.get();
  Opts.Region = Region.get();
  Opts.RegionSize = Size;

  auto T = createUcxTransport();
  if (!T)
    return toolError(Tool, toString(T.takeError()));
  auto RT = Runtime::create(std::move(*T), std::move(Opts));
  if (!RT)
    return toolError(Tool, toString(RT.takeError()));
  Runtime &R = **RT;
  if (Error E = R.registerLocal("increment", tcServeIncrement))
    return toolError(Tool, toString(std::move(E)));
  if (Verbose)
    R.onEvent([](StringRef E) { outs() << "tc-serve: " << E << "\n"; });
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

  SignalTarget = &R.transport();
  std::signal(SIGINT, onSignal);
  std::signal(SIGTERM, onSignal);
  // --- PMIx bootstrap (issue #20): publish, fence, then serve until every
  // rank has entered the closing barrier.
  std::unique_ptr<Bootstrap> Boot;
  if (Pmix) {
    auto B = createPmixBootstrap();
    if (!B)
      return toolError(Tool, "--pmix: " + toString(B.takeError()));
    Boot = std::move(*B);
    auto Addr = R.transport().address();
    if (!Addr)
      return toolError(Tool, toString(Addr.takeError()));
    if (Error E = Boot->put(BootstrapAddressKey, *Addr))
      return toolError(Tool, toString(std::move(E)));
    if (!Listen.empty())
      if (Error E = Boot->put(BootstrapListenKey,
                              HP->first + ":" + std::to_string(Port)))
        return toolError(Tool, toString(std::move(E)));
    if (Error E = Boot->fence())
      return toolError(Tool, toString(std::move(E)));
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
  if (!Listen.empty())
    outs() << "tc-serve: listening on " << HP->first << ":" << Port << "\n";
  outs().flush();

  while (!Stop) {
    if (R.progress())
      continue;
    if (Error E = R.wait(-1))
      return toolError(Tool, toString(std::move(E)));
  }

  const RuntimeCounters &C = R.counters();
  uint64_t Errors = 0;
  for (const auto &KV : C.Errors)
    Errors += KV.second;
  outs() << formatv("tc-serve: received {0}, executed {1}, code frames {2}, "
                    "cache hits {3}, compiles {4} ({5:f2} ms), code requests "
                    "{6}, evictions {7}, errors {8}, disk cache hits {9}\n",
                    C.Received, C.Executed, C.CodeFrames, C.CacheHits,
                    C.Compiles, C.CompileMillis, C.CodeRequests, C.Evictions,
                    Errors, C.DiskCacheHits);
  for (const auto &KV : C.Errors)
    outs() << "tc-serve: errors: " << wireStatusName(KV.first) << ": "
           << KV.second << "\n";
  SignalTarget = nullptr;
  return 0;
}
