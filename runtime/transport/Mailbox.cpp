//===- Mailbox.cpp - Mailbox records and slots, from untrusted bytes ------===//

#include "transport/Mailbox.h"
#include "transport/Bytes.h"

#include "llvm/Support/Endian.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

using namespace llvm;
namespace endian = llvm::support::endian;

namespace tc {
namespace mailbox {

Error Geometry::check() const {
  if (SlotBytes < 64 || SlotBytes > 65536 || SlotBytes % 64)
    return createStringError(formatv("mailbox slots of {0} bytes (a multiple "
                                     "of 64 from 64 to 65536)",
                                     SlotBytes)
                                 .str());
  if (!isPowerOf2_32(Slots) || Slots > (1u << 16))
    return createStringError(formatv("mailbox of {0} slots (a power of two "
                                     "up to 65536)",
                                     Slots)
                                 .str());
  if (!isPowerOf2_32(BankSlots) || BankSlots > Slots)
    return createStringError(formatv("mailbox banks of {0} slots (a power of "
                                     "two up to the {1} slots)",
                                     BankSlots, Slots)
                                 .str());
  if (AreaBytes && (!isPowerOf2_32(AreaBytes) || AreaBytes < 4096 ||
                    AreaBytes > (1u << 24)))
    return createStringError(formatv("a mailbox area of {0} bytes (0, or a "
                                     "power of two from 4096 to 16 MiB)",
                                     AreaBytes)
                                 .str());
  return Error::success();
}

/// Longest packed remote key a record carries (UCX's are tens of bytes).
constexpr size_t MaxRemoteKey = 4096;
constexpr size_t OfferFixed = 27, AcceptFixed = 11, AreaOfferFixed = 15;

static Error badRecord(const Twine &What, const Twine &Msg) {
  return createStringError("malformed mailbox " + What + ": " + Msg);
}

/// The remote key at \p Off of \p B, whose size is the u16 before it; the
/// record must end with it.
static Expected<std::string> remoteKeyAt(StringRef B, size_t Off,
                                         const char *What) {
  uint16_t Len = endian::read16le(B.data() + Off - 2);
  if (Len == 0 || Len > MaxRemoteKey)
    return badRecord(What, formatv("remote key of {0} bytes", Len));
  if (B.size() != Off + Len)
    return badRecord(What, formatv("{0} bytes, the remote key needs {1}",
                                   B.size(), Off + Len));
  return B.substr(Off, Len).str();
}

/// A record's fixed part is there and its version is ours.
static Error checkRecordHead(StringRef B, size_t Fixed, const char *What) {
  if (B.size() < Fixed)
    return badRecord(What, formatv("{0} bytes, need at least {1}", B.size(),
                                   Fixed));
  if (uint8_t(B[0]) != RecordVersion)
    return badRecord(What, formatv("version {0} (this runtime reads {1})",
                                   uint8_t(B[0]), RecordVersion));
  return Error::success();
}

std::string encodeOffer(const Offer &O) {
  std::string Out(OfferFixed, '\0');
  char *P = &Out[0];
  P[0] = char(RecordVersion);
  endian::write32le(P + 1, O.Shape.SlotBytes);
  endian::write32le(P + 5, O.Shape.Slots);
  endian::write32le(P + 9, O.Shape.BankSlots);
  endian::write32le(P + 13, O.Shape.AreaBytes);
  endian::write64le(P + 17, O.RingAddress);
  endian::write16le(P + 25, uint16_t(O.RemoteKey.size()));
  return Out + O.RemoteKey;
}

Expected<Offer> decodeOffer(StringRef B) {
  if (Error E = checkRecordHead(B, OfferFixed, "offer"))
    return std::move(E);
  Offer O;
  O.Shape.SlotBytes = endian::read32le(B.data() + 1);
  O.Shape.Slots = endian::read32le(B.data() + 5);
  O.Shape.BankSlots = endian::read32le(B.data() + 9);
  O.Shape.AreaBytes = endian::read32le(B.data() + 13);
  if (Error E = O.Shape.check())
    return badRecord("offer", toString(std::move(E)));
  O.RingAddress = endian::read64le(B.data() + 17);
  Expected<std::string> Key = remoteKeyAt(B, OfferFixed, "offer");
  if (!Key)
    return Key.takeError();
  O.RemoteKey = std::move(*Key);
  return O;
}

std::string encodeAccept(const Accept &A) {
  std::string Out(AcceptFixed, '\0');
  char *P = &Out[0];
  P[0] = char(RecordVersion);
  endian::write64le(P + 1, A.FlagsAddress);
  endian::write16le(P + 9, uint16_t(A.RemoteKey.size()));
  return Out + A.RemoteKey;
}

Expected<Accept> decodeAccept(StringRef B) {
  if (Error E = checkRecordHead(B, AcceptFixed, "accept"))
    return std::move(E);
  Accept A;
  A.FlagsAddress = endian::read64le(B.data() + 1);
  Expected<std::string> Key = remoteKeyAt(B, AcceptFixed, "accept");
  if (!Key)
    return Key.takeError();
  A.RemoteKey = std::move(*Key);
  return A;
}

std::string encodeAreaOffer(const AreaOffer &A) {
  std::string Out(AreaOfferFixed, '\0');
  char *P = &Out[0];
  P[0] = char(RecordVersion);
  endian::write32le(P + 1, A.AreaBytes);
  endian::write64le(P + 5, A.Address);
  endian::write16le(P + 13, uint16_t(A.RemoteKey.size()));
  return Out + A.RemoteKey;
}

Expected<AreaOffer> decodeAreaOffer(StringRef B) {
  if (Error E = checkRecordHead(B, AreaOfferFixed, "area offer"))
    return std::move(E);
  AreaOffer A;
  A.AreaBytes = endian::read32le(B.data() + 1);
  A.Address = endian::read64le(B.data() + 5);
  if (A.declined()) {
    // Declined: nothing else.
    if (A.Address || endian::read16le(B.data() + 13) ||
        B.size() != AreaOfferFixed)
      return badRecord("area offer", "a declined area with an address or "
                                     "a remote key");
    return A;
  }
  Geometry G;
  G.AreaBytes = A.AreaBytes;
  if (Error E = G.check())
    return badRecord("area offer", toString(std::move(E)));
  Expected<std::string> Key = remoteKeyAt(B, AreaOfferFixed, "area offer");
  if (!Key)
    return Key.takeError();
  A.RemoteKey = std::move(*Key);
  return A;
}

Expected<SlotMessage> readSlot(StringRef Slot) {
  if (Slot.size() < SlotHeaderBytes)
    return createStringError(
        formatv("malformed mailbox slot: {0} bytes", Slot.size()).str());
  const char *P = Slot.data() + ContentOffset;
  SlotMessage M;
  M.AmBefore = endian::read32le(P);
  size_t Frame = endian::read16le(P + 4);
  size_t Header = uint8_t(P[6]);
  if (P[7] != SlotInline && P[7] != SlotInArea)
    return createStringError(
        formatv("malformed mailbox slot: kind {0}", unsigned(uint8_t(P[7])))
            .str());
  bool InArea = P[7] == SlotInArea;
  if (InArea && Slot.size() < SlotHeaderBytes + AreaPosBytes)
    return createStringError(
        formatv("malformed mailbox slot: {0} bytes, an area frame's "
                "position needs {1}",
                Slot.size(), SlotHeaderBytes + AreaPosBytes)
            .str());
  if (!InArea && Frame > Slot.size() - SlotHeaderBytes)
    return createStringError(
        formatv("malformed mailbox slot: a frame of {0} bytes in a slot of {1}",
                Frame, Slot.size())
            .str());
  if (Header == 0 || Header > Frame)
    return createStringError(
        formatv("malformed mailbox slot: a header of {0} bytes in {1} of {2}",
                Header, InArea ? "an area frame" : "a frame", Frame)
            .str());
  if (InArea) {
    M.InArea = true;
    M.AreaPos = endian::read64le(P + 8);
    M.AreaFrame = uint16_t(Frame);
    M.AreaHeader = uint8_t(Header);
    return M;
  }
  M.Header = Slot.substr(SlotHeaderBytes, Header);
  M.Body = Slot.substr(SlotHeaderBytes + Header, Frame - Header);
  return M;
}

} // namespace mailbox
} // namespace tc
