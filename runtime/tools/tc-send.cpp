//===- tc-send.cpp - Inject an ifunc into a tc target ---------------------===//
//
// Registers ARCHIVE, sends N messages of it to a target, waits until the
// target has processed all of them (a fence, or the region read), and with
// --read-back prints the first bytes of the target's region as lowercase
// hex. Exits 1 with the target's message if it rejected any of them, and
// with one line per target that went away (unreachable, refused, silent for
// --timeout, closed, dead): why, and which messages the sender may take as
// run (docs/runtime.md, "When a target dies").
//
//===----------------------------------------------------------------------===//

#include "bootstrap/Bootstrap.h"
#include "protocol/Runtime.h"
#include "ToolSupport.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
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
  --timeout MS         Give up on a target that has answered nothing for
                       MS milliseconds (30000)
  --local NAME         Instead of an archive, run the function the target
                       registered as NAME (the active-message baseline;
                       the payload is the source args as given)
  --raw-frame FILE     Before the messages, send FILE's bytes as one frame
                       (its first 24 bytes as the header), for testing how
                       a target handles bad input
  --help, --version
)";

namespace {

/// One target of this run, and what became of it.
struct Destination {
  ConnId Conn = 0;
  std::string Name;   ///< HOST:PORT or "rank R", for messages.
  std::string Prefix; ///< What a failure's line starts with ("rank R: ").
  bool Done = false;  ///< The last fence or region read was answered.
  bool Lost = false;  ///< The connection went (onDisconnect).
  std::string Failure;
  Delivery Final; ///< At the loss, or when the target timed out.
  std::string Region;
};

Destination destination(ConnId C, std::string Name, std::string Prefix) {
  Destination D;
  D.Conn = C;
  D.Name = std::move(Name);
  D.Prefix = std::move(Prefix);
  return D;
}

/// At most this many messages, and about this many bytes of their
/// payloads, wait unacknowledged at once; a fence after every quarter of
/// that (4,096 messages at most) acknowledges a stream as it goes.
constexpr uint64_t WindowMax = uint64_t(1) << 18, WindowBytes = 256 << 20,
                   FenceEveryMax = 4096;

} // namespace

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
  // What the Runtime's callbacks write to lives before the Runtime, so it
  // outlives it (a Runtime calls nothing back when destroyed anyway).
  std::vector<Destination> Targets;
  std::vector<RemoteError> Rejected;
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
  // Messages meant for each target.
  const uint64_t Total = Local.empty() ? N * Messages.size() : N;
  uint64_t PayloadMax = Args.size();
  for (const Message &M : Messages)
    PayloadMax = std::max<uint64_t>(PayloadMax, M.Payload->size());
  const uint64_t Window = std::clamp<uint64_t>(
      WindowBytes / std::max<uint64_t>(PayloadMax, 1), 16, WindowMax);
  const uint64_t FenceEvery = std::min(FenceEveryMax, Window / 4);
  // How often the stream progresses and looks at the window.
  const uint64_t Pace = std::min<uint64_t>(64, FenceEvery);
  // The targets: one HOST:PORT, or ranks wired up through PMIx.
  std::unique_ptr<Bootstrap> Boot;
  if (Ranks.empty()) {
    auto Conn = R.connect(HostPort.first, HostPort.second);
    if (!Conn)
      return toolError(Tool, toString(Conn.takeError()));
    Targets.push_back(destination(*Conn, To, ""));
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
      std::string Name = "rank " + std::to_string(Rk);
      Targets.push_back(destination(*Conn, Name, Name + ": "));
    }
    // --- end PMIx bootstrap
  }
  auto TargetOf = [&](ConnId C) -> Destination * {
    for (Destination &Tg : Targets)
      if (Tg.Conn == C)
        return &Tg;
    return nullptr;
  };

  R.onRemoteError([&](const RemoteError &E) { Rejected.push_back(E); });
  R.onDisconnect([&](ConnId C, StringRef Why, const Delivery &D) {
    // A target that answered everything may close when it likes.
    if (Destination *Tg = TargetOf(C); Tg && !Tg->Done) {
      // "connection to HOST:PORT lost: STATUS" (or "closed by the peer").
      Tg->Lost = true;
      Tg->Final = D;
      Tg->Failure = Why.str();
    }
  });

  for (Destination &Tg : Targets) {
    if (!RawFrame.empty()) {
      StringRef Bytes = Raw;
      R.transport().send(Tg.Conn, Bytes.take_front(24), Bytes.drop_front(24),
                         [](llvm::Error E) { consumeError(std::move(E)); });
    }
  }
  // --timeout: the targets must answer (acknowledge messages, or the last
  // fence or read) within this long of their last answer.
  auto Now = [] { return std::chrono::steady_clock::now(); };
  auto Limit = std::chrono::milliseconds(TimeoutMs);
  auto Deadline = Now() + Limit;
  uint64_t Answers = 0; ///< What the targets have answered so far.
  auto Answered = [&] {
    uint64_t A = 0;
    for (const Destination &Tg : Targets)
      A += (Tg.Lost ? Tg.Final.Acknowledged
                    : R.delivery(Tg.Conn).Acknowledged) +
           Tg.Done;
    return A;
  };
  // One round of progress, blocking for a while when there is nothing to
  // do; false once the targets have been silent for --timeout.
  auto Pump = [&]() -> bool {
    if (!R.progress()) {
      auto Left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      Deadline - Now())
                      .count();
      if (Left > 0)
        if (llvm::Error E = R.wait(int(std::min<int64_t>(Left, 1000))))
          return toolError(Tool, toString(std::move(E))), false;
    }
    if (uint64_t A = Answered(); A != Answers) {
      Answers = A;
      Deadline = Now() + Limit;
    }
    return Now() < Deadline;
  };
  bool TimedOut = false;
  for (Destination &Tg : Targets) {
    auto Completed = [Tg = &Tg](llvm::Error E) {
      if (E && Tg->Failure.empty())
        Tg->Failure = toString(std::move(E));
      else
        consumeError(std::move(E));
    };
    // Progress between sends, so that a long stream leaves as it is made
    // instead of queueing whole in memory first (a connection's frames wait
    // in this process until the target has welcomed it). A fence every
    // FenceEvery messages acknowledges them as the stream goes, and no
    // more than Window of them wait unacknowledged: a target that stops
    // taking them (SIGSTOP) holds the stream there, not the memory of a
    // queue without bound.
    for (uint64_t I = 0; I < Total && !Tg.Lost && !TimedOut; ++I) {
      if (!Local.empty())
        R.sendLocal(Tg.Conn, Local, Args, Completed);
      else
        R.send(Tg.Conn, Messages[I % Messages.size()], Completed);
      if ((I + 1) % FenceEvery == 0 && I + 1 < Total)
        R.fence(Tg.Conn, [](llvm::Error E) { consumeError(std::move(E)); });
      if ((I + 1) % Pace != 0)
        continue;
      R.progress();
      while (!Tg.Lost && !TimedOut &&
             I + 1 - R.delivery(Tg.Conn).Acknowledged > Window)
        TimedOut = !Pump();
      if (Now() >= Deadline && !Pump())
        TimedOut = true;
    }
    if (Tg.Lost || TimedOut)
      continue;
    // The last answer covers every message: the region read's, else a
    // fence's.
    if (ReadBytes) {
      R.readRegion(Tg.Conn, ReadBytes, [Tg = &Tg](Expected<std::string> D) {
        Tg->Done = true;
        if (!D) {
          if (Tg->Failure.empty())
            Tg->Failure = toString(D.takeError());
          else
            consumeError(D.takeError());
        } else {
          Tg->Region = std::move(*D);
        }
      });
    } else {
      R.fence(Tg.Conn, [Tg = &Tg](llvm::Error E) {
        Tg->Done = true;
        if (E && Tg->Failure.empty())
          Tg->Failure = toString(std::move(E));
        else
          consumeError(std::move(E));
      });
    }
  }
  auto Waiting = [&] {
    for (const Destination &Tg : Targets)
      if (!Tg.Done && !Tg.Lost)
        return true;
    return false;
  };
  while (!TimedOut && Waiting())
    TimedOut = !Pump();
  for (Destination &Tg : Targets) {
    if (Tg.Done || Tg.Lost)
      continue;
    // The target stopped answering (stopped, hung, or its host is gone):
    // its connection is dropped here, not flushed to it first.
    Tg.Failure = "timed out after " + Timeout + " ms waiting for " + Tg.Name;
    Tg.Final = R.delivery(Tg.Conn);
    R.transport().abandon(Tg.Conn);
  }
  for (const RemoteError &E : Rejected)
    toolError(Tool, "target rejected message " + Twine(E.Seq) + " (" +
                        wireStatusName(E.Status) + "): " + E.Message);
  // One line per target that failed: why, and what the sender may take
  // as done. Messages on a connection are processed in order, and an
  // answered fence or read says every message before it was: those ran
  // (or were rejected, as said above). Of the others nothing is known.
  bool Failed = false;
  for (Destination &Tg : Targets) {
    if (Tg.Failure.empty())
      continue;
    Failed = true;
    Delivery D = Tg.Lost || !Tg.Done ? Tg.Final : R.delivery(Tg.Conn);
    toolError(Tool, Tg.Prefix + Tg.Failure + describeLoss(D, Total));
  }
  if (Failed || !Rejected.empty())
    return 1;
  for (size_t K = 0; ReadBytes && K < Targets.size(); ++K)
    outs() << (Targets.size() > 1 ? Targets[K].Name + ": " : std::string())
           << toHex(Targets[K].Region, /*LowerCase=*/true) << "\n";
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
