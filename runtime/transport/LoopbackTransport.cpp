//===- LoopbackTransport.cpp - Transports joined inside one process -------===//
//
// For unit tests of runtime logic: the same contract as the UCX transport
// (callbacks only from progress(), per-connection order, completions and
// disconnects reported later, never from inside the call that caused them)
// without sockets or UCX. A hub maps listener names to transports; each
// connection is a pair of ids, one per side, and a frame sent on one side is
// queued in the other side's inbox.
//
// Transports of one hub may run on different threads: everything one
// transport hands another (frames, accepts, disconnects) goes through the
// hub's mutex, and wait() sleeps on a condition variable until it arrives.
// Handler callbacks never run with the mutex held.
//
//===----------------------------------------------------------------------===//

#include "transport/Transport.h"

#include "llvm/Support/FormatVariadic.h"

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>

using namespace llvm;

namespace tc {

namespace {
class LoopbackTransport;
} // namespace

class LoopbackHub {
public:
  /// Guards the maps below and every transport's shared state.
  std::mutex Mutex;
  std::map<std::pair<std::string, uint16_t>, LoopbackTransport *> Listeners;
  std::map<uint64_t, LoopbackTransport *> ByAddress;
  uint64_t NextAddress = 1;
};

namespace {

class LoopbackTransport final : public Transport {
public:
  explicit LoopbackTransport(std::shared_ptr<LoopbackHub> Hub)
      : Hub(std::move(Hub)) {
    std::lock_guard<std::mutex> L(this->Hub->Mutex);
    Address = this->Hub->NextAddress++;
    this->Hub->ByAddress[Address] = this;
  }

  ~LoopbackTransport() override {
    {
      std::lock_guard<std::mutex> L(Hub->Mutex);
      for (auto It = Hub->Listeners.begin(); It != Hub->Listeners.end();)
        It = It->second == this ? Hub->Listeners.erase(It) : std::next(It);
      Hub->ByAddress.erase(Address);
      for (auto &KV : Conns)
        if (KV.second.Peer)
          KV.second.Peer->peerGone(KV.second.PeerId);
    }
    // Completions still pending are dropped unrun (Transport.h).
  }

  void setHandler(TransportHandler *H) override { Handler = H; }

  Expected<uint16_t> listen(StringRef Host, uint16_t Port) override {
    std::lock_guard<std::mutex> L(Hub->Mutex);
    if (Port == 0)
      for (Port = 1; Hub->Listeners.count({Host.str(), Port}); ++Port)
        ;
    auto [It, New] = Hub->Listeners.try_emplace({Host.str(), Port}, this);
    if (!New)
      return createStringError(
          formatv("loopback: {0}:{1} is already listened on", Host, Port)
              .str());
    return Port;
  }

  Expected<ConnId> connect(StringRef Host, uint16_t Port) override {
    std::lock_guard<std::mutex> L(Hub->Mutex);
    auto It = Hub->Listeners.find({Host.str(), Port});
    if (It == Hub->Listeners.end())
      return createStringError(
          formatv("loopback: nothing listens on {0}:{1}", Host, Port).str());
    return join(It->second);
  }

  Expected<std::string> address() override { return std::to_string(Address); }

  Expected<ConnId> connectAddress(StringRef A) override {
    uint64_t N;
    std::lock_guard<std::mutex> L(Hub->Mutex);
    if (!A.getAsInteger(10, N)) {
      auto It = Hub->ByAddress.find(N);
      if (It != Hub->ByAddress.end())
        return join(It->second);
    }
    return createStringError("loopback: unknown address '%s'",
                             A.str().c_str());
  }

  void send(ConnId C, StringRef Header, StringRef Body,
            unique_function<void(Error)> Done) override {
    {
      std::lock_guard<std::mutex> L(Hub->Mutex);
      auto It = Conns.find(C);
      if (It != Conns.end() && It->second.Peer) {
        LoopbackTransport *Peer = It->second.Peer;
        Peer->Inbox.push_back(
            {It->second.PeerId, Header.str() + Body.str(), Header.size()});
        Peer->Ready.notify_all();
        // Header and body were copied.
        if (Done)
          Completions.push_back({std::move(Done), ""});
        return;
      }
    }
    if (Done)
      Completions.push_back(
          {std::move(Done), formatv("loopback: connection {0} is closed", C)});
  }

