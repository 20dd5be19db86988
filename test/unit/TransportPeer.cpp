//===- TransportPeer.cpp - Echo server for multi-process transport tests --===//
//
// tc-transport-peer TLS [NET_DEVICES] [--address]: listens with a UCX
// transport on 127.0.0.1, any port, prints "listening on 127.0.0.1:PORT" and
// echoes every frame back on the connection it came from until a frame with
// header "quit" arrives. With --address it prints "address HEX" (its worker
// address) instead, for a peer that connects by address, and echoes with
// trySendNow() first, so echoes go by mailbox where the transport has one.
// A frame with header "die" is echoed and the process exits at once,
// before the echo's data can leave. One with header "nap" is echoed after
// half a second without progress (a receiver that falls behind).
// A frame with header "stats" is answered with the transport's SendWaits
// and SendWaitsGivenUp: body "WAITS GIVEN_UP". TC_TRANSPORT_PEER_MAX_COPIED=N
// in the environment sets the transport's MaxCopiedBacklog to N bytes.
// TransportTest starts it. It also exits when its parent goes away or after
// a minute, so a failed test never leaves it behind.
//
//===----------------------------------------------------------------------===//

#include "transport/Transport.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <string>
#include <thread>
#include <unistd.h>

using namespace tc;

namespace {

struct Echo final : TransportHandler {
  Transport *T = nullptr;
  bool Quit = false;
  bool Now = false; ///< Echo with trySendNow() first.
  /// Bodies being echoed: a body must live until its send completes.
  std::list<std::string> Bodies;

  void onFrame(ConnId C, llvm::StringRef Header,
               llvm::StringRef Body) override {
    if (Header == "quit") {
      Quit = true;
      return;
    }
    if (Header == "die") {
      // The echo's rendezvous request leaves; its data never will: the
      // peer dies in the middle of a large frame.
      T->send(C, Header, Body, nullptr);
      _exit(3);
    }
    std::string Stats; // The answer to "stats", sent as an echo is.
    if (Header == "stats") {
      Stats = std::to_string(T->stats().SendWaits) + " " +
              std::to_string(T->stats().SendWaitsGivenUp);
      Body = Stats;
    }
    if (Header == "nap")
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    if (Now && T->trySendNow(C, Header, Body))
      return;
    auto It = Bodies.insert(Bodies.end(), Body.str());
    T->send(C, Header, *It, [this, It](llvm::Error E) {
      if (E)
        llvm::errs() << "tc-transport-peer: " << llvm::toString(std::move(E))
                     << "\n";
      Bodies.erase(It);
    });
  }
  void onDisconnect(ConnId, llvm::StringRef) override {}
};

} // namespace

int main(int Argc, char **Argv) {
  bool ByAddress = Argc > 2 && llvm::StringRef(Argv[Argc - 1]) == "--address";
  if (ByAddress)
    --Argc;
  if (Argc < 2) {
    llvm::errs() << "usage: tc-transport-peer TLS [NET_DEVICES] [--address]\n";
    return 2;
  }
  if (Argc > 2)
    setenv("UCX_NET_DEVICES", Argv[2], 1);
  pid_t Parent = getppid();
  UcxTransportOptions Opts;
  Opts.Transports = Argv[1];
  if (const char *Max = getenv("TC_TRANSPORT_PEER_MAX_COPIED")) {
    if (llvm::StringRef(Max).getAsInteger(10, Opts.MaxCopiedBacklog) ||
        !Opts.MaxCopiedBacklog) {
      llvm::errs() << "tc-transport-peer: error: TC_TRANSPORT_PEER_MAX_COPIED '"
                   << Max << "' is not a positive number of bytes\n";
      return 2;
    }
  }
  auto T = createUcxTransport(Opts);
  if (!T) {
    llvm::errs() << "tc-transport-peer: " << llvm::toString(T.takeError())
                 << "\n";
    return 1;
  }
  Echo E;
  E.T = T->get();
  E.Now = ByAddress;
  (*T)->setHandler(&E);
  if (ByAddress) {
    auto Addr = (*T)->address();
    if (!Addr) {
      llvm::errs() << "tc-transport-peer: " << llvm::toString(Addr.takeError())
                   << "\n";
      return 1;
    }
    printf("address %s\n", llvm::toHex(*Addr, /*LowerCase=*/true).c_str());
  } else {
    auto Port = (*T)->listen("127.0.0.1", 0);
    if (!Port) {
      llvm::errs() << "tc-transport-peer: "
                   << llvm::toString(Port.takeError()) << "\n";
      return 1;
    }
    printf("listening on 127.0.0.1:%u\n", unsigned(*Port));
  }
  fflush(stdout);
  auto Deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (!E.Quit && getppid() == Parent &&
         std::chrono::steady_clock::now() < Deadline) {
    if ((*T)->progress())
      continue;
    if (llvm::Error Err = (*T)->wait(100)) {
      llvm::errs() << "tc-transport-peer: " << llvm::toString(std::move(Err))
                   << "\n";
      return 1;
    }
  }
  // Let the echoes go out before the transport closes.
  while (!E.Bodies.empty() && std::chrono::steady_clock::now() < Deadline)
    if (!(*T)->progress())
      consumeError((*T)->wait(10));
  return E.Quit ? 0 : 1;
}
