//===- tc-send.cpp - Inject an ifunc into a tc target ---------------------===//
//
// Registers ARCHIVE, sends N messages of it to a target, waits until the
// target has processed all of them (a fence, or the region read), and with
// --read-back prints the first bytes of the target's region as lowercase
// hex. Exits 1 with the target's message if it rejected any of them.
//
//===----------------------------------------------------------------------===//

#include "bootstrap/Bootstrap.h"
#include "protocol/Runtime.h"
#include "ToolSupport.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <atomic>
#include <chrono>

using namespace llvm;
using namespace tc;

static const char *const Usage =
    R"(USAGE: tc-send (--to HOST:PORT | --to-rank R,...) (ARCHIVE... | --local NAME)
               [options]

With several archives, messages go round-robin over them.

OPTIONS:
  --to HOST:PORT       The target (a tc-serve, or any libtc worker)
  --to-rank R,...      Under mpirun / srun --mpi=pmix: the targets are these
                       ranks of the job (tc-serve --pmix); with several,
                       read-back lines read 'rank R: HEX'. At the end all
                       ranks meet in a barrier, which ends the servers
  --payload-hex HEX    Source args for NAME_payload_init, as hex
  --payload-file F     Source args read from a file
  --count N            Messages per archive (1; 0 with --read-back: only read)
  --read-back BYTES    Then print the target region's first BYTES as hex
  --timeout MS         Give up after MS milliseconds (30000)
  --local NAME         Instead of an archive, run the function the target
                       registered as NAME (the active-message baseline;
                       the payload is the source args as given)
  --raw-frame FILE     Before the messages, send FILE's bytes as one frame
                       (its first 24 bytes as the header), for testing how
                       a target handles bad input
  --help, --version
)";

