/* A stand-in for libcuda.so.1 in tests without a GPU: it exports every
 * entry point tc's driver table looks up (runtime/gpu/CudaDriver.h), and
 * answers the ones a GPU target calls before it opens a context, as the
 * environment variable TC_FAKE_CUDA says:
 *   nodevice  cuInit fails with CUDA_ERROR_NO_DEVICE (100)
 *   zero      cuInit succeeds and cuDeviceGetCount says 0
 *   old       one device (sm_90), driver version 10.2 (too old for tc)
 *   nomap     one device (sm_90), driver 13.0, that cannot map host memory
 * Every other entry point returns CUDA_ERROR_NOT_SUPPORTED (801): a test
 * that gets further than device discovery fails loudly. Not a GPU model:
 * it exists to test how tc reports what a driver says. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;

static const char *mode(void) {
  const char *M = getenv("TC_FAKE_CUDA");
  return M ? M : "";
}

CUresult cuGetErrorName(CUresult R, const char **S) {
  *S = R == 100 ? "CUDA_ERROR_NO_DEVICE"
       : R == 801 ? "CUDA_ERROR_NOT_SUPPORTED"
                  : "CUDA_ERROR_UNKNOWN";
  return 0;
}
CUresult cuGetErrorString(CUresult R, const char **S) {
  *S = R == 100 ? "no CUDA-capable device is detected"
       : R == 801 ? "operation not supported"
                  : "unknown error";
  return 0;
}
CUresult cuInit(unsigned Flags) {
  (void)Flags;
  return strcmp(mode(), "nodevice") == 0 ? 100 : 0;
}
CUresult cuDriverGetVersion(int *V) {
  *V = strcmp(mode(), "old") == 0 ? 10020 : 13000;
  return 0;
}
CUresult cuDeviceGetCount(int *N) {
  *N = strcmp(mode(), "zero") == 0 ? 0 : 1;
  return 0;
}
CUresult cuDeviceGet(int *D, int Ordinal) {
  *D = Ordinal;
  return 0;
}
CUresult cuDeviceGetName(char *Name, int Len, int Dev) {
  (void)Dev;
  strncpy(Name, "Fake Device", (size_t)Len);
  return 0;
}
CUresult cuDeviceGetAttribute(int *V, int Attr, int Dev) {
  (void)Dev;
  switch (Attr) {
  case 75: *V = 9; return 0;   /* compute capability major */
  case 76: *V = 0; return 0;   /* minor */
  case 16: *V = 132; return 0; /* multiprocessors */
  case 19: *V = strcmp(mode(), "nomap") != 0; return 0; /* map host memory */
  default: return 801;
  }
}
CUresult cuDeviceTotalMem_v2(size_t *Bytes, int Dev) {
  (void)Dev;
  *Bytes = (size_t)80 << 30;
  return 0;
}

/* Looked up, never answered. */
#define UNSUPPORTED(Name)                                                      \
  CUresult Name(void) { return 801; }
UNSUPPORTED(cuDevicePrimaryCtxRetain)
UNSUPPORTED(cuDevicePrimaryCtxRelease_v2)
UNSUPPORTED(cuDevicePrimaryCtxReset_v2)
UNSUPPORTED(cuCtxSetCurrent)
UNSUPPORTED(cuCtxSynchronize)
UNSUPPORTED(cuStreamCreate)
UNSUPPORTED(cuStreamDestroy_v2)
UNSUPPORTED(cuStreamSynchronize)
UNSUPPORTED(cuStreamQuery)
UNSUPPORTED(cuMemAlloc_v2)
UNSUPPORTED(cuMemFree_v2)
UNSUPPORTED(cuMemsetD8_v2)
UNSUPPORTED(cuMemcpyHtoD_v2)
UNSUPPORTED(cuMemcpyDtoH_v2)
UNSUPPORTED(cuMemcpyDtoD_v2)
UNSUPPORTED(cuMemcpyHtoDAsync_v2)
UNSUPPORTED(cuMemcpyDtoHAsync_v2)
UNSUPPORTED(cuMemcpyDtoDAsync_v2)
UNSUPPORTED(cuMemHostAlloc)
UNSUPPORTED(cuMemFreeHost)
UNSUPPORTED(cuMemHostGetDevicePointer_v2)
UNSUPPORTED(cuLinkCreate_v2)
UNSUPPORTED(cuLinkAddData_v2)
UNSUPPORTED(cuLinkComplete)
UNSUPPORTED(cuLinkDestroy)
UNSUPPORTED(cuModuleLoadData)
UNSUPPORTED(cuModuleUnload)
UNSUPPORTED(cuModuleGetFunction)
UNSUPPORTED(cuLaunchKernel)
UNSUPPORTED(cuOccupancyMaxActiveBlocksPerMultiprocessor)
UNSUPPORTED(cuEventCreate)
UNSUPPORTED(cuEventRecord)
UNSUPPORTED(cuEventQuery)
UNSUPPORTED(cuEventDestroy_v2)
UNSUPPORTED(cuFuncGetAttribute)
