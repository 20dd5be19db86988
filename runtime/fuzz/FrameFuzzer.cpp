//===- FrameFuzzer.cpp - libFuzzer target for the wire-frame parser -------===//
//
// Every accepted frame must re-encode to exactly the bytes it came from:
// the format has one encoding per frame, so a parser that accepts anything
// else is accepting bytes it does not understand. And the receive fast
// paths (decodeSmallInvoke, decodeCompactInvoke at every header length a
// compact frame can have) never accept what the general decoder rejects.
// A Hello frame's capability record decodes to what it re-encodes to.
// The same bytes read as a batch body (Batch.h) must split into records
// that rebuild it exactly, or stop at a defect.
//
//===----------------------------------------------------------------------===//

#include "transport/Batch.h"
#include "protocol/Frame.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *Data, size_t Size) {
  llvm::StringRef Bytes(reinterpret_cast<const char *>(Data), Size);
  // The receive fast path accepts nothing the general decoder rejects.
  tc::SmallInvoke I;
  llvm::StringRef H = Bytes.take_front(tc::FrameHeaderSize);
  llvm::StringRef Body = Bytes.drop_front(H.size());
  if (tc::decodeSmallInvoke(H, Body, I)) {
    llvm::Expected<tc::Frame> G = tc::decodeFrame(H, Body);
    if (!G || G->Type != I.Type || G->Seq != I.Seq || G->CodeId != I.CodeId ||
        G->Payload != Body)
      __builtin_trap();
  }
  for (size_t HL = 1; HL <= tc::CompactHeaderMax && HL <= Bytes.size(); ++HL) {
    llvm::StringRef CH = Bytes.take_front(HL), CB = Bytes.drop_front(HL);
    if (!tc::decodeCompactInvoke(CH, CB, I))
      continue;
    llvm::Expected<tc::Frame> G = tc::decodeFrame(CH, CB);
    if (!G || !G->Compact || G->Type != I.Type || G->CodeId != I.CodeId ||
        G->Payload != CB)
      __builtin_trap();
  }
  // A batch: the records handed out rebuild the bytes they came from (all
  // of them, unless the walk stopped at a defect).
  std::string Rebuilt;
  llvm::Expected<size_t> N =
      tc::splitBatch(Bytes, [&](llvm::StringRef H, llvm::StringRef B) {
        tc::appendBatchRecord(Rebuilt, H, B);
        return true;
      });
  if (N ? Rebuilt != Bytes : !Bytes.starts_with(Rebuilt))
    __builtin_trap();
  if (!N)
    llvm::consumeError(N.takeError());
  llvm::Expected<tc::Frame> F = tc::decodeFrame(Bytes);
  if (!F) {
    llvm::consumeError(F.takeError());
    return 0;
  }
  if (tc::encodeFrame(*F) != Bytes)
    __builtin_trap();
  // A Hello's capability record: what it accepts reads back the same
  // after one re-encoding (unknown keys are dropped by the first).
  if (F->Type == tc::FrameType::Hello) {
    llvm::Expected<tc::Capabilities> C = tc::decodeCapabilities(F->Data);
    if (!C) {
      llvm::consumeError(C.takeError());
      return 0;
    }
    std::string Once = tc::encodeCapabilities(*C);
    llvm::Expected<tc::Capabilities> D = tc::decodeCapabilities(Once);
    if (!D || tc::encodeCapabilities(*D) != Once)
      __builtin_trap();
  }
  return 0;
}
