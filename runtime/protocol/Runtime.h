//===- Runtime.h - tc's protocol engine: send, cache, load, run -*- C++ -*-===//
//
// One Runtime is one process's view of tc: the ifuncs it registered (as a
// source), the code it has loaded (as a target), and the per-connection
// state of the protocol in docs/wire-format.md. It talks frames over a
// Transport, so the same logic runs over UCX and over the in-process
// loopback used by unit tests.
//
// Caching is by code identity (the archive hash), never by name:
// - a sender ships the archive once per (connection, identity) and assigns
//   it a code id on that connection; later messages carry the code id only;
// - a target that does not know a code id (restarted, evicted, never got
//   it) queues the message, asks for the code (CodeRequest) and runs the
//   queued messages, in order, when the code arrives. Nothing runs on
//   unknown code and no message is lost.
//
// Threading: a Runtime is driven by one thread (the one calling progress()
// or wait()); other threads must not call into it. Ifunc code runs on that
// thread, from progress(), and may call back into the Runtime (send,
// createMessage) to forward itself: that is how a pointer chase hops.
// Code that arrives for an identity not loaded yet is verified, admitted
// and compiled on a helper thread; its connection waits (its later frames
// queue behind it, in order) while other connections' messages run. The
// result comes back through a queue that progress() empties; the helper
// wakes a wait() with Transport::signal() (docs/runtime.md, "Threads").
//
//===----------------------------------------------------------------------===//

#ifndef TC_RUNTIME_RUNTIME_H
#define TC_RUNTIME_RUNTIME_H

#include "protocol/Frame.h"
#include "jit/Device.h"
#include "jit/Jit.h"
#include "jit/Sandbox.h"
#include "transport/Transport.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/FunctionExtras.h"

#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>
#include <string>
#include <unordered_map>
#include <vector>

