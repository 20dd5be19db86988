/* tc-gbpc: GET-based pointer chasing (GBPC) over raw UCX.
 *
 * The baseline the Three-Chains paper compares injected-function pointer
 * chasing (DAPC) against: the table of dapc_table.h is sharded over S
 * servers, and the client walks it itself, one 8-byte UCX RMA GET plus its
 * completion per hop. No libtc: only the ucp API.
 *
 *   tc-gbpc serve --listen HOST:PORT --entries N --servers S --id I
 *   tc-gbpc chase --servers HOST:PORT[,...] --entries N [--depth D] ...
 *
 * A server fills its shard, maps it with ucp_mem_map(), listens for
 * client-server (sockaddr) connections and sends every client a descriptor
 * (below) holding its shard bounds, the shard's address and the packed rkey.
 * The server then only progresses its worker, sleeping on the worker's event
 * fd while idle. How a GET travels is UCX's choice: over shared memory
 * (posix) the client maps the server's shard and a GET is a copy from it,
 * without the server; over TCP, which has no RMA, UCX emulates GETs with
 * active messages that the server's progress answers.
 *
 * The client connects to every server, checks each descriptor against its
 * own --entries/--servers/--seed, then runs the chases, verifying every end
 * against dapc_chase_ref().
 */
#define _GNU_SOURCE /* ppoll */

#include "dapc_table.h"

#include <ucp/api/ucp.h>

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/*===--- The descriptor --------------------------------------------------===*/

/* What a server sends each client right after accepting it: the payload of
 * one active message with id GBPC_AM_ID and no AM header, sent eagerly
 * (UCP_AM_SEND_FLAG_EAGER). Fields are in the server's byte order; client and
 * servers are expected to share the host architecture.
 *
 *   offset size field
 *        0    4 magic     GBPC_MAGIC
 *        4    4 version   GBPC_VERSION
 *        8    4 id        the server's --id
 *       12    4 servers   its --servers
 *       16    8 entries   its --entries (N)
 *       24    8 seed      its --seed
 *       32    8 lo        first entry of its shard
 *       40    8 hi        one past the last entry of its shard
 *       48    8 base      remote (virtual) address of entry lo
 *       56    8 rkey_len  bytes of packed rkey that follow
 *       64    * rkey      ucp_rkey_pack() output for the shard's memory
 *
 * Entry i (lo <= i < hi) is the 8-byte word at base + (i - lo) * 8. */
#define GBPC_AM_ID 0x47
#define GBPC_MAGIC 0x43504247u /* "GBPC" in little-endian memory order */
#define GBPC_VERSION 1u

typedef struct gbpc_desc {
  uint32_t magic;
  uint32_t version;
  uint32_t id;
  uint32_t servers;
  uint64_t entries;
  uint64_t seed;
  uint64_t lo;
  uint64_t hi;
  uint64_t base;
  uint64_t rkey_len;
} gbpc_desc_t;

_Static_assert(sizeof(gbpc_desc_t) == 64, "descriptor layout changed");

/*===--- Common helpers --------------------------------------------------===*/

static const char *const Usage =
    "USAGE: tc-gbpc serve --listen HOST:PORT --entries N --servers S --id I\n"
    "                     [--seed X] [--spin-us US] [-v]\n"
    "       tc-gbpc chase --servers HOST:PORT[,HOST:PORT...] --entries N\n"
    "                     [--seed X] [--depth D] [--count C] [--json]\n"
    "                     [--timeout SECONDS] [-v]\n"
    "\n"
    "GET-based pointer chasing (GBPC) over raw UCX: the client walks a table\n"
    "of N 8-byte entries (one pseudo-random cycle) sharded over S servers,\n"
    "with one 8-byte UCX RMA GET per hop.\n"
    "\n"
    "serve: fill shard I of S, print 'tc-gbpc: listening on HOST:PORT' (port\n"
    "       0 picks a free one) and serve clients until SIGINT/SIGTERM.\n"
    "  --listen HOST:PORT  Address to listen on\n"
    "  --entries N         Table entries (>= 2, >= S)\n"
    "  --servers S         Number of servers sharing the table\n"
    "  --id I              This server's shard, 0 <= I < S\n"
    "  --seed X            Table seed (default 0x7c5eed)\n"
    "  --spin-us US        Keep polling US microseconds after the last event\n"
    "                      before sleeping (default 0: sleep at once;\n"
    "                      spinning helps only with a core per process)\n"
    "  -v                  Log connections to stderr\n"
    "\n"
    "chase: connect to all servers (the i-th listed must be --id i), run C\n"
    "       chases of D hops (chase k starts at mix64(k + 1) % N), verify\n"
    "       every end and print the rate.\n"
    "  --servers LIST      Comma-separated HOST:PORT of servers 0..S-1\n"
    "  --entries N         Table entries (as the servers were started)\n"
    "  --seed X            Table seed (default 0x7c5eed)\n"
    "  --depth D           Hops per chase (default 1024)\n"
    "  --count C           Timed chases (default 1000; one untimed warm-up)\n"
    "  --json              Print a JSON array of records instead of a line\n"
    "  --timeout SECONDS   Bound on connecting and on one GET (default 10)\n"
    "  -v                  Print each endpoint's UCX configuration to stderr\n"
    "\n"
    "UCX settings come from the environment (UCX_TLS, UCX_NET_DEVICES, ...).\n";

static void fail(const char *Fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *Fmt, ...) {
  va_list Ap;
  va_start(Ap, Fmt);
  fflush(stdout);
  fputs("tc-gbpc: error: ", stderr);
  vfprintf(stderr, Fmt, Ap);
  fputc('\n', stderr);
  va_end(Ap);
  exit(1);
}

static double now_seconds(void) {
  struct timespec T;
  clock_gettime(CLOCK_MONOTONIC, &T);
  return (double)T.tv_sec + (double)T.tv_nsec * 1e-9;
}

