//===- Gpu.cpp - `tc-bench tsi --gpu`, `tc-bench sss --gpu` ---------------===//
//
// GPU targets (issue #35) against the CUDA driver doing the same work, in
// one run on one device:
//
//  tsi --gpu: the cached gtsi ifunc into `tc-serve --gpu` (a message and a
//    flush per round trip: the target answers the flush once the kernel is
//    done), next to cuda_raw: a forked process that receives the same UCX
//    active message and launches the same kernel, compiled before the
//    measurement, with cuLaunchKernel, and answers when the launch is done
//    (cuStreamQuery). Round-trip latency (p50, p99) and back-to-back rate.
//    First contact: the target's load of gtsi with an empty cache directory
//    (PTX from LLVM, the driver's link to machine code, module load) next
//    to the driver's own JIT of the same PTX (cuModuleLoadData, after one
//    warm-up JIT, as the target prewarms), and its load from the disk cache
//    after a restart. The driver's own disk cache is off (CUDA_CACHE_DISABLE).
//  sss --gpu: gsss summing a region of device memory (1 GiB by default)
//    that gfill filled, next to cuMemcpyDtoD of the same size, counted as
//    bytes read plus written.
//
// Every figure is checked: the target's counter and sums are read back
// with tc-send --read-back and must be exact.
//
//===----------------------------------------------------------------------===//

#include "Bench.h"
#include "RawUcx.h"

#include "gpu/CudaDriver.h"
#include "gpu/GpuChannel.h"
#include "gpu/Ptx.h"
#include "tc/Archive.h"

#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <poll.h>
#include <sched.h>
#include <regex>
#include <sys/wait.h>
#include <unistd.h>

using namespace tc::cuda;

namespace bench {
namespace {

struct GpuOptions {
  int Device = 0;
  uint64_t Warmup = 200, Iters = 20000, Msgs = 100000;
  uint64_t RegionMiB = 1024, Reps = 20;
};

std::vector<Record> Out;

void add(const std::string &Bench, const std::string &Mode,
         const std::string &Metric, double V, const std::string &Unit) {
  Out.push_back(record(Bench, Mode, Metric, V, Unit));
}

std::string binDir() {
  std::string Self = selfPath();
  return Self.substr(0, Self.rfind('/'));
}

/// The archive NAME.tcfb in the ifunc path.
std::string archivePath(const std::string &IfuncPath, const std::string &Name) {
  for (size_t Pos = 0; Pos <= IfuncPath.size();) {
    size_t End = IfuncPath.find(':', Pos);
    if (End == std::string::npos)
      End = IfuncPath.size();
    std::string P = IfuncPath.substr(Pos, End - Pos) + "/" + Name + ".tcfb";
    if (access(P.c_str(), R_OK) == 0)
      return P;
    Pos = End + 1;
  }
  die("no " + Name + ".tcfb in the ifunc path '" + IfuncPath +
      "' (the GPU examples, examples/gpu)");
}

/// Reads \p S's output until a line matching \p Re, for at most
/// \p TimeoutS seconds; returns the match.
std::smatch awaitLine(Child &S, const std::regex &Re, const std::string &What,
                      std::string &Keep, double TimeoutS = 60) {
  auto T0 = Clock::now();
  for (;;) {
    size_t NL;
    while ((NL = Keep.find('\n')) != std::string::npos) {
      static std::string Line; // The match refers into it.
      Line = Keep.substr(0, NL);
      Keep.erase(0, NL + 1);
      std::smatch M;
      if (std::regex_search(Line, M, Re))
        return M;
    }
    checkInterruptsAndServers();
    double Left = TimeoutS - secondsSince(T0);
    if (Left <= 0)
      die(S.Name + " did not say " + What + " within " +
          std::to_string(int(TimeoutS)) + " s");
    pollfd P{S.Out, POLLIN, 0};
    if (poll(&P, 1, int(std::min(Left, 0.5) * 1000) + 1) <= 0)
      continue;
    char Chunk[4096];
    ssize_t N = read(S.Out, Chunk, sizeof Chunk);
    if (N <= 0)
      die(S.Name + " ended before it said " + What);
    Keep.append(Chunk, size_t(N));
  }
}

/// tc-serve --gpu, listening on loopback, with -v (its load lines).
Child startGpuServer(const GpuOptions &G, const std::vector<std::string> &More,
                     const std::string &Name) {
  std::vector<std::string> A = {
      binDir() + "/tc-serve", "--gpu", std::to_string(G.Device), "--listen",
      "127.0.0.1:0",          "-v"};
  A.insert(A.end(), More.begin(), More.end());
  return startServer(A, "", Name);
}

/// The region's first 8 bytes as a number, read by tc-send (its own
/// connection; the caller has flushed its messages).
uint64_t readWord0(const Child &S, const std::string &Archive) {
  // tc-send connects by HOST:PORT, whose wire-up needs tcp.
  std::string Env =
      ClientServerTls.empty() ? "" : "env UCX_TLS=" + ClientServerTls + " ";
  std::string Cmd = Env + "'" + binDir() + "/tc-send' --to " + S.Host + ":" +
                    std::to_string(S.Port) + " '" + Archive +
                    "' --count 0 --read-back 8 --timeout 60000";
  FILE *P = popen(Cmd.c_str(), "r");
  if (!P)
    die("cannot run tc-send");
  char Buf[128] = {};
  bool Got = std::fgets(Buf, sizeof Buf, P) != nullptr;
  int RC = pclose(P);
  if (!Got || RC != 0 || std::strlen(Buf) < 16)
    die("tc-send --read-back failed (" + std::string(Buf) + ")");
  uint64_t V = 0;
  for (int I = 7; I >= 0; --I) {
    unsigned B;
    if (std::sscanf(Buf + 2 * I, "%2x", &B) != 1)
      die("tc-send printed '" + std::string(Buf) + "'");
    V = V << 8 | B;
  }
  return V;
}

/// Microseconds at percentile \p P of \p V (sorted in place).
double percentile(std::vector<double> &V, double P) {
  std::sort(V.begin(), V.end());
  if (V.empty())
    return 0;
  size_t I = std::min(V.size() - 1, size_t(P / 100 * double(V.size())));
  return V[I];
}

//===----------------------------------------------------------------------===//
// The CUDA side of the references
//===----------------------------------------------------------------------===//

/// A device, its primary context and one stream, in a reference process.
struct Device {
  std::unique_ptr<Driver> D;
  CUdevice Dev = 0;
  CUcontext Ctx = nullptr;
  CUstream S = nullptr;
  std::string Arch;
  int Version = 0;

