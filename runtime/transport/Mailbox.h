//===- Mailbox.h - Reactive mailboxes: rings written by one-sided puts -*- C++ -*-===//
//
// Two-Chains' reactive mailboxes (§III-A), as UcxTransport uses them: the
// receiver of a connection owns a ring of fixed-size slots in memory
// registered with UCX and gives the sender its address and remote key; the
// sender writes each frame that fits into the next run of slots (a span:
// one slot for a small frame, more for a larger one) through UCX's mapping
// of the ring (the content, then the signal word of its first slot) and the
// receiver, polling the signal word of the slot it expects next, hands the
// frame on in place, as if it had come as an active message. Credit goes
// back by put too: the receiver writes how many slots it has released into
// a word of the sender's own registered memory, a bank of slots at a time.
// A frame too big for a span goes into the large-frame area, announced by
// a slot that says where (so it keeps its place in the ring's order); the
// area's credit is the position the receiver released. The area is
// registered apart from the ring, and only once the sender asks for it
// (before it sends its first such frame), so a connection that never sends
// one registers none. docs/wire-format.md, "Mailboxes", gives every byte.
//
// This file is the part without UCX: the slot and record layouts (decoded
// from untrusted bytes: every size is checked, a defect is an error, never a
// crash) and the sender's and receiver's bookkeeping, so ring wrap, bank
// credit and slot reuse are unit-tested on plain memory.
//
//===----------------------------------------------------------------------===//

#ifndef TC_RUNTIME_TRANSPORT_MAILBOX_H
#define TC_RUNTIME_TRANSPORT_MAILBOX_H

#include "transport/Bytes.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Compiler.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/Error.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace tc {
namespace mailbox {

/// The version byte of offer, accept and area offer records. 4: the
/// large-frame area is registered apart, when the sender asks for it (3:
/// an area behind every ring; 2: frames span slots; 1: one frame per slot).
constexpr uint8_t RecordVersion = 4;

/// Bytes of a slot in front of the frame: signal word, AM count, sizes.
constexpr size_t SlotHeaderBytes = 16;
/// Where the signal word is in a slot, and where the rest starts.
constexpr size_t SignalOffset = 0, ContentOffset = 8;
/// A slot's kind (its byte 15): the frame is in the slot's span, or in the
/// ring's large-frame area (the slot then holds where: AreaPosBytes).
constexpr uint8_t SlotInline = 0, SlotInArea = 1;
/// The position word a SlotInArea slot carries after its sizes.
constexpr size_t AreaPosBytes = 8;
/// A signal word: the message's first slot number plus one in the low 48
/// bits, the number of slots its frame spans (at least 1) in the high 16.
constexpr unsigned SpanShift = 48;
constexpr uint64_t CountMask = (uint64_t(1) << SpanShift) - 1;

/// The shape of a ring: Slots slots of SlotBytes bytes, released to the
/// sender BankSlots at a time. Slots and BankSlots are powers of two,
/// BankSlots divides Slots, SlotBytes is a multiple of 64 (a cache line)
/// from 64 to 65536. A frame takes a span of consecutive slots, at most
/// spanMax(); a span that starts near the ring's end runs on into a tail of
/// spanMax() - 1 slots behind it, so that every frame is contiguous.
struct Geometry {
  /// Two cache lines: frames up to 112 bytes (a cached message of up to
  /// 109 payload bytes) in one slot, a small one in the signal word's line.
  uint32_t SlotBytes = 128;
  uint32_t Slots = 128;
  uint32_t BankSlots = 32;
  /// The large-frame area the receiver registers when the sender asks for
  /// it (AreaOffer): frames too big for a span (up to a quarter of it) are
  /// written there, each announced by a slot in the ring, which keeps them
  /// in order. 0: the receiver offers none.
  uint32_t AreaBytes = 256 << 10;

