//===- CApi.cpp - libtc's C API over the C++ runtime ----------------------===//
//
// Handles wrap the C++ objects; fail() is the one place an llvm::Error
// becomes a tc_status_t, and the one place errors are logged (to stderr,
// as `tc: error: ...`). Outputs are written only on TC_OK.
//
//===----------------------------------------------------------------------===//

#include "tc/tc.h"

#include "bootstrap/Bootstrap.h"
#include "protocol/Runtime.h"

#include "tc/Archive.h"

#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>

using namespace tc;

struct tc_context {
  RuntimeOptions Opts;
  std::string IfuncPath;
};

struct tc_ep {
  tc_worker *W;
  ConnId Conn; ///< 0 once the connection is gone (see Gone).
  /// Made by tc_ep_connect*() (not accepted): its peer going away is
  /// worth a line even when nothing was lost.
  bool Made = false;
  std::string Peer; ///< For messages: "HOST:PORT", "rank R", ...
  std::string Gone; ///< Why the connection went, once it has.
};

/// A tc_worker_barrier_nb() in flight. PMIx completes it on its own thread:
/// that thread only stores the result and wakes the worker; the callback
/// runs from tc_worker_progress(). Shared, so a barrier that ends after
/// its worker was destroyed touches only this.
struct BarrierState {
  std::atomic<int> Result{0}; ///< 0: pending, 1: done, 2: failed.
  std::mutex Lock;
  Transport *Wake = nullptr; ///< Cleared by tc_worker_destroy().
  tc_send_cb_t CB = nullptr;
  void *Arg = nullptr;
};

struct tc_worker {
  tc_context *Ctx = nullptr;
  // --- PMIx bootstrap (issue #20)
  std::unique_ptr<Bootstrap> Boot;
  std::map<uint32_t, std::string> RankAddrs; ///< Fetched on first connect.
  std::vector<std::shared_ptr<BarrierState>> Barriers;
  // --- end PMIx bootstrap
  std::unique_ptr<Runtime> RT;
  std::map<ConnId, tc_ep *> Eps;
  tc_remote_error_cb_t ErrorCB = nullptr;
  void *ErrorArg = nullptr;
  tc_accept_cb_t AcceptCB = nullptr;
  void *AcceptArg = nullptr;
};

struct tc_ifunc {
  tc_worker *W;
  std::shared_ptr<const Ifunc> F;
};

struct tc_msg {
  Message M;
};

namespace {

/// The last error on this thread, for tc_last_error().
thread_local std::string LastError;
/// tc_set_error_logging(): whether logError() writes to stderr.
std::atomic<bool> LogErrors{true};

/// Keeps \p Msg for tc_last_error() and logs it as `tc: error: Msg`. The
/// same message again right after it is counted, and printed only at its
/// 1st, 2nd, 4th, 8th, ... repeat with the count: a stream of sends to a
/// dead peer writes a few lines, not one per send. Workers may fail on
/// several threads at once.
void logError(std::string Msg) {
  LastError = Msg;
  if (!LogErrors.load(std::memory_order_relaxed))
    return;
  struct Log {
    std::mutex Mu;
    std::string Last;
    uint64_t Repeats = 0;
  };
  static Log *L = new Log; // Never destroyed: errors may come during exit.
  std::lock_guard<std::mutex> Lock(L->Mu);
  if (Msg == L->Last) {
    ++L->Repeats;
    if ((L->Repeats & (L->Repeats - 1)) == 0)
      llvm::errs() << "tc: error: " << Msg << " (repeated " << L->Repeats
                   << (L->Repeats == 1 ? " time)\n" : " times)\n");
    return;
  }
  L->Last = std::move(Msg);
  L->Repeats = 0;
  llvm::errs() << "tc: error: " << L->Last << "\n";
}

/// The one place errors become status codes and get logged.
tc_status_t fail(tc_status_t S, llvm::Error E) {
  logError(llvm::toString(std::move(E)));
  return S;
}

tc_status_t fail(tc_status_t S, const char *What) {
  return fail(S, llvm::createStringError(What));
}

tc_status_t fromWire(WireStatus S) {
  switch (S) {
  case WireStatus::BadArchive:
  case WireStatus::NoMember:
  case WireStatus::HashMismatch:
    return TC_ERR_BAD_ARCHIVE;
  default:
    return TC_ERR_REMOTE;
  }
}

std::vector<std::string> splitPath(const char *P) {
  std::vector<std::string> Out;
  llvm::SmallVector<llvm::StringRef, 4> Parts;
  llvm::StringRef(P).split(Parts, ':', -1, false);
  for (llvm::StringRef S : Parts)
    Out.push_back(S.str());
  return Out;
}

} // namespace

