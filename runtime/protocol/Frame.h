//===- Frame.h - tc's wire frames: encode and decode ------------*- C++ -*-===//
//
// Every tc message is one UCX active message whose header is a frame header
// below and whose data is the frame body. docs/wire-format.md gives every
// byte. decodeFrame() takes untrusted bytes: each size is checked against
// what arrived, and a defect is an llvm::Error, never a crash.
//
//===----------------------------------------------------------------------===//

#ifndef TC_RUNTIME_FRAME_H
#define TC_RUNTIME_FRAME_H

#include "tc/Archive.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tc {

/// Frame magic, the bytes 't' 'c'.
constexpr uint8_t FrameMagic0 = 't', FrameMagic1 = 'c';
/// The version byte of a full frame header; a receiver refuses any other.
/// (Wire version 2 added compact frames and left full frames unchanged.)
constexpr uint8_t FrameVersion = 1;

enum class FrameType : uint8_t {
  Invoke = 1,      ///< sender -> target: run NAME_main on the payload.
  Code = 2,        ///< sender -> target: the archive for a code id, no run.
  CodeRequest = 3, ///< target -> sender: "send the archive for this code id".
  Error = 4,       ///< target -> sender: a message was dropped, and why.
  Fence = 5,       ///< sender -> target: reply once all earlier are done.
  FenceDone = 6,   ///< target -> sender: the fence's reply.
  RegionRead = 7,  ///< sender -> target: read the target's exposed region.
  RegionData = 8,  ///< target -> sender: the bytes read.
  LocalInvoke = 9, ///< sender -> target: run a function already linked
                   ///< into the target (the active-message baseline).
  Hello = 10,      ///< either way, once per connection: what this process
                   ///< is and runs (Capabilities), the body.
};

/// Flags of an Invoke frame.
enum : uint32_t {
  FrameHasCode = 1u << 0, ///< The body carries the archive after the payload.
};

/// Why a target dropped a message (the status of an Error frame). Values
/// are part of the wire format and never renumbered.
enum class WireStatus : uint32_t {
  MalformedFrame = 1,
  UnsupportedVersion = 2,
  BadArchive = 3,
  NoMember = 4,
  DepLoadFailed = 5,
  MissingSymbol = 6,
  JitFailed = 7,
  PolicyRefused = 8,
  CodeUnavailable = 9, ///< Code id unknown and the sender no longer has it.
  HashMismatch = 10,   ///< The archive does not hash to the frame's hash.
  NoRegion = 11,       ///< RegionRead, but the target exposes no region.
  UnknownLocal = 12,   ///< LocalInvoke of a function the target lacks.
  SandboxTrap = 13,    ///< Sandboxed code trapped or ran out of budget.
  /// GPU code faulted (illegal address, trap, ...) or overran the
  /// target's time limit; the target recreated its GPU context. Sent only
  /// to peers of wire version 3 or later (statusForPeer()).
  DeviceFault = 14,
};

/// A decoded frame. Views point into the decoded bytes.
struct Frame {
  FrameType Type = FrameType::Invoke;
  uint32_t Seq = 0;    ///< Sender's message number on this endpoint.
  uint32_t CodeId = 0; ///< Sender-chosen id of a code identity on this ep;
                       ///< LocalInvoke: the local function's id.
  uint32_t Flags = 0;
  /// Encoded as a compact frame (Invoke or LocalInvoke without code, wire
  /// version 2): the code id and payload size travel as varints and Seq is
  /// not on the wire (the receiver counts it; see decodeFrame()).
  bool Compact = false;
  ArchiveHash Hash{};      ///< Code, and Invoke with FrameHasCode.
  llvm::StringRef Payload; ///< Invoke, LocalInvoke.
  llvm::StringRef Archive; ///< Code, and Invoke with FrameHasCode.
  WireStatus Status = WireStatus::MalformedFrame; ///< Error.
  llvm::StringRef Message;                        ///< Error.
  uint64_t Length = 0;  ///< RegionRead: bytes wanted.
  llvm::StringRef Data; ///< RegionData; Hello: the capability record.
};

