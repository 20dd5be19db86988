//===- UcxTransportSend.cpp - The active-message send path ----------------===//
//
// Sending frames as active messages: at once (an inline message, or
// UCX's immediate completion), through the request path with copies or a
// shared body, or into the connection's backlog, whose small frames leave
// in batches. send() waits for room when a backlog is over its bounds
// (makeRoom()).
//
//===----------------------------------------------------------------------===//

#include "transport/UcxTransportImpl.h"

#include "llvm/ADT/ScopeExit.h"

using namespace llvm;

namespace tc {
namespace ucx {

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
  // A send that found the connection broken may have run the endpoint's
  // error handler, there and then (UCX 1.13 does, from inside
  // ucp_am_send_nbx), which closed it: the send fails with it.
  if (LLVM_UNLIKELY(!Co->Ep)) {
    complete(std::move(Done), lostWords(*Co));
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
          D(Why.empty() ? Error::success() : connectionError(Why));
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
  if (LLVM_UNLIKELY(!Co.Ep)) { // Closed by a send before this one (post()).
    complete(std::move(Op->Done), lostWords(Co));
    dropOp(Op);
    return false;
  }
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
      // stop waiting; the copies then queue without a wait, and send()
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

} // namespace ucx
} // namespace tc
