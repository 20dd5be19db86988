//===- LoopbackTransport.cpp - Transports joined inside one process -------===//
//
// For unit tests of runtime logic: the same contract as the UCX transport
// (callbacks only from progress(), per-connection order, completions and
// disconnects reported later, never from inside the call that caused them)
// without sockets or UCX. A hub maps listener names to transports; each
// connection is a pair of ids, one per side, and a frame sent on one side is
// queued in the other side's inbox.
//
//===----------------------------------------------------------------------===//

#include "Transport.h"

#include "llvm/Support/FormatVariadic.h"

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
    }
    for (auto &KV : Conns)
      if (KV.second.Peer)
        KV.second.Peer->peerGone(KV.second.PeerId);
    for (auto &D : Completions)
      D.Done(createStringError("transport destroyed"));
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
    LoopbackTransport *Peer;
    {
      std::lock_guard<std::mutex> L(Hub->Mutex);
      auto It = Hub->Listeners.find({Host.str(), Port});
      if (It == Hub->Listeners.end())
        return createStringError(
            formatv("loopback: nothing listens on {0}:{1}", Host, Port).str());
      Peer = It->second;
    }
    return join(Peer);
  }

  Expected<std::string> address() override { return std::to_string(Address); }

  Expected<ConnId> connectAddress(StringRef A) override {
    uint64_t N;
    LoopbackTransport *Peer = nullptr;
    if (!A.getAsInteger(10, N)) {
      std::lock_guard<std::mutex> L(Hub->Mutex);
      auto It = Hub->ByAddress.find(N);
      if (It != Hub->ByAddress.end())
        Peer = It->second;
    }
    if (!Peer)
      return createStringError("loopback: unknown address '%s'",
                               A.str().c_str());
    return join(Peer);
  }

  void send(ConnId C, StringRef Header, StringRef Body,
            unique_function<void(Error)> Done) override {
    auto It = Conns.find(C);
    if (It == Conns.end() || !It->second.Peer) {
      Completions.push_back(
          {std::move(Done), formatv("loopback: connection {0} is closed", C)});
      return;
    }
    It->second.Peer->Inbox.push_back(
        {It->second.PeerId, Header.str() + Body.str(), Header.size()});
    Completions.push_back({std::move(Done), ""});
  }

  void disconnect(ConnId C) override {
    auto It = Conns.find(C);
    if (It == Conns.end())
      return;
    if (It->second.Peer)
      It->second.Peer->peerGone(It->second.PeerId);
    Conns.erase(It);
  }

  bool progress() override {
    bool Did = false;
    // Swap out what is due now: callbacks may queue more.
    std::deque<Completion> Done;
    Done.swap(Completions);
    for (Completion &C : Done) {
      Did = true;
      if (C.Error.empty())
        C.Done(Error::success());
      else
        C.Done(createStringError(C.Error));
    }
    std::deque<ConnId> Accepts;
    Accepts.swap(PendingAccepts);
    for (ConnId C : Accepts) {
      Did = true;
      Handler->onAccept(C);
    }
    std::deque<Delivery> In;
    In.swap(Inbox);
    for (Delivery &D : In) {
      Did = true;
      if (!Conns.count(D.Conn))
        continue; // Closed locally after it was queued.
      StringRef All = D.Bytes;
      Handler->onFrame(D.Conn, All.take_front(D.HeaderSize),
                       All.drop_front(D.HeaderSize));
    }
    std::deque<ConnId> Gone;
    Gone.swap(PendingGone);
    for (ConnId C : Gone) {
      Did = true;
      Conns.erase(C);
      Handler->onDisconnect(C, "peer closed the connection");
    }
    return Did;
  }

  Error wait(int) override {
    // Everything is in-process: there is never anything to block for.
    return Error::success();
  }

  void signal() override {}

private:
  struct Conn {
    LoopbackTransport *Peer = nullptr;
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

  Expected<ConnId> join(LoopbackTransport *Peer) {
    ConnId Mine = NextConn++;
    ConnId Theirs = Peer->NextConn++;
    Conns[Mine] = {Peer, Theirs};
    Peer->Conns[Theirs] = {this, Mine};
    Peer->PendingAccepts.push_back(Theirs);
    return Mine;
  }

  /// The other side of \p C went away: report it from our next progress().
  void peerGone(ConnId C) {
    auto It = Conns.find(C);
    if (It == Conns.end())
      return;
    It->second.Peer = nullptr;
    PendingGone.push_back(C);
  }

  std::shared_ptr<LoopbackHub> Hub;
  uint64_t Address = 0;
  TransportHandler *Handler = nullptr;
  std::map<ConnId, Conn> Conns;
  ConnId NextConn = 1;
  std::deque<Delivery> Inbox;
  std::deque<Completion> Completions;
  std::deque<ConnId> PendingAccepts, PendingGone;
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
