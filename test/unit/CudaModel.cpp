//===- CudaModel.cpp - A model of the CUDA driver for tests without a GPU -===//
//
// libtc-cuda-model.so stands in for libcuda.so.1 (TC_CUDA_LIBRARY) where
// there is no GPU. It exports every entry point tc's driver table looks up
// (runtime/gpu/CudaDriver.h) and behaves as the real driver does where tc's
// GPU target depends on it (docs/runtime.md, "The driver model"):
//
//  - one device, sm_90, 132 multiprocessors, driver 13.0; device memory is
//    host memory (a device pointer is the host address);
//  - streams run their work in order on a thread each, so different
//    streams overlap and every launch is asynchronous; events and stream
//    queries say NOT_READY until the stream has reached them;
//  - kernels run on the host, by name: the entry points of the examples
//    and test ifuncs (__tc_kernel_gtsi, gsum, gfill, gsss, gchase, gfault,
//    gspin, tc_prewarm) are implemented here; the PTX a module is loaded
//    from must declare the entry (.entry NAME), and a name without a host
//    version is not found (CUDA_ERROR_NOT_FOUND);
//  - a fault is sticky, as on a real device: gfault with payload byte 1
//    leaves CUDA_ERROR_ILLEGAL_ADDRESS, byte 2 CUDA_ERROR_ILLEGAL_INSTRUCTION
//    (a trap), and from then on every call of the process fails with it
//    (cuDevicePrimaryCtxReset and a later cuDevicePrimaryCtxRetain too) and
//    no queued work runs;
//  - gspin waits for word 2 of the region to become non-zero; nothing else
//    ends it: its stream never finishes, and the synchronizing calls
//    (cuCtxSynchronize, cuStreamSynchronize, cuMemFree, a context reset)
//    block while it runs, as they do on a device.
//
// TC_FAKE_CUDA selects a device that cannot serve: nodevice (cuInit fails
// with CUDA_ERROR_NO_DEVICE), zero (no device), old (driver 10.2), nomap
// (cannot map host memory); noregister makes cuMemHostRegister and
// cuMemAllocAsync fail with CUDA_ERROR_NOT_SUPPORTED, as on a virtualised
// GPU (the target then copies payloads through pinned memory of its own,
// and allocates large ones with cuMemAlloc);
// hanglaunch makes a launch of gspin never return (a driver call that
// blocks). With TC_CUDA_MODEL_NOTE naming a file, gspin appends a line to
// it when it starts running, for tests to wait on.
//
//===----------------------------------------------------------------------===//

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <sys/mman.h>

namespace {

using CUresult = int;
using CUdeviceptr = unsigned long long;

enum : CUresult {
  Success = 0,
  InvalidValue = 1,
  OutOfMemory = 2,
  NotInitialized = 3,
  NoDevice = 100,
  InvalidDevice = 101,
  InvalidImage = 200,
  InvalidContext = 201,
  InvalidPtx = 218,
  InvalidHandle = 400,
  NotFound = 500,
  NotReady = 600,
  IllegalAddress = 700,
  IllegalInstruction = 715,
  NotSupported = 801,
};

const char *mode() {
  const char *M = std::getenv("TC_FAKE_CUDA");
  return M ? M : "";
}
bool isMode(const char *M) { return std::strcmp(mode(), M) == 0; }

struct Event {
  uint64_t Target = 0;  ///< Records made.
  uint64_t Reached = 0; ///< Records the stream has passed.
};

/// A kernel run on the host: its fault, or Success.
using Kernel = CUresult (*)(const unsigned char *Payload, uint64_t Size,
                            uint64_t *Region);

struct Item {
  enum Kind { Launch, Copy, Record, Free } What = Launch;
  Kernel Fn = nullptr;
  const unsigned char *Payload = nullptr;
  uint64_t Size = 0;
  uint64_t *Region = nullptr;
  void *Dst = nullptr;
  const void *Src = nullptr;
  std::shared_ptr<Event> Ev;
  uint64_t Value = 0;
};

struct Stream {
  std::deque<Item> Queue;
  bool Running = false; ///< An item is being run.
  bool Closing = false;
};

struct Module {
  std::set<std::string> Entries;
};

struct Function {
  std::string Name;
  Kernel Fn = nullptr;
};

struct LinkState {
  std::string Ptx, Cubin;
};

/// The process's one device and context.
struct Model {
  std::mutex M;
  std::condition_variable CV;
  bool Inited = false;
  CUresult Sticky = Success;
  std::set<Stream *> Streams;
  std::map<const void *, std::shared_ptr<Event>> Events;
  std::vector<std::pair<const char *, size_t>> Mapped; ///< Host ranges.
  std::map<CUdeviceptr, size_t> Big;                   ///< mmap'd allocations.

