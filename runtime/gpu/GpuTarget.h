//===- GpuTarget.h - Run ifuncs' GPU members on one CUDA device -*- C++ -*-===//
//
// A GPU target (tc-serve --gpu N) runs an archive's nvptx64 member on one
// device, and its CPU member on the host when the archive has no member for
// the device. The device belongs to a worker process (GpuWorker.h) that the
// target starts, watches, and ends and starts again when the device's
// context is lost (CUDA's sticky errors cannot be cleared inside the process
// that hit them) or a kernel overruns the time limit (no driver call stops
// one kernel; ending its process does). The target keeps its connections;
// the messages in flight on the device are answered with DeviceFault naming
// the ifunc, and the next message runs on the new worker.
//
//  - The target lowers members to PTX (Ptx.h) in this process; the worker
//    JITs the PTX (cuModuleLoadDataEx) and, with a cache directory, links
//    it into a cubin on a thread of its own for the disk cache, which later
//    loads and restarted workers read.
//  - The region (--region-size bytes) is the worker's device memory,
//    zeroed at every start; an ifunc's target_args is its device address.
//  - Payloads are written once, into the staging area of the memory the
//    target shares with its worker (GpuChannel.h), which the device reads
//    through its mapping; a payload larger than half of it goes to device
//    memory in pieces.
//  - Per connection one stream: the messages of a connection run in order,
//    different connections' may overlap. launch() returns without waiting;
//    poll() reports each operation when the worker says it is done, in
//    order per connection.
//  - Nothing here waits on the device: a full staging area or command ring
//    holds later operations back (in order) until room comes.
//
// Threads: load() may run on any thread (the Runtime's compile helper),
// concurrently with the rest; everything else belongs to the thread that
// created the target (the progress thread), which also starts workers (a
// worker ends with the thread that started it: PR_SET_PDEATHSIG).
//
//===----------------------------------------------------------------------===//

#ifndef TC_RUNTIME_GPU_GPUTARGET_H
#define TC_RUNTIME_GPU_GPUTARGET_H

#include "gpu/GpuChannel.h"
#include "gpu/Ptx.h"
#include "jit/Device.h"
#include "jit/Jit.h"

#include "tc/Archive.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <sys/types.h>
#include <thread>
#include <unordered_map>
#include <vector>

namespace tc {

struct GpuOptions {
  int Device = 0;           ///< CUDA device ordinal.
  size_t RegionSize = 4096; ///< Bytes of device memory for target_args.
  std::string CacheDir;     ///< Cubins on disk; empty: none.
  unsigned MaxRunMs = 0;    ///< A launch running longer faults; 0: none.
  std::string Library;      ///< The driver; empty: $TC_CUDA_LIBRARY or
                            ///< libcuda.so.1.
  /// Bytes of the staging area payloads and region reads pass through.
  size_t StagingBytes = size_t(16) << 20;
  bool Prewarm = true; ///< Lower and JIT a built-in module at each start.
  /// The executable that becomes the worker with --gpu-worker (tc-serve);
  /// empty: this process's own executable.
  std::string WorkerPath;
  bool Trace = false; ///< Count and time the worker's driver calls.
  /// How long a worker may take to start (cuInit, the context).
  unsigned StartTimeoutMs = 120000;
};

/// The device, as the worker found it.
struct GpuInfo {
  int Device = 0;
  std::string Name;      ///< "NVIDIA H100 80GB HBM3"
  std::string Arch;      ///< The device's sm: "sm_90".
  int DriverVersion = 0; ///< cuDriverGetVersion: 13000 is 13.0.
  int Multiprocessors = 0;
  size_t Memory = 0;       ///< Bytes of device memory.
  std::string CodeArch;    ///< The sm PTX is generated for (Ptx.h).
  unsigned PtxVersion = 0; ///< The PTX version written (78 is 7.8).
  std::string Library;     ///< The driver library loaded.
  double PrewarmMillis = 0;
  double WorkerStartMillis = 0; ///< The first worker's start, to ready.
  /// Empty when the device reads staging in place; else why the driver
  /// would not register it (payloads are copied once more).
  std::string StagingCopied;
};

/// One GPU member loaded. Its LoadedIfunc (Info) is what the Runtime keeps
/// for the code identity, with Info.Device pointing here.
struct GpuKernel {
  LoadedIfunc Info;
  uint32_t Id = 0;         ///< The worker's name for it.
  std::string Kernel;      ///< "__tc_kernel_NAME"
  std::string CodeArch;    ///< The sm the PTX was generated for.
  uint32_t Threads = 1;    ///< NAME_threads (1 when absent).
  std::optional<uint32_t> DeclaredThreads;
  unsigned Grid = 1, Block = 1;        ///< The launch shape.
  double PtxMillis = 0, JitMillis = 0; ///< Lowering; the worker's load.
  size_t PtxBytes = 0;
  std::string Ptx;       ///< Kept: a new worker loads it again.
  std::string CachePath; ///< Its cubin's file, with a cache directory.
  uint64_t Generation = 0; ///< The worker it is loaded in.
  unsigned Launched = 0;   ///< Launches not answered yet.
};

struct GpuCounters {
  uint64_t Launches = 0;
  uint64_t Faults = 0;   ///< Launches that faulted or overran.
  uint64_t Overruns = 0; ///< Of those, overran the time limit.
  uint64_t Lost = 0;     ///< Launches lost to another's fault.
  uint64_t Restarts = 0; ///< Workers started again.
  uint64_t Loads = 0, DiskCacheHits = 0;
  uint64_t LargePayloads = 0; ///< Payloads copied to device memory.
};

class GpuTarget final : public DeviceTarget {
public:
  /// Starts the worker, which loads the driver, finds device \p O.Device,
  /// opens its context and allocates the region; then sets up the PTX
  /// compiler for it. Fails with one line when there is no driver, no such
  /// device, or the device or LLVM cannot run PTX.
  static llvm::Expected<std::unique_ptr<GpuTarget>> create(const GpuOptions &O);
  ~GpuTarget() override;
  GpuTarget(const GpuTarget &) = delete;
  GpuTarget &operator=(const GpuTarget &) = delete;

