//===- UcxAm.cpp - TSI on UCX's own active messages, without libtc -------===//
//
// `tc-bench tsi` mode ucx_am: the active-message baseline of the papers,
// written straight on UCP. Two processes of this machine (this one and a
// forked child on the server CPU) exchange worker addresses over a socket
// pair and send each other UCX active messages whose data is a function id
// and the one-byte TSI payload. The receiving handler looks the id up,
// copies the payload out as any handler that keeps it must, and calls
// tsi_main, which is linked in: what a UCX user writing TSI would do. The
// UCX setup is libtc's (AM and WAKEUP features, peer error handling, shared
// memory error handling when UCX_TLS allows shared memory), so the figures
// compare the runtime with UCX doing the same work under the same
// guarantees; ucx_perftest, whose handler does no work, is the other
// reference.
//
//===----------------------------------------------------------------------===//

#include "UcxAm.h"

#include <algorithm>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern "C" void tsi_main(void *Payload, size_t Size, void *TargetArgs);

namespace bench {
namespace ucx {

static bool mayUseSharedMemory() {
  const char *Tls = std::getenv("UCX_TLS");
  if (!Tls || !*Tls || Tls[0] == '^')
    return true;
  std::string L = std::string(",") + Tls + ",";
  for (const char *N : {"all", "sm", "shm", "mm", "posix", "sysv"})
    if (L.find(std::string(",") + N + ",") != std::string::npos)
      return true;
  return false;
}

std::string init(Peer &S, std::initializer_list<Handler> Hs) {
  ucp_config_t *Cfg;
  ucs_status_t St = ucp_config_read(nullptr, nullptr, &Cfg);
  if (St != UCS_OK)
    return std::string("ucp_config_read: ") + ucs_status_string(St);
  if (mayUseSharedMemory() && !std::getenv("UCX_MM_ERROR_HANDLING") &&
      (St = ucp_config_modify(Cfg, "MM_ERROR_HANDLING", "y")) != UCS_OK) {
    ucp_config_release(Cfg);
    return std::string("UCX MM_ERROR_HANDLING: ") + ucs_status_string(St);
  }
  ucp_params_t P{};
  P.field_mask = UCP_PARAM_FIELD_FEATURES;
  P.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  St = ucp_init(&P, Cfg, &S.Ctx);
  ucp_config_release(Cfg);
  if (St != UCS_OK)
    return std::string("ucp_init: ") + ucs_status_string(St);
  ucp_worker_params_t WP{};
  WP.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  WP.thread_mode = UCS_THREAD_MODE_SINGLE;
  if ((St = ucp_worker_create(S.Ctx, &WP, &S.W)) != UCS_OK)
    return std::string("ucp_worker_create: ") + ucs_status_string(St);
  for (const Handler &Hd : Hs) {
    ucp_am_handler_param_t H{};
    H.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                   UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                   UCP_AM_HANDLER_PARAM_FIELD_CB |
                   UCP_AM_HANDLER_PARAM_FIELD_ARG;
    H.id = Hd.Id;
    H.flags = UCP_AM_FLAG_WHOLE_MSG;
    H.cb = Hd.Cb;
    H.arg = Hd.Arg;
    if ((St = ucp_worker_set_am_recv_handler(S.W, &H)) != UCS_OK)
      return std::string("ucp_worker_set_am_recv_handler: ") +
             ucs_status_string(St);
  }
  return "";
}

bool writeAll(int Fd, const void *P, size_t N) {
  for (size_t Done = 0; Done < N;) {
    ssize_t R = write(Fd, static_cast<const char *>(P) + Done, N - Done);
    if (R <= 0)
      return false;
    Done += size_t(R);
  }
  return true;
}

bool readAll(int Fd, void *P, size_t N) {
  for (size_t Done = 0; Done < N;) {
    ssize_t R = read(Fd, static_cast<char *>(P) + Done, N - Done);
    if (R <= 0)
      return false;
    Done += size_t(R);
  }
  return true;
}

std::string connect(Peer &S, int Fd) {
  ucp_address_t *Addr;
  size_t Len;
  ucs_status_t St = ucp_worker_get_address(S.W, &Addr, &Len);
  if (St != UCS_OK)
    return std::string("ucp_worker_get_address: ") + ucs_status_string(St);
  bool Sent = writeAll(Fd, &Len, sizeof Len) && writeAll(Fd, Addr, Len);
  ucp_worker_release_address(S.W, Addr);
  size_t PeerLen = 0;
  if (!Sent || !readAll(Fd, &PeerLen, sizeof PeerLen) || PeerLen > (1 << 20))
    return "the peer process did not send its address";
  std::string Other(PeerLen, '\0');
  if (!readAll(Fd, &Other[0], PeerLen))
    return "the peer process did not send its address";
  ucp_ep_params_t EP{};
  EP.field_mask =
      UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  EP.address = reinterpret_cast<const ucp_address_t *>(Other.data());
  EP.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  if ((St = ucp_ep_create(S.W, &EP, &S.Ep)) != UCS_OK)
    return std::string("ucp_ep_create: ") + ucs_status_string(St);
  return "";
}

void close(Peer &S) {
  if (S.Ep) {
    ucp_request_param_t P{};
    P.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    P.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t R = ucp_ep_close_nbx(S.Ep, &P);
    auto T0 = Clock::now();
    while (R && !UCS_PTR_IS_ERR(R) &&
           ucp_request_check_status(R) == UCS_INPROGRESS &&
           secondsSince(T0) < 2)
      ucp_worker_progress(S.W);
    if (R && !UCS_PTR_IS_ERR(R))
      ucp_request_free(R);
  }
  if (S.W)
    ucp_worker_destroy(S.W);
  if (S.Ctx)
    ucp_cleanup(S.Ctx);
}

std::string sendNow(Peer &S, unsigned AmId, const void *Data, size_t Size) {
  ucp_request_param_t P;
  P.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
  P.flags = 0;
  Deadline D;
  for (unsigned I = 0;; ++I) {
    ucs_status_ptr_t R =
        ucp_am_send_nbx(S.Ep, AmId, nullptr, 0, Data, Size, &P);
    if (R == nullptr)
      return "";
    if (UCS_PTR_STATUS(R) != UCS_ERR_NO_RESOURCE)
      return std::string("ucp_am_send_nbx: ") +
             ucs_status_string(UCS_PTR_STATUS(R));
    ucp_worker_progress(S.W);
    if ((I & 1023) == 1023 && D.passed(TimeoutS))
      return "timed out sending";
  }
}

Forked fork(int (*Serve)(int Fd, void *Arg), void *Arg, const char *Name) {
  int Fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, Fds) != 0)
    die(std::string(Name) + ": socketpair failed");
  std::fflush(nullptr);
  pid_t Pid = ::fork();
  if (Pid < 0)
    die(std::string(Name) + ": fork failed");
  if (Pid == 0) {
    ::close(Fds[0]);
    if (ServerCpu >= 0) {
      cpu_set_t Set;
      CPU_ZERO(&Set);
      CPU_SET(ServerCpu, &Set);
      sched_setaffinity(0, sizeof Set, &Set);
    }
    _exit(Serve(Fds[1], Arg));
  }
  ::close(Fds[1]);
  return Forked{Pid, Fds[0]};
}

