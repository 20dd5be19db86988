//===- Sweep.cpp - `tc-bench sss` and `tc-bench iput` ---------------------===//
//
// Two-Chains §VI-VII (Figs. 7-8): server-side sum and indirect put over
// payload sizes, injected (the cached ifunc) against local-function
// invocation (the same C code linked into the server, invoked by id over
// UCX active messages) and against the same work written straight on UCX
// active messages (ucx_am, UcxAmSweep.cpp). Latency is half a ping-pong
// round trip; rate is back-to-back sends ended by a flush. Every mode runs
// once per round, one after the other, and each figure is the median over
// the rounds. The server's sum, or its buffer's hash, must match what the
// client sent before a figure is reported.
//
//===----------------------------------------------------------------------===//

#include "Bench.h"
#include "Mpi.h"

#include <algorithm>
#include <array>
#include <memory>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <tuple>

namespace bench {
namespace {

const char *const SweepUsage = R"(USAGE: tc-bench sss|iput [options]

Server-side sum (sss) or indirect put (iput) over payload sizes (Two-Chains
Figs. 7-8): one-way latency and message rate of the injected ifunc, the same
C function linked into the server (local), and the same work written
straight on UCX active messages (ucx_am: UcxAmSweep.cpp); with mode mpi, the
same bytes moved by MPI one-sided operations under mpirun (tc-mpi-rma: sss
MPI_Get of the numbers and the sum at the client, iput MPI_Put; rows
mpi_get:OSC, mpi_put:OSC; latency is half an operation and its flush). The
table ends with the ratios injected/ucx_am, injected/local and injected/mpi
per size and, with more than one round, the spread of the injected rate over
the rounds ((max - min) / median) beside that of ucx_am.

OPTIONS:
  --sizes LIST   Payload bytes (default 16,64,256,1024,4096,16384,65536;
                 --quick 16,1024,16384)
  --iters N      Ping-pong round trips per point (default 20000; --quick 2000)
  --msgs N       Messages per rate point (default 100000; --quick 10000)
  --rounds N     Measure every mode N times per size, one after the other,
                 and report medians (default 3; --quick 1)
  --modes LIST   Any of injected,local,ucx_am,mpi (default: all but mpi)
)";

const char *const SweepModes[] = {"injected", "local", "ucx_am", "mpi"};
constexpr size_t NumModes = std::size(SweepModes);

/// Sets \p Want[i] for each mode of the ','-separated \p List.
void pickModes(const std::string &Flag, const std::string &List,
               const char *const (&Modes)[NumModes], bool (&Want)[NumModes]) {
  std::fill(std::begin(Want), std::end(Want), false);
  for (size_t Pos = 0; Pos <= List.size();) {
    size_t End = std::min(List.find(',', Pos), List.size());
    std::string M = List.substr(Pos, End - Pos);
    auto It = std::find(std::begin(Modes), std::end(Modes), M);
    if (It == std::end(Modes))
      die("bad mode '" + M + "' in " + Flag +
          " (expected injected, local, ucx_am, mpi)");
    Want[It - std::begin(Modes)] = true;
    Pos = End + 1;
  }
}

/// One mode's figures at one size, over the rounds.
struct Figures {
  std::vector<double> Latency, Rate;
};

/// The median over rounds of \p Num[i] / \p Den[i] (0 when either side was
/// not measured): both figures of a pair were taken seconds apart.
double pairedRatio(const std::vector<double> &Num,
                   const std::vector<double> &Den) {
  std::vector<double> Ratios;
  for (size_t I = 0; I < Num.size() && I < Den.size(); ++I)
    if (Den[I] > 0)
      Ratios.push_back(Num[I] / Den[I]);
  return median(Ratios);
}

/// Dies unless \p St is what \p N messages of \p Words leave on a server.
void check(const std::string &Which, const std::string &Mode, bool Sum,
           const std::vector<uint64_t> &Words, uint64_t N,
           const ServerStats &St) {
  if (Sum) {
    uint64_t Expect = 0;
    for (uint64_t W : Words)
      Expect += W;
    if (St.SssCount != N || St.SssSum != Expect * N)
      die("sss " + Mode + ": the server summed " +
          std::to_string(St.SssCount) + " messages to " +
          std::to_string(St.SssSum) + ", expected " + std::to_string(N) +
          " to " + std::to_string(Expect * N));
    return;
  }
  std::vector<unsigned char> Buf(1 << 20);
  std::memcpy(Buf.data(), Words.data() + 1, Words.size() * 8 - 8);
  if (St.IputCount != N || St.IputRejected ||
      St.IputHash != fnv1a(Buf.data(), Buf.size()))
    die(Which + " " + Mode + ": the server's buffer or counters are not "
        "what was put (" + std::to_string(St.IputCount) + " puts, " +
        std::to_string(St.IputRejected) + " rejected)");
}

} // namespace

