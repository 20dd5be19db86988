//===- ArchiveFuzzer.cpp - libFuzzer target for the archive reader --------===//
//
// Feeds arbitrary bytes to tc::readArchive and, when they parse, exercises
// what a target does next: member selection and re-serialization (as is, and
// without the zstd dictionary, as a sender does for a target that lacks it;
// the corpus has members compressed with it, a truncated frame and an
// unknown or missing dictionary id; signed archives, badly signed ones and
// a malformed tc.signatures; format 2 and format 3 archives, thin copies,
// and format 3 defects: a version 2 key, a manifest image of the wrong
// size, a frame that does not state its size). Every format version this
// build writes must read back with the same hash. Any crash,
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
  // A valid archive must survive a write/read round trip unchanged, in
  // every format version this build writes.
  for (unsigned V = tc::OldestArchiveVersion; V < tc::ArchiveVersion; ++V) {
    tc::Archive Copy = *A;
    llvm::Expected<llvm::SmallString<0>> Out = tc::writeArchive(Copy, V);
    if (!Out)
      __builtin_trap();
    llvm::Expected<tc::Archive> Again =
        tc::readArchive(llvm::MemoryBufferRef(*Out, "again"), Opts);
    if (!Again || Again->Hash != A->Hash || Again->FormatVersion != V ||
        Again->Omitted != A->Omitted)
      __builtin_trap();
  }
  tc::Archive Copy = *A;
  llvm::Expected<llvm::SmallString<0>> Out = tc::writeArchive(Copy);
  if (!Out)
    __builtin_trap();
  llvm::Expected<tc::Archive> Again =
      tc::readArchive(llvm::MemoryBufferRef(*Out, "again"), Opts);
  if (!Again || Again->Hash != A->Hash || Again->Omitted != A->Omitted)
    __builtin_trap();
  // Signatures are kept byte for byte, whatever they say; judging them
  // never fails on anything but the signatures.
  if (Again->Signatures.size() != A->Signatures.size())
    __builtin_trap();
  for (size_t I = 0; I < A->Signatures.size(); ++I)
    if (Again->Signatures[I].Key != A->Signatures[I].Key ||
        Again->Signatures[I].Sig != A->Signatures[I].Sig)
      __builtin_trap();
  tc::PublicKey Anyone{};
  llvm::Error Judged = tc::checkSignatures(*A, {Anyone});
  llvm::handleAllErrors(std::move(Judged), [](const tc::SignatureError &) {});
  // What a sender does for a target without the dictionary: the members
  // stored with it are stored plain instead, and the hash does not move.
  tc::Archive Plain = *A;
  tc::withoutDictionaries(Plain, {});
  llvm::Expected<llvm::SmallString<0>> PlainOut = tc::writeArchive(Plain);
  if (!PlainOut)
    __builtin_trap();
  llvm::Expected<tc::Archive> PlainAgain =
      tc::readArchive(llvm::MemoryBufferRef(*PlainOut, "plain"), Opts);
  if (!PlainAgain || PlainAgain->Hash != A->Hash)
    __builtin_trap();
  for (const tc::Member &M : PlainAgain->Members)
    if (M.Compress == tc::Compression::ZstdDict)
      __builtin_trap();
  return 0;
}
