//===- UcxTransport.cpp - Frames as UCX active messages -------------------===//
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

#include "transport/Batch.h"
#include "transport/Bytes.h"
#include "transport/Transport.h"
#include "transport/UcxMailbox.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <ucp/api/ucp.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <netdb.h>
#include <poll.h>
#include <random>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

using namespace llvm;

namespace tc {

namespace {

/// Active message ids: small frames in one buffer (no AM header; data:
/// token, header size byte, frame header, frame body), frames sent with
/// REPLY (header: the frame header), welcomes (header: the 8-byte token),
/// frames sent with a token (header: token, then the frame header) and
/// batches (header: token; body: records, Batch.h).
constexpr unsigned InlineAmId = 0x7A, MailboxAmId = 0x7B, TcAmId = 0x7C,
                   WelcomeAmId = 0x7D, TokenAmId = 0x7E, BatchAmId = 0x7F;
/// The first header byte of a MailboxAmId message (a token follows):
/// a sender accepting the ring offered in its welcome (data: the accept
/// record), waking a receiver that sleeps (no data), or saying that it
/// closes the connection (no data): the peer then reports the loss of the
/// connection that follows as a close, not as a failure.
enum : uint8_t { MailboxAccept = 1, MailboxDoorbell = 2, Goodbye = 3 };
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

/// Whether peer error handling should be enabled on shared-memory
/// transports for the UCX transport list \p Tls (UCX_TLS syntax): when the
/// list names a shared-memory transport and no TCP one.
///
/// Without it UCX leaves shared memory out of every endpoint we create (all
/// use UCP_ERR_HANDLING_MODE_PEER). With it *and* TCP in the list, UCX 1.13
/// builds endpoints whose AM lanes mix posix and tcp and then takes the
/// short-message limit from the wrong one: frames between ~100 bytes and
/// 8 KiB fail ("Invalid am_short_iov length"). So shared memory is used
/// for peers that connect by worker address with UCX_TLS=posix,self (or
/// sm,self); client-server (HOST:PORT) connections need tcp in UCX_TLS for
/// their wire-up and stay on TCP. docs/transport.md has the details.
bool wantSharedMemoryErrorHandling(StringRef Tls) {
  if (Tls.empty() || Tls.starts_with("^"))
    return false;
  SmallVector<StringRef, 8> Names;
  Tls.split(Names, ',');
  bool Shm = false;
  for (StringRef N : Names) {
    if (N == "all" || N == "tcp")
      return false;
    Shm |= N == "sm" || N == "shm" || N == "mm" || N == "posix" ||
           N == "sysv";
  }
  return Shm;
}

Error ucxError(const Twine &What, ucs_status_t S) {
  return createStringError(What + ": " + ucs_status_string(S));
}

class UcxTransport;

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
  bool progress() override;
  Error wait(int TimeoutMs) override;
  bool canWaitHere() const override { return !InUcx; }
  void signal() override;
  TransportStats stats() const override {
    TransportStats S = Stats;
    S.RecvBuffersAllocated = Pool.Allocated;
    S.RecvBuffersReused = Pool.Reused;
    return S;
  }

private:
  struct Conn {
    ucp_ep_h Ep = nullptr;
    /// False for the reply endpoint of a peer that connected by address:
    /// UCX made it and UCX closes it (closing it ourselves trips UCX).
    bool Owned = true;
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
  /// Sends the MailboxAmId message \p Kind (no data) to \p Co's peer.
  void postControl(Conn &Co, ConnId C, uint8_t Kind);
  /// How a connection to \p Peer that said goodbye is reported.
  static std::string closedByPeer(StringRef Peer) {
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
  /// Frees the endpoint-close requests that have finished.
  LLVM_ATTRIBUTE_NOINLINE void reapClosing() {
    llvm::erase_if(Closing, [&](const std::pair<void *, ucp_ep_h> &R) {
      if (ucp_request_check_status(R.first) == UCS_INPROGRESS)
        return false;
      ClosingEps.erase(R.second);
      ucp_request_free(R.first);
      return true;
    });
  }

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
  int WakeFd = -1;
  TransportHandler *Handler = nullptr;
  /// Declared before Conns: arrivals give their buffers back to it.
  RecvPool Pool;
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
  /// Endpoint close requests in flight, and their endpoints: a frame that
  /// arrives on a closing endpoint belongs to no connection and is dropped.
  std::vector<std::pair<void *, ucp_ep_h>> Closing;
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
  /// Connections of peers that connected by address and said goodbye,
  /// with when: UCX reports nothing when such a peer closes (the reply
  /// endpoint is UCX's), so endClosedPeers() ends them here.
  SmallVector<std::pair<ConnId, std::chrono::steady_clock::time_point>, 2>
      Ended;
};

Expected<std::unique_ptr<UcxTransport>>
UcxTransport::create(const UcxTransportOptions &Opts) {
  std::unique_ptr<UcxTransport> T(new UcxTransport());
  T->Coalesce = Opts.Coalesce;
  T->UseMailbox = Opts.Mailbox;
  T->Shape = Opts.MailboxShape;
  T->SpinUs = Opts.MailboxSpinUs;
  if (Opts.Mailbox) {
    if (Error E = Opts.MailboxShape.check())
      return std::move(E);
  }
  T->MaxCopiedBacklog = std::max<size_t>(Opts.MaxCopiedBacklog, 1);
  // trySendNow() sends inline messages, adds frames up to BatchFrameMax to
  // a connection's open batch (with coalescing) and, once a peer's ring is
  // accepted, writes frames that fit its slots (raised then).
  T->SendNowMax = T->Coalesce ? BatchFrameMax : InlineFrameMax;
  ucp_config_t *Config;
  ucs_status_t S = ucp_config_read(nullptr, nullptr, &Config);
  if (S != UCS_OK)
    return ucxError("ucp_config_read", S);
  if (!Opts.Transports.empty() &&
      (S = ucp_config_modify(Config, "TLS", Opts.Transports.c_str())) !=
          UCS_OK) {
    ucp_config_release(Config);
    return ucxError("UCX TLS '" + Opts.Transports + "'", S);
  }
  // Shared-memory transports offer peer error handling only when asked (see
  // wantSharedMemoryErrorHandling). A value the user set in the environment
  // wins.
  const char *EnvTls = std::getenv("UCX_TLS");
  StringRef Tls = !Opts.Transports.empty() ? StringRef(Opts.Transports)
                                           : StringRef(EnvTls ? EnvTls : "");
  if (!std::getenv("UCX_MM_ERROR_HANDLING") &&
      wantSharedMemoryErrorHandling(Tls) &&
      (S = ucp_config_modify(Config, "MM_ERROR_HANDLING", "y")) != UCS_OK) {
    ucp_config_release(Config);
    return ucxError("UCX MM_ERROR_HANDLING", S);
  }
  ucp_params_t P{};
  P.field_mask = UCP_PARAM_FIELD_FEATURES;
  P.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  if (Opts.Mailbox)
    P.features |= UCP_FEATURE_RMA;
  S = ucp_init(&P, Config, &T->Context);
  ucp_config_release(Config);
  if (S != UCS_OK)
    return ucxError("ucp_init (transports '" +
                        (Opts.Transports.empty() ? "default"
                                                 : Opts.Transports) +
                        "')",
                    S);

  ucp_worker_params_t WP{};
  WP.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  WP.thread_mode = UCS_THREAD_MODE_SINGLE;
  if ((S = ucp_worker_create(T->Context, &WP, &T->Worker)) != UCS_OK)
    return ucxError("ucp_worker_create", S);

  const std::pair<unsigned, ucp_am_recv_callback_t> Handlers[] = {
      {InlineAmId, &UcxTransport::onInlineAm},
      {MailboxAmId, &UcxTransport::onMailboxAm},
      {TcAmId, &UcxTransport::onAm},
      {WelcomeAmId, &UcxTransport::onWelcome},
      {TokenAmId, &UcxTransport::onTokenAm},
      {BatchAmId, &UcxTransport::onBatch}};
  for (const auto &[Id, Cb] : Handlers) {
    ucp_am_handler_param_t HP{};
    HP.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                    UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                    UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    HP.id = Id;
    HP.flags = UCP_AM_FLAG_WHOLE_MSG;
    HP.cb = Cb;
    HP.arg = T.get();
    if ((S = ucp_worker_set_am_recv_handler(T->Worker, &HP)) != UCS_OK)
      return ucxError("ucp_worker_set_am_recv_handler", S);
  }

  T->WakeFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (T->WakeFd < 0)
    return createStringError(std::error_code(errno, std::generic_category()),
                             "eventfd: %s", strerror(errno));
  return std::move(T);
}

UcxTransport::~UcxTransport() {
  Destroying = true;
  if (Listener)
    ucp_listener_destroy(Listener);
  // Rendezvous receives in flight keep their endpoints from closing (UCX
  // 1.13 asserts when it destroys an endpoint that still has one): let them
  // finish for a bounded time, then discard the endpoints of those that did
  // not (their peer stopped sending). A forced close completes them with an
  // error; it is the one case where a peer's reply endpoint is closed here.
  auto RecvDeadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (Worker && !Receiving.empty() &&
         std::chrono::steady_clock::now() < RecvDeadline)
    ucp_worker_progress(Worker);
  SmallVector<ucp_ep_h, 4> Stuck;
  for (auto &KV : EpReceives)
    Stuck.push_back(KV.first);
  for (ucp_ep_h Ep : Stuck) {
    CloseWhenReceived.erase(Ep);
    ClosingEps.erase(Ep);
    closeEp(Ep, /*Force=*/true);
  }
  // Close every endpoint, flushing so peers hear about it; force what has
  // not finished in a bounded time (the peer may be dead, and a flush to a
  // dead peer lasts until UCX's keepalive gives up on it).
  std::vector<ucp_ep_h> Eps;
  // What waits for mailbox credit goes as AMs; then remote keys and
  // registered memory go, before their endpoints.
  for (auto &KV : Conns)
    if (KV.second.Ep)
      flushPending(KV.first, KV.second, /*All=*/true);
  for (auto &KV : Conns)
    dropMailboxes(KV.first, KV.second);
  Retired.clear();
  for (auto &KV : Conns) {
    if (KV.second.Ep) {
      flushBacklog(KV.second, KV.first, /*All=*/true);
      sayGoodbye(KV.second, KV.first);
    }
    if (KV.second.Ep && KV.second.Owned)
      Eps.push_back(KV.second.Ep);
  }
  for (ucp_ep_h Ep : Eps)
    closeEp(Ep, /*Force=*/false);
  auto Deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (Worker && !Closing.empty() &&
         std::chrono::steady_clock::now() < Deadline) {
    ucp_worker_progress(Worker);
    reapClosing();
  }
  if (Worker) {
    // A close in flight cannot be forced any more; freeing its request lets
    // ucp_worker_destroy() release the endpoint.
    for (auto &R : Closing)
      ucp_request_free(R.first);
    Closing.clear();
    while (ucp_worker_progress(Worker))
      ;
  }
  // Whatever UCX still holds is released by ucp_worker_destroy(); report
  // the sends it never completed.
  for (SendOp *Op : Sending)
    if (Op->Done)
      Completions.emplace_back(std::move(Op->Done), "");
  if (Worker)
    ucp_worker_destroy(Worker); // May complete sends: onSendDone frees them.
  for (SendOp *Op : Sending)
    delete Op;
  // Receives UCX never completed (their peer died mid-rendezvous): nothing
  // writes into their buffers any more.
  Receiving.clear();
  for (auto &D : Completions)
    D.first(createStringError(D.second.empty() ? "transport destroyed"
                                               : D.second));
  if (Context)
    ucp_cleanup(Context);
  if (WakeFd >= 0)
    close(WakeFd);
}

ConnId UcxTransport::addConn(ucp_ep_h Ep, std::string Peer) {
  ConnId C = NextConn++;
  Conns[C].Ep = Ep;
  Conns[C].Peer = std::move(Peer);
  ByEp[Ep] = C;
  return C;
}

Expected<ConnId> UcxTransport::createEp(ucp_ep_params_t &P, std::string Peer) {
  P.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  P.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  P.err_handler.cb = &UcxTransport::onEpError;
  P.err_handler.arg = this;
  ucp_ep_h Ep;
  ucs_status_t S = ucp_ep_create(Worker, &P, &Ep);
  if (S != UCS_OK)
    return ucxError("cannot connect to " + Peer, S);
  return addConn(Ep, std::move(Peer));
}

static Expected<sockaddr_storage> resolve(StringRef Host, uint16_t Port,
                                          bool Passive) {
  addrinfo Hints{}, *Res = nullptr;
  Hints.ai_family = AF_UNSPEC;
  Hints.ai_socktype = SOCK_STREAM;
  Hints.ai_flags = Passive ? AI_PASSIVE : 0;
  std::string H = Host.str(), P = std::to_string(Port);
  int RC = getaddrinfo(H.empty() ? nullptr : H.c_str(), P.c_str(), &Hints,
                       &Res);
  if (RC != 0)
    return createStringError("cannot resolve '%s:%u': %s", H.c_str(),
                             unsigned(Port), gai_strerror(RC));
  sockaddr_storage SS{};
  std::memcpy(&SS, Res->ai_addr, Res->ai_addrlen);
  freeaddrinfo(Res);
  return SS;
}

static socklen_t sockLen(const sockaddr_storage &SS) {
  return SS.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

Expected<uint16_t> UcxTransport::listen(StringRef Host, uint16_t Port) {
  if (Listener)
    return createStringError("already listening");
  Expected<sockaddr_storage> SS = resolve(Host, Port, /*Passive=*/true);
  if (!SS)
    return SS.takeError();
  ucp_listener_params_t P{};
  P.field_mask =
      UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  P.sockaddr.addr = reinterpret_cast<const sockaddr *>(&*SS);
  P.sockaddr.addrlen = sockLen(*SS);
  P.conn_handler.cb = &UcxTransport::onConnRequest;
  P.conn_handler.arg = this;
  ucs_status_t S = ucp_listener_create(Worker, &P, &Listener);
  if (S != UCS_OK)
    return ucxError(formatv("cannot listen on {0}:{1}", Host, Port), S);
  ucp_listener_attr_t A{};
  A.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  if ((S = ucp_listener_query(Listener, &A)) != UCS_OK)
    return ucxError("ucp_listener_query", S);
  if (A.sockaddr.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<sockaddr_in6 *>(&A.sockaddr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in *>(&A.sockaddr)->sin_port);
}

Expected<ConnId> UcxTransport::connect(StringRef Host, uint16_t Port) {
  Expected<sockaddr_storage> SS = resolve(Host, Port, /*Passive=*/false);
  if (!SS)
    return SS.takeError();
  ucp_ep_params_t P{};
  P.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
  P.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  P.sockaddr.addr = reinterpret_cast<const sockaddr *>(&*SS);
  P.sockaddr.addrlen = sockLen(*SS);
  return createEp(P, formatv("{0}:{1}", Host, Port).str());
}

Expected<std::string> UcxTransport::address() {
  ucp_address_t *A;
  size_t Len;
  ucs_status_t S = ucp_worker_get_address(Worker, &A, &Len);
  if (S != UCS_OK)
    return ucxError("ucp_worker_get_address", S);
  std::string Out(reinterpret_cast<const char *>(A), Len);
  ucp_worker_release_address(Worker, A);
  return Out;
}

Expected<ConnId> UcxTransport::connectAddress(StringRef Address) {
  if (Address.empty())
    return createStringError("empty worker address");
  ucp_ep_params_t P{};
  P.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  P.address = reinterpret_cast<const ucp_address_t *>(Address.data());
  return createEp(P, "worker address peer");
}

void UcxTransport::onSendDone(void *Req, ucs_status_t S, void *User) {
  auto *Op = static_cast<SendOp *>(User);
  UcxTransport *T = Op->T;
  T->Sending.erase(Op);
  std::string Peer = "connection " + std::to_string(Op->Conn);
  auto It = T->Conns.find(Op->Conn);
  if (It != T->Conns.end()) {
    Peer = It->second.Peer;
    --It->second.Held;
    It->second.LargeHeld -= Op->Large;
  }
  // Queued, not called: a forced close completes sends from inside
  // ucp_ep_close_nbx(), which disconnect() and the destructor call.
  if (Op->Done)
    T->complete(std::move(Op->Done),
                S == UCS_OK ? std::string()
                            : formatv("send to {0} failed: {1}", Peer,
                                      ucs_status_string(S))
                                  .str());
  T->dropOp(Op);
  ucp_request_free(Req);
}

void UcxTransport::send(ConnId C, StringRef Header, StringRef Body,
                        unique_function<void(Error)> Done) {
  sendFrame(C, Header, Body, std::move(Done), /*Room=*/false);
}

void UcxTransport::sendWithRoom(ConnId C, StringRef Header, StringRef Body,
                                unique_function<void(Error)> Done) {
  sendFrame(C, Header, Body, std::move(Done), /*Room=*/true);
}

void UcxTransport::sendShared(ConnId C, StringRef Header, StringRef Body,
                              const std::shared_ptr<const void> &Owner,
                              unique_function<void(Error)> Done) {
  // keepBody() and post() take (or borrow) the reference where they would
  // take the copy (a body small enough to leave inline or in a batch is
  // copied there).
  Sharing = &Owner;
  sendFrame(C, Header, Body, std::move(Done), /*Room=*/true);
  Sharing = nullptr;
}

inline void UcxTransport::sendFrame(ConnId C, StringRef Header, StringRef Body,
                                    unique_function<void(Error)> &&Done,
                                    bool Room) {
  Conn *Co = findConn(C);
  if (LLVM_UNLIKELY(!Co || !Co->Ep)) {
    complete(std::move(Done), formatv("connection {0} is closed", C).str());
    return;
  }
  if (LLVM_UNLIKELY(!Co->Pending.empty())) { // Behind frames that wait.
    queuePending(C, *Co, /*Mailbox=*/false, Header, Body, std::move(Done));
    return;
  }
  sendFrameNow(C, Co, Header, Body, std::move(Done), Room);
}

void UcxTransport::sendFrameNow(ConnId C, Conn *Co, StringRef Header,
                                StringRef Body,
                                unique_function<void(Error)> &&Done,
                                bool Room) {
  ++Co->AmSent; // Every frame from here on goes by active message.
  if (LLVM_UNLIKELY(!Co->PeerToken)) {
    ++Stats.ReplyFrames;
    post(*Co, C, TcAmId, Header, Body, /*Reply=*/true, std::move(Done));
    return;
  }
  ++Stats.TokenFrames;
  // Coalescing: the first frame of a progress() round leaves at once; the
  // small frames after it on the same connection wait for the round's end
  // (or the next progress() call) and leave as one batch. So a burst costs
  // the sender and the receiver one active message per batch, while a
  // lone frame (a ping-pong) is not delayed at all.
  // Without coalescing every frame goes to UCX as it comes, as with UCX
  // alone (UCX keeps an endpoint's sends in order).
  bool Again = Co->LastRound == Round &&
               Header.size() + Body.size() <= BatchFrameMax;
  // A large frame goes to UCX even while UCX holds earlier sends (UCX keeps
  // an endpoint's sends in order), up to MaxLargeInFlight of them:
  // rendezvous frames then overlap instead of each waiting for the one
  // before it to finish. With coalescing off, the backlog holds only what
  // waits for that limit, and what was sent after it.
  bool Wait = isLarge(Body.size()) ? Co->LargeHeld >= MaxLargeInFlight
                                   : Coalesce && (Co->Held || Again);
  if (Wait || !Co->Backlog.empty()) {
    backlog(*Co, C, Header, Body, std::move(Done));
    waitIfOverBounds(*Co, C);
    return;
  }
  Co->LastRound = Round;
  if (!Co->Held && Header.size() + Body.size() <= InlineFrameMax &&
      sendInline(*Co, Header, Body)) {
    complete(std::move(Done), "");
    return;
  }
  if (Room) {
    // The token goes into the caller's room, right before the header.
    static_assert(TokenSize == HeaderRoom, "the token fills the room");
    char *Tokened = const_cast<char *>(Header.data()) - TokenSize;
    support::endian::write64le(Tokened, Co->PeerToken);
    post(*Co, C, TokenAmId, StringRef(Tokened, TokenSize + Header.size()), Body,
         /*Reply=*/false, std::move(Done));
    return;
  }
  SmallString<96> Tokened;
  Tokened.resize(TokenSize);
  support::endian::write64le(Tokened.data(), Co->PeerToken);
  Tokened += Header;
  post(*Co, C, TokenAmId, Tokened, Body, /*Reply=*/false, std::move(Done));
}

bool UcxTransport::trySendNow(ConnId C, StringRef Header, StringRef Body) {
  // What sendFrame() would send at once, minus its bookkeeping: an open
  // connection with its token, nothing of it in UCX's hands or waiting,
  // and (with coalescing) the first frame of this progress() round.
  Conn *Co = findConn(C);
  if (LLVM_UNLIKELY(!Co || !Co->Ep))
    return false;
  // A frame too big for an inline message (a 256 B - 2.6 KiB one, with
  // coalescing) can only join the open batch here, or go into a slot.
  size_t Size = Header.size() + Body.size();
  bool Inline = Size <= InlineFrameMax;
  // A mailbox first, where the peer offered one: no coalescing there, each
  // frame is written into the slot, and the receiver keeps the order with
  // the AM path.
  if (Co->Out && (Inline || Co->Out->Lane->takes(Size))) {
    SlotOutcome O = trySlot(*Co, C, Header, Body);
    if (O != SlotOutcome::UseAm)
      return O == SlotOutcome::Taken;
  }
  if (LLVM_UNLIKELY(!leavesAtOnce(*Co)))
    return Coalesce && appendToOpenBatch(*Co, Header, Body);
  // The first frame of a round leaves at once: the general path, for one
  // that is not inline.
  if (!Inline || !sendInline(*Co, Header, Body))
    return false;
  sentInline(*Co);
  return true;
}

bool UcxTransport::trySendFrameNow(ConnId C, char *Frame, size_t HeaderSize,
                                   size_t Size) {
  // trySendNow()'s steady state on a connection without a mailbox, written
  // out: the frame leaves as an inline message from the caller's buffer,
  // the token and the header's size in the room before it. Every other
  // case is trySendNow()'s.
  static_assert(TokenSize + 1 <= FrameRoom, "the room holds the prefix");
  Conn *Co = findConn(C);
  if (LLVM_LIKELY(Co && Co->Ep && !Co->Out && leavesAtOnce(*Co))) {
    size_t Len = TokenSize + 1 + Size;
    if (!inlineFits(*Co, Len) ||
        !postInline(*Co, Frame - TokenSize - 1, HeaderSize, Len))
      return false;
    sentInline(*Co);
    return true;
  }
  return trySendNow(C, StringRef(Frame, HeaderSize),
                    StringRef(Frame + HeaderSize, Size - HeaderSize));
}

UcxTransport::SlotOutcome UcxTransport::trySlot(Conn &Co, ConnId C,
                                                StringRef Header,
                                                StringRef Body) {
  if (LLVM_UNLIKELY(!Co.Pending.empty())) {
    // Behind frames that wait for credit; one too big for the ring and its
    // area is queued as an AM by sendFrame().
    if (!Co.Out->Lane->takes(Header.size() + Body.size()))
      return SlotOutcome::Declined;
    // Credit may have come back since they were queued: they go first,
    // and this frame, when they all went, straight into the ring.
    flushPending(C, Co, /*All=*/false);
    if (!Co.Pending.empty()) {
      queuePending(C, Co, /*Mailbox=*/true, Header, Body, nullptr);
      return SlotOutcome::Taken;
    }
  }
  switch (writeSlot(Co, C, Header, Body)) {
  case mailbox::Lane::Wrote::Yes:
  case mailbox::Lane::Wrote::Doorbell: // Rung by writeSlot().
    return SlotOutcome::Taken;
  case mailbox::Lane::Wrote::NoCredit:
    // The sender waits for the receiver, in order, rather than sending
    // AMs it would have to deliver more slowly behind the ring.
    queuePending(C, Co, /*Mailbox=*/true, Header, Body, nullptr);
    return SlotOutcome::Taken;
  case mailbox::Lane::Wrote::No:
    break;
  }
  return SlotOutcome::UseAm;
}

inline bool UcxTransport::appendToOpenBatch(Conn &Co, StringRef Header,
                                            StringRef Body) {
  // Exactly what sendFrame() does with such a frame, without its general
  // steps: the frame joins the batch at the end of the backlog. Everything
  // else (no token yet, frames waiting for mailbox credit, a batch to open
  // or to flush, a backlog over its bounds) is left to sendFrame(), and
  // so is a frame too big to join a batch (enqueue()'s rule).
  if (!Co.PeerToken || Co.Backlog.empty() || !Co.Pending.empty() ||
      Header.size() + Body.size() > BatchFrameMax)
    return false;
  Outgoing &O = Co.Backlog.back();
  // backlog() flushes what is before the open batch unless UCX holds a
  // send; makeRoom() waits once a backlog is over its bounds.
  if (!O.takes(Header.size() + Body.size()) ||
      (!Co.Held && &Co.Backlog.front() != &O) || overBounds(Co))
    return false;
  appendBatchRecord(O.Body, Header, Body);
  ++O.Frames;
  ++Co.AmSent;
  ++Stats.TokenFrames;
  return true;
}

inline bool UcxTransport::sendInline(Conn &Co, StringRef Header,
                                     StringRef Body) {
  size_t Len = TokenSize + 1 + Header.size() + Body.size();
  if (!inlineFits(Co, Len))
    return false;
  char Buf[InlineMax];
  copyBytes(Buf + TokenSize + 1, Header.data(), Header.size());
  copyBytes(Buf + TokenSize + 1 + Header.size(), Body.data(), Body.size());
  return postInline(Co, Buf, Header.size(), Len);
}

inline bool UcxTransport::postInline(Conn &Co, char *Buf, size_t HeaderSize,
                                     size_t Len) {
  support::endian::write64le(Buf, Co.PeerToken);
  Buf[TokenSize] = char(HeaderSize); // < InlineMax, so it fits
  // UCX reads only the fields op_attr_mask names.
  ucp_request_param_t P;
  P.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
  P.flags = 0;
  // Anything but immediate success (a full FIFO, a failed endpoint) is left
  // to the general path, which waits or reports.
  return ucp_am_send_nbx(Co.Ep, InlineAmId, nullptr, 0, Buf, Len, &P) ==
         nullptr;
}

void UcxTransport::backlog(Conn &Co, ConnId C, StringRef Header, StringRef Body,
                           unique_function<void(Error)> &&Done) {
  enqueue(Co, C, Header, Body, std::move(Done));
  // A burst without progress() streams out in full batches.
  if (!Co.Held && Co.Backlog.size() > 1) {
    Outgoing Open = std::move(Co.Backlog.back());
    Co.Backlog.pop_back();
    flushBacklog(Co, C, /*All=*/false);
    Co.Backlog.push_back(std::move(Open));
  }
}

void UcxTransport::enqueue(Conn &Co, ConnId C, StringRef Header, StringRef Body,
                           unique_function<void(Error)> &&Done) {
  if (Co.Backlog.empty()) {
    Backlogged.push_back(C);
    Chores = true;
  }
  // A big frame goes alone; a small one joins the open batch, or opens one
  // (with coalescing off, every frame goes alone).
  size_t Size = Header.size() + Body.size();
  bool Alone = Size > BatchFrameMax || !Coalesce;
  if (Alone || Co.Backlog.empty() || !Co.Backlog.back().takes(Size)) {
    Outgoing &O = Co.Backlog.emplace_back();
    O.AmId = Alone ? TokenAmId : BatchAmId;
    if (!Alone)
      takeBatchBody(O.Body); // No regrowth while the batch fills.
    O.Header.resize(TokenSize);
    support::endian::write64le(O.Header.data(), Co.PeerToken);
  }
  Outgoing &O = Co.Backlog.back();
  if (Alone) {
    O.Header += Header;
    keepBody(O, Body);
    if (isLarge(Body.size())) {
      O.Large = true;
      ++Co.LargeWaiting;
      if (!O.Shared.Owner) {
        O.Copied = Body.size();
        Co.CopiedBytes += O.Copied;
      }
    }
  } else {
    appendBatchRecord(O.Body, Header, Body);
  }
  ++O.Frames;
  if (Done)
    O.Done.push_back(std::move(Done));
}

bool UcxTransport::flushBacklogs() {
  if (Backlogged.empty())
    return false;
  Activity = true;
  llvm::erase_if(Backlogged, [&](ConnId C) {
    Conn *Co = findConn(C);
    if (!Co || !Co->Ep)
      return true;
    flushBacklog(*Co, C, /*All=*/false);
    return Co->Backlog.empty();
  });
  return true;
}

void UcxTransport::flushBacklog(Conn &Co, ConnId C, bool All) {
  while (!Co.Backlog.empty()) {
    // A large frame waits only for a free place among the large frames in
    // flight; anything else waits until UCX holds nothing of this
    // connection.
    if (!All && (isLarge(Co.Backlog.front().body().size())
                     ? Co.LargeHeld >= MaxLargeInFlight
                     : Co.Held != 0))
      break;
    Outgoing O = std::move(Co.Backlog.front());
    Co.Backlog.pop_front();
    // Exactly what enqueue() counted: a batch's body may be larger than a
    // large frame's, but is not a copy of one.
    Co.CopiedBytes -= O.Copied;
    Co.LargeWaiting -= O.Large;
    if (!Co.LargeWaiting)
      Co.NoLargeWait = false;
    copiesLeft(Co);
    if (O.AmId == BatchAmId) {
      ++Stats.Batches;
      Stats.BatchedFrames += O.Frames;
    }
    // One callback for the active message that reports to every frame's.
    unique_function<void(Error)> Done;
    if (O.Done.size() == 1)
      Done = std::move(O.Done.front());
    else if (!O.Done.empty())
      Done = [Ds = std::move(O.Done)](Error E) mutable {
        std::string Why = E ? toString(std::move(E)) : std::string();
        for (auto &D : Ds)
          D(Why.empty() ? Error::success() : createStringError(Why));
      };
    // The request path, without an immediate attempt first (a batch is
    // mostly past UCX's short-message size, and a backlog after a full FIFO
    // would only retry it); UCX sends from the op's own strings, so nothing
    // is copied again.
    SendOp *Op = takeOp(C, std::move(Done));
    Op->Header = O.Header;
    // The op takes the body; its old buffer, often an earlier batch's, is
    // kept for the next batch.
    ByteBuffer Spare;
    moveBuffer(Spare, Op->Body);
    moveBuffer(Op->Body, O.Body);
    keepBatchBody(Spare);
    Op->Shared = std::move(O.Shared);
    submit(Co, Op,
           // A batch is always eager: the receiver splits it in the AM
           // callback (onBatch). Where UCX would choose rendezvous for its
           // size (UCX_RNDV_THRESH or UCX_MM_SEG_SIZE set low), it goes as
           // eager fragments that UCX reassembles.
           O.AmId, O.AmId == BatchAmId ? UCP_AM_SEND_FLAG_EAGER : 0);
  }
}

inline void UcxTransport::post(Conn &Co, ConnId C, unsigned AmId,
                               StringRef Header, StringRef Body, bool Reply,
                               unique_function<void(Error)> &&Done) {
  // First try to send from the caller's buffers, completing at once. UCX
  // 1.13 refuses that (UCS_ERR_NO_RESOURCE) for every REPLY send, and for a
  // full FIFO; the request path then takes copies.
  size_t Bytes = Header.size() + Body.size();
  bool Refused = false;
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

inline void UcxTransport::takeBatchBody(ByteBuffer &Body) {
  if (FreeBatches.empty()) {
    Body.reserve(BatchMax);
    return;
  }
  moveBuffer(Body, FreeBatches.back());
  FreeBatches.pop_back();
}

inline void UcxTransport::keepBatchBody(ByteBuffer &Body) {
  if (Body.capacity() < BatchMax || Body.capacity() > OpKeepBytes ||
      FreeBatches.size() >= KeptBatches)
    return;
  // Never reallocated: std::vector would move the (empty) elements with
  // SmallVector's move constructor, which leaves their buffers behind.
  if (FreeBatches.capacity() < KeptBatches)
    FreeBatches.reserve(KeptBatches);
  Body.clear();
  moveBuffer(FreeBatches.emplace_back(), Body);
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

void UcxTransport::dropOp(SendOp *Op) {
  if (FreeOps.size() >= OpPoolMax) {
    delete Op;
    return;
  }
  if (Op->Done)
    Op->Done = nullptr;
  Op->Large = false;
  Op->Shared = {}; // The owner's reference goes now, not at reuse.
  Op->Header.clear();
  if (Op->Body.capacity() > OpKeepBytes) {
    // Freed: neither clear() nor swapping with an empty SmallVector
    // (which swaps elements, not buffers) would let the buffer go.
    Op->Body.~ByteBuffer();
    new (&Op->Body) ByteBuffer();
  } else {
    Op->Body.clear();
  }
  FreeOps.emplace_back(Op);
}

bool UcxTransport::submit(Conn &Co, SendOp *Op, unsigned AmId,
                          uint32_t Flags,
                          const std::shared_ptr<const void> *Owner) {
  ucp_request_param_t P;
  P.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                   UCP_OP_ATTR_FIELD_FLAGS;
  P.flags = Flags;
  P.cb.send = &UcxTransport::onSendDone;
  P.user_data = Op;
  ucs_status_ptr_t R =
      ucp_am_send_nbx(Co.Ep, AmId, Op->Header.data(), Op->Header.size(),
                      Op->body().data(), Op->body().size(), &P);
  if (R == nullptr) {
    complete(std::move(Op->Done), "");
    dropOp(Op);
    return true;
  }
  if (UCS_PTR_IS_ERR(R)) {
    complete(std::move(Op->Done),
             formatv("send to {0} failed: {1}", Co.Peer,
                     ucs_status_string(UCS_PTR_STATUS(R)))
                 .str());
    dropOp(Op);
    return false;
  }
  if (Owner)
    Op->Shared.Owner = *Owner; // UCX reads the body from here on.
  ++Stats.SendsHeld;
  ++Co.Held;
  Op->Large = isLarge(Op->body().size());
  Co.LargeHeld += Op->Large;
  Sending.insert(Op);
  return false;
}

void UcxTransport::closeEp(ucp_ep_h Ep, bool Force) {
  ucp_request_param_t P{};
  P.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  P.flags = Force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  // Unmap first: a forced close completes sends at once, and their
  // connection must already read as closed.
  auto It = ByEp.find(Ep);
  if (It != ByEp.end()) {
    auto C = Conns.find(It->second);
    if (C != Conns.end()) {
      C->second.Ep = nullptr;
      gateLane(C->second);
    }
    ByEp.erase(It);
  }
  ucs_status_ptr_t R = ucp_ep_close_nbx(Ep, &P);
  if (R && !UCS_PTR_IS_ERR(R)) {
    Closing.emplace_back(R, Ep);
    Chores = true;
    ClosingEps.insert(Ep);
  }
}

void UcxTransport::disconnect(ConnId C) {
  auto It = Conns.find(C);
  if (It == Conns.end())
    return;
  // Flush: frames already sent reach the peer, and their sends complete
  // (from a later progress()) as UCX finishes them, successfully or not.
  ucp_ep_h Ep = It->second.Ep;
  if (Ep) {
    flushPending(C, It->second, /*All=*/true);
    flushBacklog(It->second, C, /*All=*/true);
    sayGoodbye(It->second, C);
  }
  if (Ep && It->second.Owned && EpReceives.count(Ep)) {
    // Closed when its rendezvous receives are done; frames arriving on it
    // meanwhile belong to no connection.
    ByEp.erase(Ep);
    ClosingEps.insert(Ep);
    CloseWhenReceived.insert(Ep);
  } else if (Ep && It->second.Owned) {
    closeEp(Ep, /*Force=*/false);
  } else if (Ep) {
    ByEp.erase(Ep);
  }
  eraseConn(It);
  llvm::erase_if(Lost, [&](const std::pair<ConnId, std::string> &L) {
    return L.first == C;
  });
}

void UcxTransport::lost(ucp_ep_h Ep, ucs_status_t S) {
  // A disconnected endpoint waiting for its receives: they will not come.
  if (CloseWhenReceived.erase(Ep)) {
    ClosingEps.erase(Ep);
    closeEp(Ep, /*Force=*/true);
    return;
  }
  auto It = ByEp.find(Ep);
  if (It == ByEp.end())
    return;
  ConnId C = It->second;
  Conn *Co = findConn(C);
  std::string Peer = Co ? Co->Peer : std::string("peer");
  bool Closed = Co && Co->PeerClosing;
  Activity = true;
  // UCX asks for a forced close of a failed endpoint; it completes the
  // sends still pending (with UCS_ERR_CANCELED) before it returns.
  closeEp(Ep, /*Force=*/true);
  Chores = true;
  Lost.emplace_back(C, Closed ? closedByPeer(Peer)
                              : formatv("connection to {0} lost: {1}", Peer,
                                        ucs_status_string(S))
                                    .str());
}

void UcxTransport::onEpError(void *Arg, ucp_ep_h Ep, ucs_status_t S) {
  static_cast<UcxTransport *>(Arg)->lost(Ep, S);
}

void UcxTransport::onConnRequest(ucp_conn_request_h Req, void *Arg) {
  auto *T = static_cast<UcxTransport *>(Arg);
  T->Activity = true;
  if (T->Destroying) {
    ucp_listener_reject(T->Listener, Req);
    return;
  }
  ucp_conn_request_attr_t A{};
  A.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
  std::string Peer = "client";
  if (ucp_conn_request_query(Req, &A) == UCS_OK) {
    char Buf[INET6_ADDRSTRLEN] = "";
    uint16_t Port;
    if (A.client_address.ss_family == AF_INET6) {
      auto *S6 = reinterpret_cast<sockaddr_in6 *>(&A.client_address);
      inet_ntop(AF_INET6, &S6->sin6_addr, Buf, sizeof(Buf));
      Port = ntohs(S6->sin6_port);
    } else {
      auto *S4 = reinterpret_cast<sockaddr_in *>(&A.client_address);
      inet_ntop(AF_INET, &S4->sin_addr, Buf, sizeof(Buf));
      Port = ntohs(S4->sin_port);
    }
    Peer = formatv("{0}:{1}", Buf, Port).str();
  }
  ucp_ep_params_t P{};
  P.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST;
  P.conn_request = Req;
  Expected<ConnId> C = T->createEp(P, Peer);
  if (!C) {
    // The client sees its connection fail; we have nothing to report. UCX
    // has already rejected and freed the request (ucp_ep_create on a
    // conn_request consumes it, failed or not): rejecting it again here
    // would touch freed memory.
    consumeError(C.takeError());
    return;
  }
  T->Handler->onAccept(*C);
}

void UcxTransport::deliverReady(ConnId C) {
  while (!Destroying) {
    auto It = Conns.find(C);
    // A drain of the connection's ring delivers these when it ends.
    if (It == Conns.end() || It->second.Queue.empty() ||
        !It->second.Queue.front()->Ready || It->second.Draining)
      return;
    std::shared_ptr<Arrival> A = std::move(It->second.Queue.front());
    It->second.Queue.pop_front();
    // A rendezvous body is ours until the handler returns: it may run code
    // on it in place. Then the buffer goes back to the pool (~Arrival).
    if (A->Big)
      deliverBuffered(C, It->second, A->Header,
                      MutableArrayRef<char>(A->Big, A->Length));
    else
      deliverAm(C, It->second, A->Header, A->Copy);
  }
}

void UcxTransport::onRecvDone(void *Req, ucs_status_t S, size_t, void *User) {
  auto *A = static_cast<Arrival *>(User);
  if (Req)
    ucp_request_free(Req);
  A->T->received(A, S);
}

void UcxTransport::received(Arrival *A, ucs_status_t S) {
  Activity = true;
  // The connection's queue may have let go of it (closed, lost): then this
  // is the last reference.
  auto R = Receiving.find(A);
  if (R == Receiving.end())
    return;
  std::shared_ptr<Arrival> Own = std::move(R->second);
  Receiving.erase(R);
  ConnId C = A->Conn;
  auto N = EpReceives.find(A->Ep);
  if (N != EpReceives.end() && --N->second == 0) {
    EpReceives.erase(N);
    // The last receive of an endpoint disconnect() left open.
    if (CloseWhenReceived.erase(A->Ep)) {
      ClosingEps.erase(A->Ep);
      closeEp(A->Ep, /*Force=*/false);
    }
  }
  if (S == UCS_OK) {
    A->Ready = true;
  } else {
    // The frame is lost with the connection; drop it from the queue.
    auto It = Conns.find(C);
    if (It != Conns.end())
      llvm::erase_if(It->second.Queue,
                     [&](const std::shared_ptr<Arrival> &Q) { return Q == Own; });
  }
  Own.reset();
  deliverReady(C);
}

ucs_status_t UcxTransport::onAm(void *Arg, const void *Header,
                                size_t HeaderLen, void *Data, size_t Length,
                                const ucp_am_recv_param_t *Param) {
  auto *T = static_cast<UcxTransport *>(Arg);
  T->Activity = true;
  if (T->Destroying)
    return UCS_OK;
  if (!(Param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ||
      !Param->reply_ep)
    return UCS_OK; // Not one of ours: tc always asks for a reply ep here.
  ucp_ep_h Ep = Param->reply_ep;
  // A frame racing our disconnect(): its connection is gone.
  if (!T->ClosingEps.empty() && T->ClosingEps.count(Ep))
    return UCS_OK;
  ConnId C;
  auto Known = T->ByEp.find(Ep);
  if (Known != T->ByEp.end()) {
    C = Known->second;
  } else {
    // A peer that connected by worker address: its reply ep is new to us.
    C = T->addConn(Ep, "worker address peer");
    T->Conns[C].Owned = false;
    T->Handler->onAccept(C);
  }
  Conn *Co = T->findConn(C);
  if (!Co || !Co->Ep)
    return UCS_OK; // onAccept closed it.
  if (!Co->Token)
    T->welcome(C, *Co);
  return T->arrived(C, *Co,
                    StringRef(static_cast<const char *>(Header), HeaderLen),
                    Data, Length, Param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV);
}

void UcxTransport::welcome(ConnId C, Conn &Co) {
  // Connection ids count up from 1 and are never reused; one that no longer
  // fits the token keeps its peer on REPLY sends.
  if (C > UINT32_MAX)
    return;
  Co.Token = (Random() << 32) | C;
  char Buf[TokenSize];
  support::endian::write64le(Buf, Co.Token);
  // The welcome also offers the peer a mailbox ring (its data); a peer that
  // cannot map it, or does not know mailboxes, ignores the offer.
  std::string Offer;
  if (UseMailbox) {
    Expected<std::unique_ptr<ucx::InRing>> In =
        ucx::InRing::create(Context, Shape);
    if (In) {
      Co.In = std::move(*In);
      Offer = Co.In->offer();
    } else {
      consumeError(In.takeError()); // No mailbox: AMs only.
    }
  }
  // Best effort: should it fail, the peer just goes on sending with REPLY.
  post(Co, C, WelcomeAmId, StringRef(Buf, TokenSize), Offer,
       /*Reply=*/true, nullptr);
}

ucs_status_t UcxTransport::onWelcome(void *Arg, const void *Header,
                                     size_t HeaderLen, void *Data,
                                     size_t Length,
                                     const ucp_am_recv_param_t *Param) {
  auto *T = static_cast<UcxTransport *>(Arg);
  T->Activity = true;
  if (T->Destroying || HeaderLen != TokenSize ||
      !(Param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP))
    return UCS_OK;
  auto Known = T->ByEp.find(Param->reply_ep);
  if (Known == T->ByEp.end())
    return UCS_OK; // Closed meanwhile, or not a connection of ours.
  ConnId C = Known->second;
  Conn *Co = T->findConn(C);
  if (!Co || Co->PeerToken)
    return UCS_OK;
  Co->PeerToken = support::endian::read64le(Header);
  // A mailbox offer (rendezvous data is not read: tc's offers are small).
  if (!T->UseMailbox || Length == 0 || Co->Out ||
      (Param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))
    return UCS_OK;
  Expected<mailbox::Offer> Offer = mailbox::decodeOffer(
      StringRef(static_cast<const char *>(Data), Length));
  if (!Offer) {
    consumeError(Offer.takeError()); // AMs only on this connection.
    return UCS_OK;
  }
  Expected<std::unique_ptr<ucx::OutRing>> Out = ucx::OutRing::accept(
      T->Context, Co->Ep, *Offer, &Co->AmSent, &T->Stats.MailboxSent);
  if (!Out) {
    consumeError(Out.takeError()); // Not mapped here (TCP, RDMA): AMs.
    return UCS_OK;
  }
  Co->Out = std::move(*Out);
  T->gateLane(*Co);
  ++T->LaneGeneration;
  T->SendNowMax = std::max({T->SendNowMax, Offer->Shape.maxFrame(),
                            Offer->Shape.areaMaxFrame()});
  char Head[1 + TokenSize];
  Head[0] = char(MailboxAccept);
  support::endian::write64le(Head + 1, Co->PeerToken);
  T->post(*Co, C, MailboxAmId, StringRef(Head, sizeof Head),
          Co->Out->acceptRecord(), /*Reply=*/false, nullptr);
  return UCS_OK;
}

UcxTransport::Conn *UcxTransport::byToken(const void *Header, ConnId &C) {
  // The token names the connection; a token of a connection that is closed
  // (or was never ours) drops the frame, as a frame on a closing ep is.
  uint64_t Token = support::endian::read64le(Header);
  C = Token & UINT32_MAX;
  Conn *Co = findConn(C);
  if (Co && Co->Ep && Co->Token == Token)
    return Co;
  ++Stats.DroppedFrames;
  return nullptr;
}

UcxTransport::Conn *UcxTransport::byReplyEp(const ucp_am_recv_param_t *Param,
                                            ConnId &C) {
  if (!(Param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ||
      !Param->reply_ep)
    return nullptr;
  auto It = ByEp.find(Param->reply_ep);
  if (It == ByEp.end())
    return nullptr;
  C = It->second;
  Conn *Co = findConn(C);
  return Co && Co->Ep ? Co : nullptr;
}

ucs_status_t UcxTransport::onInlineAm(void *Arg, const void *, size_t HeaderLen,
                                      void *Data, size_t Length,
                                      const ucp_am_recv_param_t *Param) {
  auto *T = static_cast<UcxTransport *>(Arg);
  T->Activity = true;
  // tc sends these small, so never by rendezvous: anything else is dropped.
  if (LLVM_UNLIKELY(T->Destroying || HeaderLen != 0 ||
                    Length < TokenSize + 1 ||
                    (Param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))) {
    ++T->Stats.DroppedFrames;
    return UCS_OK;
  }
  ConnId C;
  Conn *Co = T->byToken(Data, C);
  if (!Co)
    return UCS_OK;
  char *P = static_cast<char *>(Data);
  size_t HS = uint8_t(P[TokenSize]);
  if (LLVM_UNLIKELY(HS > Length - TokenSize - 1)) {
    ++T->Stats.DroppedFrames;
    return UCS_OK;
  }
  return T->arrived(C, *Co, StringRef(P + TokenSize + 1, HS),
                    P + TokenSize + 1 + HS, Length - TokenSize - 1 - HS,
                    /*Rndv=*/false);
}

ucs_status_t UcxTransport::onTokenAm(void *Arg, const void *Header,
                                     size_t HeaderLen, void *Data,
                                     size_t Length,
                                     const ucp_am_recv_param_t *Param) {
  auto *T = static_cast<UcxTransport *>(Arg);
  T->Activity = true;
  if (T->Destroying || HeaderLen < TokenSize)
    return UCS_OK;
  ConnId C;
  Conn *Co = T->byToken(Header, C);
  if (!Co)
    return UCS_OK;
  return T->arrived(C, *Co,
                    StringRef(static_cast<const char *>(Header) + TokenSize,
                              HeaderLen - TokenSize),
                    Data, Length,
                    Param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV);
}

ucs_status_t UcxTransport::onBatch(void *Arg, const void *Header,
                                   size_t HeaderLen, void *Data, size_t Length,
                                   const ucp_am_recv_param_t *Param) {
  auto *T = static_cast<UcxTransport *>(Arg);
  T->Activity = true;
  if (T->Destroying || HeaderLen != TokenSize ||
      (Param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    ++T->Stats.DroppedFrames; // tc sends batches eager only.
    return UCS_OK;
  }
  ConnId C;
  Conn *Co = T->byToken(Header, C);
  if (!Co)
    return UCS_OK;
  Expected<size_t> N = splitBatch(
      StringRef(static_cast<const char *>(Data), Length),
      [&](StringRef H, StringRef B) {
        T->arrived(C, *Co, H, const_cast<char *>(B.data()), B.size(),
                   /*Rndv=*/false);
        // A frame's handler may have closed the connection or the transport.
        Co = T->Destroying ? nullptr : T->findConn(C);
        return Co && Co->Ep;
      });
  if (!N) {
    // The frames before the defect were delivered; the rest is lost, as a
    // malformed frame would be. A peer running tc never sends one.
    consumeError(N.takeError());
    ++T->Stats.DroppedFrames;
  }
  return UCS_OK;
}

ucs_status_t UcxTransport::hold(ConnId C, Conn &Co, StringRef H, void *Data,
                                size_t Length, bool Rndv) {
  auto Slot = std::make_shared<Arrival>();
  Slot->Header = H;
  Co.Queue.push_back(Slot);
  if (!Rndv) {
    Slot->Copy.assign(static_cast<const char *>(Data), Length);
    Slot->Ready = true;
    return UCS_OK;
  }
  // Received into a pooled buffer: no allocation, no clearing, and the
  // handler may use it in place. Several may be in flight on one
  // connection; they are delivered in the order they arrived.
  Slot->Big = Pool.take(Length, Slot->Cap);
  if (LLVM_UNLIKELY(!Slot->Big)) {
    // No memory for it: dropped (and counted), as a malformed frame is;
    // UCX tells the sender the data is not wanted.
    Co.Queue.pop_back();
    ++Stats.DroppedFrames;
    return UCS_OK;
  }
  Slot->T = this;
  Slot->Conn = C;
  Slot->Ep = Co.Ep;
  ++EpReceives[Co.Ep];
  Slot->Pool = &Pool;
  Slot->Length = Length;
  Arrival *A = Slot.get();
  Receiving[A] = std::move(Slot);
  ucp_request_param_t P;
  P.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  P.cb.recv_am = &UcxTransport::onRecvDone;
  P.user_data = A;
  ucs_status_ptr_t R = ucp_am_recv_data_nbx(Worker, Data, A->Big, Length, &P);
  if (R == nullptr)
    received(A, UCS_OK);
  else if (UCS_PTR_IS_ERR(R))
    received(A, UCS_PTR_STATUS(R));
  return UCS_INPROGRESS;
}

bool UcxTransport::progress() {
  // One pass, as ucp_worker_progress users do: a caller that got `true`
  // calls again. Looping here until UCX is quiet would add a whole poll of
  // every transport to each message's latency. What an idle pass does
  // beyond ucp_worker_progress() is a counter and a flag test: it is every
  // message's detection delay.
  // A new round: the next frame on each connection leaves at once again.
  ++Round;
  if (LLVM_UNLIKELY(Chores))
    return progressWithChores();
  // Mailbox frames first: a pass that found some returns (the caller
  // calls again), so a stream of them costs no UCX poll per frame.
  if (!Rings.empty() && ringsReady() && pollRings()) {
    if (LLVM_UNLIKELY(Chores))
      doChores();
    return Activity = true;
  }
  Activity = progressUcx() != 0;
  // What handlers and callbacks queued in this round.
  if (LLVM_UNLIKELY(Chores))
    doChores();
  return Activity;
}

bool UcxTransport::progressWithChores() {
  // Frames recorded while send() waited for room go first (makeRoom).
  bool Replayed = false;
  if (LLVM_UNLIKELY(Handler == &Record)) {
    replay();
    Replayed = true;
  }
  bool Flushed = !Backlogged.empty() && flushBacklogs();
  bool Polled = !Rings.empty() && ringsReady() && pollRings();
  Activity = progressUcx() != 0;
  Activity |= Flushed | Polled | Replayed;
  doChores();
  return Activity;
}

void UcxTransport::doChores() {
  if (!Ended.empty())
    endClosedPeers();
  if (!Completions.empty() || !Lost.empty())
    report();
  // What handlers and callbacks sent in this round, and backlogs UCX has
  // let go of meanwhile.
  if (!Backlogged.empty())
    flushBacklogs();
  if (!Closing.empty())
    reapClosing();
  if (!PendingConns.empty())
    flushPendings();
  Chores = !Completions.empty() || !Lost.empty() || !Backlogged.empty() ||
           !Closing.empty() || !PendingConns.empty() || !Ended.empty() ||
           Handler == &Record;
}

void UcxTransport::endClosedPeers() {
  auto Now = std::chrono::steady_clock::now();
  // Taken out: a handler the drain runs may progress us (and come here).
  auto Todo = std::move(Ended);
  Ended.clear();
  for (auto [C, Since] : Todo) {
    Conn *Co = findConn(C);
    // Mailbox frames written before the goodbye may still be in the ring
    // (its AM came first); a handler may close C meanwhile.
    if (Co && Co->Ep && ringHolds(*Co) && !Co->Draining) {
      bool Took = false;
      drainRing(C, Co, Co->AmDelivered, ~0u, /*ThenQueue=*/true, Took);
      Co = findConn(C);
    }
    if (!Co || !Co->Ep)
      continue; // Closed meanwhile, and reported.
    bool Delivered = Co->Queue.empty() && !ringHolds(*Co);
    if (!Delivered && Now - Since < std::chrono::seconds(1)) {
      Ended.emplace_back(C, Since); // Frames still arriving: next round.
      continue;
    }
    ByEp.erase(Co->Ep);
    Lost.emplace_back(C, closedByPeer(Co->Peer));
  }
}

void UcxTransport::makeRoom(ConnId C) {
  ++Stats.SendWaits;
  if (Handler != &Record) {
    Real = Handler;
    Handler = &Record;
    Chores = true; // progress() replays what is recorded.
  }
  size_t Least = SIZE_MAX;
  auto Since = std::chrono::steady_clock::now();
  InWait = true;
  scope_exit Out([&] { InWait = false; });
  for (unsigned I = 1;; ++I) {
    Conn *Co = findConn(C);
    if (!Co || !Co->Ep ||
        (Co->CopiedBytes + Co->PendingBytes <= MaxCopiedBacklog / 2 &&
         Co->LargeWaiting <= MaxLargeWaiting / 2))
      return;
    // Any count going down is progress.
    size_t Left = Co->CopiedBytes + Co->PendingBytes + Co->LargeWaiting;
    if (Left < Least) {
      Least = Left;
      Since = std::chrono::steady_clock::now();
    } else if ((I & 1023) == 0) {
      // A peer that takes nothing for seconds (alive but not progressing):
      // stop waiting; the copies then queue as they did before, and send()
      // does not wait again until half of them have left. Large
      // frames that are not copies cost no memory: give up on them after
      // 50 ms (this thread may be the one that progresses the peer), and
      // do not wait for them again until they have left.
      auto Idle = std::chrono::steady_clock::now() - Since;
      if (Idle > std::chrono::seconds(5)) {
        ++Stats.SendWaitsGivenUp;
        Co->NoCopyWait = Co->NoLargeWait = true;
        return;
      }
      if (Co->CopiedBytes + Co->PendingBytes <= MaxCopiedBacklog / 2 &&
          Idle > std::chrono::milliseconds(50)) {
        Co->NoLargeWait = true;
        return;
      }
    }
    progressUcx();
    // Frames in our rings are taken (recorded) too: a peer that waits for
    // room in them as we do in its ring would otherwise wait for us.
    if (!Rings.empty() && ringsReady() && pollRings() &&
        !(Co = findConn(C)))
      return;
    // Credit the receiver gave back (its puts need no progress here).
    if (!Co->Pending.empty())
      flushPending(C, *Co, /*All=*/false);
    flushBacklog(*Co, C, /*All=*/false);
  }
}

void UcxTransport::replay() {
  // Recording goes on until the last recorded event is delivered: a
  // handler that sends (and waits for room) appends to the events, and one
  // that re-enters progress() delivers the rest first, so the order holds.
  while (!Record.Events.empty()) {
    Recorder::Event E = std::move(Record.Events.front());
    Record.Events.pop_front();
    Activity = true;
    // A handler may have closed the connection meanwhile.
    if (!Conns.count(E.Conn))
      continue;
    if (E.Accept)
      Real->onAccept(E.Conn);
    else
      Real->onFrame(E.Conn, E.Header, E.Body);
  }
  if (Handler == &Record)
    Handler = Real;
}

void UcxTransport::report() {
  // Callbacks may send or disconnect, queueing more: loop until quiet.
  while (!Completions.empty() || !Lost.empty()) {
    while (!Completions.empty()) {
      auto D = std::move(Completions.front());
      Completions.pop_front();
      Activity = true;
      if (D.second.empty())
        D.first(Error::success());
      else
        D.first(createStringError(D.second));
    }
    if (!Lost.empty()) {
      auto L = std::move(Lost.front());
      Lost.pop_front();
      Activity = true;
      auto It = Conns.find(L.first);
      if (It == Conns.end())
        continue;
      // The forced close has completed them; should UCX still hold one,
      // its Done must nevertheless run before onDisconnect.
      std::vector<unique_function<void(Error)>> Late;
      for (SendOp *Op : Sending)
        if (Op->Conn == L.first && Op->Done)
          Late.push_back(std::exchange(Op->Done, nullptr));
      // Frames that never reached UCX fail with the connection, after the
      // ones UCX held (their order of sending).
      for (Outgoing &O : It->second.Backlog)
        for (auto &D : O.Done)
          Late.push_back(std::move(D));
      for (Conn::Waiting &W : It->second.Pending)
        if (W.Done)
          Late.push_back(std::move(W.Done));
      eraseConn(It);
      for (auto &Done : Late)
        Done(createStringError(L.second));
      Handler->onDisconnect(L.first, L.second);
    }
  }
}

Error UcxTransport::wait(int TimeoutMs) {
  // A backlog is sent from progress(), and UCX raises no event when the
  // sends it waits for leave: keep the caller progressing.
  // Frames waiting for mailbox credit: it comes back by put, which raises
  // no event here either. Frames recorded while send() waited for room are
  // delivered by the next progress().
  // Called by a handler inside ucp_worker_progress(): not a place to sleep
  // (or to arm the worker); what is due comes when the handler returns.
  if (!Completions.empty() || !Lost.empty() || !Backlogged.empty() ||
      !PendingConns.empty() || Handler == &Record || InUcx)
    return Error::success();
  ucs_status_t S = ucp_worker_arm(Worker);
  if (S == UCS_ERR_BUSY)
    return Error::success(); // Events are pending: go and progress.
  if (S != UCS_OK)
    return ucxError("ucp_worker_arm", S);
  int Efd;
  if ((S = ucp_worker_get_efd(Worker, &Efd)) != UCS_OK)
    return ucxError("ucp_worker_get_efd", S);
  pollfd Fds[2] = {{Efd, POLLIN, 0}, {WakeFd, POLLIN, 0}};
  if (!Rings.empty()) {
    // Puts into our rings raise no event. Watch them for a bounded spin
    // (an active message or signal() ends it too), then tell their senders
    // we sleep, so the next frame comes with a doorbell (writeSlot()).
    if (ringsReady())
      return Error::success();
    auto Until = std::chrono::steady_clock::now() +
                 std::chrono::microseconds(SpinUs);
    for (unsigned I = 1;; ++I) {
      if (ringsReady())
        return Error::success();
      if (I % 64 == 0) {
        if (poll(Fds, 2, 0) != 0 || std::chrono::steady_clock::now() >= Until)
          break;
      }
    }
    // A frame came before the announcement was seen: no sleep.
    announceSleep(true);
    if (ringsReady()) {
      announceSleep(false);
      return Error::success();
    }
  }
  int RC = poll(Fds, 2, TimeoutMs);
  if (!Rings.empty())
    announceSleep(false);
  if (RC < 0 && errno != EINTR)
    return createStringError(std::error_code(errno, std::generic_category()),
                             "poll: %s", strerror(errno));
  if (RC > 0 && (Fds[1].revents & POLLIN)) {
    uint64_t N;
    if (read(WakeFd, &N, sizeof(N)) < 0 && errno != EAGAIN)
      return createStringError(std::error_code(errno, std::generic_category()),
                               "read: %s", strerror(errno));
  }
  return Error::success();
}

void UcxTransport::signal() {
  uint64_t One = 1;
  // write(2) is async-signal-safe: tc-serve calls this from SIGTERM.
  ssize_t R = write(WakeFd, &One, sizeof(One));
  (void)R;
}

//===----------------------------------------------------------------------===//
// Mailboxes (docs/transport.md, "Mailboxes")
//===----------------------------------------------------------------------===//

mailbox::Lane::Wrote UcxTransport::writeSlot(Conn &Co, ConnId C,
                                             StringRef Header,
                                             StringRef Body) {
  // The lane writes the slot and its signal (Mailbox.h); the doorbell, an
  // active message, is ours.
  uint64_t InArea = Co.Out->Lane->areaFrames();
  mailbox::Lane::Wrote R = Co.Out->Lane->write(Header, Body);
  Stats.MailboxAreaFrames += Co.Out->Lane->areaFrames() - InArea;
  if (R == mailbox::Lane::Wrote::Doorbell) {
    ringDoorbell(Co, C);
    R = mailbox::Lane::Wrote::Yes;
  } else if (R == mailbox::Lane::Wrote::NoCredit) {
    ++Stats.MailboxNoCredit;
  }
  return R;
}

void UcxTransport::gateLane(Conn &Co) {
  if (Co.Out)
    Co.Out->Lane->setOpen(Co.Ep && Co.Pending.empty());
}

std::shared_ptr<mailbox::Lane> UcxTransport::lane(ConnId C) {
  Conn *Co = findConn(C);
  if (!Co || !Co->Out)
    return nullptr;
  return Co->Out->Lane;
}

void UcxTransport::laneDoorbell(ConnId C) {
  if (Conn *Co = findConn(C); Co && Co->Ep)
    ringDoorbell(*Co, C);
}

void UcxTransport::flushPending(ConnId C, Conn &Co, bool All) {
  // Frames this sends as AMs may go into the backlog over its bounds: they
  // were counted in Pending's, so send() does not wait for room here.
  bool Outer = std::exchange(InWait, true);
  while (!Co.Pending.empty()) {
    Conn::Waiting &W = Co.Pending.front();
    if (W.Mailbox) {
      mailbox::Lane::Wrote R = Co.Out ? writeSlot(Co, C, W.Header, W.Body)
                                      : mailbox::Lane::Wrote::No;
      if (R == mailbox::Lane::Wrote::NoCredit && !All)
        break;
      if (R != mailbox::Lane::Wrote::Yes) // In its place, as an AM.
        sendFrameNow(C, &Co, W.Header, W.Body, nullptr, /*Room=*/false);
    } else {
      sendFrameNow(C, &Co, W.Header, W.Body, std::move(W.Done),
                   /*Room=*/false);
    }
    Co.PendingBytes -= Conn::pendingBytes(W);
    Co.Pending.pop_front();
    copiesLeft(Co);
  }
  InWait = Outer;
  gateLane(Co);
}

void UcxTransport::queuePending(ConnId C, Conn &Co, bool Mailbox,
                                StringRef Header, StringRef Body,
                                unique_function<void(Error)> &&Done) {
  Co.Pending.push_back({Mailbox, Header.str(), Body.str(), std::move(Done)});
  Co.PendingBytes += Conn::pendingBytes(Co.Pending.back());
  if (Co.Pending.size() == 1) {
    // progress() writes it as credit comes back (flushPendings()). The
    // connection may still be listed: its queue emptied since.
    if (!is_contained(PendingConns, C))
      PendingConns.push_back(C);
    Chores = true;
  }
  gateLane(Co); // Closed to the runtime until Pending is written.
  // A sender faster than the receiver (or one that does not progress)
  // would otherwise copy into Pending without bound.
  waitIfOverBounds(Co, C);
}

bool UcxTransport::flushPendings() {
  llvm::erase_if(PendingConns, [&](ConnId C) {
    Conn *Co = findConn(C);
    if (!Co || !Co->Ep)
      return true;
    flushPending(C, *Co, /*All=*/false);
    return Co->Pending.empty();
  });
  return true;
}

void UcxTransport::ringDoorbell(Conn &Co, ConnId C) {
  ++Stats.Doorbells;
  // Its arrival wakes the receiver's worker; the handler does nothing.
  postControl(Co, C, MailboxDoorbell);
}

void UcxTransport::sayGoodbye(Conn &Co, ConnId C) {
  // Before the peer's welcome, with token 0 and REPLY: the peer finds the
  // connection by its reply endpoint, as it does our frames then.
  if (Co.Ep)
    postControl(Co, C, Goodbye);
}

void UcxTransport::postControl(Conn &Co, ConnId C, uint8_t Kind) {
  char Head[1 + TokenSize];
  Head[0] = char(Kind);
  support::endian::write64le(Head + 1, Co.PeerToken);
  post(Co, C, MailboxAmId, StringRef(Head, sizeof Head), StringRef(),
       /*Reply=*/!Co.PeerToken, nullptr);
}

bool UcxTransport::drainRing(ConnId C, Conn *Co, uint32_t AmLimit,
                             unsigned MaxFrames, bool ThenQueue, bool &Took) {
  if (Destroying)
    return false;
  bool Outer = !Co->Draining;
  Co->Draining = true;
  // Co and In stay valid until a handler runs; after one, both are looked
  // up again (it may have closed the connection).
  ucx::InRing *In = Co->In.get();
  if (In && In->Accepted) {
    const uint32_t SlotBytes = In->Read.shape().SlotBytes;
    for (unsigned Taken = 0; Taken < MaxFrames; ++Taken) {
      char *Slot = In->nextSlot();
      uint64_t Signal =
          mailbox::loadWord(Slot + mailbox::SignalOffset, __ATOMIC_ACQUIRE);
      if (!In->Read.isNext(Signal))
        break;
      uint32_t Span = In->Read.spanOf(Signal);
      mailbox::SlotMessage M;
      if (LLVM_UNLIKELY(!Span ||
                        !mailbox::parseSlot(
                            StringRef(Slot, size_t(Span) * SlotBytes), M) ||
                        (M.InArea && !In->Read.resolveArea(In->area(), M)))) {
        // Only the peer writes here: a defect is its own frame's loss.
        ++Stats.DroppedFrames;
        Span = std::max(Span, 1u);
        In->Read.forget(Slot, Span);
        In->Read.take(Span);
        Took = true;
        continue;
      }
      // Written after an AM frame not delivered yet: it waits for it.
      if (int32_t(M.AmBefore - AmLimit) > 0)
        break;
      In->Read.take(Span);
      if (LLVM_UNLIKELY(M.InArea))
        In->Read.takeArea(M);
      Took = true;
      ++Stats.MailboxReceived;
      // The handler reads the frame in the slot; an ifunc it runs may
      // progress us and take the next frames, or close the connection:
      // the slot is released only when no delivery from this ring runs,
      // and a ring whose connection closed meanwhile is freed only then.
      // No ring dropped meanwhile: Co and In are still C's.
      uint64_t Dropped = RingsDropped;
      ++In->Delivering;
      Handler->onFrame(C, M.Header, M.Body);
      --In->Delivering;
      if (LLVM_UNLIKELY(RingsDropped != Dropped)) {
        Co = findConn(C);
        if (!Co || Co->In.get() != In) {
          if (!In->Delivering)
            llvm::erase_if(Retired,
                           [&](const std::unique_ptr<ucx::InRing> &R) {
                             return R.get() == In;
                           });
          return false;
        }
      }
      // The frame's own bytes inside the span are not signals for the
      // sender's next lap (none while it spans one slot).
      if (LLVM_UNLIKELY(Span > 1))
        In->Read.forget(Slot, Span);
      if (!In->Delivering)
        releaseSlots(*Co);
      if (LLVM_UNLIKELY(Destroying))
        return false;
    }
  }
  if (Outer) {
    Co->Draining = false;
    // AM frames that came meanwhile, in order.
    if (ThenQueue && !Co->Queue.empty()) {
      deliverReady(C);
      return findConn(C) != nullptr;
    }
  }
  return true;
}

void UcxTransport::deliverAfterRing(ConnId C, Conn &Co, StringRef Header,
                                    StringRef Body,
                                    MutableArrayRef<char> Buffer) {
  // The mailbox frames sent before this one go first. AM frames in the
  // queue (behind this one, or arrived during the drain from a handler
  // that progressed us) come after this one, not at the drain's end.
  bool Took = false;
  if (!drainRing(C, &Co, Co.AmDelivered, ~0u, /*ThenQueue=*/false, Took))
    return;
  Conn *Again = findConn(C);
  if (!Again)
    return;
  ++Again->AmDelivered;
  if (Buffer.data())
    Handler->onBufferedFrame(C, Header, Buffer);
  else
    Handler->onFrame(C, Header, Body);
  Again = Destroying ? nullptr : findConn(C);
  if (Again && !Again->Queue.empty())
    deliverReady(C);
}

bool UcxTransport::pollRings() {
  bool Did = false;
  // By index: a handler may close connections (and shrink the list).
  for (size_t I = 0; I < Rings.size(); ++I) {
    auto [C, Co, In] = Rings[I];
    if (!In->hasNext() || Co->Draining)
      continue;
    // A closed connection is progress too; a frame that waits for an AM
    // frame is not (progress() then polls UCX, which brings that frame).
    bool Took = false;
    if (!drainRing(C, Co, Co->AmDelivered, RingBurst, /*ThenQueue=*/true,
                   Took) ||
        Took)
      Did = true;
  }
  return Did;
}

void UcxTransport::releaseSlots(Conn &Co) {
  ucx::InRing &In = *Co.In;
  uint64_t Released = In.Read.release();
  uint64_t Area = In.Read.releaseArea();
  if (LLVM_UNLIKELY(Area != 0) && Co.Ep)
    mailbox::storeWord(In.SenderFlags.mapped() + mailbox::AreaReleasedOffset,
                       Area);
  if (!Released || !Co.Ep)
    return;
  mailbox::storeWord(In.SenderFlags.mapped() + mailbox::ReleasedOffset,
                     Released);
}

void UcxTransport::announceSleep(bool Asleep) {
  for (auto [C, Co, Ring] : Rings) {
    if (!Co->Ep || Ring->Asleep == Asleep)
      continue;
    ucx::InRing &In = *Ring;
    In.Asleep = Asleep;
    mailbox::storeWord(In.SenderFlags.mapped() + mailbox::AsleepOffset,
                       Asleep);
  }
  // See writeSlot(): our flag stores before our ring loads.
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void UcxTransport::dropMailboxes(ConnId C, Conn &Co) {
  Co.Out.reset();
  ++RingsDropped;
  llvm::erase_if(Rings, [&](const PolledRing &R) { return R.C == C; });
  if (Co.In && Co.In->Delivering)
    Retired.push_back(std::move(Co.In)); // Freed when the delivery returns.
  Co.In.reset();
}

ucs_status_t UcxTransport::onMailboxAm(void *Arg, const void *Header,
                                       size_t HeaderLen, void *Data,
                                       size_t Length,
                                       const ucp_am_recv_param_t *Param) {
  auto *T = static_cast<UcxTransport *>(Arg);
  T->Activity = true;
  if (T->Destroying || HeaderLen != 1 + TokenSize ||
      (Param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    ++T->Stats.DroppedFrames;
    return UCS_OK;
  }
  uint8_t Kind = *static_cast<const uint8_t *>(Header);
  ConnId C;
  Conn *Co = Kind == Goodbye && !support::endian::read64le(
                                    static_cast<const char *>(Header) + 1)
                 ? T->byReplyEp(Param, C)
                 : T->byToken(static_cast<const char *>(Header) + 1, C);
  if (!Co)
    return UCS_OK;
  if (Kind == MailboxDoorbell)
    return UCS_OK; // Its arrival woke us; progress() polls the rings.
  if (Kind == Goodbye) {
    // The connection's loss, when UCX reports it, is this close. For a
    // peer that connected by address UCX reports none: end it ourselves.
    Co->PeerClosing = true;
    if (!Co->Owned) {
      T->Ended.emplace_back(C, std::chrono::steady_clock::now());
      T->Chores = true;
    }
    return UCS_OK;
  }
  if (Kind != MailboxAccept || !Co->In || Co->In->Accepted) {
    ++T->Stats.DroppedFrames;
    return UCS_OK;
  }
  Expected<mailbox::Accept> A = mailbox::decodeAccept(
      StringRef(static_cast<const char *>(Data), Length));
  if (!A) {
    consumeError(A.takeError());
    ++T->Stats.DroppedFrames;
    return UCS_OK;
  }
  Expected<ucx::RemoteKey> Key =
      ucx::RemoteKey::unpackMapped(Co->Ep, A->RemoteKey, A->FlagsAddress);
  if (!Key) {
    // The peer maps our ring but we cannot map its flags (UCX maps one
    // process's registered memory and not the other's: seen with every
    // transport enabled, two workers in one process): no credit could
    // ever go back, so the ring is not polled, and the peer, never told
    // that it is, sends active messages only.
    consumeError(Key.takeError());
    return UCS_OK;
  }
  Co->In->SenderFlags = std::move(*Key);
  Co->In->Accepted = true;
  T->Rings.push_back({C, Co, Co->In.get()});
  mailbox::storeWord(Co->In->SenderFlags.mapped() + mailbox::ReadyOffset, 1);
  return UCS_OK;
}

} // namespace

Expected<std::unique_ptr<Transport>>
createUcxTransport(const UcxTransportOptions &Opts) {
  Expected<std::unique_ptr<UcxTransport>> T = UcxTransport::create(Opts);
  if (!T)
    return T.takeError();
  return std::unique_ptr<Transport>(std::move(*T));
}

} // namespace tc
