//===- Signature.cpp - Ed25519 signatures over an archive's content hash --===//
//
// libsodium's crypto_sign (Ed25519) signs signedMessage(content hash): a domain
// string and the 32-byte content hash. The signature is not part of what
// the hash covers, so re-storing or re-shipping an archive with the same
// hash keeps it valid. docs/archive-format.md ("Signatures") gives the
// manifest key and the key file format.
//
//===----------------------------------------------------------------------===//

#include "tc/Archive.h"

#include "llvm/ADT/StringExtras.h"

#include <sodium.h>

#include <algorithm>

using namespace llvm;

namespace tc {

static constexpr StringLiteral SecretTag = "tc-ed25519-secret-key";
static constexpr StringLiteral PublicTag = "tc-ed25519-public-key";
static constexpr StringLiteral Domain = "tc-archive-signature-v1";

static_assert(crypto_sign_PUBLICKEYBYTES == 32, "Ed25519 public key size");
static_assert(crypto_sign_SEEDBYTES == 32, "Ed25519 seed size");
static_assert(crypto_sign_BYTES == 64, "Ed25519 signature size");

static Error initSodium() {
  // Safe to call from several threads and more than once.
  if (sodium_init() < 0)
    return createStringError("libsodium failed to initialize");
  return Error::success();
}

SecretKey::~SecretKey() { sodium_memzero(Seed.data(), Seed.size()); }

std::string keyId(const PublicKey &K) {
  return toHex(ArrayRef<uint8_t>(K.data(), 8), /*LowerCase=*/true);
}

Expected<SecretKey> generateKey() {
  if (Error E = initSodium())
    return std::move(E);
  SecretKey K;
  randombytes_buf(K.Seed.data(), K.Seed.size());
  unsigned char SK[crypto_sign_SECRETKEYBYTES];
  crypto_sign_seed_keypair(K.Public.data(), SK, K.Seed.data());
  sodium_memzero(SK, sizeof(SK));
  return K;
}

std::string formatSecretKey(const SecretKey &K) {
  return (SecretTag + " " +
          toHex(ArrayRef<uint8_t>(K.Seed.data(), K.Seed.size()), true) + "\n")
      .str();
}

std::string formatPublicKey(const PublicKey &K) {
  return (PublicTag + " " + toHex(ArrayRef<uint8_t>(K.data(), K.size()), true) +
          "\n")
      .str();
}

/// Parses "TAG HEX64\n" (the newline optional) into 32 bytes.
static Error parseKeyLine(StringRef Text, StringRef Tag, const char *What,
                          std::array<uint8_t, 32> &Out) {
  StringRef Line = Text;
  Line.consume_back("\n");
  StringRef Hex = Line;
  std::string Raw;
  if (!Hex.consume_front(Tag) || !Hex.consume_front(" ") || Hex.size() != 64 ||
      Hex.find_first_not_of("0123456789abcdef") != StringRef::npos ||
      !tryGetFromHex(Hex, Raw))
    return createStringError("not a tc %s key file (expected one line '%s "
                             "<64 lowercase hex digits>')",
                             What, Tag.str().c_str());
  std::copy(Raw.begin(), Raw.end(), Out.begin());
  sodium_memzero(Raw.data(), Raw.size());
  return Error::success();
}

Expected<SecretKey> parseSecretKey(StringRef Text) {
  if (Error E = initSodium())
    return std::move(E);
  SecretKey K;
  if (Error E = parseKeyLine(Text, SecretTag, "secret", K.Seed))
    return std::move(E);
  unsigned char SK[crypto_sign_SECRETKEYBYTES];
  crypto_sign_seed_keypair(K.Public.data(), SK, K.Seed.data());
  sodium_memzero(SK, sizeof(SK));
  return K;
}

Expected<PublicKey> parsePublicKey(StringRef Text) {
  PublicKey K;
  if (Error E = parseKeyLine(Text, PublicTag, "public", K))
    return std::move(E);
  return K;
}

ArchiveHash signedHash(const Archive &A) {
  // Since format 2 the hash is the same for every copy of an archive,
  // whichever members it carries and whichever format version it is in
  // (docs/archive-format.md, "Thin copies").
  return A.Hash;
}

std::string signedMessage(const ArchiveHash &H) {
  std::string M = Domain.str();
  M.push_back('\0');
  M.append(reinterpret_cast<const char *>(H.data()), H.size());
  return M;
}

Error signArchive(Archive &A, const SecretKey &K) {
  if (Error E = initSodium())
    return E;
  unsigned char SK[crypto_sign_SECRETKEYBYTES];
  PublicKey Check;
  crypto_sign_seed_keypair(Check.data(), SK, K.Seed.data());
  ArchiveSignature S;
  S.Key = K.Public;
  std::string M = signedMessage(signedHash(A));
  crypto_sign_detached(S.Sig.data(), nullptr,
                       reinterpret_cast<const unsigned char *>(M.data()),
                       M.size(), SK);
  sodium_memzero(SK, sizeof(SK));
  if (Check != K.Public)
    return createStringError("secret key does not match its public key");
  auto Same = llvm::find_if(A.Signatures, [&](const ArchiveSignature &O) {
    return O.Key == S.Key;
  });
  if (Same != A.Signatures.end())
    *Same = S;
  else
    A.Signatures.push_back(S);
  return Error::success();
}

bool signatureVerifies(const ArchiveSignature &S, const ArchiveHash &H) {
  if (Error E = initSodium()) {
    consumeError(std::move(E));
    return false;
  }
  std::string M = signedMessage(H);
  return crypto_sign_verify_detached(
             S.Sig.data(), reinterpret_cast<const unsigned char *>(M.data()),
             M.size(), S.Key.data()) == 0;
}

char SignatureError::ID = 0;

void SignatureError::log(raw_ostream &OS) const {
  switch (Why) {
  case Unsigned:
    OS << "unsigned";
    return;
  case DoesNotVerify:
    OS << "signature does not verify (key " << KeyId << ")";
    return;
  case UntrustedKey:
    OS << "signed by an untrusted key " << KeyId;
    return;
  }
}

Error checkSignatures(const Archive &A, ArrayRef<PublicKey> Trusted) {
  if (A.Signatures.empty())
    return make_error<SignatureError>(SignatureError::Unsigned, "");
  ArchiveHash H = signedHash(A);
  if (Trusted.empty()) {
    for (const ArchiveSignature &S : A.Signatures)
      if (!signatureVerifies(S, H))
        return make_error<SignatureError>(SignatureError::DoesNotVerify,
                                          keyId(S.Key));
    return Error::success();
  }
  const ArchiveSignature *Bad = nullptr;
  for (const ArchiveSignature &S : A.Signatures) {
    if (!llvm::is_contained(Trusted, S.Key))
      continue;
    if (signatureVerifies(S, H))
      return Error::success();
    Bad = &S;
  }
  if (Bad)
    return make_error<SignatureError>(SignatureError::DoesNotVerify,
                                      keyId(Bad->Key));
  return make_error<SignatureError>(SignatureError::UntrustedKey,
                                    keyId(A.Signatures.front().Key));
}

} // namespace tc
