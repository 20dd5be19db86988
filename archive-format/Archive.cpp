//===- Archive.cpp - Write and read tc fat archives -----------------------===//
//
// The writer hands each binary to LLVM's OffloadBinary::write so the bytes
// are exactly what LLVM tools read. The reader does not use
// OffloadBinary::create: that parser trusts string offsets and termination,
// and archives come from the network. Every offset, size, count and string is
// checked here, in the order docs/archive-format.md lists the checks, and
// every byte nothing describes (padding) must be zero, as the writer writes
// it: one archive, one byte form.
//
//===----------------------------------------------------------------------===//

#include "tc/Archive.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/BinaryFormat/Magic.h"
#include "llvm/Object/OffloadBinary.h"
#include "llvm/Support/BLAKE3.h"
#include "llvm/Support/Compression.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/TargetParser/Triple.h"

#include <zstd.h>

#include <algorithm>
#include <tuple>

using namespace llvm;
using llvm::object::OffloadBinary;

namespace tc {

// Sizes of the version-1 offload binary structures, fixed by the format and
// asserted against LLVM's own definitions.
constexpr uint64_t HeaderSize = 32;
constexpr uint64_t EntrySize = 40;
constexpr uint64_t StringEntrySize = 16;
constexpr uint64_t BinaryAlign = 8;
constexpr uint32_t OffloadVersion = 1;
static_assert(OffloadBinary::Version == OffloadVersion,
              "LLVM writes a different offload binary version; see "
              "docs/archive-format.md");
static_assert(sizeof(OffloadBinary::Header) == HeaderSize, "header layout");
static_assert(sizeof(OffloadBinary::Entry) == EntrySize, "entry layout");
static_assert(sizeof(OffloadBinary::StringEntry) == StringEntrySize,
              "string entry layout");

// Manifest and member keys. Keys LLVM itself defines keep LLVM's names.
static constexpr StringLiteral KeyVersion = "tc.version";
static constexpr StringLiteral KeyName = "tc.name";
static constexpr StringLiteral KeyHash = "tc.hash";
static constexpr StringLiteral KeyDeps = "tc.deps";
static constexpr StringLiteral KeyOmitted = "tc.omitted";
static constexpr StringLiteral KeySignatures = "tc.signatures";
static constexpr StringLiteral KeyTriple = "triple";
static constexpr StringLiteral KeyArch = "arch";
static constexpr StringLiteral KeyFeatures = "tc.features";
static constexpr StringLiteral KeyRole = "tc.role";
static constexpr StringLiteral KeySymbols = "tc.symbols";
static constexpr StringLiteral KeyCompression = "tc.compression";
static constexpr StringLiteral KeySize = "tc.size";
static constexpr StringLiteral KeyDict = "tc.dict";

StringRef imageKindName(ImageKind K) {
  return K == ImageKind::Bitcode ? "bitcode" : "object";
}

StringRef roleName(Role R) { return R == Role::Target ? "target" : "source"; }

StringRef compressionName(Compression C) {
  switch (C) {
  case Compression::None:
    return "none";
  case Compression::Zstd:
    return "zstd";
  case Compression::ZstdDict:
    return "zstd-dict";
  }
  llvm_unreachable("unknown compression");
}

Expected<Role> parseRole(StringRef S) {
  if (S == "target")
    return Role::Target;
  if (S == "source")
    return Role::Source;
  return createStringError("unknown role '%s' (expected target or source)",
                           S.str().c_str());
}

Expected<Compression> parseCompression(StringRef S) {
  if (S == "none")
    return Compression::None;
  if (S == "zstd")
    return Compression::Zstd;
  if (S == "zstd-dict")
    return Compression::ZstdDict;
  return createStringError("unknown compression '%s' (expected none, zstd or "
                           "zstd-dict)",
                           S.str().c_str());
}

std::string toHex(const ArchiveHash &H) {
  return toHex(ArrayRef<uint8_t>(H.data(), H.size()), /*LowerCase=*/true);
}

//===----------------------------------------------------------------------===//
// Content hash
//===----------------------------------------------------------------------===//

namespace {
/// Encodes length-prefixed fields, so no two field lists collide, and hashes
/// the whole encoding with one BLAKE3 call: the hash depends only on the
/// bytes, and one contiguous input lets BLAKE3 hash its 1 KiB chunks in
/// parallel (SIMD), which small updates at unaligned offsets prevent.
class CanonicalHasher {
  std::string Stream;

public:
  explicit CanonicalHasher(size_t Expected) { Stream.reserve(Expected); }
  void number(uint64_t N) {
    char Bytes[8];
    support::endian::write64le(Bytes, N);
    Stream.append(Bytes, 8);
  }
  void field(StringRef S) {
    number(S.size());
    raw(S);
  }
  void raw(StringRef S) { Stream.append(S.data(), S.size()); }
  void list(const std::vector<std::string> &L) {
    number(L.size());
    for (const std::string &S : L)
      field(S);
  }
  ArchiveHash result() const {
    ArchiveHash H;
    BLAKE3Result<32> R = BLAKE3::hash(arrayRefFromStringRef(Stream));
    std::copy(R.begin(), R.end(), H.begin());
    return H;
  }
};
} // namespace

MemberDigest memberDigest(const Member &M) {
  CanonicalHasher H(M.Image.size() + 256);
  H.field("tc-member-v2");
  H.field(M.Triple);
  H.field(M.CPU);
  H.field(M.Features);
  H.field(imageKindName(M.Kind));
  H.field(roleName(M.TheRole));
  H.list(M.Symbols);
  H.field(M.Image);
  return H.result();
}

/// computeHash(), which also leaves the digests of A's members, in their
/// order, in \p Own.
static ArchiveHash computeHash(const Archive &A,
                               std::vector<MemberDigest> &Own) {
  Own.clear();
  for (const Member &M : A.Members)
    Own.push_back(memberDigest(M));
  std::vector<MemberDigest> Digests = A.Omitted;
  Digests.insert(Digests.end(), Own.begin(), Own.end());
  std::sort(Digests.begin(), Digests.end());
  CanonicalHasher H(256 + 32 * Digests.size());
  H.field("tc-archive-hash-v2");
  H.field(A.Name);
  H.list(A.Deps);
  H.number(Digests.size());
  for (const MemberDigest &D : Digests)
    H.raw(StringRef(reinterpret_cast<const char *>(D.data()), D.size()));
  return H.result();
}

ArchiveHash computeHash(const Archive &A) {
  std::vector<MemberDigest> Own;
  return computeHash(A, Own);
}

Archive thinArchive(const Archive &A, function_ref<bool(const Member &)> Keep) {
  Archive Out;
  Out.Name = A.Name;
  Out.Deps = A.Deps;
  Out.Omitted = A.Omitted;
  Out.Hash = A.Hash;
  Out.Signatures = A.Signatures; // over the hash, which a thin copy keeps
  for (const Member &M : A.Members) {
    if (Keep(M))
      Out.Members.push_back(M);
    else
      Out.Omitted.push_back(memberDigest(M));
  }
  std::sort(Out.Omitted.begin(), Out.Omitted.end());
  return Out;
}

//===----------------------------------------------------------------------===//
// Field validation, shared by writer and reader
//===----------------------------------------------------------------------===//

static std::string escaped(StringRef S) {
  std::string Out;
  raw_string_ostream OS(Out);
  printEscapedString(S, OS);
  return Out;
}

static bool isCIdentifier(StringRef S) {
  if (S.empty() || isDigit(S.front()))
    return false;
  return llvm::all_of(S, [](char C) { return isAlnum(C) || C == '_'; });
}

/// A value joined into a newline-separated list: non-empty, no NUL/newline.
static Error checkListItem(StringRef What, StringRef S) {
  if (S.empty())
    return createStringError("empty %s", What.str().c_str());
  if (S.find_first_of(StringRef("\0\n\r", 3)) != StringRef::npos)
    return createStringError("%s '%s' contains a NUL or newline character",
                             What.str().c_str(), escaped(S).c_str());
  return Error::success();
}

static Error checkPlainString(StringRef What, StringRef S) {
  if (S.find_first_of(StringRef("\0\n\r", 3)) != StringRef::npos)
    return createStringError("%s '%s' contains a NUL or newline character",
                             What.str().c_str(), escaped(S).c_str());
  return Error::success();
}

static Error checkImageMagic(const Member &M) {
  file_magic Magic = identify_magic(M.Image);
  bool OK = M.Kind == ImageKind::Bitcode
                ? Magic == file_magic::bitcode
                : (Magic == file_magic::elf_relocatable ||
                   Magic == file_magic::macho_object ||
                   Magic == file_magic::coff_object);
  if (!OK)
    return createStringError("image is not %s",
                             M.Kind == ImageKind::Bitcode
                                 ? "LLVM bitcode"
                                 : "a relocatable object file");
  return Error::success();
}

static Error checkTriple(const std::string &T) {
  if (T.empty())
    return createStringError("empty triple");
  if (Error E = checkPlainString("triple", T))
    return E;
  if (Triple::normalize(T) != T)
    return createStringError("triple '%s' is not normalized (expected '%s')",
                             T.c_str(), Triple::normalize(T).c_str());
  if (Triple(T).getArch() == Triple::UnknownArch)
    return createStringError("triple '%s' has an unknown architecture",
                             T.c_str());
  return Error::success();
}

/// \p TripleChecked: the member before had the same triple, which passed.
static Error checkMember(const Member &M, bool TripleChecked) {
  if (!TripleChecked)
    if (Error E = checkTriple(M.Triple))
      return E;
  if (Error E = checkPlainString("cpu", M.CPU))
    return E;
  if (Error E = checkPlainString("features", M.Features))
    return E;
  for (const std::string &S : M.Symbols)
    if (Error E = checkListItem("symbol", S))
      return E;
  if (!std::is_sorted(M.Symbols.begin(), M.Symbols.end()) ||
      std::adjacent_find(M.Symbols.begin(), M.Symbols.end()) !=
          M.Symbols.end())
    return createStringError("symbol list is not sorted and unique");
  if (M.Image.empty())
    return createStringError("empty image");
  return checkImageMagic(M);
}

static std::string describeMember(const Member &M) {
  std::string S = M.Triple;
  if (!M.CPU.empty())
    S += " cpu=" + M.CPU;
  S += " " + imageKindName(M.Kind).str() + " " + roleName(M.TheRole).str();
  return S;
}

/// Canonical member order; also the identity used to find duplicates.
static auto memberKey(const Member &M) {
  return std::make_tuple(M.TheRole, StringRef(M.Triple), StringRef(M.CPU),
                         M.Kind);
}

Error validateArchive(const Archive &A) {
  if (!isCIdentifier(A.Name))
    return createStringError(
        "ifunc name '%s' is not a C identifier ([A-Za-z_][A-Za-z0-9_]*)",
        escaped(A.Name).c_str());
  StringSet<> SeenDeps;
  for (const std::string &D : A.Deps) {
    if (Error E = checkListItem("dependency", D))
      return E;
    if (!SeenDeps.insert(D).second)
      return createStringError("dependency '%s' is listed twice", D.c_str());
  }
  if (A.Members.empty())
    return createStringError("archive has no members");
  for (size_t I = 1; I < A.Omitted.size(); ++I)
    if (!(A.Omitted[I - 1] < A.Omitted[I]))
      return createStringError("omitted member digests are not sorted and "
                               "unique");
  for (size_t I = 0; I < A.Members.size(); ++I) {
    bool SameTriple = I > 0 && A.Members[I].Triple == A.Members[I - 1].Triple;
    if (Error E = checkMember(A.Members[I], SameTriple))
      return createStringError("member %zu: %s", I,
                               toString(std::move(E)).c_str());
    if (I == 0)
      continue;
    // In canonical order a duplicate is next to its twin, so one linear
    // pass finds both defects however many members a hostile input has.
    if (memberKey(A.Members[I]) == memberKey(A.Members[I - 1]))
      return createStringError("member %zu duplicates member %zu (%s)", I,
                               I - 1, describeMember(A.Members[I]).c_str());
    // One canonical order keeps the bytes and the hash of an archive
    // independent of the order its members were added in.
    if (memberKey(A.Members[I]) < memberKey(A.Members[I - 1]))
      return createStringError("member %zu (%s) is out of canonical order "
                               "(role, triple, cpu, kind)",
                               I, describeMember(A.Members[I]).c_str());
  }
  return Error::success();
}

Expected<std::vector<std::string>> parseDepsList(StringRef Text) {
  std::vector<std::string> Deps;
  SmallVector<StringRef, 8> Lines;
  Text.split(Lines, '\n');
  for (StringRef Line : Lines) {
    Line = Line.trim();
    if (Line.empty() || Line.starts_with("#"))
      continue;
    if (Line.contains('\0'))
      return createStringError("dependency line contains a NUL character");
    Deps.push_back(Line.str());
  }
  return Deps;
}

//===----------------------------------------------------------------------===//
// Writer
//===----------------------------------------------------------------------===//

static std::string joinLines(const std::vector<std::string> &L) {
  return join(L.begin(), L.end(), "\n");
}

static SmallString<0> writeBinary(object::ImageKind Kind,
                                  const MapVector<StringRef, StringRef> &Strings,
                                  StringRef Image) {
  OffloadBinary::OffloadingImage OI;
  OI.TheImageKind = Kind;
  OI.TheOffloadKind = object::OFK_None;
  OI.Flags = 0;
  OI.StringData = Strings;
  OI.Image = MemoryBuffer::getMemBuffer(Image, "", false);
  return OffloadBinary::write(OI);
}

/// tc.signatures: one line per signature, "ed25519 KEY SIG" in lowercase
/// hex (64 and 128 digits), joined by newlines.
static std::string formatSignatures(ArrayRef<ArchiveSignature> Sigs) {
  std::vector<std::string> Lines;
  for (const ArchiveSignature &S : Sigs)
    Lines.push_back("ed25519 " +
                    toHex(ArrayRef<uint8_t>(S.Key.data(), S.Key.size()), true) +
                    " " +
                    toHex(ArrayRef<uint8_t>(S.Sig.data(), S.Sig.size()), true));
  return joinLines(Lines);
}

template <size_t N>
static bool lowerHexBytes(StringRef Hex, std::array<uint8_t, N> &Out) {
  std::string Raw;
  if (Hex.size() != 2 * N ||
      Hex.find_first_not_of("0123456789abcdef") != StringRef::npos ||
      !tryGetFromHex(Hex, Raw))
    return false;
  std::copy(Raw.begin(), Raw.end(), Out.begin());
  return true;
}

static Expected<std::vector<ArchiveSignature>>
parseSignatures(StringRef Text) {
  std::vector<ArchiveSignature> Out;
  SmallVector<StringRef, 4> Lines;
  Text.split(Lines, '\n');
  for (size_t I = 0; I < Lines.size(); ++I) {
    SmallVector<StringRef, 3> F;
    Lines[I].split(F, ' ');
    ArchiveSignature S;
    if (F.size() != 3 || F[0] != "ed25519" || !lowerHexBytes(F[1], S.Key) ||
        !lowerHexBytes(F[2], S.Sig))
      return createStringError(
          "manifest: tc.signatures line %zu is not 'ed25519 <64 hex digits> "
          "<128 hex digits>'",
          I + 1);
    for (const ArchiveSignature &O : Out)
      if (O.Key == S.Key)
        return createStringError("manifest: tc.signatures has key %s twice",
                                 keyId(S.Key).c_str());
    Out.push_back(S);
  }
  return Out;
}

Expected<SmallString<0>> writeArchive(Archive &A, unsigned Version) {
  if (Version < OldestArchiveVersion || Version > ArchiveVersion)
    return createStringError("cannot write tc archive version %u (this writer "
                             "knows %u to %u)",
                             Version, OldestArchiveVersion, ArchiveVersion);
  std::sort(A.Members.begin(), A.Members.end(),
                   [](const Member &L, const Member &R) {
                     return memberKey(L) < memberKey(R);
                   });
  if (Error E = validateArchive(A))
    return std::move(E);
  std::vector<MemberDigest> Digests;
  A.Hash = computeHash(A, Digests);

  SmallString<0> Out;
  std::string VersionText = std::to_string(Version);
  std::string DepsText = joinLines(A.Deps);
  std::string SignaturesText = formatSignatures(A.Signatures);
  MapVector<StringRef, StringRef> Manifest;
  Manifest[KeyVersion] = VersionText;
  Manifest[KeyName] = A.Name;
  // Version 2 spells the hash and the omitted digests in hex; version 3
  // stores them as the manifest's image, 32 bytes each, and has tc.deps
  // only when there are deps.
  std::string HashHex, OmittedText, ManifestImage;
  if (Version == 2) {
    HashHex = toHex(A.Hash);
    std::vector<std::string> OmittedHex;
    for (const MemberDigest &D : A.Omitted)
      OmittedHex.push_back(toHex(D));
    OmittedText = joinLines(OmittedHex);
    Manifest[KeyHash] = HashHex;
    Manifest[KeyDeps] = DepsText;
    if (!A.Omitted.empty())
      Manifest[KeyOmitted] = OmittedText;
  } else {
    if (!A.Deps.empty())
      Manifest[KeyDeps] = DepsText;
    ManifestImage.append(A.Hash.begin(), A.Hash.end());
    for (const MemberDigest &D : A.Omitted)
      ManifestImage.append(D.begin(), D.end());
  }
  if (!A.Signatures.empty())
    Manifest[KeySignatures] = SignaturesText;
  Out += writeBinary(object::IMG_None, Manifest, ManifestImage);

  for (size_t I = 0; I < A.Members.size(); ++I) {
    const Member &M = A.Members[I];
    std::string Symbols = joinLines(M.Symbols);
    std::string SizeText = std::to_string(M.Image.size());
    StringRef Stored = M.Image;
    SmallVector<uint8_t, 0> Compressed;
    std::string DictCompressed;
    // A member as read, unchanged and stored the same way: its frame again
    // (compressing costs milliseconds; a sender writes a thin copy of every
    // archive it ships).
    bool Reuse = !M.Stored.empty() && M.StoredAs == M.Compress &&
                 M.StoredDigest == Digests[I];
    if (Reuse) {
      Stored = M.Stored;
    } else if (M.Compress == Compression::Zstd) {
      if (!compression::zstd::isAvailable())
        return createStringError("zstd compression is not available in this "
                                 "build of LLVM");
      compression::zstd::compress(arrayRefFromStringRef(M.Image), Compressed,
                                  compression::zstd::BestSizeCompression);
      Stored = toStringRef(Compressed);
    } else if (M.Compress == Compression::ZstdDict) {
      Expected<std::string> C = compressWithDictionary(M.Image);
      if (!C)
        return C.takeError();
      DictCompressed = std::move(*C);
      Stored = DictCompressed;
    }
    MapVector<StringRef, StringRef> Strings;
    Strings[KeyTriple] = M.Triple;
    if (!M.CPU.empty())
      Strings[KeyArch] = M.CPU;
    if (!M.Features.empty())
      Strings[KeyFeatures] = M.Features;
    Strings[KeyRole] = roleName(M.TheRole);
    Strings[KeySymbols] = Symbols;
    if (M.Compress != Compression::None) {
      Strings[KeyCompression] = compressionName(M.Compress);
      if (Version == 2) // Version 3 reads it from the zstd frame.
        Strings[KeySize] = SizeText;
      if (M.Compress == Compression::ZstdDict)
        Strings[KeyDict] = builtinDictionaryId();
    }
    Out += writeBinary(M.Kind == ImageKind::Bitcode ? object::IMG_Bitcode
                                                    : object::IMG_Object,
                       Strings, Stored);
  }
  return std::move(Out);
}

size_t withoutDictionaries(Archive &A, ArrayRef<std::string> PeerHas,
                           Compression Fallback) {
  assert(Fallback != Compression::ZstdDict && "fallback needs no dictionary");
  size_t Changed = 0;
  for (Member &M : A.Members) {
    if (M.Compress != Compression::ZstdDict)
      continue;
    StringRef Id = M.DictId.empty() ? builtinDictionaryId() : M.DictId;
    if (llvm::is_contained(PeerHas, Id))
      continue;
    M.Compress = Fallback;
    M.DictId.clear();
    ++Changed;
  }
  return Changed;
}

Compression cheapestCompression(StringRef Image) {
  Expected<std::string> C = compressWithDictionary(Image);
  if (!C) {
    consumeError(C.takeError());
    return Compression::None;
  }
  // The keys and values a zstd-dict member adds in the version writers
  // write: tc.compression=zstd-dict, tc.dict=ID, each NUL-terminated, and
  // their 16-byte entries.
  size_t Keys = 2 * 16 + sizeof("tc.compression") + sizeof("zstd-dict") +
                sizeof("tc.dict") + builtinDictionaryId().size() + 1;
  return C->size() + Keys < Image.size() ? Compression::ZstdDict
                                         : Compression::None;
}

//===----------------------------------------------------------------------===//
// Reader
//===----------------------------------------------------------------------===//

namespace {
/// A half-open byte range inside one binary.
struct Region {
  const char *What;
  uint64_t Begin, End;
  bool overlaps(const Region &O) const {
    return Begin < End && O.Begin < O.End && Begin < O.End && O.Begin < End;
  }
};

/// Names a binary in messages: "manifest at offset 0", "member 2 at offset
/// 1234". Built only when a message is.
static std::string placeOf(StringRef Where, uint64_t Offset) {
  return (Where + " at offset " + Twine(Offset)).str();
}

class BinaryReader {
  StringRef Bytes; // This binary only, Header.Size bytes.
  StringRef Where; // "manifest" or "member N"; at Offset in the archive.
  uint64_t Offset;

public:
  BinaryReader(StringRef Bytes, StringRef Where, uint64_t Offset)
      : Bytes(Bytes), Where(Where), Offset(Offset) {}