int runSweep(const std::string &Which, const CommonOptions &O,
             const std::vector<std::string> &Args) {
  std::vector<uint64_t> Sizes =
      O.Quick ? std::vector<uint64_t>{16, 1024, 16384}
              : std::vector<uint64_t>{16, 64, 256, 1024, 4096, 16384, 65536};
  uint64_t Iters = O.Quick ? 2000 : 20000, Msgs = O.Quick ? 10000 : 100000;
  uint64_t Rounds = O.Quick ? 1 : 3;
  bool Want[NumModes] = {true, true, true, false};
  if (!walkArgs(
          Which, Args, SweepUsage,
          [&](const std::string &A, const std::function<std::string()> &Value) {
            if (A == "--sizes")
              Sizes = parseList(A, Value());
            else if (A == "--iters")
              Iters = parseCount(A, Value());
            else if (A == "--msgs")
              Msgs = parseCount(A, Value());
            else if (A == "--rounds")
              Rounds = parseCount(A, Value());
            else if (A == "--modes")
              pickModes(A, Value(), SweepModes, Want);
            else
              return false;
            return true;
          }))
    return 0;
  if (!Iters || !Msgs || !Rounds)
    die("--iters, --msgs and --rounds must be at least 1");
  for (uint64_t S : Sizes)
    if (S < 16 || S % 8 || S > (1u << 20))
      die("payload sizes must be multiples of 8 from 16 to 1048576 bytes "
          "(got " + std::to_string(S) + ")");
  selectTransport(O.Transport, /*Loopback=*/true);
  pinClientAndServer(O.Pin);
  MpiPlace Place;
  Place.Transport = O.Transport;
  Place.Pin = ServerCpu >= 0;
  MpiReference Mpi(Place, O.MpiOsc, O.MpiTimeoutS);
  if (Want[3])
    Mpi.check();
  // Per size, the MPI rows' names (mpi_OP:OSC) for latency and rate.
  std::vector<std::string> MpiLatMode(Sizes.size()), MpiRateMode(Sizes.size());

  bool Tc = Want[0] || Want[1];
  Child Srv;
  std::unique_ptr<ClientWorker> C;
  tc_ep_h Ep = nullptr;
  tc_ifunc_h F = nullptr;
  // The tc client: made at the start, and again after each ucx_am run.
  auto Connect = [&] {
    C = std::make_unique<ClientWorker>();
    makeClient(*C, O.IfuncPath, false);
    Ep = connectTo(*C, Srv);
    F = registerIfunc(*C, Which.c_str());
  };
  // Before the ucx_am reference forks its server: a child forked while this
  // process has a UCX worker shares UCX's event set (one epoll instance
  // per process, inherited), and this process's UCX thread then spun on
  // the child's events, on the client CPU (the reference measured 5-10x
  // slower after a tc mode than alone).
  auto Disconnect = [&] {
    tc_ifunc_deregister(F);
    tc_ep_destroy(Ep);
    C.reset();
    F = nullptr;
    Ep = nullptr;
  };
  if (Tc) {
    std::vector<std::string> A = {selfPath(), "serve", "--ifunc-path",
                                  O.IfuncPath};
    for (std::string &R : serveReach("127.0.0.1"))
      A.push_back(std::move(R));
    Srv = startServer(A, "", Which + " server");
    Connect();
  }
  bool Sum = Which == "sss";
  std::vector<Record> Out;
  // Per size: each mode's figures over the rounds.
  std::vector<std::array<Figures, NumModes>> All(Sizes.size());

  for (size_t SI = 0; SI < Sizes.size(); ++SI) {
    uint64_t Size = Sizes[SI];
    // sss: Size bytes of numbers. iput: {offset 0, Size - 8 bytes}.
    std::vector<uint64_t> Words(Size / 8);
    for (size_t I = 0; I < Words.size(); ++I)
      Words[I] = Sum ? I * 2654435761u + Size
                     : (I == 0 ? 0 : 0x0101010101010101ULL * (I + Size));
    tc_msg_h M = nullptr;
    auto MakeMessage = [&] {
      if (tc_msg_create(F, Words.data(), Size, &M) != TC_OK)
        die("cannot create a " + Which + " message of " +
            std::to_string(Size) + " bytes");
    };
    if (Tc)
      MakeMessage();
    // Around a reference (ucx_am, mpi): the tc server sleeps until the next
    // bench.reset and its client is gone; then both come back.
    auto Park = [&] {
      if (!Tc)
        return;
      control(*C, Ep, "bench.idle", nullptr, 0);
      tc_msg_free(M);
      M = nullptr;
      Disconnect();
    };
    auto Resume = [&] {
      if (!Tc)
        return;
      Connect();
      MakeMessage();
    };
    uint64_t Warm = Iters / 10 + 1;
    for (uint64_t Round = 0; Round < Rounds; ++Round) {
      for (size_t Mode = 0; Mode < NumModes; ++Mode) {
        if (!Want[Mode])
          continue;
        std::string Name = SweepModes[Mode];
        note(Which + " " + Name + " " + std::to_string(Size) + " bytes" +
             (Rounds > 1 ? ", round " + std::to_string(Round + 1) : ""));
        Figures &Fig = All[SI][Mode];
        ServerStats St;
        if (Name == "mpi") {
          Park();
          auto Arg = [&](uint64_t W, uint64_t I, uint64_t N) {
            return std::vector<std::string>{
                "--sizes", std::to_string(Size), "--warmup",
                std::to_string(W), "--iters", std::to_string(I), "--msgs",
                std::to_string(N)};
          };
          // The probe of each osc component: the first round, short.
          for (const Record &X :
               Mpi.run(Which, 2, Arg(Warm, Iters, Msgs),
                       Arg(std::min<uint64_t>(Warm, 50),
                           std::min<uint64_t>(Iters, 300),
                           std::min<uint64_t>(Msgs, 2000)),
                       Which + " " + std::to_string(Size) + " bytes")) {
            if (X.Metric == "latency_us") {
              Fig.Latency.push_back(X.Value);
              MpiLatMode[SI] = X.Mode;
            } else if (X.Metric == "rate_msgs") {
              Fig.Rate.push_back(X.Value);
              MpiRateMode[SI] = X.Mode;
            }
          }
          Resume();
          continue; // tc-mpi-rma checked every sum or its target's buffer.
        }
        if (Name == "ucx_am") {
          // The tc server would poll on the CPU the reference's server is
          // pinned to.
          Park();
          UcxAmFigures U =
              ucxAmSweep(Sum, Words.data(), Size, Warm, Iters, Msgs, St);
          Resume();
          Fig.Latency.push_back(U.LatencyUs);
          Fig.Rate.push_back(U.Rate);
        } else {
          bool Local = Name == "local";
          auto Send = [&] {
            tc_status_t S =
                Local ? tc_ep_send_local(Ep, Which.c_str(), Words.data(),
                                         Size, nullptr, nullptr)
                      : tc_msg_send(Ep, M, nullptr, nullptr);
            if (S != TC_INPROGRESS)
              die(Which + ": send failed: " + tc_status_string(S));
          };
          control(*C, Ep, "bench.reset", nullptr, 0);
          Fig.Latency.push_back(
              pingPong(*C, Ep, Local ? PongLocal : PongIfunc, Send, Warm,
                       Iters));
          Fig.Rate.push_back(rate(*C, Ep, Send, Msgs));
          St = queryStats(*C, Ep);
        }
        check(Which, Name, Sum, Words, Warm + Iters + Msgs, St);
      }
    }
    if (M)
      tc_msg_free(M);
    for (size_t Mode = 0; Mode < NumModes; ++Mode) {
      if (!Want[Mode])
        continue;
      Figures Fig = All[SI][Mode]; // median() sorts: keep the rounds' order.
      for (auto [Metric, V, Unit] :
           {std::tuple<const char *, double, const char *>{
                "latency_us", median(Fig.Latency), "us"},
            {"rate_msgs", median(Fig.Rate), "msgs/s"}}) {
        Record R = record(Which,
                          Mode != 3          ? SweepModes[Mode]
                          : Metric[0] == 'l' ? MpiLatMode[SI]
                                             : MpiRateMode[SI],
                          Metric, V, Unit, O.Transport);
        R.PayloadBytes = static_cast<long>(Size);
        Out.push_back(R);
      }
    }
  }
  if (Tc) {
    Disconnect();
    stopServer(Srv);
  }
  // --json and --csv carry the ratios and spreads of the table below as
  // records (scripts/bench-tables.py renders them): mode NUM/DEN with
  // latency_ratio and rate_ratio (paired, unit "x"), and per mode with two
  // rounds or more rate_spread (percent).
  if (O.Fmt != Format::Table) {
    auto Add = [&](uint64_t Size, const std::string &Mode, const char *Metric,
                   double V, const char *Unit) {
      Record R = record(Which, Mode, Metric, V, Unit, O.Transport);
      R.PayloadBytes = static_cast<long>(Size);
      Out.push_back(R);
    };
    for (size_t SI = 0; SI < Sizes.size(); ++SI) {
      const auto &Fig = All[SI];
      for (size_t Ref : {size_t(2), size_t(1)}) {
        if (!Want[0] || !Want[Ref])
          continue;
        std::string Mode = std::string("injected/") + SweepModes[Ref];
        Add(Sizes[SI], Mode, "latency_ratio",
            pairedRatio(Fig[0].Latency, Fig[Ref].Latency), "x");
        Add(Sizes[SI], Mode, "rate_ratio",
            pairedRatio(Fig[0].Rate, Fig[Ref].Rate), "x");
      }
      // Over MPI RMA, named by the rows they divide by (injected/mpi_get:sm):
      // latency and rate may come from different osc components.
      if (Want[0] && Want[3]) {
        if (!MpiLatMode[SI].empty())
          Add(Sizes[SI], "injected/" + MpiLatMode[SI], "latency_ratio",
              pairedRatio(Fig[0].Latency, Fig[3].Latency), "x");
        if (!MpiRateMode[SI].empty())
          Add(Sizes[SI], "injected/" + MpiRateMode[SI], "rate_ratio",
              pairedRatio(Fig[0].Rate, Fig[3].Rate), "x");
      }
      for (size_t Mode = 0; Mode < NumModes && Rounds > 1; ++Mode)
        if (Want[Mode])
          Add(Sizes[SI], SweepModes[Mode], "rate_spread",
              spreadPercent(Fig[Mode].Rate), "%");
    }
  }
  printRecords(Out, O.Fmt);
  if (O.Fmt == Format::Table && Want[0] && (Want[1] || Want[2] || Want[3])) {
    // "paired": the median over rounds of each round's own ratio; latency
    // ratios are injected/reference (lower is better), rate ratios too
    // (higher is better).
    // With rounds, the rate's spread over them: the injected mode's beside
    // the reference's (the machine's own, measured in the same rounds).
    bool Spread = Rounds > 1;
    std::printf("\n%-8s %-26s %-26s%s%s\n", "payload",
                Want[2] ? "injected/ucx_am lat, rate" : "",
                Want[1] ? "injected/local lat, rate" : "",
                Want[3] ? " injected/mpi lat, rate    " : "",
                !Spread    ? ""
                : Want[2] ? " rate spread % injected, ucx_am"
                          : " rate spread % injected");
    for (size_t SI = 0; SI < Sizes.size(); ++SI) {
      const auto &Fig = All[SI];
      std::printf("%-8llu", static_cast<unsigned long long>(Sizes[SI]));
      for (size_t Ref : {size_t(2), size_t(1), size_t(3)}) {
        if (Ref == 3 && !Want[Ref])
          continue;
        if (!Want[Ref]) {
          std::printf(" %-26s", "");
          continue;
        }
        char Buf[64];
        std::snprintf(Buf, sizeof Buf, "%.3f, %.3f",
                      pairedRatio(Fig[0].Latency, Fig[Ref].Latency),
                      pairedRatio(Fig[0].Rate, Fig[Ref].Rate));
        std::printf(" %-26s", Buf);
      }
      if (Spread) {
        std::printf(" %.1f", spreadPercent(Fig[0].Rate));
        if (Want[2])
          std::printf(", %.1f", spreadPercent(Fig[2].Rate));
      }
      std::printf("\n");
    }
  }
  // Which osc components mode mpi tried, and what each measured.
  if (O.Fmt == Format::Table)
    std::fputs(Mpi.summary().c_str(), stdout);
  return 0;
}

} // namespace bench