namespace tc {

/// Keeps an identity's source-side code loaded while any registration or
/// message uses it, and unloads it from the JIT when the last one goes.
struct SourceCode {
  std::weak_ptr<JitEngine> Jit;
  ArchiveHash Hash{}; ///< Of the registered archive (source members too).
  ~SourceCode();
};

/// A registered ifunc, as the source sees it.
struct Ifunc {
  std::string Name;
  ArchiveHash Hash{};
  std::string Bytes;      ///< The archive as shipped (target members only).
  Archive Parsed;         ///< Including the source member.
  const LoadedIfunc *Source = nullptr; ///< payload_bound/_init, JIT-compiled.
  std::shared_ptr<SourceCode> SourceHold; ///< Keeps Source loaded.
};

/// A message ready to send: an ifunc and its payload. The payload is
/// shared with the sends of it that are still in flight (a large frame
/// leaves without a copy: Transport::sendShared), so it is never written
/// while shared: writableMessagePayload() gives the message its own copy
/// first.
struct Message {
  std::shared_ptr<const Ifunc> Code;
  std::shared_ptr<std::string> Payload;
};

/// \p M's payload, ready to be written: copied first if a send in flight
/// shares it.
std::string &writableMessagePayload(Message &M);

/// Counters a target keeps (tc-serve prints them on exit).
struct RuntimeCounters {
  uint64_t Received = 0;    ///< Invoke frames received.
  uint64_t Executed = 0;    ///< NAME_main calls made.
  uint64_t CodeFrames = 0;  ///< Frames that carried an archive.
  uint64_t CacheHits = 0;   ///< Invokes whose code was already loaded.
  uint64_t Compiles = 0;    ///< Loads (JIT or link) done.
  uint64_t DiskCacheHits = 0; ///< Loads whose object came from the cache dir.
  double CompileMillis = 0; ///< Their total time.
  uint64_t CodeRequests = 0;
  uint64_t Evictions = 0;
  std::map<WireStatus, uint64_t> Errors; ///< Dropped messages by kind.
  uint64_t ErrorsReceived = 0;           ///< Error frames a sender got.
  uint64_t FramesSent = 0;               ///< Frames of any type sent.
  uint64_t BytesSent = 0;                ///< Their header + body bytes.
  /// Of FramesSent, those written through a mailbox lane (Transport::lane())
  /// without a call into the transport.
  uint64_t LaneFrames = 0;
  uint64_t SandboxTraps = 0; ///< Sandboxed invocations ended by a trap.
};

struct RuntimeOptions {
  JitOptions Jit;
  LoadMode Mode = LoadMode::Auto;
  /// Most identities whose code stays loaded at once; 0: no limit. The
  /// least recently used is evicted (and re-requested when needed).
  size_t MaxLoaded = 0;
  /// When non-empty, only archives with these hashes are loaded.
  std::set<ArchiveHash> AllowedHashes;
  /// When non-empty, only archives signed by one of these keys are loaded
  /// (tc::checkSignatures); with AllowedHashes too, both must admit it.
  std::vector<PublicKey> TrustedKeys;
  /// Default target_args for every ifunc (see setTargetArgs).
  void *TargetArgs = nullptr;
  /// A memory region connected senders may read (RegionRead frames).
  const void *Region = nullptr;
  size_t RegionSize = 0;
  /// Attach the archive to every Invoke, not only the first per connection
  /// and identity: the "uncached" mode benchmarks measure (the target still
  /// finds the identity loaded by its hash; only the bytes travel).
  bool AlwaysShipCode = false;
  /// Ship every target member, not only the one the peer runs (what
  /// senders did before the Hello exchange; for comparisons).
  bool ShipAllMembers = false;
  /// The compression dictionaries this process says it reads in its Hello;
  /// unset: every dictionary of this build (tc::dictionaryIds()). Senders
  /// re-store members compressed with any other as plain zstd.
  std::optional<std::vector<std::string>> Dictionaries;
  /// Limits of sandboxed code (Mode == LoadMode::Sandbox): fuel, stacks,
  /// and the memory it may touch besides its payload and locals.
  SandboxPolicy Sandbox;
  /// Compile arriving code on the progress thread, inside progress():
  /// every connection then waits for each compile. Off by
  /// default (compiles run on a helper thread); for comparisons and tests.
  bool CompileOnProgressThread = false;
  /// An accelerator the target runs members on (tc-serve --gpu: a
  /// GpuTarget): its Hello names it, archives with a member for it run
  /// there (loaded with the other compiles, launched asynchronously,
  /// fences and region reads answered after the connection's launches are
  /// done, faults sent back as DeviceFault), the rest on this CPU.
  /// RegionRead then reads the device's region, not Region.
  std::shared_ptr<DeviceTarget> Device;
  /// Where off-thread compiles run. Unset: the Runtime's own helper thread
  /// (started at the first compile). Called on the progress thread with a
  /// job, which must run once, on any thread, before the Runtime is
  /// destroyed. Tests use it to hold a compile while other messages run.
  std::function<void(std::function<void()>)> CompileExecutor;
};

/// What a sender knows of the messages it sent on one connection
/// (docs/runtime.md, "When a target dies"). Messages on a connection are
/// processed in order, so the acknowledged ones are the first ones.
struct Delivery {
  /// Messages (Invoke, LocalInvoke) handed to send() or sendLocal() on the
  /// connection, those held until the peer's Hello included.
  uint64_t Sent = 0;
  /// Of them, the first this many: a fence or region read sent after them
  /// was answered, so each of them ran or was rejected (a RemoteError).
  /// Nothing is known of the others: any of them may have run or not,
  uint64_t Acknowledged = 0;
  /// but for the last this many, which never left this process (held for
  /// a Hello that did not come, or failed with the connection before): they
  /// did not run.
  uint64_t Unsent = 0;
  /// Fences, region reads and held sends waiting for the peer (at a
  /// disconnect: those it failed).
  uint64_t Waiting = 0;
};

/// What a client says of the messages a failed connection cost (tc-send,
/// the C API): ": N of M messages were not acknowledged (the first A ran;
/// K may have run or not; U were never sent)", for the \p Total messages
/// meant for the target (M, at least D.Sent; the ones never handed to
/// send() were never sent either). Empty when \p Total is 0.
std::string describeLoss(const Delivery &D, uint64_t Total);

/// An error a target sent back about one of our messages.
struct RemoteError {
  ConnId Conn = 0;
  uint32_t Seq = 0;
  WireStatus Status = WireStatus::MalformedFrame;
  std::string Message;
};

class Runtime : public TransportHandler {
public:
  Runtime(std::unique_ptr<Transport> T, RuntimeOptions Opts,
          std::shared_ptr<JitEngine> Jit);
  static llvm::Expected<std::unique_ptr<Runtime>>
  create(std::unique_ptr<Transport> T, RuntimeOptions Opts = {});
  /// Calls nothing back: completions of sends, fences, region reads and
  /// held sends still pending are dropped unrun (what they refer to may be
  /// gone already), and so are the hooks (onDisconnect etc.). Endpoints
  /// are flushed and closed, within a bounded time (the transport's).
  ~Runtime() override;

  Transport &transport() { return *T; }
  JitEngine &jit() { return *Jit; }

  //--- Connections -----------------------------------------------------===//

