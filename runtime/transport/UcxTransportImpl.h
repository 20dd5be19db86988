//===- UcxTransportImpl.h - The UCX transport, for its own files ----------===//
//
// The private header of UcxTransport: its constants, the records it keeps
// (sends, backlogged frames, arrivals), and the class itself. Only the
// transport's own .cpp files include it; everything else uses
// createUcxTransport() (Transport.h). Its parts live in
//   UcxTransport.cpp         creation, teardown, connections, progress()
//   UcxTransportSend.cpp     the active-message send path and its backlog
//   UcxTransportReceive.cpp  the active-message receive path, the welcome
//   UcxTransportLarge.cpp    large (rendezvous) frames, in-order delivery
//   UcxTransportMailbox.cpp  the mailbox lane and its control messages
//   UcxTransportListen.cpp   checks before a listener is opened
//
// One ucp_context (AM + WAKEUP) and one single-threaded ucp_worker per
// transport. A frame is one active message with id TcAmId: the frame header
// is the AM header, the body the AM data, so UCX chooses eager or rendezvous
// by size and works over shared memory, TCP and RDMA alike.
//
// Connection tokens: the receiver must learn which connection a frame came
// from, also for peers that connected by worker address. A connection's
// first frames ask for a reply endpoint (UCP_AM_SEND_FLAG_REPLY, AM id
// TcAmId); an endpoint seen for the first time is a new connection. The
// receiver answers the first such frame with a welcome (WelcomeAmId, also
// with REPLY, so the sender maps it to its endpoint) carrying a token: the
// receiver's connection id and 32 random bits. From then on the sender puts
// the token in front of each frame header and sends on TokenAmId without
// REPLY, which UCX 1.13 can complete immediately (no request, no copy);
// REPLY sends always take UCX's request path and cost ~0.12 us more per
// message over shared memory (docs/transport.md, "Sending"). Endpoints we
// create use peer error handling, so a peer that dies becomes onDisconnect,
// not a hang.
//
// Order: a rendezvous frame is received into a buffer before delivery; the
// frames behind it on the same connection wait in a per-connection queue
// until it has arrived.
//
// Completions: every send completion and every disconnect is queued and
// reported from progress(), so no callback runs inside send(), connect() or
// disconnect(), and none runs from the destructor except Done (with an
// error). Before onDisconnect(C), every send still pending on C completes.
//
// Limits: a peer that connected by worker address is known only through the
// reply endpoint UCX made for it, which carries no error handler of ours; its
// death is noticed when a send to it fails, not by an onDisconnect of its own.
//
//===----------------------------------------------------------------------===//

#ifndef TC_RUNTIME_TRANSPORT_UCXTRANSPORTIMPL_H
#define TC_RUNTIME_TRANSPORT_UCXTRANSPORTIMPL_H