void reap(Forked &F, std::string &Err) {
  if (F.Fd >= 0)
    ::close(F.Fd);
  F.Fd = -1;
  if (F.Pid <= 0)
    return;
  if (!Err.empty())
    kill(F.Pid, SIGTERM); // Ours, by PID: it may be waiting for messages.
  int Status = 0;
  if (waitpid(F.Pid, &Status, 0) != F.Pid || !WIFEXITED(Status) ||
      WEXITSTATUS(Status) != 0)
    Err += Err.empty() ? "the server process failed" : "";
  F.Pid = -1;
}

} // namespace ucx

namespace {

constexpr unsigned TsiAmId = 3;

/// The id -> function table a UCX AM program keeps; TSI is entry 0.
using LocalFn = void (*)(void *, size_t, void *);
LocalFn Functions[] = {tsi_main};

/// One side's state; the handler's argument.
struct Side : ucx::Peer {
  uint64_t Counter = 0; ///< TSI's target: incremented by every message.
  uint64_t Bad = 0;     ///< Messages that were not an id + payload.
};

ucs_status_t onTsi(void *Arg, const void *, size_t, void *Data, size_t Length,
                   const ucp_am_recv_param_t *) {
  auto *S = static_cast<Side *>(Arg);
  uint32_t Id;
  if (Length < sizeof Id) {
    ++S->Bad;
    return UCS_OK;
  }
  std::memcpy(&Id, Data, sizeof Id);
  if (Id >= sizeof Functions / sizeof *Functions) {
    ++S->Bad;
    return UCS_OK;
  }
  alignas(std::max_align_t) char Payload[64];
  size_t Size = std::min(Length - sizeof Id, sizeof Payload);
  std::memcpy(Payload, static_cast<char *>(Data) + sizeof Id, Size);
  Functions[Id](Payload, Size, &S->Counter);
  return UCS_OK;
}

std::string init(Side &S) {
  return ucx::init(S, {{TsiAmId, onTsi, &S}});
}

/// The message: function id 0 (TSI), then the one-byte payload.
const unsigned char Message[5] = {0, 0, 0, 0, 1};

/// Sends one message, completing at once when UCX can (as libtc does).
std::string send(Side &S) {
  return ucx::sendNow(S, TsiAmId, Message, sizeof Message);
}

/// Progresses until \p S's counter reaches \p Want.
std::string await(Side &S, uint64_t Want) {
  return ucx::progressUntil(S.W, [&] { return S.Counter >= Want; },
                            "the peer's messages");
}

struct Counts {
  uint64_t Pings, Msgs;
};

/// The server: answers each of the first Pings messages, then counts Msgs
/// more and answers once. Returns the process exit code.
int serve(int Fd, void *Arg) {
  auto [Pings, Msgs] = *static_cast<Counts *>(Arg);
  Side S;
  std::string Err = init(S);
  if (Err.empty())
    Err = ucx::connect(S, Fd);
  for (uint64_t I = 1; Err.empty() && I <= Pings; ++I)
    if ((Err = await(S, I)).empty())
      Err = send(S);
  if (Err.empty() && (Err = await(S, Pings + Msgs)).empty())
    Err = send(S);
  // Wait for the client to be done before closing the endpoint under it.
  char Bye;
  if (Err.empty() && !ucx::readAll(Fd, &Bye, 1))
    Err = "the client went away";
  if (Err.empty() && S.Bad)
    Err = std::to_string(S.Bad) + " malformed messages";
  if (Err.empty() && S.Counter != Pings + Msgs)
    Err = "ran " + std::to_string(S.Counter) + " increments, expected " +
          std::to_string(Pings + Msgs);
  ucx::close(S);
  if (!Err.empty())
    std::fprintf(stderr, "tc-bench: error: ucx_am server: %s\n", Err.c_str());
  return Err.empty() ? 0 : 1;
}

} // namespace

