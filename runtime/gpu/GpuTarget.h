//===- GpuTarget.h - Run ifuncs' GPU members on one CUDA device -*- C++ -*-===//
//
// A GPU target (tc-serve --gpu N) runs an archive's nvptx64 member on one
// device, through the CUDA driver (CudaDriver.h), and its CPU member on
// the host when the archive has no member for the device:
//
//  - the device's primary context; the region (--region-size bytes) in
//    device memory, zeroed; an ifunc's target_args is its device address;
//  - per connection one stream: the messages of a connection run in order,
//    different connections' may overlap;
//  - loading: the member is lowered to PTX in-process (Ptx.h), the driver
//    links the PTX into the device's machine code (cuLink*: a cubin), and
//    the cubin is loaded as a module. Cubins are kept in memory (a module
//    is reloaded from them after a context reset) and, with a cache
//    directory, on disk, keyed by the code identity, member, device sm,
//    PTX version, driver version and LLVM version;
//  - launching: the payload is copied once, into pinned host memory the
//    device reads through its mapping (cuMemHostAlloc DEVICEMAP), and the
//    kernel launched on the connection's stream with the member's launch
//    shape; launch() returns without waiting;
//  - completion: poll() records one event per stream for the launches
//    made since its last call and reports each operation as it finishes,
//    in order per connection; fences and region reads are operations on
//    the stream too, so they complete after the connection's earlier
//    messages;
//  - faults: a kernel that faults (illegal address, trap, ...) or runs
//    longer than the time limit ends with an error naming its ifunc; the
//    context is reset and made again (the region is new and zeroed, every
//    other operation in flight is reported lost) and the target goes on.
//
// Threads: load() may run on any thread (the Runtime's compile helper),
// and concurrently with the rest; everything else belongs to the thread
// that created the target (the progress thread).
//
//===----------------------------------------------------------------------===//

#ifndef TC_RUNTIME_GPU_GPUTARGET_H
#define TC_RUNTIME_GPU_GPUTARGET_H

#include "gpu/CudaDriver.h"
#include "gpu/Ptx.h"
#include "jit/Device.h"
#include "jit/Jit.h"

#include "tc/Archive.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tc {

struct GpuOptions {
  int Device = 0;           ///< CUDA device ordinal.
  size_t RegionSize = 4096; ///< Bytes of device memory for target_args.
  std::string CacheDir;     ///< Cubins on disk; empty: memory only.
  unsigned MaxRunMs = 0;    ///< A launch running longer faults; 0: none.
  std::string Library;      ///< The driver; empty: $TC_CUDA_LIBRARY or
                            ///< libcuda.so.1.
  /// Pinned, device-mapped host memory payloads are copied into for the
  /// kernel to read (a ring); a larger payload goes to device memory.
  size_t StagingBytes = size_t(16) << 20;
  bool Prewarm = true; ///< Lower a built-in module once at start.
};

/// The device, as create() found it.
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
};

/// One GPU member loaded on the device. Its LoadedIfunc (Info) is what the
/// Runtime keeps for the code identity, with Info.Device pointing here.
struct GpuKernel {
  LoadedIfunc Info;
  std::string Kernel;                   ///< "__tc_kernel_NAME"
  std::string CodeArch;                 ///< The sm the PTX was generated for.
  uint32_t Threads = 1;                 ///< NAME_threads (1 when absent).
  unsigned Grid = 1, Block = 1;         ///< The launch shape.
  double PtxMillis = 0, LinkMillis = 0; ///< Lowering and the driver's link.
  size_t PtxBytes = 0;
  std::string Cubin; ///< Kept: the module is reloaded from it.
  // The module and function in the context of generation Generation.
  cuda::CUmodule Module = nullptr;
  cuda::CUfunction Function = nullptr;
  uint64_t Generation = 0;
  unsigned Launched = 0; ///< Launches in flight (the progress thread's).
};

/// What one operation on a connection's stream came to.
using GpuDone = DeviceDone;

struct GpuCounters {
  uint64_t Launches = 0;
  uint64_t Faults = 0;   ///< Launches that faulted or overran.
  uint64_t Overruns = 0; ///< Of those, overran the time limit.
  uint64_t Lost = 0;     ///< Launches lost to another's fault.
  uint64_t Resets = 0;   ///< Contexts made again.
  uint64_t Loads = 0, DiskCacheHits = 0;
  uint64_t LargePayloads = 0; ///< Payloads copied to device memory.
};

class GpuTarget final : public DeviceTarget {
public:
  /// Loads the driver, initialises it, opens device \p O.Device's primary
  /// context and allocates the region. Fails with one line when there is
  /// no driver, no such device, or the device or LLVM cannot run PTX.
  static llvm::Expected<std::unique_ptr<GpuTarget>> create(const GpuOptions &O);
  ~GpuTarget() override;
  GpuTarget(const GpuTarget &) = delete;
  GpuTarget &operator=(const GpuTarget &) = delete;

