//===- Dictionary.cpp - The zstd dictionary built into the archive library ===//
//
// Members stored as `zstd-dict` are zstd frames compressed against a
// raw-content dictionary: the bitcode LLVM 22's writer makes of two small
// prepared ifuncs (dict/), which holds what every tc-cc member repeats (the
// identification block, the metadata kind table, operand bundle tags, sync
// scope names, the data layouts, common attributes). The build makes it with
// the host's llvm-as (dict/Dictionary.cmake); its id is the first 8 bytes of
// BLAKE3 over its bytes, in hex. docs/archive-format.md describes it.
//
//===----------------------------------------------------------------------===//

#include "tc/Archive.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/BLAKE3.h"
#include "llvm/Support/FormatVariadic.h"

#include <zstd.h>

#include <memory>

using namespace llvm;

namespace tc {

static const unsigned char DictionaryBytes[] = {
#include "Dictionary.inc"
};

/// The bitcode files DictionaryBytes concatenates: architecture, size.
static const struct {
  const char *Arch;
  size_t Size;
} DictionaryParts[] = {
#include "DictionaryParts.inc"
};

/// zstd's level for dictionary compression: the members are a few KiB, so
/// the strongest level costs well under a millisecond.
static constexpr int DictLevel = 19;

namespace {
struct BuiltinDictionary {
  std::string Id;
  StringRef Bytes;
  ZSTD_DDict *DDict = nullptr; // Digested once; shared by every reader.

  BuiltinDictionary()
      : Bytes(reinterpret_cast<const char *>(DictionaryBytes),
              sizeof(DictionaryBytes)) {
    BLAKE3Result<8> H = BLAKE3::hash<8>(arrayRefFromStringRef(Bytes));
    Id = toHex(ArrayRef<uint8_t>(H.data(), H.size()), /*LowerCase=*/true);
    DDict = ZSTD_createDDict(Bytes.data(), Bytes.size());
  }
  ~BuiltinDictionary() { ZSTD_freeDDict(DDict); }
};
} // namespace

static const BuiltinDictionary &builtin() {
  static const BuiltinDictionary D;
  return D;
}

StringRef builtinDictionaryId() { return builtin().Id; }

size_t builtinDictionarySize() { return builtin().Bytes.size(); }

std::vector<DictionaryModule> builtinDictionaryModules() {
  std::vector<DictionaryModule> Out;
  StringRef Rest = builtin().Bytes;
  for (const auto &P : DictionaryParts) {
    Out.push_back({P.Arch, Rest.take_front(P.Size)});
    Rest = Rest.drop_front(P.Size);
  }
  assert(Rest.empty() && "the parts add up to the dictionary");
  return Out;
}

std::vector<std::string> dictionaryIds() { return {builtin().Id}; }

bool haveDictionary(StringRef Id) { return Id == builtin().Id; }

char MissingDictionaryError::ID = 0;

void MissingDictionaryError::log(raw_ostream &OS) const {
  OS << Where << ": compressed with zstd dictionary " << DictId
     << ", which this build does not have (it has " << builtinDictionaryId()
     << ")";
}

Expected<std::string> compressWithDictionary(StringRef Image) {
  const BuiltinDictionary &D = builtin();
  std::string Out(ZSTD_compressBound(Image.size()), '\0');
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx *)> C(ZSTD_createCCtx(),
                                                         ZSTD_freeCCtx);
  if (!C)
    return createStringError("cannot create a zstd context");
  size_t N = ZSTD_compress_usingDict(C.get(), Out.data(), Out.size(),
                                     Image.data(), Image.size(),
                                     D.Bytes.data(), D.Bytes.size(),
                                     DictLevel);
  if (ZSTD_isError(N))
    return createStringError("zstd: %s", ZSTD_getErrorName(N));
  Out.resize(N);
  return Out;
}

Error decompressWithDictionary(StringRef Id, StringRef Stored,
                               std::string &Image, uint64_t Size,
                               const std::string &Where) {
  if (!haveDictionary(Id))
    return make_error<MissingDictionaryError>(Where, Id.str());
  const BuiltinDictionary &D = builtin();
  if (!D.DDict)
    return createStringError(Where + ": cannot load the zstd dictionary");
  // One context per thread, kept: creating one (~100 KiB of tables) cost
  // more than decompressing a TSI member.
  thread_local std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx *)> C(
      ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (!C)
    return createStringError(Where + ": cannot create a zstd context");
  Image.resize(Size);
  // One shot into exactly the size stated (tc.size in version 2, the
  // frame's content size in 3): a frame that claims more, or a
  // window larger than the image, fails here without allocating.
  size_t N = ZSTD_decompress_usingDDict(C.get(), Image.data(), Image.size(),
                                        Stored.data(), Stored.size(), D.DDict);
  if (ZSTD_isError(N))
    return createStringError(Where + ": cannot decompress image: " +
                             ZSTD_getErrorName(N));
  if (N != Size)
    return createStringError(formatv(
        "{0}: image decompressed to {1} bytes, not the {2} stated", Where,
        N, Size));
  return Error::success();
}

} // namespace tc
