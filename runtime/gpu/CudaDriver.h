//===- CudaDriver.h - The CUDA driver API, loaded at run time ---*- C++ -*-===//
//
// tc builds without CUDA: a GPU target loads the driver (libcuda.so.1) with
// dlopen when it starts and reaches it through the small table below. The
// types, enum values and exported symbol names are the driver API's
// documented facts (cuda.h of CUDA 13.0): where cuda.h maps a name to a
// versioned entry point (`#define cuMemAlloc cuMemAlloc_v2`), the table
// looks up the versioned symbol, as a program compiled against cuda.h
// would call it. LLVM's offload plugin (plugins-nextgen/cuda/dynamic_cuda)
// loads the driver the same way.
//
// Every call's failure becomes an llvm::Error that names the call and the
// driver's name for the error (`cuModuleLoadData: CUDA_ERROR_INVALID_PTX
// (a PTX JIT compilation failed)`); CudaError keeps the code for callers
// that must tell a fault that loses the context from one that does not.
//
//===----------------------------------------------------------------------===//

#ifndef TC_RUNTIME_GPU_CUDADRIVER_H
#define TC_RUNTIME_GPU_CUDADRIVER_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace tc {
namespace cuda {

// Types (cuda.h). Handles are opaque pointers; a device pointer is 64 bits.
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st *;
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;
using CUstream = struct CUstream_st *;
using CUevent = struct CUevent_st *;
using CUlinkState = struct CUlinkState_st *;
using CUjit_option = int;
using CUjitInputType = int;
using CUdevice_attribute = int;

// CUresult values.
enum : CUresult {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_DEINITIALIZED = 4,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
  CUDA_ERROR_LAUNCH_TIMEOUT = 702,
  CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
  CUDA_ERROR_ASSERT = 710,
  CUDA_ERROR_HARDWARE_STACK_ERROR = 714,
  CUDA_ERROR_ILLEGAL_INSTRUCTION = 715,
  CUDA_ERROR_MISALIGNED_ADDRESS = 716,
  CUDA_ERROR_INVALID_ADDRESS_SPACE = 717,
  CUDA_ERROR_INVALID_PC = 718,
  CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_NOT_SUPPORTED = 801,
};

// CUdevice_attribute values.
enum : CUdevice_attribute {
  CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY = 19,
  CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
};

// CUfunction_attribute values.
enum : int {
  CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
};

// CUjit_option values.
enum : CUjit_option {
  CU_JIT_WALL_TIME = 2,
  CU_JIT_INFO_LOG_BUFFER = 3,
  CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
  CU_JIT_ERROR_LOG_BUFFER = 5,
  CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
  CU_JIT_OPTIMIZATION_LEVEL = 7,
  CU_JIT_TARGET_FROM_CUCONTEXT = 8,
};

// CUjitInputType values.
enum : CUjitInputType {
  CU_JIT_INPUT_CUBIN = 0,
  CU_JIT_INPUT_PTX = 1,
};

// Flags.
enum : unsigned {
  CU_STREAM_NON_BLOCKING = 0x1,
  CU_EVENT_DEFAULT = 0x0,
  CU_EVENT_DISABLE_TIMING = 0x2,
  CU_MEMHOSTALLOC_PORTABLE = 0x01,
  CU_MEMHOSTALLOC_DEVICEMAP = 0x02,
  CU_MEMHOSTREGISTER_PORTABLE = 0x01,
  CU_MEMHOSTREGISTER_DEVICEMAP = 0x02,
};

/// The entry points tc uses: X(member, exported symbol, parameter list).
/// Every one returns CUresult.
#define TC_CUDA_ENTRY_POINTS(X)                                                \
  X(cuGetErrorName, "cuGetErrorName", (CUresult, const char **))               \
  X(cuGetErrorString, "cuGetErrorString", (CUresult, const char **))           \
  X(cuInit, "cuInit", (unsigned))                                              \
  X(cuDriverGetVersion, "cuDriverGetVersion", (int *))                         \
  X(cuDeviceGet, "cuDeviceGet", (CUdevice *, int))                             \
  X(cuDeviceGetCount, "cuDeviceGetCount", (int *))                             \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute",                              \
    (int *, CUdevice_attribute, CUdevice))                                     \
  X(cuDeviceGetName, "cuDeviceGetName", (char *, int, CUdevice))               \
  X(cuDeviceTotalMem, "cuDeviceTotalMem_v2", (size_t *, CUdevice))             \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain",                      \
    (CUcontext *, CUdevice))                                                   \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (CUdevice))     \
  X(cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset_v2", (CUdevice))         \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", (CUcontext))                           \
  X(cuCtxSynchronize, "cuCtxSynchronize", ())                                  \
  X(cuStreamCreate, "cuStreamCreate", (CUstream *, unsigned))                  \
  X(cuStreamDestroy, "cuStreamDestroy_v2", (CUstream))                         \
  X(cuStreamSynchronize, "cuStreamSynchronize", (CUstream))                    \
  X(cuStreamQuery, "cuStreamQuery", (CUstream))                                \
  X(cuMemAlloc, "cuMemAlloc_v2", (CUdeviceptr *, size_t))                      \
  X(cuMemFree, "cuMemFree_v2", (CUdeviceptr))                                  \
  X(cuMemsetD8, "cuMemsetD8_v2", (CUdeviceptr, unsigned char, size_t))         \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", (CUdeviceptr, const void *, size_t))      \
  X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", (void *, CUdeviceptr, size_t))            \
  X(cuMemcpyDtoD, "cuMemcpyDtoD_v2", (CUdeviceptr, CUdeviceptr, size_t))       \
  X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2",                                 \
    (CUdeviceptr, const void *, size_t, CUstream))                             \
  X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2",                                 \
    (void *, CUdeviceptr, size_t, CUstream))                                   \
  X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2",                                 \
    (CUdeviceptr, CUdeviceptr, size_t, CUstream))                              \
  X(cuMemHostAlloc, "cuMemHostAlloc", (void **, size_t, unsigned))             \
  X(cuMemFreeHost, "cuMemFreeHost", (void *))                                  \
  X(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2",                 \
    (CUdeviceptr *, void *, unsigned))                                         \
  X(cuMemHostRegister, "cuMemHostRegister_v2", (void *, size_t, unsigned))     \
  X(cuMemHostUnregister, "cuMemHostUnregister", (void *))                      \
  X(cuMemAllocAsync, "cuMemAllocAsync", (CUdeviceptr *, size_t, CUstream))     \
  X(cuMemFreeAsync, "cuMemFreeAsync", (CUdeviceptr, CUstream))                 \
  X(cuLinkCreate, "cuLinkCreate_v2",                                           \
    (unsigned, CUjit_option *, void **, CUlinkState *))                        \
  X(cuLinkAddData, "cuLinkAddData_v2",                                         \
    (CUlinkState, CUjitInputType, void *, size_t, const char *, unsigned,      \
     CUjit_option *, void **))                                                 \
  X(cuLinkComplete, "cuLinkComplete", (CUlinkState, void **, size_t *))        \
  X(cuLinkDestroy, "cuLinkDestroy", (CUlinkState))                             \
  X(cuModuleLoadData, "cuModuleLoadData", (CUmodule *, const void *))          \
  X(cuModuleLoadDataEx, "cuModuleLoadDataEx",                                  \
    (CUmodule *, const void *, unsigned, CUjit_option *, void **))             \
  X(cuModuleUnload, "cuModuleUnload", (CUmodule))                              \
  X(cuModuleGetFunction, "cuModuleGetFunction",                                \
    (CUfunction *, CUmodule, const char *))                                    \
  X(cuLaunchKernel, "cuLaunchKernel",                                          \
    (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,   \
     unsigned, CUstream, void **, void **))                                    \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor,                               \
    "cuOccupancyMaxActiveBlocksPerMultiprocessor",                             \
    (int *, CUfunction, int, size_t))                                          \
  X(cuEventCreate, "cuEventCreate", (CUevent *, unsigned))                     \
  X(cuEventRecord, "cuEventRecord", (CUevent, CUstream))                       \
  X(cuEventQuery, "cuEventQuery", (CUevent))                                   \
  X(cuEventDestroy, "cuEventDestroy_v2", (CUevent))                            \
  X(cuFuncGetAttribute, "cuFuncGetAttribute", (int *, int, CUfunction))

