//===- FrameFuzzer.cpp - libFuzzer target for the wire-frame parser -------===//
//
// Every accepted frame must re-encode to exactly the bytes it came from:
// the format has one encoding per frame, so a parser that accepts anything
// else is accepting bytes it does not understand.
//
//===----------------------------------------------------------------------===//

#include "Frame.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *Data, size_t Size) {
  llvm::StringRef Bytes(reinterpret_cast<const char *>(Data), Size);
  llvm::Expected<tc::Frame> F = tc::decodeFrame(Bytes);
  if (!F) {
    llvm::consumeError(F.takeError());
    return 0;
  }
  if (tc::encodeFrame(*F) != Bytes)
    __builtin_trap();
  return 0;
}
