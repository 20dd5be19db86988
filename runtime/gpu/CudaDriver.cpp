//===- CudaDriver.cpp - The CUDA driver API, loaded at run time -----------===//

#include "gpu/CudaDriver.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
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
                  "11.0 or later",                                             \
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

std::string driverVersionText(int Version) {
  return formatv("{0}.{1}", Version / 1000, (Version % 1000) / 10).str();
}

} // namespace cuda
} // namespace tc
