//===- Transport.h - The seam between tc's runtime and the network -*- C++ -*-//
//
// The runtime speaks frames (Frame.h) over a Transport: connect or accept
// connections, send a frame (header + body), and get frames and disconnects
// back through a handler. UcxTransport carries frames as UCX active messages
// (shared memory, TCP, RDMA; eager or rendezvous by size); LoopbackTransport
// connects transports inside one process for unit tests of runtime logic.
//
// Threading contract: a Transport is single-threaded, like a UCX worker
// created with UCS_THREAD_MODE_SINGLE. Every method, and every handler
// callback, runs on the thread that calls progress(); callbacks run only
// from inside progress() (never from inside send() or connect(), and never
// from the destructor: a completion still pending when the transport is
// destroyed is dropped without being called).
//
//===----------------------------------------------------------------------===//

#ifndef TC_RUNTIME_TRANSPORT_H
#define TC_RUNTIME_TRANSPORT_H

#include "transport/Mailbox.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/FunctionExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <string>

namespace tc {

/// A connection within one Transport; never reused after it is closed.
using ConnId = uint64_t;

/// The error of a frame that did not get through, and of everything still
/// pending on a connection that failed, was closed or was abandoned: its
/// message names the peer and what happened. Callers tell it apart from
/// other failures (the C API reports it as TC_ERR_CONNECTION_RESET and
/// logs the connection's loss once, not once per send).
class ConnectionError : public llvm::ErrorInfo<ConnectionError> {
public:
  static char ID;
  explicit ConnectionError(std::string Msg) : Msg(std::move(Msg)) {}
  void log(llvm::raw_ostream &OS) const override;
  std::error_code convertToErrorCode() const override {
    return std::make_error_code(std::errc::connection_reset);
  }
  std::string message() const override { return Msg; }

private:
  std::string Msg;
};

/// A ConnectionError saying \p Msg.
inline llvm::Error connectionError(const llvm::Twine &Msg) {
  return llvm::make_error<ConnectionError>(Msg.str());
}

/// What a Transport reports. All calls come from Transport::progress().
class TransportHandler {
public:
  virtual ~TransportHandler();
  /// A frame arrived on \p Conn. \p Header and \p Body are valid only for
  /// the duration of the call; copy what must outlive it. Frames from one
  /// connection arrive in the order they were sent.
  virtual void onFrame(ConnId Conn, llvm::StringRef Header,
                       llvm::StringRef Body) = 0;
  /// Alignment of the bodies onBufferedFrame() hands over.
  static constexpr size_t BufferedAlign = 64;
  /// onFrame() for a frame the transport received into a buffer of its own
  /// (UcxTransport: a rendezvous frame): \p Body is BufferedAlign-aligned
  /// and writable, and the handler may use it in place (e.g. run code on
  /// it instead of on a copy) until it returns; it must not keep it.
  virtual void onBufferedFrame(ConnId Conn, llvm::StringRef Header,
                               llvm::MutableArrayRef<char> Body) {
    onFrame(Conn, Header, llvm::StringRef(Body.data(), Body.size()));
  }
  /// A peer connected to our listener as \p Conn.
  virtual void onAccept(ConnId Conn) {}
  /// \p Conn failed or its peer went away (or closed it); it is unusable.
  /// Sends still pending on it complete with an error before this call.
  /// \p Why names the peer and what happened; it ends with "closed by the
  /// peer" when the peer closed the connection on purpose (closedByPeer()).
  virtual void onDisconnect(ConnId Conn, llvm::StringRef Why) = 0;
};

/// Whether an onDisconnect() reason says the peer closed the connection on
/// purpose, rather than that the connection failed.
inline bool closedByPeer(llvm::StringRef Why) {
  return Why.ends_with("closed by the peer");
}

/// What a transport counts about how it sent and received (for tests and
/// diagnostics; transports without the distinction report zeros).
struct TransportStats {
  uint64_t ReplyFrames = 0;    ///< Sent asking UCX for a reply endpoint.
  uint64_t TokenFrames = 0;    ///< Sent with the peer's connection token.
  uint64_t DroppedFrames = 0;  ///< Arrived with a token of no connection,
                               ///< in a malformed batch, or too large to
                               ///< allocate a receive buffer for.
  uint64_t Batches = 0;        ///< Batches sent (several frames in one AM)
  uint64_t BatchedFrames = 0;  ///< and the frames they carried.
  uint64_t MailboxSent = 0;     ///< Frames written into peers' mailboxes.
  /// Of MailboxSent, frames written into the rings' large-frame areas.
  uint64_t MailboxAreaFrames = 0;
  uint64_t MailboxReceived = 0; ///< Frames taken from our mailboxes.
  uint64_t MailboxNoCredit = 0; ///< Writes that found no credit (the frame
                                ///< waits for it, in order).
  uint64_t Doorbells = 0;       ///< Wake-ups rung for a sleeping receiver.
  /// Bytes registered now for mailboxes (rings offered to peers, the flags
  /// of rings written, large-frame areas), as UCX reports their lengths.
  uint64_t MailboxRegisteredBytes = 0;
  /// Large-frame areas registered now (each for a peer that asked for one).
  uint64_t MailboxAreas = 0;
  /// Requests for a large-frame area declined (MailboxMaxAreas reached, or
  /// the area could not be registered).
  uint64_t MailboxAreasDeclined = 0;
  /// Large-frame areas this transport asked its peers for (as a sender).
  uint64_t MailboxAreaRequests = 0;
  /// Rings peers offered that this transport declined (it cannot map them
  /// here, or has mailboxes off): each peer then unregisters its ring.
  uint64_t MailboxRingsDeclined = 0;
  /// Receive buffers for large (rendezvous) frames: allocated, and reused
  /// from the transport's pool.
  uint64_t RecvBuffersAllocated = 0;
  uint64_t RecvBuffersReused = 0;
  /// Times send() waited for a connection's copies of large frames, or of
  /// frames waiting for mailbox credit, to leave (UcxTransport: more than
  /// MaxCopiedBacklog bytes of them queued), and of those, the times it
  /// stopped waiting because nothing had moved for 5 s.
  uint64_t SendWaits = 0;
  uint64_t SendWaitsGivenUp = 0;
  /// Active messages UCX kept past the send call (completed later) rather
  /// than sending them at once.
  uint64_t SendsHeld = 0;
};

class Transport {
public:
  virtual ~Transport();