  std::string open(int Ordinal) {
    auto L = Driver::load();
    if (!L)
      return llvm::toString(L.takeError());
    D = std::move(*L);
    int Major = 0, Minor = 0;
    llvm::Error E = TC_CU(*D, cuInit, 0);
    if (!E)
      E = TC_CU(*D, cuDriverGetVersion, &Version);
    if (!E)
      E = TC_CU(*D, cuDeviceGet, &Dev, Ordinal);
    if (!E)
      E = TC_CU(*D, cuDeviceGetAttribute, &Major,
                CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, Dev);
    if (!E)
      E = TC_CU(*D, cuDeviceGetAttribute, &Minor,
                CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, Dev);
    if (!E)
      E = TC_CU(*D, cuDevicePrimaryCtxRetain, &Ctx, Dev);
    if (!E)
      E = TC_CU(*D, cuCtxSetCurrent, Ctx);
    if (!E)
      E = TC_CU(*D, cuStreamCreate, &S, CU_STREAM_NON_BLOCKING);
    Arch = "sm_" + std::to_string(Major) + std::to_string(Minor);
    return E ? llvm::toString(std::move(E)) : "";
  }
};

/// The PTX a GPU target of \p Dev lowers \p Archive's member to.
std::string ptxFor(const Device &Dev, const std::string &Archive,
                   std::string &Kernel, std::string &Err) {
  auto B = llvm::MemoryBuffer::getFile(Archive);
  if (!B) {
    Err = Archive + ": " + B.getError().message();
    return "";
  }
  auto A = tc::readArchive((*B)->getMemBufferRef());
  if (!A) {
    Err = llvm::toString(A.takeError());
    return "";
  }
  auto M = tc::selectMember(*A, tc::NvptxTriple, Dev.Arch, tc::Role::Target,
                            tc::ImageKind::Bitcode);
  if (!M) {
    Err = llvm::toString(M.takeError());
    return "";
  }
  auto C =
      tc::PtxCompiler::create(Dev.Arch, tc::ptxVersionForDriver(Dev.Version));
  if (!C) {
    Err = llvm::toString(C.takeError());
    return "";
  }
  auto P = (*C)->compile((*M)->Image, A->Name, (*M)->CPU);
  if (!P) {
    Err = llvm::toString(P.takeError());
    return "";
  }
  Kernel = P->Kernel;
  return P->Ptx;
}

//===----------------------------------------------------------------------===//
// tsi --gpu: cuda_raw
//===----------------------------------------------------------------------===//

constexpr unsigned CudaAmId = 5;

/// Driver calls per message and microseconds in them, by entry point.
struct CallCost {
  double Calls = 0, Us = 0;
};
using CallCosts = std::map<std::string, CallCost>;

struct RawArgs {
  GpuOptions G;
  std::string Archive; ///< gtsi.tcfb
  // Figures the driver side fills in.
  std::vector<double> Rtt;
  double Rate = 0;
  double DriverJitMs = 0, WarmJitMs = 0;
  CallCosts Calls; ///< cuda_raw's driver calls per message.
};

/// What cuda_raw's server sends its client at the end: calls and
/// nanoseconds of each entry point over its messages.
struct RawTrace {
  uint64_t Messages = 0;
  uint64_t Calls[tc::cuda::NumEntryPoints] = {};
  uint64_t Nanos[tc::cuda::NumEntryPoints] = {};
};

/// The cuda_raw server: UCX active messages, each launching the kernel.
struct RawServer : RawSide {
  Device *Dev = nullptr;
  CUfunction Fn = nullptr;
  char *Pinned = nullptr; ///< The payload, mapped for the device.
  CUdeviceptr PinnedDev = 0, Region = 0;
  uint64_t Received = 0, Launched = 0;
  std::string Err;
};

ucs_status_t onCuda(void *Arg, const void *, size_t, void *Data, size_t Length,
                    const ucp_am_recv_param_t *) {
  auto *S = static_cast<RawServer *>(Arg);
  ++S->Received;
  // As the target does: the payload into pinned, mapped memory, then the
  // launch with (payload, size, region).
  size_t N = std::min<size_t>(Length, 64);
  std::memcpy(S->Pinned, Data, N);
  CUdeviceptr P = S->PinnedDev, T = S->Region;
  uint64_t Size = N;
  void *Params[] = {&P, &Size, &T};
  if (llvm::Error E = TC_CU(*S->Dev->D, cuLaunchKernel, S->Fn, 1, 1, 1, 1, 1, 1,
                            0, S->Dev->S, Params, nullptr)) {
    if (S->Err.empty())
      S->Err = llvm::toString(std::move(E));
  } else {
    ++S->Launched;
  }
  return UCS_OK;
}

/// Waits for the stream (cuStreamQuery, polling as the target polls its
/// events) while progressing UCX.
std::string drainStream(RawServer &S) {
  Deadline DL;
  for (unsigned I = 0;; ++I) {
    CUresult R = S.Dev->D->cuStreamQuery(S.Dev->S);
    if (R == CUDA_SUCCESS)
      return "";
    if (R != CUDA_ERROR_NOT_READY)
      return llvm::toString(S.Dev->D->check(R, "cuStreamQuery"));
    if ((I & 1023) == 1023 && DL.passed(RawTimeoutS))
      return "timed out waiting for the GPU";
  }
}

int serveRaw(int Fd, void *Arg) {
  auto &A = *static_cast<RawArgs *>(Arg);
  RawServer S;
  Device Dev;
  std::string Err = Dev.open(A.G.Device);
  S.Dev = &Dev;
  std::string Kernel, Ptx;
  if (Err.empty())
    Ptx = ptxFor(Dev, A.Archive, Kernel, Err);
  // The driver's own JIT of the same PTX: once to warm it (the first JIT
  // of a process costs several times a later one; the target prewarms
  // too), then timed.
  double JitMs[2] = {0, 0};
  CUmodule Mod = nullptr;
  for (int I = 0; Err.empty() && I < 2; ++I) {
    if (Mod)
      (void)Dev.D->cuModuleUnload(Mod);
    auto T0 = Clock::now();
    if (llvm::Error E = TC_CU(*Dev.D, cuModuleLoadData, &Mod, Ptx.c_str()))
      Err = llvm::toString(std::move(E));
    JitMs[I] = secondsSince(T0) * 1e3;
  }
  if (Err.empty())
    if (llvm::Error E = joinErrors(
            TC_CU(*Dev.D, cuModuleGetFunction, &S.Fn, Mod, Kernel.c_str()),
            joinErrors(TC_CU(*Dev.D, cuMemAlloc, &S.Region, 64),
                       TC_CU(*Dev.D, cuMemsetD8, S.Region, 0, 64))))
      Err = llvm::toString(std::move(E));
  void *Host = nullptr;
  if (Err.empty())
    if (llvm::Error E = joinErrors(
            TC_CU(*Dev.D, cuMemHostAlloc, &Host, 4096,
                  CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE),
            TC_CU(*Dev.D, cuMemHostGetDevicePointer, &S.PinnedDev, Host, 0)))
      Err = llvm::toString(std::move(E));
  S.Pinned = static_cast<char *>(Host);
  // Every driver call from here on is counted and timed, as tc-serve
  // --gpu-trace counts its worker's.
  static tc::gpu::TraceSlot Slots[tc::cuda::NumEntryPoints];
  if (Err.empty())
    Dev.D->trace(Slots);
  writeAll(Fd, JitMs, sizeof JitMs);
  if (Err.empty())
    Err = rawAmInit(S, Fd, CudaAmId, onCuda, &S);
  static const unsigned char Pong = 1;
  uint64_t Pings = A.G.Warmup + A.G.Iters;
  // Ping-pong: answer each message once its launch is done.
  for (uint64_t I = 1; Err.empty() && I <= Pings; ++I) {
    Err = rawProgressUntil(
        S.W, [&] { return S.Received >= I; }, "the client's messages");
    if (Err.empty())
      Err = drainStream(S);
    if (Err.empty())
      Err = rawSendNow(S, CudaAmId, &Pong, 1);
  }
  // Rate: answer once every launch is done.
  if (Err.empty())
    Err = rawProgressUntil(
        S.W, [&] { return S.Received >= Pings + A.G.Msgs; },
        "the client's messages");
  if (Err.empty())
    Err = drainStream(S);
  RawTrace Trace;
  Trace.Messages = Pings + A.G.Msgs;
  for (unsigned I = 0; I < tc::cuda::NumEntryPoints; ++I) {
    Trace.Calls[I] = Slots[I].Calls.load();
    Trace.Nanos[I] = Slots[I].Nanos.load();
  }
  if (Err.empty())
    Err = rawSendNow(S, CudaAmId, &Pong, 1);
  if (Err.empty())
    writeAll(Fd, &Trace, sizeof Trace);
  rawAwaitGoodbye(Fd, Err);
  if (Err.empty() && !S.Err.empty())
    Err = S.Err;
  uint64_t Count = 0;
  if (Err.empty())
    if (llvm::Error E = TC_CU(*Dev.D, cuMemcpyDtoH, &Count, S.Region, 8))
      Err = llvm::toString(std::move(E));
  if (Err.empty() && Count != Pings + A.G.Msgs)
    Err = "the kernel counted " + std::to_string(Count) + " messages, " +
          std::to_string(Pings + A.G.Msgs) + " were sent";
  rawClose(S);
  return rawServerExit("cuda_raw", Err);
}

struct RawClient : RawSide {
  uint64_t Pongs = 0;
};

ucs_status_t onPong(void *Arg, const void *, size_t, void *, size_t,
                    const ucp_am_recv_param_t *) {
  ++static_cast<RawClient *>(Arg)->Pongs;
  return UCS_OK;
}

std::string driveRaw(int Fd, void *Arg) {
  auto &A = *static_cast<RawArgs *>(Arg);
  double JitMs[2];
  if (!readAll(Fd, JitMs, sizeof JitMs))
    return "the cuda_raw server did not start";
  A.WarmJitMs = JitMs[0];
  A.DriverJitMs = JitMs[1];
  RawClient C;
  std::string Err = rawAmInit(C, Fd, CudaAmId, onPong, &C);
  static const unsigned char Msg = 1;
  uint64_t Pings = A.G.Warmup + A.G.Iters;
  for (uint64_t I = 1; Err.empty() && I <= Pings; ++I) {
    auto T0 = Clock::now();
    Err = rawSendNow(C, CudaAmId, &Msg, 1);
    if (Err.empty())
      Err = rawProgressUntil(
          C.W, [&] { return C.Pongs >= I; }, "a pong");
    if (I > A.G.Warmup)
      A.Rtt.push_back(secondsSince(T0) * 1e6);
  }
  auto T0 = Clock::now();
  for (uint64_t I = 0; Err.empty() && I < A.G.Msgs; ++I) {
    Err = rawSendNow(C, CudaAmId, &Msg, 1);
    if ((I & 15) == 15)
      ucp_worker_progress(C.W);
  }
  if (Err.empty())
    Err = rawProgressUntil(
        C.W, [&] { return C.Pongs >= Pings + 1; }, "the last pong");
  if (Err.empty())
    A.Rate = double(A.G.Msgs) / secondsSince(T0);
  RawTrace Trace;
  if (Err.empty() && !readAll(Fd, &Trace, sizeof Trace))
    Err = "the cuda_raw server sent no trace";
  for (unsigned I = 0; Err.empty() && I < tc::cuda::NumEntryPoints; ++I)
    if (Trace.Calls[I])
      A.Calls[tc::cuda::entryPointSymbol(I)] = {
          double(Trace.Calls[I]) / double(Trace.Messages),
          double(Trace.Nanos[I]) / 1e3 / double(Trace.Messages)};
  char Bye = 0;
  writeAll(Fd, &Bye, 1);
  rawClose(C);
  return Err;
}

//===----------------------------------------------------------------------===//
// tsi --gpu
//===----------------------------------------------------------------------===//

double parseMs(const std::smatch &M) { return std::stod(M[1].str()); }

/// tc-serve --gpu-trace's report (GpuTarget::traceReport) in \p Out: the
/// driver calls per launch, and the hops between the target and its worker.
void parseTrace(const std::string &Out, CallCosts &Calls,
                std::map<std::string, double> &Hops) {
  static const std::regex Call("gpu trace: call (\\S+) ([0-9.]+) per launch, "
                               "[0-9.]+ us each, ([0-9.]+) us per launch");
  static const std::regex Hop("gpu trace: hop command ([0-9.]+) us, "
                              "completion ([0-9.]+) us, device ([0-9.]+) us");
  std::istringstream Lines(Out);
  for (std::string L; std::getline(Lines, L);) {
    std::smatch M;
    if (std::regex_search(L, M, Call))
      Calls[M[1].str()] = {std::stod(M[2].str()), std::stod(M[3].str())};
    else if (std::regex_search(L, M, Hop)) {
      Hops["hop_command"] = std::stod(M[1].str());
      Hops["hop_completion"] = std::stod(M[2].str());
      Hops["device"] = std::stod(M[3].str());
    }
  }
}

/// Records a side's driver calls per message (tsi's breakdown).
void addCalls(const std::string &Mode, const CallCosts &Calls) {
  double Total = 0;
  for (const auto &KV : Calls) {
    Total += KV.second.Us;
    if (KV.second.Calls < 0.01)
      continue; // Made once (start-up, the first contact), not per message.
    add("tsi", Mode, "driver_calls_" + KV.first, KV.second.Calls, "calls");
    add("tsi", Mode, "driver_us_" + KV.first, KV.second.Us, "us");
  }
  add("tsi", Mode, "driver_us_total", Total, "us");
}

int runTsiGpu(const CommonOptions &O, const GpuOptions &G) {
  std::string Gtsi = archivePath(O.IfuncPath, "gtsi");
  char Tmpl[] = "/tmp/tc-bench-gpu-XXXXXX";
  if (!mkdtemp(Tmpl))
    die("mkdtemp failed");
  std::string Cache = Tmpl;
  static const std::regex Loaded(
      "loaded gtsi [0-9a-f]+ \\(([0-9.]+) ms, ([^)]*)\\)");
  static const std::regex Split("lowered in ([0-9.]+) ms, loaded by the "
                                "driver in ([0-9.]+) ms");

  // The reference first: its server is forked (runPair), and this
  // process is single-threaded only until its tc client exists (a fork of
  // a process with threads may inherit a lock one of them held; TSan stops
  // a child that starts threads after one).
  note("tsi --gpu: cuda_raw (UCX active message + cuLaunchKernel)");
  RawArgs A;
  A.G = G;
  A.Archive = Gtsi;
  std::string Err = runPair(serveRaw, &A, driveRaw, &A);
  if (!Err.empty())
    die("cuda_raw: " + Err);

  // First contact, then steady state, on a target with an empty cache.
  note("tsi --gpu: tc-serve --gpu " + std::to_string(G.Device) +
       ", first contact and steady state");
  Child S = startGpuServer(G, {"--cache-dir", Cache, "--gpu-trace"},
                           "tc-serve --gpu");
  std::string Log;
  ClientWorker C;
  makeClient(C, O.IfuncPath, false);
  tc_ep_h Ep = connectTo(C, S);
  tc_ifunc_h F = registerIfunc(C, "gtsi");
  tc_msg_h M = nullptr;
  if (tc_msg_create(F, nullptr, 0, &M) != TC_OK)
    die("cannot create a gtsi message");
  auto Send = [&] {
    tc_status_t St = tc_msg_send(Ep, M, nullptr, nullptr);
    if (St != TC_INPROGRESS && St != TC_OK)
      die(std::string("send failed: ") + tc_status_string(St));
  };
  auto T0 = Clock::now();
  Send();
  flush(C, Ep);
  double FirstRttMs = secondsSince(T0) * 1e3;
  std::smatch Cold = awaitLine(S, Loaded, "'loaded gtsi'", Log);
  double ColdMs = parseMs(Cold);
  if (Cold[2].str().find("disk cache") != std::string::npos)
    die("the first load of gtsi came from a disk cache that was empty");
  std::string ColdLine = Cold.suffix().str();
  std::smatch ColdSplit;
  double ColdPtxMs = 0, ColdJitMs = 0;
  if (std::regex_search(ColdLine, ColdSplit, Split)) {
    ColdPtxMs = std::stod(ColdSplit[1].str());
    ColdJitMs = std::stod(ColdSplit[2].str());
  }
  std::vector<double> Rtt;
  for (uint64_t I = 0; I < G.Warmup + G.Iters; ++I) {
    auto T = Clock::now();
    Send();
    flush(C, Ep);
    if (I >= G.Warmup)
      Rtt.push_back(secondsSince(T) * 1e6);
  }
  double Rate = rate(C, Ep, Send, G.Msgs);
  uint64_t Want = 1 + G.Warmup + G.Iters + G.Msgs;
  uint64_t Count = readWord0(S, Gtsi);
  if (Count != Want)
    die("the GPU target counted " + std::to_string(Count) + " gtsi messages, " +
        std::to_string(Want) + " were sent");
  tc_msg_free(M);
  CallCosts TcCalls;
  std::map<std::string, double> Hops;
  parseTrace(Log + stopServerCollect(S), TcCalls, Hops);
  if (TcCalls.empty())
    die("tc-serve --gpu-trace printed no driver calls");

  // A restarted target finds gtsi's machine code in the cache directory.
  note("tsi --gpu: first contact from the disk cache");
  Child S2 = startGpuServer(G, {"--cache-dir", Cache}, "tc-serve --gpu");
  std::string Log2;
  tc_ep_h Ep2 = connectTo(C, S2);
  tc_msg_h M2 = nullptr;
  if (tc_msg_create(F, nullptr, 0, &M2) != TC_OK)
    die("cannot create a gtsi message");
  if (tc_msg_send(Ep2, M2, nullptr, nullptr) != TC_INPROGRESS)
    die("send failed");
  flush(C, Ep2);
  std::smatch Disk = awaitLine(S2, Loaded, "'loaded gtsi'", Log2);
  double DiskMs = parseMs(Disk);
  if (Disk[2].str().find("disk cache") == std::string::npos)
    die("the restarted target did not load gtsi from the disk cache (" +
        Disk[0].str() + ")");
  if (readWord0(S2, Gtsi) != 1)
    die("the restarted GPU target did not count gtsi's message");
  tc_msg_free(M2);
  stopServer(S2);
  std::string Rm = "rm -rf '" + Cache + "'";
  if (std::system(Rm.c_str()) != 0)
    note("could not remove " + Cache);

  double P50 = percentile(Rtt, 50), P99 = percentile(Rtt, 99);
  double RP50 = percentile(A.Rtt, 50), RP99 = percentile(A.Rtt, 99);
  add("tsi", "gpu", "round_trip_p50", P50, "us");
  add("tsi", "gpu", "round_trip_p99", P99, "us");
  add("tsi", "gpu", "rate", Rate, "msg/s");
  add("tsi", "cuda_raw", "round_trip_p50", RP50, "us");
  add("tsi", "cuda_raw", "round_trip_p99", RP99, "us");
  add("tsi", "cuda_raw", "rate", A.Rate, "msg/s");
  add("tsi", "gpu/cuda_raw", "latency_ratio", P50 / RP50, "x");
  add("tsi", "gpu/cuda_raw", "rate_ratio", Rate / A.Rate, "x");
  add("tsi", "first_contact", "cold_load", ColdMs, "ms");
  add("tsi", "first_contact", "cold_round_trip", FirstRttMs, "ms");
  add("tsi", "first_contact", "driver_jit", A.DriverJitMs, "ms");
  add("tsi", "first_contact", "driver_first_jit", A.WarmJitMs, "ms");
  add("tsi", "first_contact", "cold/driver_jit", ColdMs / A.DriverJitMs, "x");
  add("tsi", "first_contact", "disk_cache_load", DiskMs, "ms");
  add("tsi", "first_contact", "cold_ptx", ColdPtxMs, "ms");
  add("tsi", "first_contact", "cold_driver_load", ColdJitMs, "ms");
  // Where a message's time goes: the driver calls on each side, and tc's
  // hops to its GPU worker and back.
  addCalls("gpu", TcCalls);
  addCalls("cuda_raw", A.Calls);
  for (const auto &KV : Hops)
    add("tsi", "gpu", KV.first, KV.second, "us");
  return 0;
}

//===----------------------------------------------------------------------===//
// sss --gpu
//===----------------------------------------------------------------------===//

struct CopyArgs {
  GpuOptions G;
  double GBps = 0;
};

/// cuMemcpyDtoD of the region's size, Reps times after two warm-ups:
/// bytes read plus written per second.
int serveCopy(int Fd, void *Arg) {
  auto &A = *static_cast<CopyArgs *>(Arg);
  Device Dev;
  std::string Err = Dev.open(A.G.Device);
  size_t Bytes = size_t(A.G.RegionMiB) << 20;
  CUdeviceptr Src = 0, Dst = 0;
  if (Err.empty())
    if (llvm::Error E =
            joinErrors(joinErrors(TC_CU(*Dev.D, cuMemAlloc, &Src, Bytes),
                                  TC_CU(*Dev.D, cuMemAlloc, &Dst, Bytes)),
                       TC_CU(*Dev.D, cuMemsetD8, Src, 1, Bytes)))
      Err = llvm::toString(std::move(E));
  double GBps = 0;
  for (uint64_t Round = 0; Err.empty() && Round < 2; ++Round) {
    uint64_t N = Round == 0 ? 2 : A.G.Reps;
    auto T0 = Clock::now();
    for (uint64_t I = 0; Err.empty() && I < N; ++I)
      if (llvm::Error E =
              TC_CU(*Dev.D, cuMemcpyDtoDAsync, Dst, Src, Bytes, Dev.S))
        Err = llvm::toString(std::move(E));
    if (Err.empty())
      if (llvm::Error E = TC_CU(*Dev.D, cuStreamSynchronize, Dev.S))
        Err = llvm::toString(std::move(E));
    GBps = 2.0 * double(Bytes) * double(N) / secondsSince(T0) / 1e9;
  }
  // The copy is right: a byte of the destination is the source's.
  unsigned char Probe = 0;
  if (Err.empty())
    if (llvm::Error E = TC_CU(*Dev.D, cuMemcpyDtoH, &Probe, Dst + Bytes - 1, 1))
      Err = llvm::toString(std::move(E));
  if (Err.empty() && Probe != 1)
    Err = "cuMemcpyDtoD copied wrong bytes";
  writeAll(Fd, &GBps, sizeof GBps);
  return rawServerExit("cuda_memcpy_dtod", Err);
}

std::string driveCopy(int Fd, void *Arg) {
  auto &A = *static_cast<CopyArgs *>(Arg);
  if (!readAll(Fd, &A.GBps, sizeof A.GBps))
    return "the copy process did not answer";
  return "";
}

int runSssGpu(const CommonOptions &O, const GpuOptions &G) {
  std::string Gfill = archivePath(O.IfuncPath, "gfill");
  archivePath(O.IfuncPath, "gsss");
  uint64_t Words = (G.RegionMiB << 20) / 8;
  if (Words & (Words - 1))
    die("--region-mib must be a power of two");
  // Word 0: the sums; words 8..: the table gfill writes.
  uint64_t RegionBytes = (G.RegionMiB << 20) + 64;
  // The reference first, while this process has no threads (see tsi).
  note("sss --gpu: cuMemcpyDtoD of " + std::to_string(G.RegionMiB) + " MiB");
  CopyArgs A;
  A.G = G;
  std::string Err = runPair(serveCopy, &A, driveCopy, &A);
  if (!Err.empty())
    die("cuda_memcpy_dtod: " + Err);
  note("sss --gpu: gsss over " + std::to_string(G.RegionMiB) +
       " MiB of device memory");
  Child S = startGpuServer(G, {"--region-size", std::to_string(RegionBytes)},
                           "tc-serve --gpu");
  ClientWorker C;
  makeClient(C, O.IfuncPath, false);
  tc_ep_h Ep = connectTo(C, S);
  tc_ifunc_h Fill = registerIfunc(C, "gfill");
  tc_ifunc_h Sum = registerIfunc(C, "gsss");
  struct {
    uint64_t First, Count, Mul, Add;
  } FillArgs = {8, Words, 5, 1};
  struct {
    uint64_t First, Count, Result;
  } SumArgs = {8, Words, 0};
  tc_msg_h FM = nullptr, SM = nullptr;
  if (tc_msg_create(Fill, &FillArgs, sizeof FillArgs, &FM) != TC_OK ||
      tc_msg_create(Sum, &SumArgs, sizeof SumArgs, &SM) != TC_OK)
    die("cannot create the gfill and gsss messages");
  auto Send = [&](tc_msg_h M) {
    tc_status_t St = tc_msg_send(Ep, M, nullptr, nullptr);
    if (St != TC_INPROGRESS && St != TC_OK)
      die(std::string("send failed: ") + tc_status_string(St));
  };
  Send(FM);
  Send(SM); // Warm-up: the first contact and a first pass.
  Send(SM);
  flush(C, Ep);
  auto T0 = Clock::now();
  for (uint64_t I = 0; I < G.Reps; ++I)
    Send(SM);
  flush(C, Ep);
  double Seconds = secondsSince(T0);
  double GBps = double(Words * 8) * double(G.Reps) / Seconds / 1e9;
  // gfill wrote a permutation of 0..Words-1: each pass adds their sum.
  uint64_t Each = Words / 2 * (Words - 1);
  uint64_t Want = Each * (G.Reps + 2);
  uint64_t Got = readWord0(S, Gfill);
  if (Got != Want)
    die("gsss summed " + std::to_string(Got) + ", expected " +
        std::to_string(Want));
  tc_msg_free(FM);
  tc_msg_free(SM);
  stopServer(S);

  add("sss", "gpu", "bandwidth", GBps, "GB/s");
  add("sss", "cuda_memcpy_dtod", "bandwidth_read_write", A.GBps, "GB/s");
  add("sss", "gpu/dtod", "bandwidth_ratio", GBps / A.GBps, "x");
  return 0;
}

const char *const GpuUsage =
    R"(USAGE: tc-bench tsi --gpu[=N] [options]
       tc-bench sss --gpu[=N] [options]

GPU targets (tc-serve --gpu N, device 0 by default) against the CUDA driver
doing the same work in the same run. Needs the NVIDIA driver and the GPU
examples (gtsi, gsss, gfill: examples/gpu).

tsi: the cached gtsi ifunc, a message and a flush per round trip (p50, p99)
and back to back (rate), next to cuda_raw (the same UCX active message and
cuLaunchKernel of the same kernel, compiled before it is timed); first
contact: the target's load of gtsi (PTX, driver link, module load) next to
the driver's own JIT of the same PTX, and its load from the disk cache.
sss: gsss over a region of device memory that gfill filled, next to
cuMemcpyDtoD of the same size (bytes read + written per second).

OPTIONS:
  --iters N       Round trips timed (20000; --quick 2000)
  --msgs N        Messages for the rate (100000; --quick 10000)
  --region-mib N  sss: MiB of device memory summed, a power of two (1024)
  --reps N        sss: passes timed (20; --quick 5)
)";

} // namespace

