//===- Frame.cpp - tc's wire frames: encode and decode --------------------===//

#include "protocol/Frame.h"

#include "llvm/Support/Endian.h"
#include "llvm/Support/FormatVariadic.h"

using namespace llvm;
namespace endian = llvm::support::endian;

namespace tc {

/// Longest error text a target sends back; longer ones are cut.
constexpr size_t MaxErrorMessage = 4096;
/// Longest Hello body (capability record).
constexpr size_t MaxHello = 4096;

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
  case WireStatus::DeviceFault:
    return "device fault";
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
  if (F.Compact)
    return encodeCompactInvoke(SmallInvoke{F.Type, F.Seq, F.CodeId},
                               F.Payload.size(), P);
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
                   : F.Type == FrameType::RegionData ||
                           F.Type == FrameType::Hello
                       ? F.Data.size()
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
  if (F.Type == FrameType::RegionData || F.Type == FrameType::Hello)
    Out += F.Data;
  return Out;
}

static Error malformed(const Twine &Msg) {
  return createStringError("malformed frame: " + Msg);
}

bool decodeCompactInvokeSlow(StringRef Header, StringRef Body,
                             SmallInvoke &I) {
  if (Header.empty())
    return false;
  uint8_t Tag = uint8_t(Header[0]);
  if (!isCompactInvokeTag(Tag))
    return false;
  size_t Pos = 1;
  uint64_t Id, Size;
  if (!readCompactVarint(Header, Pos, 5, UINT32_MAX, Id) ||
      !readCompactVarint(Header, Pos, 10, UINT64_MAX, Size) ||
      Pos != Header.size() || Size != Body.size())
    return false;
  I.Type = FrameType(Tag & ~CompactTagBit);
  I.CodeId = uint32_t(Id);
  return true;
}

/// The size of the compact header at the start of \p B, or an error.
static Expected<size_t> compactHeaderSize(StringRef B) {
  uint8_t Type = uint8_t(B[0]) & ~CompactTagBit;
  if (Type != uint8_t(FrameType::Invoke) &&
      Type != uint8_t(FrameType::LocalInvoke))
    return malformed(formatv("compact frame of type {0} (only 1 and 9 are)",
                             unsigned(Type)));
  size_t Pos = 1;
  uint64_t V;
  if (!readCompactVarint(B, Pos, 5, UINT32_MAX, V))
    return malformed("compact frame: bad code id varint");
  if (!readCompactVarint(B, Pos, 10, UINT64_MAX, V))
    return malformed("compact frame: bad payload size varint");
  return Pos;
}

Expected<size_t> frameHeaderSize(StringRef B) {
  if (isCompactHeader(B))
    return compactHeaderSize(B);
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
  if (Type < uint8_t(FrameType::Invoke) || Type > uint8_t(FrameType::Hello))
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
  if (isCompactHeader(H)) {
    SmallInvoke I;
    if (!decodeCompactInvoke(H, Body, I)) // Only the size can be wrong now.
      return malformed(formatv("body is {0} bytes, compact header says "
                               "otherwise",
                               Body.size()));
    Frame F;
    F.Compact = true;
    F.Type = I.Type;
    F.CodeId = I.CodeId;
    F.Payload = Body;
    return F;
  }
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
        Word > uint32_t(WireStatus::DeviceFault))
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
  case FrameType::Hello:
    if (Word != 0 || F.Seq != 0 || F.CodeId != 0)
      return malformed("hello with non-zero seq, code id or flags");
    if (First > MaxHello)
      return malformed(formatv("hello of {0} bytes (limit {1})", First,
                               MaxHello));
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
  else if (F.Type == FrameType::RegionData || F.Type == FrameType::Hello)
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

//===----------------------------------------------------------------------===//
// Capabilities (the Hello body)
//===----------------------------------------------------------------------===//

namespace {
/// Record keys of the capability record. Never renumbered.
enum CapKey : uint8_t {
  CapWire = 1,         ///< 2 bytes: lowest, highest wire version spoken
  CapTcVersion = 2,    ///< text
  CapLlvmVersion = 3,  ///< text
  CapTriple = 4,       ///< text, required
  CapCPU = 5,          ///< text
  CapFeatures = 6,     ///< text
  CapKinds = 7,        ///< 1 byte: bit 0 runs bitcode, bit 1 runs objects
  CapDictionaries = 8, ///< text: dictionary ids joined by '\n'
  CapArchive = 9,      ///< 2 bytes: lowest, highest archive format read
  CapGpu = 10,         ///< u32 driver version, u8 T, triple (T), arch
};
constexpr uint8_t CapRecordVersion = 1;
} // namespace