/// The entry points' indices, in TC_CUDA_ENTRY_POINTS's order.
enum EntryPoint : unsigned {
#define TC_CUDA_INDEX(Name, Symbol, Params) Entry_##Name,
  TC_CUDA_ENTRY_POINTS(TC_CUDA_INDEX)
#undef TC_CUDA_INDEX
      NumEntryPoints
};
/// The exported symbol of entry point \p I ("cuMemAlloc_v2").
const char *entryPointSymbol(unsigned I);

/// The environment variable that names the driver library instead of
/// libcuda.so.1 (a path or a soname, for dlopen).
constexpr const char *DriverLibraryEnv = "TC_CUDA_LIBRARY";
constexpr const char *DefaultDriverLibrary = "libcuda.so.1";

/// A failed driver call: which, and the driver's code.
class CudaError : public llvm::ErrorInfo<CudaError> {
public:
  static char ID;
  CudaError(std::string Call, CUresult Code, std::string Text)
      : Call(std::move(Call)), Code(Code), Text(std::move(Text)) {}
  /// "CALL: NAME (description)".
  void log(llvm::raw_ostream &OS) const override;
  std::error_code convertToErrorCode() const override {
    return llvm::inconvertibleErrorCode();
  }
  const std::string &call() const { return Call; }
  CUresult code() const { return Code; }

private:
  std::string Call;
  CUresult Code;
  std::string Text; ///< The driver's name and description of Code.
};

