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
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <cstring>
#include <utility>

namespace tc {

/// Bytes a record adds in front of its frame.
constexpr size_t BatchRecordOverhead = 8;

/// The bytes of a batch being filled, or of a copied frame body: grown
/// without being cleared first (std::string's resize() fills with zeros).
using ByteBuffer = llvm::SmallVector<char, 0>;

/// Moves the heap buffer of \p From (and its bytes) into \p To, also when
/// \p From is empty: SmallVector<T, 0>'s own move-assignment and move
/// constructor leave an empty vector's buffer where it is.
inline void moveBuffer(ByteBuffer &To, ByteBuffer &From) {
  static_cast<llvm::SmallVectorImpl<char> &>(To) =
      std::move(static_cast<llvm::SmallVectorImpl<char> &>(From));
}

/// Appends one frame to the batch body \p Out. This runs once per coalesced
/// message: one resize without clearing, then the sizes and two copies.
inline void appendBatchRecord(llvm::SmallVectorImpl<char> &Out,
                              llvm::StringRef Header, llvm::StringRef Body) {
  size_t Old = Out.size();
  Out.resize_for_overwrite(Old + BatchRecordOverhead + Header.size() +
                           Body.size());
  char *P = Out.data() + Old;
  llvm::support::endian::write32le(P, uint32_t(Header.size()));
  llvm::support::endian::write32le(P + 4, uint32_t(Body.size()));
  copyBytes(P + BatchRecordOverhead, Header.data(), Header.size());
  copyBytes(P + BatchRecordOverhead + Header.size(), Body.data(), Body.size());
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
