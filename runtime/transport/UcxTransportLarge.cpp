//===- UcxTransportLarge.cpp - Large frames, delivered in order -----------===//
//
// Frames that cannot be delivered from the active-message handler: large
// (rendezvous) frames, received into pooled buffers (RecvPool), and the
// frames queued behind them on their connection, delivered in order once
// they have arrived (docs/transport.md, "Large frames").
//
//===----------------------------------------------------------------------===//

#include "transport/UcxTransportImpl.h"

using namespace llvm;

namespace tc {
namespace ucx {

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

} // namespace ucx
} // namespace tc