UcxAmFigures ucxAmTsi(uint64_t Warmup, uint64_t Iters, uint64_t Msgs) {
  Counts N{Warmup + Iters, Msgs};
  ucx::Forked Srv = ucx::fork(serve, &N, "ucx_am");
  Side S;
  std::string Err = init(S);
  if (Err.empty())
    Err = ucx::connect(S, Srv.Fd);
  UcxAmFigures F{};
  // Ping-pong: each side's handler runs TSI; the client's counter counts
  // the pongs.
  auto T0 = Clock::now();
  for (uint64_t I = 1; Err.empty() && I <= Warmup + Iters; ++I) {
    if (I == Warmup + 1)
      T0 = Clock::now();
    if ((Err = send(S)).empty())
      Err = await(S, I);
  }
  if (Err.empty())
    F.LatencyUs = secondsSince(T0) / double(Iters) / 2 * 1e6;
  // Rate: back to back, progressing every 16 sends; the server answers once
  // it has run them all.
  T0 = Clock::now();
  for (uint64_t I = 0; Err.empty() && I < Msgs; ++I) {
    Err = send(S);
    if ((I & 15) == 15)
      ucp_worker_progress(S.W);
  }
  if (Err.empty() && (Err = await(S, Warmup + Iters + 1)).empty())
    F.Rate = double(Msgs) / secondsSince(T0);
  char Bye = 0;
  ucx::writeAll(Srv.Fd, &Bye, 1);
  if (Err.empty() && S.Bad)
    Err = std::to_string(S.Bad) + " malformed messages";
  ucx::close(S);
  ucx::reap(Srv, Err);
  if (!Err.empty())
    die("ucx_am: " + Err);
  return F;
}

} // namespace bench