#include "transport/Batch.h"
#include "transport/Bytes.h"
#include "transport/Transport.h"
#include "transport/UcxMailbox.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <ucp/api/ucp.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace tc {
namespace ucx {

// The transport's files use LLVM's ADT and Support names unqualified.
using namespace llvm;

/// Active message ids: small frames in one buffer (no AM header; data:
/// token, header size byte, frame header, frame body), frames sent with
/// REPLY (header: the frame header), welcomes (header: the 8-byte token),
/// frames sent with a token (header: token, then the frame header) and
/// batches (header: token; body: records, Batch.h).
constexpr unsigned InlineAmId = 0x7A, MailboxAmId = 0x7B, TcAmId = 0x7C,
                   WelcomeAmId = 0x7D, TokenAmId = 0x7E, BatchAmId = 0x7F;
/// The first header byte of a MailboxAmId message (a token follows):
/// a sender accepting the ring offered in its welcome (data: the accept
/// record), waking a receiver that sleeps (no data), saying that it closes
/// the connection (no data: the peer then reports the loss of the
/// connection that follows as a close, not as a failure), a sender asking
/// for the ring's large-frame area (no data), the receiver's answer (data:
/// the area offer record, or a declined one), a sender giving up an area
/// it was offered and cannot map (no data), and a sender declining the
/// ring its welcome offered (no data: it cannot map it, over TCP say).
enum : uint8_t {
  MailboxAccept = 1,
  MailboxDoorbell = 2,
  Goodbye = 3,
  MailboxAreaAsk = 4,
  MailboxAreaOffer = 5,
  MailboxAreaDrop = 6,
  MailboxRingDrop = 7,
};
/// Most frames one progress() takes from one ring before it lets UCX and
/// the other rings have their turn.
constexpr unsigned RingBurst = 16;
constexpr size_t TokenSize = 8;
/// Frames whose inline message (token, size byte, header, body) is at most
/// this long go as InlineAmId: one contiguous AM data buffer and no AM
/// header, which UCX sends with one copy less than a header plus data
/// (ucp_am_send_nbx adds an iov entry for a user header: about 50 of its
/// ~340 instructions for a cached TSI frame, callgrind).
constexpr size_t InlineMax = 256;
/// The largest frame (header + body) an inline message holds.
constexpr size_t InlineFrameMax = InlineMax - TokenSize - 1;
/// Bodies up to this size are first tried as an immediate send from the
/// caller's buffers; larger ones (bcopy fragments, rendezvous) go straight
/// to the request path, where UCX could not complete them at once anyway.
constexpr size_t ImmediateMax = 4096;
/// Of the frames above a connection's ImmediateCeiling, every this many
/// is tried as an immediate send again.
constexpr unsigned ImmediateRetry = 1024;
/// SendOps kept for reuse, and the largest body buffer one keeps.
constexpr size_t OpPoolMax = 64, OpKeepBytes = 64 << 10;
/// Emptied batch bodies kept for reuse (FreeBatches).
constexpr size_t KeptBatches = 16;
/// Frames up to this size (header + body) join a batch while their
/// connection is busy; a batch is closed at BatchMax bytes of records, which
/// keeps it within one shared-memory bcopy segment (8 KiB by default; UCX
/// sends up to 8256 bytes in one, `ucx_info -e`). A third of it, so a batch
/// holds three frames or more (1 KiB payloads: seven).
constexpr size_t BatchMax = 7936, BatchFrameMax = BatchMax / 3;
/// A frame whose body is larger than this goes to UCX while UCX still
/// holds earlier sends of its connection (docs/transport.md, "Large
/// frames"); smaller ones wait in the backlog.
inline bool isLarge(size_t BodySize) {
  static_assert(Transport::LargeBody == ImmediateMax, "one notion of large");
  return BodySize > ImmediateMax;
}
/// At most this many large frames of one connection are in UCX at once;
/// the rest wait in the backlog. UCX 1.13 slows down with every rendezvous
/// it holds (its pending queues are walked per progress): 5,000 16 KiB
/// sends in flight ran at 1,900 msgs/s where 8 at a time ran at 40,000.
constexpr unsigned MaxLargeInFlight = 8;
/// At most this many large frames of one connection wait in its backlog
/// behind those: send() then progresses UCX until half of them have left
/// (makeRoom()), as a UCX user keeping a window of sends does, instead of
/// queueing ahead of a pipeline that only progress() moves.
constexpr unsigned MaxLargeWaiting = 8;

class UcxTransport;

/// The length of the socket address in \p SS.
inline socklen_t sockLen(const sockaddr_storage &SS) {
  return SS.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

/// Whether a listener on \p SS can be opened (UcxTransportListen.cpp): a
/// bind as UCX will do it (with SO_REUSEADDR if \p ReuseAddr), and an error
/// that names the cause where it fails (in use, and by what; permission;
/// an address this host does not have). \p Where names the address.
Error checkListenAddress(const sockaddr_storage &SS, StringRef Where,
                         bool ReuseAddr);
/// Whether UCX in \p Context has a transport on the network interface(s)
/// connections to \p SS arrive on; UCX drops every connection request
/// that arrives elsewhere, so a listener there could accept no one.
Error checkListenDevice(ucp_context_h Context, const sockaddr_storage &SS,
                        StringRef Where);

/// A large body kept by reference (Transport::sendShared) instead of in a
/// copy: the bytes, and what keeps them alive.
struct SharedBody {
  std::shared_ptr<const void> Owner;
  StringRef Bytes;
};

/// A send that did not leave at once: owns copies of the header and body
/// until UCX is done with them (UCX 1.13 has no
/// UCP_AM_SEND_FLAG_COPY_HEADER), or a reference to a shared body. Counted
/// in its connection's Held while UCX holds it.
struct SendOp {
  UcxTransport *T;
  ConnId Conn;
  /// One frame's token and header fit inline; a batch's may not.
  SmallString<48> Header;
  /// A copied body, or a batch: filled without being cleared first.
  ByteBuffer Body;
  /// Empty once reported (the connection died first); the op then lives on
  /// only until UCX lets go of it.
  unique_function<void(Error)> Done;
  /// Counted in its connection's LargeHeld too.
  bool Large = false;
  /// The body instead of Body when it is not a copy: shared (Owner set
  /// once UCX keeps the send), or borrowed for one ucp_am_send_nbx call.
  SharedBody Shared = {};
  StringRef body() const {
    return Shared.Bytes.data() ? Shared.Bytes : StringRef(Body.data(), Body.size());
  }
};

/// An active message waiting in a connection's backlog (coalesced, or
/// behind a send UCX still holds): one frame, or a batch of small ones.
struct Outgoing {
  unsigned AmId;
  std::string Header; ///< Token included.
  ByteBuffer Body;
  /// One per frame that has a callback.
  std::vector<unique_function<void(Error)>> Done;
  size_t Frames = 0;
  /// What this adds to its connection's CopiedBytes (a large body copied).
  size_t Copied = 0;
  /// A large frame (counted in its connection's LargeWaiting).
  bool Large = false;
  SharedBody Shared = {}; ///< As in SendOp.
  StringRef body() const {
    return Shared.Owner ? Shared.Bytes : StringRef(Body.data(), Body.size());
  }
  /// Whether this is an open batch with room for one more frame of
  /// \p Size bytes.
  bool takes(size_t Size) const {
    return AmId == BatchAmId &&
           Body.size() + BatchRecordOverhead + Size <= BatchMax;
  }
};

/// Buffers that rendezvous frames are received into, kept for the next
/// ones: a frame's body is written once, by UCX, into memory that is
/// neither allocated nor cleared for it (docs/transport.md, "Large
/// frames"). Capacities are powers of two from 4 KiB to 16 MiB (larger
/// bodies get a buffer of their own size); at most KeepPerClass buffers of
/// a size and MaxKeptBytes in all wait for reuse. Every buffer is
/// BufferedAlign-aligned, so the handler may run code on the body in place
/// (TransportHandler::onBufferedFrame).
class RecvPool {
public:
  static constexpr unsigned MinClass = 12, MaxClass = 24;
  static constexpr size_t KeepPerClass = 64, MaxKeptBytes = 64 << 20;

  /// A buffer of at least \p Size bytes (null if there is no memory for
  /// it); \p Cap gets its capacity.
  char *take(size_t Size, size_t &Cap) {
    unsigned Class = classOf(Size);
    if (Class > MaxClass) {
      Cap = alignTo(Size, TransportHandler::BufferedAlign);
    } else {
      Cap = size_t(1) << Class;
      std::vector<char *> &L = Free[Class - MinClass];
      if (!L.empty()) {
        char *P = L.back();
        L.pop_back();
        Kept -= Cap;
        ++Reused;
        return P;
      }
    }
    ++Allocated;
    return static_cast<char *>(
        std::aligned_alloc(TransportHandler::BufferedAlign, Cap));
  }
  /// Returns a buffer from take() of capacity \p Cap.
  void give(char *P, size_t Cap) {
    unsigned Class = classOf(Cap);
    if (Class <= MaxClass && Free[Class - MinClass].size() < KeepPerClass &&
        Kept + Cap <= MaxKeptBytes) {
      Free[Class - MinClass].push_back(P);
      Kept += Cap;
    } else {
      std::free(P);
    }
  }
  ~RecvPool() {
    for (auto &L : Free)
      for (char *P : L)
        std::free(P);
  }
  uint64_t Allocated = 0, Reused = 0;

private:
  static unsigned classOf(size_t Size) {
    return std::max<unsigned>(MinClass,
                              Log2_64_Ceil(std::max<size_t>(Size, 1)));
  }
  std::vector<char *> Free[MaxClass - MinClass + 1];
  size_t Kept = 0;
};

/// A frame received on a connection, waiting for delivery in order: an
/// eager frame that arrived behind another (a copy), or a rendezvous frame
/// (received into a RecvPool buffer; Ready once UCX has written it all).
/// Shared by the connection's queue and, while UCX writes into it, by the
/// transport's Receiving map, so that dropping the connection never frees
/// memory UCX is writing into.
struct Arrival {
  UcxTransport *T = nullptr;
  ConnId Conn = 0;
  ucp_ep_h Ep = nullptr; ///< The endpoint a rendezvous frame arrives on.
  SmallString<TokenSize + 64> Header;
  std::string Copy;        ///< An eager frame's body.
  RecvPool *Pool = nullptr; ///< Owner of Big, if any.
  char *Big = nullptr;     ///< A rendezvous frame's body
  size_t Length = 0, Cap = 0; ///< and its length and capacity.
  bool Ready = false; ///< False while a rendezvous receive is in flight.
  ~Arrival() {
    if (Big)
      Pool->give(Big, Cap);
  }
};

class UcxTransport final : public Transport {
public:
  static Expected<std::unique_ptr<UcxTransport>>
  create(const UcxTransportOptions &Opts);
  ~UcxTransport() override;

  void setHandler(TransportHandler *H) override {
    (Handler == &Record ? Real : Handler) = H;
  }
  Expected<uint16_t> listen(StringRef Host, uint16_t Port) override;
  Expected<ConnId> connect(StringRef Host, uint16_t Port) override;
  Expected<std::string> address() override;
  Expected<ConnId> connectAddress(StringRef Address) override;
  void send(ConnId C, StringRef Header, StringRef Body,
            unique_function<void(Error)> Done) override;
  bool trySendNow(ConnId C, StringRef Header, StringRef Body) override;
  bool trySendFrameNow(ConnId C, char *Frame, size_t HeaderSize,
                       size_t Size) override;
  void sendWithRoom(ConnId C, StringRef Header, StringRef Body,
                    unique_function<void(Error)> Done) override;
  void sendShared(ConnId C, StringRef Header, StringRef Body,
                  const std::shared_ptr<const void> &Owner,
                  unique_function<void(Error)> Done) override;
  void disconnect(ConnId C) override;
  void abandon(ConnId C) override;
  std::string peerName(ConnId C) const override {
    auto It = Conns.find(C);
    return It == Conns.end() ? std::string() : It->second.Peer;
  }
  bool progress() override;
  Error wait(int TimeoutMs) override;
  bool canWaitHere() const override { return !InUcx; }
  void signal() override;
  TransportStats stats() const override {
    TransportStats S = Stats;
    S.RecvBuffersAllocated = Pool.Allocated;
    S.RecvBuffersReused = Pool.Reused;
    S.MailboxRegisteredBytes = RingMemory.Bytes + AreaMemory.Bytes;
    S.MailboxAreas = AreaMemory.Regions;
    return S;
  }

private:
  struct Conn {
    ucp_ep_h Ep = nullptr;
    /// False for the reply endpoint of a peer that connected by address:
    /// UCX made it and UCX closes it (closing it ourselves trips UCX).
    bool Owned = true;
    /// Made by worker address (ours, or a peer's reply endpoint): UCX may
    /// report nothing when the peer closes it, so its goodbye ends it.
    bool ByAddress = false;
    /// The peer said goodbye (it closes the connection on purpose).
    bool PeerClosing = false;
    std::string Peer; ///< For messages: host:port or "address peer".
    std::deque<std::shared_ptr<Arrival>> Queue;
    /// The token the peer gave us (0: none yet, send with REPLY), and the
    /// one we gave the peer (0: not yet welcomed).
    uint64_t PeerToken = 0;
    uint64_t Token = 0;
    /// Sends on this connection UCX still holds. While there are any, new
    /// frames wait in Backlog (small ones batched; with coalescing on)
    /// instead of touching UCX:
    /// the sender backs off from a full FIFO rather than retrying it, and
    /// the receiver gets many frames per active message.
    unsigned Held = 0;
    /// Those of them that are large frames (at most MaxLargeInFlight).
    unsigned LargeHeld = 0;
    /// Bytes of copied large bodies in Backlog (see MaxCopiedBacklog).
    size_t CopiedBytes = 0;
    /// Bytes Pending's frames take, their copies and entries (also held to
    /// MaxCopiedBacklog).
    size_t PendingBytes = 0;
    /// Large frames in Backlog (see MaxLargeWaiting), and whether send()
    /// gave up waiting for them (until they have left).
    unsigned LargeWaiting = 0;
    bool NoLargeWait = false;
    /// send() gave up waiting for room (nothing moved for 5 s): it waits
    /// again once the copies are down to half of MaxCopiedBacklog.
    bool NoCopyWait = false;
    std::deque<Outgoing> Backlog;
    /// The progress() round of this connection's last frame sent at once.
    uint64_t LastRound = 0;
    /// Frames (header + body bytes) larger than this are not tried as an
    /// immediate send: UCX completes one at once only by its short
    /// protocol (93 bytes on shared memory, 8185 over TCP, ucx_info -e),
    /// and a frame that failed to while the request path right after sent
    /// it at once was above that size. Learned per connection (post());
    /// every ImmediateRetry-th frame above it is tried again, so a failure
    /// that was a full FIFO after all is not remembered for long.
    size_t ImmediateCeiling = SIZE_MAX;
    unsigned ImmediateSkipped = 0;
    // Mailboxes (docs/transport.md, "Mailboxes").
    /// The ring we offered the peer in our welcome (it writes, we poll).
    std::unique_ptr<ucx::InRing> In;
    /// The ring the peer offered us, if we accepted it (we write).
    std::unique_ptr<ucx::OutRing> Out;
    /// Frames handed to the active-message path of this connection (as a
    /// sender) and delivered from it (as a receiver), mod 2^32: a mailbox
    /// frame carries the sender's count, and the receiver delivers it only
    /// once it has delivered that many frames of the AM path, so the two
    /// paths keep the order of the sends.
    uint32_t AmSent = 0, AmDelivered = 0;
    /// While a ring's frames are handed out, AM frames that arrive (from
    /// a handler that progresses us) wait in Queue, so that they are not
    /// delivered before the AM frame the drain was for.
    bool Draining = false;
    /// A frame sent while the peer's ring had no credit, and every frame
    /// sent after it (mailbox or not), in order: progress() writes them as
    /// credit comes back (flushPending()), so nothing overtakes them.
    struct Waiting {
      bool Mailbox; ///< Goes into the ring; else an active message.
      std::string Header, Body;
      unique_function<void(Error)> Done;
    };
    std::deque<Waiting> Pending;
    static size_t pendingBytes(const Waiting &W) {
      return sizeof(Waiting) + W.Header.size() + W.Body.size();
    }
  };

  UcxTransport() = default;
  /// The connection \p C, or null. Remembers the last one found: frames
  /// come in runs on one connection.
  Conn *findConn(ConnId C) {
    if (C == MemoId && MemoConn)
      return MemoConn;
    auto It = Conns.find(C);
    if (It == Conns.end())
      return nullptr;
    MemoId = C;
    return MemoConn = &It->second;
  }
  void eraseConn(std::map<ConnId, Conn>::iterator It) {
    if (MemoConn == &It->second)
      MemoConn = nullptr;
    dropMailboxes(It->first, It->second);
    Conns.erase(It);
  }
  ConnId addConn(ucp_ep_h Ep, std::string Peer);
  /// send() and sendWithRoom(): \p Room says whether the TokenSize bytes
  /// before \p Header are ours to write the token into.
  void sendFrame(ConnId C, StringRef Header, StringRef Body,
                 unique_function<void(Error)> &&Done, bool Room);
  /// trySendNow()'s mailbox part, out of line so that the AM path's frame
  /// stays small: the frame went into \p Co's ring or behind the frames
  /// waiting for its credit (Taken), must take the general path
  /// (Declined), or goes by active message (UseAm).
  enum class SlotOutcome { Taken, Declined, UseAm };
  LLVM_ATTRIBUTE_NOINLINE SlotOutcome trySlot(Conn &Co, ConnId C,
                                              StringRef Header,
                                              StringRef Body);
  /// trySendNow() with coalescing, for a frame that would join the open
  /// batch at the end of its connection's backlog: appends it there.
  bool appendToOpenBatch(Conn &Co, StringRef Header, StringRef Body);
  /// Copies of \p Co's frames have left: send() waits for room again, if
  /// it gave up, once they are down to half of MaxCopiedBacklog.
  void copiesLeft(Conn &Co) const {
    if (LLVM_UNLIKELY(Co.NoCopyWait) &&
        Co.CopiedBytes + Co.PendingBytes <= MaxCopiedBacklog / 2)
      Co.NoCopyWait = false;
  }
  /// Waits for room (makeRoom()) when \p Co's backlog and Pending are over
  /// their bounds, unless in a UCX callback or already waiting.
  void waitIfOverBounds(Conn &Co, ConnId C) {
    if (LLVM_UNLIKELY(overBounds(Co)) && !InUcx && !InWait)
      makeRoom(C);
  }
  /// Whether \p Co's backlog is over its bounds: makeRoom() then waits.
  bool overBounds(const Conn &Co) const {
    return (Co.CopiedBytes + Co.PendingBytes > MaxCopiedBacklog &&
            !Co.NoCopyWait) ||
           (Co.LargeWaiting > MaxLargeWaiting && !Co.NoLargeWait);
  }
  /// Sends \p Header + \p Body as one InlineAmId message that UCX
  /// completes at once; false (nothing sent) when UCX cannot right now or
  /// the frame is too big for it.
  LLVM_ATTRIBUTE_ALWAYS_INLINE bool sendInline(Conn &Co, StringRef Header,
                                               StringRef Body);
  /// Whether a frame of \p Co may leave at once (trySendNow()): the peer's
  /// token known, nothing of it held by UCX or in the backlog, and (with
  /// coalescing) the first frame of this progress() round.
  bool leavesAtOnce(const Conn &Co) const {
    return Co.PeerToken && !Co.Held && Co.Backlog.empty() &&
           !(Coalesce && Co.LastRound == Round);
  }
  /// Whether an inline message of \p Len bytes (token and size included)
  /// is one UCX takes at once on \p Co.
  static bool inlineFits(const Conn &Co, size_t Len) {
    return Len <= InlineMax && Len <= Co.ImmediateCeiling;
  }
  /// What trySendNow() records for a frame sendInline() sent.
  void sentInline(Conn &Co) {
    Co.LastRound = Round;
    ++Co.AmSent;
    ++Stats.TokenFrames;
  }
  /// sendInline() of \p Len bytes at \p Buf laid out as an InlineAmId
  /// message: room for the token, the header's size, the header, the body.
  LLVM_ATTRIBUTE_ALWAYS_INLINE bool postInline(Conn &Co, char *Buf,
                                               size_t HeaderSize, size_t Len);
  /// The body of a frame going into the backlog, kept in \p O: by
  /// reference when sendShared() is sending it, else copied. (post() only
  /// borrows a shared body: see there.)
  void keepBody(Outgoing &O, StringRef Body) {
    if (Sharing) {
      O.Shared = SharedBody{*Sharing, Body};
      Sharing = nullptr; // One frame's body.
    } else {
      O.Body.assign(Body.begin(), Body.end());
    }
  }
  /// Whether a frame of \p Bytes is worth an immediate send on \p Co (see
  /// Conn::ImmediateCeiling).
  static bool tryImmediate(Conn &Co, size_t Bytes) {
    return LLVM_LIKELY(Bytes <= Co.ImmediateCeiling) ||
           ++Co.ImmediateSkipped % ImmediateRetry == 0;
  }
  /// Sends one active message on \p Co (connection \p C).
  void post(Conn &Co, ConnId C, unsigned AmId, StringRef Header, StringRef Body,
            bool Reply, unique_function<void(Error)> &&Done);
  /// A frame that must wait (coalescing, or UCX holds a send of \p Co):
  /// into the backlog, which a burst hands to UCX in full batches.
  LLVM_ATTRIBUTE_NOINLINE void backlog(Conn &Co, ConnId C, StringRef Header,
                                       StringRef Body,
                                       unique_function<void(Error)> &&Done);
  /// Adds a token frame to \p Co's backlog.
  void enqueue(Conn &Co, ConnId C, StringRef Header, StringRef Body,
               unique_function<void(Error)> &&Done);
  /// Hands \p Co's backlog to UCX: while UCX holds nothing on it, or, with
  /// \p All, everything (UCX keeps an endpoint's sends in order).
  void flushBacklog(Conn &Co, ConnId C, bool All);
  /// flushBacklog() for every backlogged connection; false if there was
  /// none.
  LLVM_ATTRIBUTE_NOINLINE bool flushBacklogs();
  /// Runs the queued send completions and disconnects (progress()).
  LLVM_ATTRIBUTE_NOINLINE void report();
  /// progress() when there are Chores before the pass, and what follows.
  LLVM_ATTRIBUTE_NOINLINE bool progressWithChores();
  LLVM_ATTRIBUTE_NOINLINE void doChores();
  /// Starts \p Op on \p Co's endpoint (the request path, with AM send
  /// \p Flags) and tracks it until UCX lets go of it. True if UCX sent it
  /// at once. When UCX keeps it, \p Owner (if any) becomes the owner of
  /// the body \p Op borrowed.
  bool submit(Conn &Co, SendOp *Op, unsigned AmId, uint32_t Flags,
              const std::shared_ptr<const void> *Owner = nullptr);
  /// Gives the (empty) \p Body room for a batch: a kept one, or BatchMax.
  void takeBatchBody(ByteBuffer &Body);
  /// Keeps the buffer of \p Body (emptied) for a later batch, if it is a
  /// batch's size and fewer than KeptBatches wait.
  void keepBatchBody(ByteBuffer &Body);
  /// An op for a frame of connection \p C, from FreeOps if one waits there.
  inline SendOp *takeOp(ConnId C, unique_function<void(Error)> &&Done);
  /// Gives back an op UCX is done with (its Done already taken).
  void dropOp(SendOp *Op);
  /// Delivers a frame that arrived on \p C, or queues it behind earlier
  /// ones (hold()). The steady state, inline: nothing waits before it.
  ucs_status_t arrived(ConnId C, Conn &Co, StringRef Header, void *Data,
                       size_t Length, bool Rndv) {
    if (LLVM_LIKELY(!Rndv && Co.Queue.empty() && !Co.Draining)) {
      deliverAm(C, Co, Header,
                StringRef(static_cast<const char *>(Data), Length));
      return UCS_OK;
    }
    return hold(C, Co, Header, Data, Length, Rndv);
  }
  /// Hands a frame of the AM path to the handler (after the mailbox frames
  /// sent before it, if the connection has a ring).
  void deliverAm(ConnId C, Conn &Co, StringRef Header, StringRef Body) {
    if (LLVM_UNLIKELY(ringHolds(Co)))
      return deliverAfterRing(C, Co, Header, Body, {});
    ++Co.AmDelivered;
    Handler->onFrame(C, Header, Body);
  }
  /// deliverAm() of a rendezvous frame received into a pooled buffer,
  /// which the handler may use in place (onBufferedFrame).
  void deliverBuffered(ConnId C, Conn &Co, StringRef Header,
                       MutableArrayRef<char> Body) {
    if (LLVM_UNLIKELY(ringHolds(Co)))
      return deliverAfterRing(C, Co, Header, StringRef(), Body);
    ++Co.AmDelivered;
    Handler->onBufferedFrame(C, Header, Body);
  }
  /// Whether \p Co's ring holds a frame: one written before an AM frame
  /// being delivered must go first.
  static bool ringHolds(const Conn &Co) {
    return Co.In && Co.In->Accepted && Co.In->hasNext();
  }
  /// deliverAm() (or, with \p Buffer, deliverBuffered()) when the ring
  /// holds frames: those written before this frame go first.
  LLVM_ATTRIBUTE_NOINLINE void deliverAfterRing(ConnId C, Conn &Co,
                                                StringRef Header,
                                                StringRef Body,
                                                MutableArrayRef<char> Buffer);
  /// Queues a frame on \p Co, receiving it first when it is a rendezvous.
  LLVM_ATTRIBUTE_NOINLINE ucs_status_t hold(ConnId C, Conn &Co,
                                            StringRef Header, void *Data,
                                            size_t Length, bool Rndv);
  void welcome(ConnId C, Conn &Co);
  // Mailboxes.
  /// Writes a frame into the ring the peer of \p Co offered (which
  /// exists) through its lane, ringing the doorbell when the lane says to:
  /// Yes, NoCredit, or No (see mailbox::Lane::Wrote; never Doorbell).
  mailbox::Lane::Wrote writeSlot(Conn &Co, ConnId C, StringRef Header,
                                 StringRef Body);
  /// Opens \p Co's lane to the runtime while a frame may go straight into
  /// the ring (its endpoint is up, nothing waits in Pending), else closes
  /// it. Called wherever either changes.
  void gateLane(Conn &Co);
  std::shared_ptr<mailbox::Lane> lane(ConnId C) override;
  void laneDoorbell(ConnId C) override;
  /// sendFrame() once no frame of \p Co waits in Pending.
  void sendFrameNow(ConnId C, Conn *Co, StringRef Header, StringRef Body,
                    unique_function<void(Error)> &&Done, bool Room);
  /// Sends what waits in \p C's Pending, in order, while the ring has
  /// credit; with \p All, the frames the ring has no room for go as AMs.
  /// Sends made meanwhile do not wait for room (makeRoom() calls this).
  void flushPending(ConnId C, Conn &Co, bool All);
  /// Puts a frame behind those in \p Co's Pending (closing the lane, and
  /// listing the connection for progress() when it is the first), then, as
  /// for the backlog, waits for room when Pending is over its bounds.
  void queuePending(ConnId C, Conn &Co, bool Mailbox, StringRef Header,
                    StringRef Body, unique_function<void(Error)> &&Done);
  LLVM_ATTRIBUTE_NOINLINE bool flushPendings();
  /// Reports the connections in Ended closed, each once what its peer sent
  /// before the goodbye has been delivered (its ring drained, no frame
  /// queued), or after a second at most.
  LLVM_ATTRIBUTE_NOINLINE void endClosedPeers();
  /// Delivers the frames waiting in the ring of \p C (whose Conn is
  /// \p Co), in order, as long as they were written after at most
  /// \p AmLimit frames of the AM path (all of them delivered). Returns
  /// false if \p C is gone; sets \p Took if it took a frame.
  /// With \p ThenQueue, the AM frames that wait in \p C's queue (they came
  /// while the ring was drained) are delivered after it.
  /// Inlined into its two callers: each gets a copy for its arguments.
  LLVM_ATTRIBUTE_ALWAYS_INLINE bool drainRing(ConnId C, Conn *Co,
                                              uint32_t AmLimit,
                                              unsigned MaxFrames,
                                              bool ThenQueue, bool &Took);
  /// Takes up to RingBurst frames from every ring; true if any.
  LLVM_ATTRIBUTE_NOINLINE bool pollRings();
  /// Hands released slots back to the sender of \p Co's ring.
  void releaseSlots(Conn &Co);
  /// Whether a frame waits in any ring (without taking it): what an idle
  /// progress() pays per ring, a pointer and an acquire load.
  bool ringsReady() {
    for (const PolledRing &R : Rings)
      if (R.In->hasNext())
        return true;
    return false;
  }
  /// Tells every ring's sender that we sleep (or no longer).
  void announceSleep(bool Asleep);
  void ringDoorbell(Conn &Co, ConnId C);
  /// Tells \p Co's peer that we close the connection, after every frame
  /// sent on it (the same endpoint keeps the order).
  void sayGoodbye(Conn &Co, ConnId C);
  /// Sends the MailboxAmId message \p Kind to \p Co's peer, with
  /// \p Data.
  void postControl(Conn &Co, ConnId C, uint8_t Kind,
                   StringRef Data = StringRef());
  /// Asks \p Co's peer for its ring's large-frame area (once).
  LLVM_ATTRIBUTE_NOINLINE void askForArea(Conn &Co, ConnId C);
  /// The area messages of \p Co, from onMailboxAm(): a request (we are
  /// the receiver), an offer (the sender), a drop (the receiver).
  void onAreaAsk(Conn &Co, ConnId C, StringRef Data);
  void onAreaOffer(Conn &Co, ConnId C, StringRef Data);
  void onAreaDrop(Conn &Co, StringRef Data);
  /// A sender declines the ring we offered: it goes.
  void onRingDrop(Conn &Co, StringRef Data);
  /// What a send on \p Co says when it finds the connection closed under
  /// it (its error handler ran inside UCX's send call).
  static std::string lostWords(const Conn &Co) {
    return formatv("send to {0} failed: the connection was lost", Co.Peer)
        .str();
  }
  /// How a connection to \p Peer that said goodbye is reported.
  static std::string closedWords(StringRef Peer) {
    return formatv("connection to {0} closed by the peer", Peer).str();
  }
  /// Frees \p Co's rings (a ring a delivery still reads is kept until it
  /// returns).
  void dropMailboxes(ConnId C, Conn &Co);
  static ucs_status_t onMailboxAm(void *Arg, const void *Header,
                                  size_t HeaderLen, void *Data, size_t Length,
                                  const ucp_am_recv_param_t *Param);
  /// The open connection whose token starts \p Header (setting \p C), or
  /// null: the frame is then dropped and counted.
  Conn *byToken(const void *Header, ConnId &C);
  /// The open connection of the reply endpoint \p Param names (setting
  /// \p C), or null.
  Conn *byReplyEp(const ucp_am_recv_param_t *Param, ConnId &C);
  Expected<ConnId> createEp(ucp_ep_params_t &P, std::string Peer);
  void closeEp(ucp_ep_h Ep, bool Force);
  void deliverReady(ConnId C);
  void lost(ucp_ep_h Ep, ucs_status_t S);
  /// Queues \p Done with \p Err (empty: success) for progress(); nothing
  /// is kept for a send without a callback.
  void complete(unique_function<void(Error)> &&Done, StringRef Err) {
    Activity = true;
    if (Done) // Most sends have no callback: this much is inlined.
      queueCompletion(std::move(Done), Err);
  }
  LLVM_ATTRIBUTE_NOINLINE void
  queueCompletion(unique_function<void(Error)> &&Done, StringRef Err) {
    Completions.emplace_back(std::move(Done), Err.str());
    Chores = true;
  }
  /// Moves the endpoints in Closing on: a finished flush becomes a close
  /// (or, failed, a forced one), a finished close is freed, and a flush
  /// still under way past its deadline, or any with \p Expire, is given up:
  /// the endpoint is closed by force.
  LLVM_ATTRIBUTE_NOINLINE void reapClosing(bool Expire = false);
  /// ucp_ep_close_nbx() of \p Ep, flushed already (or, with \p Force, not:
  /// UCX then cancels what it holds for it); tracked in Closing until done.
  void startClose(ucp_ep_h Ep, bool Force);

  static void onConnRequest(ucp_conn_request_h Req, void *Arg);
  static void onEpError(void *Arg, ucp_ep_h Ep, ucs_status_t S);
  static ucs_status_t onAm(void *Arg, const void *Header, size_t HeaderLen,
                           void *Data, size_t Length,
                           const ucp_am_recv_param_t *Param);
  static ucs_status_t onInlineAm(void *Arg, const void *Header,
                                 size_t HeaderLen, void *Data, size_t Length,
                                 const ucp_am_recv_param_t *Param);
  static ucs_status_t onTokenAm(void *Arg, const void *Header,
                                size_t HeaderLen, void *Data, size_t Length,
                                const ucp_am_recv_param_t *Param);
  static ucs_status_t onBatch(void *Arg, const void *Header, size_t HeaderLen,
                              void *Data, size_t Length,
                              const ucp_am_recv_param_t *Param);
  static ucs_status_t onWelcome(void *Arg, const void *Header,
                                size_t HeaderLen, void *Data, size_t Length,
                                const ucp_am_recv_param_t *Param);
  static void onSendDone(void *Req, ucs_status_t S, void *User);
  static void onRecvDone(void *Req, ucs_status_t S, size_t Len, void *User);
  /// Ends a rendezvous receive: \p A is complete, or dropped with \p S.
  void received(Arrival *A, ucs_status_t S);
  /// Progresses UCX (and writes Pending's frames as credit comes back)
  /// until \p C's copied backlog and Pending are down to half of
  /// MaxCopiedBacklog and its waiting large frames to half of
  /// MaxLargeWaiting (or the connection fails, or nothing moves for 5 s),
  /// with every delivery (our rings' frames too) recorded for the next
  /// progress().
  LLVM_ATTRIBUTE_NOINLINE void makeRoom(ConnId C);
  /// Delivers what was recorded while send() made room, in order.
  LLVM_ATTRIBUTE_NOINLINE void replay();

  /// The handler while send() makes room: frames and accepts are kept (with
  /// copies) for the next progress(), so that no callback runs inside
  /// send(). It stays in place until then, so that later deliveries keep
  /// their order behind the recorded ones.
  struct Recorder final : TransportHandler {
    struct Event {
      ConnId Conn;
      bool Accept;
      std::string Header, Body;
    };
    std::deque<Event> Events;
    void onFrame(ConnId C, StringRef H, StringRef B) override {
      Events.push_back({C, false, H.str(), B.str()});
    }
    void onAccept(ConnId C) override { Events.push_back({C, true, {}, {}}); }
    void onDisconnect(ConnId, StringRef) override {} // report() does these.
  } Record;
  TransportHandler *Real = nullptr; ///< Handler's value while recording.

  ucp_context_h Context = nullptr;
  ucp_worker_h Worker = nullptr;
  ucp_listener_h Listener = nullptr;
  /// Listeners set SO_REUSEADDR (UCX_TCP_CM_REUSEADDR, y unless the
  /// environment says otherwise).
  bool ReuseAddr = true;
  int WakeFd = -1;
  TransportHandler *Handler = nullptr;
  /// Declared before Conns: arrivals give their buffers back to it.
  RecvPool Pool;
  /// Memory registered for mailboxes: rings offered and flags, and
  /// large-frame areas (declared before Conns, whose regions count here).
  ucx::Tally RingMemory, AreaMemory;
  /// Rendezvous receives UCX has not completed, on open and closed
  /// connections alike, and how many of them each endpoint carries.
  DenseMap<Arrival *, std::shared_ptr<Arrival>> Receiving;
  DenseMap<ucp_ep_h, unsigned> EpReceives;
  /// Endpoints disconnect() closes once their receives are done: UCX 1.13
  /// cannot flush-close an endpoint that has rendezvous receives in flight
  /// (it asserts when it destroys the endpoint).
  DenseSet<ucp_ep_h> CloseWhenReceived;
  std::map<ConnId, Conn> Conns; ///< Erased only through eraseConn().
  ConnId MemoId = 0;
  Conn *MemoConn = nullptr;
  DenseMap<ucp_ep_h, ConnId> ByEp;
  ConnId NextConn = 1;
  /// Work to report from the next progress(): send completions (an empty
  /// string is success) and disconnects.
  std::deque<std::pair<unique_function<void(Error)>, std::string>>
      Completions;
  std::deque<std::pair<ConnId, std::string>> Lost;
  /// An endpoint being closed (closeEp()): flushed first, so that what was
  /// sent on it reaches the peer, then closed. A flush not done by its
  /// Deadline (a peer that stopped answering: SIGSTOP, a hung host, whose
  /// kernel still acknowledges TCP) is given up and the endpoint closed by
  /// force, which cancels what UCX still holds for it. A plain
  /// ucp_ep_close_nbx() flushes too, but UCX 1.13 cannot force a close
  /// already under way ("has already been closed"), and
  /// ucp_worker_destroy() of an endpoint with requests still pending
  /// reports a bug and aborts the process.
  struct ClosingEp {
    ucp_ep_h Ep = nullptr;
    void *Req = nullptr; ///< The flush (Flushing) or the close in flight.
    bool Flushing = false;
    std::chrono::steady_clock::time_point Deadline;
  };
  /// How long an endpoint's flush may take before it is closed by force
  /// (the destructor allows less: DestroyLimit in all).
  static constexpr std::chrono::seconds CloseFlushLimit{60};
  /// How long the destructor waits for its peers in all (rendezvous
  /// receives, then flushes) before it closes the rest by force.
  static constexpr std::chrono::seconds DestroyLimit{2};
  /// Endpoint flushes and closes in flight, and their endpoints: a frame
  /// that arrives on a closing endpoint belongs to no connection and is
  /// dropped.
  std::vector<ClosingEp> Closing;
  DenseSet<ucp_ep_h> ClosingEps;
  /// Connections whose backlog may be non-empty.
  SmallVector<ConnId, 4> Backlogged;
  /// progress() calls so far (see Conn::LastRound).
  uint64_t Round = 1;
  /// The owner of the body sendShared() is sending, for keepBody() and
  /// post(); null otherwise.
  const std::shared_ptr<const void> *Sharing = nullptr;
  bool Coalesce = true;
  /// Bytes of large bodies a connection's backlog may hold in copies before
  /// send() waits for room (makeRoom()): a sender that copies faster than
  /// the network carries them would otherwise queue without bound (tc-bench's
  /// local mode queued 1.1 GB of 64 KiB frames). Bodies sent with
  /// sendShared() are not copies and do not count.
  size_t MaxCopiedBacklog = 32 << 20;
  /// Sends UCX has not completed, on open and closed connections alike.
  SmallPtrSet<SendOp *, 16> Sending;
  /// Ops UCX let go of, kept for the next sends (at most OpPoolMax): a
  /// frame that does not leave at once costs no allocation.
  std::vector<std::unique_ptr<SendOp>> FreeOps;
  /// Emptied batch bodies (capacity BatchMax or more), for the next batches:
  /// a batch takes one of these instead of allocating, and its op's old
  /// body comes back here when the batch is submitted (flushBacklog()).
  std::vector<ByteBuffer> FreeBatches;
  std::mt19937_64 Random{std::random_device{}()};
  TransportStats Stats;
  bool Activity = false;
  /// Possibly true while Completions, Lost, Backlogged or Closing is not
  /// empty (set where they grow, recomputed by doChores()): an idle
  /// progress() tests this one flag beside ucp_worker_progress().
  bool Chores = false;
  /// Set by the destructor: no handler callback may run any more.
  bool Destroying = false;
  /// True inside ucp_worker_progress() (progressUcx()), where handlers of
  /// active messages run: UCX must not be progressed again from there (UCX
  /// 1.13 asserts `worker->inprogress++ == 0` and aborts). So send() does
  /// not wait for room then, a progress() called by such a handler does
  /// all but progress UCX, and wait() returns at once.
  bool InUcx = false;
  /// Inside makeRoom() or flushPending(): sends do not wait for room
  /// (again).
  bool InWait = false;
  unsigned progressUcx() {
    if (LLVM_UNLIKELY(InUcx))
      return 0;
    InUcx = true;
    unsigned N = ucp_worker_progress(Worker);
    InUcx = false;
    return N;
  }
  // Mailboxes.
  bool UseMailbox = true;
  mailbox::Geometry Shape;
  /// The most large-frame areas registered at once; a request beyond is
  /// declined (UcxTransportOptions::MailboxMaxAreas).
  uint64_t MaxAreas = UINT64_MAX;
  /// UcxTransportOptions::TestUnmappableAreas.
  bool UnmappableAreas = false;
  unsigned SpinUs = 50;
  /// A ring a sender accepted, with its connection (a std::map node: it
  /// does not move; dropMailboxes() removes the entry before the
  /// connection goes).
  struct PolledRing {
    ConnId C;
    Conn *Co;
    ucx::InRing *In;
  };
  /// What progress() polls.
  SmallVector<PolledRing, 4> Rings;
  /// Bumped whenever a ring is dropped (its connection closed, or the
  /// transport goes): a delivery that sees it unchanged after its handler
  /// knows its connection and ring are still there without a lookup.
  uint64_t RingsDropped = 0;
  /// Rings of closed connections that a delivery still reads.
  std::vector<std::unique_ptr<ucx::InRing>> Retired;
  /// Connections whose Pending may be non-empty.
  SmallVector<ConnId, 4> PendingConns;
  /// Connections made by address whose peer said goodbye, with when: UCX
  /// may report nothing when such a peer closes (a reply endpoint is
  /// UCX's; endpoints UCX matched report nothing either), so
  /// endClosedPeers() ends them here.
  SmallVector<std::pair<ConnId, std::chrono::steady_clock::time_point>, 2>
      Ended;
};

//===----------------------------------------------------------------------===//
// Inline parts of the send path that other files call too
//===----------------------------------------------------------------------===//

inline void UcxTransport::post(Conn &Co, ConnId C, unsigned AmId,
                               StringRef Header, StringRef Body, bool Reply,
                               unique_function<void(Error)> &&Done) {
  // First try to send from the caller's buffers, completing at once. UCX
  // 1.13 refuses that (UCS_ERR_NO_RESOURCE) for every REPLY send, and for a
  // full FIFO; the request path then takes copies.
  size_t Bytes = Header.size() + Body.size();
  bool Refused = false;
  if (LLVM_UNLIKELY(!Co.Ep)) { // Closed by a send just before (see submit).
    complete(std::move(Done), lostWords(Co));
    return;
  }
  if (!Reply && !Co.Held && Body.size() <= ImmediateMax &&
      tryImmediate(Co, Bytes)) {
    // UCX reads only the fields op_attr_mask names: no need to clear the
    // rest.
    ucp_request_param_t P;
    P.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    P.flags = 0;
    ucs_status_ptr_t R =
        ucp_am_send_nbx(Co.Ep, AmId, Header.data(), Header.size(), Body.data(),
                        Body.size(), &P);
    if (LLVM_LIKELY(R == nullptr)) {
      if (LLVM_UNLIKELY(Bytes > Co.ImmediateCeiling))
        Co.ImmediateCeiling = SIZE_MAX; // Learned from a full FIFO: forget.
      complete(std::move(Done), "");
      return;
    }
    if (UCS_PTR_STATUS(R) != UCS_ERR_NO_RESOURCE) {
      complete(std::move(Done), formatv("send to {0} failed: {1}", Co.Peer,
                                        ucs_status_string(UCS_PTR_STATUS(R)))
                                    .str());
      return;
    }
    Refused = true;
  }
  // UCX keeps pointers to the header and body of a send it cannot start at
  // once, so both are copied into the op (UCX 1.13 has no
  // UCP_AM_SEND_FLAG_COPY_HEADER), or the body is shared (sendShared()).
  SendOp *Op = takeOp(C, std::move(Done));
  Op->Header.assign(Header);
  // A shared body is borrowed for the call and its owner's reference taken
  // only if UCX keeps the send (submit()): most frames that come here leave
  // at once (UCX copies them into its FIFO), and taking and dropping the
  // reference around that copy (two atomic operations on its count) was
  // work for nothing.
  const std::shared_ptr<const void> *Owner = std::exchange(Sharing, nullptr);
  if (Owner)
    Op->Shared.Bytes = Body;
  else
    Op->Body.assign(Body.begin(), Body.end()); // Reuses a pooled op's buffer.
  // Refused at once, yet sent at once: the FIFO had room, the frame was
  // too big for UCX's short protocol.
  if (submit(Co, Op, AmId, Reply ? UCP_AM_SEND_FLAG_REPLY : 0, Owner) &&
      Refused && Bytes <= Co.ImmediateCeiling)
    Co.ImmediateCeiling = Bytes - 1;
}

inline SendOp *UcxTransport::takeOp(ConnId C,
                                    unique_function<void(Error)> &&Done) {
  if (FreeOps.empty())
    return new SendOp{this, C, {}, {}, std::move(Done)};
  SendOp *Op = FreeOps.back().release();
  FreeOps.pop_back();
  Op->Conn = C;
  if (Done) // A pooled op's is empty; most sends have none.
    Op->Done = std::move(Done);
  return Op;
}

} // namespace ucx
} // namespace tc

#endif // TC_RUNTIME_TRANSPORT_UCXTRANSPORTIMPL_H
