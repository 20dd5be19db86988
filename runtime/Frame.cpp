//===- Frame.cpp - tc's wire frames: encode and decode --------------------===//

#include "Frame.h"

#include "llvm/Support/Endian.h"
#include "llvm/Support/FormatVariadic.h"

using namespace llvm;
namespace endian = llvm::support::endian;

namespace tc {

/// Longest error text a target sends back; longer ones are cut.
constexpr size_t MaxErrorMessage = 4096;

StringRef wireStatusName(WireStatus S) {
  switch (S) {
  case WireStatus::MalformedFrame:
    return "malformed frame";
  case WireStatus::UnsupportedVersion:
    return "unsupported version";
  case WireStatus::BadArchive:
    return "bad archive";
  case WireStatus::NoMember:
    return "no member for this host";
  case WireStatus::DepLoadFailed:
    return "dependency failed to load";
  case WireStatus::MissingSymbol:
    return "missing symbol";
  case WireStatus::JitFailed:
    return "JIT failed";
  case WireStatus::PolicyRefused:
    return "refused by policy";
  case WireStatus::CodeUnavailable:
    return "code unavailable";
  case WireStatus::HashMismatch:
    return "hash mismatch";
  case WireStatus::NoRegion:
    return "no region exposed";
  case WireStatus::UnknownLocal:
    return "unknown local function";
  case WireStatus::SandboxTrap:
    return "sandbox trap";
  }
  return "unknown status";
}

static bool hasCodeHeader(const Frame &F) {
  return F.Type == FrameType::Code ||
         (F.Type == FrameType::Invoke && (F.Flags & FrameHasCode));
}

void encodeFrameHeader(const Frame &F, std::string &H) {
  char Buf[FrameCodeHeaderSize];
  H.assign(Buf, encodeFrameHeader(F, Buf));
}

size_t encodeFrameHeader(const Frame &F, char *P) {
  bool Code = hasCodeHeader(F);
  P[0] = FrameMagic0;
  P[1] = FrameMagic1;
  P[2] = FrameVersion;
  P[3] = char(F.Type);
  endian::write32le(P + 4, F.Seq);
  endian::write32le(P + 8, F.CodeId);
  uint32_t Word = F.Type == FrameType::Error ? uint32_t(F.Status) : F.Flags;
  endian::write32le(P + 12, Word);
  uint64_t First = F.Type == FrameType::Invoke ||
                           F.Type == FrameType::LocalInvoke
                       ? F.Payload.size()
                   : F.Type == FrameType::Error      ? F.Message.size()
                   : F.Type == FrameType::RegionRead ? F.Length
                   : F.Type == FrameType::RegionData ? F.Data.size()
                                                     : 0;
  endian::write64le(P + 16, First);
  if (!Code)
    return FrameHeaderSize;
  std::copy(F.Hash.begin(), F.Hash.end(), P + 24);
  endian::write64le(P + 56, F.Archive.size());
  return FrameCodeHeaderSize;
}

std::string encodeFrame(const Frame &F) {
  std::string Out;
  encodeFrameHeader(F, Out);
  if (F.Type == FrameType::Invoke || F.Type == FrameType::LocalInvoke)
    Out += F.Payload;
  if (hasCodeHeader(F))
    Out += F.Archive;
  if (F.Type == FrameType::Error)
    Out += F.Message;
  if (F.Type == FrameType::RegionData)
    Out += F.Data;
  return Out;
}

static Error malformed(const Twine &Msg) {
  return createStringError("malformed frame: " + Msg);
}

Expected<size_t> frameHeaderSize(StringRef B) {
  if (B.size() < FrameHeaderSize)
    return malformed(formatv("{0} header bytes, need {1}", B.size(),
                             FrameHeaderSize));
  if (uint8_t(B[0]) != FrameMagic0 || uint8_t(B[1]) != FrameMagic1)
    return malformed(formatv("bad magic {0:x-2}{1:x-2} (expected 7463)",
                             uint8_t(B[0]), uint8_t(B[1])));
  if (uint8_t(B[2]) != FrameVersion)
    return createStringError(formatv("unsupported frame version {0} (this "
                                     "runtime speaks {1})",
                                     uint8_t(B[2]), FrameVersion)
                                 .str());
  uint8_t Type = uint8_t(B[3]);
  if (Type < uint8_t(FrameType::Invoke) || Type > uint8_t(FrameType::LocalInvoke))
    return malformed(formatv("unknown frame type {0}", Type));
  bool Code = Type == uint8_t(FrameType::Code) ||
              (Type == uint8_t(FrameType::Invoke) &&
               (endian::read32le(B.data() + 12) & FrameHasCode));
  return Code ? FrameCodeHeaderSize : FrameHeaderSize;
}

Expected<Frame> decodeFrame(StringRef H, StringRef Body) {
  Expected<size_t> HSize = frameHeaderSize(H);
  if (!HSize)
    return HSize.takeError();
  if (H.size() != *HSize)
    return malformed(formatv("header is {0} bytes, expected {1}", H.size(),
                             *HSize));
  Frame F;
  F.Type = FrameType(uint8_t(H[3]));
  F.Seq = endian::read32le(H.data() + 4);
  F.CodeId = endian::read32le(H.data() + 8);
  uint32_t Word = endian::read32le(H.data() + 12);
  uint64_t First = endian::read64le(H.data() + 16);
  uint64_t ArchiveSize = 0;
  if (*HSize == FrameCodeHeaderSize) {
    std::copy(H.begin() + 24, H.begin() + 56, F.Hash.begin());
    ArchiveSize = endian::read64le(H.data() + 56);
    if (ArchiveSize == 0)
      return malformed("code frame with an empty archive");
  }

  switch (F.Type) {
  case FrameType::Invoke:
    F.Flags = Word;
    if (Word & ~uint32_t(FrameHasCode))
      return malformed(formatv("unknown invoke flags {0:x}", Word));
    break;
  case FrameType::Error:
    if (Word < uint32_t(WireStatus::MalformedFrame) ||
        Word > uint32_t(WireStatus::SandboxTrap))
      return malformed(formatv("unknown error status {0}", Word));
    F.Status = WireStatus(Word);
    if (First > MaxErrorMessage)
      return malformed(formatv("error message of {0} bytes (limit {1})", First,
                               MaxErrorMessage));
    break;
  case FrameType::RegionRead:
    if (Word != 0)
      return malformed("region read with non-zero flags");
    F.Length = First;
    First = 0; // No body: the length is what is asked for.
    break;
  case FrameType::RegionData:
    if (Word != 0)
      return malformed("region data with non-zero flags");
    break;
  case FrameType::LocalInvoke:
    if (Word != 0)
      return malformed("local invoke with non-zero flags");
    break;
  default:
    if (Word != 0 || First != 0)
      return malformed(formatv("{0} frame with non-zero fields",
                               unsigned(F.Type)));
    break;
  }

  // Body = First bytes (payload or message), then the archive; computed so
  // that no sum can overflow.
  if (First > Body.size() || ArchiveSize != Body.size() - First)
    return malformed(formatv("body is {0} bytes, header says {1} + {2}",
                             Body.size(), First, ArchiveSize));
  if (F.Type == FrameType::Invoke || F.Type == FrameType::LocalInvoke)
    F.Payload = Body.take_front(First);
  else if (F.Type == FrameType::Error)
    F.Message = Body.take_front(First);
  else if (F.Type == FrameType::RegionData)
    F.Data = Body.take_front(First);
  F.Archive = Body.drop_front(First);
  return F;
}

Expected<Frame> decodeFrame(StringRef Bytes) {
  Expected<size_t> HSize = frameHeaderSize(Bytes);
  if (!HSize)
    return HSize.takeError();
  if (Bytes.size() < *HSize)
    return malformed(formatv("{0} bytes, header needs {1}", Bytes.size(),
                             *HSize));
  return decodeFrame(Bytes.take_front(*HSize), Bytes.drop_front(*HSize));
}

uint32_t localFunctionId(StringRef Name) {
  uint32_t H = 2166136261u;
  for (char C : Name) {
    H ^= uint8_t(C);
    H *= 16777619u;
  }
  return H;
}

} // namespace tc
