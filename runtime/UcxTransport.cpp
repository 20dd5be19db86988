//===- UcxTransport.cpp - Frames as UCX active messages -------------------===//
//
// One ucp_context (AM + WAKEUP) and one single-threaded ucp_worker per
// transport. A frame is one active message with id TcAmId: the frame header
// is the AM header, the body the AM data, so UCX chooses eager or rendezvous
// by size and works over shared memory, TCP and RDMA alike.
//
// Every send asks for a reply endpoint (UCP_AM_SEND_FLAG_REPLY), so the
// receiver learns which connection a frame came from even for peers that
// connected by worker address; an endpoint seen for the first time is a new
// connection. Endpoints we create use peer error handling, so a peer that
// dies becomes onDisconnect, not a hang.
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

#include "Transport.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <ucp/api/ucp.h>

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

using namespace llvm;

namespace tc {

namespace {

/// The active message id tc frames use.
constexpr unsigned TcAmId = 0x7C;

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

/// A send that did not leave at once: owns copies of the header and body
/// until UCX is done with them (UCX 1.13 has no
/// UCP_AM_SEND_FLAG_COPY_HEADER).
struct SendOp {
  UcxTransport *T;
  ConnId Conn;
  std::string Header;
  std::string Body;
  /// Empty once reported (the connection died first); the op then lives on
  /// only until UCX lets go of it.
  unique_function<void(Error)> Done;
};

/// A frame received on a connection, waiting for delivery in order.
struct Arrival {
  std::string Header;
  std::string Body;
  bool Ready = false; ///< False while a rendezvous receive is in flight.
};

/// A rendezvous receive in flight. It shares the buffer with the queue so
/// that dropping the connection never frees memory UCX is writing into.
struct RecvOp {
  UcxTransport *T;
  ConnId Conn;
  std::shared_ptr<Arrival> Slot;
};

class UcxTransport final : public Transport {
public:
  static Expected<std::unique_ptr<UcxTransport>>
  create(const UcxTransportOptions &Opts);
  ~UcxTransport() override;