  /// Connects to a listener and says Hello: frames sent on the connection
  /// are held until the peer's Hello answers, so the first code shipped is
  /// only the member the peer runs (docs/wire-format.md, "Hello"). A peer
  /// whose wire versions do not overlap ours fails every send with one
  /// error that names both.
  llvm::Expected<ConnId> connect(llvm::StringRef Host, uint16_t Port);
  /// Connects to a transport address (Transport::address()) and says
  /// Hello, without holding sends (the answer may come on another id).
  llvm::Expected<ConnId> connectAddress(llvm::StringRef Address);
  /// What this process tells its peers.
  const Capabilities &capabilities() const { return Self; }
  /// What the peer on \p C said in its Hello, or null (not yet, or a peer
  /// that did not say Hello).
  const Capabilities *peer(ConnId C) const;

  //--- Source side ----------------------------------------------------===//

  /// Registers an ifunc from archive bytes. Its source member (for this
  /// host) is JIT-compiled for createMessage(); what ships to targets is the
  /// archive without source members.
  llvm::Expected<std::shared_ptr<const Ifunc>>
  registerArchive(llvm::StringRef Bytes);
  /// Finds NAME.tcfb in \p SearchPath (':'-separated) and registers it.
  llvm::Expected<std::shared_ptr<const Ifunc>>
  registerByName(llvm::StringRef Name, llvm::StringRef SearchPath);
  /// Forgets a registered ifunc; messages already created still send (they
  /// hold a reference), new CodeRequests for it are answered with
  /// CodeUnavailable.
  void deregister(const std::shared_ptr<const Ifunc> &F);
  /// The registered ifunc named \p Name, or null.
  std::shared_ptr<const Ifunc> lookup(llvm::StringRef Name) const;

  /// Runs NAME_payload_bound and NAME_payload_init on \p SourceArgs.
  llvm::Expected<Message> createMessage(std::shared_ptr<const Ifunc> F,
                                        const void *SourceArgs,
                                        size_t SourceArgsSize);

  /// Sends \p M on \p Conn. \p Done runs (from progress()) once the
  /// message's buffers may be reused; \p M is copied as needed.
  void send(ConnId Conn, const Message &M,
            llvm::unique_function<void(llvm::Error)> Done);
  /// send() without a completion: the steady state's path (a message of
  /// the ifunc sent last on \p Conn costs a few compares, a header of a
  /// few bytes and the transport's send).
  void send(ConnId Conn, const Message &M);

  /// Sends a LocalInvoke: runs the function the target registered under
  /// \p Name (registerLocal) on \p Payload. The active-message baseline:
  /// no code travels or is looked up, only an id and the payload.
  void sendLocal(ConnId Conn, llvm::StringRef Name, llvm::StringRef Payload,
                 llvm::unique_function<void(llvm::Error)> Done = nullptr);
  /// sendLocal() of the function whose id (localFunctionId) is \p Id.
  void sendLocal(ConnId Conn, uint32_t Id, llvm::StringRef Payload,
                 llvm::unique_function<void(llvm::Error)> Done = nullptr);

  /// Sends a fence; \p Done runs when the target has processed every
  /// earlier message on \p Conn (run or rejected). When the connection
  /// goes first, or the fence cannot be sent on it, the error of fences,
  /// region reads and held sends is a ConnectionError (Transport.h).
  void fence(ConnId Conn, llvm::unique_function<void(llvm::Error)> Done);

  /// Reads up to \p Length bytes of the target's exposed region. The read
  /// is ordered after every earlier message on \p Conn, so its reply also
  /// says those have been processed. The target's refusal (no region)
  /// is an error carrying std::errc::operation_not_permitted.
  void readRegion(ConnId Conn, uint64_t Length,
                  llvm::unique_function<void(llvm::Expected<std::string>)> Done);

  /// What this process knows of the messages it sent on \p C (zeros for
  /// a connection it does not know, or no longer: onDisconnect() hands
  /// over the last figures).
  Delivery delivery(ConnId C) const;

  /// Called for each Error frame a target sends back.
  void onRemoteError(llvm::unique_function<void(const RemoteError &)> CB) {
    RemoteErrorCB = std::move(CB);
  }

  //--- Target side ----------------------------------------------------===//

  /// target_args passed to NAME_main: per ifunc name, else the default.
  void setTargetArgs(void *Args) {
    Opts.TargetArgs = Args;
    ++ArgsGeneration;
  }
  /// Lets sandboxed code touch [Base, Base+Size) too (SandboxPolicy).
  void addSandboxRegion(const void *Base, size_t Size) {
    Opts.Sandbox.Regions.push_back({Base, Size});
  }
  void setRegion(const void *Region, size_t Size) {
    Opts.Region = Region;
    Opts.RegionSize = Size;
  }
  void setTargetArgs(llvm::StringRef Name, void *Args) {
    NamedTargetArgs[Name.str()] = Args;
    ++ArgsGeneration;
  }

