//===- Server.cpp - `tc-bench serve`: a benchmark target ------------------===//
//
// A target process built on libtc's C API. It runs the example ifuncs that
// arrive, has the same functions linked in as local functions (the
// active-message baseline), answers each benchmark message with a "pong"
// when the client asks for ping-pong, and holds a shard of the DAPC table.
//
// The pong is sent from the progress loop when a benchmark counter moved,
// the way ucx_perftest's latency test answers: the handler only records.
//
//===----------------------------------------------------------------------===//

#include "Bench.h"
#include "Stamps.h"

#include "dapc_chase.h"
#include "dapc_table.h"

#include <cstdio>
#include <cstring>
#include <memory>

namespace bench {
namespace {

struct Server {
  tc_worker_h W = nullptr;
  uint64_t Tsi = 0;
  uint64_t Probes = 0; ///< The stall probes' counter (no pongs for them).
  sss_target_t Sss{};
  iput_target_t Iput{};
  std::vector<unsigned char> IputBuf = std::vector<unsigned char>(1 << 20);
  dapc_server_t Dapc{};
  std::vector<uint64_t> Shard;
  std::vector<tc_ep_h> Peers;
  std::vector<tc_ep_h> Accepted;
  tc_ep_h PongTo = nullptr;
  uint32_t Pong = PongOff;
  uint64_t Seen = 0;
  tc_ifunc_h TsiIfunc = nullptr, DapcIfunc = nullptr, ResultIfunc = nullptr;
  tc_msg_h PongMsg = nullptr;
  bool EvictDue = false; ///< bench.evict arrived; done from the main loop.
  /// bench.idle arrived: sleep while nothing happens, until bench.reset.
  bool Idle = false;
  tc_ep_h EvictFrom = nullptr; ///< Told when done, with a local TSI.
  /// bench.stamps: the client's stamps file, mapped (tsi --breakdown).
  HopStamps *Stamps = nullptr;

