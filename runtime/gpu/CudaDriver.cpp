//===- CudaDriver.cpp - The CUDA driver API, loaded at run time -----------===//

#include "gpu/CudaDriver.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <ctime>
#include <dlfcn.h>

using namespace llvm;

namespace tc {
namespace cuda {

char CudaError::ID = 0;

void CudaError::log(raw_ostream &OS) const { OS << Call << ": " << Text; }

bool isContextLost(CUresult Code) {
  switch (Code) {
  case CUDA_ERROR_ILLEGAL_ADDRESS:
  case CUDA_ERROR_LAUNCH_TIMEOUT:
  case CUDA_ERROR_CONTEXT_IS_DESTROYED:
  case CUDA_ERROR_ASSERT:
  case CUDA_ERROR_HARDWARE_STACK_ERROR:
  case CUDA_ERROR_ILLEGAL_INSTRUCTION:
  case CUDA_ERROR_MISALIGNED_ADDRESS:
  case CUDA_ERROR_INVALID_ADDRESS_SPACE:
  case CUDA_ERROR_INVALID_PC:
  case CUDA_ERROR_LAUNCH_FAILED:
    return true;
  default:
    return false;
  }
}

CUresult errorCode(Error &E) {
  CUresult Code = CUDA_SUCCESS;
  E = handleErrors(std::move(E), [&](std::unique_ptr<CudaError> C) -> Error {
    Code = C->code();
    return Error(std::move(C));
  });
  return Code;
}

Expected<std::unique_ptr<Driver>> Driver::load(StringRef Library) {
  std::string Lib = Library.str();
  if (Lib.empty()) {
    const char *Env = std::getenv(DriverLibraryEnv);
    Lib = Env && *Env ? Env : DefaultDriverLibrary;
  }
  std::unique_ptr<Driver> D(new Driver());
  D->Library = Lib;
  // RTLD_LOCAL: the driver's symbols stay out of the global namespace that
  // ifunc code (and the JIT's symbol resolution) searches.
  D->Handle = ::dlopen(Lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!D->Handle) {
    const char *Why = ::dlerror();
    return createStringError(
        formatv("no CUDA driver: cannot load {0} ({1}); a GPU target needs "
                "the NVIDIA driver's libcuda.so.1",
                Lib, Why ? Why : "unknown reason")
            .str());
  }
#define TC_CUDA_LOOKUP(Name, Symbol, Params)                                   \
  {                                                                            \
    void *P = ::dlsym(D->Handle, Symbol);                                      \
    if (!P)                                                                    \
      return createStringError(                                                \
          formatv("the CUDA driver {0} lacks {1}: tc needs a driver of CUDA "  \
                  "11.2 or later",                                             \
                  Lib, Symbol)                                                 \
              .str());                                                         \
    D->Name = reinterpret_cast<decltype(D->Name)>(P);                          \
  }
  TC_CUDA_ENTRY_POINTS(TC_CUDA_LOOKUP)
#undef TC_CUDA_LOOKUP
  return std::move(D);
}

Driver::~Driver() {
  // The driver is not unloaded: its own exit handlers and threads may
  // still refer to it while the process ends.
}

std::string Driver::describe(CUresult R) const {
  const char *Name = nullptr, *Text = nullptr;
  if (cuGetErrorName(R, &Name) != CUDA_SUCCESS || !Name)
    return formatv("CUresult {0}", R).str();
  if (cuGetErrorString(R, &Text) != CUDA_SUCCESS || !Text)
    return Name;
  return formatv("{0} ({1})", Name, Text).str();
}

Error Driver::check(CUresult R, const char *Call) const {
  if (LLVM_LIKELY(R == CUDA_SUCCESS))
    return Error::success();
  return make_error<CudaError>(Call, R, describe(R));
}

const char *entryPointSymbol(unsigned I) {
  static const char *const Symbols[] = {
#define TC_CUDA_SYMBOL(Name, Symbol, Params) Symbol,
      TC_CUDA_ENTRY_POINTS(TC_CUDA_SYMBOL)
#undef TC_CUDA_SYMBOL
  };
  return I < NumEntryPoints ? Symbols[I] : "?";
}

namespace {
/// Where traced calls count themselves (Driver::trace).
struct TraceSink {
  std::atomic<uint64_t> *Calls = nullptr, *Nanos = nullptr;
  size_t Stride = 0;
} Sink;

uint64_t nowNs() {
  timespec T;
  clock_gettime(CLOCK_MONOTONIC, &T);
  return uint64_t(T.tv_sec) * 1000000000u + uint64_t(T.tv_nsec);
}

/// A traced entry point: times the driver's function \p I.
template <unsigned I, typename F> struct Traced;
template <unsigned I, typename... A> struct Traced<I, CUresult (*)(A...)> {
  static inline CUresult (*Real)(A...) = nullptr;
  static CUresult call(A... Args) {
    uint64_t T0 = nowNs();
    CUresult R = Real(Args...);
    uint64_t T1 = nowNs();
    auto *C = reinterpret_cast<std::atomic<uint64_t> *>(
        reinterpret_cast<char *>(Sink.Calls) + I * Sink.Stride);
    auto *N = reinterpret_cast<std::atomic<uint64_t> *>(
        reinterpret_cast<char *>(Sink.Nanos) + I * Sink.Stride);
    C->fetch_add(1, std::memory_order_relaxed);
    N->fetch_add(T1 - T0, std::memory_order_relaxed);
    return R;
  }
};
} // namespace

void Driver::traceInto(std::atomic<uint64_t> *Calls,
                       std::atomic<uint64_t> *Nanos, size_t Stride) {
  Sink = {Calls, Nanos, Stride};
#define TC_CUDA_TRACE(Name, Symbol, Params)                                    \
  if (Name != &Traced<Entry_##Name, decltype(Name)>::call) {                   \
    Traced<Entry_##Name, decltype(Name)>::Real = Name;                         \
    Name = &Traced<Entry_##Name, decltype(Name)>::call;                        \
  }
  TC_CUDA_ENTRY_POINTS(TC_CUDA_TRACE)
#undef TC_CUDA_TRACE
}

std::string driverVersionText(int Version) {
  return formatv("{0}.{1}", Version / 1000, (Version % 1000) / 10).str();
}

} // namespace cuda
} // namespace tc
