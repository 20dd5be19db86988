//===- FrameTest.cpp - Wire frame encode/decode and defects ---------------===//

#include "transport/Batch.h"
#include "protocol/Frame.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Endian.h"

#include "gtest/gtest.h"

#include <random>

using namespace tc;

namespace {

std::string err(llvm::Expected<Frame> F) {
  if (F)
    return "<no error>";
  return llvm::toString(F.takeError());
}

Frame invoke(llvm::StringRef Payload) {
  Frame F;
  F.Type = FrameType::Invoke;
  F.Seq = 7;
  F.CodeId = 3;
  F.Payload = Payload;
  return F;
}

TEST(Frame, CachedInvokeIsHeaderPlusPayload) {
  std::string B = encodeFrame(invoke("x"));
  EXPECT_EQ(B.size(), FrameHeaderSize + 1);
  EXPECT_EQ(B.substr(0, 4), std::string("tc\x01\x01", 4));
  auto F = decodeFrame(B);
  ASSERT_TRUE(!!F) << llvm::toString(F.takeError());
  EXPECT_EQ(F->Type, FrameType::Invoke);
  EXPECT_EQ(F->Seq, 7u);
  EXPECT_EQ(F->CodeId, 3u);
  EXPECT_EQ(F->Payload, "x");
  EXPECT_TRUE(F->Archive.empty());
}

TEST(Frame, RandomizedRoundTripOfEveryType) {
  std::mt19937_64 Rng(5);
  for (int I = 0; I < 2000; ++I) {
    Frame F;
    F.Type = FrameType(1 + Rng() % 9);
    F.Seq = uint32_t(Rng());
    F.CodeId = uint32_t(Rng());
    std::string Payload(Rng() % 300, char(Rng()));
    std::string Archive(1 + Rng() % 300, char(Rng()));
    std::string Msg(Rng() % 100, 'm');
    for (auto &B : F.Hash)
      B = uint8_t(Rng());
    bool WithCode = F.Type == FrameType::Code ||
                    (F.Type == FrameType::Invoke && Rng() % 2);
    if (F.Type == FrameType::LocalInvoke)
      F.Payload = Payload;
    if (F.Type == FrameType::Invoke) {
      F.Payload = Payload;
      F.Flags = WithCode ? FrameHasCode : 0;
    }
    if (WithCode)
      F.Archive = Archive;
    else
      F.Hash = {};
    if (F.Type == FrameType::Error) {
      F.Status = WireStatus(1 + Rng() % 12);
      F.Message = Msg;
    }
    if (F.Type == FrameType::RegionRead)
      F.Length = Rng();
    if (F.Type == FrameType::RegionData)
      F.Data = Payload;
    std::string B = encodeFrame(F);
    auto D = decodeFrame(B);
    ASSERT_TRUE(!!D) << llvm::toString(D.takeError());
    EXPECT_EQ(D->Type, F.Type);
    EXPECT_EQ(D->Seq, F.Seq);
    EXPECT_EQ(D->CodeId, F.CodeId);
    EXPECT_EQ(D->Flags, F.Flags);
    EXPECT_EQ(D->Hash, F.Hash);
    EXPECT_EQ(D->Payload, F.Payload);
    EXPECT_EQ(D->Archive, F.Archive);
    EXPECT_EQ(D->Message, F.Message);
    EXPECT_EQ(D->Length, F.Length);
    EXPECT_EQ(D->Data, F.Data);
    if (F.Type == FrameType::Error)
      EXPECT_EQ(D->Status, F.Status);
    EXPECT_EQ(encodeFrame(*D), B);
    // The header/body split an active message gives decodes the same.
    std::string H;
    encodeFrameHeader(F, H);
    auto S = decodeFrame(H, llvm::StringRef(B).drop_front(H.size()));
    ASSERT_TRUE(!!S);
    EXPECT_EQ(encodeFrame(*S), B);
  }
}

/// decodeSmallInvoke's promise: whatever it accepts, decodeFrame accepts
/// with the same fields.
void expectFastAgrees(llvm::StringRef H, llvm::StringRef Body) {
  SmallInvoke I;
  if (!decodeSmallInvoke(H, Body, I))
    return;
  auto D = decodeFrame(H, Body);
  ASSERT_TRUE(!!D) << "fast path accepted what decodeFrame rejects: "
                   << llvm::toString(D.takeError());
  EXPECT_EQ(D->Type, I.Type);
  EXPECT_EQ(D->Seq, I.Seq);
  EXPECT_EQ(D->CodeId, I.CodeId);
  EXPECT_EQ(D->Flags, 0u);
  EXPECT_EQ(D->Payload, Body);
  EXPECT_TRUE(D->Archive.empty());
}

TEST(Frame, SmallInvokeFastPathsMatchTheGeneralCodec) {
  std::mt19937_64 Rng(11);
  unsigned Accepted = 0;
  for (int I = 0; I < 4000; ++I) {
    SmallInvoke S{Rng() % 2 ? FrameType::Invoke : FrameType::LocalInvoke,
                  uint32_t(Rng()), uint32_t(Rng())};
    std::string Payload(Rng() % 200, char(Rng()));
    char H[FrameHeaderSize];
    encodeSmallInvoke(S, Payload.size(), H);
    // The same header as the general encoder's.
    Frame F;
    F.Type = S.Type;
    F.Seq = S.Seq;
    F.CodeId = S.CodeId;
    F.Payload = Payload;
    std::string General;
    encodeFrameHeader(F, General);
    ASSERT_EQ(General, std::string(H, FrameHeaderSize));
    // Accepted as is, with the same fields.
    SmallInvoke Got;
    ASSERT_TRUE(decodeSmallInvoke(llvm::StringRef(H, FrameHeaderSize),
                                  Payload, Got));
    EXPECT_EQ(Got.Type, S.Type);
    EXPECT_EQ(Got.Seq, S.Seq);
    EXPECT_EQ(Got.CodeId, S.CodeId);
    // Damaged: one random byte of the header changed, or a body of another
    // length. Whatever the fast path still accepts, decodeFrame must too.
    std::string Bad(H, FrameHeaderSize);
    Bad[Rng() % Bad.size()] = char(Rng());
    std::string Body = Payload;
    if (Rng() % 4 == 0)
      Body.resize(Rng() % 200);
    expectFastAgrees(Bad, Body);
    Accepted += decodeSmallInvoke(Bad, Body, Got);
  }
  // Not vacuous: damage to Seq/CodeId keeps frames valid and accepted.
  EXPECT_GT(Accepted, 100u);
  // Frames that are not SmallInvokes go to the general decoder.
  Frame Code = invoke("p");
  Code.Flags = FrameHasCode;
  Code.Archive = "archive";
  std::string H;
  encodeFrameHeader(Code, H);
  SmallInvoke Got;
  EXPECT_FALSE(decodeSmallInvoke(H, "parchive", Got));
  Frame Fence;
  Fence.Type = FrameType::Fence;
  encodeFrameHeader(Fence, H);
  EXPECT_FALSE(decodeSmallInvoke(H, "", Got));
}

//===----------------------------------------------------------------------===//
// Compact frames (wire version 2)
//===----------------------------------------------------------------------===//

TEST(Frame, CachedTsiIsACompactFrameOfThreeHeaderBytes) {
  // The bound: a cached TSI frame's header is at most 8 bytes.
  char H[CompactHeaderMax];
  size_t N = encodeCompactInvoke(SmallInvoke{FrameType::Invoke, 99, 1}, 1, H);
  EXPECT_EQ(std::string(H, N), std::string("\x81\x01\x01", 3));
  std::string Wire = std::string(H, N) + "x"; // The frame refers into it.
  auto F = decodeFrame(Wire);
  ASSERT_TRUE(!!F) << llvm::toString(F.takeError());
  EXPECT_TRUE(F->Compact);
  EXPECT_EQ(F->Type, FrameType::Invoke);
  EXPECT_EQ(F->CodeId, 1u);
  EXPECT_EQ(F->Seq, 0u); // Not on the wire: the receiver counts it.
  EXPECT_EQ(F->Payload, "x");
  // A local invoke: the 32-bit id as a 5-byte varint.
  N = encodeCompactInvoke(
      SmallInvoke{FrameType::LocalInvoke, 0, 0xffffffffu}, 300, H);
  EXPECT_EQ(std::string(H, N),
            std::string("\x89\xff\xff\xff\xff\x0f\xac\x02", 8));
}

TEST(Frame, CompactFastPathMatchesTheGeneralCodec) {
  std::mt19937_64 Rng(17);
  unsigned Accepted = 0;
  for (int I = 0; I < 4000; ++I) {
    // Ids and sizes of every varint length.
    uint32_t Id = uint32_t(Rng() >> (Rng() % 64));
    SmallInvoke S{Rng() % 2 ? FrameType::Invoke : FrameType::LocalInvoke, 0,
                  Id};
    std::string Payload(Rng() % 2 ? Rng() % 4 : Rng() % 300, char(Rng()));
    char H[CompactHeaderMax];
    size_t N = encodeCompactInvoke(S, Payload.size(), H);
    ASSERT_LE(N, CompactHeaderMax);
    // The general encoder writes the same header for the decoded frame.
    auto F = decodeFrame(llvm::StringRef(H, N), Payload);
    ASSERT_TRUE(!!F) << llvm::toString(F.takeError());
    EXPECT_EQ(F->CodeId, Id);
    EXPECT_EQ(F->Type, S.Type);
    std::string General;
    encodeFrameHeader(*F, General);
    ASSERT_EQ(General, std::string(H, N));
    SmallInvoke Got;
    ASSERT_TRUE(decodeCompactInvoke(llvm::StringRef(H, N), Payload, Got));
    EXPECT_EQ(Got.CodeId, Id);
    EXPECT_EQ(Got.Type, S.Type);
    // Damaged: a random byte changed, a byte cut or added, or a body of
    // another length. Whatever the fast path accepts, decodeFrame accepts
    // with the same fields, and it re-encodes to the same bytes.
    std::string Bad(H, N);
    switch (Rng() % 3) {
    case 0:
      Bad[Rng() % Bad.size()] = char(Rng());
      break;
    case 1:
      Bad.pop_back();
      break;
    default:
      Bad.push_back(char(Rng()));
    }
    std::string Body = Payload;
    if (Rng() % 4 == 0)
      Body.resize(Rng() % 300);
    if (decodeCompactInvoke(Bad, Body, Got)) {
      ++Accepted;
      auto D = decodeFrame(Bad, Body);
      ASSERT_TRUE(!!D) << "fast path accepted what decodeFrame rejects: "
                       << llvm::toString(D.takeError());
      EXPECT_EQ(D->Type, Got.Type);
      EXPECT_EQ(D->CodeId, Got.CodeId);
      EXPECT_EQ(encodeFrame(*D), Bad + Body);
    } else {
      auto D = decodeFrame(Bad, Body);
      EXPECT_FALSE(!!D) << "fast path refused a valid frame";
      if (!D)
        llvm::consumeError(D.takeError());
    }
  }
  EXPECT_GT(Accepted, 100u); // Damage to the code id keeps frames valid.
}

TEST(Frame, MalformedCompactFramesAreRefused) {
  auto Err = [](llvm::StringRef Bytes) { return err(decodeFrame(Bytes)); };
  EXPECT_EQ(Err("\x84\x01\x00"),
            "malformed frame: compact frame of type 4 (only 1 and 9 are)");
  // Varints: cut short, too long, not minimal, over 32 bits for the id.
  EXPECT_EQ(Err("\x81\x81"),
            "malformed frame: compact frame: bad code id varint");
  EXPECT_EQ(Err("\x81\x80\x80\x80\x80\x80\x01\x00"),
            "malformed frame: compact frame: bad code id varint");
  EXPECT_EQ(Err("\x81\x81\x00\x00"),
            "malformed frame: compact frame: bad code id varint");
  EXPECT_EQ(Err("\x81\x80\x80\x80\x80\x10\x00"),
            "malformed frame: compact frame: bad code id varint");
  EXPECT_EQ(Err("\x81\x01"),
            "malformed frame: compact frame: bad payload size varint");
  EXPECT_EQ(Err(llvm::StringRef("\x81\x01\xff\xff\xff\xff\xff\xff\xff"
                                "\xff\xff\x02", 12)),
            "malformed frame: compact frame: bad payload size varint");
  // The size must be the body's.
  EXPECT_EQ(Err("\x81\x01\x02x"),
            "malformed frame: body is 1 bytes, compact header says otherwise");
  EXPECT_EQ(err(decodeFrame("\x81\x01\x01", "")),
            "malformed frame: body is 0 bytes, compact header says otherwise");
  EXPECT_TRUE(isCompactHeader("\x81"));
  EXPECT_FALSE(isCompactHeader("tc"));
  EXPECT_FALSE(isCompactHeader(""));
}

TEST(Frame, EveryTruncationAndExtensionIsRejected) {
  Frame F = invoke("payload");
  F.Flags = FrameHasCode;
  F.Archive = "archive-bytes";
  std::string B = encodeFrame(F);
  for (size_t Len = 0; Len < B.size(); ++Len) {
    auto D = decodeFrame(llvm::StringRef(B).take_front(Len));
    EXPECT_FALSE(!!D) << Len;
    if (!D)
      llvm::consumeError(D.takeError());
  }
  EXPECT_NE(err(decodeFrame(B + "!")).find("body is"), std::string::npos);
}

TEST(Frame, DefectsHaveSpecificMessages) {
  std::string B = encodeFrame(invoke("x"));
  std::string M = B;
  M[0] = 'X';
  EXPECT_EQ(err(decodeFrame(M)),
            "malformed frame: bad magic 5863 (expected 7463)");
  M = B;
  M[2] = 9;
  EXPECT_EQ(err(decodeFrame(M)),
            "unsupported frame version 9 (this runtime speaks 1)");
  M = B;
  M[3] = 42;
  EXPECT_EQ(err(decodeFrame(M)), "malformed frame: unknown frame type 42");
  M = B;
  llvm::support::endian::write32le(&M[12], 0x80);
  EXPECT_EQ(err(decodeFrame(M)), "malformed frame: unknown invoke flags 0x80");
  // A payload size near 2^64 must not wrap the body check.
  M = B;
  llvm::support::endian::write64le(&M[16], ~uint64_t(0));
  EXPECT_EQ(err(decodeFrame(M)),
            "malformed frame: body is 1 bytes, header says "
            "18446744073709551615 + 0");
  EXPECT_EQ(err(decodeFrame("tc")),
            "malformed frame: 2 header bytes, need 24");
  Frame E;
  E.Type = FrameType::Error;
  E.Status = WireStatus::MissingSymbol;
  E.Message = "x";
  M = encodeFrame(E);
  llvm::support::endian::write32le(&M[12], 77);
  EXPECT_EQ(err(decodeFrame(M)), "malformed frame: unknown error status 77");
  // The last status there is decodes; the one after it does not.
  llvm::support::endian::write32le(&M[12], 13);
  llvm::Expected<Frame> Trap = decodeFrame(M);
  ASSERT_TRUE(!!Trap) << llvm::toString(Trap.takeError());
  EXPECT_EQ(Trap->Status, WireStatus::SandboxTrap);
  EXPECT_EQ(wireStatusName(Trap->Status), "sandbox trap");
  llvm::support::endian::write32le(&M[12], 14);
  llvm::Expected<Frame> Fault = decodeFrame(M);
  ASSERT_TRUE(!!Fault) << llvm::toString(Fault.takeError());
  EXPECT_EQ(Fault->Status, WireStatus::DeviceFault);
  EXPECT_EQ(wireStatusName(Fault->Status), "device fault");
  llvm::support::endian::write32le(&M[12], 15);
  EXPECT_EQ(err(decodeFrame(M)), "malformed frame: unknown error status 15");
  Frame Fence;
  Fence.Type = FrameType::Fence;
  M = encodeFrame(Fence);
  llvm::support::endian::write32le(&M[12], 1);
  EXPECT_EQ(err(decodeFrame(M)), "malformed frame: 5 frame with non-zero "
                                 "fields");
}

} // namespace