  /// The ring's size in bytes, without the tail.
  size_t bytes() const { return size_t(SlotBytes) * Slots; }
  /// The most slots one frame spans: half the ring (two such frames may be
  /// in flight), and no more than the credit a sender is sure to get back
  /// once the receiver took everything (Slots - BankSlots + 1), so that a
  /// span never waits for credit that cannot come.
  uint32_t spanMax() const {
    uint32_t Max = std::min(Slots / 2, Slots - BankSlots + 1);
    return Max ? Max : 1;
  }
  /// The memory registered for the ring: the ring and its tail (the
  /// large-frame area is registered apart, when asked for).
  size_t mappedBytes() const {
    return bytes() + size_t(spanMax() - 1) * SlotBytes;
  }
  /// The largest frame the area takes (0 without one): a quarter of it,
  /// so that several are in flight (sizes are 16-bit).
  size_t areaMaxFrame() const {
    return std::min<size_t>(AreaBytes / 4, UINT16_MAX);
  }
  /// The largest frame (header + body) a span holds (sizes are 16-bit).
  size_t maxFrame() const {
    return std::min<size_t>(size_t(spanMax()) * SlotBytes - SlotHeaderBytes,
                            UINT16_MAX);
  }
  /// The slots a frame of \p FrameBytes (header + body) spans.
  uint32_t spanOf(size_t FrameBytes) const {
    size_t Bytes = SlotHeaderBytes + FrameBytes;
    return LLVM_LIKELY(Bytes <= SlotBytes)
               ? 1
               : uint32_t((Bytes + SlotBytes - 1) / SlotBytes);
  }
  /// An error naming the first rule \p G breaks, or success.
  llvm::Error check() const;
};

/// What a receiver offers (in its welcome): where the ring is and the
/// packed remote key the sender unpacks to write into it.
struct Offer {
  Geometry Shape;
  uint64_t RingAddress = 0;
  std::string RemoteKey;
};
std::string encodeOffer(const Offer &O);
llvm::Expected<Offer> decodeOffer(llvm::StringRef Bytes);

/// What a sender answers when it will write into the ring: where its flags
/// are (SenderFlags) and their packed remote key.
struct Accept {
  uint64_t FlagsAddress = 0;
  std::string RemoteKey;
};
std::string encodeAccept(const Accept &A);
llvm::Expected<Accept> decodeAccept(llvm::StringRef Bytes);

/// What a receiver answers a sender that asks for the ring's large-frame
/// area: where the area is and its packed remote key, or (AreaBytes 0, no
/// address, no key) that it declines, and the sender's large frames go as
/// active messages.
struct AreaOffer {
  /// The area's size: the ring offer's Geometry::AreaBytes, or 0.
  uint32_t AreaBytes = 0;
  uint64_t Address = 0;
  std::string RemoteKey;
  bool declined() const { return AreaBytes == 0; }
};
std::string encodeAreaOffer(const AreaOffer &A);
llvm::Expected<AreaOffer> decodeAreaOffer(llvm::StringRef Bytes);

/// The sender's flags, in memory it registered; only the receiver writes
/// them (through its mapping of them), only the sender reads them.
struct SenderFlags {
  /// Slots the receiver has released: messages up to this count may be
  /// overwritten. A multiple of the bank size.
  uint64_t Released;
  /// Non-zero while the receiver sleeps (or is about to): a sender that
  /// wrote a message then rings the doorbell (an active message) to wake
  /// it.
  uint64_t Asleep;
  /// Non-zero once the receiver took the accept and polls the ring: the
  /// sender writes no slot before. A receiver that cannot map these flags
  /// never sets it (UCX may map one side's memory and not the other's),
  /// and the sender's frames go as active messages.
  uint64_t Ready;
  /// Bytes of the large-frame area the receiver has handed back: positions
  /// below this count plus the area's size may be written.
  uint64_t AreaReleased;
};
constexpr size_t ReleasedOffset = 0, AsleepOffset = 8, ReadyOffset = 16,
                 AreaReleasedOffset = 24;
/// The flags' registered size: a cache line of their own.
constexpr size_t FlagsBytes = 64;

/// The first 8 bytes of a slot's content (\p Out is the slot plus
/// ContentOffset): the AM count and the frame's sizes.
inline void encodeSlotSizes(char *Out, uint32_t AmBefore, size_t HeaderSize,
                            size_t FrameSize, uint8_t Kind = SlotInline) {
  // Offsets here are the slot's minus ContentOffset.
  llvm::support::endian::write32le(Out, AmBefore);
  llvm::support::endian::write16le(Out + 4, uint16_t(FrameSize));
  Out[6] = char(HeaderSize);
  Out[7] = char(Kind);
}

/// Writes a slot's content (everything after the signal word) into
/// \p Out, which has room for Geometry::SlotBytes - ContentOffset bytes,
/// and returns its size. \p AmBefore is how many frames the sender had
/// handed to the active-message path of the connection before this one.
/// The caller checked that the frame fits (Geometry::maxFrame()).
inline size_t encodeSlotContent(char *Out, uint32_t AmBefore,
                                llvm::StringRef Header, llvm::StringRef Body) {
  encodeSlotSizes(Out, AmBefore, Header.size(), Header.size() + Body.size());
  copyBytes(Out + 8, Header.data(), Header.size());
  copyBytes(Out + 8 + Header.size(), Body.data(), Body.size());
  return 8 + Header.size() + Body.size();
}

/// Stores \p Value into the 8-byte word at \p Word (ours, or the peer's
/// mapped here) with release semantics: what this process wrote before is
/// visible to a peer that reads the word with acquire.
inline void storeWord(char *Word, uint64_t Value) {
  __atomic_store_n(reinterpret_cast<uint64_t *>(Word), Value,
                   __ATOMIC_RELEASE);
}

/// Loads the 8-byte word at \p Word (written by the peer through its
/// mapping) with memory order \p Order (__ATOMIC_ACQUIRE or _RELAXED).
inline uint64_t loadWord(const char *Word, int Order) {
  return __atomic_load_n(reinterpret_cast<const uint64_t *>(Word), Order);
}

/// The signal word of a message whose span of \p Span slots starts at slot
/// number \p N (counted from 0 since the ring's start): never 0, and
/// different in every lap of the ring, so a slot left from an earlier lap
/// never reads as the next message. The receiver zeroes the signal words
/// inside a span before it releases them (Reader::forget()): payload bytes
/// there never read as a signal either.
inline uint64_t signalOf(uint64_t N, uint32_t Span) {
  return ((N + 1) & CountMask) | uint64_t(Span) << SpanShift;
}

/// A frame read from a slot; the views point into the slot. A SlotInArea
/// slot's frame is in the area: InArea is set, AreaPos says where, and
/// Header and Body are empty until Reader::resolveArea() points them there.
struct SlotMessage {
  uint32_t AmBefore = 0;
  llvm::StringRef Header, Body;
  bool InArea = false;
  uint64_t AreaPos = 0;
  uint16_t AreaFrame = 0;
  uint8_t AreaHeader = 0;
};

/// Reads the content of a slot whose signal said it holds a message
/// (\p Slot is the whole slot, signal word included). An error names the
/// defect: the receiver drops that message and goes on.
llvm::Expected<SlotMessage> readSlot(llvm::StringRef Slot);

/// readSlot() without the words, for the receive path: false on a defect.
/// Accepts exactly what readSlot() accepts, with the same fields.
inline bool parseSlot(llvm::StringRef Slot, SlotMessage &M) {
  if (Slot.size() < SlotHeaderBytes)
    return false;
  const unsigned char *P =
      reinterpret_cast<const unsigned char *>(Slot.data()) + ContentOffset;
  size_t Frame = size_t(P[4]) | size_t(P[5]) << 8;
  size_t Header = P[6];
  M.AmBefore = uint32_t(P[0]) | uint32_t(P[1]) << 8 | uint32_t(P[2]) << 16 |
               uint32_t(P[3]) << 24;
  if (LLVM_UNLIKELY(P[7] != SlotInline)) {
    if (P[7] != SlotInArea || Slot.size() < SlotHeaderBytes + AreaPosBytes ||
        Header == 0 || Header > Frame)
      return false;
    M.InArea = true;
    M.AreaPos = llvm::support::endian::read64le(P + 8);
    M.AreaFrame = uint16_t(Frame);
    M.AreaHeader = uint8_t(Header);
    M.Header = M.Body = llvm::StringRef();
    return true;
  }
  if (Frame > Slot.size() - SlotHeaderBytes || Header == 0 || Header > Frame)
    return false;
  M.InArea = false;
  M.Header = llvm::StringRef(Slot.data() + SlotHeaderBytes, Header);
  M.Body = llvm::StringRef(Slot.data() + SlotHeaderBytes + Header,
                           Frame - Header);
  return true;
}

/// The sender's side of one ring: which slot is next, and whether credit
/// allows writing it.
class Writer {
public:
  explicit Writer(Geometry G) : G(G), MaxFrame(G.maxFrame()) {}
  const Geometry &shape() const { return G; }
  /// Slots written so far; the next span starts at slot next() % Slots.
  uint64_t next() const { return Written; }
  /// Whether a frame of \p Bytes (header + body) fits a span.
  bool fits(size_t Bytes) const { return Bytes <= MaxFrame; }
  /// How many slots may be written from next() on, given the
  /// receiver's Released count: slots whose previous occupants it has
  /// released.
  uint64_t credit(uint64_t Released) const {
    return Released + G.Slots - Written;
  }
  /// The byte offset of slot number \p N in the ring.
  uint64_t slotOffset(uint64_t N) const {
    return (N & (G.Slots - 1)) * uint64_t(G.SlotBytes);
  }
  /// A span of \p Span slots from next() on was written.
  void wrote(uint32_t Span) { Written += Span; }

private:
  Geometry G;
  size_t MaxFrame; ///< G.maxFrame(), asked once per frame written.
  uint64_t Written = 0;
};

/// The receiver's side of one ring: which message is expected next, and
/// when slots go back to the sender.
class Reader {
public:
  explicit Reader(Geometry G) : G(G), SpanMax(G.spanMax()) {}
  const Geometry &shape() const { return G; }
  /// The slot number where the next message's span starts (at
  /// slotOffset(next())).
  uint64_t next() const { return Consumed; }
  uint64_t slotOffset(uint64_t N) const {
    return (N & (G.Slots - 1)) * uint64_t(G.SlotBytes);
  }
  /// Whether \p Signal, read from the next slot, says its message is there.
  bool isNext(uint64_t Signal) const {
    return ((Signal ^ (Consumed + 1)) & CountMask) == 0 && Signal > CountMask;
  }
  /// The slots the message of \p Signal (isNext()) spans, or 0 where the
  /// sender wrote a span this ring cannot hold (a defect: the receiver
  /// drops one slot).
  uint32_t spanOf(uint64_t Signal) const {
    uint32_t Span = uint32_t(Signal >> SpanShift);
    return Span <= SpanMax ? Span : 0;
  }
  /// The next message, of \p Span slots, is taken (delivered or dropped):
  /// the one after it is expected now. Its slots stay the receiver's until
  /// released.
  void take(uint32_t Span) { Consumed += Span; }
  /// Zeroes the signal words inside the span of \p Span slots at \p First
  /// (what the sender wrote there is payload) once no one reads it, and
  /// before release(): the sender then finds slots whose signal words are
  /// old signals or 0, never a number the receiver will wait for.
  void forget(char *First, uint32_t Span) const {
    for (uint32_t I = 1; I < Span; ++I)
      std::memset(First + size_t(I) * G.SlotBytes + SignalOffset, 0, 8);
  }
  /// Call when no delivery is running (a delivered frame may point into
  /// its slot until its handler returns). Returns the new Released count
  /// to write to the sender when whole banks were freed since the last
  /// release, else 0.
  uint64_t release() {
    uint64_t Whole = Consumed & ~uint64_t(G.BankSlots - 1);
    if (Whole == Released)
      return 0;
    Released = Whole;
    return Released;
  }
  uint64_t released() const { return Released; }