  const GpuInfo &info() const { return Info; }
  const GpuCounters &counters() const { return Counters; }
  size_t regionSize() const { return Opts.RegionSize; }
  /// The worker's pid (-1 while none runs).
  pid_t workerPid() const { return Pid; }
  // DeviceTarget.
  std::string triple() const override { return NvptxTriple; }
  std::string arch() const override { return Info.Arch; }
  uint32_t driverVersion() const override {
    return uint32_t(Info.DriverVersion);
  }
  const Member *memberFor(const Archive &A) const override;
  llvm::Expected<const LoadedIfunc &> load(const Archive &A,
                                           const Member &M) override;
  void unload(const ArchiveHash &H) override;
  std::string describe(const LoadedIfunc &L) const override;
  llvm::Error launch(uint64_t Conn, const LoadedIfunc &L,
                     llvm::StringRef Payload, uint64_t Tag) override;
  void fence(uint64_t Conn, uint64_t Tag) override;
  void read(uint64_t Conn, uint64_t Length, uint64_t Tag) override;
  bool busy() const override;
  void closeConnection(uint64_t Conn) override;
  bool poll(llvm::function_ref<void(DeviceDone &)> Done) override;
  const LoadedIfunc *find(const ArchiveHash &H) const override;
  const GpuKernel *kernel(const ArchiveHash &H) const;

  /// A description of each event worth a line (a worker restarted, ...).
  void onEvent(std::function<void(llvm::StringRef)> CB) {
    EventCB = std::move(CB);
  }
  /// With GpuOptions::Trace: lines that say where a launch's time went
  /// (driver calls per launch and the time in each, the hops between the
  /// target and its worker).
  std::vector<std::string> traceReport() const;

private:
  GpuTarget() = default;
  /// A piece of the staging area, freed in allocation order.
  struct Alloc {
    size_t Begin = 0, End = 0; ///< Ring positions (counted over all laps).
    bool Done = false;
  };
  struct Pending;
  struct Work;
  struct Request;

  // The worker.
  llvm::Error startWorker();
  /// Reads the worker's hello; with \p Block, until it ends or times out.
  llvm::Error readHello(bool Block);
  /// The owner thread's turn: the hello, completions, a worker that ended
  /// or stopped answering (started again), held-back work.
  void service();
  /// Takes the worker's completions (any thread, under Mu).
  void consume();
  void workerGone(const std::string &Cause);
  void reap(bool Wait);
  void resetChannel();
  bool owner() const { return std::this_thread::get_id() == Owner; }

