//===- UcxMailbox.h - Mailbox rings over UCX memory and puts -----*- C++ -*-===//
//
// The UCX side of the reactive mailboxes of Mailbox.h, for UcxTransport:
// memory registered with ucp_mem_map, remote keys packed and unpacked,
// frames and credit written with ucp_put_nbi. An InRing is the ring one
// process offers one peer (it polls it); an OutRing is the ring a peer
// offered (this process writes into it).
//
// A ring is used only where UCX maps the peer's memory into this process
// (ucp_rkey_ptr succeeds: shared memory). There a put is a copy into the
// mapping that is complete when ucp_put_nbi returns, which the ordering
// between mailbox and active-message frames and the sleep handshake rely on
// (docs/transport.md, "Mailboxes"); over other lanes (TCP, RDMA) frames go
// as active messages.
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

/// Registered memory this process allocated (ucp_mem_map ALLOCATE, so that
/// shared-memory transports can map it into peers), with its packed key.
class Region {
public:
  static llvm::Expected<Region> allocate(ucp_context_h Ctx, size_t Bytes);
  Region() = default;
  Region(Region &&O) { *this = std::move(O); }
  Region &operator=(Region &&O);
  ~Region();
  char *base() const { return Base; }
  uint64_t address() const { return reinterpret_cast<uint64_t>(Base); }
  const std::string &packedKey() const { return Key; }

private:
  ucp_context_h Ctx = nullptr;
  ucp_mem_h Mem = nullptr;
  char *Base = nullptr;
  std::string Key;
};

/// A remote key unpacked on an endpoint, destroyed with this object.
class RemoteKey {
public:
  /// Unpacks \p Packed on \p Ep; fails unless UCX maps the memory at
  /// \p Address into this process (the mailbox needs that, see above).
  static llvm::Expected<RemoteKey> unpackMapped(ucp_ep_h Ep,
                                                llvm::StringRef Packed,
                                                uint64_t Address);
  RemoteKey() = default;
  RemoteKey(RemoteKey &&O) : Key(O.Key) { O.Key = nullptr; }
  RemoteKey &operator=(RemoteKey &&O);
  ~RemoteKey();
  ucp_rkey_h get() const { return Key; }

private:
  ucp_rkey_h Key = nullptr;
};

/// How an immediate put went.
enum class PutResult { Done, NoRoom, Failed };

/// Puts \p Bytes at \p Address of \p Key's memory through \p Ep, with
/// immediate completion only: on a mapped lane a short put is a copy into
/// the mapping, done when this returns. NoRoom: UCX cannot do it at once
/// (a put longer than the lane's short limit, 120 bytes over posix in UCX
/// 1.13); nothing was done. Failed: anything else (a put UCX still holds
/// reads from \p Bytes, which callers keep in the ring objects).
inline PutResult put(ucp_ep_h Ep, const void *Bytes, size_t Size,
                     uint64_t Address, const RemoteKey &Key) {
  ucp_request_param_t P;
  P.op_attr_mask = UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
  ucs_status_ptr_t R = ucp_put_nbx(Ep, Bytes, Size, Address, Key.get(), &P);
  if (LLVM_LIKELY(R == nullptr))
    return PutResult::Done;
  if (UCS_PTR_IS_ERR(R))
    return UCS_PTR_STATUS(R) == UCS_ERR_NO_RESOURCE ? PutResult::NoRoom
                                                    : PutResult::Failed;
  ucp_request_free(R); // Despite FORCE_IMM_CMPL (UCX's newer protocols).
  return PutResult::Failed;
}

/// The ring this process offers a peer, which the peer writes frames into.
struct InRing {
  Region Ring;
  mailbox::Reader Read;
  /// The sender's flags (mailbox::SenderFlags), once it accepted.
  RemoteKey SenderFlags;
  uint64_t SenderFlagsAddress = 0;
  bool Accepted = false;
  /// Deliveries from this ring still running (an ifunc may progress the
  /// transport and so deliver the next message before it returns): slots
  /// are released only when none runs, and the ring is freed only then.
  unsigned Delivering = 0;
  /// Whether the sender was told this process sleeps.
  bool Asleep = false;
  /// The sources of the puts to the sender's flags (they must not move
  /// while UCX might read them).
  uint64_t ReleasedWord = 0, AsleepWord = 0;

  explicit InRing(mailbox::Geometry G) : Read(G) {}
  /// A new ring of shape \p G, zeroed (no slot signalled).
  static llvm::Expected<std::unique_ptr<InRing>> create(ucp_context_h Ctx,
                                                        mailbox::Geometry G);
  /// The record a welcome carries.
  std::string offer() const;
  /// The slot of the next message expected.
  char *nextSlot() const {
    return Ring.base() + Read.slotOffset(Read.next());
  }
  /// Whether the next message's slot is signalled.
  bool hasNext() const {
    uint64_t Signal = __atomic_load_n(
        reinterpret_cast<const uint64_t *>(nextSlot() +
                                           mailbox::SignalOffset),
        __ATOMIC_ACQUIRE);
    return Read.isNext(Signal);
  }
};

/// A ring a peer offered, which this process writes frames into.
struct OutRing {
  RemoteKey Ring;
  uint64_t RingAddress = 0;
  mailbox::Writer Write;
  /// Our flags (mailbox::SenderFlags), which the receiver writes.
  Region Flags;
  /// The sources of the puts into the ring: a slot's content and its
  /// signal word (they must not move while UCX might read them).
  std::string Staging;
  uint64_t SignalWord = 0;
  /// Set when a put failed: the ring is not used again.
  bool Broken = false;
  /// The longest slot content a put has shown it can write at once (a
  /// longer frame goes as an AM without trying).
  size_t MaxContent = SIZE_MAX;
  /// Slots known to be free without reading the flags again.
  uint64_t Credit = 0;

  explicit OutRing(mailbox::Geometry G) : Write(G) {}
  /// Accepts \p Offer on \p Ep: unpacks the ring's key (failing unless UCX
  /// maps it here) and allocates our flags.
  static llvm::Expected<std::unique_ptr<OutRing>>
  accept(ucp_context_h Ctx, ucp_ep_h Ep, const mailbox::Offer &Offer);
  /// The record the accept message carries.
  std::string acceptRecord() const;
  uint64_t released() const {
    return __atomic_load_n(reinterpret_cast<const uint64_t *>(
                               Flags.base() + mailbox::ReleasedOffset),
                           __ATOMIC_ACQUIRE);
  }
  bool receiverAsleep() const {
    return __atomic_load_n(reinterpret_cast<const uint64_t *>(
                               Flags.base() + mailbox::AsleepOffset),
                           __ATOMIC_RELAXED) != 0;
  }
};

} // namespace ucx
} // namespace tc

#endif // TC_RUNTIME_TRANSPORT_UCXMAILBOX_H