  /// The large-frame area (Geometry::AreaBytes) is registered and offered
  /// to the sender (or, \p Has false, gone): resolveArea() takes frames
  /// there only while it is.
  void setArea(bool Has) { AreaSize = Has ? G.AreaBytes : 0; }
  bool hasArea() const { return AreaSize != 0; }
  /// Points \p M's Header and Body (a SlotInArea message) into the area at
  /// \p Area, or returns false where the sender's position or sizes break
  /// the area's rules, or there is no area (a defect: the message is
  /// dropped). The area is used in order: a frame starts at or after where
  /// the previous one taken ended, lies whole within the area, and within
  /// one area's length of that end (so it never overlaps what is not taken
  /// yet).
  bool resolveArea(const char *Area, SlotMessage &M) const {
    uint64_t Size = AreaSize, Frame = M.AreaFrame;
    if (!Size || Frame > G.areaMaxFrame() || M.AreaPos < AreaConsumed ||
        M.AreaPos - AreaConsumed > Size - Frame ||
        (M.AreaPos & (Size - 1)) + Frame > Size)
      return false;
    const char *At = Area + (M.AreaPos & (Size - 1));
    M.Header = llvm::StringRef(At, M.AreaHeader);
    M.Body = llvm::StringRef(At + M.AreaHeader, Frame - M.AreaHeader);
    return true;
  }
  /// The area frame of \p M (resolved) is taken: the area up to its end
  /// goes back to the sender with the next releaseArea().
  void takeArea(const SlotMessage &M) {
    AreaConsumed = M.AreaPos + M.AreaFrame;
  }
  /// As release(), for the area: the new count of area bytes to write to the
  /// sender when frames were taken since the last call, else 0.
  uint64_t releaseArea() {
    if (AreaConsumed == AreaReleased)
      return 0;
    return AreaReleased = AreaConsumed;
  }

private:
  Geometry G;
  uint32_t SpanMax; ///< G.spanMax(), asked once per frame taken.
  uint64_t Consumed = 0;
  uint64_t Released = 0;
  uint64_t AreaConsumed = 0, AreaReleased = 0;
  uint32_t AreaSize = 0; ///< G.AreaBytes while the area is there, else 0.
};

/// The sender's side of one ring, whole: where the ring is mapped, the next
/// slot, the credit, and the flags the receiver writes back. UcxTransport
/// writes every mailbox frame through it; the runtime's send fast path
/// writes cached frames through it too, without a call into the transport
/// (Transport::lane()). The transport keeps the lane open only while a
/// frame may go straight into the ring (no frame waits for credit before
/// it, the endpoint is up) and closes it for good before the ring's memory
/// goes; a writer other than the transport checks isOpen() first. The
/// large-frame area comes later, if at all: the transport asks the receiver
/// for it when wantsArea() says a frame needs it, and attaches it
/// (attachArea()) once it is mapped here; until then such frames are not
/// written (No), and they go as active messages.
/// Single-threaded, as the transport.
class Lane {
public:
  /// How a write fared.
  enum class Wrote {
    Yes,      ///< In the ring.
    Doorbell, ///< In the ring, and the receiver sleeps: wake it.
    NoCredit, ///< Not written: every slot is still the receiver's.
    No,       ///< Not written: too big for a slot, or the receiver does
              ///< not poll the ring yet.
  };