namespace {

TEST(Batch, RecordsSplitBackInOrder) {
  llvm::SmallString<0> B; // The transport's ByteBuffer is a SmallVector too.
  tc::appendBatchRecord(B, "h1", "body one");
  tc::appendBatchRecord(B, "", "");
  tc::appendBatchRecord(B, std::string(24, 'x'), std::string(1000, 'y'));
  std::vector<std::pair<std::string, std::string>> Got;
  llvm::Expected<size_t> N =
      tc::splitBatch(B, [&](llvm::StringRef H, llvm::StringRef Body) {
        Got.emplace_back(H.str(), Body.str());
        return true;
      });
  ASSERT_TRUE(!!N) << llvm::toString(N.takeError());
  EXPECT_EQ(*N, 3u);
  ASSERT_EQ(Got.size(), 3u);
  EXPECT_EQ(Got[0], std::make_pair(std::string("h1"), std::string("body one")));
  EXPECT_EQ(Got[1], std::make_pair(std::string(), std::string()));
  EXPECT_EQ(Got[2].first, std::string(24, 'x'));
  EXPECT_EQ(Got[2].second, std::string(1000, 'y'));
  // The callback can stop the walk.
  size_t Calls = 0;
  N = tc::splitBatch(B, [&](llvm::StringRef, llvm::StringRef) {
    return ++Calls < 2;
  });
  ASSERT_TRUE(!!N);
  EXPECT_EQ(*N, 2u);
}

TEST(Batch, MoveBufferHandsOverTheBufferOfAnEmptyVector) {
  // UcxTransport keeps emptied batch buffers for the next batches: the
  // buffer must move with an empty vector (SmallVector<T, 0>'s own move
  // leaves it behind).
  tc::ByteBuffer From, To;
  From.reserve(8192);
  const char *Buffer = From.data();
  tc::moveBuffer(To, From);
  EXPECT_EQ(To.data(), Buffer);
  EXPECT_GE(To.capacity(), 8192u);
  EXPECT_LT(From.capacity(), 8192u);
  // With bytes in it, too.
  tc::appendBatchRecord(To, "h", "b");
  tc::moveBuffer(From, To);
  EXPECT_EQ(From.data(), Buffer);
  EXPECT_EQ(llvm::StringRef(From.data(), From.size()).take_back(2), "hb");
  EXPECT_TRUE(To.empty());
}

TEST(Batch, DefectsStopTheWalkWithAnError) {
  llvm::SmallString<0> Record;
  tc::appendBatchRecord(Record, "hdr", "body");
  std::string Good = Record.str().str();
  struct Case {
    const char *What;
    std::string Bytes;
    const char *Error;
  } Cases[] = {
      {"sizes cut short", Good + std::string(5, '\0'), "too few for its sizes"},
      {"frame cut short", Good.substr(0, Good.size() - 1), "only 6 left"},
      {"sizes past the end", Good + std::string("\xff\xff\xff\xff\0\0\0\0", 8),
       "only 0 left"},
      {"sizes that overflow 32 bits together",
       Good + std::string("\xff\xff\xff\xff\xff\xff\xff\xff", 8),
       "only 0 left"},
  };
  for (const Case &C : Cases) {
    SCOPED_TRACE(C.What);
    size_t Delivered = 0;
    llvm::Expected<size_t> N =
        tc::splitBatch(C.Bytes, [&](llvm::StringRef, llvm::StringRef) {
          ++Delivered;
          return true;
        });
    ASSERT_FALSE(!!N);
    std::string Msg = llvm::toString(N.takeError());
    EXPECT_NE(Msg.find(C.Error), std::string::npos) << Msg;
    // Only whole records before the defect were handed out.
    EXPECT_EQ(Delivered, C.Bytes.size() > Good.size() ? 1u : 0u);
  }
}

} // namespace