bool wantsGpu(const std::vector<std::string> &Args) {
  for (const std::string &A : Args)
    if (A == "--gpu" || A.rfind("--gpu=", 0) == 0)
      return true;
  return false;
}

int runGpu(const std::string &Scenario, const CommonOptions &O,
           const std::vector<std::string> &Args) {
  GpuOptions G;
  if (O.Quick) {
    G.Iters = 2000;
    G.Msgs = 10000;
    G.Reps = 5;
  }
  std::vector<std::string> Rest;
  for (size_t I = 0; I < Args.size(); ++I) {
    const std::string &A = Args[I];
    if (A == "--gpu" && I + 1 < Args.size() && !Args[I + 1].empty() &&
        Args[I + 1].find_first_not_of("0123456789") == std::string::npos) {
      G.Device = int(parseCount(A, Args[++I]));
    } else if (A.rfind("--gpu=", 0) == 0) {
      G.Device = int(parseCount("--gpu", A.substr(6)));
    } else if (A != "--gpu") {
      Rest.push_back(A);
    }
  }
  if (!walkArgs(Scenario + " --gpu", Rest, GpuUsage,
                [&](const std::string &Flag,
                    const std::function<std::string()> &Value) {
                  if (Flag == "--iters")
                    G.Iters = parseCount(Flag, Value());
                  else if (Flag == "--msgs")
                    G.Msgs = parseCount(Flag, Value());
                  else if (Flag == "--region-mib")
                    G.RegionMiB = parseCount(Flag, Value());
                  else if (Flag == "--reps")
                    G.Reps = parseCount(Flag, Value());
                  else
                    return false;
                  return true;
                }))
    return 0;
  if (G.Iters == 0 || G.Msgs == 0 || G.Reps == 0 || G.RegionMiB == 0 ||
      G.RegionMiB > 4095)
    die("--iters, --msgs, --reps and --region-mib (up to 4095) must be "
        "positive");
  // The driver's JIT cache would turn every first contact after the first
  // run into a cache hit: off for the targets and references we start.
  setenv("CUDA_CACHE_DISABLE", "1", 1);
  // tc-serve prints its worker address with -v: connect by it, as the
  // other scenarios do over shared memory. Its listener serves tc-send's
  // read-backs, whose wire-up needs tcp: every process here gets the same
  // transports (UCX 1.13 asserts in a server whose peer connected by
  // address with fewer).
  selectTransport(O.Transport, /*Loopback=*/true);
  if (!ClientServerTls.empty()) {
    setenv("UCX_TLS", ClientServerTls.c_str(), 1);
    ClientServerTls.clear();
  }
  // The target has two busy processes (tc-serve and its GPU worker, which
  // inherits its CPUs): a CPU each, beside the client's; cuda_raw's one
  // server process has the first of them.
  cpu_set_t All;
  int Third = -1;
  if (sched_getaffinity(0, sizeof All, &All) == 0)
    for (int Cpu = 0, Seen = 0; Cpu < CPU_SETSIZE; ++Cpu)
      if (CPU_ISSET(Cpu, &All) && ++Seen == 3) {
        Third = Cpu;
        break;
      }
  if (pinClientAndServer(O.Pin))
    ServerCpu2 = Third;
  int RC = Scenario == "tsi" ? runTsiGpu(O, G) : runSssGpu(O, G);
  printRecords(Out, O.Fmt);
  return RC;
}

} // namespace bench
