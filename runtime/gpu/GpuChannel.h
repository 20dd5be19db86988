//===- GpuChannel.h - Shared memory between tc-serve and its GPU worker -*- C++ -*-===//
//
// A GPU target's device work runs in a worker process (GpuWorker.h) that
// tc-serve starts, watches and ends: CUDA's sticky errors (an illegal
// address, a trap) leave a process unable to use the GPU again, and a
// kernel that never ends can only be stopped by ending the process that
// owns its context. The target (GpuTarget.h) and its worker share one
// memory object (memfd), laid out as:
//
//   Header (4 KiB)   | command ring | completion ring | staging area
//
//  - the command ring: fixed 64-byte Cmd records, one producer (the
//    target, under its lock) and one consumer (the worker);
//  - the completion ring: fixed 256-byte Done records, one producer (the
//    worker) and one consumer (the target);
//  - the staging area: payloads, region reads, PTX and cubins. The target
//    allocates from it and frees a piece when the worker's completion
//    says the device is done with it; the worker registers it with the
//    driver (cuMemHostRegister, device-mapped), so a kernel reads its
//    payload where tc-serve wrote it: one copy from the wire.
//
// Indices count records ever pushed (never wrap); a ring's slot is the
// index modulo its capacity. The worker sleeps on a futex (the Wake word)
// only when it has nothing in flight and no command, after saying so in
// Sleeping; the target wakes it only then. docs/runtime.md, "GPU targets",
// describes the protocol; the layout is private to one tc build (both
// sides are the same executable), and Version guards against a mismatch.
//
//===----------------------------------------------------------------------===//

#ifndef TC_RUNTIME_GPU_GPUCHANNEL_H
#define TC_RUNTIME_GPU_GPUCHANNEL_H

#include "gpu/CudaDriver.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tc {
namespace gpu {

constexpr uint32_t ChannelMagic = 0x50474354; // "TCGP"
constexpr uint32_t ChannelVersion = 1;
constexpr size_t HeaderBytes = 4096;
constexpr size_t CmdSlots = 16384;
constexpr size_t DoneSlots = 4096;

/// What the target asks of the worker.
enum class CmdKind : uint8_t {
  /// JIT the PTX at [Off, Off+Len) once and drop it (warms the driver).
  Prewarm = 1,
  /// Load kernel Kernel from [Off, Off+Len): PTX (Flags & FlagPtx) or a
  /// cubin; A = NAME_threads (FillDeviceThreads: fill the device); its
  /// entry point's name follows the image after one NUL. Answered by a
  /// Loaded record.
  Load,
  /// Unload kernel Kernel (none of its launches is in flight).
  Unload,
  /// Launch kernel Kernel on connection Conn's stream with the payload at
  /// [Off, Off+Len) of staging, or (Flags & FlagBig) in device buffer A
  /// (a Big of the same connection) of Len bytes.
  Launch,
  /// Done once the connection's earlier operations are.
  Fence,
  /// Copy Len bytes of the region from byte A into staging at Off.
  Read,
  /// Allocate device buffer number A of Len bytes for connection Conn's
  /// stream (stream-ordered: freed after the launch that uses it).
  BigAlloc,
  /// Copy staging [Off, Off+Len) into big buffer A at byte B.
  BigCopy,
  /// The connection is gone: its stream goes once its work is done.
  Close,
  /// Link the PTX at [Off, Off+Len) into a cubin and write it to the
  /// disk cache file whose path follows the PTX after one NUL, with
  /// NAME_threads A. Answered by a Linked record.
  CacheLink,
};

enum : uint8_t {
  FlagPtx = 1, ///< Load: the image is PTX text.
  FlagBig = 2, ///< Launch: the payload is in a big buffer.
};

/// One command: 64 bytes.
struct Cmd {
  CmdKind Kind;
  uint8_t Flags;
  uint16_t Pad;
  uint32_t Kernel;
  uint64_t Conn;
  uint64_t Tag; ///< The target's sequence number for this command.
  uint64_t Off, Len;
  uint64_t A, B;
  uint64_t SentNs; ///< CLOCK_MONOTONIC when pushed (the trace's hop).
};
static_assert(sizeof(Cmd) == 64, "Cmd is 64 bytes");

/// What the worker tells the target.
enum class DoneKind : uint8_t {
  /// Every command of connection Conn up to and including Tag is done.
  Through = 1,
  /// Every command of Conn before Tag is done; Tag itself failed (Text)
  /// without harm to the context (a launch the driver refused).
  Failed,
  /// Kernel Kernel is loaded (Ok: A = grid, B = block, C = JIT ns) or
  /// could not be (Text). Tag: the Load command's.
  Loaded,
  /// The CacheLink command Tag finished (Ok or Text); its staging is free.
  Linked,
  /// The Prewarm command Tag finished (Ok or Text).
  Prewarmed,
  /// Connection Conn's commands up to Tag were given to the device when
  /// a Fatal came (those after it never ran). Precedes the Fatal.
  Submitted,
  /// The context is lost (a fault, Text names the driver call and error)
  /// or (A = 1) connection Conn's front group, commands B to Tag, ran
  /// longer than the time limit. The worker ends itself after this.
  Fatal,
};

/// One completion: 256 bytes.
struct Done {
  DoneKind Kind;
  uint8_t Ok;
  uint16_t TextLen;
  uint32_t Kernel;
  uint64_t Conn;
  uint64_t Tag;
  uint64_t A, B, C;
  uint64_t SentNs;
  char Text[200];