/* Parses a decimal or 0x-prefixed hexadecimal unsigned integer. */
static uint64_t parse_u64(const char *Flag, const char *S) {
  int Base = 10;
  const char *Digits = S;
  if (S[0] == '0' && (S[1] == 'x' || S[1] == 'X')) {
    Base = 16;
    Digits = S + 2;
  }
  /* strtoull accepts leading blanks and signs; a table size does not. */
  bool Ok = Digits[0] != '\0';
  for (const char *P = Digits; Ok && *P; ++P)
    Ok = Base == 16 ? (*P >= '0' && *P <= '9') || (*P >= 'a' && *P <= 'f') ||
                          (*P >= 'A' && *P <= 'F')
                    : *P >= '0' && *P <= '9';
  if (!Ok)
    fail("%s: '%s' is not a non-negative integer", Flag, S);
  errno = 0;
  unsigned long long V = strtoull(Digits, NULL, Base);
  if (errno == ERANGE)
    fail("%s: '%s' is out of range", Flag, S);
  return (uint64_t)V;
}

static double parse_seconds(const char *Flag, const char *S) {
  char *End;
  errno = 0;
  double V = strtod(S, &End);
  if (End == S || *End != '\0' || errno == ERANGE || !(V > 0) || V > 1e6)
    fail("%s: '%s' is not a positive number of seconds", Flag, S);
  return V;
}

/* Splits HOST:PORT (or [V6]:PORT) into Host and Port. */
static void parse_host_port(const char *Flag, const char *S, char *Host,
                            size_t HostSize, uint16_t *Port) {
  const char *Colon = strrchr(S, ':');
  if (!Colon || Colon == S || Colon[1] == '\0')
    fail("%s: '%s' is not HOST:PORT", Flag, S);
  const char *H = S;
  size_t Len = (size_t)(Colon - S);
  if (H[0] == '[' && Colon[-1] == ']') {
    ++H;
    Len -= 2;
  }
  if (Len == 0 || Len >= HostSize)
    fail("%s: bad host in '%s'", Flag, S);
  memcpy(Host, H, Len);
  Host[Len] = '\0';
  uint64_t P = parse_u64(Flag, Colon + 1);
  if (P > 65535)
    fail("%s: port %" PRIu64 " in '%s' is out of range", Flag, P, S);
  *Port = (uint16_t)P;
}

/* Resolves a numeric or named host into a socket address. */
static void resolve(const char *Host, uint16_t Port, bool Passive,
                    struct sockaddr_storage *SS, socklen_t *Len) {
  char Service[8];
  snprintf(Service, sizeof Service, "%u", (unsigned)Port);
  struct addrinfo Hints, *Res;
  memset(&Hints, 0, sizeof Hints);
  Hints.ai_family = AF_UNSPEC;
  Hints.ai_socktype = SOCK_STREAM;
  Hints.ai_flags = AI_NUMERICSERV | (Passive ? AI_PASSIVE : 0);
  int RC = getaddrinfo(Host, Service, &Hints, &Res);
  if (RC != 0)
    fail("cannot resolve '%s': %s", Host, gai_strerror(RC));
  memcpy(SS, Res->ai_addr, Res->ai_addrlen);
  *Len = Res->ai_addrlen;
  freeaddrinfo(Res);
}

static uint16_t sockaddr_port(const struct sockaddr_storage *SS) {
  if (SS->ss_family == AF_INET6)
    return ntohs(((const struct sockaddr_in6 *)SS)->sin6_port);
  return ntohs(((const struct sockaddr_in *)SS)->sin_port);
}

/* A flag's value: "--flag VALUE" or "--flag=VALUE". Advances *I past it.
 * Returns NULL if Argv[*I] is not Name. */
static const char *flag_value(int Argc, char **Argv, int *I, const char *Name) {
  const char *A = Argv[*I];
  size_t N = strlen(Name);
  if (strncmp(A, Name, N) != 0)
    return NULL;
  if (A[N] == '=')
    return A + N + 1;
  if (A[N] != '\0')
    return NULL;
  if (*I + 1 >= Argc)
    fail("%s needs a value", Name);
  return Argv[++*I];
}

/* Whether UCX_TLS may select a shared-memory transport. */
static bool may_use_shared_memory(void) {
  const char *Tls = getenv("UCX_TLS");
  if (!Tls || !*Tls || Tls[0] == '^')
    return true;
  static const char *const Shm[] = {"all", "sm", "shm", "mm", "posix", "sysv"};
  for (const char *P = Tls; *P;) {
    size_t Len = strcspn(P, ",");
    for (size_t I = 0; I < sizeof Shm / sizeof *Shm; ++I)
      if (strlen(Shm[I]) == Len && !strncmp(P, Shm[I], Len))
        return true;
    P += Len + (P[Len] == ',');
  }
  return false;
}

/* One UCX context and single-threaded worker with the given features. */
static void ucx_init(uint64_t Features, ucp_context_h *Ctx,
                     ucp_worker_h *Worker) {
  ucp_config_t *Config;
  ucs_status_t S = ucp_config_read(NULL, NULL, &Config);
  if (S != UCS_OK)
    fail("ucp_config_read: %s", ucs_status_string(S));
  /* Shared-memory transports take part in endpoints with peer error
   * handling (which all of ours use) only when asked to; without this,
   * same-host peers would fall back to TCP. The environment wins, and
   * without shared memory UCX would warn that the setting is unused. */
  if (may_use_shared_memory() && !getenv("UCX_MM_ERROR_HANDLING") &&
      !getenv("UCX_POSIX_ERROR_HANDLING") &&
      !getenv("UCX_SYSV_ERROR_HANDLING") &&
      (S = ucp_config_modify(Config, "MM_ERROR_HANDLING", "y")) != UCS_OK)
    fail("UCX MM_ERROR_HANDLING: %s", ucs_status_string(S));
  ucp_params_t P;
  memset(&P, 0, sizeof P);
  P.field_mask = UCP_PARAM_FIELD_FEATURES;
  P.features = Features;
  S = ucp_init(&P, Config, Ctx);
  ucp_config_release(Config);
  if (S != UCS_OK)
    fail("ucp_init (UCX_TLS '%s'): %s",
         getenv("UCX_TLS") ? getenv("UCX_TLS") : "default",
         ucs_status_string(S));
  ucp_worker_params_t WP;
  memset(&WP, 0, sizeof WP);
  WP.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  WP.thread_mode = UCS_THREAD_MODE_SINGLE;
  if ((S = ucp_worker_create(*Ctx, &WP, Worker)) != UCS_OK)
    fail("ucp_worker_create: %s", ucs_status_string(S));
}

