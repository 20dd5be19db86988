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
#include <string>
#include <vector>

namespace tc {

/// Frame magic, the bytes 't' 'c'.
constexpr uint8_t FrameMagic0 = 't', FrameMagic1 = 'c';
/// Wire version; a receiver refuses any other.
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
};

/// A decoded frame. Views point into the decoded bytes.
struct Frame {
  FrameType Type = FrameType::Invoke;
  uint32_t Seq = 0;    ///< Sender's message number on this endpoint.
  uint32_t CodeId = 0; ///< Sender-chosen id of a code identity on this ep;
                       ///< LocalInvoke: the local function's id.
  uint32_t Flags = 0;
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
/// empty or absent for types that have none.
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

/// Decodes a frame stored as one buffer (header then body).
llvm::Expected<Frame> decodeFrame(llvm::StringRef Bytes);

/// The header size for a frame starting with \p Bytes (which must hold at
/// least the fixed header), or an error.
llvm::Expected<size_t> frameHeaderSize(llvm::StringRef Bytes);

llvm::StringRef wireStatusName(WireStatus S);

/// The wire versions this runtime speaks (frame header byte 2). A Hello
/// frame always carries header version 1, so any tc reads any peer's Hello.
constexpr uint8_t WireVersionMin = 1, WireVersionMax = FrameVersion;

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
};

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