  /// Registers a function linked into this process for LocalInvoke
  /// frames. It gets target_args like an ifunc named \p Name would.
  llvm::Error registerLocal(llvm::StringRef Name, IfuncMainFn Fn);

  /// Loads an archive as target code ahead of any message (tc-serve
  /// --ifunc-path): the first message of that identity then needs no JIT.
  /// Admission rules (allow-list, member selection, deps) are those for
  /// code that arrives in a frame.
  llvm::Expected<const LoadedIfunc *> preload(llvm::StringRef Bytes);

  /// Frees loaded code of \p Hash and forgets every code id naming it, so
  /// senders are asked for it again on next use.
  void evict(const ArchiveHash &Hash);
  /// evict() for every identity loaded as target code.
  void evictAll();

  const RuntimeCounters &counters() const { return Counters; }

  /// The connection whose message is running (inside NAME_main or a local
  /// function), else 0: where an answer to it should go.
  ConnId currentConn() const { return Current; }

  //--- Progress --------------------------------------------------------===//

  /// Runs the transport's callbacks, then whatever off-thread compiles
  /// finished (the messages that waited for them). While a compile is in
  /// flight on the one CPU this thread may use and nothing else happened,
  /// it sleeps (Transport::wait) until a frame arrives, the compile ends or
  /// 1 ms passes, so the compile has the CPU.
  bool progress() {
    bool Did = T->progress();
    // Lanes come with a peer's welcome, which a progress() call takes.
    if (LLVM_UNLIKELY(LaneGen != T->laneGeneration()))
      adoptLanes();
    if (LLVM_UNLIKELY(CompilesInFlight != 0))
      Did = finishCompiles(Did);
    if (LLVM_UNLIKELY(Device != nullptr))
      Did |= pollDevice();
    return Did;
  }
  /// Blocks like Transport::wait(); returns at once when a compile has
  /// finished and progress() has not taken its result yet, or when device
  /// work is in flight (a device cannot wake the transport: progress()
  /// polls it).
  llvm::Error wait(int TimeoutMs);

  /// Optional hooks for tools (tc-serve -v) and tests.
  void onAccept(llvm::unique_function<void(ConnId)> CB) {
    AcceptCB = std::move(CB);
  }
  /// \p CB gets the connection, why it went (the transport's words) and
  /// what was delivered on it, after the sends, fences and reads pending on
  /// it failed with a ConnectionError.
  void onDisconnect(
      llvm::unique_function<void(ConnId, llvm::StringRef, const Delivery &)>
          CB) {
    DisconnectCB = std::move(CB);
  }
  void onEvent(llvm::unique_function<void(llvm::StringRef)> CB) {
    EventCB = std::move(CB);
  }

