//===- Stamps.cpp - Where a ping-pong's time goes (tsi --breakdown) -------===//

#include "Stamps.h"
#include "Bench.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace bench {
namespace {

size_t mappingBytes(uint64_t RoundTrips) {
  return sizeof(HopStamps) + NumStampColumns * RoundTrips * sizeof(uint64_t);
}

/// The mean of \p V without its slowest 1 %.
double trimmedMean(std::vector<double> V) {
  if (V.empty())
    return 0;
  std::sort(V.begin(), V.end());
  V.resize(V.size() - V.size() / 100);
  double Sum = 0;
  for (double X : V)
    Sum += X;
  return Sum / static_cast<double>(V.size());
}

} // namespace

HopStamps *HopStamps::create(uint64_t RoundTrips, std::string &Path) {
  char Name[] = "/dev/shm/tc-bench-stamps-XXXXXX";
  int Fd = mkstemp(Name);
  if (Fd < 0)
    die(std::string("breakdown: cannot create a file under /dev/shm: ") +
        std::strerror(errno));
  size_t Bytes = mappingBytes(RoundTrips);
  void *P = MAP_FAILED;
  if (ftruncate(Fd, static_cast<off_t>(Bytes)) == 0)
    P = mmap(nullptr, Bytes, PROT_READ | PROT_WRITE, MAP_SHARED, Fd, 0);
  int Saved = errno;
  ::close(Fd);
  if (P == MAP_FAILED) {
    unlink(Name);
    die(std::string("breakdown: cannot map ") + Name + ": " +
        std::strerror(Saved));
  }
  Path = Name;
  auto *S = static_cast<HopStamps *>(P);
  S->Capacity = RoundTrips;
  S->TargetCount = 0;
  S->CalStamp = stampNow();
  S->CalNanos = steadyNanos();
  return S;
}

HopStamps *HopStamps::open(const std::string &Path, std::string &Err) {
  int Fd = ::open(Path.c_str(), O_RDWR);
  if (Fd < 0) {
    Err = "cannot open " + Path + ": " + std::strerror(errno);
    return nullptr;
  }
  struct stat St;
  HopStamps Head;
  void *P = MAP_FAILED;
  if (fstat(Fd, &St) != 0 || St.st_size < off_t(sizeof Head) ||
      pread(Fd, &Head, sizeof Head, 0) != ssize_t(sizeof Head) ||
      Head.Capacity > (uint64_t(St.st_size) - sizeof Head) /
                          (NumStampColumns * sizeof(uint64_t)) ||
      St.st_size != off_t(mappingBytes(Head.Capacity)))
    Err = Path + " is not a stamps file";
  else if ((P = mmap(nullptr, size_t(St.st_size), PROT_READ | PROT_WRITE,
                     MAP_SHARED, Fd, 0)) == MAP_FAILED)
    Err = "cannot map " + Path + ": " + std::strerror(errno);
  ::close(Fd);
  return P == MAP_FAILED ? nullptr : static_cast<HopStamps *>(P);
}

void HopStamps::close(HopStamps *S) {
  if (S)
    munmap(S, mappingBytes(S->Capacity));
}

void HopStamps::destroy(HopStamps *S, const std::string &Path) {
  close(S);
  if (!Path.empty())
    unlink(Path.c_str());
}

HopBreakdown analyzeStamps(const HopStamps &S, uint64_t Warmup,
                           uint64_t RoundTrips, double TimedNs,
                           const std::string &What) {
  if (Warmup >= RoundTrips || RoundTrips > S.Capacity ||
      S.TargetCount != RoundTrips)
    die("breakdown: " + What + ": the target stamped " +
        std::to_string(S.TargetCount) + " answers, expected " +
        std::to_string(RoundTrips));
  // Ticks per ns over the whole run (the TSC's and CNTVCT's rates are not
  // known up front; CLOCK_MONOTONIC's is 1).
  double Ticks = double(stampNow() - S.CalStamp);
  double Nanos = double(steadyNanos() - S.CalNanos);
  if (Ticks <= 0 || Nanos <= 0)
    die("breakdown: " + What + ": the clock did not advance");
  double NsPerTick = Nanos / Ticks;
  const uint64_t *Before = S.column(ClientBefore),
                 *After = S.column(ClientAfter), *Seen = S.column(ClientSeen),
                 *TSeen = S.column(TargetSeen), *TSent = S.column(TargetSent);
  auto Ns = [&](uint64_t From, uint64_t To) {
    return double(int64_t(To - From)) * NsPerTick;
  };
  // The client's stamps of the timed round trips span what it timed.
  double Span = Ns(Before[Warmup], Seen[RoundTrips - 1]);
  if (Span < 0.95 * TimedNs || Span > 1.05 * TimedNs)
    die("breakdown: " + What + ": the stamps span " + std::to_string(Span) +
        " ns where the client timed " + std::to_string(TimedNs) + " ns");
  std::vector<double> Send, OneWay, TargetSend, Return;
  uint64_t Disordered = 0;
  for (uint64_t I = Warmup; I < RoundTrips; ++I) {
    // Causality: the target saw the message after the client began to send
    // it, and answered before the client saw the answer (it may see it
    // before the client's send call returns). A VM's TSC steps by tens of
    // ticks, not in phase on every vCPU, and more so under load: a stamp
    // can be early by a step or two. Stamps matched to the wrong round
    // trip, or clocks that differ, put most round trips out of order.
    if (int64_t(After[I] - Before[I]) < 0 ||
        int64_t(TSeen[I] - Before[I]) < 0 || int64_t(TSent[I] - TSeen[I]) < 0 ||
        int64_t(Seen[I] - TSeen[I]) < 0)
      ++Disordered;
    Send.push_back(Ns(Before[I], After[I]));
    OneWay.push_back(Ns(Before[I], TSeen[I]));
    TargetSend.push_back(Ns(TSeen[I], TSent[I]));
    Return.push_back(Ns(TSeen[I], Seen[I]));
  }
  HopBreakdown B;
  B.SendCallNs = trimmedMean(std::move(Send));
  B.OneWayNs = trimmedMean(std::move(OneWay));
  B.TargetSendCallNs = trimmedMean(std::move(TargetSend));
  B.ReturnNs = trimmedMean(std::move(Return));
  if (Disordered * 4 > RoundTrips - Warmup)
    die("breakdown: " + What + ": " + std::to_string(Disordered) + " of " +
        std::to_string(RoundTrips - Warmup) +
        " round trips have stamps out of order (do the processes share the "
        "clock?)");
  return B;
}

} // namespace bench