/* Closes endpoints, flushing so peers hear of it, for at most Seconds; a
 * close that has not finished by then is left to ucp_worker_destroy(). */
static void close_endpoints(ucp_worker_h Worker, ucp_ep_h *Eps, size_t N,
                            double Seconds) {
  void **Reqs = calloc(N ? N : 1, sizeof *Reqs);
  if (!Reqs)
    fail("out of memory");
  ucp_request_param_t P;
  memset(&P, 0, sizeof P);
  P.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  P.flags = 0; /* flush */
  for (size_t I = 0; I < N; ++I) {
    ucs_status_ptr_t R = Eps[I] ? ucp_ep_close_nbx(Eps[I], &P) : NULL;
    Reqs[I] = UCS_PTR_IS_PTR(R) ? R : NULL;
  }
  double Deadline = now_seconds() + Seconds;
  for (;;) {
    bool Pending = false;
    for (size_t I = 0; I < N; ++I) {
      if (Reqs[I] && ucp_request_check_status(Reqs[I]) != UCS_INPROGRESS) {
        ucp_request_free(Reqs[I]);
        Reqs[I] = NULL;
      }
      Pending |= Reqs[I] != NULL;
    }
    if (!Pending || now_seconds() > Deadline)
      break;
    ucp_worker_progress(Worker);
  }
  for (size_t I = 0; I < N; ++I)
    if (Reqs[I])
      ucp_request_free(Reqs[I]); /* Released when UCX is done with it. */
  free(Reqs);
}

/*===--- serve -----------------------------------------------------------===*/

/* One accepted client. */
typedef struct conn {
  ucp_ep_h Ep;
  char Peer[64];      /* client address, for -v */
  void *Flush;        /* the first flush, until it completes */
  ucs_status_t Error; /* set by the error handler */
  bool Failed;
  struct conn *Next;
} conn_t;

/* A connection request waiting for the main loop to accept it. */
typedef struct pending {
  ucp_conn_request_h Req;
  struct pending *Next;
} pending_t;

typedef struct server {
  ucp_worker_h Worker;
  ucp_listener_h Listener;
  bool Verbose;
  void *Desc; /* descriptor + rkey, sent to every client */
  size_t DescLen;
  conn_t *Conns;
  pending_t *Pending, **PendingTail;
  uint64_t Accepted;
} server_t;

static volatile sig_atomic_t StopSignal = 0;

static void on_stop_signal(int Sig) { StopSignal = Sig; }

/* Called from ucp_worker_progress(): only queue the request; the main loop
 * creates the endpoint (the UCX examples do the same). */
static void on_conn_request(ucp_conn_request_h Req, void *Arg) {
  server_t *Srv = Arg;
  pending_t *P = malloc(sizeof *P);
  if (!P) {
    ucp_listener_reject(Srv->Listener, Req);
    return;
  }
  P->Req = Req;
  P->Next = NULL;
  *Srv->PendingTail = P;
  Srv->PendingTail = &P->Next;
}

/* A client died or disconnected: the main loop closes its endpoint. */
static void on_server_ep_error(void *Arg, ucp_ep_h Ep, ucs_status_t S) {
  conn_t *C = Arg;
  C->Failed = true;
  C->Error = S;
}

static void describe_client(ucp_conn_request_h Req, char *Out, size_t Size) {
  snprintf(Out, Size, "client");
  ucp_conn_request_attr_t A;
  memset(&A, 0, sizeof A);
  A.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
  if (ucp_conn_request_query(Req, &A) != UCS_OK)
    return;
  char Host[NI_MAXHOST], Serv[NI_MAXSERV];
  socklen_t Len = A.client_address.ss_family == AF_INET6
                      ? sizeof(struct sockaddr_in6)
                      : sizeof(struct sockaddr_in);
  if (getnameinfo((struct sockaddr *)&A.client_address, Len, Host, sizeof Host,
                  Serv, sizeof Serv, NI_NUMERICHOST | NI_NUMERICSERV) == 0)
    snprintf(Out, Size, "%s:%s", Host, Serv);
}

/* Sends a client the descriptor.
 *
 * Only on a wired-up endpoint (its first flush has completed): UCX 1.13
 * queues a send on an endpoint whose wireup is still going on, and replays
 * it afterwards with protocol choices made for the configuration it had
 * when queued. Over shared memory that sent our contiguous descriptor with
 * the short protocol beyond the lane's limit ("mm_ep.c: Invalid
 * am_short_iov length: 108 (expected: <= 100)"), and an iov datatype made
 * the replay call a null function. */
static void send_desc(server_t *Srv, conn_t *C) {
  /* The descriptor lives as long as the server, so the request may be let
   * go at once: UCX frees it when the send completes. */
  ucp_request_param_t RP;
  memset(&RP, 0, sizeof RP);
  RP.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  RP.flags = UCP_AM_SEND_FLAG_EAGER;
  ucs_status_ptr_t R =
      ucp_am_send_nbx(C->Ep, GBPC_AM_ID, NULL, 0, Srv->Desc, Srv->DescLen, &RP);
  if (UCS_PTR_IS_ERR(R)) {
    C->Failed = true;
    C->Error = UCS_PTR_STATUS(R);
  } else if (R) {
    ucp_request_free(R);
  }
  if (Srv->Verbose && !C->Failed)
    fprintf(stderr, "tc-gbpc: sent %s the descriptor\n", C->Peer);
}

