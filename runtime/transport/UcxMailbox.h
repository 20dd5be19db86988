//===- UcxMailbox.h - Mailbox rings over UCX memory and puts -----*- C++ -*-===//
//
// The UCX side of the reactive mailboxes of Mailbox.h, for UcxTransport:
// memory registered with ucp_mem_map, remote keys packed and unpacked,
// frames and credit written into the peer's memory. An InRing is the ring
// one process offers one peer (it polls it); an OutRing is the ring a peer
// offered (this process writes into it).
//
// A ring is used only where UCX maps the peer's memory into this process
// (ucp_rkey_ptr succeeds: shared memory). There UCX's own put is a memcpy
// into that mapping; the transport writes through the pointer
// ucp_rkey_ptr returned instead: the same copy, without ucp_put_nbx's
// dispatch per call, and with a release store of the signal word after
// the content, so one write per slot is enough. A write is complete when
// it returns, which the ordering between mailbox and active-message frames
// and the sleep handshake rely on (docs/transport.md, "Mailboxes"); over
// other lanes (TCP, RDMA) frames go as active messages.
//
// Threading: as the transport's, single-threaded.
//
//===----------------------------------------------------------------------===//

#ifndef TC_RUNTIME_TRANSPORT_UCXMAILBOX_H
#define TC_RUNTIME_TRANSPORT_UCXMAILBOX_H

#include "transport/Mailbox.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Compiler.h"
#include "llvm/Support/Error.h"

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace tc {
namespace ucx {

/// What a transport has registered for its mailboxes: bytes (as UCX
/// reports the regions' lengths) and regions, counted up when a Region is
/// allocated and down when it goes.
struct Tally {
  uint64_t Bytes = 0;
  uint64_t Regions = 0;
};

/// Registered memory this process allocated (ucp_mem_map ALLOCATE, so that
/// shared-memory transports can map it into peers), with its packed key.
class Region {
public:
  /// Counted in \p Count (which must outlive the region), if given.
  static llvm::Expected<Region> allocate(ucp_context_h Ctx, size_t Bytes,
                                         Tally *Count = nullptr);
  Region() = default;
  Region(Region &&O) { *this = std::move(O); }
  Region &operator=(Region &&O);
  ~Region();
  char *base() const { return Base; }
  uint64_t address() const { return reinterpret_cast<uint64_t>(Base); }
  const std::string &packedKey() const { return Key; }
  /// The registered length (at least what was asked for).
  size_t length() const { return Length; }
  explicit operator bool() const { return Mem != nullptr; }

private:
  /// Unregisters the memory, if any (and uncounts it).
  void reset();

  ucp_context_h Ctx = nullptr;
  ucp_mem_h Mem = nullptr;
  char *Base = nullptr;
  size_t Length = 0;
  Tally *Count = nullptr;
  std::string Key;
};

/// A remote key unpacked on an endpoint, destroyed with this object, and
/// where UCX maps the peer's memory it names in this process.
class RemoteKey {
public:
  /// Unpacks \p Packed on \p Ep; fails unless UCX maps the memory at
  /// \p Address into this process (the mailbox needs that, see above).
  static llvm::Expected<RemoteKey> unpackMapped(ucp_ep_h Ep,
                                                llvm::StringRef Packed,
                                                uint64_t Address);
  RemoteKey() = default;
  RemoteKey(RemoteKey &&O) : Key(O.Key), Mapped(O.Mapped) {
    O.Key = nullptr;
    O.Mapped = nullptr;
  }
  RemoteKey &operator=(RemoteKey &&O);
  ~RemoteKey();
  /// The peer's memory at the address given to unpackMapped(), as this
  /// process sees it (valid while the key lives).
  char *mapped() const { return Mapped; }

private:
  ucp_rkey_h Key = nullptr;
  char *Mapped = nullptr;
};

/// The ring this process offers a peer, which the peer writes frames into.
struct InRing {
  Region Ring;
  /// The large-frame area, registered when the sender asked for it.
  Region Area;
  /// The sender asked for the area (it asks once; another request is a
  /// defect).
  bool AreaAsked = false;
  mailbox::Reader Read;
  /// The sender's flags (mailbox::SenderFlags), once it accepted.
  RemoteKey SenderFlags;
  bool Accepted = false;
  /// Deliveries from this ring still running (an ifunc may progress the
  /// transport and so deliver the next message before it returns): slots
  /// are released only when none runs, and the ring is freed only then.
  unsigned Delivering = 0;
  /// Whether the sender was told this process sleeps.
  bool Asleep = false;

  explicit InRing(mailbox::Geometry G) : Read(G) {}
  /// A new ring of shape \p G, zeroed (no slot signalled), counted in
  /// \p Count.
  static llvm::Expected<std::unique_ptr<InRing>>
  create(ucp_context_h Ctx, mailbox::Geometry G, Tally *Count);
  /// The record a welcome carries.
  std::string offer() const;
  /// Registers the large-frame area (Geometry::AreaBytes, counted in
  /// \p Count) and returns the record that offers it to the sender.
  llvm::Expected<std::string> addArea(ucp_context_h Ctx, Tally *Count);
  /// Unregisters the area (the sender will not use it).
  void dropArea() {
    Area = Region();
    Read.setArea(false);
  }
  /// The slot of the next message expected.
  char *nextSlot() const {
    return Ring.base() + Read.slotOffset(Read.next());
  }
  /// The large-frame area (Geometry::AreaBytes), or null.
  const char *area() const { return Area.base(); }
  /// Whether the next message's slot is signalled.
  bool hasNext() const {
    return Read.isNext(
        mailbox::loadWord(nextSlot() + mailbox::SignalOffset,
                          __ATOMIC_ACQUIRE));
  }
};

/// A ring a peer offered, which this process writes frames into.
struct OutRing {
  RemoteKey Ring; ///< mapped(): the ring's first slot.
  /// Our flags (mailbox::SenderFlags), which the receiver writes.
  Region Flags;
  /// The large-frame area, once the receiver offered it and it is mapped
  /// here (mapped(): its first byte).
  RemoteKey Area;
  /// Where the area stands: not asked for, asked for (its offer awaited),
  /// attached to the lane, or not to be had (declined, not mapped here, or
  /// none offered): then frames too big for a span go as active messages.
  enum class AreaState : uint8_t { Unasked, Asked, Attached, None };
  AreaState AreaIs = AreaState::Unasked;
  /// The writers' view of the two (shared with the runtime, which may
  /// hold it past this ring: it is closed when the ring goes).
  std::shared_ptr<mailbox::Lane> Lane;

  OutRing() = default;
  OutRing(const OutRing &) = delete;
  OutRing &operator=(const OutRing &) = delete;
  ~OutRing() {
    if (Lane)
      Lane->close();
  }
  /// Accepts \p Offer on \p Ep: unpacks the ring's key (failing unless UCX
  /// maps it here) and allocates our flags. The lane writes \p *AmSent
  /// into each slot and counts its frames in \p *Sent (see mailbox::Lane).
  static llvm::Expected<std::unique_ptr<OutRing>>
  accept(ucp_context_h Ctx, ucp_ep_h Ep, const mailbox::Offer &Offer,
         const uint32_t *AmSent, uint64_t *Sent, Tally *Count);
  /// Maps the area of \p Offer (not declined) on \p Ep and attaches it to
  /// the lane.
  llvm::Error attachArea(ucp_ep_h Ep, const mailbox::AreaOffer &Offer);
  /// The record the accept message carries.
  std::string acceptRecord() const;
};

} // namespace ucx
} // namespace tc

#endif // TC_RUNTIME_TRANSPORT_UCXMAILBOX_H