  /// Sets the handler; must be called before anything else.
  virtual void setHandler(TransportHandler *H) = 0;

  /// Starts accepting connections on \p Host : \p Port (0: any free port).
  /// Returns the port bound.
  virtual llvm::Expected<uint16_t> listen(llvm::StringRef Host,
                                          uint16_t Port) = 0;

  /// Connects to a listener. The connection may be used at once; frames
  /// sent before it is established are queued by the transport.
  virtual llvm::Expected<ConnId> connect(llvm::StringRef Host,
                                         uint16_t Port) = 0;

  /// This transport's address for an out-of-band bootstrap (MPI, SLURM):
  /// opaque bytes another process passes to connectAddress().
  virtual llvm::Expected<std::string> address() = 0;
  virtual llvm::Expected<ConnId> connectAddress(llvm::StringRef Address) = 0;

  /// Sends one frame on \p Conn. \p Header and \p Body need only stay valid
  /// until send() returns: the transport copies what it has to keep. When
  /// the copies of large frames waiting on \p Conn pass a bound, send()
  /// first progresses the network until they are down to half of it
  /// (frames that arrive meanwhile are delivered by the next progress()).
  /// \p Done (may be null) runs at most once, from a later progress() call,
  /// with success when the frame has left, or with a ConnectionError; a
  /// transport destroyed before that drops it without calling it.
  virtual void send(ConnId Conn, llvm::StringRef Header, llvm::StringRef Body,
                    llvm::unique_function<void(llvm::Error)> Done) = 0;

  /// Bytes a caller of sendWithRoom() leaves free in front of the header.
  static constexpr size_t HeaderRoom = 8;