  // Messages are built only on failure: a good archive formats nothing.
  Error fail(const Twine &Msg) const {
    return createStringError(placeOf(Where, Offset) + ": " + Msg);
  }
  uint16_t u16(uint64_t Off) const {
    return support::endian::read16le(Bytes.data() + Off);
  }
  uint32_t u32(uint64_t Off) const {
    return support::endian::read32le(Bytes.data() + Off);
  }
  uint64_t u64(uint64_t Off) const {
    return support::endian::read64le(Bytes.data() + Off);
  }

  /// Checks that [Off, Off + Len) lies inside the binary, without overflow.
  Error inBounds(const char *What, uint64_t Off, uint64_t Len) const {
    if (Off > Bytes.size() || Len > Bytes.size() - Off)
      return fail(formatv("{0} [{1}, {1} + {2}) ends past the end of the "
                          "binary ({3} bytes)",
                          What, Off, Len, Bytes.size()));
    return Error::success();
  }

  /// Reads the NUL-terminated string at Off; it must not touch any of
  /// \p Fixed (header, entry, string table, image).
  Expected<StringRef> string(const char *What, uint64_t Off,
                             ArrayRef<Region> Fixed) const {
    if (Off >= Bytes.size())
      return fail(formatv("{0} offset {1} is past the end of the binary ({2} "
                          "bytes)",
                          What, Off, Bytes.size()));
    size_t Nul = Bytes.find('\0', Off);
    if (Nul == StringRef::npos)
      return fail(formatv("{0} at offset {1} is not NUL-terminated before the "
                          "end of the binary",
                          What, Off));
    Region R{What, Off, Nul + 1};
    for (const Region &F : Fixed)
      if (R.overlaps(F))
        return fail(formatv("{0} at [{1}, {2}) overlaps the {3} [{4}, {5})",
                            What, R.Begin, R.End, F.What, F.Begin, F.End));
    return Bytes.slice(Off, Nul);
  }

