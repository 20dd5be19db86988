//===- Batch.h - Several frames in one active message -----------*- C++ -*-===//
//
// While UCX still holds earlier sends on a connection, UcxTransport collects
// the small frames that follow into a batch and sends it as one active
// message once the connection is free again (docs/wire-format.md,
// "Batches"). A batch body is a run of records:
//
//   u32le header_size, u32le body_size, header bytes, body bytes
//
// splitBatch() reads untrusted bytes: every size is checked against what
// is left, and a defect stops the walk with an error, never a crash.
//
//===----------------------------------------------------------------------===//

#ifndef TC_RUNTIME_BATCH_H
#define TC_RUNTIME_BATCH_H

#include "Bytes.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <cstring>
#include <string>

namespace tc {

/// Bytes a record adds in front of its frame.
constexpr size_t BatchRecordOverhead = 8;

/// Appends one frame to the batch body \p Out.
inline void appendBatchRecord(std::string &Out, llvm::StringRef Header,
                              llvm::StringRef Body) {
  // This runs once per coalesced message. A small record (a cached
  // message's) is made on the stack and appended with one call: resize()
  // would first fill the room with zeros, out of line.
  constexpr size_t SmallRecord = 64;
  size_t Size = BatchRecordOverhead + Header.size() + Body.size();
  if (Size <= SmallRecord) {
    char Rec[SmallRecord];
    llvm::support::endian::write32le(Rec, uint32_t(Header.size()));
    llvm::support::endian::write32le(Rec + 4, uint32_t(Body.size()));
    copyBytes(Rec + BatchRecordOverhead, Header.data(), Header.size());
    copyBytes(Rec + BatchRecordOverhead + Header.size(), Body.data(),
              Body.size());
    Out.append(Rec, Size);
    return;
  }
  // One resize and two copies.
  size_t Old = Out.size();
  Out.resize(Old + BatchRecordOverhead + Header.size() + Body.size());
  char *P = &Out[Old];
  llvm::support::endian::write32le(P, uint32_t(Header.size()));
  llvm::support::endian::write32le(P + 4, uint32_t(Body.size()));
  std::memcpy(P + BatchRecordOverhead, Header.data(), Header.size());
  if (!Body.empty())
    std::memcpy(P + BatchRecordOverhead + Header.size(), Body.data(),
                Body.size());
}

/// Calls \p Each(header, body) for every record of \p Batch in order, until
/// it returns false. Returns the number of frames handed out, or an error
/// naming the first defect (the frames before it have been handed out).
inline llvm::Expected<size_t>
splitBatch(llvm::StringRef Batch,
           llvm::function_ref<bool(llvm::StringRef, llvm::StringRef)> Each) {
  size_t N = 0, Pos = 0;
  while (Pos < Batch.size()) {
    if (Batch.size() - Pos < BatchRecordOverhead)
      return llvm::createStringError(
          "batch record %zu: %zu bytes left, too few for its sizes", N,
          Batch.size() - Pos);
    uint64_t HS = llvm::support::endian::read32le(Batch.data() + Pos);
    uint64_t BS = llvm::support::endian::read32le(Batch.data() + Pos + 4);
    Pos += BatchRecordOverhead;
    if (HS + BS > Batch.size() - Pos)
      return llvm::createStringError(
          "batch record %zu: frame of %llu + %llu bytes, only %zu left", N,
          (unsigned long long)HS, (unsigned long long)BS, Batch.size() - Pos);
    llvm::StringRef H = Batch.substr(Pos, HS), B = Batch.substr(Pos + HS, BS);
    Pos += HS + BS;
    ++N;
    if (!Each(H, B))
      break;
  }
  return N;
}

} // namespace tc

#endif // TC_RUNTIME_BATCH_H