int main(int argc, char **argv) {
  const char *Tool = "tc-send";
  std::string To, PayloadHex, PayloadFile, Count = "1", ReadBack, Timeout =
                                                                      "30000",
                                                                  OptError;
  std::vector<std::string> ArchivePaths;
  std::string RawFrame, Local, ToRank;
  bool HaveHex = false;
  for (int I = 1; I < argc; ++I) {
    StringRef A = argv[I];
    if (std::optional<int> Exit = standardFlag(Tool, Usage, A))
      return *Exit;
    if (takeOption(argc, argv, I, "--payload-hex", PayloadHex, OptError)) {
      HaveHex = true;
    } else if (takeOption(argc, argv, I, "--to", To, OptError) ||
               takeOption(argc, argv, I, "--payload-file", PayloadFile,
                          OptError) ||
               takeOption(argc, argv, I, "--count", Count, OptError) ||
               takeOption(argc, argv, I, "--read-back", ReadBack, OptError) ||
               takeOption(argc, argv, I, "--timeout", Timeout, OptError) ||
               takeOption(argc, argv, I, "--raw-frame", RawFrame, OptError) ||
               takeOption(argc, argv, I, "--local", Local, OptError) ||
               takeOption(argc, argv, I, "--to-rank", ToRank, OptError)) {
    } else if (!OptError.empty()) {
      return toolError(Tool, OptError);
    } else if (A.starts_with("-")) {
      return toolError(Tool, "unknown option '" + A + "' (try --help)");
    } else {
      ArchivePaths.push_back(A.str());
    }
  }
  if (To.empty() && ToRank.empty())
    return toolError(Tool, "missing --to HOST:PORT (or --to-rank R)");
  if (!To.empty() && !ToRank.empty())
    return toolError(Tool, "give --to or --to-rank, not both");
  std::vector<uint32_t> Ranks;
  if (!ToRank.empty()) {
    SmallVector<StringRef, 4> Parts;
    StringRef(ToRank).split(Parts, ',', -1, true);
    for (StringRef P : Parts) {
      uint32_t Rk;
      if (P.getAsInteger(10, Rk))
        return toolError(Tool, "bad --to-rank '" + ToRank + "'");
      Ranks.push_back(Rk);
    }
  }
  if (ArchivePaths.empty() && Local.empty())
    return toolError(Tool, "missing ARCHIVE (or --local NAME)");
  if (!ArchivePaths.empty() && !Local.empty())
    return toolError(Tool, "give archives or --local, not both");
  if (HaveHex && !PayloadFile.empty())
    return toolError(Tool, "--payload-hex and --payload-file exclude each "
                           "other");
  std::pair<std::string, uint16_t> HostPort;
  if (!To.empty()) {
    auto P = parseHostPort(To);
    if (!P)
      return toolError(Tool, toString(P.takeError()));
    HostPort = *P;
  }
  uint64_t N, ReadBytes = 0;
  int64_t TimeoutMs;
  if (!ReadBack.empty() && StringRef(ReadBack).getAsInteger(10, ReadBytes))
    return toolError(Tool, "bad --read-back '" + ReadBack + "'");
  // --count 0 only makes sense as a pure read of the region.
  if (StringRef(Count).getAsInteger(10, N) || (N == 0 && !ReadBytes))
    return toolError(Tool, "bad --count '" + Count + "'");
  if (StringRef(Timeout).getAsInteger(10, TimeoutMs) || TimeoutMs <= 0)
    return toolError(Tool, "bad --timeout '" + Timeout + "'");

  std::string Args;
  if (HaveHex && !tryGetFromHex(PayloadHex, Args))
    return toolError(Tool, "--payload-hex '" + PayloadHex + "' is not hex");
  if (!PayloadFile.empty()) {
    auto B = MemoryBuffer::getFile(PayloadFile);
    if (!B)
      return toolError(Tool, "'" + PayloadFile + "': " +
                                 B.getError().message());
    Args = (*B)->getBuffer().str();
  }
  auto T = createUcxTransport();
  if (!T)
    return toolError(Tool, toString(T.takeError()));
  auto RT = Runtime::create(std::move(*T));
  if (!RT)
    return toolError(Tool, toString(RT.takeError()));
  Runtime &R = **RT;
  std::vector<Message> Messages;
  for (const std::string &Path : ArchivePaths) {
    auto Bytes = MemoryBuffer::getFile(Path);
    if (!Bytes)
      return toolError(Tool, "'" + Path + "': " + Bytes.getError().message());
    auto F = R.registerArchive((*Bytes)->getBuffer());
    if (!F)
      return toolError(Tool, "'" + Path + "': " + toString(F.takeError()));
    // --count 0: only a read; no message is made, so the ifunc's
    // payload_init is not asked for a payload it would refuse.
    if (N == 0)
      continue;
    auto M = R.createMessage(*F, Args.data(), Args.size());
    if (!M)
      return toolError(Tool, toString(M.takeError()));
    Messages.push_back(std::move(*M));
  }
  std::string Raw;
  if (!RawFrame.empty()) {
    auto B = MemoryBuffer::getFile(RawFrame);
    if (!B)
      return toolError(Tool, "'" + RawFrame + "': " + B.getError().message());
    Raw = (*B)->getBuffer().str();
  }
  // The targets: one HOST:PORT, or ranks wired up through PMIx.
  std::vector<ConnId> Conns;
  std::vector<std::string> Names; ///< For messages: "rank R" or empty.
  std::unique_ptr<Bootstrap> Boot;
  if (Ranks.empty()) {
    auto Conn = R.connect(HostPort.first, HostPort.second);
    if (!Conn)
      return toolError(Tool, toString(Conn.takeError()));
    Conns.push_back(*Conn);
    Names.push_back("");
  } else {
    // --- PMIx bootstrap (issue #20)
    auto B = joinJob(R.transport().address());
    if (!B)
      return toolError(Tool, "--to-rank: " + toString(B.takeError()));
    Boot = std::move(*B);
    for (uint32_t Rk : Ranks) {
      if (Rk == Boot->rank())
        return toolError(Tool, "--to-rank " + Twine(Rk) + " is tc-send "
                               "itself");
      auto Peer = Boot->get(Rk, BootstrapAddressKey);
      if (!Peer)
        return toolError(Tool, "--to-rank " + Twine(Rk) + ": " +
                                   toString(Peer.takeError()));
      auto Conn = R.connectAddress(*Peer);
      if (!Conn)
        return toolError(Tool, "rank " + Twine(Rk) + ": " +
                                   toString(Conn.takeError()));
      Conns.push_back(*Conn);
      Names.push_back("rank " + std::to_string(Rk));
    }
    // --- end PMIx bootstrap
  }
  auto NameOf = [&](ConnId C) -> std::string {
    for (size_t I = 0; I < Conns.size(); ++I)
      if (Conns[I] == C)
        return Names[I];
    return "";
  };

  std::vector<RemoteError> Rejected;
  R.onRemoteError([&](const RemoteError &E) { Rejected.push_back(E); });
  std::string Failure;
  bool Closed = false;
  R.onDisconnect([&](ConnId C, StringRef Why) {
    std::string Name = NameOf(C);
    if (std::find(Conns.begin(), Conns.end(), C) != Conns.end()) {
      Closed = true;
      // "connection to HOST:PORT lost: STATUS", with the rank if any.
      Failure = Name.empty() ? Why.str() : Name + ": " + Why.str();
    }
  });

  for (ConnId Conn : Conns) {
    if (!RawFrame.empty()) {
      StringRef Bytes = Raw;
      R.transport().send(Conn, Bytes.take_front(24), Bytes.drop_front(24),
                         [&](llvm::Error E) { consumeError(std::move(E)); });
    }
  }
  auto Completed = [&](llvm::Error E) {
    if (E && Failure.empty())
      Failure = toString(std::move(E));
    else
      consumeError(std::move(E));
  };
  size_t Done = 0;
  std::vector<std::string> Regions(Conns.size());
  for (size_t K = 0; K < Conns.size(); ++K) {
    ConnId Conn = Conns[K];
    // Progress between sends, so that a long stream leaves as it is made
    // instead of queueing whole in memory first (a connection's frames wait
    // in this process until the target has welcomed it).
    if (!Local.empty())
      for (uint64_t I = 0; I < N && !Closed; ++I) {
        R.sendLocal(Conn, Local, Args, Completed);
        if ((I & 63) == 63)
          R.progress();
      }
    for (uint64_t I = 0; I < N * Messages.size() && !Closed; ++I) {
      R.send(Conn, Messages[I % Messages.size()], Completed);
      if ((I & 63) == 63)
        R.progress();
    }

    if (ReadBytes) {
      R.readRegion(Conn, ReadBytes, [&, K](Expected<std::string> D) {
        ++Done;
        if (!D)
          Failure = toString(D.takeError());
        else
          Regions[K] = std::move(*D);
      });
    } else {
      R.fence(Conn, [&](llvm::Error E) {
        ++Done;
        if (E)
          Failure = toString(std::move(E));
      });
    }
  }

  auto Deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(TimeoutMs);
  while (Done < Conns.size() && !Closed) {
    if (R.progress())
      continue;
    auto Left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    Deadline - std::chrono::steady_clock::now())
                    .count();
    if (Left <= 0)
      return toolError(Tool, "timed out after " + Timeout + " ms waiting for " +
                                 (To.empty() ? "ranks " + ToRank : To));
    if (llvm::Error E = R.wait(int(std::min<int64_t>(Left, 1000))))
      return toolError(Tool, toString(std::move(E)));
  }
  for (const RemoteError &E : Rejected)
    toolError(Tool, "target rejected message " + Twine(E.Seq) + " (" +
                        wireStatusName(E.Status) + "): " + E.Message);
  if (!Failure.empty())
    return toolError(Tool, Failure);
  if (!Rejected.empty())
    return 1;
  for (size_t K = 0; ReadBytes && K < Conns.size(); ++K)
    outs() << (Conns.size() > 1 ? Names[K] + ": " : std::string())
           << toHex(Regions[K], /*LowerCase=*/true) << "\n";
  outs().flush();
  if (Boot) {
    // The job's closing barrier: every tc-serve --pmix exits after it.
    std::atomic<int> Met{0};
    if (Error E = Boot->barrierAsync([&, T = &R.transport()](bool Ok) {
          Met = Ok ? 1 : 2;
          T->signal();
        }))
      return toolError(Tool, toString(std::move(E)));
    while (!Met) {
      if (std::chrono::steady_clock::now() >= Deadline)
        return toolError(Tool, "timed out in the closing barrier");
      if (!R.progress())
        if (llvm::Error E = R.wait(100))
          return toolError(Tool, toString(std::move(E)));
    }
    if (Met == 2)
      return toolError(Tool, "the closing barrier failed (a rank died?)");
  }
  return 0;
}