  void disconnect(ConnId C) override {
    std::lock_guard<std::mutex> L(Hub->Mutex);
    auto It = Conns.find(C);
    if (It == Conns.end())
      return;
    if (It->second.Peer)
      It->second.Peer->peerGone(It->second.PeerId);
    Conns.erase(It);
  }

  bool progress() override {
    bool Did = false;
    // Take out what is due now: callbacks may queue more.
    std::deque<Completion> Done;
    Done.swap(Completions);
    std::deque<ConnId> Accepts, Gone;
    std::deque<Delivery> In;
    {
      std::lock_guard<std::mutex> L(Hub->Mutex);
      Accepts.swap(PendingAccepts);
      In.swap(Inbox);
      Gone.swap(PendingGone);
    }
    for (Completion &C : Done) {
      Did = true;
      if (C.Error.empty())
        C.Done(Error::success());
      else
        C.Done(connectionError(C.Error));
    }
    for (ConnId C : Accepts) {
      Did = true;
      if (isOpen(C))
        Handler->onAccept(C);
    }
    for (Delivery &D : In) {
      Did = true;
      if (!isOpen(D.Conn))
        continue; // Closed locally after it was queued.
      StringRef All = D.Bytes;
      Handler->onFrame(D.Conn, All.take_front(D.HeaderSize),
                       All.drop_front(D.HeaderSize));
    }
    for (ConnId C : Gone) {
      Did = true;
      {
        std::lock_guard<std::mutex> L(Hub->Mutex);
        if (!Conns.erase(C))
          continue; // Closed locally meanwhile: not ours to report.
      }
      Handler->onDisconnect(
          C, formatv("loopback connection {0} closed by the peer", C).str());
    }
    return Did;
  }

  Error wait(int TimeoutMs) override {
    if (!Completions.empty())
      return Error::success();
    std::unique_lock<std::mutex> L(Hub->Mutex);
    auto HasWork = [&] {
      return !Inbox.empty() || !PendingAccepts.empty() ||
             !PendingGone.empty() || Signaled;
    };
    if (TimeoutMs < 0)
      Ready.wait(L, HasWork);
    else
      Ready.wait_for(L, std::chrono::milliseconds(TimeoutMs), HasWork);
    Signaled = false;
    return Error::success();
  }

  void signal() override {
    std::lock_guard<std::mutex> L(Hub->Mutex);
    Signaled = true;
    Ready.notify_all();
  }

private:
  struct Conn {
    LoopbackTransport *Peer = nullptr; ///< Null once the peer is gone.
    ConnId PeerId = 0;
  };
  struct Delivery {
    ConnId Conn;
    std::string Bytes;
    size_t HeaderSize;
  };
  struct Completion {
    unique_function<void(Error)> Done;
    std::string Error; ///< Empty: success.
  };

  /// Joins us to \p Peer. Hub->Mutex is held.
  ConnId join(LoopbackTransport *Peer) {
    ConnId Mine = NextConn++;
    ConnId Theirs = Peer->NextConn++;
    Conns[Mine] = {Peer, Theirs};
    Peer->Conns[Theirs] = {this, Mine};
    Peer->PendingAccepts.push_back(Theirs);
    Peer->Ready.notify_all();
    return Mine;
  }

  /// The other side of \p C went away: report it from our next progress().
  /// Hub->Mutex is held.
  void peerGone(ConnId C) {
    auto It = Conns.find(C);
    if (It == Conns.end())
      return;
    It->second.Peer = nullptr;
    PendingGone.push_back(C);
    Ready.notify_all();
  }

  bool isOpen(ConnId C) {
    std::lock_guard<std::mutex> L(Hub->Mutex);
    return Conns.count(C);
  }

  std::shared_ptr<LoopbackHub> Hub;
  uint64_t Address = 0;
  TransportHandler *Handler = nullptr;
  /// Owner thread only.
  std::deque<Completion> Completions;
  /// Under Hub->Mutex: peers write these.
  std::map<ConnId, Conn> Conns;
  ConnId NextConn = 1;
  std::deque<Delivery> Inbox;
  std::deque<ConnId> PendingAccepts, PendingGone;
  bool Signaled = false;
  std::condition_variable Ready;
};

} // namespace

std::shared_ptr<LoopbackHub> createLoopbackHub() {
  return std::make_shared<LoopbackHub>();
}

std::unique_ptr<Transport>
createLoopbackTransport(std::shared_ptr<LoopbackHub> Hub) {
  return std::make_unique<LoopbackTransport>(std::move(Hub));
}

} // namespace tc
