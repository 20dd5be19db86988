//===- FrameFuzzer.cpp - libFuzzer target for the wire-frame parser -------===//
//
// Every accepted frame must re-encode to exactly the bytes it came from:
// the format has one encoding per frame, so a parser that accepts anything
// else is accepting bytes it does not understand. And the receive fast
// paths (decodeSmallInvoke, decodeCompactInvoke at every header length a
// compact frame can have) never accept what the general decoder rejects.
// A Hello frame's capability record decodes to what it re-encodes to.
// The same bytes read as a batch body (Batch.h) must split into records
// that rebuild it exactly, or stop at a defect; read as a mailbox slot
// (Mailbox.h), a frame within the slot or an error, and a signal word a
// span within the ring's mapping; read as a mailbox offer, accept or area
// offer record, what decodes re-encodes to the same bytes.
//
//===----------------------------------------------------------------------===//

#include "transport/Batch.h"
#include "transport/Mailbox.h"
#include "protocol/Frame.h"

#include "llvm/ADT/SmallString.h"

#include <cstddef>
#include <cstdint>
#include <cstring>

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
  llvm::SmallString<0> Rebuilt;
  llvm::Expected<size_t> N =
      tc::splitBatch(Bytes, [&](llvm::StringRef H, llvm::StringRef B) {
        tc::appendBatchRecord(Rebuilt, H, B);
        return true;
      });
  if (N ? Rebuilt.str() != Bytes : !Bytes.starts_with(Rebuilt))
    __builtin_trap();
  if (!N)
    llvm::consumeError(N.takeError());
  // A mailbox slot: the frame it names lies within it.
  llvm::Expected<tc::mailbox::SlotMessage> Slot = tc::mailbox::readSlot(Bytes);
  tc::mailbox::SlotMessage Fast;
  if (tc::mailbox::parseSlot(Bytes, Fast) != bool(Slot) ||
      (Slot && (Fast.Header != Slot->Header || Fast.Body != Slot->Body ||
                Fast.AmBefore != Slot->AmBefore ||
                Fast.InArea != Slot->InArea || Fast.AreaPos != Slot->AreaPos ||
                Fast.AreaFrame != Slot->AreaFrame ||
                Fast.AreaHeader != Slot->AreaHeader)))
    __builtin_trap();
  if (Slot && Slot->InArea) {
    // A frame in the large-frame area: where it is resolved, it lies
    // within the area, header first.
    static char Area[4096];
    tc::mailbox::Reader R(tc::mailbox::Geometry{64, 8, 2, sizeof Area});
    R.setArea(true);
    if (R.resolveArea(Area, *Slot) &&
        (Slot->Header.size() != Slot->AreaHeader ||
         Slot->Header.data() < Area ||
         Slot->Header.data() + Slot->Header.size() != Slot->Body.data() ||
         Slot->Body.data() + Slot->Body.size() > Area + sizeof Area))
      __builtin_trap();
  } else if (Slot) {
    const char *End = Bytes.data() + Bytes.size();
    if (Slot->Header.empty() || Slot->Header.data() + Slot->Header.size() !=
                                    Slot->Body.data() ||
        Slot->Body.data() + Slot->Body.size() > End)
      __builtin_trap();
  } else {
    llvm::consumeError(Slot.takeError());
  }
  // A signal word read from a slot names a span that stays within the
  // ring's mapping wherever it starts, even from the last slot.
  if (Bytes.size() >= 8) {
    tc::mailbox::Geometry G{64, 8, 2};
    tc::mailbox::Reader R(G);
    uint64_t Signal;
    std::memcpy(&Signal, Bytes.data(), 8);
    uint32_t Span = R.spanOf(Signal);
    if (Span > G.spanMax() ||
        (G.Slots - 1) * size_t(G.SlotBytes) + Span * size_t(G.SlotBytes) >
            G.mappedBytes())
      __builtin_trap();
  }
  // Mailbox records have one encoding each.
  if (llvm::Expected<tc::mailbox::Offer> O = tc::mailbox::decodeOffer(Bytes)) {
    if (tc::mailbox::encodeOffer(*O) != Bytes)
      __builtin_trap();
  } else {
    llvm::consumeError(O.takeError());
  }
  if (llvm::Expected<tc::mailbox::Accept> A = tc::mailbox::decodeAccept(Bytes)) {
    if (tc::mailbox::encodeAccept(*A) != Bytes)
      __builtin_trap();
  } else {
    llvm::consumeError(A.takeError());
  }
  if (llvm::Expected<tc::mailbox::AreaOffer> A =
          tc::mailbox::decodeAreaOffer(Bytes)) {
    if (tc::mailbox::encodeAreaOffer(*A) != Bytes ||
        A->declined() != A->RemoteKey.empty())
      __builtin_trap();
  } else {
    llvm::consumeError(A.takeError());
  }
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
