//===- ArchiveTest.cpp - Archive writer/reader round trips and defects ----===//

#include "TestArchives.h"

#include "llvm/Support/Compression.h"
#include "llvm/Support/Endian.h"

#include <zstd.h>

#include "gtest/gtest.h"

#include <random>

using namespace tc;
using namespace tc::test;

namespace {

std::string randomString(std::mt19937_64 &Rng, size_t MaxLen,
                         const std::string &Alphabet) {
  std::uniform_int_distribution<size_t> Len(1, MaxLen);
  std::uniform_int_distribution<size_t> Pick(0, Alphabet.size() - 1);
  std::string S;
  for (size_t I = 0, N = Len(Rng); I < N; ++I)
    S += Alphabet[Pick(Rng)];
  return S;
}

const char *const Triples[] = {
    "x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu",
    "riscv64-unknown-linux-gnu", "powerpc64le-unknown-linux-gnu",
    "x86_64-pc-linux-gnu"};

Archive randomArchive(std::mt19937_64 &Rng) {
  const std::string Ident =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789";
  Archive A;
  A.Name = "f" + randomString(Rng, 300, Ident);
  std::uniform_int_distribution<int> Small(0, 4);
  for (int I = 0, N = Small(Rng); I < N; ++I)
    A.Deps.push_back("lib" + std::to_string(I) +
                     randomString(Rng, 40, Ident + "./-+") + ".so");
  int NumMembers = 1 + Small(Rng);
  for (int I = 0; I < NumMembers; ++I) {
    Member M = makeMember(Triples[I], I % 2 ? "" : "cpu" + std::to_string(I),
                          Small(Rng) % 2 ? ImageKind::Bitcode
                                         : ImageKind::Object,
                          Small(Rng) == 0 ? Role::Source : Role::Target);
    M.Image += randomString(Rng, 3000, Ident + std::string("\0\xff\n", 3));
    if (Small(Rng) == 0)
      M.Features = "+" + randomString(Rng, 20, Ident);
    for (int S = 0, NS = Small(Rng); S < NS; ++S)
      M.Symbols.push_back(randomString(Rng, 30, Ident + "$.@"));
    std::sort(M.Symbols.begin(), M.Symbols.end());
    M.Symbols.erase(std::unique(M.Symbols.begin(), M.Symbols.end()),
                    M.Symbols.end());
    int Storage = Small(Rng);
    if (llvm::compression::zstd::isAvailable() && Storage < 2)
      M.Compress = Compression::Zstd;
    else if (Storage == 2)
      M.Compress = Compression::ZstdDict;
    A.Members.push_back(std::move(M));
  }
  return A;
}

void expectSameContents(const Archive &X, const Archive &Y) {
  EXPECT_EQ(X.Name, Y.Name);
  EXPECT_EQ(X.Deps, Y.Deps);
  EXPECT_EQ(X.Hash, Y.Hash);
  ASSERT_EQ(X.Members.size(), Y.Members.size());
  for (size_t I = 0; I < X.Members.size(); ++I) {
    const Member &A = X.Members[I], &B = Y.Members[I];
    EXPECT_EQ(A.Triple, B.Triple);
    EXPECT_EQ(A.CPU, B.CPU);
    EXPECT_EQ(A.Features, B.Features);
    EXPECT_EQ(A.Kind, B.Kind);
    EXPECT_EQ(A.TheRole, B.TheRole);
    EXPECT_EQ(A.Compress, B.Compress);
    EXPECT_EQ(A.Symbols, B.Symbols);
    EXPECT_EQ(A.Image, B.Image);
  }
}

llvm::Expected<Archive> read(llvm::StringRef Bytes, bool VerifyHash = true) {
  ReadOptions O;
  O.VerifyHash = VerifyHash;
  return readArchive(llvm::MemoryBufferRef(Bytes, "test"), O);
}

std::string errorOf(llvm::Expected<Archive> A) {
  if (A)
    return "<no error>";
  return llvm::toString(A.takeError());
}

TEST(ArchiveRoundTrip, RandomizedWriteReadPreservesEverything) {
  std::mt19937_64 Rng(20261123);
  for (int Iter = 0; Iter < 300; ++Iter) {
    Archive A = randomArchive(Rng);
    // Every version this build writes (and reads) carries the same archive.
    unsigned Version = OldestArchiveVersion + Iter % 2;
    llvm::Expected<llvm::SmallString<0>> Bytes = writeArchive(A, Version);
    ASSERT_TRUE(!!Bytes) << llvm::toString(Bytes.takeError());
    EXPECT_EQ(Bytes->size() % 8, 0u);
    llvm::Expected<Archive> B = read(*Bytes);
    ASSERT_TRUE(!!B) << llvm::toString(B.takeError());
    expectSameContents(A, *B);
    EXPECT_EQ(B->FormatVersion, Version);
    // Writing what was read gives the same bytes back.
    llvm::Expected<llvm::SmallString<0>> Again = writeArchive(*B, Version);
    ASSERT_TRUE(!!Again);
    EXPECT_EQ(Bytes->str(), Again->str());
  }
}

TEST(ArchiveFormat, VersionsTwoAndThreeCarryTheSameArchive) {
  Archive Full;
  Full.Name = "v";
  Full.Deps = {"libm.so.6"};
  Full.Members = {makeMember(Triples[0], ""), makeMember(Triples[1], ""),
                  makeMember(Triples[0], "", ImageKind::Bitcode,
                             Role::Source)};
  for (Member &M : Full.Members)
    M.Compress = Compression::ZstdDict;
  ASSERT_TRUE(!!writeArchive(Full));
  llvm::Expected<SecretKey> K = generateKey();
  ASSERT_TRUE(!!K);
  ASSERT_FALSE(!!signArchive(Full, *K));
  Archive Thin = thinArchive(
      Full, [](const Member &M) { return M.Triple == Triples[1]; });
  ASSERT_EQ(Thin.Omitted.size(), 2u);
  for (const Archive &A : {Full, Thin}) {
    Archive A2 = A, A3 = A;
    auto V2 = writeArchive(A2, 2), V3 = writeArchive(A3, 3);
    ASSERT_TRUE(V2 && V3);
    // Format 3 saves the hex of the hash and of every omitted digest (and
    // each compressed member's tc.size).
    EXPECT_LT(V3->size() + 64 * A.Omitted.size(), V2->size());
    for (llvm::StringRef Bytes : {V2->str(), V3->str()}) {
      llvm::Expected<Archive> R = read(Bytes);
      ASSERT_TRUE(!!R) << llvm::toString(R.takeError());
      expectSameContents(A, *R);
      EXPECT_EQ(R->Hash, Full.Hash);
      EXPECT_EQ(R->Omitted, A.Omitted);
      ASSERT_EQ(R->Signatures.size(), 1u);
      EXPECT_FALSE(!!checkSignatures(*R, {K->Public}));
    }
  }
  EXPECT_EQ(llvm::toString(writeArchive(Full, 4).takeError()),
            "cannot write tc archive version 4 (this writer knows 2 to 3)");
  llvm::Expected<llvm::SmallString<0>> V1 = writeArchive(Full, 1);
  EXPECT_FALSE(!!V1);
  if (!V1)
    llvm::consumeError(V1.takeError());
}

TEST(ArchiveRoundTrip, MemberOrderDoesNotChangeBytesOrHash) {
  Archive A;
  A.Name = "order";
  A.Members = {makeMember(Triples[0], ""), makeMember(Triples[1], ""),
               makeMember(Triples[0], "", ImageKind::Bitcode, Role::Source)};
  Archive B = A;
  std::reverse(B.Members.begin(), B.Members.end());
  auto BA = writeArchive(A), BB = writeArchive(B);
  ASSERT_TRUE(BA && BB);
  EXPECT_EQ(BA->str(), BB->str());
  EXPECT_EQ(A.Hash, B.Hash);
  EXPECT_EQ(A.Members[0].TheRole, Role::Target); // targets sort first
}

TEST(ArchiveHash, GoldenValuePinsTheDefinition) {
  // If this changes, the hash definition changed: every deployed cache key
  // changes with it. Update docs/archive-format.md and the version rule.
  Archive A;
  A.Name = "tsi";
  A.Deps = {"libm.so.6"};
  A.Members = {makeMember("x86_64-unknown-linux-gnu", "")};
  A.Members[0].Symbols = {"printf"};
  EXPECT_EQ(toHex(computeHash(A)),
            "92b03afc94b7c264287a300e95a8ba6bdfd07cac7777dfd0737914c5aeece04c");
}

TEST(ArchiveHash, AThinCopyKeepsTheHashAndRoundTrips) {
  Archive A;
  A.Name = "thin";
  A.Deps = {"libm.so.6"};
  A.Members = {makeMember(Triples[0], ""), makeMember(Triples[1], ""),
               makeMember(Triples[0], "", ImageKind::Bitcode, Role::Source)};
  auto Full = writeArchive(A);
  ASSERT_TRUE(bool(Full)) << toString(Full.takeError());
  Archive T = thinArchive(
      A, [&](const Member &M) { return M.Triple == Triples[1]; });
  ASSERT_EQ(T.Members.size(), 1u);
  ASSERT_EQ(T.Omitted.size(), 2u);
  EXPECT_EQ(computeHash(T), A.Hash);
  EXPECT_TRUE(std::is_sorted(T.Omitted.begin(), T.Omitted.end()));
  for (const Member &M : A.Members)
    EXPECT_EQ(llvm::is_contained(T.Omitted, memberDigest(M)),
              M.Triple != Triples[1] || M.TheRole == Role::Source);
  auto Bytes = writeArchive(T);
  ASSERT_TRUE(bool(Bytes)) << toString(Bytes.takeError());
  EXPECT_LT(Bytes->size(), Full->size());
  auto Back = readArchive(llvm::MemoryBufferRef(*Bytes, "thin"));
  ASSERT_TRUE(bool(Back)) << toString(Back.takeError());
  EXPECT_EQ(Back->Hash, A.Hash);
  EXPECT_EQ(Back->Omitted, T.Omitted);
  // Thinning a thin copy again keeps what it omitted.
  Archive TT = thinArchive(*Back, [](const Member &) { return true; });
  EXPECT_EQ(computeHash(TT), A.Hash);
}

TEST(ArchiveHash, AThinCopyWithAWrongMemberOrDigestDoesNotVerify) {
  Archive A;
  A.Name = "thin";
  A.Members = {makeMember(Triples[0], ""), makeMember(Triples[1], "")};
  ASSERT_TRUE(bool(writeArchive(A)));
  Archive T = thinArchive(
      A, [&](const Member &M) { return M.Triple == Triples[1]; });
  // A different member under the right digests: the hash no longer matches.
  Archive Swapped = T;
  Swapped.Members[0].Image += "!";
  EXPECT_NE(computeHash(Swapped), A.Hash);
  // The right member with a forged list of the others: no match either.
  Archive Forged = T;
  Forged.Omitted[0][0] ^= 1;
  EXPECT_NE(computeHash(Forged), A.Hash);
  // Dropping an omitted digest changes the hash: a copy cannot hide a member.
  Archive Hidden = T;
  Hidden.Omitted.clear();
  EXPECT_NE(computeHash(Hidden), A.Hash);
}

TEST(ArchiveHash, ForHostShipsTheMemberItRuns) {
  Archive A;
  A.Name = "pick";
  A.Members = {makeMember(Triples[0], ""), makeMember(Triples[1], ""),
               makeMember(Triples[1], "", ImageKind::Object)};
  ASSERT_TRUE(bool(writeArchive(A)));
  auto T = archiveForHost(A, Triples[1], "");
  ASSERT_TRUE(bool(T)) << toString(T.takeError());
  ASSERT_EQ(T->Members.size(), 1u);
  EXPECT_EQ(T->Members[0].Triple, Triples[1]);
  EXPECT_EQ(T->Members[0].Kind, ImageKind::Bitcode);
  EXPECT_EQ(computeHash(*T), A.Hash);
  auto O = archiveForHost(A, Triples[1], "", ImageKind::Object);
  ASSERT_TRUE(bool(O)) << toString(O.takeError());
  EXPECT_EQ(O->Members[0].Kind, ImageKind::Object);
  auto None = archiveForHost(A, "riscv64-unknown-linux-gnu", "");
  ASSERT_FALSE(bool(None));
  EXPECT_NE(toString(None.takeError()).find("no member for riscv64"),
            std::string::npos);
}

TEST(ArchiveHash, EveryFieldChangesTheHashButCompressionDoesNot) {
  Archive Base;
  Base.Name = "h";
  Base.Deps = {"liba.so"};
  Base.Members = {makeMember(Triples[0], "")};
  ArchiveHash H0 = computeHash(Base);
  auto Differs = [&](auto Mutate) {
    Archive C = Base;
    Mutate(C);
    return computeHash(C) != H0;
  };
  EXPECT_TRUE(Differs([](Archive &C) { C.Name = "g"; }));
  EXPECT_TRUE(Differs([](Archive &C) { C.Deps.push_back("libb.so"); }));
  EXPECT_TRUE(Differs([](Archive &C) { C.Deps.clear(); }));
  EXPECT_TRUE(Differs([](Archive &C) { C.Members[0].Triple = Triples[1]; }));
  EXPECT_TRUE(Differs([](Archive &C) { C.Members[0].CPU = "skylake"; }));
  EXPECT_TRUE(Differs([](Archive &C) { C.Members[0].Features = "+avx2"; }));
  EXPECT_TRUE(
      Differs([](Archive &C) { C.Members[0].Kind = ImageKind::Object; }));
  EXPECT_TRUE(Differs([](Archive &C) { C.Members[0].TheRole = Role::Source; }));
  EXPECT_TRUE(Differs([](Archive &C) { C.Members[0].Symbols = {"x"}; }));
  EXPECT_TRUE(Differs([](Archive &C) { C.Members[0].Image += "!"; }));
  // Field boundaries are length-prefixed: moving a byte between fields counts.
  EXPECT_TRUE(Differs([](Archive &C) {
    C.Name = "hl";
    C.Deps = {"iba.so"};
  }));
  EXPECT_FALSE(Differs(
      [](Archive &C) { C.Members[0].Compress = Compression::Zstd; }));
}

TEST(ArchiveSignature, SurvivesRewritesAndShippingButNotTampering) {
  llvm::Expected<SecretKey> K = generateKey();
  ASSERT_TRUE(!!K);
  llvm::Expected<SecretKey> Other = generateKey();
  ASSERT_TRUE(!!Other);
  Archive A;
  A.Name = "s";
  A.Members = {makeMember(Triples[1], ""), makeMember(Triples[0], ""),
               makeMember(Triples[0], "", ImageKind::Bitcode, Role::Source)};
  ASSERT_TRUE(!!writeArchive(A));
  ArchiveHash Unsigned = A.Hash;
  ASSERT_FALSE(llvm::errorToBool(signArchive(A, *K)));
  auto Bytes = writeArchive(A);
  ASSERT_TRUE(!!Bytes);
  EXPECT_EQ(A.Hash, Unsigned); // Signatures are not covered by the hash.
  llvm::Expected<Archive> R = read(*Bytes);
  ASSERT_TRUE(!!R) << llvm::toString(R.takeError());
  ASSERT_EQ(R->Signatures.size(), 1u);
  EXPECT_EQ(R->Signatures[0].Key, K->Public);
  EXPECT_FALSE(llvm::errorToBool(checkSignatures(*R, {K->Public})));

  // What a sender ships: the one member the target runs, the others as
  // digests (a thin copy), written again.
  Archive Shipped = thinArchive(*R, [](const Member &M) {
    return M.TheRole == Role::Target && M.Triple == Triples[0];
  });
  ASSERT_EQ(Shipped.Members.size(), 1u);
  ASSERT_EQ(Shipped.Signatures.size(), 1u);
  for (Member &M : Shipped.Members)
    M.Compress = Compression::ZstdDict;
  auto ShippedBytes = writeArchive(Shipped);
  ASSERT_TRUE(!!ShippedBytes);
  llvm::Expected<Archive> Target = read(*ShippedBytes);
  ASSERT_TRUE(!!Target);
  EXPECT_EQ(signedHash(*Target), signedHash(*R));
  EXPECT_FALSE(llvm::errorToBool(checkSignatures(*Target, {K->Public})));

  auto Reason = [](llvm::Error E) {
    int Why = -1;
    llvm::handleAllErrors(std::move(E), [&](const SignatureError &S) {
      Why = S.Why;
    });
    return Why;
  };
  EXPECT_EQ(Reason(checkSignatures(*Target, {Other->Public})),
            SignatureError::UntrustedKey);
  Archive Plain = *Target;
  Plain.Signatures.clear();
  EXPECT_EQ(Reason(checkSignatures(Plain, {K->Public})),
            SignatureError::Unsigned);
  // Other code with a recomputed hash and the copied signature.
  Archive Tampered = *Target;
  Tampered.Members[0].Image += "!";
  ASSERT_TRUE(!!writeArchive(Tampered));
  EXPECT_EQ(Reason(checkSignatures(Tampered, {K->Public})),
            SignatureError::DoesNotVerify);
  // Both keys trusted: one good signature is enough.
  ASSERT_FALSE(llvm::errorToBool(signArchive(*Target, *Other)));
  EXPECT_EQ(Target->Signatures.size(), 2u);
  EXPECT_FALSE(
      llvm::errorToBool(checkSignatures(*Target, {Other->Public, K->Public})));
}

TEST(ArchiveSignature, KeyFilesRoundTripAndRejectOtherText) {
  llvm::Expected<SecretKey> K = generateKey();
  ASSERT_TRUE(!!K);
  llvm::Expected<SecretKey> Again = parseSecretKey(formatSecretKey(*K));
  ASSERT_TRUE(!!Again);
  EXPECT_EQ(Again->Public, K->Public);
  llvm::Expected<PublicKey> P = parsePublicKey(formatPublicKey(K->Public));
  ASSERT_TRUE(!!P);
  EXPECT_EQ(*P, K->Public);
  EXPECT_EQ(keyId(K->Public).size(), 16u);
  for (const char *Bad :
       {"", "tc-ed25519-public-key", "tc-ed25519-public-key 00",
        "tc-ed25519-secret-key 0000000000000000000000000000000000000000000000"
        "000000000000000000"}) {
    llvm::Expected<PublicKey> E = parsePublicKey(Bad);
    EXPECT_FALSE(!!E) << Bad;
    if (!E)
      llvm::consumeError(E.takeError());
  }
  llvm::Expected<SecretKey> E = parseSecretKey(formatPublicKey(K->Public));
  EXPECT_FALSE(!!E);
  if (!E)
    llvm::consumeError(E.takeError());
  std::string M = signedMessage(ArchiveHash{});
  EXPECT_EQ(M.size(), 23u + 1u + 32u);
  EXPECT_EQ(M.substr(0, 24), std::string("tc-archive-signature-v1\0", 24));
}

TEST(ArchiveDictionary, IdIsSixteenHexDigitsAndListed) {
  llvm::StringRef Id = builtinDictionaryId();
  EXPECT_EQ(Id.size(), 16u);
  EXPECT_EQ(Id.find_first_not_of("0123456789abcdef"), llvm::StringRef::npos);
  EXPECT_GT(builtinDictionarySize(), 1000u);
  EXPECT_EQ(dictionaryIds(), std::vector<std::string>{Id.str()});
  EXPECT_TRUE(haveDictionary(Id));
  EXPECT_FALSE(haveDictionary("0123456789abcdef"));
}

TEST(ArchiveDictionary, ModulesAreTheDictionarysBitcodeFilesInOrder) {
  std::vector<DictionaryModule> Mods = builtinDictionaryModules();
  ASSERT_EQ(Mods.size(), 2u);
  EXPECT_EQ(Mods[0].Arch, "x86_64");
  EXPECT_EQ(Mods[1].Arch, "aarch64");
  size_t Total = 0;
  for (const DictionaryModule &M : Mods) {
    EXPECT_TRUE(M.Bitcode.starts_with("BC\xC0\xDE")) << M.Arch.str();
    Total += M.Bitcode.size();
  }
  EXPECT_EQ(Total, builtinDictionarySize());
  EXPECT_EQ(Mods[1].Bitcode.data(), Mods[0].Bitcode.end());
}

TEST(ArchiveDictionary, RoundTripRecordsTheIdAndKeepsTheHash) {
  Archive A;
  A.Name = "d";
  A.Members = {makeMember(Triples[1], ""), makeMember(Triples[0], "")};
  ArchiveHash Plain = computeHash(A); // In canonical order already.
  for (Member &M : A.Members)
    M.Compress = Compression::ZstdDict;
  auto Bytes = writeArchive(A);
  ASSERT_TRUE(!!Bytes) << llvm::toString(Bytes.takeError());
  EXPECT_EQ(A.Hash, Plain);
  llvm::Expected<Archive> R = read(*Bytes);
  ASSERT_TRUE(!!R) << llvm::toString(R.takeError());
  expectSameContents(A, *R);
  for (const Member &M : R->Members)
    EXPECT_EQ(M.DictId, builtinDictionaryId());
}

TEST(ArchiveDictionary, ARewriteStoresTheFramesItReadAgain) {
  Archive A;
  A.Name = "r";
  A.Members = {makeMember(Triples[0], ""), makeMember(Triples[1], "")};
  A.Members[0].Image += std::string(2000, 'a');
  A.Members[1].Image += std::string(2000, 'b');
  A.Members[0].Compress = Compression::ZstdDict;
  if (llvm::compression::zstd::isAvailable())
    A.Members[1].Compress = Compression::Zstd;
  auto Bytes = writeArchive(A);
  ASSERT_TRUE(!!Bytes);
  llvm::Expected<Archive> R = read(*Bytes);
  ASSERT_TRUE(!!R);
  auto StoredOf = [](llvm::StringRef Bytes, const Member &M) {
    return Bytes.substr(M.Layout.Offset + M.Layout.ImageOffset,
                        M.Layout.ImageSize)
        .str();
  };
  for (const Member &M : R->Members)
    if (M.Compress != Compression::None)
      EXPECT_EQ(M.Stored, StoredOf(*Bytes, M));
  // Canonical order put aarch64 (Triples[1]) first: the dictionary member
  // (Triples[0]) is member 1.
  const Member &Dict = R->Members[1];
  ASSERT_EQ(Dict.Compress, Compression::ZstdDict);
  // A thin copy, and one in format 2, carry the very frame read.
  for (unsigned Version : {3u, 2u}) {
    Archive Thin = thinArchive(
        *R, [](const Member &M) { return M.Triple == Triples[0]; });
    auto ThinBytes = writeArchive(Thin, Version);
    ASSERT_TRUE(!!ThinBytes);
    llvm::Expected<Archive> T = read(*ThinBytes);
    ASSERT_TRUE(!!T) << llvm::toString(T.takeError());
    EXPECT_EQ(StoredOf(*ThinBytes, T->Members[0]), StoredOf(*Bytes, Dict));
  }
  // A changed image, or other storage, is compressed anew: what is read
  // back is the changed member.
  Archive Changed = *R;
  Changed.Members[1].Image += "more";
  auto ChangedBytes = writeArchive(Changed);
  ASSERT_TRUE(!!ChangedBytes);
  llvm::Expected<Archive> C = read(*ChangedBytes);
  ASSERT_TRUE(!!C) << llvm::toString(C.takeError());
  EXPECT_EQ(C->Members[1].Image, Changed.Members[1].Image);
  Archive Plain = *R;
  withoutDictionaries(Plain, {});
  auto PlainBytes = writeArchive(Plain);
  ASSERT_TRUE(!!PlainBytes);
  llvm::Expected<Archive> P = read(*PlainBytes);
  ASSERT_TRUE(!!P) << llvm::toString(P.takeError());
  EXPECT_EQ(P->Members[1].Compress, Compression::None);
  EXPECT_EQ(P->Members[1].Image, Dict.Image);
}

TEST(ArchiveDictionary, UnknownIdIsATypedErrorNamingIt) {
  Archive A;
  A.Name = "d";
  A.Members = {makeMember(Triples[1], ""), makeMember(Triples[0], "")};
  A.Members[1].Compress = Compression::ZstdDict;
  auto Bytes = writeArchive(A);
  ASSERT_TRUE(!!Bytes);
  std::string Damaged = Bytes->str().str();
  size_t At = Damaged.find(builtinDictionaryId().str());
  ASSERT_NE(At, std::string::npos);
  Damaged.replace(At, 16, "0123456789abcdef");
  llvm::Expected<Archive> R = read(Damaged);
  ASSERT_FALSE(!!R);
  bool Typed = false;
  llvm::handleAllErrors(
      R.takeError(),
      [&](const MissingDictionaryError &E) {
        Typed = true;
        EXPECT_EQ(E.DictId, "0123456789abcdef");
        EXPECT_EQ(E.Where, "member 1");
      },
      [](const llvm::ErrorInfoBase &E) { ADD_FAILURE() << E.message(); });
  EXPECT_TRUE(Typed);
}

TEST(ArchiveDictionary, WithoutDictionariesStoresForThePeerAndKeepsTheHash) {
  Archive A;
  A.Name = "d";
  A.Members = {makeMember(Triples[1], ""), makeMember(Triples[0], ""),
               makeMember(Triples[0], "", ImageKind::Bitcode, Role::Source)};
  A.Members[0].Compress = Compression::ZstdDict;
  A.Members[1].Compress = Compression::ZstdDict;
  auto Bytes = writeArchive(A);
  ASSERT_TRUE(!!Bytes);
  llvm::Expected<Archive> R = read(*Bytes);
  ASSERT_TRUE(!!R);
  // A peer with the dictionary gets the archive as it is.
  Archive Same = *R;
  EXPECT_EQ(withoutDictionaries(Same, dictionaryIds()), 0u);
  // A peer without it: plain by default, or zstd without a dictionary.
  for (Compression Fallback : {Compression::None, Compression::Zstd}) {
    if (Fallback == Compression::Zstd &&
        !llvm::compression::zstd::isAvailable())
      continue;
    Archive Peer = *R;
    EXPECT_EQ(withoutDictionaries(Peer, {"0123456789abcdef"}, Fallback), 2u);
    auto Out = writeArchive(Peer);
    ASSERT_TRUE(!!Out);
    EXPECT_EQ(Out->str().find("tc.dict"), llvm::StringRef::npos);
    llvm::Expected<Archive> Again = read(*Out);
    ASSERT_TRUE(!!Again) << llvm::toString(Again.takeError());
    EXPECT_EQ(Again->Hash, R->Hash);
    EXPECT_EQ(Again->Members[0].Compress, Fallback);
    EXPECT_EQ(Again->Members[2].Compress, Compression::None);
  }
}

TEST(ArchiveDictionary, CheapestCompressionSkipsWhatDoesNotShrink) {
  // A few incompressible bytes: the keys would cost more than zstd saves.
  std::mt19937_64 Rng(3);
  std::string Noise = "BC\xc0\xde";
  for (int I = 0; I < 64; ++I)
    Noise += char(Rng());
  EXPECT_EQ(cheapestCompression(Noise), Compression::None);
  // Repetitive bytes shrink.
  EXPECT_EQ(cheapestCompression("BC\xc0\xde" + std::string(4096, 'x')),
            Compression::ZstdDict);
}

TEST(ArchiveReader, EveryTruncationIsAnErrorNotACrash) {
  std::mt19937_64 Rng(7);
  Archive A = randomArchive(Rng);
  auto Bytes = writeArchive(A);
  ASSERT_TRUE(!!Bytes);
  for (size_t Len = 0; Len < Bytes->size(); ++Len) {
    std::string Cut = Bytes->str().substr(0, Len).str();
    llvm::Expected<Archive> R = read(Cut);
    EXPECT_FALSE(!!R) << "prefix of " << Len << " bytes was accepted";
    if (!R)
      llvm::consumeError(R.takeError());
  }
}

TEST(ArchiveReader, EveryByteFlipIsRejected) {
  std::mt19937_64 Rng(11);
  Archive A;
  A.Name = "flip";
  A.Deps = {"libm.so.6"};
  A.Members = {makeMember(Triples[0], ""), makeMember(Triples[1], "a64fx")};
  A.Members[0].Symbols = {"printf", "sqrt"};
  auto Bytes = writeArchive(A);
  ASSERT_TRUE(!!Bytes);
  // The padding is zero and checked, so no byte of an archive can change
  // without the reader noticing: one archive, one byte form.
  for (size_t I = 0; I < Bytes->size(); ++I) {
    std::string Mut = Bytes->str().str();
    Mut[I] = char(Mut[I] ^ (1 + Rng() % 255));
    llvm::Expected<Archive> R = read(Mut);
    EXPECT_FALSE(!!R) << "a change of byte " << I << " was accepted";
    if (!R)
      llvm::consumeError(R.takeError());
  }
}

/// The archive offsets of every byte of \p Bytes that no structure of its
/// binaries describes (header, entry, string table, strings, image),
/// found from the raw bytes and the layouts as docs/archive-format.md
/// describes them, not by the reader's code.
std::vector<uint64_t> paddingOf(const Archive &A, llvm::StringRef Bytes) {
  std::vector<const BinaryLayout *> Ls = {&A.ManifestLayout};
  for (const Member &M : A.Members)
    Ls.push_back(&M.Layout);
  std::vector<uint64_t> Out;
  for (const BinaryLayout *L : Ls) {
    std::vector<bool> Used(L->Size, false);
    auto Mark = [&](uint64_t Begin, uint64_t End) {
      for (uint64_t I = Begin; I < End; ++I)
        Used[I] = true;
    };
    Mark(0, 32);
    Mark(L->EntryOffset, L->EntryOffset + 40);
    Mark(L->StringOffset, L->StringOffset + 16 * L->NumStrings);
    Mark(L->ImageOffset, L->ImageOffset + L->ImageSize);
    for (uint64_t I = 0; I < 2 * L->NumStrings; ++I) {
      uint64_t At = llvm::support::endian::read64le(
          Bytes.data() + L->Offset + L->StringOffset + 8 * I);
      Mark(At, Bytes.find('\0', L->Offset + At) - L->Offset + 1);
    }
    for (uint64_t I = 0; I < L->Size; ++I)
      if (!Used[I])
        Out.push_back(L->Offset + I);
  }
  return Out;
}

TEST(ArchiveReader, PaddingIsZeroAndEveryChangeToItIsRefused) {
  if (!llvm::compression::zstd::isAvailable())
    GTEST_SKIP() << "LLVM without zstd";
  llvm::Expected<SecretKey> K = generateKey();
  ASSERT_TRUE(!!K);
  Archive A;
  A.Name = "pad";
  A.Deps = {"libm.so.6"};
  A.Members = {makeMember(Triples[0], ""), makeMember(Triples[1], "a64fx"),
               makeMember(Triples[0], "", ImageKind::Object, Role::Source)};
  A.Members[0].Symbols = {"sqrt"};
  A.Members[0].Image += "odd length";
  A.Members[1].Compress = Compression::Zstd;
  A.Members[2].Compress = Compression::ZstdDict;
  ASSERT_TRUE(!!writeArchive(A));
  ASSERT_FALSE(llvm::errorToBool(signArchive(A, *K)));
  // The whole archive, and a thin copy (omitted digests in the manifest).
  for (bool Thin : {false, true}) {
    SCOPED_TRACE(Thin ? "thin copy" : "whole archive");
    Archive W = Thin ? thinArchive(A, [](const Member &M) {
                         return M.TheRole == Role::Target && M.CPU.empty();
                       })
                     : A;
    auto Bytes = writeArchive(W);
    ASSERT_TRUE(!!Bytes);
    llvm::Expected<Archive> R = read(*Bytes);
    ASSERT_TRUE(!!R) << llvm::toString(R.takeError());
    std::vector<uint64_t> Pad = paddingOf(*R, *Bytes);
    bool BeforeImage = false, AfterImage = false;
    for (uint64_t At : Pad) {
      ASSERT_EQ((*Bytes)[At], 0) << "the writer wrote padding byte " << At;
      std::string Mut = Bytes->str().str();
      uint8_t Bit = uint8_t(1u << (At % 8));
      Mut[At] = char(Bit);
      const BinaryLayout *L = &R->ManifestLayout;
      std::string Where = "manifest";
      for (size_t I = 0; I < R->Members.size(); ++I)
        if (At >= R->Members[I].Layout.Offset)
          L = &R->Members[I].Layout, Where = "member " + std::to_string(I);
      BeforeImage |= At < L->Offset + L->ImageOffset;
      AfterImage |= At >= L->Offset + L->ImageOffset + L->ImageSize;
      char Hex[8];
      std::snprintf(Hex, sizeof Hex, "0x%02x", Bit);
      EXPECT_EQ(errorOf(read(Mut)),
                Where + " at offset " + std::to_string(L->Offset) +
                    ": padding byte at offset " +
                    std::to_string(At - L->Offset) + " (archive offset " +
                    std::to_string(At) + ") is " + Hex +
                    "; padding must be zero");
    }
    // Both kinds were tried: between strings and image, and after an image.
    EXPECT_TRUE(BeforeImage);
    EXPECT_TRUE(AfterImage);
  }
}

TEST(ArchiveReader, SpecificDefectsGiveSpecificMessages) {
  Archive A;
  A.Name = "d";
  A.Members = {makeMember(Triples[0], "")};
  auto Bytes = writeArchive(A);
  ASSERT_TRUE(!!Bytes);
  std::string Good = Bytes->str().str();

  EXPECT_EQ(errorOf(read("")), "empty file: not a tc archive");
  std::string BadMagic = Good;
  BadMagic[0] = 0x7f;
  EXPECT_NE(errorOf(read(BadMagic)).find("bad magic 7fff10ad"),
            std::string::npos);
  std::string BadVersion = Good;
  llvm::support::endian::write32le(&BadVersion[4], 2);
  EXPECT_NE(errorOf(read(BadVersion)).find("unsupported offload binary "
                                           "version 2"),
            std::string::npos);
  // A huge string count must be refused before anything is allocated.
  std::string Absurd = Good;
  llvm::support::endian::write64le(&Absurd[32 + 16], ~uint64_t(0) / 2);
  EXPECT_NE(errorOf(read(Absurd)).find("string count"), std::string::npos);
  // An offset that wraps around 2^64 must not pass the bounds check.
  std::string Wrap = Good;
  llvm::support::endian::write64le(&Wrap[32 + 24], ~uint64_t(0) - 3);
  llvm::support::endian::write64le(&Wrap[32 + 32], 8);
  EXPECT_NE(errorOf(read(Wrap)).find("ends past the end"), std::string::npos);
}

TEST(ArchiveReader, DecompressionBombIsRefused) {
  if (!llvm::compression::zstd::isAvailable())
    GTEST_SKIP() << "LLVM without zstd";
  Archive A;
  A.Name = "bomb";
  A.Members = {makeMember(Triples[0], "")};
  A.Members[0].Image += std::string(1 << 20, 'x');
  A.Members[0].Compress = Compression::Zstd;
  // The size comes from tc.size (version 2) or from the frame (3).
  for (unsigned Version : {2u, 3u}) {
    auto Bytes = writeArchive(A, Version);
    ASSERT_TRUE(!!Bytes);
    EXPECT_LT(Bytes->size(), 4096u);
    ReadOptions O;
    O.MaxImageSize = 4096;
    llvm::Expected<Archive> R =
        readArchive(llvm::MemoryBufferRef(*Bytes, "b"), O);
    std::string E = errorOf(std::move(R));
    EXPECT_NE(E.find("exceeds the limit of 4096 bytes"), std::string::npos)
        << E;
  }
}

TEST(ArchiveReader, Version3CompressedImageIsOneFrameThatStatesItsSize) {
  if (!llvm::compression::zstd::isAvailable())
    GTEST_SKIP() << "LLVM without zstd";
  Archive A;
  A.Name = "f";
  A.Members = {makeMember(Triples[0], "")};
  A.Members[0].Image += std::string(3000, 'y');
  A.Members[0].Compress = Compression::Zstd;
  auto Bytes = writeArchive(A);
  ASSERT_TRUE(!!Bytes);
  llvm::Expected<Archive> R = read(*Bytes);
  ASSERT_TRUE(!!R);
  const BinaryLayout &L = R->Members[0].Layout;
  uint64_t Image = L.Offset + L.ImageOffset, SizeField = L.Offset +
                                                         L.EntryOffset + 32;
  std::string Good = Bytes->str().str();
  // The same image, as a frame without its content size.
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx *)> C(ZSTD_createCCtx(),
                                                         ZSTD_freeCCtx);
  ASSERT_FALSE(ZSTD_isError(
      ZSTD_CCtx_setParameter(C.get(), ZSTD_c_contentSizeFlag, 0)));
  ASSERT_FALSE(ZSTD_isError(ZSTD_CCtx_setParameter(
      C.get(), ZSTD_c_compressionLevel, ZSTD_maxCLevel())));
  std::string Frame(L.ImageSize + 64, '\0');
  size_t N = ZSTD_compress2(C.get(), Frame.data(), Frame.size(),
                            A.Members[0].Image.data(),
                            A.Members[0].Image.size());
  ASSERT_FALSE(ZSTD_isError(N));
  ASSERT_LE(N, L.ImageSize);
  std::string NoSize = Good;
  NoSize.replace(Image, N, Frame.substr(0, N));
  std::fill_n(&NoSize[Image + N], L.ImageSize - N, '\0'); // Zero padding.
  llvm::support::endian::write64le(&NoSize[SizeField], N);
  EXPECT_EQ(errorOf(read(NoSize)),
            "member 0: the zstd frame does not state its content size");
  // A frame cut short.
  std::string Cut = Good;
  llvm::support::endian::write64le(&Cut[SizeField], L.ImageSize - 1);
  Cut[Image + L.ImageSize - 1] = '\0'; // Now padding, which must be zero.
  EXPECT_NE(errorOf(read(Cut)).find("member 0: stored image of " +
                                    std::to_string(L.ImageSize - 1) +
                                    " bytes is not one whole zstd frame"),
            std::string::npos);
  // Not a frame at all.
  std::string Junk = Good;
  Junk[Image] ^= 0xff;
  EXPECT_EQ(errorOf(read(Junk)), "member 0: stored image is not a zstd frame");
}