  void setText(const char *S, size_t N) {
    TextLen = uint16_t(N < sizeof Text ? N : sizeof Text);
    std::memcpy(Text, S, TextLen);
  }
};
static_assert(sizeof(Done) == 256, "Done is 256 bytes");

/// Per driver entry point: calls and nanoseconds in them (tc-serve
/// --gpu-trace), written by the worker, read by the target.
struct TraceSlot {
  std::atomic<uint64_t> Calls{0}, Nanos{0};
};

/// Where the time of the worker's pipeline goes (--gpu-trace): the hops of
/// commands and completions that found their ring empty (no queue behind
/// them), and launches on an idle stream from submission to the worker's
/// seeing them done.
struct PipeStats {
  std::atomic<uint64_t> CmdHops{0}, CmdHopNs{0};   ///< Push to the worker.
  std::atomic<uint64_t> DoneHops{0}, DoneHopNs{0}; ///< Push to the target.
  std::atomic<uint64_t> Completions{0}, DeviceNs{0};
  std::atomic<uint64_t> Sleeps{0}; ///< Times the worker slept on Wake.
};

struct Header {
  uint32_t Magic;
  uint32_t Version;
  uint64_t StagingBytes;
  uint64_t CmdOffset, DoneOffset, StagingOffset, TotalBytes;

  alignas(64) std::atomic<uint64_t> CmdHead;  ///< Written by the target.
  alignas(64) std::atomic<uint64_t> CmdTail;  ///< Written by the worker.
  alignas(64) std::atomic<uint64_t> DoneHead; ///< Written by the worker.
  alignas(64) std::atomic<uint64_t> DoneTail; ///< Written by the target.
  alignas(64) std::atomic<uint32_t> Wake;     ///< The futex word.
  std::atomic<uint32_t> Sleeping;             ///< The worker waits on Wake.
  /// Bumped by every turn of the worker's loop: the target's sign that it
  /// is not stuck in a driver call.
  alignas(64) std::atomic<uint64_t> Heartbeat;
  /// Non-zero while the worker is inside a call that may take long
  /// legitimately (a JIT): the target's stall limit does not apply.
  std::atomic<uint32_t> InLongCall;
  std::atomic<uint32_t> Tracing;
  PipeStats Pipe;
  TraceSlot Trace[64];
};
static_assert(sizeof(Header) <= HeaderBytes, "the header fits its page");

/// The channel's total size for a staging area of \p Staging bytes.
inline size_t channelBytes(size_t Staging) {
  return HeaderBytes + CmdSlots * sizeof(Cmd) + DoneSlots * sizeof(Done) +
         Staging;
}

/// A mapped channel: pointers into the shared object.
struct Channel {
  Header *H = nullptr;
  Cmd *Cmds = nullptr;
  Done *Dones = nullptr;
  char *Staging = nullptr;

  /// Points into \p Base (channelBytes(StagingSize) bytes, mapped).
  /// \p Init writes a fresh header (the target, before a worker starts).
  void attach(void *Base, size_t StagingSize, bool Init);
};

/// CLOCK_MONOTONIC in nanoseconds (the same clock in both processes).
uint64_t monoNanos();
/// Blocks while *\p Word == \p Expected, for at most \p TimeoutNs.
void futexWait(std::atomic<uint32_t> &Word, uint32_t Expected,
               uint64_t TimeoutNs);
void futexWakeAll(std::atomic<uint32_t> &Word);

} // namespace gpu
} // namespace tc

#endif // TC_RUNTIME_GPU_GPUCHANNEL_H
