//===- RawUcx.cpp - UCX without libtc, for tc-bench's references ----------===//

#include "RawUcx.h"
#include "Bench.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace bench {

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

std::string rawInit(RawSide &S, uint64_t Features) {
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
  P.features = Features;
  St = ucp_init(&P, Cfg, &S.Ctx);
  ucp_config_release(Cfg);
  if (St != UCS_OK)
    return std::string("ucp_init: ") + ucs_status_string(St);
  ucp_worker_params_t WP{};
  WP.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  WP.thread_mode = UCS_THREAD_MODE_SINGLE;
  if ((St = ucp_worker_create(S.Ctx, &WP, &S.W)) != UCS_OK)
    return std::string("ucp_worker_create: ") + ucs_status_string(St);
  return "";
}

std::string rawSetAmHandler(RawSide &S, unsigned Id, ucp_am_recv_callback_t Cb,
                            void *Arg) {
  ucp_am_handler_param_t H{};
  H.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                 UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                 UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  H.id = Id;
  H.flags = UCP_AM_FLAG_WHOLE_MSG;
  H.cb = Cb;
  H.arg = Arg;
  if (ucs_status_t St = ucp_worker_set_am_recv_handler(S.W, &H); St != UCS_OK)
    return std::string("ucp_worker_set_am_recv_handler: ") +
           ucs_status_string(St);
  return "";
}

std::string rawAmInit(RawSide &S, int Fd, unsigned AmId,
                      ucp_am_recv_callback_t Cb, void *Arg) {
  std::string Err = rawInit(S, UCP_FEATURE_AM | UCP_FEATURE_WAKEUP);
  if (Err.empty())
    Err = rawSetAmHandler(S, AmId, Cb, Arg);
  return Err.empty() ? rawConnect(S, Fd) : Err;
}

std::string rawSendNow(RawSide &S, unsigned AmId, const void *Data,
                       size_t Size) {
  ucp_request_param_t P;
  P.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
  P.flags = 0;
  Deadline D;
  for (unsigned I = 0;; ++I) {
    ucs_status_ptr_t R = ucp_am_send_nbx(S.Ep, AmId, nullptr, 0, Data, Size, &P);
    if (R == nullptr)
      return "";
    if (UCS_PTR_STATUS(R) != UCS_ERR_NO_RESOURCE)
      return std::string("ucp_am_send_nbx: ") +
             ucs_status_string(UCS_PTR_STATUS(R));
    ucp_worker_progress(S.W);
    if ((I & 1023) == 1023 && D.passed(RawTimeoutS))
      return "timed out sending";
  }
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

bool writeBlob(int Fd, const std::string &B) {
  size_t Len = B.size();
  return writeAll(Fd, &Len, sizeof Len) && writeAll(Fd, B.data(), Len);
}

bool readBlob(int Fd, std::string &B) {
  size_t Len = 0;
  if (!readAll(Fd, &Len, sizeof Len) || Len > (1 << 20))
    return false;
  B.assign(Len, '\0');
  return readAll(Fd, &B[0], Len);
}

std::string rawConnect(RawSide &S, int Fd) {
  ucp_address_t *Addr;
  size_t Len;
  ucs_status_t St = ucp_worker_get_address(S.W, &Addr, &Len);
  if (St != UCS_OK)
    return std::string("ucp_worker_get_address: ") + ucs_status_string(St);
  bool Sent =
      writeBlob(Fd, std::string(reinterpret_cast<const char *>(Addr), Len));
  ucp_worker_release_address(S.W, Addr);
  std::string Peer;
  if (!Sent || !readBlob(Fd, Peer))
    return "the peer process did not send its address";
  ucp_ep_params_t EP{};
  EP.field_mask =
      UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  EP.address = reinterpret_cast<const ucp_address_t *>(Peer.data());
  EP.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  if ((St = ucp_ep_create(S.W, &EP, &S.Ep)) != UCS_OK)
    return std::string("ucp_ep_create: ") + ucs_status_string(St);
  return "";
}

void rawClose(RawSide &S) {
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
  S = RawSide();
}

void rawAwaitGoodbye(int Fd, std::string &Err) {
  char Bye;
  if (Err.empty() && !readAll(Fd, &Bye, 1))
    Err = "the client went away";
}

int rawServerExit(const char *Name, const std::string &Err) {
  if (Err.empty())
    return 0;
  std::fprintf(stderr, "tc-bench: error: %s server: %s\n", Name, Err.c_str());
  return 1;
}

void pinTo(int Cpu) {
  if (Cpu < 0)
    return;
  cpu_set_t Set;
  CPU_ZERO(&Set);
  CPU_SET(Cpu, &Set);
  sched_setaffinity(0, sizeof Set, &Set);
}

std::string runPair(int (*Serve)(int Fd, void *Arg), void *ServeArg,
                    std::string (*Drive)(int Fd, void *Arg), void *DriveArg) {
  int Fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, Fds) != 0)
    return "socketpair failed";
  std::fflush(nullptr);
  pid_t Pid = fork();
  if (Pid < 0)
    return "fork failed";
  if (Pid == 0) {
    close(Fds[0]);
    pinTo(ServerCpu);
    _exit(Serve(Fds[1], ServeArg));
  }
  close(Fds[1]);
  std::string Err = Drive(Fds[0], DriveArg);
  close(Fds[0]);
  if (!Err.empty())
    kill(Pid, SIGTERM); // Ours, by PID: it may be waiting for messages.
  int Status = 0;
  if (waitpid(Pid, &Status, 0) != Pid || !WIFEXITED(Status) ||
      WEXITSTATUS(Status) != 0)
    Err += Err.empty() ? "the server process failed" : "";
  return Err;
}

} // namespace bench