static void putRecord(std::string &Out, CapKey K, StringRef V) {
  char Head[3];
  Head[0] = char(K);
  endian::write16le(Head + 1, uint16_t(V.size()));
  Out.append(Head, 3);
  Out += V;
}

std::string encodeCapabilities(const Capabilities &C) {
  std::string Out(1, char(CapRecordVersion));
  char Wire[2] = {char(C.WireMin), char(C.WireMax)};
  putRecord(Out, CapWire, StringRef(Wire, 2));
  putRecord(Out, CapTcVersion, C.TcVersion);
  putRecord(Out, CapLlvmVersion, C.LlvmVersion);
  putRecord(Out, CapTriple, C.Triple);
  if (!C.CPU.empty())
    putRecord(Out, CapCPU, C.CPU);
  if (!C.Features.empty())
    putRecord(Out, CapFeatures, C.Features);
  char Kinds = char((C.RunsBitcode ? 1 : 0) | (C.RunsObjects ? 2 : 0));
  putRecord(Out, CapKinds, StringRef(&Kinds, 1));
  if (!C.Dictionaries.empty()) {
    std::string Ids;
    for (const std::string &D : C.Dictionaries)
      Ids += (Ids.empty() ? "" : "\n") + D;
    putRecord(Out, CapDictionaries, Ids);
  }
  char Archive[2] = {char(C.ArchiveMin), char(C.ArchiveMax)};
  putRecord(Out, CapArchive, StringRef(Archive, 2));
  if (C.Gpu) {
    std::string V(5, '\0');
    endian::write32le(V.data(), C.Gpu->DriverVersion);
    V[4] = char(uint8_t(C.Gpu->Triple.size()));
    V += C.Gpu->Triple;
    V += C.Gpu->Arch;
    putRecord(Out, CapGpu, V);
  }
  return Out;
}

static Error badHello(const Twine &Msg) {
  return createStringError("malformed hello: " + Msg);
}

/// Printable ASCII without spaces or newlines: what every text record holds
/// (a dictionary list also has its newline separators).
static bool isPlainText(StringRef S, bool AllowNewline = false) {
  return llvm::all_of(S, [&](char Ch) {
    return (Ch > ' ' && Ch < 127) || (AllowNewline && Ch == '\n');
  });
}