  /// Parses the header, entry and string map; the image is left stored.
  Error parse(BinaryLayout &L, StringRef &StoredImage) const;

private:
  /// Requires every byte outside the \p Used ranges ([begin, end): header,
  /// entry, string table, strings, image) to be zero: the writer's padding
  /// is, and one archive then has one byte form.
  Error checkPadding(MutableArrayRef<std::pair<uint64_t, uint64_t>> Used) const;
};
} // namespace

Error BinaryReader::parse(BinaryLayout &L, StringRef &StoredImage) const {
  // The caller checked magic, version and Size; Bytes is exactly Size long.
  L.EntryOffset = u64(8 + 8);
  L.EntrySize = u64(8 + 16);
  if (L.EntrySize != EntrySize)
    return fail(formatv("entry size {0} is not {1}", L.EntrySize, EntrySize));
  if (L.EntryOffset < HeaderSize)
    return fail(formatv("entry offset {0} is inside the header",
                        L.EntryOffset));
  if (Error E = inBounds("entry", L.EntryOffset, EntrySize))
    return E;
  uint64_t E = L.EntryOffset;
  L.ImageKind = u16(E);
  L.OffloadKind = u16(E + 2);
  L.Flags = u32(E + 4);
  L.StringOffset = u64(E + 8);
  L.NumStrings = u64(E + 16);
  L.ImageOffset = u64(E + 24);
  L.ImageSize = u64(E + 32);

  // Each string needs a 16-byte table entry, so a larger count cannot fit.
  if (L.NumStrings > Bytes.size() / StringEntrySize)
    return fail(formatv("string count {0} cannot fit in a binary of {1} bytes",
                        L.NumStrings, Bytes.size()));
  if (Error Err = inBounds("string table", L.StringOffset,
                           L.NumStrings * StringEntrySize))
    return Err;
  if (Error Err = inBounds("image", L.ImageOffset, L.ImageSize))
    return Err;

  Region Fixed[] = {
      {"header", 0, HeaderSize},
      {"entry", L.EntryOffset, L.EntryOffset + EntrySize},
      {"string table", L.StringOffset,
       L.StringOffset + L.NumStrings * StringEntrySize},
      {"image", L.ImageOffset, L.ImageOffset + L.ImageSize}};
  for (size_t I = 0; I < std::size(Fixed); ++I)
    for (size_t J = 0; J < I; ++J)
      if (Fixed[I].overlaps(Fixed[J]))
        return fail(formatv("{0} [{1}, {2}) overlaps the {3} [{4}, {5})",
                            Fixed[I].What, Fixed[I].Begin, Fixed[I].End,
                            Fixed[J].What, Fixed[J].Begin, Fixed[J].End));

  StringSet<> Keys;
  // Every byte something describes; the rest is padding.
  SmallVector<std::pair<uint64_t, uint64_t>, 16> Used;
  for (const Region &F : Fixed)
    Used.emplace_back(F.Begin, F.End);
  for (uint64_t I = 0; I < L.NumStrings; ++I) {
    uint64_t SE = L.StringOffset + I * StringEntrySize;
    Expected<StringRef> Key = string("key", u64(SE), Fixed);
    if (!Key)
      return Key.takeError();
    Expected<StringRef> Value = string("value", u64(SE + 8), Fixed);
    if (!Value)
      return Value.takeError();
    if (!Keys.insert(*Key).second)
      return fail(formatv("key '{0}' appears twice", *Key));
    Used.emplace_back(u64(SE), u64(SE) + Key->size() + 1);
    Used.emplace_back(u64(SE + 8), u64(SE + 8) + Value->size() + 1);
    L.Strings.emplace_back(Key->str(), Value->str());
  }
  if (Error Err = checkPadding(Used))
    return Err;
  StoredImage = Bytes.substr(L.ImageOffset, L.ImageSize);
  return Error::success();
}

Error BinaryReader::checkPadding(
    MutableArrayRef<std::pair<uint64_t, uint64_t>> Used) const {
  llvm::sort(Used);
  uint64_t At = 0;
  auto Zero = [&](uint64_t End) -> Error {
    for (; At < End; ++At)
      if (Bytes[At] != 0)
        return fail(formatv("padding byte at offset {0} (archive offset {1}) "
                            "is {2:x2}; padding must be zero",
                            At, Offset + At, uint8_t(Bytes[At])));
    return Error::success();
  };
  for (const auto &[Begin, End] : Used) {
    if (Error E = Zero(std::max(At, Begin)))
      return E;
    At = std::max(At, End);
  }
  return Zero(Bytes.size());
}

/// Looks up the string map of a parsed binary.
static const std::string *findKey(const BinaryLayout &L, StringRef Key) {
  for (const auto &KV : L.Strings)
    if (KV.first == Key)
      return &KV.second;
  return nullptr;
}

static std::vector<std::string> splitLines(StringRef Text) {
  std::vector<std::string> Out;
  if (Text.empty())
    return Out;
  SmallVector<StringRef, 8> Parts;
  Text.split(Parts, '\n');
  for (StringRef P : Parts)
    Out.push_back(P.str());
  return Out;
}

/// Rejects keys a version-1 reader does not know in the tc namespace, so a
/// newer writer's meaning is never silently dropped.
static Error checkKeys(const BinaryLayout &L, ArrayRef<StringRef> Known,
                       const Twine &Where) {
  for (const auto &KV : L.Strings) {
    StringRef K = KV.first;
    if (!K.starts_with("tc."))
      continue;
    if (!llvm::is_contained(Known, K))
      return createStringError(Where + ": unknown key '" + K + "'");
  }
  return Error::success();
}

static Expected<const std::string *> requireKey(const BinaryLayout &L,
                                                StringRef Key,
                                                const Twine &Where) {
  if (const std::string *V = findKey(L, Key))
    return V;
  return createStringError(Where + ": missing key '" + Key + "'");
}

/// Parses 64 lowercase hex digits into 32 bytes.
static bool parseDigest(StringRef Hex, std::array<uint8_t, 32> &Out) {
  std::string Raw;
  if (Hex.size() != 64 || !tryGetFromHex(Hex, Raw) ||
      Hex.find_first_of("ABCDEF") != StringRef::npos)
    return false;
  std::copy(Raw.begin(), Raw.end(), Out.begin());
  return true;
}

/// A key of another version's manifest or member: named as such.
static Error checkNotOtherVersionKey(const BinaryLayout &L, StringRef Key,
                                     unsigned Version, const Twine &Where,
                                     StringRef Instead) {
  if (!findKey(L, Key))
    return Error::success();
  return createStringError(Where + ": version " + Twine(Version) +
                           " has no key '" + Key + "' (" + Instead + ")");
}

static Error readManifest(Archive &A, const BinaryLayout &L,
                          StringRef StoredImage, ArchiveHash &StoredHash) {
  const char *Where = "manifest";
  const std::string *VersionText = findKey(L, KeyVersion);
  if (!VersionText)
    return createStringError("not a tc archive: the first offload binary has "
                             "no 'tc.version' key");
  unsigned Version = 0;
  if (StringRef(*VersionText).getAsInteger(10, Version) ||
      *VersionText != std::to_string(Version) ||
      Version < OldestArchiveVersion || Version > ArchiveVersion)
    return createStringError("unsupported tc archive version '%s' (this reader "
                             "knows %u to %u)",
                             escaped(*VersionText).c_str(),
                             OldestArchiveVersion, ArchiveVersion);
  A.FormatVersion = Version;
  // Version 3's manifest image is the hash, then the omitted digests.
  bool ImageOK = Version == 2 ? StoredImage.empty()
                              : StoredImage.size() >= 32 &&
                                    StoredImage.size() % 32 == 0;
  if (L.ImageKind != object::IMG_None || L.OffloadKind != object::OFK_None ||
      L.Flags != 0 || !ImageOK)
    return createStringError(formatv(
        "manifest: image kind {0}, offload kind {1}, flags {2}, image size {3}; "
        "expected 0, 0, 0 and {4}",
        L.ImageKind, L.OffloadKind, L.Flags, StoredImage.size(),
        Version == 2 ? "0" : "32 (the hash) + 32 per omitted member"));
  if (Version == 2) {
    if (Error E = checkKeys(L, {KeyVersion, KeyName, KeyHash, KeyDeps,
                                KeyOmitted, KeySignatures},
                            Where))
      return E;
  } else {
    for (StringRef K : {KeyHash, KeyOmitted})
      if (Error E = checkNotOtherVersionKey(
              L, K, Version, Where,
              "the hash and omitted digests are the manifest's image"))
        return E;
    if (Error E = checkKeys(L, {KeyVersion, KeyName, KeyDeps, KeySignatures},
                            Where))
      return E;
  }
  auto Name = requireKey(L, KeyName, Where);
  if (!Name)
    return Name.takeError();
  A.Name = **Name;
  if (Version == 2) {
    auto Deps = requireKey(L, KeyDeps, Where);
    if (!Deps)
      return Deps.takeError();
    A.Deps = splitLines(**Deps);
  } else if (const std::string *Deps = findKey(L, KeyDeps)) {
    A.Deps = splitLines(*Deps);
  }
  if (Version != 2) {
    std::copy(StoredImage.begin(), StoredImage.begin() + 32,
              StoredHash.begin());
    for (size_t Off = 32; Off < StoredImage.size(); Off += 32) {
      MemberDigest D;
      std::copy(StoredImage.begin() + Off, StoredImage.begin() + Off + 32,
                D.begin());
      A.Omitted.push_back(D);
    }
  } else {
    auto Hash = requireKey(L, KeyHash, Where);
    if (!Hash)
      return Hash.takeError();
    if (!parseDigest(**Hash, StoredHash))
      return createStringError("manifest: tc.hash '%s' is not 64 lowercase "
                               "hex digits",
                               escaped(**Hash).c_str());
    if (const std::string *Omitted = findKey(L, KeyOmitted)) {
      // Each line one digest; an empty value would be a key with no meaning.
      if (Omitted->empty())
        return createStringError("manifest: tc.omitted is empty");
      std::vector<std::string> Lines = splitLines(*Omitted);
      A.Omitted.resize(Lines.size());
      for (size_t I = 0; I < Lines.size(); ++I)
        if (!parseDigest(Lines[I], A.Omitted[I]))
          return createStringError("manifest: tc.omitted line %zu '%s' is not "
                                   "64 lowercase hex digits",
                                   I + 1, escaped(Lines[I]).c_str());
    }
  }
  if (const std::string *Sigs = findKey(L, KeySignatures)) {
    Expected<std::vector<ArchiveSignature>> S = parseSignatures(*Sigs);
    if (!S)
      return S.takeError();
    A.Signatures = std::move(*S);
  }
  return Error::success();
}

/// Version 3's size of a compressed image: the content size its zstd frame
/// states; the image must be exactly that one frame.
static Expected<uint64_t> frameContentSize(StringRef Stored,
                                           const std::string &Where) {
  unsigned long long N = ZSTD_getFrameContentSize(Stored.data(), Stored.size());
  if (N == ZSTD_CONTENTSIZE_ERROR)
    return createStringError(Where + ": stored image is not a zstd frame");
  if (N == ZSTD_CONTENTSIZE_UNKNOWN)
    return createStringError(Where + ": the zstd frame does not state its "
                                     "content size");
  size_t Frame = ZSTD_findFrameCompressedSize(Stored.data(), Stored.size());
  if (ZSTD_isError(Frame) || Frame != Stored.size())
    return createStringError(formatv(
        "{0}: stored image of {1} bytes is not one whole zstd frame ({2})",
        Where, Stored.size(),
        ZSTD_isError(Frame) ? ZSTD_getErrorName(Frame)
                            : formatv("the frame ends at {0}", Frame).str()));
  return N;
}

static Error readMember(Member &M, const BinaryLayout &L,
                        StringRef StoredImage, const ReadOptions &Opts,
                        const std::string &Where, unsigned Version) {
  if (L.ImageKind == object::IMG_Bitcode)
    M.Kind = ImageKind::Bitcode;
  else if (L.ImageKind == object::IMG_Object)
    M.Kind = ImageKind::Object;
  else
    return createStringError(formatv(
        "{0}: image kind {1} is neither bitcode (2) nor object (1)", Where,
        L.ImageKind));
  if (L.OffloadKind != object::OFK_None)
    return createStringError(
        formatv("{0}: offload kind {1} is not 0", Where, L.OffloadKind));
  if (L.Flags != 0)
    return createStringError(formatv("{0}: flags {1:x} are not 0", Where,
                                     L.Flags));
  if (Version != 2)
    if (Error E = checkNotOtherVersionKey(
            L, KeySize, Version, Where,
            "a compressed image's zstd frame states its size"))
      return E;
  if (Error E = checkKeys(L,
                          {KeyFeatures, KeyRole, KeySymbols, KeyCompression,
                           KeySize, KeyDict},
                          Where))
    return E;
  auto Triple = requireKey(L, KeyTriple, Where);
  if (!Triple)
    return Triple.takeError();
  M.Triple = **Triple;
  if (const std::string *CPU = findKey(L, KeyArch))
    M.CPU = *CPU;
  if (const std::string *F = findKey(L, KeyFeatures))
    M.Features = *F;
  auto RoleText = requireKey(L, KeyRole, Where);
  if (!RoleText)
    return RoleText.takeError();
  Expected<Role> R = parseRole(**RoleText);
  if (!R)
    return createStringError(Where + ": " + toString(R.takeError()));
  M.TheRole = *R;
  auto Symbols = requireKey(L, KeySymbols, Where);
  if (!Symbols)
    return Symbols.takeError();
  M.Symbols = splitLines(**Symbols);

  M.Compress = Compression::None;
  if (const std::string *C = findKey(L, KeyCompression)) {
    Expected<Compression> Comp = parseCompression(*C);
    if (!Comp)
      return createStringError(Where + ": " + toString(Comp.takeError()));
    M.Compress = *Comp;
  }
  const std::string *Dict = findKey(L, KeyDict);
  if (M.Compress != Compression::ZstdDict && Dict)
    return createStringError(Where + ": tc.dict without tc.compression=" +
                             compressionName(Compression::ZstdDict));
  if (M.Compress == Compression::None) {
    if (findKey(L, KeySize))
      return createStringError(Where + ": tc.size without tc.compression");
    M.Image = StoredImage.str();
    return Error::success();
  }
  uint64_t Size;
  if (Version == 2) {
    auto SizeText = requireKey(L, KeySize, Where);
    if (!SizeText)
      return SizeText.takeError();
    if (StringRef(**SizeText).getAsInteger(10, Size))
      return createStringError(Where + ": tc.size '" + **SizeText +
                               "' is not a decimal number");
  } else {
    Expected<uint64_t> N = frameContentSize(StoredImage, Where);
    if (!N)
      return N.takeError();
    Size = *N;
  }
  if (Size > Opts.MaxImageSize)
    return createStringError(formatv(
        "{0}: uncompressed size {1} exceeds the limit of {2} bytes", Where,
        Size, Opts.MaxImageSize));
  // Kept for writeArchive() to store again, if it is a frame format 3
  // takes (in format 2 it need not state its size).
  if (Version != 2)
    M.Stored = StoredImage.str();
  else if (Expected<uint64_t> N = frameContentSize(StoredImage, Where))
    M.Stored = StoredImage.str();
  else
    consumeError(N.takeError());
  M.StoredAs = M.Compress;
  if (M.Compress == Compression::ZstdDict) {
    if (!Dict)
      return createStringError(Where + ": missing key 'tc.dict'");
    M.DictId = *Dict;
    return decompressWithDictionary(*Dict, StoredImage, M.Image, Size,
                                    Where);
  }
  if (!compression::zstd::isAvailable())
    return createStringError(Where + ": zstd is not available in this build "
                                     "of LLVM");
  M.Image.resize(Size);
  size_t Produced = Size;
  if (Error E = compression::zstd::decompress(
          arrayRefFromStringRef(StoredImage),
          reinterpret_cast<uint8_t *>(M.Image.data()), Produced))
    return createStringError(Where + ": cannot decompress image: " +
                             toString(std::move(E)));
  if (Produced != Size)
    return createStringError(formatv(
        "{0}: image decompressed to {1} bytes, not the {2} stated", Where,
        Produced, Size));
  return Error::success();
}

Expected<Archive> readArchive(MemoryBufferRef Buffer, const ReadOptions &Opts) {
  StringRef Data = Buffer.getBuffer();
  if (Data.empty())
    return createStringError("empty file: not a tc archive");

  Archive A;
  ArchiveHash StoredHash{};
  uint64_t Offset = 0;
  for (unsigned Index = 0; Offset < Data.size(); ++Index) {
    std::string Where =
        Index == 0 ? std::string("manifest") : "member " + utostr(Index - 1);
    StringRef Rest = Data.substr(Offset);
    auto At = [&] { return placeOf(Where, Offset); };
    if (Rest.size() < HeaderSize)
      return createStringError(formatv("{0}: truncated header ({1} bytes left, "
                                       "need {2})",
                                       At(), Rest.size(), HeaderSize));
    if (!Rest.starts_with(StringRef("\x10\xFF\x10\xAD", 4)))
      return createStringError(formatv(
          "{0}: bad magic {1:x-2}{2:x-2}{3:x-2}{4:x-2} (expected 10ff10ad)",
          At(), uint8_t(Rest[0]), uint8_t(Rest[1]), uint8_t(Rest[2]),
          uint8_t(Rest[3])));
    uint32_t Version = support::endian::read32le(Rest.data() + 4);
    if (Version != OffloadVersion)
      return createStringError(formatv("{0}: unsupported offload binary "
                                       "version {1} (this reader knows {2})",
                                       At(), Version, OffloadVersion));
    uint64_t Size = support::endian::read64le(Rest.data() + 8);
    if (Size < HeaderSize + EntrySize || Size % BinaryAlign != 0)
      return createStringError(
          formatv("{0}: size {1} is not a multiple of {2} of at least {3}",
                  At(), Size, BinaryAlign, HeaderSize + EntrySize));
    if (Size > Rest.size())
      return createStringError(formatv("{0}: size {1} runs past the end of the "
                                       "archive ({2} bytes left)",
                                       At(), Size, Rest.size()));

    BinaryLayout L;
    L.Offset = Offset;
    L.Size = Size;
    L.Version = Version;
    StringRef StoredImage;
    if (Error E = BinaryReader(Rest.take_front(Size), Where, Offset)
                      .parse(L, StoredImage))
      return std::move(E);

    if (Index == 0) {
      if (Error E = readManifest(A, L, StoredImage, StoredHash))
        return std::move(E);
      A.ManifestLayout = std::move(L);
    } else {
      Member M;
      if (Error E = readMember(M, L, StoredImage, Opts, Where,
                               A.FormatVersion))
        return std::move(E);
      M.Layout = std::move(L);
      A.Members.push_back(std::move(M));
    }
    Offset += Size;
  }

  if (Error E = validateArchive(A))
    return std::move(E);
  A.Hash = StoredHash;
  if (Opts.VerifyHash) {
    std::vector<MemberDigest> Digests;
    ArchiveHash Actual = computeHash(A, Digests);
    if (Actual != StoredHash)
      return createStringError("hash mismatch: manifest says %s, contents hash "
                               "to %s",
                               toHex(StoredHash).c_str(),
                               toHex(Actual).c_str());
    for (size_t I = 0; I < A.Members.size(); ++I)
      A.Members[I].StoredDigest = Digests[I];
  } else {
    for (Member &M : A.Members) // No digest to tell whether it still fits.
      M.Stored.clear();
  }
  return std::move(A);
}

} // namespace tc