  /// A lane into the ring of shape \p G mapped at \p Ring, whose receiver
  /// writes back into our flags at \p Flags (SenderFlags). Each slot
  /// carries \p *AmSent (the connection's count of frames handed to the
  /// active-message path); each frame written adds one to \p *Sent.
  /// Opens closed.
  Lane(Geometry G, char *Ring, const char *Flags, const uint32_t *AmSent,
       uint64_t *Sent)
      : W(G), AreaLimit(G.AreaBytes ? G.areaMaxFrame() : 0), Ring(Ring),
        Flags(Flags), AmSent(AmSent), Sent(Sent) {}
  Lane(const Lane &) = delete;
  Lane &operator=(const Lane &) = delete;

  bool isOpen() const { return Open; }
  /// Opens or closes the lane to writers other than the transport.
  void setOpen(bool O) { Open = O && Ring; }
  /// Closed for good: the ring and the flags (and the area) are about to
  /// go.
  void close() {
    Open = false;
    Ring = nullptr;
    Area = nullptr;
    AreaMax = 0;
  }
  const Writer &writer() const { return W; }

  /// Whether a frame of \p Bytes (header + body) goes into the ring: into
  /// a span, or into the large-frame area (attached, or still to come).
  bool takes(size_t Bytes) const {
    return W.fits(Bytes) || Bytes <= AreaLimit;
  }

