//===- Bytes.h - Copies of the few bytes of a small message -----*- C++ -*-===//
//
// A cached message moves a handful of bytes per copy (a 3-byte header, a
// 1-byte payload). A call to memcpy costs about 15 instructions for that;
// these inline copies cost a few. They read and write exactly [P, P + N),
// with overlapping loads and stores, as memcpy implementations handle small
// sizes.
//
//===----------------------------------------------------------------------===//

#ifndef TC_RUNTIME_TRANSPORT_BYTES_H
#define TC_RUNTIME_TRANSPORT_BYTES_H

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tc {

/// Copies \p N bytes from \p Src to \p Dst (which do not overlap).
inline void copyBytes(char *Dst, const char *Src, size_t N) {
  if (N > 16) {
    std::memcpy(Dst, Src, N);
  } else if (N >= 8) {
    uint64_t A, B;
    __builtin_memcpy(&A, Src, 8);
    __builtin_memcpy(&B, Src + N - 8, 8);
    __builtin_memcpy(Dst, &A, 8);
    __builtin_memcpy(Dst + N - 8, &B, 8);
  } else if (N >= 4) {
    uint32_t A, B;
    __builtin_memcpy(&A, Src, 4);
    __builtin_memcpy(&B, Src + N - 4, 4);
    __builtin_memcpy(Dst, &A, 4);
    __builtin_memcpy(Dst + N - 4, &B, 4);
  } else if (N) {
    // 1 to 3 bytes: first, middle and last (some of them the same byte).
    char A = Src[0], B = Src[N / 2], C = Src[N - 1];
    Dst[0] = A;
    Dst[N / 2] = B;
    Dst[N - 1] = C;
  }
}

} // namespace tc

#endif // TC_RUNTIME_TRANSPORT_BYTES_H