/// Size of the fixed header of each type; the variable part follows.
constexpr size_t FrameHeaderSize = 24;
constexpr size_t FrameCodeHeaderSize = FrameHeaderSize + 32 + 8;

/// Encodes \p F's header (the active message header) into \p Out, which
/// has room for FrameCodeHeaderSize bytes; returns its size. The body that
/// goes with it is Payload then Archive (Invoke, Code) or Message (Error)
/// or Data (RegionData).
size_t encodeFrameHeader(const Frame &F, char *Out);
/// The same into a string.
void encodeFrameHeader(const Frame &F, std::string &Header);

/// Encodes a whole frame (header then body) into one buffer.
std::string encodeFrame(const Frame &F);

/// Decodes a frame from its header bytes and body bytes. The body may be
/// empty or absent for types that have none. A compact frame decodes with
/// Compact set and Seq 0: its sequence number is the one after the previous
/// sequenced frame of its connection, which only the caller knows.
llvm::Expected<Frame> decodeFrame(llvm::StringRef Header, llvm::StringRef Body);

/// The frames of steady state: an Invoke without code or a LocalInvoke,
/// whose payload is the whole body.
struct SmallInvoke {
  FrameType Type = FrameType::Invoke;
  uint32_t Seq = 0;
  uint32_t CodeId = 0;
};

/// The send fast path: writes the FrameHeaderSize-byte header of a
/// SmallInvoke with a payload of \p PayloadSize bytes (what
/// encodeFrameHeader writes for the same frame).
inline void encodeSmallInvoke(const SmallInvoke &I, uint64_t PayloadSize,
                              char *P) {
  namespace endian = llvm::support::endian;
  P[0] = char(FrameMagic0);
  P[1] = char(FrameMagic1);
  P[2] = char(FrameVersion);
  P[3] = char(I.Type);
  endian::write32le(P + 4, I.Seq);
  endian::write32le(P + 8, I.CodeId);
  endian::write32le(P + 12, 0);
  endian::write64le(P + 16, PayloadSize);
}

/// The receive fast path: true, with \p I filled in, when \p Header and
/// \p Body are a SmallInvoke (the payload is then \p Body). False for every
/// other frame, valid or not, which is decodeFrame()'s to judge; whatever
/// this accepts, decodeFrame() accepts with the same fields.
inline bool decodeSmallInvoke(llvm::StringRef Header, llvm::StringRef Body,
                              SmallInvoke &I) {
  namespace endian = llvm::support::endian;
  if (Header.size() != FrameHeaderSize)
    return false;
  const char *P = Header.data();
  uint8_t Type = uint8_t(P[3]);
  // Flags are zero (Invoke: no FrameHasCode, no unknown bit; LocalInvoke:
  // none) and the payload length is the body's.
  if (uint8_t(P[0]) != FrameMagic0 || uint8_t(P[1]) != FrameMagic1 ||
      uint8_t(P[2]) != FrameVersion ||
      (Type != uint8_t(FrameType::Invoke) &&
       Type != uint8_t(FrameType::LocalInvoke)) ||
      endian::read32le(P + 12) != 0 || endian::read64le(P + 16) != Body.size())
    return false;
  I.Type = FrameType(Type);
  I.Seq = endian::read32le(P + 4);
  I.CodeId = endian::read32le(P + 8);
  return true;
}

//===----------------------------------------------------------------------===//
// Compact frames (wire version 2; docs/wire-format.md, "Compact frames")
//===----------------------------------------------------------------------===//

/// The first byte of a compact header: 0x80 | type (Invoke 0x81,
/// LocalInvoke 0x89). A full header starts with 't' (0x74), so the first
/// byte tells the two apart.
constexpr uint8_t CompactTagBit = 0x80;
/// The wire version that brought compact frames: a sender uses them only
/// on a connection whose peer said (in its Hello) that it speaks it.
constexpr uint8_t CompactWireVersion = 2;
/// Longest compact header: tag, code id (ULEB128, at most 5 bytes),
/// payload size (ULEB128, at most 10).
constexpr size_t CompactHeaderMax = 16;

/// True if \p Header starts like a compact frame (it may still be
/// malformed); such a frame takes the next sequence number of its
/// connection whether or not it decodes.
inline bool isCompactHeader(llvm::StringRef Header) {
  return !Header.empty() && (uint8_t(Header[0]) & CompactTagBit);
}

