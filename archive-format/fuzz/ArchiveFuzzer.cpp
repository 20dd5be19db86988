//===- ArchiveFuzzer.cpp - libFuzzer target for the archive reader --------===//
//
// Feeds arbitrary bytes to tc::readArchive and, when they parse, exercises
// what a target does next: member selection and re-serialization. Any crash,
// sanitizer report or hang is a bug. Build with -DTC_ENABLE_FUZZERS=ON and
// clang; scripts/fuzz.sh runs it on the seed corpus in fuzz/corpus.
//
//===----------------------------------------------------------------------===//

#include "tc/Archive.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *Data, size_t Size) {
  llvm::StringRef Bytes(reinterpret_cast<const char *>(Data), Size);
  tc::ReadOptions Opts;
  Opts.MaxImageSize = 1 << 20; // Keep decompression bombs cheap.
  llvm::Expected<tc::Archive> A =
      tc::readArchive(llvm::MemoryBufferRef(Bytes, "fuzz"), Opts);
  if (!A) {
    llvm::consumeError(A.takeError());
    return 0;
  }
  llvm::Expected<const tc::Member *> M =
      tc::selectMember(*A, "x86_64-unknown-linux-gnu");
  if (!M)
    llvm::consumeError(M.takeError());
  // A valid archive must survive a write/read round trip unchanged.
  tc::Archive Copy = *A;
  llvm::Expected<llvm::SmallString<0>> Out = tc::writeArchive(Copy);
  if (!Out)
    __builtin_trap();
  llvm::Expected<tc::Archive> Again =
      tc::readArchive(llvm::MemoryBufferRef(*Out, "again"), Opts);
  if (!Again || Again->Hash != A->Hash)
    __builtin_trap();
  return 0;
}