TEST(Hello, CapabilitiesRoundTripAndUnknownKeysAreSkipped) {
  Capabilities C;
  C.TcVersion = "0.1.0";
  C.LlvmVersion = "22.1.8";
  C.Triple = "aarch64-unknown-linux-gnu";
  C.CPU = "neoverse-n1";
  C.Features = "+neon,-sve";
  C.RunsObjects = false;
  C.Dictionaries = {"171b79263ac969a0", "00ff"};
  std::string B = encodeCapabilities(C);
  auto D = decodeCapabilities(B);
  ASSERT_TRUE(!!D) << llvm::toString(D.takeError());
  EXPECT_EQ(encodeCapabilities(*D), B);
  EXPECT_EQ(D->ArchiveMin, OldestArchiveVersion);
  EXPECT_EQ(D->ArchiveMax, ArchiveVersion);
  // Without the archive record (the last, 5 bytes: key 9, length 2, low,
  // high), as from a tc before format 3: it reads format 2 only.
  ASSERT_EQ(B.substr(B.size() - 5, 3), std::string("\x09\x02\x00", 3));
  auto Before = decodeCapabilities(B.substr(0, B.size() - 5));
  ASSERT_TRUE(!!Before) << llvm::toString(Before.takeError());
  EXPECT_EQ(Before->ArchiveMin, 2u);
  EXPECT_EQ(Before->ArchiveMax, 2u);
  EXPECT_EQ(describeCapabilities(*D),
            "aarch64-unknown-linux-gnu cpu=neoverse-n1 (tc 0.1.0, LLVM "
            "22.1.8, wire 1-3, bitcode only)");
  // A newer peer's key 200 is skipped; the rest still reads.
  std::string Newer = B + std::string("\xc8\x02\x00xy", 5);
  auto N = decodeCapabilities(Newer);
  ASSERT_TRUE(!!N) << llvm::toString(N.takeError());
  EXPECT_EQ(N->Triple, C.Triple);
  // As a frame: header version 1, seq and code id 0, body = the record.
  Frame F;
  F.Type = FrameType::Hello;
  F.Data = B;
  std::string Bytes = encodeFrame(F);
  auto G = decodeFrame(Bytes);
  ASSERT_TRUE(!!G) << llvm::toString(G.takeError());
  EXPECT_EQ(G->Type, FrameType::Hello);
  EXPECT_EQ(G->Data, B);
}