  // TransportHandler.
  void onFrame(ConnId Conn, llvm::StringRef Header,
               llvm::StringRef Body) override;
  /// onFrame(), letting callMain run the function on \p Body in place.
  void onBufferedFrame(ConnId Conn, llvm::StringRef Header,
                       llvm::MutableArrayRef<char> Body) override;
  void onAccept(ConnId Conn) override;
  void onDisconnect(ConnId Conn, llvm::StringRef Why) override;

private:
  /// A frame a target holds until its code arrives.
  struct Pending {
    std::string Bytes; ///< Header + body, owned; decoded again when run.
  };
  /// A frame that waits for an off-thread compile: an Invoke with code at
  /// the front of its connection's queue, or a Code frame (whose code id
  /// its connection's queued Invokes wait for).
  struct CompileWaiter {
    ConnId Conn = 0;
    FrameType Type = FrameType::Invoke;
    uint32_t Seq = 0, CodeId = 0;
    std::shared_ptr<const std::string> Archive; ///< As this frame carried it.
  };
  /// One identity being compiled off the progress thread, and every frame
  /// (of any connection) that waits for it: one compile for all of them.
  struct CompileJob {
    /// The archive that compiles: a waiter whose Archive is this pointer
    /// sent it. A failure is that copy's (a bad or unsigned copy, a member
    /// missing from a thin one): the other waiters then try their own.
    std::shared_ptr<const std::string> Archive;
    std::vector<CompileWaiter> Waiters;
  };
  /// What loading one archive found: the progress thread's events and
  /// bookkeeping need it (loadCode() may run on the helper thread).
  struct LoadOutcome {
    bool Parsed = false; ///< The archive read; Name etc. are set.
    std::string Name;
    ArchiveHash Hash{};
    size_t Members = 0, Omitted = 0;
    const LoadedIfunc *Code = nullptr; ///< Null: failed (Why, Error).
    bool Fresh = false; ///< Loaded now, not found loaded already.
    WireStatus Why = WireStatus::JitFailed;
    std::string Error;
  };
  class CompileThread;
  /// target_args for one function name, looked up once per change of any
  /// target_args (not once per message).
  struct ArgsSlot {
    void *Args = nullptr;
    uint64_t Generation = 0; ///< ArgsGeneration it was looked up in; 0: never.
  };
  /// A code id a target knows on a connection: the identity, its loaded
  /// code (valid until evict(), which forgets this entry) and its args.
  struct KnownCode {
    ArchiveHash Hash{};
    const LoadedIfunc *Code = nullptr;
    ArgsSlot Args;
  };
  /// A function registered with registerLocal.
  struct LocalFn {
    std::string Name;
    IfuncMainFn Fn = nullptr;
    ArgsSlot Args;
  };
  /// A send made before the peer's Hello: Run makes it, Fail reports
  /// that it never will be made.
  struct Held {
    llvm::unique_function<void()> Run;
    llvm::unique_function<void(llvm::Error)> Fail;
    bool Message = false; ///< A message's send (counted in Conn::Unsent).
  };
  /// What one side knows about one connection.
  struct Conn {
    // The Hello exchange.
    bool HelloSent = false;
    /// Sends wait for the peer's Hello (AwaitingHello) or fail (Failure).
    bool Blocked = false;
    bool AwaitingHello = false;
    std::string Failure; ///< Why every send on this connection fails.
    std::deque<Held> Outbox; ///< sends held until the peer's Hello
    std::optional<Capabilities> Peer;
    /// The peer reads compact frames (it said wire version 2 or later).
    bool Compact = false;
    /// The transport's mailbox lane into the peer (Transport::lane()),
    /// or null (adoptLanes()).
    std::shared_ptr<mailbox::Lane> Lane;
    // As a sender.
    std::map<ArchiveHash, uint32_t> SentCode; ///< identity -> code id
    std::map<uint32_t, std::shared_ptr<const Ifunc>> ById;
    /// The ifunc last sent here and its code id: a run of messages of one
    /// ifunc skips the SentCode lookup. Held, so its address is not reused.
    std::shared_ptr<const Ifunc> LastSent;
    uint32_t LastSentId = 0;
    uint32_t NextCodeId = 1;
    uint32_t NextSeq = 1;
    std::map<uint32_t, llvm::unique_function<void(llvm::Error)>> Fences;
    std::map<uint32_t,
             llvm::unique_function<void(llvm::Expected<std::string>)>>
        Reads;
    /// Delivery::Sent and ::Acknowledged, and for each fence and region
    /// read in flight (by sequence number) the messages sent before it:
    /// its answer acknowledges them.
    uint64_t Sent = 0, Acknowledged = 0, Unsent = 0;
    std::map<uint32_t, uint64_t> Covers;
    /// The bytes each region read in flight asked for: a target that
    /// answers with more is not believed.
    std::map<uint32_t, uint64_t> Asked;
    // As a target.
    /// The sequence number of the last sequenced frame that arrived
    /// (Invoke, LocalInvoke, Fence, RegionRead): a compact frame's is the
    /// next one.
    uint32_t RecvSeq = 0;
    llvm::DenseMap<uint32_t, KnownCode> Known; ///< by code id
    /// The entry of Known last run, and its code id: a run of one ifunc's
    /// messages costs a compare. Null after any change to Known.
    KnownCode *LastKnown = nullptr;
    uint32_t LastKnownId = 0;
    std::set<uint32_t> Requested;          ///< code ids asked for
    std::deque<Pending> Queue;             ///< frames waiting, in order
    /// drain() is running a message of this connection (which may have
    /// re-entered progress()): a nested drain() leaves the queue to it.
    bool Draining = false;
  };