  // Commands.
  bool push(gpu::Cmd &C);
  Alloc *stage(size_t Size);
  void release(Alloc *A);
  /// Turns \p W into commands as far as room allows; true when all of it
  /// went.
  bool issue(Work &W);
  void issueHeldBack();
  /// Queues the load of \p K's code into the current worker (a restarted
  /// worker does not have it).
  bool reload(GpuKernel &K);
  void finish(uint64_t Conn, Pending &P, bool Ok, const std::string &Why);
  /// Records that command \p C (pushed) of \p Conn awaits the worker's
  /// answer; with \p Answers, the answer is the Runtime's operation \p Tag.
  Pending &expect(uint64_t Conn, const gpu::Cmd &C, uint64_t Tag, bool Answers,
                  Alloc *Mem);
  void landed(GpuKernel &K);
  /// Sends \p Image to the worker as kernel \p K and waits for its answer.
  llvm::Error loadInWorker(GpuKernel &K, const std::string &Image, bool IsPtx);
  /// Stages \p Image, a NUL, \p Tail and a NUL and sends one command of
  /// \p Kind about them (Load, Prewarm, CacheLink), under Mu; with \p Wait
  /// someone will await() the answer. Returns the command's Seq.
  llvm::Expected<uint64_t> request(gpu::CmdKind Kind, uint32_t Kernel,
                                   uint8_t Flags, uint64_t A,
                                   const std::string &Image,
                                   const std::string &Tail, bool Wait = true);
  /// Waits for request \p Seq's answer; called with Mu held, returns with
  /// it held.
  llvm::Error await(uint64_t Seq, Request &Out);
  /// Issues \p W, or holds it back (behind what is held back already).
  void issueOrHold(Work &W);
  std::string cacheKey(const Archive &A, const Member &M,
                       llvm::StringRef CodeArch) const;
  void event(const llvm::Twine &Msg);

  GpuOptions Opts;
  GpuInfo Info;
  GpuCounters Counters;
  std::unique_ptr<PtxCompiler> Ptx;
  std::string PrewarmPtx;
  std::thread::id Owner;

  /// Guards everything below (and Counters).
  mutable std::mutex Mu;
  std::condition_variable Answered; ///< A Request was answered.

  // The channel.
  int ShmFd = -1;
  void *Base = nullptr;
  size_t Bytes = 0;
  gpu::Channel Ch;
  uint64_t CmdHead = 0, DoneTail = 0;
  uint64_t NextSeq = 1, NextBig = 1;
  // The staging ring (positions counted over all laps).
  size_t SHead = 0, STail = 0;
  std::deque<Alloc> Allocs;

  // The worker.
  enum class WorkerState { Starting, Ready, Down } State = WorkerState::Down;
  pid_t Pid = -1;
  int Sock = -1;
  uint64_t Generation = 0; ///< Bumped by every start.
  uint64_t StartNs = 0, NextRestartNs = 0, LastCheckNs = 0;
  uint64_t LastBeat = 0, LastBeatNs = 0;
  unsigned FailedStarts = 0;
  std::string Hello;  ///< What the worker said so far.
  std::string DownWhy; ///< Why no worker runs.
  std::vector<pid_t> Zombies;
  // What the worker said before it ended.
  bool FatalSeen = false;
  gpu::Done Fatal{};
  std::map<uint64_t, uint64_t> SubmittedThrough; ///< Conn -> last Seq.

  /// Commands of each connection not answered yet, in order.
  std::map<uint64_t, std::deque<Pending>> Conns;
  size_t Answers = 0; ///< Pending entries that answer the Runtime.
  /// Operations held back, in arrival order.
  std::deque<std::unique_ptr<Work>> HeldBack;
  std::map<uint64_t, std::unique_ptr<Request>> Requests; ///< By Seq.
  std::vector<DeviceDone> Ready;

  mutable std::mutex KernelsMutex;
  std::map<ArchiveHash, std::unique_ptr<GpuKernel>> Kernels;
  std::unordered_map<uint32_t, GpuKernel *> ById;
  std::vector<std::unique_ptr<GpuKernel>> Doomed;
  uint32_t NextKernel = 1;
  std::function<void(llvm::StringRef)> EventCB;
};

} // namespace tc

#endif // TC_RUNTIME_GPU_GPUTARGET_H