  /// send(), where the HeaderRoom bytes right before Header.data() are the
  /// caller's and the transport may overwrite them (UcxTransport writes its
  /// connection token there instead of copying the header behind one). The
  /// runtime sends every frame this way.
  virtual void sendWithRoom(ConnId Conn, llvm::StringRef Header,
                            llvm::StringRef Body,
                            llvm::unique_function<void(llvm::Error)> Done) {
    send(Conn, Header, Body, std::move(Done));
  }

  /// The steady-state path of small frames sent without a completion:
  /// sends \p Header + \p Body on \p Conn at once, from the caller's
  /// buffers, when the transport can do so without keeping anything (no
  /// completion to report, nothing queued, no earlier frame of \p Conn still
  /// waiting), or, coalescing, copies it into the batch that send() would
  /// have put it in. Returns false, having done nothing, otherwise: the caller
  /// then sends the frame with send() or sendWithRoom(), so the order of
  /// frames on a connection is the order of the calls either way.
  virtual bool trySendNow(ConnId Conn, llvm::StringRef Header,
                          llvm::StringRef Body) {
    return false;
  }
  /// Frames (header + body) above this size are never sent by
  /// trySendNow(): a caller skips the call for them.
  size_t sendNowMax() const { return SendNowMax; }

  /// Bytes a caller of trySendFrameNow() leaves free in front of the frame.
  static constexpr size_t FrameRoom = 16;
  /// The largest frame a caller is meant to lay out for trySendFrameNow()
  /// (larger ones go to trySendNow() from where they are).
  static constexpr size_t FrameNowMax = 240;

  /// trySendNow() of a frame whose header (\p HeaderSize bytes) and body
  /// are contiguous at \p Frame (\p Size bytes in all), with FrameRoom bytes
  /// before it that the transport may overwrite: UcxTransport sends a small
  /// frame from there as it is, writing its token into the room instead of
  /// copying the frame behind one. Same contract as trySendNow().
  virtual bool trySendFrameNow(ConnId Conn, char *Frame, size_t HeaderSize,
                               size_t Size) {
    return trySendNow(Conn, llvm::StringRef(Frame, HeaderSize),
                      llvm::StringRef(Frame + HeaderSize, Size - HeaderSize));
  }

  /// The mailbox lane into \p Conn's peer (mailbox::Lane), or null: a
  /// caller may write a frame through it, without calling the transport,
  /// while it is open, and that frame is sent in the order of the calls as
  /// if trySendNow() had sent it. On Lane::Wrote::Doorbell the caller calls
  /// laneDoorbell(); on NoCredit or No it sends the frame the usual way.
  /// The transport closes the lane whenever frames must not take it, and
  /// for good when the connection goes.
  virtual std::shared_ptr<mailbox::Lane> lane(ConnId Conn) { return nullptr; }
  /// Wakes the receiver of \p Conn's lane, which sleeps (see lane()).
  virtual void laneDoorbell(ConnId Conn) {}
  /// Bumped whenever a connection gains a lane: a caller that keeps lanes
  /// asks lane() again for connections that had none when this changes.
  uint64_t laneGeneration() const { return LaneGeneration; }

  /// Bodies larger than this are large frames: UcxTransport sends them by
  /// the request path (rendezvous above UCX's threshold), and a caller that
  /// has them in shared memory passes them with sendShared().
  static constexpr size_t LargeBody = 4096;

  /// Bodies up to this size are not worth passing by sendShared(): a copy
  /// of them costs less than the reference (they mostly leave inline or in
  /// a batch anyway).
  static constexpr size_t ShareMin = 256;

  /// sendWithRoom() of a \p Body that \p Owner keeps alive and nobody
  /// changes while \p Owner is shared: where send() would copy the body to
  /// keep it past the call (a frame UCX sends later), the transport keeps a
  /// reference to \p Owner instead. By default, a copy.
  virtual void sendShared(ConnId Conn, llvm::StringRef Header,
                          llvm::StringRef Body,
                          const std::shared_ptr<const void> &Owner,
                          llvm::unique_function<void(llvm::Error)> Done) {
    (void)Owner;
    sendWithRoom(Conn, Header, Body, std::move(Done));
  }

  /// Closes \p Conn: what was sent on it still reaches the peer (UCX:
  /// the endpoint is flushed, then closed; a peer that takes nothing for
  /// a minute loses the rest, and the endpoint is closed by force).
  virtual void disconnect(ConnId Conn) = 0;