Expected<Capabilities> decodeCapabilities(StringRef B) {
  if (B.empty())
    return badHello("empty capability record");
  if (uint8_t(B[0]) != CapRecordVersion)
    return badHello(formatv("capability record version {0} (this runtime "
                            "reads {1})",
                            uint8_t(B[0]), CapRecordVersion));
  Capabilities C;
  C.RunsBitcode = C.RunsObjects = false;
  C.ArchiveMin = C.ArchiveMax = 2; // What a peer that does not say reads.
  unsigned Last = 0; // keys ascend strictly: one encoding, no duplicates
  bool HaveWire = false, HaveTriple = false, HaveKinds = false;
  for (size_t Off = 1; Off < B.size();) {
    if (B.size() - Off < 3)
      return badHello(formatv("record header at byte {0} is cut short", Off));
    uint8_t Key = uint8_t(B[Off]);
    uint16_t Len = endian::read16le(B.data() + Off + 1);
    Off += 3;
    if (Len > B.size() - Off)
      return badHello(formatv("record {0} of {1} bytes runs past the end",
                              Key, Len));
    StringRef V = B.substr(Off, Len);
    Off += Len;
    if (Key <= Last)
      return badHello(formatv("record {0} after record {1} (keys ascend, "
                              "once each)",
                              Key, Last));
    Last = Key;
    switch (Key) {
    case CapWire:
      if (Len != 2 || V[0] == 0 || uint8_t(V[0]) > uint8_t(V[1]))
        return badHello("wire versions are not 2 bytes low <= high");
      C.WireMin = uint8_t(V[0]);
      C.WireMax = uint8_t(V[1]);
      HaveWire = true;
      break;
    case CapKinds:
      if (Len != 1 || (uint8_t(V[0]) & ~3u) || V[0] == 0)
        return badHello("kinds is not one byte of bits 0-1, at least one set");
      C.RunsBitcode = V[0] & 1;
      C.RunsObjects = V[0] & 2;
      HaveKinds = true;
      break;
    case CapArchive:
      if (Len != 2 || V[0] == 0 || uint8_t(V[0]) > uint8_t(V[1]))
        return badHello("archive versions are not 2 bytes low <= high");
      C.ArchiveMin = uint8_t(V[0]);
      C.ArchiveMax = uint8_t(V[1]);
      break;
    case CapGpu: {
      // Driver version, triple length, triple, architecture: each field
      // present, text printable, the version not 0.
      if (Len < 5)
        return badHello("gpu record is shorter than 5 bytes");
      GpuCapability G;
      G.DriverVersion = endian::read32le(V.data());
      size_t T = uint8_t(V[4]);
      if (G.DriverVersion == 0)
        return badHello("gpu record with driver version 0");
      if (T == 0 || T + 5 >= Len)
        return badHello("gpu record's triple and architecture are not both "
                        "there");
      StringRef Triple = V.substr(5, T), Arch = V.substr(5 + T);
      if (!isPlainText(Triple) || !isPlainText(Arch))
        return badHello("gpu record is not printable text");
      G.Triple = Triple.str();
      G.Arch = Arch.str();
      C.Gpu = std::move(G);
      break;
    }
    case CapDictionaries: {
      if (!isPlainText(V, /*AllowNewline=*/true) || V.empty())
        return badHello("dictionary list is not printable text");
      SmallVector<StringRef, 4> Ids;
      V.split(Ids, '\n');
      for (StringRef Id : Ids) {
        if (Id.empty())
          return badHello("empty dictionary id");
        C.Dictionaries.push_back(Id.str());
      }
      break;
    }
    case CapTcVersion:
    case CapLlvmVersion:
    case CapTriple:
    case CapCPU:
    case CapFeatures: {
      if (!isPlainText(V))
        return badHello(formatv("record {0} is not printable text", Key));
      std::string *Field = Key == CapTcVersion     ? &C.TcVersion
                           : Key == CapLlvmVersion ? &C.LlvmVersion
                           : Key == CapTriple      ? &C.Triple
                           : Key == CapCPU         ? &C.CPU
                                                   : &C.Features;
      *Field = V.str();
      if (Key == CapTriple)
        HaveTriple = !V.empty();
      break;
    }
    default:
      break; // A newer peer's key: skipped.
    }
  }
  if (!HaveWire || !HaveTriple || !HaveKinds)
    return badHello("wire versions, triple and kinds are required");
  return C;
}

std::string describeCapabilities(const Capabilities &C) {
  std::string S = C.Triple;
  if (!C.CPU.empty())
    S += " cpu=" + C.CPU;
  S += formatv(" (tc {0}, LLVM {1}, wire {2}-{3}", C.TcVersion.empty() ? "?" : C.TcVersion,
               C.LlvmVersion.empty() ? "?" : C.LlvmVersion, unsigned(C.WireMin),
               unsigned(C.WireMax))
           .str();
  if (!C.RunsBitcode)
    S += ", objects only";
  if (!C.RunsObjects)
    S += ", bitcode only";
  if (C.Gpu)
    S += formatv(", gpu {0} {1}, driver {2}.{3}", C.Gpu->Triple, C.Gpu->Arch,
                 C.Gpu->DriverVersion / 1000, (C.Gpu->DriverVersion % 1000) / 10)
             .str();
  return S + ")";
}

Expected<const Member *> selectMemberFor(const Archive &A,
                                         const Capabilities &C) {
  if (C.Gpu) {
    Expected<const Member *> G = selectMember(A, C.Gpu->Triple, C.Gpu->Arch,
                                              Role::Target, ImageKind::Bitcode);
    if (G)
      return G;
    consumeError(G.takeError()); // No GPU member: its CPU runs the CPU one.
  }
  std::optional<ImageKind> Kind;
  if (!C.RunsBitcode)
    Kind = ImageKind::Object;
  else if (!C.RunsObjects)
    Kind = ImageKind::Bitcode;
  return selectMember(A, C.Triple, C.CPU, Role::Target, Kind);
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