  bool idle() const {
    for (const Stream *S : Streams)
      if (!S->Queue.empty() || S->Running)
        return false;
    return true;
  }
};

Model &model() {
  static Model *M = new Model(); // Never destroyed: stream threads use it.
  return *M;
}

/// Sets the sticky error (under the lock): nothing queued runs any more.
void poison(Model &Md, CUresult R) {
  if (!Md.Sticky)
    Md.Sticky = R;
  for (Stream *S : Md.Streams)
    S->Queue.clear();
  Md.CV.notify_all();
}

// The kernels the model runs, by entry point.

CUresult kGtsi(const unsigned char *, uint64_t, uint64_t *R) {
  __atomic_fetch_add(&R[0], 1, __ATOMIC_RELAXED);
  return Success;
}
CUresult kGsum(const unsigned char *P, uint64_t N, uint64_t *R) {
  uint64_t S = 0;
  for (uint64_t I = 0; I + 8 <= N; I += 8) {
    uint64_t W;
    std::memcpy(&W, P + I, 8);
    S += W;
  }
  __atomic_fetch_add(&R[0], S, __ATOMIC_RELAXED);
  __atomic_fetch_add(&R[1], 1, __ATOMIC_RELAXED);
  return Success;
}
template <unsigned Words> bool args(const unsigned char *P, uint64_t N,
                                    uint64_t (&A)[Words]) {
  if (N < Words * 8)
    return false;
  std::memcpy(A, P, sizeof A);
  return true;
}
CUresult kGfill(const unsigned char *P, uint64_t N, uint64_t *R) {
  uint64_t A[4];
  if (!args(P, N, A) || A[1] == 0)
    return Success;
  for (uint64_t I = 0; I < A[1]; ++I)
    R[A[0] + I] = (A[2] * I + A[3]) % A[1];
  return Success;
}
CUresult kGsss(const unsigned char *P, uint64_t N, uint64_t *R) {
  uint64_t A[3];
  if (!args(P, N, A))
    return Success;
  uint64_t S = 0;
  for (uint64_t I = 0; I < A[1]; ++I)
    S += R[A[0] + I];
  __atomic_fetch_add(&R[A[2]], S, __ATOMIC_RELAXED);
  return Success;
}
CUresult kGchase(const unsigned char *P, uint64_t N, uint64_t *R) {
  uint64_t A[4];
  if (!args(P, N, A))
    return Success;
  uint64_t At = A[1];
  for (uint64_t H = 0; H < A[2]; ++H)
    At = R[A[0] + At];
  R[A[3]] = At;
  return Success;
}
CUresult kGfault(const unsigned char *P, uint64_t N, uint64_t *) {
  if (N && P[0] == 1)
    return IllegalAddress;
  if (N && P[0] == 2)
    return IllegalInstruction;
  return Success;
}
CUresult kGspin(const unsigned char *, uint64_t, uint64_t *R) {
  // A test waits for this line before it acts on a kernel that runs.
  if (const char *Note = std::getenv("TC_CUDA_MODEL_NOTE"))
    if (FILE *F = std::fopen(Note, "a")) {
      std::fputs("gspin running\n", F);
      std::fclose(F);
    }
  // Waits for a word nothing writes; polls gently (a model, not a load),
  // under the model's lock, as the host's copies into device memory write
  // under it.
  for (;;) {
    {
      std::lock_guard<std::mutex> L(model().M);
      if (R[2] != 0)
        return Success;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}
CUresult kNothing(const unsigned char *, uint64_t, uint64_t *) {
  return Success;
}

Kernel hostKernel(const std::string &Entry) {
  static const std::map<std::string, Kernel> Table = {
      {"__tc_kernel_gtsi", kGtsi},       {"__tc_kernel_gsum", kGsum},
      {"__tc_kernel_gfill", kGfill},     {"__tc_kernel_gsss", kGsss},
      {"__tc_kernel_gchase", kGchase},   {"__tc_kernel_gfault", kGfault},
      {"__tc_kernel_gspin", kGspin},     {"__tc_kernel_tc_prewarm", kNothing},
  };
  auto It = Table.find(Entry);
  return It == Table.end() ? nullptr : It->second;
}

/// A stream's thread: runs its items in order until it is closed and empty.
void runStream(Stream *S) {
  Model &Md = model();
  std::unique_lock<std::mutex> L(Md.M);
  for (;;) {
    Md.CV.wait(L, [&] { return !S->Queue.empty() || S->Closing; });
    if (S->Queue.empty()) {
      Md.Streams.erase(S);
      delete S;
      Md.CV.notify_all();
      return;
    }
    Item It = std::move(S->Queue.front());
    S->Queue.pop_front();
    if (It.What == Item::Record) {
      It.Ev->Reached = std::max(It.Ev->Reached, It.Value);
      Md.CV.notify_all();
      continue;
    }
    S->Running = true;
    L.unlock();
    CUresult Fault = Success;
    switch (It.What) {
    case Item::Launch:
      Fault = It.Fn(It.Payload, It.Size, It.Region);
      break;
    case Item::Copy:
      std::memcpy(It.Dst, It.Src, It.Size);
      break;
    case Item::Free:
      std::free(It.Dst);
      break;
    case Item::Record:
      break;
    }
    L.lock();
    S->Running = false;
    if (Fault)
      poison(Md, Fault);
    Md.CV.notify_all();
  }
}

/// The sticky error, or NotInitialized before cuInit; else Success.
CUresult gate(Model &Md) {
  if (!Md.Inited)
    return NotInitialized;
  return Md.Sticky;
}

/// Takes the model's lock as Md, or returns what every call returns first
/// (not initialised, or the sticky error).
#define ENTER(Md)                                                              \
  Model &Md = model();                                                         \
  std::lock_guard<std::mutex> Lock(Md.M);                                      \
  if (CUresult R = gate(Md))                                                   \
  return R

CUresult enqueue(void *StreamHandle, Item It) {
  ENTER(Md);
  auto *S = static_cast<Stream *>(StreamHandle);
  if (!Md.Streams.count(S))
    return InvalidHandle;
  S->Queue.push_back(std::move(It));
  Md.CV.notify_all();
  return Success;
}

bool mapped(Model &Md, const void *P) {
  for (auto &R : Md.Mapped)
    if (static_cast<const char *>(P) >= R.first &&
        static_cast<const char *>(P) < R.first + R.second)
      return true;
  return false;
}

void *allocate(size_t N) {
  // Large allocations lazily zeroed by the kernel, as device memory is
  // plentiful; small ones from the heap.
  void *P = ::mmap(nullptr, N ? N : 1, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return P == MAP_FAILED ? nullptr : P;
}

/// The driver's name and text of each status the model returns.
struct ErrorText {
  CUresult Code;
  const char *Name, *Text;
};
const ErrorText ErrorTexts[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {715, "CUDA_ERROR_ILLEGAL_INSTRUCTION",
     "an illegal instruction was encountered"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
};
const ErrorText *errorText(CUresult R) {
  for (const ErrorText &E : ErrorTexts)
    if (E.Code == R)
      return &E;
  return nullptr;
}

} // namespace

extern "C" {

CUresult cuGetErrorName(CUresult R, const char **S) {
  const ErrorText *E = errorText(R);
  *S = E ? E->Name : nullptr;
  return E ? 0 : 1;
}
CUresult cuGetErrorString(CUresult R, const char **S) {
  const ErrorText *E = errorText(R);
  *S = E ? E->Text : nullptr;
  return E ? 0 : 1;
}

CUresult cuInit(unsigned) {
  if (isMode("nodevice"))
    return NoDevice;
  Model &Md = model();
  std::lock_guard<std::mutex> L(Md.M);
  Md.Inited = true;
  return Md.Sticky;
}
CUresult cuDriverGetVersion(int *V) {
  *V = isMode("old") ? 10020 : 13000;
  return Success;
}
CUresult cuDeviceGetCount(int *N) {
  ENTER(Md);
  *N = isMode("zero") ? 0 : 1;
  return Success;
}
CUresult cuDeviceGet(int *D, int Ordinal) {
  ENTER(Md);
  if (Ordinal != 0)
    return InvalidDevice;
  *D = Ordinal;
  return Success;
}
CUresult cuDeviceGetName(char *Name, int Len, int) {
  std::strncpy(Name, "tc CUDA driver model", size_t(Len));
  return Success;
}
CUresult cuDeviceGetAttribute(int *V, int Attr, int) {
  switch (Attr) {
  case 75: *V = 9; return Success;   // compute capability major
  case 76: *V = 0; return Success;   // minor
  case 16: *V = 132; return Success; // multiprocessors
  case 19: *V = !isMode("nomap"); return Success; // map host memory
  default: return NotSupported;
  }
}
CUresult cuDeviceTotalMem_v2(size_t *Bytes, int) {
  *Bytes = size_t(80) << 30;
  return Success;
}

CUresult cuDevicePrimaryCtxRetain(void **Ctx, int) {
  ENTER(Md);
  *Ctx = &Md;
  return Success;
}
CUresult cuDevicePrimaryCtxRelease_v2(int) {
  Model &Md = model();
  std::unique_lock<std::mutex> L(Md.M);
  if (CUresult R = gate(Md))
    return R;
  Md.CV.wait(L, [&] { return Md.Sticky || Md.idle(); });
  return Md.Sticky;
}
CUresult cuDevicePrimaryCtxReset_v2(int D) {
  // A reset waits for the context's work, and does not clear a sticky
  // error (seen on an H200: a later retain fails with it again).
  return cuDevicePrimaryCtxRelease_v2(D);
}
CUresult cuCtxSetCurrent(void *) {
  Model &Md = model();
  std::lock_guard<std::mutex> L(Md.M);
  return gate(Md);
}
CUresult cuCtxSynchronize() {
  Model &Md = model();
  std::unique_lock<std::mutex> L(Md.M);
  if (CUresult R = gate(Md))
    return R;
  Md.CV.wait(L, [&] { return Md.Sticky || Md.idle(); });
  return Md.Sticky;
}

CUresult cuStreamCreate(void **Out, unsigned) {
  ENTER(Md);
  auto *S = new Stream();
  Md.Streams.insert(S);
  std::thread(runStream, S).detach();
  *Out = S;
  return Success;
}
CUresult cuStreamDestroy_v2(void *H) {
  // As the driver: returns at once; the stream goes once its work is done.
  Model &Md = model();
  std::lock_guard<std::mutex> L(Md.M);
  auto *S = static_cast<Stream *>(H);
  if (!Md.Streams.count(S))
    return InvalidHandle;
  S->Closing = true;
  Md.CV.notify_all();
  return Md.Sticky;
}
CUresult cuStreamSynchronize(void *H) {
  Model &Md = model();
  std::unique_lock<std::mutex> L(Md.M);
  if (CUresult R = gate(Md))
    return R;
  auto *S = static_cast<Stream *>(H);
  Md.CV.wait(L, [&] {
    return Md.Sticky || !Md.Streams.count(S) ||
           (S->Queue.empty() && !S->Running);
  });
  return Md.Sticky;
}
CUresult cuStreamQuery(void *H) {
  ENTER(Md);
  auto *S = static_cast<Stream *>(H);
  if (!Md.Streams.count(S))
    return InvalidHandle;
  return S->Queue.empty() && !S->Running ? Success : NotReady;
}

CUresult cuMemAlloc_v2(CUdeviceptr *P, size_t N) {
  ENTER(Md);
  void *Mem = allocate(N);
  if (!Mem)
    return OutOfMemory;
  *P = CUdeviceptr(uintptr_t(Mem));
  Md.Big[*P] = N ? N : 1;
  return Success;
}
CUresult cuMemFree_v2(CUdeviceptr P) {
  // Synchronizing: waits for the device's work first.
  Model &Md = model();
  std::unique_lock<std::mutex> L(Md.M);
  if (CUresult R = gate(Md))
    return R;
  Md.CV.wait(L, [&] { return Md.Sticky || Md.idle(); });
  if (Md.Sticky)
    return Md.Sticky;
  auto It = Md.Big.find(P);
  if (It == Md.Big.end())
    return InvalidValue;
  ::munmap(reinterpret_cast<void *>(uintptr_t(P)), It->second);
  Md.Big.erase(It);
  return Success;
}
CUresult cuMemAllocAsync(CUdeviceptr *P, size_t N, void *) {
  ENTER(Md);
  if (isMode("noregister"))
    return NotSupported; // A device without memory pools, too.
  void *Mem = std::malloc(N ? N : 1);
  if (!Mem)
    return OutOfMemory;
  *P = CUdeviceptr(uintptr_t(Mem));
  return Success;
}
CUresult cuMemFreeAsync(CUdeviceptr P, void *S) {
  Item It;
  It.What = Item::Free;
  It.Dst = reinterpret_cast<void *>(uintptr_t(P));
  return enqueue(S, std::move(It));
}
CUresult cuMemsetD8_v2(CUdeviceptr P, unsigned char V, size_t N) {
  ENTER(Md);
  std::memset(reinterpret_cast<void *>(uintptr_t(P)), V, N);
  return Success;
}
static CUresult copyNow(void *Dst, const void *Src, size_t N) {
  ENTER(Md);
  std::memcpy(Dst, Src, N);
  return Success;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr D, const void *S, size_t N) {
  return copyNow(reinterpret_cast<void *>(uintptr_t(D)), S, N);
}
CUresult cuMemcpyDtoH_v2(void *D, CUdeviceptr S, size_t N) {
  return copyNow(D, reinterpret_cast<const void *>(uintptr_t(S)), N);
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr D, CUdeviceptr S, size_t N) {
  return copyNow(reinterpret_cast<void *>(uintptr_t(D)),
                 reinterpret_cast<const void *>(uintptr_t(S)), N);
}
static CUresult copyLater(void *Dst, const void *Src, size_t N, void *S) {
  Item It;
  It.What = Item::Copy;
  It.Dst = Dst;
  It.Src = Src;
  It.Size = N;
  return enqueue(S, std::move(It));
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr D, const void *Src, size_t N,
                              void *S) {
  return copyLater(reinterpret_cast<void *>(uintptr_t(D)), Src, N, S);
}
CUresult cuMemcpyDtoHAsync_v2(void *D, CUdeviceptr Src, size_t N, void *S) {
  return copyLater(D, reinterpret_cast<const void *>(uintptr_t(Src)), N, S);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr D, CUdeviceptr Src, size_t N,
                              void *S) {
  return copyLater(reinterpret_cast<void *>(uintptr_t(D)),
                   reinterpret_cast<const void *>(uintptr_t(Src)), N, S);
}
CUresult cuMemHostAlloc(void **P, size_t N, unsigned) {
  ENTER(Md);
  void *Mem = allocate(N);
  if (!Mem)
    return OutOfMemory;
  Md.Mapped.push_back({static_cast<const char *>(Mem), N});
  *P = Mem;
  return Success;
}
/// Forgets the mapped host range at \p P (and unmaps it, \p Ours).
static CUresult unmapHost(void *P, bool Ours) {
  Model &Md = model();
  std::lock_guard<std::mutex> L(Md.M);
  for (auto It = Md.Mapped.begin(); It != Md.Mapped.end(); ++It)
    if (It->first == P) {
      if (Ours)
        ::munmap(P, It->second);
      Md.Mapped.erase(It);
      return Md.Sticky;
    }
  return InvalidValue;
}
CUresult cuMemFreeHost(void *P) { return unmapHost(P, true); }
CUresult cuMemHostRegister_v2(void *P, size_t N, unsigned) {
  ENTER(Md);
  if (isMode("noregister"))
    return NotSupported;
  Md.Mapped.push_back({static_cast<const char *>(P), N});
  return Success;
}
CUresult cuMemHostUnregister(void *P) { return unmapHost(P, false); }
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *D, void *P, unsigned) {
  ENTER(Md);
  if (!mapped(Md, P))
    return InvalidValue;
  *D = CUdeviceptr(uintptr_t(P));
  return Success;
}

// Modules: PTX is "JIT-compiled" by reading its entry points; a cubin is
// the model's own: a tag and the PTX it was linked from.
static const char CubinTag[] = "TC-CUDA-MODEL-CUBIN\n";

static CUresult readImage(const char *Image, Module &M) {
  std::string Text = Image;
  if (Text.compare(0, sizeof CubinTag - 1, CubinTag) == 0)
    Text.erase(0, sizeof CubinTag - 1);
  else if (Text.find(".version") == std::string::npos ||
           Text.find(".target") == std::string::npos)
    return Text.find(".entry") == std::string::npos ? InvalidImage
                                                     : InvalidPtx;
  for (size_t At = 0; (At = Text.find(".entry ", At)) != std::string::npos;) {
    At += 7;
    size_t End = Text.find_first_of("( \t\n", At);
    M.Entries.insert(Text.substr(At, End - At));
  }
  return M.Entries.empty() ? InvalidPtx : Success;
}

CUresult cuModuleLoadData(void **Out, const void *Image) {
  ENTER(Md);
  auto M = std::make_unique<Module>();
  if (CUresult R = readImage(static_cast<const char *>(Image), *M))
    return R;
  *Out = M.release();
  return Success;
}
CUresult cuModuleLoadDataEx(void **Out, const void *Image, unsigned, int *,
                            void **) {
  return cuModuleLoadData(Out, Image);
}
CUresult cuModuleUnload(void *M) {
  delete static_cast<Module *>(M);
  return model().Sticky;
}
CUresult cuModuleGetFunction(void **F, void *M, const char *Name) {
  ENTER(Md);
  auto *Mod = static_cast<Module *>(M);
  Kernel K = hostKernel(Name);
  if (!Mod->Entries.count(Name) || !K)
    return NotFound;
  *F = new Function{Name, K};
  return Success;
}
CUresult cuFuncGetAttribute(int *V, int Attr, void *) {
  if (Attr != 0)
    return NotSupported;
  *V = 1024; // max threads per block
  return Success;
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *N, void *, int,
                                                     size_t) {
  *N = 8;
  return Success;
}
CUresult cuLaunchKernel(void *F, unsigned GX, unsigned GY, unsigned GZ,
                        unsigned BX, unsigned BY, unsigned BZ, unsigned,
                        void *S, void **Params, void **Extra) {
  if (!F || !Params || Extra || !GX || !GY || !GZ || !BX || !BY || !BZ ||
      BX * BY * BZ > 1024)
    return InvalidValue;
  // hanglaunch: a launch of gspin never returns, as cuLaunchKernel blocks
  // on a stream whose launch queue is full behind a kernel that never ends.
  if (isMode("hanglaunch") && static_cast<Function *>(F)->Fn == kGspin)
    for (;;)
      std::this_thread::sleep_for(std::chrono::seconds(1));
  Item It;
  It.What = Item::Launch;
  It.Fn = static_cast<Function *>(F)->Fn;
  CUdeviceptr P = *static_cast<CUdeviceptr *>(Params[0]);
  It.Size = *static_cast<uint64_t *>(Params[1]);
  CUdeviceptr T = *static_cast<CUdeviceptr *>(Params[2]);
  It.Payload = reinterpret_cast<const unsigned char *>(uintptr_t(P));
  It.Region = reinterpret_cast<uint64_t *>(uintptr_t(T));
  return enqueue(S, std::move(It));
}

CUresult cuLinkCreate_v2(unsigned, int *, void **, void **State) {
  ENTER(Md);
  *State = new LinkState();
  return Success;
}
CUresult cuLinkAddData_v2(void *State, int Type, void *Data, size_t Size,
                          const char *, unsigned, int *, void **) {
  if (Type != 1) // CU_JIT_INPUT_PTX
    return NotSupported;
  auto *S = static_cast<LinkState *>(State);
  S->Ptx.append(static_cast<const char *>(Data), strnlen(static_cast<const char *>(Data), Size));
  Module M;
  return readImage(S->Ptx.c_str(), M);
}
CUresult cuLinkComplete(void *State, void **Out, size_t *Size) {
  auto *S = static_cast<LinkState *>(State);
  S->Cubin = CubinTag + S->Ptx;
  *Out = S->Cubin.data();
  *Size = S->Cubin.size() + 1;
  return model().Sticky;
}
CUresult cuLinkDestroy(void *State) {
  delete static_cast<LinkState *>(State);
  return Success;
}

CUresult cuEventCreate(void **E, unsigned) {
  ENTER(Md);
  auto Ev = std::make_shared<Event>();
  *E = Ev.get();
  Md.Events[Ev.get()] = Ev;
  return Success;
}
CUresult cuEventRecord(void *E, void *S) {
  std::shared_ptr<Event> Ev;
  Model &Md = model();
  {
    std::lock_guard<std::mutex> L(Md.M);
    auto It = Md.Events.find(E);
    if (It == Md.Events.end())
      return InvalidHandle;
    Ev = It->second;
    if (!Md.Sticky)
      ++Ev->Target;
  }
  Item It;
  It.What = Item::Record;
  It.Ev = Ev;
  It.Value = Ev->Target;
  return enqueue(S, std::move(It));
}
CUresult cuEventQuery(void *E) {
  ENTER(Md);
  auto It = Md.Events.find(E);
  if (It == Md.Events.end())
    return InvalidHandle;
  return It->second->Reached >= It->second->Target ? Success : NotReady;
}
CUresult cuEventDestroy_v2(void *E) {
  Model &Md = model();
  std::lock_guard<std::mutex> L(Md.M);
  Md.Events.erase(E); // Queued records keep it alive.
  return Md.Sticky;
}

} // extern "C"
