//===- tc/Archive.h - Fat-bitcode archives of injected functions -*- C++ -*-===//
//
// A tc archive carries one injected function (ifunc) to machines of several
// kinds: one member per target triple (LLVM bitcode, or a native relocatable
// object), members the source process itself runs (payload_bound and
// payload_init), the shared libraries the target must load, and a content hash
// that names the code on the wire.
//
// The container is a sequence of LLVM offload binaries (magic 0x10FF10AD,
// version 1): a manifest binary followed by one binary per member, so
// `llvm-objdump --offloading` lists tc archives. docs/archive-format.md gives
// the byte layout and every check the reader makes.
//
// Archives arrive from the network: readArchive() treats its input as hostile
// and returns an llvm::Error for any defect instead of trusting an offset,
// count or string.
//
//===----------------------------------------------------------------------===//

#ifndef TC_ARCHIVE_H
#define TC_ARCHIVE_H

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBufferRef.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tc {

/// Version of the tc layer (the `tc.version` manifest key) that
/// writeArchive() writes by default. The reader reads every version from
/// OldestArchiveVersion on and rejects any other value; see
/// docs/archive-format.md for the version rule. Version 3 keeps the hash and
/// omitted digests as 32-byte values in the manifest's image (version 2:
/// hex in tc.hash and tc.omitted) and takes a compressed member's size from
/// its zstd frame (version 2: tc.size); the content hash is the same.
constexpr unsigned ArchiveVersion = 3;
constexpr unsigned OldestArchiveVersion = 2;

/// What a member's image holds.
enum class ImageKind : uint8_t {
  Bitcode, ///< LLVM bitcode, JIT-compiled by the target.
  Object,  ///< Native relocatable object, linked by the target.
};

/// Who runs a member's code.
enum class Role : uint8_t {
  Target, ///< Shipped to targets: NAME_main and what it reaches.
  Source, ///< Run by the sending process: NAME_payload_bound/_init.
};

/// How a member's image is stored.
enum class Compression : uint8_t {
  None,
  Zstd,     ///< zstd through llvm::compression; needs an LLVM built with zstd.
  ZstdDict, ///< zstd (libzstd) with this build's dictionary; see below.
};

llvm::StringRef imageKindName(ImageKind K);
llvm::StringRef roleName(Role R);
llvm::StringRef compressionName(Compression C);
llvm::Expected<Role> parseRole(llvm::StringRef S);
llvm::Expected<Compression> parseCompression(llvm::StringRef S);

/// The 32-byte BLAKE3 content hash of an archive.
using ArchiveHash = std::array<uint8_t, 32>;
/// The 32-byte BLAKE3 digest of one member (memberDigest()).
using MemberDigest = std::array<uint8_t, 32>;
std::string toHex(const ArchiveHash &H);

/// Where one offload binary of an archive sits and what its header says.
/// Filled in by readArchive() for tools that show the raw layout.
struct BinaryLayout {
  uint64_t Offset = 0;      ///< Start of this binary in the archive.
  uint64_t Size = 0;        ///< Header.Size.
  uint32_t Version = 0;     ///< Header.Version.
  uint64_t EntryOffset = 0; ///< Header.EntryOffset (relative to Offset).
  uint64_t EntrySize = 0;   ///< Header.EntrySize.
  uint16_t ImageKind = 0;   ///< Entry.TheImageKind (LLVM's numbering).
  uint16_t OffloadKind = 0; ///< Entry.TheOffloadKind.
  uint32_t Flags = 0;       ///< Entry.Flags.
  uint64_t StringOffset = 0;
  uint64_t NumStrings = 0;
  uint64_t ImageOffset = 0;
  uint64_t ImageSize = 0; ///< Stored (possibly compressed) size.
  /// The string map in file order.
  std::vector<std::pair<std::string, std::string>> Strings;
};

/// One member: a code image for one triple (and optionally one CPU).
struct Member {
  std::string Triple;   ///< Normalized target triple.
  std::string CPU;      ///< Empty: generic for the triple.
  std::string Features; ///< Comma-separated +feat/-feat; may be empty.
  ImageKind Kind = ImageKind::Bitcode;
  Role TheRole = Role::Target;
  Compression Compress = Compression::None; ///< How the image is stored.
  /// With ZstdDict, the dictionary's id (tc.dict): set by readArchive();
  /// writeArchive() writes builtinDictionaryId().
  std::string DictId;
  /// External symbols the image needs from the process or the deps, sorted.
  std::vector<std::string> Symbols;
  std::string Image; ///< Uncompressed image bytes.
  /// A compressed member as readArchive() found it: the stored frame, how
  /// it was stored and the member's digest then. writeArchive() writes the
  /// frame again instead of compressing anew when the member still has that
  /// digest and Compress (a thin copy of a received archive, which every
  /// sender writes per target, then costs no compression). Empty when the
  /// member was not read compressed or the hash was not verified.
  std::string Stored;
  Compression StoredAs = Compression::None;
  MemberDigest StoredDigest{};

  BinaryLayout Layout; ///< Set by readArchive(); ignored by writeArchive().
};

/// An Ed25519 public key (libsodium's crypto_sign, 32 bytes).
using PublicKey = std::array<uint8_t, 32>;

/// One signature of an archive: who signed (the public key) and the 64-byte
/// Ed25519 signature over signedMessage(signedHash()). Kept in the manifest's
/// tc.signatures key; not covered by the content hash.
struct ArchiveSignature {
  PublicKey Key{};
  std::array<uint8_t, 64> Sig{};
};

/// A whole archive, in memory.
struct Archive {
  std::string Name;              ///< The ifunc name: a C identifier.
  std::vector<std::string> Deps; ///< Shared libraries the target loads.
  std::vector<Member> Members;
  /// Members this copy leaves out, by digest, sorted: a sender ships a
  /// target only the member it will run (thinArchive()), and the omitted
  /// digests let the target recompute the same content hash.
  std::vector<MemberDigest> Omitted;
  ArchiveHash Hash{}; ///< Set by readArchive() and writeArchive().
  /// Signatures over signedHash(); written and read as they are (signArchive() adds
  /// one, checkSignatures() judges them). A rewrite that keeps the hash
  /// keeps them valid.
  std::vector<ArchiveSignature> Signatures;

  BinaryLayout ManifestLayout; ///< Set by readArchive().
  /// The format version readArchive() read (tc.version); writeArchive()
  /// writes the version it is asked for, whatever this says.
  unsigned FormatVersion = ArchiveVersion;
};

/// Limits the reader enforces on untrusted input.
struct ReadOptions {
  bool VerifyHash = true; ///< Recompute and compare the stored hash.
  uint64_t MaxImageSize = uint64_t(1) << 30; ///< Largest decompressed image.
};

/// BLAKE3 over a canonical encoding of one member's triple, CPU, features,
/// kind, role, symbols and uncompressed image: the member's identity.
MemberDigest memberDigest(const Member &M);

/// Computes the content hash: BLAKE3 over a canonical encoding of the name,
/// the deps and the sorted digests of every member, present or omitted.
/// Compression, layout and which members a copy carries do not change it.
ArchiveHash computeHash(const Archive &A);

/// A copy of \p A that carries only the members \p Keep accepts; the others
/// are listed in Archive::Omitted, so the copy has \p A's hash.
Archive thinArchive(const Archive &A,
                    llvm::function_ref<bool(const Member &)> Keep);

/// Checks the fields a writer would put in the archive (name, deps, triples,
/// symbols, no duplicate members). \p A is not changed.
llvm::Error validateArchive(const Archive &A);

/// Serializes \p A in format \p Version (for a reader that knows only an
/// older one; same hash). Members are written in canonical order (role,
/// triple, CPU, kind), so the output does not depend on the order they were
/// added in. On success \p A's members are in that order and \p A.Hash is
/// set.
llvm::Expected<llvm::SmallString<0>>
writeArchive(Archive &A, unsigned Version = ArchiveVersion);

/// Parses and validates an archive from untrusted bytes. Errors name the
/// binary and field at fault ("member 2: image [96, 9000) ends past ...").
llvm::Expected<Archive> readArchive(llvm::MemoryBufferRef Buffer,
                                    const ReadOptions &Opts = ReadOptions());

/// Parses a deps list: one library per line; blank lines and lines starting
/// with '#' are skipped; a last line without a newline still counts.
llvm::Expected<std::vector<std::string>> parseDepsList(llvm::StringRef Text);

//===----------------------------------------------------------------------===//
// The zstd dictionary (docs/archive-format.md, "The dictionary")
//===----------------------------------------------------------------------===//

/// The id of the dictionary this build writes `zstd-dict` members with:
/// 16 lowercase hex digits, the first 8 bytes of BLAKE3 over its bytes.
llvm::StringRef builtinDictionaryId();

/// The dictionary's size in bytes.
size_t builtinDictionarySize();

/// One of the bitcode files the dictionary concatenates: tc-cc's prepared
/// target module of a small ifunc (`tc_dict`, archive-format/dict/) for one
/// architecture. JitEngine compiles one to warm up before its first message.
struct DictionaryModule {
  llvm::StringRef Arch;    ///< "x86_64", "aarch64" (the triple's arch).
  llvm::StringRef Bitcode; ///< A complete bitcode file.
};

/// The dictionary's bitcode files, in the order they are concatenated.
std::vector<DictionaryModule> builtinDictionaryModules();

/// Every dictionary id this build can read (what a target announces in a
/// capability exchange).
std::vector<std::string> dictionaryIds();

/// True when this build can read members compressed with dictionary \p Id.
bool haveDictionary(llvm::StringRef Id);

/// readArchive()'s error for a member compressed with a dictionary this build
/// does not have. Its sender can ship the member again without it
/// (withoutDictionaries()); anything else about the archive may still be
/// wrong.
class MissingDictionaryError
    : public llvm::ErrorInfo<MissingDictionaryError> {
public:
  static char ID;
  std::string Where;  ///< "member N at offset M"
  std::string DictId; ///< The tc.dict value.
  MissingDictionaryError(std::string Where, std::string DictId)
      : Where(std::move(Where)), DictId(std::move(DictId)) {}
  void log(llvm::raw_ostream &OS) const override;
  std::error_code convertToErrorCode() const override {
    return llvm::inconvertibleErrorCode();
  }
};

/// For a peer that can read only the dictionaries \p PeerHas: every member
/// stored with another dictionary is stored as \p Fallback (None or Zstd)
/// instead. The content hash does not change; call writeArchive() after.
/// Returns the number of members changed.
size_t withoutDictionaries(Archive &A, llvm::ArrayRef<std::string> PeerHas,
                           Compression Fallback = Compression::None);

/// The storage tc-cc's default (`--compress=auto`) picks for \p Image:
/// ZstdDict when it makes the member smaller, its two extra keys counted,
/// else None.
Compression cheapestCompression(llvm::StringRef Image);

/// Compresses \p Image with the built-in dictionary (a zstd frame).
llvm::Expected<std::string> compressWithDictionary(llvm::StringRef Image);

/// Decompresses a member stored with dictionary \p Id into exactly \p Size
/// bytes; a MissingDictionaryError when this build lacks \p Id. \p Where
/// names the member in messages.
llvm::Error decompressWithDictionary(llvm::StringRef Id,
                                     llvm::StringRef Stored,
                                     std::string &Image, uint64_t Size,
                                     const std::string &Where);

//===----------------------------------------------------------------------===//
// Signatures (docs/archive-format.md, "Signatures"; Ed25519 from libsodium)
//===----------------------------------------------------------------------===//

/// A signing key: the 32-byte Ed25519 seed and the public key it gives.
/// Zeroed when destroyed.
struct SecretKey {
  std::array<uint8_t, 32> Seed{};
  PublicKey Public{};
  ~SecretKey();
};

/// A key's short name in messages: its first 8 bytes, 16 hex digits.
std::string keyId(const PublicKey &K);

/// A fresh key from libsodium's random source.
llvm::Expected<SecretKey> generateKey();

/// Key files: one line each, `tc-ed25519-secret-key HEX64` (the seed) and
/// `tc-ed25519-public-key HEX64`.
std::string formatSecretKey(const SecretKey &K);
std::string formatPublicKey(const PublicKey &K);
llvm::Expected<SecretKey> parseSecretKey(llvm::StringRef Text);
llvm::Expected<PublicKey> parsePublicKey(llvm::StringRef Text);

/// The hash a signature covers: the content hash (A.Hash, which must be set by
/// writeArchive() or readArchive()). Every copy of an archive has it,
/// whichever members the copy carries, so one signature covers what any
/// target receives.
ArchiveHash signedHash(const Archive &A);

/// The bytes an archive signature covers: the ASCII domain string
/// "tc-archive-signature-v1", a zero byte, then the 32-byte signedHash().
std::string signedMessage(const ArchiveHash &H);

/// Adds (or replaces, for the same key) \p K's signature over
/// signedHash(\p A); write the archive again to keep it.
llvm::Error signArchive(Archive &A, const SecretKey &K);

/// True when \p S is a valid signature of \p H by S.Key.
bool signatureVerifies(const ArchiveSignature &S, const ArchiveHash &H);

/// Why checkSignatures() refused an archive.
class SignatureError : public llvm::ErrorInfo<SignatureError> {
public:
  enum Reason { Unsigned, DoesNotVerify, UntrustedKey };
  static char ID;
  Reason Why;
  std::string KeyId; ///< The key at fault (empty for Unsigned).
  SignatureError(Reason Why, std::string KeyId)
      : Why(Why), KeyId(std::move(KeyId)) {}
  /// "unsigned", "signature does not verify (key ID)" or "signed by an
  /// untrusted key ID".
  void log(llvm::raw_ostream &OS) const override;
  std::error_code convertToErrorCode() const override {
    return llvm::inconvertibleErrorCode();
  }
};

/// Admission by signature: success when some signature of \p A by a key in
/// \p Trusted verifies over signedHash(A). Otherwise a SignatureError: Unsigned
/// (no signature), DoesNotVerify (a trusted key's signature is wrong: the
/// archive was changed or the signature damaged), UntrustedKey (valid or
/// not, every signature is by another key). With \p Trusted empty, every
/// signature must verify instead (what `tc-ar verify` checks).
llvm::Error checkSignatures(const Archive &A,
                            llvm::ArrayRef<PublicKey> Trusted);

/// Picks the member a process with \p HostTriple and \p HostCPU should run.
/// Triples match after llvm::Triple normalization with the vendor ignored
/// (x86_64-pc-linux-gnu runs x86_64-unknown-linux-gnu code); a member built
/// for \p HostCPU is preferred to one built for a CPU whose features
/// \p HostCPU has (cpuRunsOn), which is preferred to a generic one; members
/// for any other CPU are never picked. With \p Kind set, only members of
/// that kind qualify;
/// otherwise bitcode is preferred to an object. The error lists what the
/// archive has.
llvm::Expected<const Member *>
selectMember(const Archive &A, llvm::StringRef HostTriple,
             llvm::StringRef HostCPU = "", Role R = Role::Target,
             std::optional<ImageKind> Kind = std::nullopt);

/// The copy of \p A a sender ships to a host of \p HostTriple and
/// \p HostCPU: only the target member selectMember() picks for it (with
/// \p Kind), every other member omitted by digest (thinArchive), so the
/// copy has \p A's hash. Fails as selectMember() does.
llvm::Expected<Archive>
archiveForHost(const Archive &A, llvm::StringRef HostTriple,
               llvm::StringRef HostCPU,
               std::optional<ImageKind> Kind = std::nullopt);

/// True when code built for CPU \p MemberCPU (empty: generic) runs on
/// \p HostCPU, for targets of \p TripleName: the same CPU, or, on x86 and
/// AArch64, a CPU that has every feature (x86, implied ones included) or
/// the architecture version and every extension (AArch64) that LLVM's CPU
/// tables give \p MemberCPU; on nvptx64, an NVIDIA GPU architecture at or
/// above the member's (sm_70 code runs on sm_90; sm_90a only on sm_90,
/// sm_100f on sm_10x). Unknown CPU names and other architectures match
/// only themselves.
bool cpuRunsOn(llvm::StringRef TripleName, llvm::StringRef MemberCPU,
               llvm::StringRef HostCPU);

/// True when code built for \p MemberTriple may run on \p HostTriple.
bool triplesCompatible(llvm::StringRef MemberTriple,
                       llvm::StringRef HostTriple);

/// What an input file for an archive turned out to be.
struct InputImage {
  ImageKind Kind = ImageKind::Bitcode;
  std::string Triple;               ///< Read from the input itself.
  std::string Image;                ///< Bitcode or object bytes.
  std::vector<std::string> Symbols; ///< Undefined external symbols, sorted.
};

/// Reads an input for `tc-ar create`: LLVM bitcode, LLVM assembly (.ll,
/// assembled to bitcode) or a relocatable object. The triple comes from the
/// input; one without a triple is an error.
llvm::Expected<InputImage> loadInputImage(llvm::MemoryBufferRef Buffer);

/// Lists the undefined external symbols of a bitcode or object image.
llvm::Expected<std::vector<std::string>>
externalSymbols(ImageKind Kind, llvm::StringRef Image);

/// Deeper checks than readArchive() makes, for `tc-ar verify`: each image
/// parses, its own triple is the member's triple, and its external symbols
/// are the member's symbol list.
llvm::Error verifyImages(const Archive &A);

} // namespace tc

#endif // TC_ARCHIVE_H
