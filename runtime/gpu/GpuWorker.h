//===- GpuWorker.h - The process that owns a GPU target's context -*- C++ -*-===//
//
// `tc-serve --gpu N` runs its device work in a worker process: the same
// executable started as `tc-serve --gpu-worker ...` (GpuTarget starts it;
// nobody else should). The worker
//
//  - loads the driver, finds the device and says what it found on its
//    socket (one line per fact, then "ready"; or "error TEXT" and exit 1);
//  - retains the device's primary context, allocates the region (zeroed)
//    and registers the channel's staging area (GpuChannel.h) with the
//    driver, device-mapped; where the driver refuses, it copies through
//    pinned memory of its own instead (said in its hello: staging copied);
//  - runs the commands of the channel: one stream per connection, in
//    order per connection; a launch is reported done when the device is
//    done with it, in order per connection, by one record for many;
//  - never waits on the device: no synchronizing driver call, at most 256
//    launches in flight per stream (later commands of that connection
//    wait in the worker), device buffers for large payloads are allocated
//    and freed on the stream (cuMemAllocAsync / cuMemFreeAsync);
//  - on a lost context (any call that returns one of the driver's sticky
//    errors) or a front group of launches older than the time limit,
//    reports which commands were on the device and why (Submitted, Fatal)
//    and ends itself with SIGKILL: the driver tears the context down, a
//    kernel that never ends included. The target starts a new worker.
//
// It ends with the target (PR_SET_PDEATHSIG) and when the target kills it.
//
//===----------------------------------------------------------------------===//

#ifndef TC_RUNTIME_GPU_GPUWORKER_H
#define TC_RUNTIME_GPU_GPUWORKER_H

#include <cstddef>
#include <string>
#include <vector>

namespace tc {

struct GpuWorkerOptions {
  int ShmFd = -1, SockFd = -1; ///< The channel (memfd) and the socket.
  long Parent = 0;             ///< The target's pid.
  int Device = 0;
  size_t RegionSize = 4096;
  size_t StagingBytes = 0;
  unsigned MaxRunMs = 0;
  std::string Library; ///< The driver library ("": the default).
  bool Trace = false;  ///< Count and time every driver call.
};

/// The first argument that makes tc-serve a worker.
constexpr const char *GpuWorkerFlag = "--gpu-worker";

/// The arguments after the executable's path that start a worker.
std::vector<std::string> gpuWorkerArgs(const GpuWorkerOptions &O);

/// tc-serve --gpu-worker ...: parses \p Argv (Argv[1] is GpuWorkerFlag)
/// and serves the channel until killed. Returns the exit status when it
/// cannot start (after telling the target why on the socket).
int gpuWorkerMain(int Argc, char **Argv);

} // namespace tc

#endif // TC_RUNTIME_GPU_GPUWORKER_H