/// The bytes of \p V as a ULEB128 varint.
inline size_t varintSize(uint64_t V) {
  size_t N = 1;
  for (; V >= 0x80; V >>= 7)
    ++N;
  return N;
}

/// The size encodeCompactInvoke() writes for \p I and \p PayloadSize.
inline size_t compactInvokeSize(const SmallInvoke &I, uint64_t PayloadSize) {
  return 1 + varintSize(I.CodeId) + varintSize(PayloadSize);
}

/// Writes the compact header of a SmallInvoke (its Seq is not written) with
/// a payload of \p PayloadSize bytes into \p P (room for CompactHeaderMax
/// bytes); returns its size.
inline size_t encodeCompactInvoke(const SmallInvoke &I, uint64_t PayloadSize,
                                  char *P) {
  size_t N = 0;
  P[N++] = char(CompactTagBit | uint8_t(I.Type));
  uint64_t V = I.CodeId;
  for (; V >= 0x80; V >>= 7)
    P[N++] = char(V | 0x80);
  P[N++] = char(V);
  for (V = PayloadSize; V >= 0x80; V >>= 7)
    P[N++] = char(V | 0x80);
  P[N++] = char(V);
  return N;
}

/// Reads one minimal ULEB128 value of at most \p MaxBytes bytes from
/// \p H at \p Pos; false if it runs past the end, is longer, is not
/// minimal (a last byte of 0 after the first) or overflows \p Max.
inline bool readCompactVarint(llvm::StringRef H, size_t &Pos,
                              unsigned MaxBytes, uint64_t Max,
                              uint64_t &Out) {
  uint64_t V = 0;
  for (unsigned I = 0; I < MaxBytes && Pos < H.size(); ++I) {
    uint8_t B = uint8_t(H[Pos++]);
    uint64_t Bits = uint64_t(B & 0x7f);
    if (I == 9 && Bits > 1) // The tenth byte holds bit 63 only.
      return false;
    V |= Bits << (7 * I);
    if (!(B & 0x80)) {
      if (I > 0 && B == 0)
        return false;
      if (V > Max)
        return false;
      Out = V;
      return true;
    }
  }
  return false;
}

/// decodeCompactInvoke() for every header but the common 3- and 4-byte
/// ones.
bool decodeCompactInvokeSlow(llvm::StringRef Header, llvm::StringRef Body,
                             SmallInvoke &I);

/// True if \p Tag is the first byte of a compact Invoke or LocalInvoke.
LLVM_ATTRIBUTE_ALWAYS_INLINE bool isCompactInvokeTag(uint8_t Tag) {
  return Tag == (CompactTagBit | uint8_t(FrameType::Invoke)) ||
         Tag == (CompactTagBit | uint8_t(FrameType::LocalInvoke));
}

/// The receive fast path for compact frames: true, with \p I's type and
/// code id filled in (not its Seq), when \p Header is a well-formed compact
/// header of exactly its size whose payload size is \p Body's. Whatever
/// this accepts, decodeFrame() accepts with the same fields.
LLVM_ATTRIBUTE_ALWAYS_INLINE bool
decodeCompactInvoke(llvm::StringRef Header, llvm::StringRef Body,
                    SmallInvoke &I) {
  const uint8_t *P = reinterpret_cast<const uint8_t *>(Header.data());
  // Without loops, a one-byte code id and either a one-byte size or a
  // two-byte one (payloads of 128 bytes to 16 KiB), whose second byte ends
  // the varint and is not 0.
  bool Common =
      (Header.size() == 3 && !((P[1] | P[2]) & 0x80) && P[2] == Body.size()) ||
      (Header.size() == 4 && !(P[1] & 0x80) && (P[2] & 0x80) && P[3] &&
       !(P[3] & 0x80) &&
       (size_t(P[2] & 0x7f) | size_t(P[3]) << 7) == Body.size());
  if (LLVM_LIKELY(Common && isCompactInvokeTag(P[0]))) {
    I.Type = FrameType(P[0] & ~CompactTagBit);
    I.CodeId = P[1];
    return true;
  }
  return decodeCompactInvokeSlow(Header, Body, I);
}