TEST(Hello, MalformedCapabilityRecordsAreRefused) {
  Capabilities C;
  C.Triple = "x86_64-unknown-linux-gnu";
  std::string B = encodeCapabilities(C);
  auto Refused = [](llvm::StringRef Bytes, llvm::StringRef Want) {
    auto D = decodeCapabilities(Bytes);
    if (D)
      return testing::AssertionFailure() << "accepted";
    std::string Msg = llvm::toString(D.takeError());
    if (Msg.find(Want.str()) == std::string::npos)
      return testing::AssertionFailure() << Msg;
    return testing::AssertionSuccess();
  };
  EXPECT_TRUE(Refused("", "empty capability record"));
  EXPECT_TRUE(Refused(std::string("\x02", 1) + B.substr(1),
                      "capability record version 2"));
  // Every cut but the one before the last, optional record (archive
  // versions, 5 bytes) leaves a record cut short or a required one out.
  for (size_t Cut = 2; Cut < B.size(); ++Cut)
    if (Cut != B.size() - 5)
      EXPECT_TRUE(Refused(B.substr(0, Cut), "malformed hello")) << Cut;
  // Archive versions low > high, or 0.
  for (const char *V : {"\x03\x02", "\x00\x03"}) {
    std::string Arch = B;
    Arch.replace(B.size() - 2, 2, V, 2);
    EXPECT_TRUE(Refused(Arch, "archive versions")) << int(V[0]);
  }
  // The wire record again after the others: keys must ascend.
  EXPECT_TRUE(Refused(B + std::string("\x01\x02\x00\x01\x01", 5),
                      "keys ascend"));
  // No triple.
  std::string NoTriple(1, '\x01');
  NoTriple += std::string("\x01\x02\x00\x01\x01\x07\x01\x00\x01", 9);
  EXPECT_TRUE(Refused(NoTriple, "triple"));
  // Wire versions low > high.
  std::string Bad = B;
  Bad[4] = 2;
  Bad[5] = 1;
  EXPECT_TRUE(Refused(Bad, "wire versions"));
  // A Hello frame with a sequence number is malformed.
  Frame F;
  F.Type = FrameType::Hello;
  F.Data = B;
  std::string Bytes = encodeFrame(F);
  Bytes[4] = 1;
  auto G = decodeFrame(Bytes);
  ASSERT_FALSE(!!G);
  EXPECT_NE(llvm::toString(G.takeError()).find("hello with non-zero seq"),
            std::string::npos);
}