extern "C" {

const char *tc_last_error(void) { return LastError.c_str(); }

int tc_set_error_logging(int Enable) {
  return LogErrors.exchange(Enable != 0) ? 1 : 0;
}

const char *tc_status_string(tc_status_t Status) {
  // Any int may arrive from C: switch on the integer, not the enum.
  switch (static_cast<int>(Status)) {
  case TC_OK:
    return "success";
  case TC_INPROGRESS:
    return "operation in progress";
  case TC_ERR_INVALID_PARAM:
    return "invalid parameter";
  case TC_ERR_NO_MEMORY:
    return "out of memory";
  case TC_ERR_NOT_FOUND:
    return "ifunc not found";
  case TC_ERR_BAD_ARCHIVE:
    return "bad or unusable archive";
  case TC_ERR_IO:
    return "input/output error";
  case TC_ERR_UNREACHABLE:
    return "destination unreachable";
  case TC_ERR_CONNECTION_RESET:
    return "connection reset by peer";
  case TC_ERR_PAYLOAD:
    return "payload creation failed";
  case TC_ERR_REMOTE:
    return "rejected by the target";
  case TC_ERR_TIMED_OUT:
    return "timed out";
  case TC_ERR_UNSUPPORTED:
    return "not supported by this build";
  default:
    break;
  }
  return "unknown status";
}

tc_status_t tc_context_create(const tc_context_params_t *P,
                              tc_context_h *Out) {
  if (!Out)
    return fail(TC_ERR_INVALID_PARAM, "tc_context_create: context_p is NULL");
  auto C = std::make_unique<tc_context>();
  uint64_t Mask = P ? P->field_mask : 0;
  const char *Env = std::getenv("TC_IFUNC_PATH");
  C->IfuncPath = Env ? Env : ".";
  if (Mask & TC_CONTEXT_PARAM_FIELD_IFUNC_PATH) {
    if (!P->ifunc_path)
      return fail(TC_ERR_INVALID_PARAM, "tc_context_create: ifunc_path is "
                                        "NULL");
    C->IfuncPath = P->ifunc_path;
  }
  if (Mask & TC_CONTEXT_PARAM_FIELD_EXEC_MODE) {
    // A C enum may hold any int: check the value, not just the cases.
    int Mode = P->exec_mode;
    if (Mode == TC_EXEC_AUTO)
      C->Opts.Mode = LoadMode::Auto;
    else if (Mode == TC_EXEC_BITCODE)
      C->Opts.Mode = LoadMode::Bitcode;
    else if (Mode == TC_EXEC_OBJECT)
      C->Opts.Mode = LoadMode::Object;
    else if (Mode == TC_EXEC_SANDBOX)
      C->Opts.Mode = LoadMode::Sandbox;
    else
      return fail(TC_ERR_INVALID_PARAM, "tc_context_create: bad exec_mode");
  }
  if (Mask & TC_CONTEXT_PARAM_FIELD_SANDBOX) {
    const tc_sandbox_params_t *SP = P->sandbox;
    if (!SP)
      return fail(TC_ERR_INVALID_PARAM, "tc_context_create: sandbox is NULL");
    SandboxPolicy &Pol = C->Opts.Sandbox;
    if (SP->field_mask & TC_SANDBOX_PARAM_FIELD_FUEL) {
      if (SP->fuel == 0 || SP->fuel > uint64_t(INT64_MAX))
        return fail(TC_ERR_INVALID_PARAM, "tc_context_create: bad sandbox "
                                          "fuel");
      Pol.Fuel = SP->fuel;
    }
    if (SP->field_mask & TC_SANDBOX_PARAM_FIELD_ALLOW_CALLS) {
      if (SP->allow_count && !SP->allow_calls)
        return fail(TC_ERR_INVALID_PARAM,
                    "tc_context_create: sandbox allow_calls is NULL");
      for (size_t I = 0; I < SP->allow_count; ++I) {
        if (!SP->allow_calls[I] || !*SP->allow_calls[I])
          return fail(TC_ERR_INVALID_PARAM, "tc_context_create: empty "
                                            "sandbox allow_calls entry");
        C->Opts.Jit.Sandbox.AllowCalls.push_back(SP->allow_calls[I]);
      }
    }
    if (SP->field_mask & TC_SANDBOX_PARAM_FIELD_REGIONS) {
      if (SP->region_count && !SP->regions)
        return fail(TC_ERR_INVALID_PARAM,
                    "tc_context_create: sandbox regions is NULL");
      for (size_t I = 0; I < SP->region_count; ++I)
        Pol.Regions.push_back({SP->regions[I].base, SP->regions[I].size});
    }
    if (SP->field_mask & TC_SANDBOX_PARAM_FIELD_STACK_SIZE) {
      if (SP->stack_size < 4096)
        return fail(TC_ERR_INVALID_PARAM, "tc_context_create: sandbox "
                                          "stack_size below 4096");
      Pol.StackBytes = SP->stack_size;
    }
  }
  if (Mask & TC_CONTEXT_PARAM_FIELD_MAX_LOADED)
    C->Opts.MaxLoaded = P->max_loaded;
  if (Mask & TC_CONTEXT_PARAM_FIELD_DEP_DIRS) {
    if (!P->dep_dirs)
      return fail(TC_ERR_INVALID_PARAM, "tc_context_create: dep_dirs is NULL");
    C->Opts.Jit.DepDirs = splitPath(P->dep_dirs);
  }
  if (Mask & TC_CONTEXT_PARAM_FIELD_CACHE_DIR) {
    if (!P->cache_dir)
      return fail(TC_ERR_INVALID_PARAM, "tc_context_create: cache_dir is "
                                        "NULL");
    C->Opts.Jit.CacheDir = P->cache_dir;
  }
  if (Mask & TC_CONTEXT_PARAM_FIELD_SHIP_CODE) {
    int Ship = P->ship_code;
    if (Ship != TC_SHIP_CODE_ONCE && Ship != TC_SHIP_CODE_ALWAYS)
      return fail(TC_ERR_INVALID_PARAM, "tc_context_create: bad ship_code");
    C->Opts.AlwaysShipCode = Ship == TC_SHIP_CODE_ALWAYS;
  }
  if (Mask & TC_CONTEXT_PARAM_FIELD_ALLOW) {
    if (P->allow_count && !P->allow_hashes)
      return fail(TC_ERR_INVALID_PARAM,
                  "tc_context_create: allow_hashes is NULL");
    for (size_t I = 0; I < P->allow_count; ++I) {
      ArchiveHash H;
      std::memcpy(H.data(), P->allow_hashes[I], H.size());
      C->Opts.AllowedHashes.insert(H);
    }
  }
  if (Mask & TC_CONTEXT_PARAM_FIELD_TRUST) {
    if (P->trusted_key_count && !P->trusted_keys)
      return fail(TC_ERR_INVALID_PARAM,
                  "tc_context_create: trusted_keys is NULL");
    for (size_t I = 0; I < P->trusted_key_count; ++I) {
      PublicKey K;
      std::memcpy(K.data(), P->trusted_keys[I], K.size());
      C->Opts.TrustedKeys.push_back(K);
    }
  }
  // After exec_mode: the built-in ifunc is loaded the way messages will be.
  if ((Mask & TC_CONTEXT_PARAM_FIELD_PREWARM) && P->prewarm)
    C->Opts.Jit.Prewarm = C->Opts.Mode;
  *Out = C.release();
  return TC_OK;
}

void tc_context_destroy(tc_context_h C) { delete C; }

tc_status_t tc_worker_create(tc_context_h C, const tc_worker_params_t *P,
                             tc_worker_h *Out) {
  if (!C || !Out)
    return fail(TC_ERR_INVALID_PARAM, "tc_worker_create: NULL argument");
  uint64_t Mask = P ? P->field_mask : 0;
  auto W = std::make_unique<tc_worker>();
  W->Ctx = C;
  RuntimeOptions Opts = C->Opts;
  if (Mask & TC_WORKER_PARAM_FIELD_TARGET_ARGS)
    Opts.TargetArgs = P->target_args;
  if (Mask & TC_WORKER_PARAM_FIELD_COMPILE_THREAD)
    Opts.CompileOnProgressThread = P->compile_thread == 0;
  if (Mask & TC_WORKER_PARAM_FIELD_ERROR_CB) {
    W->ErrorCB = P->error_cb;
    W->ErrorArg = P->error_arg;
  }
  if (Mask & TC_WORKER_PARAM_FIELD_ACCEPT_CB) {
    if (!P->accept_cb)
      return fail(TC_ERR_INVALID_PARAM, "tc_worker_create: accept_cb is NULL");
    W->AcceptCB = P->accept_cb;
    W->AcceptArg = P->accept_arg;
  }
  bool UsePmix = false;
  if (Mask & TC_WORKER_PARAM_FIELD_BOOTSTRAP) {
    int B = P->bootstrap;
    if (B == TC_BOOTSTRAP_PMIX) {
      if (!havePmix())
        return fail(TC_ERR_UNSUPPORTED, "tc_worker_create: this libtc was "
                                        "built without PMIx");
      UsePmix = true;
    } else if (B != TC_BOOTSTRAP_NONE) {
      return fail(TC_ERR_INVALID_PARAM, "tc_worker_create: bad bootstrap");
    }
  }
  UcxTransportOptions TOpts;
  if (Mask & TC_WORKER_PARAM_FIELD_COALESCE)
    TOpts.Coalesce = P->coalesce != 0;
  if (Mask & TC_WORKER_PARAM_FIELD_MAILBOX)
    TOpts.Mailbox = P->mailbox != 0;
  llvm::Expected<std::unique_ptr<Transport>> T = createUcxTransport(TOpts);
  if (!T)
    return fail(TC_ERR_IO, T.takeError());
  llvm::Expected<std::unique_ptr<Runtime>> RT =
      Runtime::create(std::move(*T), std::move(Opts));
  if (!RT)
    return fail(TC_ERR_IO, RT.takeError());
  W->RT = std::move(*RT);
  tc_worker *Raw = W.get();
  W->RT->onRemoteError([Raw](const RemoteError &E) {
    if (!Raw->ErrorCB)
      return;
    auto It = Raw->Eps.find(E.Conn);
    Raw->ErrorCB(Raw->ErrorArg, It == Raw->Eps.end() ? nullptr : It->second,
                 E.Seq, fromWire(E.Status), E.Message.c_str());
  });
  W->RT->onAccept([Raw](ConnId Conn) {
    if (!Raw->AcceptCB)
      return;
    auto *E = new (std::nothrow)
        tc_ep{Raw, Conn, false, Raw->RT->transport().peerName(Conn), {}};
    if (!E) {
      fail(TC_ERR_NO_MEMORY, "accepting a connection: out of memory");
      Raw->RT->transport().disconnect(Conn);
      return;
    }
    Raw->Eps[Conn] = E;
    Raw->AcceptCB(Raw->AcceptArg, E);
  });
  W->RT->onDisconnect([Raw](ConnId Conn, llvm::StringRef Why,
                            const Delivery &D) {
    auto It = Raw->Eps.find(Conn);
    if (It == Raw->Eps.end())
      return;
    tc_ep *E = It->second;
    E->Conn = 0;        // Stale: later sends fail at once.
    Raw->Eps.erase(It); // tc_ep_destroy() no longer finds it here.
    // Why, and what it cost: later calls on the endpoint say it.
    bool Lost = D.Acknowledged < D.Sent;
    E->Gone = Why.str() + (Lost ? describeLoss(D, D.Sent) : "");
    // And one line now where the application lost something: a flush or
    // read that failed with it (they said TC_ERR_CONNECTION_RESET without
    // a line each: completionStatus), or, on a connection that failed
    // rather than closed, messages not acknowledged or the peer it
    // connected to. A peer that closes its end when it is done (a job's
    // end) is no error.
    if (D.Waiting || (!closedByPeer(Why) && (E->Made || Lost)))
      logError(E->Gone);
  });
  if (UsePmix) {
    // Publish the worker address under our rank, then meet every rank.
    llvm::Expected<std::unique_ptr<Bootstrap>> B = createPmixBootstrap();
    if (!B)
      return fail(TC_ERR_UNREACHABLE, B.takeError());
    llvm::Expected<std::string> A = W->RT->transport().address();
    if (!A)
      return fail(TC_ERR_IO, A.takeError());
    if (llvm::Error E = (*B)->put(BootstrapAddressKey, *A))
      return fail(TC_ERR_IO, std::move(E));
    if (llvm::Error E = (*B)->fence())
      return fail(TC_ERR_IO, std::move(E));
    W->Boot = std::move(*B);
  }
  *Out = W.release();
  return TC_OK;
}

void tc_worker_destroy(tc_worker_h W) {
  if (!W)
    return;
  for (auto &KV : W->Eps)
    KV.second->W = nullptr;
  for (auto &B : W->Barriers) {
    std::lock_guard<std::mutex> G(B->Lock);
    B->Wake = nullptr;
  }
  delete W;
}

/// Runs the callbacks of barriers that ended (on the worker's thread).
LLVM_ATTRIBUTE_NOINLINE static bool progressBarriers(tc_worker_h W) {
  bool Did = false;
  for (size_t I = 0; I < W->Barriers.size();) {
    std::shared_ptr<BarrierState> B = W->Barriers[I];
    int R = B->Result.load();
    if (!R) {
      ++I;
      continue;
    }
    {
      // The PMIx thread stored the result under the lock and may still be
      // waking this worker: wait for that, so tc_worker_destroy() cannot
      // close the wake descriptor under its write (ThreadSanitizer).
      std::lock_guard<std::mutex> G(B->Lock);
      B->Wake = nullptr;
    }
    W->Barriers.erase(W->Barriers.begin() + I);
    Did = true;
    if (B->CB)
      B->CB(B->Arg, R == 1 ? TC_OK
                           : fail(TC_ERR_IO, "tc_worker_barrier_nb: the "
                                             "barrier failed (a rank died?)"));
  }
  return Did;
}

int tc_worker_progress(tc_worker_h W) {
  // Every busy-polling loop runs this: nothing beyond the transport's pass
  // unless a barrier is pending.
  if (LLVM_UNLIKELY(!W))
    return 0;
  bool Did = W->RT->progress();
  if (LLVM_UNLIKELY(!W->Barriers.empty()))
    Did |= progressBarriers(W);
  return Did;
}

tc_status_t tc_worker_wait(tc_worker_h W, int TimeoutMs) {
  if (!W)
    return fail(TC_ERR_INVALID_PARAM, "tc_worker_wait: worker is NULL");
  if (llvm::Error E = W->RT->wait(TimeoutMs))
    return fail(TC_ERR_IO, std::move(E));
  return TC_OK;
}

tc_status_t tc_worker_listen(tc_worker_h W, const char *Host, uint16_t Port,
                             uint16_t *PortOut) {
  if (!W || !Host)
    return fail(TC_ERR_INVALID_PARAM, "tc_worker_listen: NULL argument");
  llvm::Expected<uint16_t> P = W->RT->transport().listen(Host, Port);
  if (!P)
    return fail(TC_ERR_UNREACHABLE, P.takeError());
  if (PortOut)
    *PortOut = *P;
  return TC_OK;
}

tc_status_t tc_worker_get_address(tc_worker_h W, void **AddrOut,
                                  size_t *LenOut) {
  if (!W || !AddrOut || !LenOut)
    return fail(TC_ERR_INVALID_PARAM, "tc_worker_get_address: NULL argument");
  llvm::Expected<std::string> A = W->RT->transport().address();
  if (!A)
    return fail(TC_ERR_IO, A.takeError());
  void *Copy = std::malloc(A->size());
  if (!Copy)
    return fail(TC_ERR_NO_MEMORY, "tc_worker_get_address: out of memory");
  std::memcpy(Copy, A->data(), A->size());
  *AddrOut = Copy;
  *LenOut = A->size();
  return TC_OK;
}

void tc_worker_release_address(tc_worker_h, void *Address) {
  std::free(Address);
}

tc_status_t tc_worker_set_target_args(tc_worker_h W, const char *Name,
                                      void *Args) {
  if (!W)
    return fail(TC_ERR_INVALID_PARAM, "tc_worker_set_target_args: NULL "
                                      "worker");
  if (Name)
    W->RT->setTargetArgs(Name, Args);
  else
    W->RT->setTargetArgs(Args);
  return TC_OK;
}

tc_status_t tc_worker_set_region(tc_worker_h W, const void *Base,
                                 size_t Size) {
  if (!W || (!Base && Size))
    return fail(TC_ERR_INVALID_PARAM, "tc_worker_set_region: NULL argument");
  W->RT->setRegion(Base, Base ? Size : 0);
  return TC_OK;
}

tc_status_t tc_worker_evict_code(tc_worker_h W) {
  if (!W)
    return fail(TC_ERR_INVALID_PARAM, "tc_worker_evict_code: worker is NULL");
  if (W->RT->currentConn())
    return fail(TC_ERR_INVALID_PARAM,
                "tc_worker_evict_code: called while a message runs");
  W->RT->evictAll();
  return TC_OK;
}

tc_status_t tc_worker_add_sandbox_region(tc_worker_h W, void *Base,
                                         size_t Size) {
  if (!W || (!Base && Size))
    return fail(TC_ERR_INVALID_PARAM,
                "tc_worker_add_sandbox_region: NULL argument");
  W->RT->addSandboxRegion(Base, Size);
  return TC_OK;
}

tc_status_t tc_worker_query_stats(tc_worker_h W, tc_worker_stats_t *Out) {
  if (!W || !Out)
    return fail(TC_ERR_INVALID_PARAM, "tc_worker_query_stats: NULL argument");
  const RuntimeCounters &C = W->RT->counters();
  tc_worker_stats_t S{};
  S.received = C.Received;
  S.executed = C.Executed;
  S.code_frames = C.CodeFrames;
  S.cache_hits = C.CacheHits;
  S.compiles = C.Compiles;
  S.compile_ms = C.CompileMillis;
  S.code_requests = C.CodeRequests;
  S.evictions = C.Evictions;
  for (const auto &KV : C.Errors)
    S.errors += KV.second;
  S.errors_received = C.ErrorsReceived;
  S.frames_sent = C.FramesSent;
  S.bytes_sent = C.BytesSent;
  TransportStats T = W->RT->transport().stats();
  S.batches_sent = T.Batches;
  S.batched_frames = T.BatchedFrames;
  S.sandbox_traps = C.SandboxTraps;
  S.mailbox_sent = T.MailboxSent;
  S.mailbox_received = T.MailboxReceived;
  S.prewarm_ms = W->RT->jit().prewarmMillis().value_or(0);
  S.mailbox_direct = C.LaneFrames;
  S.mailbox_registered_bytes = T.MailboxRegisteredBytes;
  S.mailbox_areas = T.MailboxAreas;
  *Out = S;
  return TC_OK;
}

static tc_status_t newEp(tc_worker_h W, llvm::Expected<ConnId> C,
                         tc_ep_h *Out) {
  if (!C)
    return fail(TC_ERR_UNREACHABLE, C.takeError());
  auto *E = new (std::nothrow)
      tc_ep{W, *C, true, W->RT->transport().peerName(*C), {}};
  if (!E)
    return fail(TC_ERR_NO_MEMORY, "tc_ep_connect: out of memory");
  W->Eps[*C] = E;
  *Out = E;
  return TC_OK;
}

tc_status_t tc_ep_connect(tc_worker_h W, const char *Host, uint16_t Port,
                          tc_ep_h *Out) {
  if (!W || !Host || !Out)
    return fail(TC_ERR_INVALID_PARAM, "tc_ep_connect: NULL argument");
  return newEp(W, W->RT->connect(Host, Port), Out);
}

tc_status_t tc_ep_connect_address(tc_worker_h W, const void *Addr, size_t Len,
                                  tc_ep_h *Out) {
  if (!W || !Addr || !Out)
    return fail(TC_ERR_INVALID_PARAM, "tc_ep_connect_address: NULL argument");
  return newEp(W,
               W->RT->connectAddress(
                   llvm::StringRef(static_cast<const char *>(Addr), Len)),
               Out);
}

/// Completion callbacks: llvm::Error to a status, through fail(). A
/// connection that failed or closed (a ConnectionError) is
/// TC_ERR_CONNECTION_RESET, logged once for the connection (onDisconnect),
/// not once per send it failed, and kept for tc_last_error(); a target's
/// refusal (errc::operation_not_permitted, Runtime.h) TC_ERR_REMOTE;
/// anything else the transport's (TC_ERR_IO).
static tc_status_t completionStatus(llvm::Error E) {
  if (!E)
    return TC_OK;
  if (E.isA<ConnectionError>()) {
    LastError = llvm::toString(std::move(E));
    return TC_ERR_CONNECTION_RESET;
  }
  std::error_code EC;
  std::string Msg;
  llvm::handleAllErrors(std::move(E), [&](const llvm::ErrorInfoBase &I) {
    if (!EC)
      EC = I.convertToErrorCode();
    Msg += Msg.empty() ? I.message() : "; " + I.message();
  });
  return fail(EC == std::errc::operation_not_permitted ? TC_ERR_REMOTE
                                                       : TC_ERR_IO,
              llvm::createStringError(Msg));
}

/// The status of a call on an endpoint whose connection is gone.
static tc_status_t closedEp(const char *Who, tc_ep_h E) {
  return fail(TC_ERR_CONNECTION_RESET,
              llvm::createStringError("%s: %s", Who,
                                      E->Gone.empty() ? "connection closed"
                                                      : E->Gone.c_str()));
}

static llvm::unique_function<void(llvm::Error)> completion(tc_send_cb_t CB,
                                                           void *Arg) {
  // Without a callback nothing is queued per send (the benchmarks' hot
  // path). A send that fails then shows up as the endpoint's disconnect.
  if (!CB)
    return nullptr;
  return [CB, Arg](llvm::Error E) { CB(Arg, completionStatus(std::move(E))); };
}

// --- PMIx bootstrap (issue #20)
tc_status_t tc_worker_query_rank(tc_worker_h W, uint32_t *RankOut,
                                 uint32_t *SizeOut) {
  if (!W)
    return fail(TC_ERR_INVALID_PARAM, "tc_worker_query_rank: worker is NULL");
  if (!W->Boot)
    return fail(TC_ERR_INVALID_PARAM, "tc_worker_query_rank: the worker has "
                                      "no bootstrap");
  if (RankOut)
    *RankOut = W->Boot->rank();
  if (SizeOut)
    *SizeOut = W->Boot->size();
  return TC_OK;
}

tc_status_t tc_ep_connect_rank(tc_worker_h W, uint32_t Rank, tc_ep_h *Out) {
  if (!W || !Out)
    return fail(TC_ERR_INVALID_PARAM, "tc_ep_connect_rank: NULL argument");
  if (!W->Boot)
    return fail(TC_ERR_INVALID_PARAM, "tc_ep_connect_rank: the worker has "
                                      "no bootstrap");
  auto It = W->RankAddrs.find(Rank);
  if (It == W->RankAddrs.end()) {
    llvm::Expected<std::string> A = W->Boot->get(Rank, BootstrapAddressKey);
    if (!A)
      return fail(Rank >= W->Boot->size() ? TC_ERR_INVALID_PARAM
                                          : TC_ERR_UNREACHABLE,
                  A.takeError());
    It = W->RankAddrs.emplace(Rank, std::move(*A)).first;
  }
  tc_status_t S =
      newEp(W, W->RT->transport().connectAddress(It->second), Out);
  if (S == TC_OK)
    (*Out)->Peer = "rank " + std::to_string(Rank);
  return S;
}

tc_status_t tc_worker_barrier_nb(tc_worker_h W, tc_send_cb_t CB, void *Arg) {
  if (!W)
    return fail(TC_ERR_INVALID_PARAM, "tc_worker_barrier_nb: worker is NULL");
  if (!W->Boot)
    return fail(TC_ERR_INVALID_PARAM, "tc_worker_barrier_nb: the worker has "
                                      "no bootstrap");
  auto B = std::make_shared<BarrierState>();
  B->Wake = &W->RT->transport();
  B->CB = CB;
  B->Arg = Arg;
  if (llvm::Error E = W->Boot->barrierAsync([B](bool Ok) {
        std::lock_guard<std::mutex> G(B->Lock);
        B->Result.store(Ok ? 1 : 2);
        if (B->Wake)
          B->Wake->signal();
      }))
    return fail(TC_ERR_IO, std::move(E));
  W->Barriers.push_back(std::move(B));
  return TC_INPROGRESS;
}
// --- end PMIx bootstrap

static tc_status_t startFlush(tc_ep_h E, const char *Who,
                              llvm::unique_function<void(llvm::Error)> Done) {
  if (!E || !E->W)
    return fail(TC_ERR_INVALID_PARAM,
                llvm::createStringError("%s: bad endpoint", Who));
  if (!E->Conn)
    return closedEp(Who, E);
  E->W->RT->fence(E->Conn, std::move(Done));
  return TC_INPROGRESS;
}

tc_status_t tc_ep_read_region_nb(tc_ep_h E, size_t Length, tc_read_cb_t CB,
                                 void *Arg) {
  if (!E || !E->W || !CB)
    return fail(TC_ERR_INVALID_PARAM, "tc_ep_read_region_nb: NULL argument");
  if (!E->Conn)
    return closedEp("tc_ep_read_region_nb", E);
  E->W->RT->readRegion(E->Conn, Length,
                       [CB, Arg](llvm::Expected<std::string> D) {
                         if (!D)
                           CB(Arg, completionStatus(D.takeError()), nullptr,
                              0);
                         else
                           CB(Arg, TC_OK, D->data(), D->size());
                       });
  return TC_INPROGRESS;
}

tc_status_t tc_ep_flush_nb(tc_ep_h E, tc_send_cb_t CB, void *Arg) {
  return startFlush(E, "tc_ep_flush_nb", completion(CB, Arg));
}

tc_status_t tc_ep_flush(tc_ep_h E, int TimeoutMs) {
  if (E && E->W && !E->W->RT->transport().canWaitHere())
    return fail(TC_ERR_INVALID_PARAM,
                "tc_ep_flush: called from ifunc code that came as an active "
                "message, where UCX cannot be progressed to wait for the "
                "flush; use tc_ep_flush_nb");
  // On the heap: the fence outlives a timeout, and its completion comes
  // after this call returned.
  struct State {
    bool Done = false;
    tc_status_t S = TC_OK;
  };
  auto St = std::make_shared<State>();
  tc_status_t S = startFlush(E, "tc_ep_flush", [St](llvm::Error Err) {
    St->S = completionStatus(std::move(Err));
    St->Done = true;
  });
  if (S != TC_INPROGRESS)
    return S;
  auto Deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(TimeoutMs < 0 ? 0 : TimeoutMs);
  while (!St->Done) {
    if (E->W->RT->progress())
      continue;
    if (TimeoutMs >= 0 && std::chrono::steady_clock::now() >= Deadline) {
      // Who did not answer, and what is unknown because of it.
      Delivery D = E->W->RT->delivery(E->Conn);
      return fail(TC_ERR_TIMED_OUT,
                  llvm::createStringError(
                      "tc_ep_flush: timed out after %d ms waiting for %s%s",
                      TimeoutMs, E->Peer.c_str(),
                      describeLoss(D, D.Sent).c_str()));
    }
    if (llvm::Error Err = E->W->RT->wait(10))
      return fail(TC_ERR_IO, std::move(Err));
  }
  return St->S;
}

void tc_ep_destroy(tc_ep_h E) {
  if (!E)
    return;
  if (E->W) {
    if (E->Conn) {
      E->W->Eps.erase(E->Conn);
      E->W->RT->transport().disconnect(E->Conn);
    }
  }
  delete E;
}

static tc_status_t newIfunc(tc_worker_h W,
                            llvm::Expected<std::shared_ptr<const Ifunc>> F,
                            tc_status_t OnError, tc_ifunc_h *Out) {
  if (!F)
    return fail(OnError, F.takeError());
  *Out = new tc_ifunc{W, std::move(*F)};
  return TC_OK;
}

tc_status_t tc_ifunc_register(tc_worker_h W, const char *Name,
                              tc_ifunc_h *Out) {
  if (!W || !Name || !Out)
    return fail(TC_ERR_INVALID_PARAM, "tc_ifunc_register: NULL argument");
  llvm::Expected<std::shared_ptr<const Ifunc>> F =
      W->RT->registerByName(Name, W->Ctx->IfuncPath);
  tc_status_t S = TC_ERR_BAD_ARCHIVE;
  if (!F) {
    std::string Msg = llvm::toString(F.takeError());
    S = llvm::StringRef(Msg).starts_with("no ") ? TC_ERR_NOT_FOUND
                                                : TC_ERR_BAD_ARCHIVE;
    return fail(S, llvm::createStringError(Msg));
  }
  return newIfunc(W, std::move(F), S, Out);
}

tc_status_t tc_ifunc_register_archive(tc_worker_h W, const void *Bytes,
                                      size_t Size, tc_ifunc_h *Out) {
  if (!W || !Bytes || !Out)
    return fail(TC_ERR_INVALID_PARAM,
                "tc_ifunc_register_archive: NULL argument");
  return newIfunc(W,
                  W->RT->registerArchive(llvm::StringRef(
                      static_cast<const char *>(Bytes), Size)),
                  TC_ERR_BAD_ARCHIVE, Out);
}

const uint8_t *tc_ifunc_hash(tc_ifunc_h F) {
  return F ? F->F->Hash.data() : nullptr;
}

void tc_ifunc_deregister(tc_ifunc_h F) {
  if (!F)
    return;
  if (F->W)
    F->W->RT->deregister(F->F);
  delete F;
}

tc_status_t tc_msg_create(tc_ifunc_h F, const void *Args, size_t Size,
                          tc_msg_h *Out) {
  if (!F || !Out || (!Args && Size))
    return fail(TC_ERR_INVALID_PARAM, "tc_msg_create: NULL argument");
  llvm::Expected<Message> M = F->W->RT->createMessage(F->F, Args, Size);
  if (!M)
    return fail(TC_ERR_PAYLOAD, M.takeError());
  *Out = new tc_msg{std::move(*M)};
  return TC_OK;
}

void *tc_msg_payload(tc_msg_h M, size_t *SizeOut) {
  if (!M)
    return nullptr;
  // A send in flight may share the payload: the message gets its own.
  std::string &P = writableMessagePayload(M->M);
  if (SizeOut)
    *SizeOut = P.size();
  // Sandboxed code that forwards itself writes the payload it gets here.
  sandboxGrant(P.data(), P.size());
  return P.data();
}

tc_status_t tc_msg_send(tc_ep_h E, tc_msg_h M, tc_send_cb_t CB, void *Arg) {
  if (!E || !E->W || !M)
    return fail(TC_ERR_INVALID_PARAM, "tc_msg_send: NULL argument");
  if (!E->Conn)
    return closedEp("tc_msg_send", E);
  if (!CB) // Nothing to keep per send: the runtime's fast path.
    E->W->RT->send(E->Conn, M->M);
  else
    E->W->RT->send(E->Conn, M->M, completion(CB, Arg));
  return TC_INPROGRESS;
}

void tc_msg_free(tc_msg_h M) { delete M; }

tc_ep_h tc_worker_source_ep(tc_worker_h W) {
  if (!W)
    return nullptr;
  ConnId C = W->RT->currentConn();
  if (!C)
    return nullptr;
  auto It = W->Eps.find(C);
  return It == W->Eps.end() ? nullptr : It->second;
}

tc_status_t tc_worker_register_local(tc_worker_h W, const char *Name,
                                     tc_local_fn_t Fn) {
  if (!W || !Name || !Fn)
    return fail(TC_ERR_INVALID_PARAM, "tc_worker_register_local: NULL "
                                      "argument");
  if (llvm::Error E = W->RT->registerLocal(Name, Fn))
    return fail(TC_ERR_INVALID_PARAM, std::move(E));
  return TC_OK;
}

tc_status_t tc_ep_send_local(tc_ep_h E, const char *Name, const void *Payload,
                             size_t Size, tc_send_cb_t CB, void *Arg) {
  if (!E || !E->W || !Name || (!Payload && Size))
    return fail(TC_ERR_INVALID_PARAM, "tc_ep_send_local: NULL argument");
  if (!E->Conn)
    return closedEp("tc_ep_send_local", E);
  E->W->RT->sendLocal(
      E->Conn, Name,
      llvm::StringRef(static_cast<const char *>(Payload), Size),
      completion(CB, Arg));
  return TC_INPROGRESS;
}

/// What tc_archive_inspect() hands out: the C view first (a base, so
/// tc_archive_info_free() finds the rest), then the storage it points into.
struct ArchiveInfo : tc_archive_info_t {
  tc::Archive A;
  std::vector<std::string> Strings; ///< Names of kinds, roles, key IDs.
  std::vector<std::vector<const char *>> Symbols;
  std::vector<tc_archive_member_t> Members;
  std::vector<const char *> Deps;
  std::vector<tc_archive_signature_t> Signatures;
};

tc_status_t tc_archive_inspect(const void *Bytes, size_t Size,
                               tc_archive_info_t **Out) {
  if (!Bytes || !Out)
    return fail(TC_ERR_INVALID_PARAM, "tc_archive_inspect: NULL argument");
  llvm::Expected<tc::Archive> A = tc::readArchive(llvm::MemoryBufferRef(
      llvm::StringRef(static_cast<const char *>(Bytes), Size), "archive"));
  if (!A)
    return fail(TC_ERR_BAD_ARCHIVE, A.takeError());
  auto I = std::make_unique<ArchiveInfo>();
  I->A = std::move(*A);
  const tc::Archive &Ar = I->A;
  // Every string is stored before any pointer into Strings is taken.
  for (const tc::Member &M : Ar.Members) {
    I->Strings.push_back(tc::imageKindName(M.Kind).str());
    I->Strings.push_back(tc::roleName(M.TheRole).str());
    I->Strings.push_back(tc::compressionName(M.Compress).str());
  }
  tc::ArchiveHash Signed = tc::signedHash(Ar);
  for (const tc::ArchiveSignature &S : Ar.Signatures)
    I->Strings.push_back(tc::keyId(S.Key));
  size_t Next = 0;
  I->Symbols.resize(Ar.Members.size());
  for (size_t K = 0; K < Ar.Members.size(); ++K) {
    const tc::Member &M = Ar.Members[K];
    tc_archive_member_t C{};
    C.triple = M.Triple.c_str();
    C.cpu = M.CPU.c_str();
    C.features = M.Features.c_str();
    C.kind = I->Strings[Next++].c_str();
    C.role = I->Strings[Next++].c_str();
    C.compression = I->Strings[Next++].c_str();
    C.size = M.Image.size();
    C.stored_size = M.Compress == tc::Compression::None ? M.Image.size()
                                                        : M.Layout.ImageSize;
    for (const std::string &Sym : M.Symbols)
      I->Symbols[K].push_back(Sym.c_str());
    C.symbols = I->Symbols[K].data();
    C.symbol_count = M.Symbols.size();
    tc::MemberDigest D = tc::memberDigest(M);
    std::memcpy(C.digest, D.data(), D.size());
    I->Members.push_back(C);
  }
  for (const tc::ArchiveSignature &S : Ar.Signatures)
    I->Signatures.push_back({I->Strings[Next++].c_str(),
                             tc::signatureVerifies(S, Signed) ? 1 : 0});
  for (const std::string &D : Ar.Deps)
    I->Deps.push_back(D.c_str());
  I->name = Ar.Name.c_str();
  std::memcpy(I->hash, Ar.Hash.data(), Ar.Hash.size());
  I->format_version = Ar.FormatVersion;
  I->members = I->Members.data();
  I->member_count = I->Members.size();
  I->deps = I->Deps.data();
  I->dep_count = I->Deps.size();
  I->signatures = I->Signatures.data();
  I->signature_count = I->Signatures.size();
  I->omitted_count = Ar.Omitted.size();
  *Out = I.release();
  return TC_OK;
}

void tc_archive_info_free(tc_archive_info_t *Info) {
  delete static_cast<ArchiveInfo *>(Info);
}

} // extern "C"