/* Accepts one queued request; its descriptor follows once it is wired. */
static void accept_client(server_t *Srv, ucp_conn_request_h Req) {
  conn_t *C = calloc(1, sizeof *C);
  if (!C) {
    ucp_listener_reject(Srv->Listener, Req);
    return;
  }
  describe_client(Req, C->Peer, sizeof C->Peer);
  ucp_ep_params_t P;
  memset(&P, 0, sizeof P);
  P.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
                 UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                 UCP_EP_PARAM_FIELD_ERR_HANDLER;
  P.conn_request = Req;
  P.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  P.err_handler.cb = on_server_ep_error;
  P.err_handler.arg = C;
  ucs_status_t S = ucp_ep_create(Srv->Worker, &P, &C->Ep);
  if (S != UCS_OK) {
    /* The client sees its connection fail; the server carries on. UCX has
     * consumed the request: rejecting it now would touch freed memory. */
    if (Srv->Verbose)
      fprintf(stderr, "tc-gbpc: cannot accept %s: %s\n", C->Peer,
              ucs_status_string(S));
    free(C);
    return;
  }
  C->Next = Srv->Conns;
  Srv->Conns = C;
  ++Srv->Accepted;
  if (Srv->Verbose)
    fprintf(stderr, "tc-gbpc: accepted %s\n", C->Peer);

  /* The descriptor waits until the endpoint is wired up: see send_desc. */
  ucp_request_param_t RP;
  memset(&RP, 0, sizeof RP);
  ucs_status_ptr_t R = ucp_ep_flush_nbx(C->Ep, &RP);
  if (UCS_PTR_IS_ERR(R)) {
    C->Failed = true;
    C->Error = UCS_PTR_STATUS(R);
  } else if (R) {
    C->Flush = R;
  } else {
    send_desc(Srv, C);
  }
}

/* Sends descriptors once their endpoints' flushes have completed. */
static unsigned poll_flushes(server_t *Srv) {
  unsigned Work = 0;
  for (conn_t *C = Srv->Conns; C; C = C->Next) {
    if (!C->Flush)
      continue;
    ucs_status_t S = ucp_request_check_status(C->Flush);
    if (S == UCS_INPROGRESS)
      continue;
    ucp_request_free(C->Flush);
    C->Flush = NULL;
    ++Work;
    if (S == UCS_OK) {
      send_desc(Srv, C);
    } else if (!C->Failed) {
      C->Failed = true;
      C->Error = S;
    }
  }
  return Work;
}

/* Force-closes the endpoints of clients that died or disconnected. */
static void reap_failed(server_t *Srv) {
  for (conn_t **CP = &Srv->Conns; *CP;) {
    conn_t *C = *CP;
    if (!C->Failed) {
      CP = &C->Next;
      continue;
    }
    if (Srv->Verbose)
      fprintf(stderr, "tc-gbpc: %s disconnected (%s)\n", C->Peer,
              ucs_status_string(C->Error));
    if (C->Flush)
      ucp_request_free(C->Flush); /* Released when it completes. */
    ucp_request_param_t P;
    memset(&P, 0, sizeof P);
    P.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    P.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t R = ucp_ep_close_nbx(C->Ep, &P);
    if (UCS_PTR_IS_PTR(R))
      ucp_request_free(R);
    *CP = C->Next;
    free(C);
  }
}