namespace {
Capabilities gpuTarget() {
  Capabilities C;
  C.TcVersion = "0.1.0";
  C.LlvmVersion = "22.1.8";
  C.Triple = "x86_64-unknown-linux-gnu";
  C.CPU = "znver4";
  C.Gpu = GpuCapability{"nvptx64-nvidia-cuda", "sm_90", 13000};
  return C;
}
} // namespace

TEST(Hello, GpuRecordRoundTripsByteByByte) {
  Capabilities C = gpuTarget();
  std::string B = encodeCapabilities(C);
  // The last record: key 10, length 4 + 1 + 19 + 5 = 29, driver version
  // 13000 (0x32c8), the triple's length, the triple, the architecture.
  std::string Want("\x0a\x1d\x00\xc8\x32\x00\x00\x13", 8);
  Want += "nvptx64-nvidia-cudasm_90";
  ASSERT_GE(B.size(), Want.size());
  EXPECT_EQ(B.substr(B.size() - Want.size()), Want);
  auto D = decodeCapabilities(B);
  ASSERT_TRUE(!!D) << llvm::toString(D.takeError());
  ASSERT_TRUE(D->Gpu.has_value());
  EXPECT_EQ(D->Gpu->Triple, "nvptx64-nvidia-cuda");
  EXPECT_EQ(D->Gpu->Arch, "sm_90");
  EXPECT_EQ(D->Gpu->DriverVersion, 13000u);
  EXPECT_EQ(encodeCapabilities(*D), B);
  EXPECT_EQ(describeCapabilities(*D),
            "x86_64-unknown-linux-gnu cpu=znver4 (tc 0.1.0, LLVM 22.1.8, wire "
            "1-3, gpu nvptx64-nvidia-cuda sm_90, driver 13.0)");
  // A target without a GPU says nothing of one.
  C.Gpu.reset();
  auto N = decodeCapabilities(encodeCapabilities(C));
  ASSERT_TRUE(!!N) << llvm::toString(N.takeError());
  EXPECT_FALSE(N->Gpu.has_value());
}

