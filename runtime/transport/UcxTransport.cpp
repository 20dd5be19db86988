//===- UcxTransport.cpp - Frames as UCX active messages -------------------===//
//
// The transport's life cycle: creating the UCX context and worker with the
// active-message handlers, tearing them down, connections (listen, connect,
// accept, disconnect, loss), progress() with its chores and completion
// reports, and waiting. The design is described in UcxTransportImpl.h.
//
//===----------------------------------------------------------------------===//

#include "transport/UcxTransportImpl.h"

#include "llvm/Support/Error.h"

#include <arpa/inet.h>
#include <cerrno>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

using namespace llvm;

namespace tc {
namespace ucx {

namespace {

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

} // namespace

Expected<std::unique_ptr<UcxTransport>>
UcxTransport::create(const UcxTransportOptions &Opts) {
  std::unique_ptr<UcxTransport> T(new UcxTransport());
  T->Coalesce = Opts.Coalesce;
  T->UseMailbox = Opts.Mailbox;
  T->Shape = Opts.MailboxShape;
  T->SpinUs = Opts.MailboxSpinUs;
  T->MaxAreas = Opts.MailboxMaxAreas;
  T->UnmappableAreas = Opts.TestUnmappableAreas;
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
  // A listener sets SO_REUSEADDR (UCX 1.13 does not by default), so that a
  // server killed with connections open can listen on its port again at
  // once: without it, those connections' TIME_WAIT (up to 60 s) keeps
  // the port. SO_REUSEADDR still refuses a port another socket listens
  // on. The environment's UCX_TCP_CM_REUSEADDR (or UCX_CM_REUSEADDR) wins.
  const char *EnvReuse = std::getenv("UCX_TCP_CM_REUSEADDR");
  if (!EnvReuse)
    EnvReuse = std::getenv("UCX_CM_REUSEADDR");
  if (EnvReuse) {
    StringRef V(EnvReuse);
    T->ReuseAddr = V.starts_with_insensitive("y") || V == "1" ||
                   V.equals_insensitive("on");
  } else if ((S = ucp_config_modify(Config, "CM_REUSEADDR", "y")) !=
             UCS_OK) {
    // (The connection managers' name for it: TCP_ is their component's.)
    ucp_config_release(Config);
    return ucxError("UCX CM_REUSEADDR", S);
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
  // Nothing is called back from here: handlers see no frame, accept or
  // disconnect (Destroying), and completions still pending are dropped
  // unrun (Transport.h), since what they refer to may be gone already.
  Destroying = true;
  if (Listener)
    ucp_listener_destroy(Listener);
  // The whole teardown is bounded: a peer that stopped answering (SIGSTOP,
  // a hung host) costs at most this much, then its endpoints are closed by
  // force.
  auto Deadline = std::chrono::steady_clock::now() + DestroyLimit;
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
  // Close every endpoint: flushed, so peers get what was sent and hear of
  // the close, or by force where the flush does not end in time.
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
  while (Worker && !Closing.empty()) {
    bool Late = std::chrono::steady_clock::now() >= Deadline;
    ucp_worker_progress(Worker);
    reapClosing(/*Expire=*/Late); // Late: every flush left is forced.
    if (Late)
      break;
  }
  if (Worker) {
    // Closes still in flight (flushed endpoints whose peer does not answer
    // the disconnect) cannot be forced any more; nothing is pending on
    // them, so freeing the request lets ucp_worker_destroy() release the
    // endpoint.
    for (ClosingEp &E : Closing)
      ucp_request_free(E.Req);
    Closing.clear();
    // Forced closes finish discarding their lanes here.
    while (ucp_worker_progress(Worker))
      ;
  }
  for (SendOp *Op : Sending)
    Op->Done = nullptr; // Dropped, not called (see above).
  if (Worker)
    ucp_worker_destroy(Worker); // May complete sends: onSendDone frees them.
  for (SendOp *Op : Sending)
    delete Op;
  // Receives UCX never completed (their peer died mid-rendezvous): nothing
  // writes into their buffers any more.
  Receiving.clear();
  Completions.clear();
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
  // UCX matches endpoints that two workers create to each other's
  // addresses: where the peer's endpoint reached us first, UCX made one
  // for it (a peer connected by address, known by its reply endpoint) and
  // hands that same endpoint back here. It is one connection, now ours
  // (ucp_ep_create applied our error handler): a second one on the same
  // endpoint would get the peer's answers to what it sent on the first.
  if (auto It = ByEp.find(Ep); It != ByEp.end()) {
    if (Conn *Co = findConn(It->second); Co && Co->Ep == Ep) {
      Co->Owned = true;
      return It->second;
    }
  }
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

Expected<uint16_t> UcxTransport::listen(StringRef Host, uint16_t Port) {
  if (Listener)
    return createStringError("already listening");
  Expected<sockaddr_storage> SS = resolve(Host, Port, /*Passive=*/true);
  if (!SS)
    return SS.takeError();
  // What UCX would fail at, or not even notice, said first in tc's words.
  std::string Where = formatv("{0}:{1}", Host, Port).str();
  if (Error E = checkListenAddress(*SS, Where, ReuseAddr))
    return std::move(E);
  if (Error E = checkListenDevice(Context, *SS, Where))
    return std::move(E);
  ucp_listener_params_t P{};
  P.field_mask =
      UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  P.sockaddr.addr = reinterpret_cast<const sockaddr *>(&*SS);
  P.sockaddr.addrlen = sockLen(*SS);
  P.conn_handler.cb = &UcxTransport::onConnRequest;
  P.conn_handler.arg = this;
  ucs_status_t S = ucp_listener_create(Worker, &P, &Listener);
  if (S == UCS_ERR_BUSY) // Taken since the check.
    return createStringError("cannot listen on %s: the address is in use",
                             Where.c_str());
  if (S != UCS_OK)
    return ucxError("cannot listen on " + Where, S);
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
  Expected<ConnId> C = createEp(P, "worker address peer");
  if (C)
    Conns[*C].ByAddress = true;
  return C;
}

void UcxTransport::closeEp(ucp_ep_h Ep, bool Force) {
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
  ClosingEps.insert(Ep);
  if (Force)
    return startClose(Ep, /*Force=*/true);
  ucp_request_param_t P{};
  ucs_status_ptr_t R = ucp_ep_flush_nbx(Ep, &P);
  if (R == nullptr)
    return startClose(Ep, /*Force=*/false);
  if (UCS_PTR_IS_ERR(R))
    return startClose(Ep, /*Force=*/true);
  Closing.push_back(ClosingEp{Ep, R, /*Flushing=*/true,
                              std::chrono::steady_clock::now() +
                                  CloseFlushLimit});
  Chores = true;
}

void UcxTransport::startClose(ucp_ep_h Ep, bool Force) {
  ucp_request_param_t P{};
  P.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  P.flags = Force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t R = ucp_ep_close_nbx(Ep, &P);
  if (R && !UCS_PTR_IS_ERR(R)) {
    Closing.push_back(ClosingEp{Ep, R, /*Flushing=*/false, {}});
    Chores = true;
  } else {
    ClosingEps.erase(Ep);
  }
}

void UcxTransport::reapClosing(bool Expire) {
  auto Now = std::chrono::steady_clock::now();
  // Taken out: a flushed endpoint's close joins the list meanwhile.
  std::vector<ClosingEp> Todo;
  Todo.swap(Closing);
  for (ClosingEp &E : Todo) {
    ucs_status_t S = ucp_request_check_status(E.Req);
    if (S == UCS_INPROGRESS) {
      if (!E.Flushing || (!Expire && Now < E.Deadline)) {
        Closing.push_back(E);
        continue;
      }
      // The peer has not taken what was sent: give up on it. The forced
      // close ends the flush too (cancelled); UCX frees it then.
      ucp_request_free(E.Req);
      startClose(E.Ep, /*Force=*/true);
      continue;
    }
    ucp_request_free(E.Req);
    if (E.Flushing)
      startClose(E.Ep, /*Force=*/S != UCS_OK);
    else
      ClosingEps.erase(E.Ep);
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

void UcxTransport::abandon(ConnId C) {
  auto It = Conns.find(C);
  if (It == Conns.end())
    return;
  Conn &Co = It->second;
  // What never reached UCX fails here; what UCX holds, the forced close
  // cancels (onSendDone reports it).
  std::string Why = formatv("connection to {0} abandoned", Co.Peer).str();
  for (Outgoing &O : Co.Backlog)
    for (auto &D : O.Done)
      complete(std::move(D), Why);
  for (Conn::Waiting &W : Co.Pending)
    complete(std::move(W.Done), Why);
  if (ucp_ep_h Ep = Co.Ep) {
    if (Co.Owned) {
      CloseWhenReceived.erase(Ep);
      closeEp(Ep, /*Force=*/true);
    } else {
      ByEp.erase(Ep);
    }
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
  Lost.emplace_back(C, Closed ? closedWords(Peer)
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
        D.first(connectionError(D.second));
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
        Done(connectionError(L.second));
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

} // namespace ucx

Expected<std::unique_ptr<Transport>>
createUcxTransport(const UcxTransportOptions &Opts) {
  Expected<std::unique_ptr<ucx::UcxTransport>> T =
      ucx::UcxTransport::create(Opts);
  if (!T)
    return T.takeError();
  return std::unique_ptr<Transport>(std::move(*T));
}

} // namespace tc