/// Decodes a frame stored as one buffer (header then body).
llvm::Expected<Frame> decodeFrame(llvm::StringRef Bytes);

/// The header size for a frame starting with \p Bytes (which must hold at
/// least the fixed header), or an error.
llvm::Expected<size_t> frameHeaderSize(llvm::StringRef Bytes);

llvm::StringRef wireStatusName(WireStatus S);

/// The wire version from which a receiver reads Error status DeviceFault
/// (older peers refuse an Error frame with a status they do not know).
constexpr uint8_t DeviceFaultWireVersion = 3;

/// The wire versions this runtime speaks: 1 (full frames), 2 (full and
/// compact frames) and 3 (Error status DeviceFault). A Hello frame always
/// carries header version 1, so any tc reads any peer's Hello.
constexpr uint8_t WireVersionMin = 1, WireVersionMax = DeviceFaultWireVersion;

/// The status to send a peer that speaks wire versions up to
/// \p PeerWireMax (1 for a peer that said no Hello) for \p S: a
/// DeviceFault goes to a peer older than version 3 as SandboxTrap ("code
/// trapped"), the closest status it reads.
inline WireStatus statusForPeer(WireStatus S, uint8_t PeerWireMax) {
  if (S == WireStatus::DeviceFault && PeerWireMax < DeviceFaultWireVersion)
    return WireStatus::SandboxTrap;
  return S;
}

/// The GPU a target runs ifuncs on, as its Hello says (record 10).
struct GpuCapability {
  std::string Triple; ///< "nvptx64-nvidia-cuda"
  std::string Arch;   ///< "sm_90": the device's compute capability
  /// The driver's version: for CUDA, cuDriverGetVersion (1000 x major +
  /// 10 x minor: 13000 is 13.0). Not 0.
  uint32_t DriverVersion = 0;
};

/// What one process tells its peer in a Hello frame (docs/wire-format.md,
/// "Hello"): enough for a sender to pick the one member the peer will run.
struct Capabilities {
  uint8_t WireMin = WireVersionMin, WireMax = WireVersionMax;
  std::string TcVersion;   ///< e.g. "0.1.0"
  std::string LlvmVersion; ///< e.g. "22.1.8"
  std::string Triple;      ///< the JIT's target triple
  std::string CPU;         ///< the CPU member selection uses
  std::string Features;    ///< the JIT's target features, +a,-b
  bool RunsBitcode = true, RunsObjects = true;
  /// Compression dictionaries this process can decode, by id.
  std::vector<std::string> Dictionaries;
  /// The archive format versions this process reads (tc.version); a peer
  /// whose Hello does not say reads version 2 only.
  uint8_t ArchiveMin = OldestArchiveVersion, ArchiveMax = ArchiveVersion;
  /// A target that runs GPU members on this GPU, and its CPU members (the
  /// fields above) when an archive has none for it.
  std::optional<GpuCapability> Gpu;
};

/// The member a process that says \p C runs of \p A: with a GPU, the GPU
/// member for it (bitcode) if \p A has one; otherwise the CPU member for
/// C's triple and CPU, of a kind C runs. The target applies the same rule
/// to itself, so a sender ships exactly what will run.
llvm::Expected<const Member *> selectMemberFor(const Archive &A,
                                               const Capabilities &C);

/// Encodes \p C as a Hello body.
std::string encodeCapabilities(const Capabilities &C);
/// Decodes a Hello body from untrusted bytes. Records of unknown keys are
/// skipped (a newer peer may add keys); everything else is checked.
llvm::Expected<Capabilities> decodeCapabilities(llvm::StringRef Body);
/// A one-line summary: "aarch64-unknown-linux-gnu cpu=cortex-a72 (tc 0.1.0,
/// LLVM 22.1.8, wire 1-1)".
std::string describeCapabilities(const Capabilities &C);

/// The id a LocalInvoke frame uses for the function registered as \p Name:
/// 32-bit FNV-1a of the name, so sender and target agree without talking.
uint32_t localFunctionId(llvm::StringRef Name);

} // namespace tc

#endif // TC_RUNTIME_FRAME_H