TEST(Hello, MalformedGpuRecordsAreRefused) {
  Capabilities C = gpuTarget();
  C.Gpu.reset();
  std::string Base = encodeCapabilities(C); // Every key is below 10.
  auto WithGpu = [&](llvm::StringRef Value) {
    std::string B = Base;
    B += '\x0a';
    B += char(Value.size() & 0xff);
    B += char(Value.size() >> 8);
    B += Value;
    return B;
  };
  auto Refused = [](const std::string &Bytes, llvm::StringRef Want) {
    auto D = decodeCapabilities(Bytes);
    if (D)
      return testing::AssertionFailure() << "accepted";
    std::string Msg = llvm::toString(D.takeError());
    if (Msg.find(Want.str()) == std::string::npos)
      return testing::AssertionFailure() << Msg;
    return testing::AssertionSuccess();
  };
  std::string Good("\xc8\x32\x00\x00\x13", 5);
  Good += "nvptx64-nvidia-cudasm_90";
  ASSERT_TRUE(!!decodeCapabilities(WithGpu(Good)));
  EXPECT_TRUE(Refused(WithGpu(Good.substr(0, 4)), "shorter than 5 bytes"));
  EXPECT_TRUE(Refused(WithGpu(std::string(4, '\0') + Good.substr(4)),
                      "driver version 0"));
  // Triple length 0, running to the end (no architecture), past the end.
  for (char T : {'\x00', '\x18', '\x19', '\xff'}) {
    std::string V = Good;
    V[4] = T;
    EXPECT_TRUE(Refused(WithGpu(V), "triple and architecture")) << int(T);
  }
  std::string Space = Good;
  Space[10] = ' ';
  EXPECT_TRUE(Refused(WithGpu(Space), "not printable"));
  std::string Nul = Good;
  Nul.back() = '\0';
  EXPECT_TRUE(Refused(WithGpu(Nul), "not printable"));
  // Twice: keys ascend once each.
  EXPECT_TRUE(Refused(WithGpu(Good) + WithGpu(Good).substr(Base.size()),
                      "keys ascend"));
}