/// True for the errors after which the driver documents the context as
/// unusable ("the process must be terminated and relaunched" for the
/// runtime API; for the driver API, the context must be destroyed and made
/// again): a kernel's fault (illegal address, trap, assert, illegal
/// instruction, misaligned or wrong-space address, bad PC, stack error),
/// a launch failure or timeout, a destroyed context.
bool isContextLost(CUresult Code);
/// The CUresult inside \p E if it is a CudaError, else CUDA_SUCCESS; \p E
/// keeps its error (it is taken apart and put back).
CUresult errorCode(llvm::Error &E);

/// The loaded driver: a dlopen handle and the entry points it exports.
class Driver {
public:
  /// Loads \p Library (empty: $TC_CUDA_LIBRARY, else libcuda.so.1) and
  /// looks up every entry point; does not initialise it (cuInit). The
  /// error says which library could not be loaded or which symbol it
  /// lacks, and that tc needs an NVIDIA driver there.
  static llvm::Expected<std::unique_ptr<Driver>>
  load(llvm::StringRef Library = "");
  ~Driver();
  Driver(const Driver &) = delete;
  Driver &operator=(const Driver &) = delete;

  /// The library that was loaded, as given to dlopen.
  const std::string &library() const { return Library; }

  /// From now on every call through this table counts itself and the
  /// nanoseconds it took in \p Slots (NumEntryPoints pairs of atomics,
  /// which may live in shared memory). One driver per process may trace.
  template <typename Slot> void trace(Slot *Slots) {
    traceInto(&Slots[0].Calls, &Slots[0].Nanos, sizeof(Slot));
  }

  /// Success, or a CudaError naming \p Call and the driver's error.
  llvm::Error check(CUresult R, const char *Call) const;
  /// "CUDA_ERROR_X (description)", or "CUresult N" if the driver has no
  /// name for it.
  std::string describe(CUresult R) const;

#define TC_CUDA_MEMBER(Name, Symbol, Params) CUresult(*Name) Params = nullptr;
  TC_CUDA_ENTRY_POINTS(TC_CUDA_MEMBER)
#undef TC_CUDA_MEMBER

private:
  Driver() = default;
  void traceInto(std::atomic<uint64_t> *Calls, std::atomic<uint64_t> *Nanos,
                 size_t Stride);
  void *Handle = nullptr;
  std::string Library;
};

/// Calls a driver entry point and turns its result into an llvm::Error:
/// `TC_CU(D, cuMemAlloc, &P, N)` names "cuMemAlloc" in the error.
#define TC_CU(D, Name, ...) (D).check((D).Name(__VA_ARGS__), #Name)

/// The driver version as text: 13000 -> "13.0".
std::string driverVersionText(int Version);

} // namespace cuda
} // namespace tc

#endif // TC_RUNTIME_GPU_CUDADRIVER_H