  uint64_t total() const { return Tsi + Sss.count + Iput.count; }
};

Server *The = nullptr;

extern "C" void benchAccept(void *Arg, tc_ep_h Ep) {
  static_cast<Server *>(Arg)->Accepted.push_back(Ep);
}

extern "C" void benchPong(void *Payload, size_t Size, void *) {
  uint32_t Mode = PongOff;
  if (Size == sizeof Mode)
    std::memcpy(&Mode, Payload, sizeof Mode);
  The->Pong = Mode;
  The->PongTo = tc_worker_source_ep(The->W);
  The->Seen = The->total();
}

/// bench.stamps: the payload names the client's stamps file (Stamps.h);
/// every pong is stamped into it until a bench.stamps without one. A name
/// that is not such a file is reported and the server goes on, taking no
/// stamps (the client's breakdown then finds none and says so).
extern "C" void benchStamps(void *Payload, size_t Size, void *) {
  HopStamps::close(The->Stamps);
  The->Stamps = nullptr;
  if (!Size)
    return;
  std::string Err;
  The->Stamps = HopStamps::open(
      std::string(static_cast<const char *>(Payload), Size), Err);
  if (!The->Stamps)
    std::fprintf(stderr, "tc-bench serve: bench.stamps: %s; no stamps taken\n",
                 Err.c_str());
}

extern "C" void benchStats(void *, size_t, void *) {
  ServerStats S{};
  tc_worker_query_stats(The->W, &S.Worker);
  S.Tsi = The->Tsi;
  S.Probes = The->Probes;
  S.SssCount = The->Sss.count;
  S.SssSum = The->Sss.sum;
  S.IputCount = The->Iput.count;
  S.IputRejected = The->Iput.rejected;
  S.IputHash = fnv1a(The->IputBuf.data(), The->IputBuf.size());
  S.DapcHops = The->Dapc.hops;
  if (tc_ep_h Ep = tc_worker_source_ep(The->W))
    tc_ep_send_local(Ep, "bench.stats", &S, sizeof S, nullptr, nullptr);
}

/// bench.evict: unload all ifunc code, so the next message of each is a
/// first contact again (tc-bench tsi does this between first-contact
/// trials, outside the timed part).
extern "C" void benchEvict(void *, size_t, void *) {
  The->EvictDue = true;
  The->EvictFrom = tc_worker_source_ep(The->W);
}

/// bench.idle: stop busy-polling until the next bench.reset, so that a
/// reference the client runs on this CPU meanwhile (tc-bench sss|iput's
/// ucx_am server) gets the CPU to itself.
extern "C" void benchIdle(void *, size_t, void *) { The->Idle = true; }

extern "C" void benchReset(void *, size_t, void *) {
  The->Idle = false;
  The->Tsi = 0;
  The->Probes = 0;
  The->Sss = sss_target_t{};
  The->Iput.count = The->Iput.rejected = 0;
  std::memset(The->IputBuf.data(), 0, The->IputBuf.size());
  The->Dapc.hops = 0;
  The->Seen = The->total();
}

/// The DAPC chaser as a local function: the same walk as the ifunc, sent
/// on as a local invoke.
extern "C" void benchDapcLocal(void *Payload, size_t Size, void *Args) {
  auto *S = static_cast<dapc_server_t *>(Args);
  dapc_args_t A;
  if (Size != sizeof A)
    return;
  std::memcpy(&A, Payload, sizeof A);
  if (A.depth == 0 || A.addr >= S->n)
    return;
  if (dapc_walk(S, &A))
    tc_ep_send_local(S->client, "dapc_result", &A, sizeof A, nullptr,
                     nullptr);
  else
    tc_ep_send_local(S->peers[dapc_owner(S->n, S->servers, A.addr)], "dapc",
                     &A, sizeof A, nullptr, nullptr);
}

/// bench.dapc: build this server's shard and connect to the others.
extern "C" void benchDapcSetup(void *Payload, size_t Size, void *) {
  Server &S = *The;
  DapcSetup D;
  if (Size < sizeof D) {
    std::fprintf(stderr, "tc-bench serve: bad bench.dapc message\n");
    return;
  }
  std::memcpy(&D, Payload, sizeof D);
  std::string List(static_cast<const char *>(Payload) + sizeof D,
                   Size - sizeof D);
  std::vector<std::string> Addrs;
  for (size_t Pos = 0; Pos < List.size();) {
    size_t Comma = List.find(',', Pos);
    if (Comma == std::string::npos)
      Comma = List.size();
    Addrs.push_back(List.substr(Pos, Comma - Pos));
    Pos = Comma + 1;
  }
  if (D.Servers == 0 || D.Self >= D.Servers || Addrs.size() != D.Servers ||
      D.Entries < 2) {
    std::fprintf(stderr, "tc-bench serve: inconsistent bench.dapc setup\n");
    return;
  }
  dapc_perm_t P;
  dapc_perm_init(&P, D.Entries, D.Seed);
  uint64_t Lo = dapc_shard_lo(D.Entries, D.Servers, D.Self);
  uint64_t Hi = dapc_shard_lo(D.Entries, D.Servers, D.Self + 1);
  S.Shard.assign(Hi - Lo, 0);
  dapc_fill_shard(&P, Lo, Hi, S.Shard.data());
  for (tc_ep_h E : S.Peers)
    if (E)
      tc_ep_destroy(E);
  S.Peers.assign(D.Servers, nullptr);
  for (uint32_t I = 0; I < D.Servers; ++I)
    if (I != D.Self && connectString(S.W, Addrs[I], &S.Peers[I]) != TC_OK)
      std::fprintf(stderr, "tc-bench serve: cannot connect to %s\n",
                   Addrs[I].c_str());
  tc_worker_add_sandbox_region(S.W, S.Shard.data(),
                               S.Shard.size() * sizeof S.Shard[0]);
  tc_worker_add_sandbox_region(S.W, S.Peers.data(),
                               S.Peers.size() * sizeof S.Peers[0]);
  dapc_server_t &X = S.Dapc;
  X.shard = S.Shard.data();
  X.lo = Lo;
  X.hi = Hi;
  X.n = D.Entries;
  X.servers = D.Servers;
  X.self = D.Self;
  X.peers = S.Peers.data();
  X.client = tc_worker_source_ep(S.W);
  X.hops = 0;
  // The chaser forwards itself and answers with dapc_result: register both
  // here (same archives as the client's: same identities) with one reusable
  // message each.
  dapc_args_t Zero{0, 1, 0};
  if (!S.DapcIfunc &&
      (tc_ifunc_register(S.W, "dapc", &S.DapcIfunc) != TC_OK ||
       tc_ifunc_register(S.W, "dapc_result", &S.ResultIfunc) != TC_OK ||
       tc_msg_create(S.DapcIfunc, &Zero, sizeof Zero, &X.forward) != TC_OK ||
       tc_msg_create(S.ResultIfunc, &Zero, sizeof Zero, &X.result) != TC_OK))
    std::fprintf(stderr, "tc-bench serve: cannot set up the dapc ifuncs\n");
}

void sendPong(Server &S) {
  static const unsigned char One = 1;
  if (!S.PongTo)
    return;
  if (S.Pong == PongLocal)
    tc_ep_send_local(S.PongTo, "tsi", &One, 1, nullptr, nullptr);
  else if (S.Pong == PongIfunc && S.PongMsg)
    tc_msg_send(S.PongTo, S.PongMsg, nullptr, nullptr);
}

const char *const ServeUsage =
    R"(USAGE: tc-bench serve (--listen HOST:PORT | --by-address) [options]

A benchmark target: runs the example ifuncs (and the same functions linked
in), answers ping-pongs, holds a DAPC shard. Started by tc-bench itself, or
by hand on cluster nodes listed in a --hosts file.

OPTIONS:
  --listen HOST:PORT  Address to accept connections on (port 0: any)
  --by-address        No listener: clients connect by the worker address
                      it prints (tc-bench over shared memory, where UCX
                      has no transport a HOST:PORT listener could use)
  --ifunc-path DIR    Where the example archives are
  --exec MODE         auto | bitcode | object | sandbox (the server's state
                      and DAPC shard are the regions sandboxed code may use)
  --max-loaded N      Keep at most N code identities loaded
  --cache-dir DIR     Persistent cache of compiled objects
  --ship always       Attach the archive to every message this server sends
  --blocking          Sleep in tc_worker_wait when idle (more processes
                      than cores) instead of busy polling
  --no-mailbox        Active messages only (tc_worker_params_t::mailbox = 0)
  --sync-compile      Compile arriving code inside tc_worker_progress
                      (compile_thread = 0: every connection waits for
                      each compile)
  --prewarm           Prewarm the JIT at start, as tc-serve does
                      (TC_CONTEXT_PARAM_FIELD_PREWARM)
  --pmix              Started by mpirun / srun --mpi=pmix as a rank of a
                      `tc-bench dapc --pmix` job: wire up by rank (no
                      --listen needed) and exit when the client is done
)";

/// The job's closing barrier ended (tc-bench serve --pmix).
extern "C" void benchBarrierDone(void *Arg, tc_status_t) {
  *static_cast<bool *>(Arg) = true;
}

} // namespace

