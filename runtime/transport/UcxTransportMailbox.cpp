//===- UcxTransportMailbox.cpp - The mailbox lane -------------------------===//
//
// Mailboxes (docs/transport.md, "Mailboxes"): frames written into the ring
// the peer offered, frames waiting for its credit, the rings we poll and
// deliver from in order with the active-message path, and the control
// messages (accept, doorbell, goodbye) that go beside them.
//
//===----------------------------------------------------------------------===//

#include "transport/UcxTransportImpl.h"

using namespace llvm;

namespace tc {
namespace ucx {

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

mailbox::Lane::Wrote UcxTransport::writeSlot(Conn &Co, ConnId C,
                                             StringRef Header,
                                             StringRef Body) {
  // The lane writes the slot and its signal (Mailbox.h); the doorbell, an
  // active message, is ours.
  mailbox::Lane &L = *Co.Out->Lane;
  uint64_t InArea = L.areaFrames();
  mailbox::Lane::Wrote R = L.write(Header, Body);
  Stats.MailboxAreaFrames += L.areaFrames() - InArea;
  if (LLVM_UNLIKELY(R == mailbox::Lane::Wrote::No) &&
      Co.Out->AreaIs == ucx::OutRing::AreaState::Unasked &&
      L.wantsArea(Header.size() + Body.size())) {
    // The first frame that needs the large-frame area: ask for it. This
    // frame, and those until the area is here, go as active messages.
    askForArea(Co, C);
  } else if (R == mailbox::Lane::Wrote::Doorbell) {
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

void UcxTransport::postControl(Conn &Co, ConnId C, uint8_t Kind,
                               StringRef Data) {
  char Head[1 + TokenSize];
  Head[0] = char(Kind);
  support::endian::write64le(Head + 1, Co.PeerToken);
  post(Co, C, MailboxAmId, StringRef(Head, sizeof Head), Data,
       /*Reply=*/!Co.PeerToken, nullptr);
}

void UcxTransport::askForArea(Conn &Co, ConnId C) {
  Co.Out->AreaIs = ucx::OutRing::AreaState::Asked;
  ++Stats.MailboxAreaRequests;
  postControl(Co, C, MailboxAreaAsk);
}

void UcxTransport::onAreaAsk(Conn &Co, ConnId C, StringRef Data) {
  // Asked once per ring, by a sender that accepted it.
  ucx::InRing *In = Co.In.get();
  if (!In || !In->Accepted || In->AreaAsked || !Data.empty()) {
    ++Stats.DroppedFrames;
    return;
  }
  In->AreaAsked = true;
  std::string Record;
  if (AreaMemory.Regions < MaxAreas) {
    Expected<std::string> R = In->addArea(Context, &AreaMemory);
    if (R)
      Record = std::move(*R);
    else
      consumeError(R.takeError()); // Declined below.
  }
  if (Record.empty()) {
    // Declined: the sender's large frames go as active messages.
    ++Stats.MailboxAreasDeclined;
    Record = mailbox::encodeAreaOffer(mailbox::AreaOffer());
  }
  postControl(Co, C, MailboxAreaOffer, Record);
}

void UcxTransport::onAreaOffer(Conn &Co, ConnId C, StringRef Data) {
  using State = ucx::OutRing::AreaState;
  if (!Co.Out || Co.Out->AreaIs != State::Asked) {
    ++Stats.DroppedFrames; // Not asked for.
    return;
  }
  ucx::OutRing &Out = *Co.Out;
  Expected<mailbox::AreaOffer> O = mailbox::decodeAreaOffer(Data);
  Error E = Error::success();
  if (!O) {
    ++Stats.DroppedFrames;
    E = O.takeError();
  } else if (O->declined()) {
    Out.AreaIs = State::None;
    Out.Lane->noArea();
    return;
  } else if (UnmappableAreas) {
    E = createStringError("not mapped here (TestUnmappableAreas)");
  } else {
    E = Out.attachArea(Co.Ep, *O);
  }
  if (!E) {
    Out.AreaIs = State::Attached;
    return;
  }
  // Not usable here: large frames go as active messages, and the receiver
  // is told so that it frees the area.
  consumeError(std::move(E));
  Out.AreaIs = State::None;
  Out.Lane->noArea();
  postControl(Co, C, MailboxAreaDrop);
}

void UcxTransport::onRingDrop(Conn &Co, StringRef Data) {
  // Only a ring that was never accepted: none of it is polled or read.
  if (!Co.In || Co.In->Accepted || !Data.empty()) {
    ++Stats.DroppedFrames;
    return;
  }
  Co.In.reset();
}

void UcxTransport::onAreaDrop(Conn &Co, StringRef Data) {
  ucx::InRing *In = Co.In.get();
  if (!In || !In->Area || !Data.empty()) {
    ++Stats.DroppedFrames;
    return;
  }
  // A sender gives back only an area it never wrote into; should a
  // delivery from the ring run even so, the area goes with the ring.
  if (!In->Delivering)
    In->dropArea();
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
          // In by value: a reference would pass its address to erase_if(),
          // whose instance (external, as the class is) the optimizer does
          // not look into, and In would be reloaded from memory for every
          // frame (callgrind: 188 instead of 179 instructions a frame in
          // pollRings()).
          if (!In->Delivering)
            llvm::erase_if(Retired,
                           [In](const std::unique_ptr<ucx::InRing> &R) {
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
  // Token 0: the sender has no token from us (we never welcomed it: it
  // says goodbye before our welcome arrived, or, as a receiver, answers a
  // sender that sent it nothing but mailbox requests), and sent with REPLY.
  Conn *Co = !support::endian::read64le(static_cast<const char *>(Header) + 1)
                 ? T->byReplyEp(Param, C)
                 : T->byToken(static_cast<const char *>(Header) + 1, C);
  if (!Co)
    return UCS_OK;
  if (Kind == MailboxDoorbell)
    return UCS_OK; // Its arrival woke us; progress() polls the rings.
  StringRef Bytes(static_cast<const char *>(Data), Length);
  switch (Kind) {
  case MailboxAreaAsk:
    T->onAreaAsk(*Co, C, Bytes);
    return UCS_OK;
  case MailboxAreaOffer:
    T->onAreaOffer(*Co, C, Bytes);
    return UCS_OK;
  case MailboxAreaDrop:
    T->onAreaDrop(*Co, Bytes);
    return UCS_OK;
  case MailboxRingDrop:
    T->onRingDrop(*Co, Bytes);
    return UCS_OK;
  }
  if (Kind == Goodbye) {
    // The connection's loss, when UCX reports it, is this close. For a
    // connection made by address UCX may report none (a peer's reply
    // endpoint, or two endpoints UCX matched): end it ourselves.
    Co->PeerClosing = true;
    if (Co->ByAddress) {
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
    // that it is, sends active messages only. The ring goes.
    consumeError(Key.takeError());
    Co->In.reset();
    return UCS_OK;
  }
  Co->In->SenderFlags = std::move(*Key);
  Co->In->Accepted = true;
  T->Rings.push_back({C, Co, Co->In.get()});
  mailbox::storeWord(Co->In->SenderFlags.mapped() + mailbox::ReadyOffset, 1);
  return UCS_OK;
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
    // Our own endpoint (not UCX's reply endpoint) is ours to close; the
    // peer is gone from it, so without a flush.
    if (Co->Owned)
      closeEp(Co->Ep, /*Force=*/true);
    else
      ByEp.erase(Co->Ep);
    Lost.emplace_back(C, closedWords(Co->Peer));
  }
}

} // namespace ucx
} // namespace tc