static int run_serve(int Argc, char **Argv) {
  const char *Listen = NULL;
  uint64_t Entries = 0, Servers = 0, Id = 0, Seed = DAPC_DEFAULT_SEED;
  bool HaveEntries = false, HaveServers = false, HaveId = false;
  bool Verbose = false;
  double SpinSeconds = 0;
  for (int I = 0; I < Argc; ++I) {
    const char *V;
    if (!strcmp(Argv[I], "--help") || !strcmp(Argv[I], "-h")) {
      fputs(Usage, stdout);
      return 0;
    } else if (!strcmp(Argv[I], "-v") || !strcmp(Argv[I], "--verbose")) {
      Verbose = true;
    } else if ((V = flag_value(Argc, Argv, &I, "--spin-us"))) {
      SpinSeconds = (double)parse_u64("--spin-us", V) * 1e-6;
    } else if ((V = flag_value(Argc, Argv, &I, "--listen"))) {
      Listen = V;
    } else if ((V = flag_value(Argc, Argv, &I, "--entries"))) {
      Entries = parse_u64("--entries", V);
      HaveEntries = true;
    } else if ((V = flag_value(Argc, Argv, &I, "--servers"))) {
      Servers = parse_u64("--servers", V);
      HaveServers = true;
    } else if ((V = flag_value(Argc, Argv, &I, "--id"))) {
      Id = parse_u64("--id", V);
      HaveId = true;
    } else if ((V = flag_value(Argc, Argv, &I, "--seed"))) {
      Seed = parse_u64("--seed", V);
    } else {
      fail("serve: unknown option '%s' (see tc-gbpc --help)", Argv[I]);
    }
  }
  if (!Listen)
    fail("serve: --listen HOST:PORT is required");
  if (!HaveEntries || !HaveServers || !HaveId)
    fail("serve: --entries, --servers and --id are required");
  if (Entries < 2)
    fail("--entries: the table needs at least 2 entries, got %" PRIu64,
         Entries);
  if (Servers < 1 || Servers > UINT32_MAX)
    fail("--servers: %" PRIu64 " is not a server count", Servers);
  if (Servers > Entries)
    fail("--servers: %" PRIu64 " servers cannot share %" PRIu64 " entries",
         Servers, Entries);
  if (Id >= Servers)
    fail("--id: %" PRIu64 " is not below --servers %" PRIu64, Id, Servers);
  if (Entries > (UINT64_MAX >> 4))
    fail("--entries: %" PRIu64 " is too large", Entries);
  char Host[256];
  uint16_t Port;
  parse_host_port("--listen", Listen, Host, sizeof Host, &Port);
  struct sockaddr_storage SS;
  socklen_t SSLen;
  resolve(Host, Port, /*Passive=*/true, &SS, &SSLen);

  /* SIGINT/SIGTERM stay blocked except inside ppoll(), which therefore
   * cannot miss one; blocking them before ucp_init() keeps UCX's own
   * threads (which inherit the mask) from taking them. */
  sigset_t Stop, Orig;
  sigemptyset(&Stop);
  sigaddset(&Stop, SIGINT);
  sigaddset(&Stop, SIGTERM);
  sigprocmask(SIG_BLOCK, &Stop, &Orig);
  struct sigaction SA;
  memset(&SA, 0, sizeof SA);
  SA.sa_handler = on_stop_signal;
  sigaction(SIGINT, &SA, NULL);
  sigaction(SIGTERM, &SA, NULL);

  ucp_context_h Ctx;
  server_t Srv;
  memset(&Srv, 0, sizeof Srv);
  Srv.Verbose = Verbose;
  Srv.PendingTail = &Srv.Pending;
  ucx_init(UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP, &Ctx,
           &Srv.Worker);

  /* The shard: let UCX allocate it (shared memory where it can, so a
   * same-host peer may map it) and fill it in place. */
  uint32_t S = (uint32_t)Servers, Me = (uint32_t)Id;
  uint64_t Lo = dapc_shard_lo(Entries, S, Me);
  uint64_t Hi = dapc_shard_lo(Entries, S, Me + 1);
  ucp_mem_map_params_t MP;
  memset(&MP, 0, sizeof MP);
  MP.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                  UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                  UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  MP.address = NULL;
  MP.length = (Hi - Lo) * sizeof(uint64_t);
  MP.flags = UCP_MEM_MAP_ALLOCATE;
  ucp_mem_h Mem;
  ucs_status_t St = ucp_mem_map(Ctx, &MP, &Mem);
  if (St != UCS_OK)
    fail("ucp_mem_map of %" PRIu64 " bytes for shard [%" PRIu64 ", %" PRIu64
         "): %s",
         (uint64_t)MP.length, Lo, Hi, ucs_status_string(St));
  ucp_mem_attr_t MA;
  memset(&MA, 0, sizeof MA);
  MA.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  if ((St = ucp_mem_query(Mem, &MA)) != UCS_OK)
    fail("ucp_mem_query: %s", ucs_status_string(St));
  uint64_t *Shard = MA.address;
  dapc_perm_t Perm;
  dapc_perm_init(&Perm, Entries, Seed);
  dapc_fill_shard(&Perm, Lo, Hi, Shard);

  void *RkeyBuf;
  size_t RkeyLen;
  if ((St = ucp_rkey_pack(Ctx, Mem, &RkeyBuf, &RkeyLen)) != UCS_OK)
    fail("ucp_rkey_pack: %s", ucs_status_string(St));
  size_t DescLen = sizeof(gbpc_desc_t) + RkeyLen;
  unsigned char *Desc = malloc(DescLen);
  if (!Desc)
    fail("out of memory");
  gbpc_desc_t D = {.magic = GBPC_MAGIC,
                   .version = GBPC_VERSION,
                   .id = Me,
                   .servers = S,
                   .entries = Entries,
                   .seed = Seed,
                   .lo = Lo,
                   .hi = Hi,
                   .base = (uint64_t)(uintptr_t)Shard,
                   .rkey_len = RkeyLen};
  memcpy(Desc, &D, sizeof D);
  memcpy(Desc + sizeof D, RkeyBuf, RkeyLen);
  Srv.Desc = Desc;
  Srv.DescLen = DescLen;

  ucp_listener_params_t LP;
  memset(&LP, 0, sizeof LP);
  LP.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                  UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  LP.sockaddr.addr = (const struct sockaddr *)&SS;
  LP.sockaddr.addrlen = SSLen;
  LP.conn_handler.cb = on_conn_request;
  LP.conn_handler.arg = &Srv;
  if ((St = ucp_listener_create(Srv.Worker, &LP, &Srv.Listener)) != UCS_OK)
    fail("cannot listen on %s: %s", Listen, ucs_status_string(St));
  ucp_listener_attr_t LA;
  memset(&LA, 0, sizeof LA);
  LA.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  if ((St = ucp_listener_query(Srv.Listener, &LA)) != UCS_OK)
    fail("ucp_listener_query: %s", ucs_status_string(St));
  int Efd;
  if ((St = ucp_worker_get_efd(Srv.Worker, &Efd)) != UCS_OK)
    fail("ucp_worker_get_efd: %s", ucs_status_string(St));
  if (strchr(Host, ':'))
    printf("tc-gbpc: listening on [%s]:%u\n", Host,
           sockaddr_port(&LA.sockaddr));
  else
    printf("tc-gbpc: listening on %s:%u\n", Host, sockaddr_port(&LA.sockaddr));
  fflush(stdout);
  if (Verbose)
    fprintf(stderr,
            "tc-gbpc: server %u of %u: entries [%" PRIu64 ", %" PRIu64
            ") at %p, rkey %zu bytes\n",
            Me, S, Lo, Hi, (void *)Shard, RkeyLen);

  /* Serve: progress while there is work, sleep on the event fd when not. */
  double LastWork = 0;
  while (!StopSignal) {
    unsigned Work = ucp_worker_progress(Srv.Worker);
    while (Srv.Pending) {
      pending_t *P = Srv.Pending;
      Srv.Pending = P->Next;
      if (!Srv.Pending)
        Srv.PendingTail = &Srv.Pending;
      accept_client(&Srv, P->Req);
      free(P);
      ++Work;
    }
    Work += poll_flushes(&Srv);
    reap_failed(&Srv);
    if (Work) {
      LastWork = SpinSeconds > 0 ? now_seconds() : 0;
      continue;
    }
    if (SpinSeconds > 0 && now_seconds() - LastWork < SpinSeconds)
      continue; /* Spin a while: a chasing client comes back soon. */
    St = ucp_worker_arm(Srv.Worker);
    if (St == UCS_ERR_BUSY)
      continue; /* Events arrived meanwhile: progress them. */
    if (St != UCS_OK)
      fail("ucp_worker_arm: %s", ucs_status_string(St));
    struct pollfd PF = {Efd, POLLIN, 0};
    if (ppoll(&PF, 1, NULL, &Orig) < 0 && errno != EINTR)
      fail("ppoll: %s", strerror(errno));
  }

  /* Shut down: no new clients, tell connected ones, release everything. */
  if (Verbose)
    fprintf(stderr, "tc-gbpc: %s; clients served: %" PRIu64 "\n",
            strsignal(StopSignal), Srv.Accepted);
  while (Srv.Pending) {
    pending_t *P = Srv.Pending;
    Srv.Pending = P->Next;
    ucp_listener_reject(Srv.Listener, P->Req);
    free(P);
  }
  ucp_listener_destroy(Srv.Listener);
  size_t N = 0;
  for (conn_t *C = Srv.Conns; C; C = C->Next)
    ++N;
  ucp_ep_h *Eps = calloc(N ? N : 1, sizeof *Eps);
  if (!Eps)
    fail("out of memory");
  N = 0;
  for (conn_t *C = Srv.Conns; C; C = C->Next) {
    if (C->Flush)
      ucp_request_free(C->Flush);
    Eps[N++] = C->Ep;
  }
  close_endpoints(Srv.Worker, Eps, N, 2.0);
  free(Eps);
  while (Srv.Conns) {
    conn_t *C = Srv.Conns;
    Srv.Conns = C->Next;
    free(C);
  }
  ucp_rkey_buffer_release(RkeyBuf);
  free(Desc);
  ucp_mem_unmap(Ctx, Mem);
  ucp_worker_destroy(Srv.Worker);
  ucp_cleanup(Ctx);
  return 0;
}