int runServer(int Argc, char **Argv) {
  std::string Listen, IfuncPath = defaultIfuncPath(), Exec = "auto",
                      CacheDir, Ship = "once";
  uint64_t MaxLoaded = 0;
  bool Blocking = false, Pmix = false, Mailbox = true, SyncCompile = false,
       Prewarm = false, ByAddress = false;
  for (int I = 1; I < Argc; ++I) {
    std::string A = Argv[I];
    auto Value = [&]() {
      if (I + 1 >= Argc)
        die("serve: missing value after " + A);
      return std::string(Argv[++I]);
    };
    if (A == "--help") {
      std::fputs(ServeUsage, stdout);
      return 0;
    }
    if (A == "--listen")
      Listen = Value();
    else if (A == "--by-address")
      ByAddress = true;
    else if (A == "--ifunc-path")
      IfuncPath = Value();
    else if (A == "--exec")
      Exec = Value();
    else if (A == "--max-loaded")
      MaxLoaded = parseCount(A, Value());
    else if (A == "--cache-dir")
      CacheDir = Value();
    else if (A == "--ship")
      Ship = Value();
    else if (A == "--blocking")
      Blocking = true;
    else if (A == "--sync-compile")
      SyncCompile = true;
    else if (A == "--prewarm")
      Prewarm = true;
    else if (A == "--pmix")
      Pmix = true;
    else if (A == "--no-mailbox")
      Mailbox = false;
    else
      die("serve: unknown argument '" + A + "'");
  }
  if (Pmix && Listen.empty())
    ByAddress = true; // The job's ranks connect by rank.
  if (ByAddress && !Listen.empty())
    die("serve: give --listen or --by-address, not both");
  size_t Colon = Listen.rfind(':');
  if (!ByAddress && (Listen.empty() || Colon == std::string::npos))
    die("serve: --listen HOST:PORT (or --by-address) is required");
  std::string Host = ByAddress ? "" : Listen.substr(0, Colon);
  uint64_t Port =
      ByAddress ? 0 : parseCount("--listen", Listen.substr(Colon + 1));
  if (Port > 65535)
    die("serve: bad port in --listen '" + Listen + "'");
  if (Ship != "once" && Ship != "always")
    die("serve: bad --ship '" + Ship + "' (expected once or always)");

  tc_context_params_t CP{};
  CP.field_mask = TC_CONTEXT_PARAM_FIELD_IFUNC_PATH |
                  TC_CONTEXT_PARAM_FIELD_EXEC_MODE |
                  TC_CONTEXT_PARAM_FIELD_MAX_LOADED |
                  TC_CONTEXT_PARAM_FIELD_SHIP_CODE;
  CP.ifunc_path = IfuncPath.c_str();
  if (Exec == "auto")
    CP.exec_mode = TC_EXEC_AUTO;
  else if (Exec == "bitcode")
    CP.exec_mode = TC_EXEC_BITCODE;
  else if (Exec == "object")
    CP.exec_mode = TC_EXEC_OBJECT;
  else if (Exec == "sandbox")
    CP.exec_mode = TC_EXEC_SANDBOX;
  else
    die("serve: bad --exec '" + Exec + "'");
  auto S = std::make_unique<Server>();
  // Sandboxed ifuncs get the server's state (their target_args point into
  // it); the DAPC shard and peer list are added when they exist.
  tc_sandbox_region_t Whole{S.get(), sizeof(Server)};
  tc_sandbox_params_t SP{};
  SP.field_mask = TC_SANDBOX_PARAM_FIELD_REGIONS;
  SP.regions = &Whole;
  SP.region_count = 1;
  CP.field_mask |= TC_CONTEXT_PARAM_FIELD_SANDBOX;
  CP.sandbox = &SP;
  CP.max_loaded = MaxLoaded;
  CP.ship_code = Ship == "always" ? TC_SHIP_CODE_ALWAYS : TC_SHIP_CODE_ONCE;
  if (!CacheDir.empty()) {
    CP.field_mask |= TC_CONTEXT_PARAM_FIELD_CACHE_DIR;
    CP.cache_dir = CacheDir.c_str();
  }
  if (Prewarm) {
    CP.field_mask |= TC_CONTEXT_PARAM_FIELD_PREWARM;
    CP.prewarm = 1;
  }
  tc_context_h Ctx;
  if (tc_context_create(&CP, &Ctx) != TC_OK)
    die("serve: cannot create a tc context");
  The = S.get();
  S->Iput.base = S->IputBuf.data();
  S->Iput.size = S->IputBuf.size();
  tc_worker_params_t WP{};
  WP.field_mask = TC_WORKER_PARAM_FIELD_TARGET_ARGS |
                  TC_WORKER_PARAM_FIELD_ACCEPT_CB;
  WP.target_args = S.get();
  WP.accept_cb = benchAccept;
  WP.accept_arg = S.get();
  if (!Mailbox) {
    WP.field_mask |= TC_WORKER_PARAM_FIELD_MAILBOX;
    WP.mailbox = 0;
  }
  if (SyncCompile) {
    WP.field_mask |= TC_WORKER_PARAM_FIELD_COMPILE_THREAD;
    WP.compile_thread = 0;
  }
  if (Pmix) {
    WP.field_mask |= TC_WORKER_PARAM_FIELD_BOOTSTRAP;
    WP.bootstrap = TC_BOOTSTRAP_PMIX;
  }
  if (tc_worker_create(Ctx, &WP, &S->W) != TC_OK)
    die(Pmix ? "serve: cannot wire up through PMIx (started by mpirun or "
               "srun --mpi=pmix?)"
             : "serve: cannot create a tc worker");
  tc_worker_h W = S->W;
  struct {
    const char *Name;
    tc_local_fn_t Fn;
    void *Args;
  } Locals[] = {
      {"tsi", tsi_main, &S->Tsi},
      {"sss", sss_main, &S->Sss},
      {"iput", iput_main, &S->Iput},
      {"dapc", benchDapcLocal, &S->Dapc},
      {"bench.pong", benchPong, nullptr},
      {"bench.stats", benchStats, nullptr},
      {"bench.stamps", benchStamps, nullptr},
      {"bench.reset", benchReset, nullptr},
      {"bench.idle", benchIdle, nullptr},
      {"bench.evict", benchEvict, nullptr},
      {"bench.dapc", benchDapcSetup, nullptr},
  };
  for (const auto &L : Locals) {
    if (tc_worker_register_local(W, L.Name, L.Fn) != TC_OK)
      die(std::string("serve: cannot register local ") + L.Name);
    if (L.Args)
      tc_worker_set_target_args(W, L.Name, L.Args);
  }
  // The first-contact probes are TSI under other names. The stall probes
  // (tc-bench tsi --modes stall) count apart: another client's pong stream
  // runs meanwhile, and a pong answers every change of the TSI counter.
  tc_worker_set_target_args(W, "fca", &S->Tsi);
  tc_worker_set_target_args(W, "fcb", &S->Tsi);
  tc_worker_set_target_args(W, "fsa", &S->Probes);
  tc_worker_set_target_args(W, "fsb", &S->Probes);
  // The ifunc pong: the TSI ifunc sent back to the client.
  static const unsigned char One = 1;
  if (tc_ifunc_register(W, "tsi", &S->TsiIfunc) != TC_OK ||
      tc_msg_create(S->TsiIfunc, &One, 1, &S->PongMsg) != TC_OK)
    die("serve: cannot register the tsi ifunc from '" + IfuncPath + "'");

  uint16_t Bound = 0;
  if (!ByAddress && tc_worker_listen(W, Host.c_str(),
                                     static_cast<uint16_t>(Port),
                                     &Bound) != TC_OK)
    die("serve: cannot listen on " + Listen);
  // The worker address, for clients that bootstrap by address (tc-bench
  // does over shared memory).
  void *Addr;
  size_t AddrLen;
  if (tc_worker_get_address(W, &Addr, &AddrLen) != TC_OK)
    die("serve: cannot get the worker address");
  std::printf("tc-bench serve: worker address ");
  for (size_t I = 0; I < AddrLen; ++I)
    std::printf("%02x", static_cast<unsigned char *>(Addr)[I]);
  std::printf("\n");
  tc_worker_release_address(W, Addr);
  if (ByAddress)
    std::printf("tc-bench serve: ready, by worker address only\n");
  else
    std::printf("tc-bench serve: listening on %s:%u\n", Host.c_str(), Bound);
  bool JobDone = false;
  if (Pmix) {
    uint32_t Rank, Size;
    tc_worker_query_rank(W, &Rank, &Size);
    std::printf("tc-bench serve: rank %u of %u\n", Rank, Size);
    if (tc_worker_barrier_nb(W, benchBarrierDone, &JobDone) != TC_INPROGRESS)
      die("serve: cannot enter the job's closing barrier");
  }
  std::fflush(stdout);

  while (!Interrupted && !JobDone) {
    int Did = tc_worker_progress(W);
    if (S->EvictDue) {
      // Not from bench.evict itself: code must not be freed while a message
      // runs. A local TSI back tells the client it is done.
      static const unsigned char One = 1;
      S->EvictDue = false;
      tc_worker_evict_code(W);
      if (S->EvictFrom)
        tc_ep_send_local(S->EvictFrom, "tsi", &One, 1, nullptr, nullptr);
      continue;
    }
    if (S->Pong != PongOff && S->total() != S->Seen) {
      stampedAnswer(S->Stamps, [&] {
        S->Seen = S->total();
        sendPong(*S);
        return 0;
      });
      continue;
    }
    if (!Did && (Blocking || S->Idle))
      tc_worker_wait(W, 100); // Bounded: signals are checked between waits.
  }

  if (S->PongMsg)
    tc_msg_free(S->PongMsg);
  if (S->Dapc.forward)
    tc_msg_free(S->Dapc.forward);
  if (S->Dapc.result)
    tc_msg_free(S->Dapc.result);
  for (tc_ep_h E : S->Peers)
    if (E)
      tc_ep_destroy(E);
  for (tc_ep_h E : S->Accepted)
    tc_ep_destroy(E);
  for (tc_ifunc_h F : {S->TsiIfunc, S->DapcIfunc, S->ResultIfunc})
    if (F)
      tc_ifunc_deregister(F);
  tc_worker_destroy(W);
  tc_context_destroy(Ctx);
  The = nullptr;
  return 0;
}

} // namespace bench