TEST(Hello, ASenderPicksTheGpuMemberForAGpuTargetElseItsCpuMember) {
  Archive A;
  A.Name = "g";
  Member X86, Ptx80, Ptx100, X86Obj;
  X86.Triple = "x86_64-unknown-linux-gnu";
  X86.Image = "x86-bitcode";
  X86Obj = X86;
  X86Obj.Kind = ImageKind::Object;
  X86Obj.Image = "x86-object";
  Ptx80.Triple = Ptx100.Triple = "nvptx64-nvidia-cuda";
  Ptx80.CPU = "sm_80";
  Ptx80.Image = "sm80";
  Ptx100.CPU = "sm_100";
  Ptx100.Image = "sm100";
  A.Members = {X86, X86Obj, Ptx80, Ptx100};
  Capabilities C = gpuTarget(); // sm_90
  auto Pick = [&](const Capabilities &Caps) -> std::string {
    llvm::Expected<const Member *> M = selectMemberFor(A, Caps);
    if (!M)
      return "error: " + llvm::toString(M.takeError());
    return (*M)->Image;
  };
  EXPECT_EQ(Pick(C), "sm80"); // sm_100 code does not run on sm_90
  C.Gpu->Arch = "sm_100";
  EXPECT_EQ(Pick(C), "sm100");
  // No GPU member runs there: the target's CPU runs the CPU member.
  C.Gpu->Arch = "sm_75";
  EXPECT_EQ(Pick(C), "x86-bitcode");
  C.RunsBitcode = false;
  EXPECT_EQ(Pick(C), "x86-object");
  // A target without a GPU never gets a GPU member.
  C = gpuTarget();
  C.Gpu.reset();
  EXPECT_EQ(Pick(C), "x86-bitcode");
  // Neither: the error lists what the archive has.
  A.Members = {Ptx100};
  C = gpuTarget();
  EXPECT_EQ(Pick(C), "error: no member for x86_64-unknown-linux-gnu cpu=znver4 "
                     "(have: nvptx64-nvidia-cuda cpu=sm_100)");
}

TEST(Hello, ADeviceFaultGoesToOlderPeersAsASandboxTrap) {
  EXPECT_EQ(statusForPeer(WireStatus::DeviceFault, 3),
            WireStatus::DeviceFault);
  EXPECT_EQ(statusForPeer(WireStatus::DeviceFault, 2),
            WireStatus::SandboxTrap);
  EXPECT_EQ(statusForPeer(WireStatus::DeviceFault, 1),
            WireStatus::SandboxTrap);
  EXPECT_EQ(statusForPeer(WireStatus::JitFailed, 1), WireStatus::JitFailed);
}