  /// How messages name the peer of \p Conn ("HOST:PORT"; empty where the
  /// transport has no name for it, or no such connection).
  virtual std::string peerName(ConnId Conn) const { return std::string(); }

  /// Closes \p Conn at once, without waiting for the peer (one that stopped
  /// answering): what has not left is dropped and every send pending on it
  /// completes with a ConnectionError from a later progress(). No
  /// onDisconnect follows.
  virtual void abandon(ConnId Conn) { disconnect(Conn); }

  /// Does pending work and runs callbacks. Returns true if anything
  /// happened (so a caller busy-polls while it returns true). A handler
  /// may call it and wait() again; a transport that cannot re-enter its
  /// own progress where that handler runs (UCX, for active messages) does
  /// what else it can, and its wait() returns at once there.
  virtual bool progress() = 0;

  /// Blocks until the transport may have work or \p TimeoutMs passes
  /// (-1: no limit), without spinning: an idle process costs no CPU.
  virtual llvm::Error wait(int TimeoutMs) = 0;

  /// False where progress() cannot receive (a handler inside the
  /// transport's own progress, see progress()): waiting for an answer there
  /// would never end.
  virtual bool canWaitHere() const { return true; }

  /// Wakes a thread blocked in wait() (safe to call from any thread).
  virtual void signal() = 0;

  virtual TransportStats stats() const { return TransportStats(); }

protected:
  /// See sendNowMax(); a transport whose trySendNow() sends anything sets
  /// it (0: trySendNow() is never worth calling).
  size_t SendNowMax = 0;
  /// See laneGeneration().
  uint64_t LaneGeneration = 0;
};

/// UCX transport options.
struct UcxTransportOptions {
  /// Empty: UCX's defaults, from UCX_TLS etc. in the environment.
  std::string Transports;
  /// Batch the small frames that follow the first of a progress() round on
  /// one connection into one active message (UcxTransportSend.cpp); false
  /// sends every frame as its own active message.
  bool Coalesce = true;
  /// Reactive mailboxes (Mailbox.h, docs/transport.md "Mailboxes"): offer
  /// each peer a ring it writes small frames into with one-sided puts, and
  /// write the frames of trySendNow() into the rings peers offer, where UCX
  /// maps the peer's memory here (shared memory). False: active messages
  /// only.
  bool Mailbox = true;
  /// The ring offered to each peer: 128 slots of 128 bytes by default, and
  /// a large-frame area of 256 KiB registered for a peer only when it asks
  /// for it (before its first frame too big for a span of slots).
  mailbox::Geometry MailboxShape;
  /// The most large-frame areas registered at once (one per peer that asks
  /// for it); a request beyond is declined, and that peer's large frames go
  /// as active messages.
  uint64_t MailboxMaxAreas = UINT64_MAX;
  /// Fault injection for tests: large-frame areas that peers offer are not
  /// mapped (as where UCX cannot map them here) and are given back.
  bool TestUnmappableAreas = false;
  /// How long wait() watches the rings before it sleeps (the sender then
  /// rings a doorbell), in microseconds. Short: a spinning process holds a
  /// core a sender may need (with more processes than cores, a 50 us spin
  /// made each DAPC hop between sleeping servers several times slower).
  unsigned MailboxSpinUs = 5;
  /// Bytes of copied large frames a connection may queue before send()
  /// waits for some of them to leave (docs/transport.md, "Large frames").
  size_t MaxCopiedBacklog = 32 << 20;
};

/// A transport over a UCX context + worker of its own.
llvm::Expected<std::unique_ptr<Transport>>
createUcxTransport(const UcxTransportOptions &Opts = UcxTransportOptions());

/// Transports in one process joined by a hub: "host" names are hub-local
/// listener names, so tests can run the runtime on both sides of a
/// connection without sockets.
class LoopbackHub;
std::shared_ptr<LoopbackHub> createLoopbackHub();
std::unique_ptr<Transport>
createLoopbackTransport(std::shared_ptr<LoopbackHub> Hub);

} // namespace tc

#endif // TC_RUNTIME_TRANSPORT_H
