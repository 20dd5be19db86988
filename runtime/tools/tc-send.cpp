//===- tc-send.cpp - Inject an ifunc into a tc target ---------------------===//
//
// Registers ARCHIVE, sends N messages of it to a target, waits until the
// target has processed all of them (a fence, or the region read), and with
// --read-back prints the first bytes of the target's region as lowercase
// hex. Exits 1 with the target's message if it rejected any of them.
//
//===----------------------------------------------------------------------===//

#include "Runtime.h"
#include "ToolSupport.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>

using namespace llvm;
using namespace tc;

static const char *const Usage =
    R"(USAGE: tc-send --to HOST:PORT (ARCHIVE... | --local NAME) [options]

With several archives, messages go round-robin over them.

OPTIONS:
  --to HOST:PORT       The target (a tc-serve, or any libtc worker)
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
  std::string RawFrame, Local;
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
               takeOption(argc, argv, I, "--local", Local, OptError)) {
    } else if (!OptError.empty()) {
      return toolError(Tool, OptError);
    } else if (A.starts_with("-")) {
      return toolError(Tool, "unknown option '" + A + "' (try --help)");
    } else {
      ArchivePaths.push_back(A.str());
    }
  }
  if (To.empty())
    return toolError(Tool, "missing --to HOST:PORT");
  if (ArchivePaths.empty() && Local.empty())
    return toolError(Tool, "missing ARCHIVE (or --local NAME)");
  if (!ArchivePaths.empty() && !Local.empty())
    return toolError(Tool, "give archives or --local, not both");
  if (HaveHex && !PayloadFile.empty())
    return toolError(Tool, "--payload-hex and --payload-file exclude each "
                           "other");
  auto HP = parseHostPort(To);
  if (!HP)
    return toolError(Tool, toString(HP.takeError()));
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
  auto Conn = R.connect(HP->first, HP->second);
  if (!Conn)
    return toolError(Tool, toString(Conn.takeError()));

  std::vector<RemoteError> Rejected;
  R.onRemoteError([&](const RemoteError &E) { Rejected.push_back(E); });
  std::string Failure;
  bool Closed = false;
  R.onDisconnect([&](ConnId C, StringRef Why) {
    if (C == *Conn) {
      Closed = true;
      Failure = Why.str(); // "connection to HOST:PORT lost: STATUS"
    }
  });

  if (!RawFrame.empty()) {
    StringRef Bytes = Raw;
    R.transport().send(*Conn, Bytes.take_front(24), Bytes.drop_front(24),
                       [&](llvm::Error E) { consumeError(std::move(E)); });
  }
  auto Completed = [&](llvm::Error E) {
    if (E && Failure.empty())
      Failure = toString(std::move(E));
    else
      consumeError(std::move(E));
  };
  if (!Local.empty())
    for (uint64_t I = 0; I < N; ++I)
      R.sendLocal(*Conn, Local, Args, Completed);
  for (uint64_t I = 0; I < N * Messages.size(); ++I)
    R.send(*Conn, Messages[I % Messages.size()], Completed);

  bool Done = false;
  std::string Region;
  if (ReadBytes) {
    R.readRegion(*Conn, ReadBytes, [&](Expected<std::string> D) {
      Done = true;
      if (!D)
        Failure = toString(D.takeError());
      else
        Region = std::move(*D);
    });
  } else {
    R.fence(*Conn, [&](llvm::Error E) {
      Done = true;
      if (E)
        Failure = toString(std::move(E));
    });
  }

  auto Deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(TimeoutMs);
  while (!Done && !Closed) {
    if (R.progress())
      continue;
    auto Left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    Deadline - std::chrono::steady_clock::now())
                    .count();
    if (Left <= 0)
      return toolError(Tool, "timed out after " + Timeout + " ms waiting for " +
                                 To);
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
  if (ReadBytes)
    outs() << toHex(Region, /*LowerCase=*/true) << "\n";
  return 0;
}