  /// The state of connection \p C (created on first use). The last one
  /// looked up is remembered: a burst of frames on one connection costs one
  /// hash lookup.
  Conn &conn(ConnId C) {
    if (C != LastConnId || !LastConn)
      lookUpConn(C);
    return *LastConn;
  }
  /// conn()'s lookup; a new connection's state starts with the lane the
  /// transport has for it, if any (later ones come by adoptLanes()).
  LLVM_ATTRIBUTE_NOINLINE void lookUpConn(ConnId C);
  void sendFrame(ConnId C, const Frame &F, llvm::StringRef Body,
                 llvm::unique_function<void(llvm::Error)> &&Done);
  llvm::Expected<ConnId> started(llvm::Expected<ConnId> C, bool Hold);
  void sendHello(ConnId C, Conn &S);
  void onHello(ConnId C, const Frame &F);
  /// Runs the sends held on \p C until the peer's Hello, in order (or
  /// fails each with the connection's failure).
  void releaseOutbox(ConnId C);
  /// A send on a blocked connection: held (Resend(Done) makes it once the
  /// peer's Hello is here), or failed through \p Done at once.
  template <typename DoneFn, typename ResendFn>
  void holdOrFail(Conn &S, DoneFn Done, ResendFn Resend,
                  bool Message = false);
  /// The archive bytes to ship \p F to the peer of \p S: the one member
  /// it runs when it said Hello, else every target member.
  llvm::StringRef shippedBytes(const Ifunc &F, const Conn &S);
  void sendError(ConnId C, const Frame &About, WireStatus S,
                 llvm::StringRef Msg);
  void event(const llvm::Twine &Msg);

  /// The fence or region read \p Seq of \p S was answered: the messages
  /// sent before it are acknowledged.
  void acknowledge(Conn &S, uint32_t Seq);
  /// send() once the message is counted: \p S is conn(C).
  void sendMessage(ConnId C, Conn &S, const Message &M,
                   llvm::unique_function<void(llvm::Error)> Done);
  /// sendLocal() once the message is counted.
  void sendLocalMessage(ConnId C, Conn &S, uint32_t Id,
                        llvm::StringRef Payload,
                        llvm::unique_function<void(llvm::Error)> Done);
  /// fence() and readRegion() covering the first \p Covers messages sent
  /// on \p C (the count when the application asked: a held one is sent
  /// later, after messages held behind it were counted).
  void sendFence(ConnId C, uint64_t Covers,
                 llvm::unique_function<void(llvm::Error)> Done);
  void sendRead(ConnId C, uint64_t Covers, uint64_t Length,
                llvm::unique_function<void(llvm::Expected<std::string>)> Done);