  void setHandler(TransportHandler *H) override { Handler = H; }
  Expected<uint16_t> listen(StringRef Host, uint16_t Port) override;
  Expected<ConnId> connect(StringRef Host, uint16_t Port) override;
  Expected<std::string> address() override;
  Expected<ConnId> connectAddress(StringRef Address) override;
  void send(ConnId C, StringRef Header, StringRef Body,
            unique_function<void(Error)> Done) override;
  void disconnect(ConnId C) override;
  bool progress() override;
  Error wait(int TimeoutMs) override;
  void signal() override;

private:
  struct Conn {
    ucp_ep_h Ep = nullptr;
    /// False for the reply endpoint of a peer that connected by address:
    /// UCX made it and UCX closes it (closing it ourselves trips UCX).
    bool Owned = true;
    std::string Peer; ///< For messages: host:port or "address peer".
    std::deque<std::shared_ptr<Arrival>> Queue;
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
    Conns.erase(It);
  }
  ConnId addConn(ucp_ep_h Ep, std::string Peer);
  Expected<ConnId> createEp(ucp_ep_params_t &P, std::string Peer);
  void closeEp(ucp_ep_h Ep, bool Force);
  void deliverReady(ConnId C);
  void lost(ucp_ep_h Ep, ucs_status_t S);
  /// Queues \p Done with \p Err (empty: success) for progress(); nothing
  /// is kept for a send without a callback.
  void complete(unique_function<void(Error)> Done, StringRef Err) {
    Activity = true;
    if (Done)
      Completions.emplace_back(std::move(Done), Err.str());
  }
  /// Frees the endpoint-close requests that have finished.
  void reapClosing() {
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
  static void onSendDone(void *Req, ucs_status_t S, void *User);
  static void onRecvDone(void *Req, ucs_status_t S, size_t Len, void *User);

  ucp_context_h Context = nullptr;
  ucp_worker_h Worker = nullptr;
  ucp_listener_h Listener = nullptr;
  int WakeFd = -1;
  TransportHandler *Handler = nullptr;
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
  /// Sends UCX has not completed, on open and closed connections alike.
  SmallPtrSet<SendOp *, 16> Sending;
  bool Activity = false;
  /// Set by the destructor: no handler callback may run any more.
  bool Destroying = false;
};

Expected<std::unique_ptr<UcxTransport>>
UcxTransport::create(const UcxTransportOptions &Opts) {
  std::unique_ptr<UcxTransport> T(new UcxTransport());
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

  ucp_am_handler_param_t HP{};
  HP.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                  UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                  UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  HP.id = TcAmId;
  HP.flags = UCP_AM_FLAG_WHOLE_MSG;
  HP.cb = &UcxTransport::onAm;
  HP.arg = T.get();
  if ((S = ucp_worker_set_am_recv_handler(T->Worker, &HP)) != UCS_OK)
    return ucxError("ucp_worker_set_am_recv_handler", S);

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
  // Close every endpoint, flushing so peers hear about it; force what has
  // not finished in a bounded time (the peer may be dead, and a flush to a
  // dead peer lasts until UCX's keepalive gives up on it).
  std::vector<ucp_ep_h> Eps;
  for (auto &KV : Conns)
    if (KV.second.Ep && KV.second.Owned)
      Eps.push_back(KV.second.Ep);
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
  if (It != T->Conns.end())
    Peer = It->second.Peer;
  // Queued, not called: a forced close completes sends from inside
  // ucp_ep_close_nbx(), which disconnect() and the destructor call.
  if (Op->Done)
    T->complete(std::move(Op->Done),
                S == UCS_OK ? std::string()
                            : formatv("send to {0} failed: {1}", Peer,
                                      ucs_status_string(S))
                                  .str());
  delete Op;
  ucp_request_free(Req);
}

void UcxTransport::send(ConnId C, StringRef Header, StringRef Body,
                        unique_function<void(Error)> Done) {
  Conn *Co = findConn(C);
  if (!Co || !Co->Ep) {
    complete(std::move(Done), formatv("connection {0} is closed", C).str());
    return;
  }
  // UCX keeps pointers to the header and body of a send it cannot start
  // at once, so both are copied into the op. No zero-copy attempt with
  // UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL first: UCX 1.13 refuses immediate
  // completion (UCS_ERR_NO_RESOURCE) for every UCP_AM_SEND_FLAG_REPLY send,
  // so it would only add a failed call to each frame.
  // UCX reads only the fields op_attr_mask names: no need to clear the rest.
  ucp_request_param_t P;
  auto *Op = new SendOp{this, C, Header.str(), Body.str(), std::move(Done)};
  P.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                   UCP_OP_ATTR_FIELD_FLAGS;
  P.flags = UCP_AM_SEND_FLAG_REPLY;
  P.cb.send = &UcxTransport::onSendDone;
  P.user_data = Op;
  ucs_status_ptr_t R =
      ucp_am_send_nbx(Co->Ep, TcAmId, Op->Header.data(), Op->Header.size(),
                      Op->Body.data(), Op->Body.size(), &P);
  if (R == nullptr) {
    complete(std::move(Op->Done), "");
    delete Op;
  } else if (UCS_PTR_IS_ERR(R)) {
    complete(std::move(Op->Done),
             formatv("send to {0} failed: {1}", Co->Peer,
                     ucs_status_string(UCS_PTR_STATUS(R)))
                 .str());
    delete Op;
  } else {
    Sending.insert(Op);
  }
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
    if (C != Conns.end())
      C->second.Ep = nullptr;
    ByEp.erase(It);
  }
  ucs_status_ptr_t R = ucp_ep_close_nbx(Ep, &P);
  if (R && !UCS_PTR_IS_ERR(R)) {
    Closing.emplace_back(R, Ep);
    ClosingEps.insert(Ep);
  }
}

void UcxTransport::disconnect(ConnId C) {
  auto It = Conns.find(C);
  if (It == Conns.end())
    return;
  // Flush: frames already sent reach the peer, and their sends complete
  // (from a later progress()) as UCX finishes them, successfully or not.
  if (It->second.Ep && It->second.Owned)
    closeEp(It->second.Ep, /*Force=*/false);
  else if (It->second.Ep)
    ByEp.erase(It->second.Ep);
  eraseConn(It);
  llvm::erase_if(Lost, [&](const std::pair<ConnId, std::string> &L) {
    return L.first == C;
  });
}

void UcxTransport::lost(ucp_ep_h Ep, ucs_status_t S) {
  auto It = ByEp.find(Ep);
  if (It == ByEp.end())
    return;
  ConnId C = It->second;
  std::string Peer = Conns.count(C) ? Conns[C].Peer : std::string("peer");
  Activity = true;
  // UCX asks for a forced close of a failed endpoint; it completes the
  // sends still pending (with UCS_ERR_CANCELED) before it returns.
  closeEp(Ep, /*Force=*/true);
  Lost.emplace_back(C, formatv("connection to {0} lost: {1}", Peer,
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
    if (It == Conns.end() || It->second.Queue.empty() ||
        !It->second.Queue.front()->Ready)
      return;
    std::shared_ptr<Arrival> A = std::move(It->second.Queue.front());
    It->second.Queue.pop_front();
    Handler->onFrame(C, A->Header, A->Body);
  }
}

void UcxTransport::onRecvDone(void *Req, ucs_status_t S, size_t, void *User) {
  auto *Op = static_cast<RecvOp *>(User);
  UcxTransport *T = Op->T;
  T->Activity = true;
  if (S == UCS_OK) {
    Op->Slot->Ready = true;
  } else {
    // The frame is lost with the connection; drop it from the queue.
    auto It = T->Conns.find(Op->Conn);
    if (It != T->Conns.end())
      llvm::erase_if(It->second.Queue, [&](const std::shared_ptr<Arrival> &A) {
        return A == Op->Slot;
      });
  }
  ConnId C = Op->Conn;
  delete Op;
  if (Req)
    ucp_request_free(Req);
  T->deliverReady(C);
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
    return UCS_OK; // Not one of ours: tc always asks for a reply ep.
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
  Conn *Found = T->findConn(C);
  Conn &Co = Found ? *Found : T->Conns[C];
  StringRef H(static_cast<const char *>(Header), HeaderLen);
  bool Rndv = Param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
  if (!Rndv && Co.Queue.empty()) {
    T->Handler->onFrame(C, H, StringRef(static_cast<const char *>(Data),
                                        Length));
    return UCS_OK;
  }
  auto Slot = std::make_shared<Arrival>();
  Slot->Header = H.str();
  Co.Queue.push_back(Slot);
  if (!Rndv) {
    Slot->Body.assign(static_cast<const char *>(Data), Length);
    Slot->Ready = true;
    return UCS_OK;
  }
  Slot->Body.resize(Length);
  auto *Op = new RecvOp{T, C, Slot};
  ucp_request_param_t P{};
  P.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  P.cb.recv_am = &UcxTransport::onRecvDone;
  P.user_data = Op;
  ucs_status_ptr_t R =
      ucp_am_recv_data_nbx(T->Worker, Data, Slot->Body.data(), Length, &P);
  if (R == nullptr)
    onRecvDone(nullptr, UCS_OK, Length, Op);
  else if (UCS_PTR_IS_ERR(R))
    onRecvDone(nullptr, UCS_PTR_STATUS(R), 0, Op);
  return UCS_INPROGRESS;
}

bool UcxTransport::progress() {
  // One pass, as ucp_worker_progress users do: a caller that got `true`
  // calls again. Looping here until UCX is quiet would add a whole poll of
  // every transport to each message's latency.
  Activity = ucp_worker_progress(Worker) != 0;
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
      eraseConn(It);
      for (auto &Done : Late)
        Done(createStringError(L.second));
      Handler->onDisconnect(L.first, L.second);
    }
  }
  if (!Closing.empty())
    reapClosing();
  return Activity;
}

Error UcxTransport::wait(int TimeoutMs) {
  if (!Completions.empty() || !Lost.empty())
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
  int RC = poll(Fds, 2, TimeoutMs);
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

} // namespace

Expected<std::unique_ptr<Transport>>
createUcxTransport(const UcxTransportOptions &Opts) {
  Expected<std::unique_ptr<UcxTransport>> T = UcxTransport::create(Opts);
  if (!T)
    return T.takeError();
  return std::unique_ptr<Transport>(std::move(*T));
}

} // namespace tc
