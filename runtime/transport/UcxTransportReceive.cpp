//===- UcxTransportReceive.cpp - The active-message receive path ----------===//
//
// Receiving frames as active messages: the handlers of the REPLY, inline,
// token and batch messages, the connection a token or reply endpoint names,
// and the welcome that gives a new peer its token and offers it a mailbox.
//
//===----------------------------------------------------------------------===//

#include "transport/UcxTransportImpl.h"

using namespace llvm;

namespace tc {
namespace ucx {

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
    T->Conns[C].ByAddress = true;
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
        ucx::InRing::create(Context, Shape, &RingMemory);
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
  if (Length == 0 || Co->Out || (Param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))
    return UCS_OK;
  // A ring we will not write into is declined, so that the peer does not
  // keep it registered for nothing (a peer before kind 7 drops that).
  auto Decline = [&] {
    T->postControl(*Co, C, MailboxRingDrop);
    ++T->Stats.MailboxRingsDeclined;
    return UCS_OK;
  };
  if (!T->UseMailbox)
    return Decline();
  Expected<mailbox::Offer> Offer = mailbox::decodeOffer(
      StringRef(static_cast<const char *>(Data), Length));
  if (!Offer) {
    consumeError(Offer.takeError()); // AMs only on this connection.
    return Decline();
  }
  Expected<std::unique_ptr<ucx::OutRing>> Out =
      ucx::OutRing::accept(T->Context, Co->Ep, *Offer, &Co->AmSent,
                           &T->Stats.MailboxSent, &T->RingMemory);
  if (!Out) {
    consumeError(Out.takeError()); // Not mapped here (TCP, RDMA): AMs.
    return Decline();
  }
  Co->Out = std::move(*Out);
  if (!Offer->Shape.AreaBytes) // No area to ask for.
    Co->Out->AreaIs = ucx::OutRing::AreaState::None;
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

} // namespace ucx
} // namespace tc