  /// Handles one frame; returns false if it must wait for code (queued).
  bool handle(ConnId C, Conn &S, const Frame &F);
  /// Runs \p I if its code is here (Invoke) or registered (LocalInvoke);
  /// false otherwise, having done nothing.
  LLVM_ATTRIBUTE_ALWAYS_INLINE bool runSmall(ConnId C, Conn &S,
                                             const SmallInvoke &I,
                                             llvm::StringRef Payload);
  /// Takes the lanes the transport has for connections that have none
  /// (Transport::lane()); progress() calls it when laneGeneration() moved.
  LLVM_ATTRIBUTE_NOINLINE void adoptLanes();
  /// The transport's laneGeneration() when adoptLanes() last ran.
  uint64_t LaneGen = 0;
  /// Writes the compact frame of \p I straight into \p S's mailbox lane
  /// (Transport::lane()), without a completion; false, having sent
  /// nothing, where there is no open lane or it does not take the frame.
  LLVM_ATTRIBUTE_ALWAYS_INLINE bool laneSend(ConnId C, Conn &S,
                                             const SmallInvoke &I,
                                             llvm::StringRef Payload);
  /// Sends an Invoke without code or a LocalInvoke: compact when the peer
  /// reads compact frames, else with the full 24-byte header.
  /// A payload \p Owner keeps (a message's) is passed by reference where
  /// the transport would keep a copy (Transport::sendShared()).
  LLVM_ATTRIBUTE_ALWAYS_INLINE void
  sendSmall(ConnId C, Conn &S, const SmallInvoke &I,
            llvm::StringRef Payload,
            llvm::unique_function<void(llvm::Error)> &&Done,
            const std::shared_ptr<std::string> *Owner = nullptr);
  /// sendSmall() past the lane: the frame goes to the transport.
  LLVM_ATTRIBUTE_ALWAYS_INLINE void
  sendByTransport(ConnId C, Conn &S, const SmallInvoke &I,
                  llvm::StringRef Payload,
                  llvm::unique_function<void(llvm::Error)> &&Done,
                  const std::shared_ptr<std::string> *Owner);
  /// Encodes the frame of \p I with \p Payload behind its header into one
  /// buffer with Transport::FrameRoom in front, and hands it to
  /// Transport::trySendFrameNow() (else sendWithRoom()). No completion.
  LLVM_ATTRIBUTE_ALWAYS_INLINE void sendLaidOut(ConnId C, Conn &S,
                                                const SmallInvoke &I,
                                                llvm::StringRef Payload);
  /// Payloads sendByTransport() lays out with their header (sendLaidOut()).
  static constexpr size_t FrameNowPayloadMax =
      Transport::FrameNowMax - FrameHeaderSize;
  void drain(ConnId C);
  /// Verifies, admits and loads an archive on this thread; records the
  /// code id (CompileOnProgressThread).
  llvm::Expected<const LoadedIfunc *> admitCode(ConnId C, const Frame &F,
                                                WireStatus &Why);
  /// Parses, checks (\p Claimed hash if given, allow-list) and loads.
  llvm::Expected<const LoadedIfunc *>
  loadArchive(llvm::StringRef Bytes, const ArchiveHash *Claimed,
              WireStatus &Why);
  /// loadArchive's work that touches no Runtime state (it reads only
  /// options fixed at construction and the thread-safe JitEngine): the
  /// helper thread runs it.
  LoadOutcome loadCode(llvm::StringRef Bytes,
                       const ArchiveHash *Claimed) const;
  /// loadArchive's bookkeeping on the progress thread: events, counters,
  /// the LRU and its bound. \p Claimed: the code came in a frame.
  llvm::Expected<const LoadedIfunc *> finishLoad(LoadOutcome &O,
                                                 llvm::StringRef Bytes,
                                                 bool Claimed,
                                                 WireStatus &Why);
  /// Makes frame \p W wait for the off-thread compile of \p Hash: joins
  /// the compile running for it, or starts one with W's archive.
  void compileFor(const ArchiveHash &Hash, CompileWaiter W);
  /// Takes the results of finished compiles and runs what waited; \p Busy:
  /// the transport had work. Returns whether anything happened.
  bool finishCompiles(bool Busy);
  void compiled(const ArchiveHash &Hash, LoadOutcome &O);
  /// Drops (reporting each) the queued Invokes of \p CodeId on \p C:
  /// their code failed to load.
  void failCode(ConnId C, uint32_t CodeId, WireStatus Why,
                llvm::StringRef Msg);
  /// Records code id \p Id on \p S as naming loaded code \p L.
  KnownCode &know(Conn &S, uint32_t Id, const LoadedIfunc &L);
  /// The target_args for \p Name, through \p Slot.
  void *targetArgs(llvm::StringRef Name, ArgsSlot &Slot) {
    if (LLVM_LIKELY(Slot.Generation == ArgsGeneration))
      return Slot.Args;
    return lookUpTargetArgs(Name, Slot);
  }
  void *lookUpTargetArgs(llvm::StringRef Name, ArgsSlot &Slot);
  /// onFrame() for every frame but a runnable SmallInvoke; \p CompactSeq
  /// is the sequence number a compact frame took (0 for a full frame).
  LLVM_ATTRIBUTE_NOINLINE void onOtherFrame(ConnId C, llvm::StringRef Header,
                                            llvm::StringRef Body,
                                            uint32_t CompactSeq);
  /// Runs one message: \p L's NAME_main (sandboxed if it was loaded so)
  /// or, with \p L null, the local function \p LocalName. \p About names
  /// the message in an Error frame if sandboxed code traps.
  LLVM_ATTRIBUTE_ALWAYS_INLINE void
  callMain(ConnId C, const SmallInvoke &About, const LoadedIfunc *L,
           const char *LocalName, IfuncMainFn Main, void *Args,
           llvm::StringRef Payload);
  /// callMain() for sandboxed code: runs it under runSandboxed() and
  /// reports a trap.
  LLVM_ATTRIBUTE_NOINLINE void callSandboxed(ConnId C,
                                             const SmallInvoke &About,
                                             const LoadedIfunc &L, void *Args,
                                             void *Payload, size_t Size);
  /// The aligned buffer for a payload of \p Size bytes at this nesting
  /// depth (over 128 bytes; smaller ones go on the stack).
  LLVM_ATTRIBUTE_NOINLINE void *scratch(size_t Size);
  LLVM_ATTRIBUTE_NOINLINE void reportTrap(ConnId C, const SmallInvoke &About,
                                          const LoadedIfunc &L,
                                          const SandboxTrap &Trap);
  /// Moves \p H to the front of LRU.
  void touch(const ArchiveHash &H);
  /// touch(L.Hash), remembering \p L: the same code again costs a compare.
  void touch(const LoadedIfunc &L);

