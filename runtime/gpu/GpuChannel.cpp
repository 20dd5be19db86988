//===- GpuChannel.cpp - Shared memory between tc-serve and its GPU worker -===//

#include "gpu/GpuChannel.h"

#include <climits>
#include <ctime>
#include <linux/futex.h>
#include <new>
#include <sys/syscall.h>
#include <unistd.h>

namespace tc {
namespace gpu {

void Channel::attach(void *Base, size_t StagingSize, bool Init) {
  char *B = static_cast<char *>(Base);
  H = reinterpret_cast<Header *>(B);
  if (Init) {
    new (H) Header();
    H->Magic = ChannelMagic;
    H->Version = ChannelVersion;
    H->StagingBytes = StagingSize;
    H->CmdOffset = HeaderBytes;
    H->DoneOffset = H->CmdOffset + CmdSlots * sizeof(Cmd);
    H->StagingOffset = H->DoneOffset + DoneSlots * sizeof(Done);
    H->TotalBytes = H->StagingOffset + StagingSize;
  }
  Cmds = reinterpret_cast<Cmd *>(B + HeaderBytes);
  Dones = reinterpret_cast<Done *>(B + HeaderBytes + CmdSlots * sizeof(Cmd));
  Staging = B + HeaderBytes + CmdSlots * sizeof(Cmd) + DoneSlots * sizeof(Done);
}

uint64_t monoNanos() {
  timespec T;
  clock_gettime(CLOCK_MONOTONIC, &T);
  return uint64_t(T.tv_sec) * 1000000000u + uint64_t(T.tv_nsec);
}

// Shared (not FUTEX_PRIVATE) operations: the word lives in memory two
// processes map.
void futexWait(std::atomic<uint32_t> &Word, uint32_t Expected,
               uint64_t TimeoutNs) {
  timespec T;
  T.tv_sec = time_t(TimeoutNs / 1000000000u);
  T.tv_nsec = long(TimeoutNs % 1000000000u);
  syscall(SYS_futex, reinterpret_cast<uint32_t *>(&Word), FUTEX_WAIT, Expected,
          &T, nullptr, 0);
}

void futexWakeAll(std::atomic<uint32_t> &Word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t *>(&Word), FUTEX_WAKE, INT_MAX,
          nullptr, nullptr, 0);
}

} // namespace gpu
} // namespace tc