  const GpuInfo &info() const { return Info; }
  const GpuCounters &counters() const { return Counters; }
  cuda::Driver &driver() { return *D; }
  /// The region's device address (what kernels get as target_args).
  cuda::CUdeviceptr region() const { return Region; }
  size_t regionSize() const { return Opts.RegionSize; }
  // DeviceTarget.
  std::string triple() const override { return NvptxTriple; }
  std::string arch() const override { return Info.Arch; }
  uint32_t driverVersion() const override {
    return uint32_t(Info.DriverVersion);
  }
  /// A bitcode nvptx64 member for the device's sm, or null.
  const Member *memberFor(const Archive &A) const override;
  /// Lowers, links and loads member \p M (memberFor()) unless its identity
  /// is loaded already. Any thread. Errors name the ifunc; LoadError kinds
  /// as the CPU JIT's (CompileFailed for lowering, link or module load).
  llvm::Expected<const LoadedIfunc &> load(const Archive &A,
                                           const Member &M) override;
  /// Forgets \p H: find() no longer returns it, and its module is freed
  /// once its launches in flight are done.
  void unload(const ArchiveHash &H) override;
  std::string describe(const LoadedIfunc &L) const override;
  /// Launches \p L's kernel on \p Conn's stream with \p Payload (copied
  /// first) and the region; \p Tag comes back in the GpuDone. An error
  /// here means nothing was launched (and, if the context was lost, it was
  /// made again: the other operations in flight are reported by poll()).
  llvm::Error launch(uint64_t Conn, const LoadedIfunc &L,
                     llvm::StringRef Payload, uint64_t Tag) override;
  /// A marker: done when every earlier operation on \p Conn is.
  void fence(uint64_t Conn, uint64_t Tag) override;
  /// Reads the first min(\p Length, region size) bytes of the region
  /// after every earlier operation on \p Conn.
  void read(uint64_t Conn, uint64_t Length, uint64_t Tag) override;
  bool busy() const override { return InFlight != 0 || !Ready.empty(); }
  /// Closes \p Conn's stream (its operations still complete).
  void closeConnection(uint64_t Conn) override;
  /// Records an event for each stream's launches since the last call,
  /// checks what finished and the time limit, and reports each finished
  /// operation to \p Done (in order per connection; faults first make the
  /// context again). Returns whether anything was reported.
  bool poll(llvm::function_ref<void(GpuDone &)> Done) override;

  const LoadedIfunc *find(const ArchiveHash &H) const override;
  /// The kernel loaded for \p H, or null.
  const GpuKernel *kernel(const ArchiveHash &H) const;
  /// Operations in flight or not reported on \p Conn.
  bool busy(uint64_t Conn) const;

  /// A description of each event worth a line (context recreated, ...).
  void onEvent(std::function<void(llvm::StringRef)> CB) {
    EventCB = std::move(CB);
  }

private:
  GpuTarget() = default;
  struct Op;
  struct Stream;
  struct Alloc;

  llvm::Error openContext(); ///< Retain, make current, region, staging.
  void closeContext();       ///< Frees what openContext made.
  /// After a lost context: reports every operation in flight (launches
  /// as failed: those that may have faulted, or with \p Overran those of
  /// its front group, blamed with \p Cause; the others as lost; fences as
  /// done; reads with the new region's zeros), resets the primary context
  /// and opens it again.
  void recover(Stream *Overran, const std::string &Cause);
  llvm::Expected<Stream *> stream(uint64_t Conn);
  llvm::Expected<cuda::CUevent> takeEvent();
  void giveEvent(cuda::CUevent E);
  /// Makes \p K's module current (reloads it after a reset).
  llvm::Error ensureModule(GpuKernel &K);
  llvm::Error loadModule(GpuKernel &K); ///< Under CtxMutex.
  /// The driver's link of \p Ptx into a cubin for this device.
  llvm::Expected<std::string> link(llvm::StringRef Ptx, llvm::StringRef Name);
  /// A launch's driver error: returned as it is, unless it says the
  /// context is lost, which recover()s first.
  llvm::Error failLaunch(llvm::Error E);
  /// Adds a fence or read to \p S with its own event.
  void pushMarker(Stream &S, Op O);
  /// Room for \p Size bytes of pinned, mapped staging; blocks for the
  /// oldest operations to finish when the ring is full. Null when \p Size
  /// is larger than the ring can ever hold.
  llvm::Expected<Alloc *> stage(size_t Size);
  void release(Alloc *A);
  std::string cacheKey(const Archive &A, const Member &M,
                       llvm::StringRef CodeArch) const;
  void event(const llvm::Twine &Msg);
  /// Completes the front group of \p S (its event finished).
  void finishGroup(Stream &S);
  /// A launch of \p K is done: frees K if unload() left it to the end.
  void landed(const GpuKernel &K);
  std::string describe(const Op &O) const;

  GpuOptions Opts;
  GpuInfo Info;
  GpuCounters Counters;
  std::unique_ptr<cuda::Driver> D;
  std::unique_ptr<PtxCompiler> Ptx;
  cuda::CUdevice Dev = 0;
  /// Guards the context against a reset while load() uses it on another
  /// thread: load() holds it, recover() takes it.
  mutable std::mutex CtxMutex;
  cuda::CUcontext Ctx = nullptr;
  uint64_t Generation = 1; ///< Bumped by every reset.
  cuda::CUdeviceptr Region = 0;
  // The staging ring: pinned, mapped host memory.
  char *Staging = nullptr;
  cuda::CUdeviceptr StagingDev = 0;
  size_t Head = 0, Tail = 0; ///< Bytes handed out / released, ever.
  std::deque<std::unique_ptr<Alloc>> Allocs; ///< In allocation order.
  std::vector<cuda::CUevent> FreeEvents;
  std::map<uint64_t, std::unique_ptr<Stream>> Streams;
  unsigned Closing = 0; ///< Streams closed with work still in flight.
  /// Unloaded kernels whose launches are still in flight.
  std::vector<std::unique_ptr<GpuKernel>> Doomed;
  unsigned InFlight = 0;      ///< Operations not reported yet.
  std::vector<GpuDone> Ready; ///< Reported at the next poll().
  /// Set when the context could not be made again: every operation fails
  /// with it.
  std::string Broken;

  mutable std::mutex KernelsMutex;
  std::map<ArchiveHash, std::unique_ptr<GpuKernel>> Kernels;
  std::function<void(llvm::StringRef)> EventCB;
};

} // namespace tc

#endif // TC_RUNTIME_GPU_GPUTARGET_H