  std::unique_ptr<Transport> T;
  RuntimeOptions Opts;
  std::shared_ptr<JitEngine> Jit;
  Capabilities Self;
  /// Thin copies shipped to peers, by identity, the member chosen, the
  /// peer's dictionaries and the archive format written.
  std::map<std::tuple<ArchiveHash, MemberDigest, std::vector<std::string>,
                      unsigned>,
           std::string>
      ShippedFor;
  std::map<std::string, std::shared_ptr<const Ifunc>> Registered;
  std::map<ArchiveHash, std::weak_ptr<SourceCode>> SourceCodes;
  std::unordered_map<ConnId, Conn> Conns; ///< Nodes: references stay valid.
  ConnId LastConnId = 0;
  Conn *LastConn = nullptr; ///< conn()'s memo; reset when Conns shrinks.
  std::map<ArchiveHash, std::string> TargetArchives; ///< loaded identities
  std::list<ArchiveHash> LRU; ///< front: most recently used
  /// The loaded code at LRU's front when touch(const LoadedIfunc &) last
  /// put it there; null once anything else touched LRU.
  const LoadedIfunc *LruFront = nullptr;
  std::map<std::string, void *, std::less<>> NamedTargetArgs;
  uint64_t ArgsGeneration = 1; ///< Bumped by every setTargetArgs.
  llvm::DenseMap<uint32_t, LocalFn> Locals; ///< by localFunctionId
  /// Aligned copies of payloads over 128 bytes (smaller ones go on the
  /// stack) for NAME_main; one per nesting level (an ifunc that re-enters
  /// progress() runs the next one a level deeper).
  std::vector<std::vector<std::max_align_t>> Scratch;
  /// The body of the frame being delivered by onBufferedFrame(), which a
  /// payload inside it may be run on in place (once), else empty.
  llvm::MutableArrayRef<char> Lent;
  /// Whether \p Payload lies in Lent, aligned for the function.
  bool inLent(llvm::StringRef Payload) const;
  unsigned Depth = 0;
  RuntimeCounters Counters;
  ConnId Current = 0;
  std::string BodyBuf; ///< Reused by send() for payload + archive.
  llvm::unique_function<void(const RemoteError &)> RemoteErrorCB;
  llvm::unique_function<void(ConnId)> AcceptCB;
  llvm::unique_function<void(ConnId, llvm::StringRef, const Delivery &)>
      DisconnectCB;
  llvm::unique_function<void(llvm::StringRef)> EventCB;

  // Off-thread compiles. Compiling and CompilesInFlight belong to the
  // progress thread; Finished is filled by whichever thread compiled.
  std::map<ArchiveHash, CompileJob> Compiling;
  unsigned CompilesInFlight = 0; ///< Jobs started, results not taken yet.
  /// The helper thread runs on the progress thread's only CPU: an idle
  /// progress() sleeps while a compile is in flight (finishCompiles), and
  /// the helper runs under SCHED_IDLE.
  bool NapWhileCompiling = false;
  std::mutex FinishedMutex;
  std::vector<std::pair<ArchiveHash, LoadOutcome>> Finished;
  std::unique_ptr<CompileThread> Compiler; ///< The default executor.
  /// Starts Compiler (and decides NapWhileCompiling) if it is not running.
  void startCompiler();

  // A device (RuntimeOptions::Device). Its operations carry a tag naming
  // the frame they answer.
  struct DeviceOp {
    ConnId Conn = 0;
    FrameType Type = FrameType::Invoke; ///< Invoke, Fence or RegionRead.
    uint32_t Seq = 0, CodeId = 0;
    /// An Invoke the device refused to launch: the error, sent in its turn
    /// (a fence after the connection's earlier launches), not before them.
    std::string Refused;
  };
  /// Opts.Device, or null: progress() asks the pointer, not the option.
  DeviceTarget *Device = nullptr;
  std::unordered_map<uint64_t, DeviceOp> DeviceOps; ///< By tag.
  uint64_t NextDeviceTag = 1;
  /// Code loaded for \p H, by the JIT or the device.
  const LoadedIfunc *findLoaded(const ArchiveHash &H) const;
  /// Hands message \p About of \p L (device code) to the device.
  LLVM_ATTRIBUTE_NOINLINE void launchOnDevice(ConnId C,
                                              const SmallInvoke &About,
                                              const LoadedIfunc &L,
                                              llvm::StringRef Payload);
  /// A fence or region read of \p F, answered when the device has done
  /// the connection's earlier work.
  void queueOnDevice(ConnId C, const Frame &F);
  /// Takes what the device finished and answers it.
  LLVM_ATTRIBUTE_NOINLINE bool pollDevice();
  void deviceDone(DeviceDone &D);
  /// The status for a device fault to \p C's peer (statusForPeer).
  WireStatus deviceFaultStatus(ConnId C) const;
  /// Runs JitEngine::prewarm on Compiler and waits for it.
  llvm::Error prewarmOnCompiler(LoadMode Mode);
};

} // namespace tc

#endif // TC_RUNTIME_RUNTIME_H