/*===--- chase -----------------------------------------------------------===*/

/* One server as the client sees it. */
typedef struct peer {
  char Addr[300]; /* HOST:PORT as given */
  ucp_ep_h Ep;
  ucp_rkey_h Rkey;
  gbpc_desc_t Desc;
  bool HaveDesc;
  unsigned char *RkeyBuf; /* the descriptor's rkey bytes until unpacked */
  bool Failed;
  ucs_status_t Error;
} peer_t;

typedef struct client {
  peer_t *Connecting; /* the one peer a descriptor may come from */
  bool BadDesc;       /* a descriptor arrived that we cannot use */
  size_t BadDescLen;
} client_t;

static void on_client_ep_error(void *Arg, ucp_ep_h Ep, ucs_status_t S) {
  peer_t *P = Arg;
  P->Failed = true;
  P->Error = S;
}

/* The descriptor's active message. The client connects to one server at a
 * time, so a descriptor always belongs to Cl->Connecting. */
static ucs_status_t on_desc(void *Arg, const void *Header, size_t HeaderLen,
                            void *Data, size_t Len,
                            const ucp_am_recv_param_t *Param) {
  client_t *Cl = Arg;
  peer_t *P = Cl->Connecting;
  if (!P || P->HaveDesc)
    return UCS_OK; /* Not expected now: drop it. */
  if ((Param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ||
      Len < sizeof(gbpc_desc_t)) {
    Cl->BadDesc = true; /* Servers send eagerly and never this short. */
    Cl->BadDescLen = Len;
    return UCS_OK;
  }
  memcpy(&P->Desc, Data, sizeof P->Desc);
  if (P->Desc.magic != GBPC_MAGIC || P->Desc.version != GBPC_VERSION ||
      P->Desc.rkey_len != Len - sizeof(gbpc_desc_t)) {
    Cl->BadDesc = true;
    Cl->BadDescLen = Len;
    return UCS_OK;
  }
  P->RkeyBuf = malloc(P->Desc.rkey_len ? P->Desc.rkey_len : 1);
  if (!P->RkeyBuf)
    fail("out of memory");
  memcpy(P->RkeyBuf, (const unsigned char *)Data + sizeof(gbpc_desc_t),
         P->Desc.rkey_len);
  P->HaveDesc = true;
  return UCS_OK;
}

/* Connects to server Idx and waits (at most Timeout s) for its descriptor. */
static void connect_peer(ucp_worker_h Worker, client_t *Cl, peer_t *P,
                         unsigned Idx, double Timeout) {
  char Host[256];
  uint16_t Port;
  parse_host_port("--servers", P->Addr, Host, sizeof Host, &Port);
  struct sockaddr_storage SS;
  socklen_t SSLen;
  resolve(Host, Port, /*Passive=*/false, &SS, &SSLen);
  ucp_ep_params_t EP;
  memset(&EP, 0, sizeof EP);
  EP.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                  UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  EP.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  EP.sockaddr.addr = (const struct sockaddr *)&SS;
  EP.sockaddr.addrlen = SSLen;
  EP.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  EP.err_handler.cb = on_client_ep_error;
  EP.err_handler.arg = P;
  ucs_status_t St = ucp_ep_create(Worker, &EP, &P->Ep);
  if (St != UCS_OK)
    fail("cannot connect to server %u at %s: %s", Idx, P->Addr,
         ucs_status_string(St));
  Cl->Connecting = P;
  double Deadline = now_seconds() + Timeout;
  while (!P->HaveDesc && !P->Failed && !Cl->BadDesc) {
    ucp_worker_progress(Worker);
    if (now_seconds() > Deadline)
      fail("no answer from server %u at %s within %g s (is it a tc-gbpc "
           "serve? see --timeout)",
           Idx, P->Addr, Timeout);
  }
  Cl->Connecting = NULL;
  if (Cl->BadDesc)
    fail("server %u at %s sent a %zu-byte message that is no tc-gbpc "
         "descriptor",
         Idx, P->Addr, Cl->BadDescLen);
  if (!P->HaveDesc)
    fail("cannot connect to server %u at %s: %s (is tc-gbpc serve running "
         "there?)",
         Idx, P->Addr, ucs_status_string(P->Error));
}

/* Checks that server Idx serves shard Idx of the client's table. */
static void check_desc(const peer_t *P, unsigned Idx, uint64_t Entries,
                       uint32_t Servers, uint64_t Seed) {
  const gbpc_desc_t *D = &P->Desc;
  uint64_t Lo = dapc_shard_lo(Entries, Servers, Idx);
  uint64_t Hi = dapc_shard_lo(Entries, Servers, Idx + 1);
  if (D->entries != Entries || D->servers != Servers || D->id != Idx ||
      D->lo != Lo || D->hi != Hi)
    fail("server %u at %s serves entries [%" PRIu64 ", %" PRIu64
         ") (--entries %" PRIu64 " --servers %u --id %u), but this chase "
         "needs [%" PRIu64 ", %" PRIu64 ") from it (--entries %" PRIu64
         " over %u servers)",
         Idx, P->Addr, D->lo, D->hi, D->entries, D->servers, D->id, Lo, Hi,
         Entries, Servers);
  if (D->seed != Seed)
    fail("server %u at %s has --seed %" PRIu64 ", this chase --seed %" PRIu64,
         Idx, P->Addr, D->seed, Seed);
}

/* Where the chase from Start ends after Depth hops, one GET per hop. */
static uint64_t chase(ucp_worker_h Worker, peer_t *Peers, uint32_t Servers,
                      uint64_t Entries, uint64_t Start, uint64_t Depth,
                      uint64_t K, double Timeout) {
  /* Host memory, no callback: poll the request. */
  ucp_request_param_t P;
  memset(&P, 0, sizeof P);
  P.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE;
  P.memory_type = UCS_MEMORY_TYPE_HOST;
  uint64_t I = Start;
  for (uint64_t Hop = 0; Hop < Depth; ++Hop) {
    uint32_t S = dapc_owner(Entries, Servers, I);
    peer_t *Pe = &Peers[S];
    uint64_t Value = 0;
    uint64_t Addr = Pe->Desc.base + (I - Pe->Desc.lo) * sizeof(uint64_t);
    ucs_status_ptr_t R =
        ucp_get_nbx(Pe->Ep, &Value, sizeof Value, Addr, Pe->Rkey, &P);
    ucs_status_t St = UCS_OK;
    if (UCS_PTR_IS_ERR(R)) {
      St = UCS_PTR_STATUS(R);
    } else if (R) {
      /* Busy-poll: this wait is what GBPC measures. Look at the clock only
       * now and then so a dead or stopped server cannot hang us. */
      double Deadline = 0;
      unsigned Spins = 0;
      while ((St = ucp_request_check_status(R)) == UCS_INPROGRESS) {
        ucp_worker_progress(Worker);
        if ((++Spins & 0x3fff) == 0) {
          double Now = now_seconds();
          if (Deadline == 0)
            Deadline = Now + Timeout;
          else if (Now > Deadline)
            fail("chase %" PRIu64 ": GET of entry %" PRIu64
                 " from server %u at %s did not complete within %g s",
                 K, I, S, Pe->Addr, Timeout);
        }
      }
      ucp_request_free(R);
    }
    /* Over shared memory a GET is a load from the server's mapped shard
     * and succeeds even once the server is gone; UCX's keepalive still
     * notices, and then the chase must not go on as if nothing happened. */
    if (St == UCS_OK && Pe->Failed)
      St = Pe->Error;
    if (St != UCS_OK)
      fail("chase %" PRIu64 ": GET of entry %" PRIu64
           " from server %u at %s failed: %s",
           K, I, S, Pe->Addr, ucs_status_string(St));
    if (Value >= Entries)
      fail("chase %" PRIu64 ": server %u at %s holds %" PRIu64
           " at entry %" PRIu64 ", not an entry index below %" PRIu64,
           K, S, Pe->Addr, Value, I, Entries);
    I = Value;
  }
  return I;
}

static int run_chase(int Argc, char **Argv) {
  const char *List = NULL;
  uint64_t Entries = 0, Seed = DAPC_DEFAULT_SEED, Depth = 1024, Count = 1000;
  bool HaveEntries = false, Json = false, Verbose = false;
  double Timeout = 10;
  for (int I = 0; I < Argc; ++I) {
    const char *V;
    if (!strcmp(Argv[I], "--help") || !strcmp(Argv[I], "-h")) {
      fputs(Usage, stdout);
      return 0;
    } else if (!strcmp(Argv[I], "--json")) {
      Json = true;
    } else if (!strcmp(Argv[I], "-v") || !strcmp(Argv[I], "--verbose")) {
      Verbose = true;
    } else if ((V = flag_value(Argc, Argv, &I, "--servers"))) {
      List = V;
    } else if ((V = flag_value(Argc, Argv, &I, "--entries"))) {
      Entries = parse_u64("--entries", V);
      HaveEntries = true;
    } else if ((V = flag_value(Argc, Argv, &I, "--seed"))) {
      Seed = parse_u64("--seed", V);
    } else if ((V = flag_value(Argc, Argv, &I, "--depth"))) {
      Depth = parse_u64("--depth", V);
    } else if ((V = flag_value(Argc, Argv, &I, "--count"))) {
      Count = parse_u64("--count", V);
    } else if ((V = flag_value(Argc, Argv, &I, "--timeout"))) {
      Timeout = parse_seconds("--timeout", V);
    } else {
      fail("chase: unknown option '%s' (see tc-gbpc --help)", Argv[I]);
    }
  }
  if (!List)
    fail("chase: --servers HOST:PORT[,HOST:PORT...] is required");
  if (!HaveEntries)
    fail("chase: --entries is required");
  if (Entries < 2)
    fail("--entries: the table needs at least 2 entries, got %" PRIu64,
         Entries);
  if (Depth < 1)
    fail("--depth: a chase needs at least 1 hop");
  if (Count < 1)
    fail("--count: at least 1 chase is needed");

  /* Split the server list. */
  uint32_t Servers = 1;
  for (const char *C = List; *C; ++C)
    Servers += *C == ',';
  if (Servers > Entries)
    fail("--servers: %u servers cannot share %" PRIu64 " entries", Servers,
         Entries);
  peer_t *Peers = calloc(Servers, sizeof *Peers);
  if (!Peers)
    fail("out of memory");
  const char *C = List;
  for (uint32_t I = 0; I < Servers; ++I) {
    const char *End = strchr(C, ',');
    size_t Len = End ? (size_t)(End - C) : strlen(C);
    if (Len == 0)
      fail("--servers: empty entry %u in '%s'", I, List);
    if (Len >= sizeof Peers[I].Addr)
      fail("--servers: entry %u is too long", I);
    memcpy(Peers[I].Addr, C, Len);
    Peers[I].Addr[Len] = '\0';
    char Host[256];
    uint16_t Port;
    parse_host_port("--servers", Peers[I].Addr, Host, sizeof Host, &Port);
    C = End ? End + 1 : C + Len;
  }

  ucp_context_h Ctx;
  ucp_worker_h Worker;
  ucx_init(UCP_FEATURE_RMA | UCP_FEATURE_AM, &Ctx, &Worker);
  client_t Cl;
  memset(&Cl, 0, sizeof Cl);
  ucp_am_handler_param_t HP;
  memset(&HP, 0, sizeof HP);
  HP.field_mask =
      UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  HP.id = GBPC_AM_ID;
  HP.flags = UCP_AM_FLAG_WHOLE_MSG;
  HP.cb = on_desc;
  HP.arg = &Cl;
  ucs_status_t St = ucp_worker_set_am_recv_handler(Worker, &HP);
  if (St != UCS_OK)
    fail("ucp_worker_set_am_recv_handler: %s", ucs_status_string(St));

  /* One server at a time, so each descriptor has an obvious sender. */
  for (uint32_t I = 0; I < Servers; ++I) {
    peer_t *P = &Peers[I];
    connect_peer(Worker, &Cl, P, I, Timeout);
    check_desc(P, I, Entries, Servers, Seed);
    if ((St = ucp_ep_rkey_unpack(P->Ep, P->RkeyBuf, &P->Rkey)) != UCS_OK)
      fail("server %u at %s: ucp_ep_rkey_unpack: %s", I, P->Addr,
           ucs_status_string(St));
    free(P->RkeyBuf);
    P->RkeyBuf = NULL;
    if (Verbose) {
      fprintf(stderr,
              "tc-gbpc: server %u at %s: entries [%" PRIu64 ", %" PRIu64
              ") at 0x%" PRIx64 ", rkey %" PRIu64 " bytes\n",
              I, P->Addr, P->Desc.lo, P->Desc.hi, P->Desc.base,
              P->Desc.rkey_len);
      ucp_ep_print_info(P->Ep, stderr);
    }
  }

  dapc_perm_t Perm;
  dapc_perm_init(&Perm, Entries, Seed);
  /* Chase k starts at mix64(k + 1) % N: k = 0 is the untimed warm-up (first
   * GET on every lane), k = 1..C are timed. */
  double T0 = 0;
  for (uint64_t K = 0; K <= Count; ++K) {
    if (K == 1)
      T0 = now_seconds();
    uint64_t Start = dapc_mix64(K + 1) % Entries;
    uint64_t End =
        chase(Worker, Peers, Servers, Entries, Start, Depth, K, Timeout);
    uint64_t Want = dapc_chase_ref(&Perm, Start, Depth);
    if (End != Want)
      fail("chase %" PRIu64 " ended at %" PRIu64 ", expected %" PRIu64, K, End,
           Want);
  }
  double Secs = now_seconds() - T0;
  double Rate = (double)Count / Secs;
  double HopUs = Secs * 1e6 / ((double)Count * (double)Depth);

  if (Json)
    printf("[{\"bench\":\"dapc\",\"mode\":\"gbpc\",\"servers\":%u,"
           "\"depth\":%" PRIu64 ",\"metric\":\"rate_chases\",\"value\":%.6g,"
           "\"unit\":\"chases/s\"},"
           "{\"bench\":\"dapc\",\"mode\":\"gbpc\",\"servers\":%u,"
           "\"depth\":%" PRIu64 ",\"metric\":\"hop_latency_us\","
           "\"value\":%.6g,\"unit\":\"us\"}]\n",
           Servers, Depth, Rate, Servers, Depth, HopUs);
  else
    printf("gbpc: servers %u depth %" PRIu64 " chases %" PRIu64
           " rate %.1f chases/s (hop latency %.3f us)\n",
           Servers, Depth, Count, Rate, HopUs);
  fflush(stdout);

  /* Release the rkeys before their endpoints, then disconnect politely. */
  ucp_ep_h *Eps = calloc(Servers, sizeof *Eps);
  if (!Eps)
    fail("out of memory");
  for (uint32_t I = 0; I < Servers; ++I) {
    ucp_rkey_destroy(Peers[I].Rkey);
    Eps[I] = Peers[I].Ep;
  }
  close_endpoints(Worker, Eps, Servers, 2.0);
  free(Eps);
  free(Peers);
  ucp_worker_destroy(Worker);
  ucp_cleanup(Ctx);
  return 0;
}

int main(int Argc, char **Argv) {
  if (Argc < 2)
    fail("no command (expected serve or chase; see tc-gbpc --help)");
  const char *Cmd = Argv[1];
  if (!strcmp(Cmd, "--help") || !strcmp(Cmd, "-h") || !strcmp(Cmd, "help")) {
    fputs(Usage, stdout);
    return 0;
  }
  if (!strcmp(Cmd, "serve"))
    return run_serve(Argc - 2, Argv + 2);
  if (!strcmp(Cmd, "chase"))
    return run_chase(Argc - 2, Argv + 2);
  fail("unknown command '%s' (expected serve or chase; see tc-gbpc --help)",
       Cmd);
}