TEST(ArchiveValidate, NamesDepsAndMembers) {
  Archive A;
  A.Members = {makeMember(Triples[0], "")};
  A.Name = std::string(10000, 'n'); // any length
  EXPECT_FALSE(!!validateArchive(A).operator bool());
  A.Name = "9lives";
  EXPECT_NE(llvm::toString(validateArchive(A)).find("not a C identifier"),
            std::string::npos);
  A.Name = "ok";
  A.Deps = {"libm.so", "libm.so"};
  EXPECT_NE(llvm::toString(validateArchive(A)).find("listed twice"),
            std::string::npos);
  A.Deps = {};
  A.Members.push_back(makeMember(Triples[0], ""));
  EXPECT_NE(llvm::toString(validateArchive(A)).find("duplicates member 0"),
            std::string::npos);
  A.Members = {makeMember(Triples[0], ""), makeMember(Triples[1], "")};
  EXPECT_NE(llvm::toString(validateArchive(A)).find("out of canonical order"),
            std::string::npos);
  A.Members = {makeMember("x86_64-linux-gnu", "")};
  EXPECT_NE(llvm::toString(validateArchive(A)).find("not normalized"),
            std::string::npos);
  A.Members = {makeMember(Triples[0], "")};
  A.Members[0].Image = "not bitcode";
  EXPECT_NE(llvm::toString(validateArchive(A)).find("image is not LLVM "
                                                    "bitcode"),
            std::string::npos);
  A.Members.clear();
  EXPECT_NE(llvm::toString(validateArchive(A)).find("no members"),
            std::string::npos);
}

TEST(DepsList, LinesCommentsAndAFinalLineWithoutNewline) {
  auto D = parseDepsList("libm.so.6\n# comment\n\n  libz.so.1  \r\nlibc.so.6");
  ASSERT_TRUE(!!D);
  EXPECT_EQ(*D, (std::vector<std::string>{"libm.so.6", "libz.so.1",
                                          "libc.so.6"}));
  auto E = parseDepsList("");
  ASSERT_TRUE(!!E);
  EXPECT_TRUE(E->empty());
}

} // namespace
