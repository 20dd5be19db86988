//===- Runtime.cpp - tc's protocol engine ---------------------------------===//
//
// The state machine of docs/wire-format.md. Sender side: code ids per
// connection, CodeRequest answers, fences. Target side: a per-connection
// FIFO that holds frames whose code is not here yet, so order is kept and
// nothing runs on code it does not have.
//
// This file: the engine's construction and teardown, its connections and
// the Hello exchange. The rest, one part a file: RuntimeSend.cpp (the
// source side: registering ifuncs, the send paths), RuntimeDispatch.cpp
// (the target side: frames received, dispatched and run), RuntimeCode.cpp
// (the code cache, loading, compiles off the progress thread).
//
//===----------------------------------------------------------------------===//

#include "protocol/Runtime.h"
#include "protocol/RuntimeImpl.h"

#include "tc/Version.h"

#include "llvm/Support/FormatVariadic.h"

using namespace llvm;

namespace tc {

Runtime::Runtime(std::unique_ptr<Transport> T, RuntimeOptions Opts,
                 std::shared_ptr<JitEngine> Jit)
    : T(std::move(T)), Opts(std::move(Opts)), Jit(std::move(Jit)) {
  this->T->setHandler(this);
  Self.TcVersion = TC_VERSION_STRING;
  Self.LlvmVersion = LLVM_VERSION_STRING;
  Self.Triple = this->Jit->triple();
  Self.CPU = this->Jit->cpu();
  Self.Features = this->Jit->features();
  Self.RunsBitcode = this->Opts.Mode != LoadMode::Object;
  Self.RunsObjects = this->Opts.Mode != LoadMode::Bitcode &&
                     this->Opts.Mode != LoadMode::Sandbox;
  Self.Dictionaries = this->Opts.Dictionaries ? *this->Opts.Dictionaries
                                              : dictionaryIds();
  if ((Device = this->Opts.Device.get()))
    Self.Gpu = GpuCapability{Device->triple(), Device->arch(),
                             Device->driverVersion()};
}

Expected<std::unique_ptr<Runtime>> Runtime::create(std::unique_ptr<Transport> T,
                                                   RuntimeOptions Opts) {
  // Compiles run on the helper thread: prewarm there, so that its stack
  // and malloc arena are in place too (JitEngine::prewarm).
  std::optional<LoadMode> OnHelper;
  JitOptions JO = Opts.Jit;
  if (JO.Prewarm && !Opts.CompileOnProgressThread && !Opts.CompileExecutor)
    std::swap(OnHelper, JO.Prewarm);
  Expected<std::unique_ptr<JitEngine>> J = JitEngine::create(JO);
  if (!J)
    return J.takeError();
  auto R = std::make_unique<Runtime>(std::move(T), std::move(Opts),
                                     std::move(*J));
  if (OnHelper)
    if (Error E = R->prewarmOnCompiler(*OnHelper))
      return std::move(E);
  return std::move(R);
}

Runtime::~Runtime() {
  // A compile under way finishes before its thread is joined; its result,
  // and every job not started, are dropped. The job signals the transport,
  // so the transport goes after it.
  Compiler.reset();
  // Tear the transport down first, while the buffers its sends use are
  // here. It calls nothing back (its completions are dropped unrun), and
  // neither does this object: the fences, reads and held sends of Conns
  // go with it unrun.
  T.reset();
}

void Runtime::event(const Twine &Msg) {
  if (EventCB)
    EventCB(Msg.str());
}

//===----------------------------------------------------------------------===//
// Connections and the Hello exchange
//===----------------------------------------------------------------------===//

Expected<ConnId> Runtime::connect(StringRef Host, uint16_t Port) {
  return started(T->connect(Host, Port), /*Hold=*/true);
}

Expected<ConnId> Runtime::connectAddress(StringRef Address) {
  // UCX matches the endpoints two workers create to each other's addresses
  // into one pair, so the peer's answer may arrive on a connection id other
  // than the one we asked on: do not wait for it here. Code shipped before
  // a Hello arrives on this connection carries every target member.
  return started(T->connectAddress(Address), /*Hold=*/false);
}

Expected<ConnId> Runtime::started(Expected<ConnId> C, bool Hold) {
  if (!C)
    return C.takeError();
  Conn &S = conn(*C);
  // A connection the peer opened first, which UCX matched ours into
  // (connectAddress()): Hellos are exchanged there already.
  if (S.HelloSent)
    return C;
  S.Blocked = S.AwaitingHello = Hold;
  sendHello(*C, S);
  return C;
}

const Capabilities *Runtime::peer(ConnId C) const {
  auto It = Conns.find(C);
  return It != Conns.end() && It->second.Peer ? &*It->second.Peer : nullptr;
}

void Runtime::sendHello(ConnId C, Conn &S) {
  S.HelloSent = true;
  std::string Body = encodeCapabilities(Self);
  Frame F;
  F.Type = FrameType::Hello;
  F.Data = Body;
  sendFrame(C, F, Body, nullptr);
}

void Runtime::releaseOutbox(ConnId C) {
  // Each held send runs as if it were made now: it takes its sequence
  // number and code id, and ships the member the peer runs.
  for (;;) {
    auto It = Conns.find(C);
    if (It == Conns.end() || It->second.Outbox.empty())
      return;
    Held Next = std::move(It->second.Outbox.front());
    It->second.Outbox.pop_front();
    if (It->second.Failure.empty()) {
      It->second.Unsent -= Next.Message; // It leaves now.
      Next.Run();
    } else {
      Next.Fail(createStringError(It->second.Failure));
    }
  }
}

void Runtime::onHello(ConnId C, const Frame &F) {
  Conn &S = conn(C);
  Expected<Capabilities> Caps = decodeCapabilities(F.Data);
  if (!Caps) {
    sendError(C, F, WireStatus::MalformedFrame, toString(Caps.takeError()));
    return;
  }
  bool Overlap = Caps->WireMin <= WireVersionMax &&
                 WireVersionMin <= Caps->WireMax;
  if (!Overlap) {
    std::string Msg =
        formatv("the peer speaks tc wire versions {0}-{1} (tc {2}), this "
                "process {3}-{4} (tc {5}): no version in common",
                unsigned(Caps->WireMin), unsigned(Caps->WireMax),
                Caps->TcVersion, unsigned(WireVersionMin),
                unsigned(WireVersionMax), TC_VERSION_STRING)
            .str();
    if (!S.HelloSent) // Tell the connecting side why nothing will run.
      sendError(C, F, WireStatus::UnsupportedVersion, Msg);
    else
      event(formatv("connection {0}: {1}", C, Msg));
    S.Failure = Msg;
    S.Blocked = true;
    S.AwaitingHello = false;
    releaseOutbox(C);
    return;
  }
  event(formatv("connection {0}: peer {1}", C, describeCapabilities(*Caps)));
  S.Compact = Caps->WireMax >= CompactWireVersion;
  S.Peer = std::move(*Caps);
  if (!S.HelloSent)
    sendHello(C, S);
  if (S.AwaitingHello) {
    S.Blocked = S.AwaitingHello = false;
    releaseOutbox(C);
  }
}

void Runtime::onAccept(ConnId C) {
  conn(C);
  event(formatv("connection {0} accepted", C));
  if (AcceptCB)
    AcceptCB(C);
}

void Runtime::onDisconnect(ConnId C, StringRef Why) {
  auto It = Conns.find(C);
  Delivery D;
  if (It != Conns.end()) {
    D = delivery(C);
    auto Fences = std::move(It->second.Fences);
    auto Reads = std::move(It->second.Reads);
    auto Outbox = std::move(It->second.Outbox);
    Conns.erase(It);
    LastConn = nullptr;
    // Its frames that wait for compiles are gone with it: a result is not
    // used for it (the compile itself finishes, for the other waiters and
    // the cache).
    for (auto &KV : Compiling)
      llvm::erase_if(KV.second.Waiters,
                     [C](const CompileWaiter &W) { return W.Conn == C; });
    for (Held &H : Outbox)
      H.Fail(connectionError(Why));
    for (auto &KV : Fences)
      if (KV.second)
        KV.second(connectionError(Why));
    for (auto &KV : Reads)
      KV.second(connectionError(Why));
  }
  if (Device) // Its work still finishes; nothing is sent for it.
    Device->closeConnection(C);
  event(formatv("connection {0} closed: {1}", C, Why));
  if (DisconnectCB)
    DisconnectCB(C, Why, D);
}

} // namespace tc