  /// Whether a frame of \p Bytes needs the large-frame area, which is not
  /// attached yet and may still come: the receiver offers one, has not
  /// declined it, and polls the ring.
  bool wantsArea(size_t Bytes) {
    if (Area || Bytes > AreaLimit || W.fits(Bytes))
      return false;
    return Ready || (Ready = loadWord(Flags + ReadyOffset, __ATOMIC_ACQUIRE));
  }
  /// The large-frame area is mapped here at \p At (Geometry::AreaBytes):
  /// frames too big for a span are written there from now on.
  void attachArea(char *At) {
    if (!Ring || !AreaLimit)
      return; // Closed for good, or declined meanwhile.
    Area = At;
    AreaMax = AreaLimit;
  }
  /// There will be no area (the receiver declined it, or it cannot be
  /// mapped here): frames too big for a span go as active messages.
  void noArea() {
    Area = nullptr;
    AreaMax = AreaLimit = 0;
  }
  bool hasArea() const { return Area != nullptr; }

  /// Writes a frame into the next span of slots: a header that
  /// \p EncodeHeader writes at the pointer it gets (at most \p HeaderMax
  /// bytes; it returns the size), then \p Body. The content goes in first,
  /// the signal word of the span's first slot last with a release store: a
  /// receiver that reads the signal with acquire never sees a signalled
  /// slot with old content.
  template <typename EncodeFn>
  LLVM_ATTRIBUTE_ALWAYS_INLINE Wrote write(size_t HeaderMax,
                                           llvm::StringRef Body,
                                           EncodeFn EncodeHeader) {
    if (LLVM_UNLIKELY(!W.fits(HeaderMax + Body.size())))
      return Wrote::No;
    uint32_t Span = W.shape().spanOf(HeaderMax + Body.size());
    return put(Span, [&](char *Content) {
      size_t H = EncodeHeader(Content + 8);
      assert(H <= HeaderMax && "the header outgrew what fits() was told");
      copyBytes(Content + 8 + H, Body.data(), Body.size());
      encodeSlotSizes(Content, *AmSent, H, H + Body.size());
    });
  }
  /// write() of a header already encoded; a frame too big for a span goes
  /// into the large-frame area (writeToArea()).
  Wrote write(llvm::StringRef Header, llvm::StringRef Body) {
    if (LLVM_UNLIKELY(!W.fits(Header.size() + Body.size())))
      return writeToArea(Header, Body);
    return write(Header.size(), Body, [&](char *Out) {
      copyBytes(Out, Header.data(), Header.size());
      return Header.size();
    });
  }
  /// Writes a frame of up to Geometry::areaMaxFrame() bytes into the
  /// large-frame area, at the next position where it lies whole (skipping
  /// the area's end if it does not fit there), and announces it with a
  /// slot (SlotInArea) that says where: the frame keeps its place in the
  /// ring's order. Credit: the area's bytes the receiver released, read
  /// from our flags only when what was read last does not cover the frame.
  /// No while no area is attached.
  Wrote writeToArea(llvm::StringRef Header, llvm::StringRef Body) {
    uint64_t Frame = Header.size() + Body.size();
    if (Frame > AreaMax)
      return Wrote::No;
    uint64_t Size = W.shape().AreaBytes;
    uint64_t Pos = AreaWritten;
    if ((Pos & (Size - 1)) + Frame > Size)
      Pos += Size - (Pos & (Size - 1));
    if (Pos + Frame - AreaReleased > Size) {
      AreaReleased = loadWord(Flags + AreaReleasedOffset, __ATOMIC_ACQUIRE);
      if (Pos + Frame - AreaReleased > Size)
        return Wrote::NoCredit;
    }
    Wrote R = put(1, [&](char *Content) {
      char *At = Area + (Pos & (Size - 1));
      copyBytes(At, Header.data(), Header.size());
      copyBytes(At + Header.size(), Body.data(), Body.size());
      encodeSlotSizes(Content, *AmSent, Header.size(), Frame, SlotInArea);
      llvm::support::endian::write64le(Content + 8, Pos);
    });
    if (R == Wrote::Yes || R == Wrote::Doorbell) {
      AreaWritten = Pos + Frame;
      ++AreaFrames;
    }
    return R;
  }
  /// Frames written into the large-frame area so far.
  uint64_t areaFrames() const { return AreaFrames; }

private:
  /// Writes a message of \p Span slots into the next span: \p Fill writes
  /// everything after the signal word (it gets the slot's content), then
  /// the signal goes in with a release store.
  template <typename FillFn>
  LLVM_ATTRIBUTE_ALWAYS_INLINE Wrote put(uint32_t Span, FillFn Fill) {
    assert(Ring && "a write through a lane closed for good");
    // Until the receiver says it polls the ring, frames go as AMs.
    if (LLVM_UNLIKELY(!Ready) &&
        !(Ready = loadWord(Flags + ReadyOffset, __ATOMIC_ACQUIRE)))
      return Wrote::No;
    // Credit is read from the flags the receiver writes only when what was
    // read last is used up: that cache line moves between the processes
    // once per bank, not once per frame.
    if (LLVM_UNLIKELY(Credit < Span)) {
      Credit = W.credit(loadWord(Flags + ReleasedOffset, __ATOMIC_ACQUIRE));
      if (Credit < Span)
        return Wrote::NoCredit;
    }
    uint64_t N = W.next();
    char *Slot = Ring + W.slotOffset(N);
    Fill(Slot + ContentOffset);
    storeWord(Slot + SignalOffset, signalOf(N, Span));
    W.wrote(Span);
    Credit -= Span;
    ++*Sent;
    // Dekker with the receiver's sleep announcement: our signal store,
    // then its flag load here; its flag store, then its ring loads there.
    // With a full fence on both sides one of us sees the other.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (LLVM_UNLIKELY(loadWord(Flags + AsleepOffset, __ATOMIC_RELAXED)))
      return Wrote::Doorbell;
    return Wrote::Yes;
  }

  Writer W;
  /// The largest frame the attached area takes (0: no area attached), and
  /// the largest it will take once attached (0: none will come).
  size_t AreaMax = 0, AreaLimit;
  /// The large-frame area as mapped here, once attached.
  char *Area = nullptr;
  uint64_t AreaWritten = 0, AreaReleased = 0, AreaFrames = 0;
  uint64_t Credit = 0;
  bool Ready = false;
  bool Open = false;
  char *Ring;
  const char *Flags;
  const uint32_t *AmSent;
  uint64_t *Sent;
};

} // namespace mailbox
} // namespace tc

#endif // TC_RUNTIME_TRANSPORT_MAILBOX_H
