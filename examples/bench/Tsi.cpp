//===- Tsi.cpp - `tc-bench tsi`: latency, rate, first contact -------------===//
//
// Three-Chains §IV (Tables I-VI): target-side increment in every execution
// mode against the active-message baseline, in one run:
//  - latency: ping-pong, one message in flight; one-way = half round trip;
//  - rate: messages sent back to back, ended by a flush (the target has run
//    all of them), divided by the time;
//  - frame bytes: what the client's worker put on the wire per message;
//  - first contact: a code identity the running target does not have (it
//    keeps one loaded; the probes fca/fcb alternate), measured to the pong.
// Two references are measured in the same run: TSI written straight on UCX
// active messages (ucx_am, UcxAm.cpp), and ucx_perftest's own AM figures
// (when it is installed), whose handler does no work. Mode mpi adds the
// increments done with MPI one-sided operations under mpirun (Mpi.cpp).
//
//===----------------------------------------------------------------------===//

#include "Bench.h"
#include "Mpi.h"
#include "Stamps.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <iterator>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sstream>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace bench {
namespace {

struct Sizes {
  uint64_t Warmup, LatencyIters, RateMsgs, FirstContactTrials, Rounds,
      StallMsgs;
};

struct TsiRun {
  const CommonOptions &O;
  Sizes N;
  std::vector<Record> Out;
  bool Breakdown = false; ///< --breakdown: stamp the ping-pongs.

  void add(const std::string &Mode, const std::string &Metric, double V,
           const std::string &Unit) {
    Out.push_back(record("tsi", Mode, Metric, V, Unit, O.Transport));
  }
};

using SendFn = std::function<void()>;

/// With --breakdown, the stamps of one mode's ping-pong (Stamps.h): a
/// mapping both processes write, removed with this object. Its file is
/// removed as soon as the target has mapped it (unlink()), so that a run
/// that dies leaves none behind.
class PingPongStamps {
public:
  explicit PingPongStamps(const TsiRun &R) {
    if (R.Breakdown)
      S = HopStamps::create(R.N.Warmup + R.N.LatencyIters, Path);
  }
  /// The target has the mapping (a tc server mapped it; a forked one will
  /// inherit it): the file can go.
  void unlink() {
    if (!Path.empty())
      ::unlink(Path.c_str());
    Path.clear();
  }
  ~PingPongStamps() {
    if (S)
      HopStamps::destroy(S, Path);
  }
  PingPongStamps(const PingPongStamps &) = delete;
  PingPongStamps &operator=(const PingPongStamps &) = delete;
  HopStamps *get() const { return S; }
  const std::string &path() const { return Path; }
  /// Adds \p Mode's breakdown rows to \p R (nothing without --breakdown);
  /// \p LatencyUs is the one-way latency the ping-pong measured.
  void report(TsiRun &R, const std::string &Mode, double LatencyUs) const {
    if (!S)
      return;
    double TimedNs = LatencyUs * 1000 * 2 * double(R.N.LatencyIters);
    HopBreakdown B = analyzeStamps(*S, R.N.Warmup,
                                   R.N.Warmup + R.N.LatencyIters, TimedNs,
                                   Mode);
    R.add(Mode, "send_call_ns", B.SendCallNs, "ns");
    R.add(Mode, "one_way_ns", B.OneWayNs, "ns");
    R.add(Mode, "target_send_call_ns", B.TargetSendCallNs, "ns");
    R.add(Mode, "return_ns", B.ReturnNs, "ns");
  }

private:
  HopStamps *S = nullptr;
  std::string Path;
};

void sendOrDie(tc_status_t S) {
  if (S != TC_INPROGRESS && S != TC_OK)
    die(std::string("send failed: ") + tc_status_string(S));
}

/// One steady-state mode: latency, rate, frame bytes; checks the target ran
/// exactly what was sent.
void steadyMode(TsiRun &R, const std::string &Mode, const Child &Server,
                bool ShipAlways, const char *Ifunc, bool Coalesce = true,
                bool Mailbox = false) {
  note("tsi " + Mode + ": latency and rate");
  ClientWorker C;
  makeClient(C, R.O.IfuncPath, ShipAlways, Coalesce, /*Pmix=*/false, Mailbox);
  tc_ep_h Ep = connectTo(C, Server);
  static const unsigned char One = 1;
  SendFn Send;
  tc_ifunc_h F = nullptr;
  tc_msg_h M = nullptr;
  uint32_t Pong = PongLocal;
  if (Mode == "am") {
    Send = [&] { sendOrDie(tc_ep_send_local(Ep, "tsi", &One, 1, nullptr,
                                            nullptr)); };
  } else {
    F = registerIfunc(C, Ifunc);
    if (tc_msg_create(F, &One, 1, &M) != TC_OK)
      die(std::string("cannot create a ") + Ifunc + " message");
    Send = [&] { sendOrDie(tc_msg_send(Ep, M, nullptr, nullptr)); };
    Pong = PongIfunc;
  }
  control(C, Ep, "bench.reset", nullptr, 0);
  PingPongStamps Stamps(R);
  if (Stamps.get()) {
    control(C, Ep, "bench.stamps", Stamps.path().data(), Stamps.path().size());
    Stamps.unlink();
  }
  double Lat = pingPong(C, Ep, Pong, Send, R.N.Warmup, R.N.LatencyIters,
                        Stamps.get());
  if (Stamps.get())
    control(C, Ep, "bench.stamps", nullptr, 0);
  Stamps.report(R, Mode, Lat);
  ServerStats S0 = queryStats(C, Ep);
  tc_worker_stats_t W0;
  tc_worker_query_stats(C.W, &W0);
  double Rate = rate(C, Ep, Send, R.N.RateMsgs);
  tc_worker_stats_t W1;
  tc_worker_query_stats(C.W, &W1);
  ServerStats S1 = queryStats(C, Ep);
  uint64_t Ran = S1.Tsi - S0.Tsi;
  if (S0.Tsi != R.N.Warmup + R.N.LatencyIters || Ran != R.N.RateMsgs)
    die("tsi " + Mode + ": the target counted " + std::to_string(S0.Tsi) +
        " + " + std::to_string(Ran) + " increments, expected " +
        std::to_string(R.N.Warmup + R.N.LatencyIters) + " + " +
        std::to_string(R.N.RateMsgs));
  if (S1.Worker.errors)
    die("tsi " + Mode + ": the target dropped " +
        std::to_string(S1.Worker.errors) + " messages");
  // Frames in the rate run: the messages plus one fence, which is 24 bytes.
  uint64_t Frames = W1.frames_sent - W0.frames_sent - 1;
  double Bytes = static_cast<double>(W1.bytes_sent - W0.bytes_sent - 24) /
                 static_cast<double>(Frames);
  R.add(Mode, "latency_us", Lat, "us");
  R.add(Mode, "rate_msgs", Rate, "msgs/s");
  R.add(Mode, "frame_bytes", Bytes, "bytes");
  // How many messages each UCX active message carried in the rate run (the
  // batches coalescing made; 1 without).
  uint64_t Batched = W1.batched_frames - W0.batched_frames;
  uint64_t ByMailbox = W1.mailbox_sent - W0.mailbox_sent;
  uint64_t Ams =
      Frames + 1 - Batched + (W1.batches_sent - W0.batches_sent) - ByMailbox;
  if (Mailbox) {
    // How many of the rate run's messages went by mailbox (the others as
    // AMs, when the ring had no credit).
    R.add(Mode, "mailbox_share",
          static_cast<double>(ByMailbox) / static_cast<double>(Frames),
          "ratio");
    if (!ByMailbox)
      die("tsi " + Mode + ": no message went by mailbox (shared memory "
          "needed: --transport shm)");
  } else {
    R.add(Mode, "msgs_per_am",
          static_cast<double>(Frames + 1) / static_cast<double>(Ams), "msgs");
  }
  if (M)
    tc_msg_free(M);
  if (F)
    tc_ifunc_deregister(F);
  tc_ep_destroy(Ep);
}

/// First contact on a running target that keeps one identity loaded: every
/// trial sends the identity it does not have (with the archive), so it is
/// compiled, linked or read from the disk cache; measured to the pong.
void firstContact(TsiRun &R, const std::string &Mode, const Child &Server) {
  note("tsi first contact: " + Mode);
  ClientWorker C;
  makeClient(C, R.O.IfuncPath, /*ShipAlways=*/true, /*Coalesce=*/true,
             /*Pmix=*/false, /*Mailbox=*/false);
  tc_ep_h Ep = connectTo(C, Server);
  static const unsigned char One = 1;
  tc_ifunc_h F[2] = {registerIfunc(C, "fca"), registerIfunc(C, "fcb")};
  tc_msg_h M[2];
  for (int I = 0; I < 2; ++I)
    if (tc_msg_create(F[I], &One, 1, &M[I]) != TC_OK)
      die("cannot create a first-contact message");
  uint32_t Pong = PongLocal;
  control(C, Ep, "bench.pong", &Pong, sizeof Pong);
  std::vector<double> Ms;
  ServerStats S0{}, Fresh{};
  double FreshMs = 0;
  // Trials 0 and 1 fill the disk cache (when there is one) and warm up.
  // Trial 0 is also the server process's first load, reported apart: the
  // server prewarmed its JIT at start (tc-bench serve --prewarm, as tc-serve
  // does), so it should cost what the later ones do.
  for (uint64_t T = 0; T < R.N.FirstContactTrials + 2; ++T) {
    if (T == 1)
      Fresh = queryStats(C, Ep);
    if (T == 2)
      S0 = queryStats(C, Ep);
    uint64_t Want = C.Counter + 1;
    Clock::time_point T0 = Clock::now();
    sendOrDie(tc_msg_send(Ep, M[T % 2], nullptr, nullptr));
    waitFor(C.W, [&] { return C.Counter >= Want; }, "a first-contact pong");
    if (T >= 2)
      Ms.push_back(secondsSince(T0) * 1e3);
    else if (T == 0)
      FreshMs = secondsSince(T0) * 1e3;
    // Untimed: the target unloads the code (and says so), so the next trial
    // is a first contact again, on a target that is otherwise idle.
    Want = C.Counter + 1;
    sendOrDie(tc_ep_send_local(Ep, "bench.evict", nullptr, 0, nullptr,
                               nullptr));
    waitFor(C.W, [&] { return C.Counter >= Want; }, "the target's eviction");
  }
  ServerStats S1 = queryStats(C, Ep);
  uint64_t Loads = S1.Worker.compiles - S0.Worker.compiles;
  if (Loads != R.N.FirstContactTrials)
    die("tsi first contact " + Mode + ": the target loaded code " +
        std::to_string(Loads) + " times in " +
        std::to_string(R.N.FirstContactTrials) + " trials");
  if (S1.Worker.errors)
    die("tsi first contact " + Mode + ": the target dropped messages");
  R.add(Mode, "first_contact_ms", median(Ms), "ms");
  R.add(Mode, "jit_ms",
        (S1.Worker.compile_ms - S0.Worker.compile_ms) /
            static_cast<double>(Loads),
        "ms");
  if (Fresh.Worker.compiles != 1)
    die("tsi first contact " + Mode + ": the target's first trial loaded " +
        std::to_string(Fresh.Worker.compiles) + " times");
  R.add(Mode, "fresh_first_contact_ms", FreshMs, "ms");
  R.add(Mode, "fresh_jit_ms", Fresh.Worker.compile_ms, "ms");
  R.add(Mode, "prewarm_ms", Fresh.Worker.prewarm_ms, "ms");
  for (int I = 0; I < 2; ++I) {
    tc_msg_free(M[I]);
    tc_ifunc_deregister(F[I]);
  }
  tc_ep_destroy(Ep);
}

/// Value at fraction \p Q (0..1) of \p V, nearest rank (sorts \p V).
double percentile(std::vector<double> &V, double Q) {
  if (V.empty())
    return 0;
  std::sort(V.begin(), V.end());
  size_t I = static_cast<size_t>(Q * static_cast<double>(V.size()));
  return V[std::min(I, V.size() - 1)];
}

/// A paced TSI ping-pong: message I is sent at T0 + I * PaceUs (or when
/// the pong before it is back, if that is later), and its latency is taken
/// from the time it was due to its pong. A stall therefore counts for every
/// message it holds up, not only for the one it caught (a back-to-back
/// ping-pong would hide it: one message in thousands). Microseconds.
std::vector<double> pacedStream(ClientWorker &C, tc_ep_h Ep, tc_msg_h M,
                                uint64_t N, double PaceUs) {
  std::vector<double> Lat;
  Lat.reserve(N);
  Clock::time_point T0 = Clock::now();
  for (uint64_t I = 0; I < N; ++I) {
    Clock::time_point Due =
        T0 + std::chrono::nanoseconds(
                 static_cast<int64_t>(static_cast<double>(I) * PaceUs * 1e3));
    while (Clock::now() < Due)
      tc_worker_progress(C.W);
    uint64_t Want = C.Counter + 1;
    sendOrDie(tc_msg_send(Ep, M, nullptr, nullptr));
    waitFor(C.W, [&] { return C.Counter >= Want; }, "a pong");
    Lat.push_back(
        std::chrono::duration<double, std::micro>(Clock::now() - Due).count());
  }
  return Lat;
}

/// The second client of the stall mode, on a thread of its own with its
/// own worker: every ChurnMs it ships the probe the target does not have
/// (fsa and fsb alternate, every message carries its archive, and the
/// target keeps two identities loaded: the stream's and one probe), and
/// waits, sleeping in tc_worker_wait, until the target has run it.
struct Churn {
  ClientWorker W;
  tc_ep_h Ep = nullptr;
  tc_ifunc_h F[2] = {nullptr, nullptr};
  tc_msg_h M[2] = {nullptr, nullptr};
  std::atomic<bool> Stop{false};
  std::atomic<uint64_t> Sent{0}; ///< Probes the target has run.
  std::string Error; ///< Why it stopped early (reported by the caller)
  std::atomic<bool> Failed{false}; ///< and that it did (set after Error).
  std::thread Thread;

  Churn(const std::string &IfuncPath, const Child &Server) {
    makeClient(W, IfuncPath, /*ShipAlways=*/true);
    Ep = connectTo(W, Server);
    static const unsigned char One = 1;
    const char *Names[2] = {"fsa", "fsb"};
    for (int I = 0; I < 2; ++I) {
      F[I] = registerIfunc(W, Names[I]);
      if (tc_msg_create(F[I], &One, 1, &M[I]) != TC_OK)
        die("cannot create a stall probe message");
    }
  }
  ~Churn() {
    for (int I = 0; I < 2; ++I) {
      tc_msg_free(M[I]);
      tc_ifunc_deregister(F[I]);
    }
    tc_ep_destroy(Ep);
  }
  void start(double ChurnMs) {
    Thread = std::thread([this, ChurnMs] {
      // Next to the target: the stream's client keeps its CPU to itself.
      if (ServerCpu >= 0) {
        cpu_set_t Set;
        CPU_ZERO(&Set);
        CPU_SET(ServerCpu, &Set);
        sched_setaffinity(0, sizeof Set, &Set);
      }
      auto Every = std::chrono::nanoseconds(
          static_cast<int64_t>(ChurnMs * 1e6));
      Clock::time_point Next = Clock::now();
      while (!Stop && !Interrupted) {
        std::this_thread::sleep_until(Next);
        if (Stop)
          break; // The stream is over: the code it runs is not touched now.
        tc_status_t S = tc_msg_send(Ep, M[Sent & 1], nullptr, nullptr);
        if (S == TC_OK || S == TC_INPROGRESS)
          S = tc_ep_flush(Ep, 60000);
        if (S != TC_OK) {
          Error = std::string("a stall probe failed: ") + tc_status_string(S);
          Failed = true;
          return;
        }
        ++Sent;
        Next = std::max(Next + Every, Clock::now());
      }
    });
  }
  void stop() {
    Stop = true;
    if (Thread.joinable())
      Thread.join();
    if (!Error.empty())
      die("tsi stall: " + Error);
  }
};

/// The stall a first contact causes for others: p50/p99 of a paced cached
/// TSI stream alone, then while a second client ships new code every
/// ChurnMs to the same target.
void stallMode(TsiRun &R, const std::string &Mode, const Child &Server,
               double PaceUs, double ChurnMs) {
  note("tsi stall: a paced cached stream, alone and next to first contacts");
  ClientWorker C;
  makeClient(C, R.O.IfuncPath, /*ShipAlways=*/false);
  tc_ep_h Ep = connectTo(C, Server);
  static const unsigned char One = 1;
  tc_ifunc_h F = registerIfunc(C, "tsi");
  tc_msg_h M;
  if (tc_msg_create(F, &One, 1, &M) != TC_OK)
    die("cannot create a tsi message");
  control(C, Ep, "bench.reset", nullptr, 0);
  // Warm-up, unpaced: both sides compile their TSI here.
  pingPong(C, Ep, PongIfunc, [&] { sendOrDie(tc_msg_send(Ep, M, nullptr,
                                                         nullptr)); },
           0, std::min<uint64_t>(R.N.Warmup, 1000));
  uint32_t Pong = PongIfunc;
  control(C, Ep, "bench.pong", &Pong, sizeof Pong);
  std::vector<double> Quiet = pacedStream(C, Ep, M, R.N.StallMsgs, PaceUs);
  uint32_t Off = PongOff;
  control(C, Ep, "bench.pong", &Off, sizeof Off);
  ServerStats S0 = queryStats(C, Ep);

  Churn B(R.O.IfuncPath, Server);
  control(C, Ep, "bench.pong", &Pong, sizeof Pong);
  B.start(ChurnMs);
  // The stream starts once the first probe is in: every phase has a first
  // contact, however short.
  waitFor(C.W, [&] { return B.Sent > 0 || B.Failed; },
          "the first stall probe");
  std::vector<double> Busy = pacedStream(C, Ep, M, R.N.StallMsgs, PaceUs);
  B.stop();
  control(C, Ep, "bench.pong", &Off, sizeof Off);
  ServerStats S1 = queryStats(C, Ep);

  uint64_t Ran = S1.Tsi - S0.Tsi;
  uint64_t Probes = S1.Probes - S0.Probes;
  uint64_t Loads = S1.Worker.compiles - S0.Worker.compiles;
  if (Ran != R.N.StallMsgs || Probes != B.Sent)
    die("tsi stall: the target counted " + std::to_string(Ran) +
        " stream messages and " + std::to_string(Probes) +
        " probes, expected " + std::to_string(R.N.StallMsgs) + " and " +
        std::to_string(B.Sent));
  // Each probe is a first contact while the stream runs: the target keeps
  // two identities loaded, and the stream touches its own more recently
  // than the other probe (a stream held up for a whole churn period would
  // see its own code evicted instead; then a probe finds itself loaded).
  if (B.Sent && !Loads)
    die("tsi stall: " + std::to_string(B.Sent) +
        " probes made no load at the target");
  if (S1.Worker.errors)
    die("tsi stall: the target dropped " + std::to_string(S1.Worker.errors) +
        " messages");
  double QuietP99 = percentile(Quiet, 0.99);
  double BusyP99 = percentile(Busy, 0.99);
  R.add(Mode, "quiet_p50_us", percentile(Quiet, 0.5), "us");
  R.add(Mode, "quiet_p99_us", QuietP99, "us");
  R.add(Mode, "churn_p50_us", percentile(Busy, 0.5), "us");
  R.add(Mode, "churn_p99_us", BusyP99, "us");
  R.add(Mode, "p99_ratio", QuietP99 > 0 ? BusyP99 / QuietP99 : 0, "x");
  R.add(Mode, "contacts", static_cast<double>(Loads), "loads");
  R.add(Mode, "contact_load_ms",
        Loads ? (S1.Worker.compile_ms - S0.Worker.compile_ms) /
                    static_cast<double>(Loads)
              : 0,
        "ms");
  tc_msg_free(M);
  tc_ifunc_deregister(F);
  tc_ep_destroy(Ep);
}

/// A free TCP port (for ucx_perftest, which cannot pick its own).
uint16_t freePort() {
  int Fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in A{};
  A.sin_family = AF_INET;
  A.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t L = sizeof A;
  if (Fd < 0 || bind(Fd, reinterpret_cast<sockaddr *>(&A), sizeof A) != 0 ||
      getsockname(Fd, reinterpret_cast<sockaddr *>(&A), &L) != 0)
    die("cannot find a free port");
  close(Fd);
  return ntohs(A.sin_port);
}

/// Runs a command with a deadline, returns its stdout (empty on failure).
std::string runCapture(const std::vector<std::string> &Argv, double TimeoutS,
                       pid_t *PidOut = nullptr) {
  int P[2];
  if (pipe2(P, O_CLOEXEC) != 0)
    return "";
  pid_t Pid = fork();
  if (Pid == 0) {
    dup2(P[1], STDOUT_FILENO);
    int Null = open("/dev/null", O_WRONLY);
    dup2(Null, STDERR_FILENO);
    execArgv(Argv);
  }
  close(P[1]);
  if (PidOut)
    *PidOut = Pid;
  std::string Out;
  auto T0 = Clock::now();
  while (true) {
    pollfd Q{P[0], POLLIN, 0};
    double Left = TimeoutS - secondsSince(T0);
    if (Left <= 0 || Interrupted) {
      kill(Pid, SIGKILL);
      break;
    }
    int RC = poll(&Q, 1, static_cast<int>(Left * 1000) + 1);
    if (RC <= 0)
      continue;
    char B[4096];
    ssize_t N = read(P[0], B, sizeof B);
    if (N <= 0)
      break;
    Out.append(B, N);
  }
  close(P[0]);
  int St;
  waitpid(Pid, &St, 0);
  return WIFEXITED(St) && WEXITSTATUS(St) == 0 ? Out : std::string();
}

/// Replaces the records from \p First on (several rounds of the same
/// modes and metrics) by one record per mode and metric, in first-seen
/// order, holding the median value.
void medianOfRounds(std::vector<Record> &Out, size_t First) {
  std::vector<Record> Merged;
  std::vector<std::vector<double>> Values;
  for (size_t I = First; I < Out.size(); ++I) {
    size_t J = 0;
    while (J < Merged.size() && (Merged[J].Mode != Out[I].Mode ||
                                 Merged[J].Metric != Out[I].Metric))
      ++J;
    if (J == Merged.size()) {
      Merged.push_back(Out[I]);
      Values.emplace_back();
    }
    Values[J].push_back(Out[I].Value);
  }
  for (size_t J = 0; J < Merged.size(); ++J)
    Merged[J].Value = median(Values[J]);
  Out.resize(First);
  Out.insert(Out.end(), Merged.begin(), Merged.end());
}

/// The last numeric row of ucx_perftest's table: iterations, p50 latency,
/// average latency, overall latency, bandwidth x2, rate average, overall.
bool parsePerftest(const std::string &Out, double Cols[8]) {
  bool Got = false;
  size_t Pos = 0;
  while (Pos < Out.size()) {
    size_t End = Out.find('\n', Pos);
    if (End == std::string::npos)
      End = Out.size();
    std::string Line = Out.substr(Pos, End - Pos);
    Pos = End + 1;
    if (Line.rfind("Final:", 0) == 0)
      Line = Line.substr(6);
    double V[8];
    if (std::sscanf(Line.c_str(), " %lf %lf %lf %lf %lf %lf %lf %lf", &V[0],
                    &V[1], &V[2], &V[3], &V[4], &V[5], &V[6], &V[7]) == 8) {
      std::copy(V, V + 8, Cols);
      Got = true;
    }
  }
  return Got;
}

/// UCX's own active messages of the cached frame's size, same transport.
void perftest(TsiRun &R, double FrameBytes) {
  std::string Size = std::to_string(static_cast<long>(FrameBytes + 0.5));
  struct Test {
    const char *Name, *Metric, *Unit;
    uint64_t Iters;
  } Tests[] = {{"ucp_am_lat", "latency_us", "us", R.N.LatencyIters},
               {"ucp_am_bw", "rate_msgs", "msgs/s", R.N.RateMsgs}};
  for (const Test &T : Tests) {
    note(std::string("tsi ucx_perftest: ") + T.Name);
    std::string Port = std::to_string(freePort());
    std::vector<std::string> Common = {"-t", T.Name, "-s", Size, "-n",
                                       std::to_string(T.Iters), "-w",
                                       std::to_string(R.N.Warmup), "-p", Port};
    std::vector<std::string> SrvArgs = {"ucx_perftest"};
    SrvArgs.insert(SrvArgs.end(), Common.begin(), Common.end());
    if (ServerCpu >= 0)
      SrvArgs.insert(SrvArgs.end(), {"-c", std::to_string(ServerCpu)});
    // The server prints nothing we need; start it, then retry the client
    // until the server accepts (bounded).
    Child Srv;
    {
      pid_t Pid = fork();
      if (Pid == 0) {
        int Null = open("/dev/null", O_WRONLY);
        dup2(Null, STDOUT_FILENO);
        dup2(Null, STDERR_FILENO);
        execArgv(SrvArgs);
      }
      Srv.Pid = Pid;
    }
    std::vector<std::string> Cli = {"ucx_perftest", "127.0.0.1"};
    Cli.insert(Cli.end(), Common.begin(), Common.end());
    if (ClientCpu >= 0)
      Cli.insert(Cli.end(), {"-c", std::to_string(ClientCpu)});
    std::string Out;
    for (int Try = 0; Try < 50 && Out.empty() && !Interrupted; ++Try) {
      Out = runCapture(Cli, 60);
      if (Out.empty()) {
        int St;
        if (waitpid(Srv.Pid, &St, WNOHANG) == Srv.Pid) {
          Srv.Pid = -1;
          break;
        }
        usleep(20000); // The server is still starting: try again.
      }
    }
    stopServer(Srv);
    double Cols[8];
    if (Out.empty() || !parsePerftest(Out, Cols)) {
      note("ucx_perftest did not run; no UCX reference figures");
      return;
    }
    R.add("ucx_perftest", T.Metric, T.Metric[0] == 'l' ? Cols[3] : Cols[7],
          T.Unit);
  }
  R.add("ucx_perftest", "frame_bytes", FrameBytes, "bytes");
}

bool havePerftest() {
  return std::system("command -v ucx_perftest >/dev/null 2>&1") == 0;
}

const char *const TsiUsage = R"(USAGE: tc-bench tsi [options]

Target-side increment (Three-Chains Tables I-VI): one-way latency (ping-pong,
half round trip), message rate and frame bytes for am, cached, uncached,
object, ucx_am (TSI on UCX active messages without tc) and ucx_perftest;
first-contact time for jit, object and disk-cache (the median over the
trials, and the first trial on the freshly started, prewarmed server apart:
fresh_first_contact_ms, fresh_jit_ms, prewarm_ms).

OPTIONS:
  --iters N       Ping-pong round trips (default 100000; --quick 20000)
  --msgs N        Messages in the rate test (default 1000000; --quick 200000)
  --trials N      First-contact trials (default 50; --quick 10)
  --rounds N      Steady-state rounds; each figure is the median over them
                  (default 5; --quick 3)
  --modes LIST    Comma-separated subset of am, cached, cached-unbatched,
                  mailbox (cached over reactive mailboxes), uncached, object,
                  sandbox (cached on a --exec sandbox server), ucx_am,
                  ucx_put (a raw UCX put ping-pong), ucx_perftest,
                  first-contact, stall (default: all of these; mailbox and
                  ucx_put need shared memory), and mpi: TSI with MPI
                  one-sided operations under mpirun (tc-mpi-rma: rows
                  mpi_acc:OSC, MPI_Accumulate + MPI_Win_flush, and
                  mpi_fop:OSC, MPI_Fetch_and_op; latency is half an
                  operation and its flush; only when asked for)
  --stall-msgs N  stall: messages of the cached stream, alone and then
                  next to the other client (default 5000; --quick 1000)
  --pace-us N     stall: the cached stream sends a message every N us
                  (default 200); latency is taken from when it was due
  --churn-ms N    stall: the second client ships new code every N ms
                  (default 5)
  --sync-compile  first-contact: the servers compile on their progress
                  thread (compile_thread = 0; stall measures both anyway)
  --stall-spin    stall: the target busy-polls instead of sleeping when
                  idle (pinned, it shares its CPU with its compiles)
  --no-perftest   Skip the ucx_perftest reference (same as leaving
                  ucx_perftest out of --modes)
  --breakdown     Stamp every ping-pong round trip on both sides (one clock,
                  one shared mapping) and add, per ping-pong mode and for
                  ucx_am and ucx_put: send_call_ns (the client's send
                  call), one_way_ns (its send start to the target's loop
                  seeing the message), target_send_call_ns and return_ns
                  (the target's loop seeing it to the client's loop seeing
                  the answer). Means, the slowest 1 % left out; the stamps'
                  own cost is in latency_us then
)";

const char *const AllModes[] = {
    "am",      "cached", "cached-unbatched", "mailbox",      "uncached",
    "object",  "sandbox", "ucx_am",          "ucx_put",      "ucx_perftest",
    "first-contact", "stall", "mpi"};

std::vector<std::string> parseModes(const std::string &List) {
  std::vector<std::string> Out;
  std::stringstream SS(List);
  std::string M;
  while (std::getline(SS, M, ',')) {
    if (std::find(std::begin(AllModes), std::end(AllModes), M) ==
        std::end(AllModes)) {
      std::string Expected;
      for (const char *A : AllModes)
        Expected += (Expected.empty() ? "" : ", ") + std::string(A);
      die("bad mode '" + M + "' in --modes (expected " + Expected + ")");
    }
    Out.push_back(M);
  }
  if (Out.empty())
    die("--modes needs at least one mode");
  return Out;
}

/// The median over rounds of the ratio of two modes' \p Metric measured in
/// the same round (0 if either is missing): the two figures of a pair were
/// taken seconds apart, so a machine whose speed drifts between rounds
/// moves both alike.
double pairedRatio(const std::vector<Record> &Out, size_t First,
                   const std::string &Num, const std::string &Den,
                   const std::string &Metric) {
  std::vector<double> N, D;
  for (size_t I = First; I < Out.size(); ++I) {
    if (Out[I].Metric != Metric)
      continue;
    if (Out[I].Mode == Num)
      N.push_back(Out[I].Value);
    else if (Out[I].Mode == Den)
      D.push_back(Out[I].Value);
  }
  std::vector<double> Ratios;
  for (size_t I = 0; I < N.size() && I < D.size(); ++I)
    if (D[I] > 0)
      Ratios.push_back(N[I] / D[I]);
  return median(Ratios);
}

} // namespace

int runTsi(const CommonOptions &O, const std::vector<std::string> &Args) {
  TsiRun R{O, {}, {}};
  R.N = O.Quick ? Sizes{2000, 20000, 200000, 10, 3, 1000}
                : Sizes{10000, 100000, 1000000, 50, 5, 5000};
  // Every mode but mpi (which needs Open MPI) unless asked for.
  std::vector<std::string> Modes(std::begin(AllModes),
                                 std::end(AllModes) - 1);
  bool NoPerftest = false, SyncCompile = false, StallSpin = false;
  uint64_t PaceUs = 200, ChurnMs = 5;
  if (!walkArgs(
          "tsi", Args, TsiUsage,
          [&](const std::string &A, const std::function<std::string()> &Value) {
            if (A == "--iters")
              R.N.LatencyIters = parseCount(A, Value());
            else if (A == "--msgs")
              R.N.RateMsgs = parseCount(A, Value());
            else if (A == "--trials")
              R.N.FirstContactTrials = parseCount(A, Value());
            else if (A == "--rounds")
              R.N.Rounds = parseCount(A, Value());
            else if (A == "--no-perftest")
              NoPerftest = true;
            else if (A == "--breakdown")
              R.Breakdown = true;
            else if (A == "--sync-compile")
              SyncCompile = true;
            else if (A == "--stall-spin")
              StallSpin = true;
            else if (A == "--modes")
              Modes = parseModes(Value());
            else if (A == "--stall-msgs")
              R.N.StallMsgs = parseCount(A, Value());
            else if (A == "--pace-us")
              PaceUs = parseCount(A, Value());
            else if (A == "--churn-ms")
              ChurnMs = parseCount(A, Value());
            else
              return false;
            return true;
          }))
    return 0;
  if (!R.N.LatencyIters || !R.N.RateMsgs || !R.N.FirstContactTrials ||
      !R.N.Rounds || !R.N.StallMsgs || !PaceUs || !ChurnMs)
    die("tsi: --iters, --msgs, --trials, --rounds, --stall-msgs, --pace-us "
        "and --churn-ms must be at least 1");
  auto Want = [&](const char *M) {
    return std::find(Modes.begin(), Modes.end(), M) != Modes.end();
  };
  bool Perftest = Want("ucx_perftest") && !NoPerftest;
  selectTransport(O.Transport, /*Loopback=*/true);
  if ((Want("mailbox") || Want("ucx_put")) && !ConnectByAddress)
    note("tsi: mailbox and ucx_put need shared memory (--transport shm); "
         "not run");
  if (pinClientAndServer(O.Pin))
    note("tsi: server on CPU " + std::to_string(ServerCpu) + ", client on CPU " +
         std::to_string(ClientCpu));
  MpiPlace Place;
  Place.Transport = O.Transport;
  Place.Pin = ServerCpu >= 0;
  MpiReference Mpi(Place, O.MpiOsc, O.MpiTimeoutS);
  if (Want("mpi"))
    Mpi.check();
  std::string Self = selfPath();
  auto Serve = [&](std::vector<std::string> Extra, const std::string &Name) {
    std::vector<std::string> A = {Self, "serve", "--ifunc-path", O.IfuncPath};
    for (std::string &R : serveReach("127.0.0.1"))
      A.push_back(std::move(R));
    A.insert(A.end(), Extra.begin(), Extra.end());
    return startServer(A, "", Name);
  };

  // Steady state, in rounds: every mode and the ucx_perftest reference run
  // once per round, one after the other, and each figure is the median over
  // the rounds. A machine whose speed drifts (shared or virtual CPUs) then
  // shifts all modes alike instead of favouring whichever ran in a good
  // moment.
  size_t First = R.Out.size();
  for (uint64_t Round = 0; Round < R.N.Rounds; ++Round) {
    if (R.N.Rounds > 1)
      note("tsi: round " + std::to_string(Round + 1) + " of " +
           std::to_string(R.N.Rounds));
    if (Want("am") || Want("cached") || Want("cached-unbatched") ||
        Want("mailbox")) {
      Child S = Serve({}, "tsi server");
      if (Want("am"))
        steadyMode(R, "am", S, false, nullptr);
      if (Want("cached"))
        steadyMode(R, "cached", S, false, "tsi");
      if (Want("cached-unbatched"))
        steadyMode(R, "cached-unbatched", S, false, "tsi",
                   /*Coalesce=*/false);
      if (Want("mailbox") && ConnectByAddress)
        steadyMode(R, "mailbox", S, false, "tsi", /*Coalesce=*/true,
                   /*Mailbox=*/true);
      stopServer(S);
    }
    if (Want("uncached")) {
      Child S = Serve({"--ship", "always"}, "uncached tsi server");
      steadyMode(R, "uncached", S, true, "tsi");
      stopServer(S);
    }
    if (Want("object")) {
      Child S = Serve({"--exec", "object"}, "object tsi server");
      steadyMode(R, "object", S, false, "fca");
      stopServer(S);
    }
    if (Want("sandbox")) {
      // The cached TSI again, on a server whose ifuncs run sandboxed.
      Child S = Serve({"--exec", "sandbox"}, "sandboxed tsi server");
      steadyMode(R, "sandbox", S, false, "tsi");
      stopServer(S);
    }
    if (Want("stall")) {
      // The same target twice: compiling off its progress thread (the
      // default), and inside it (compile_thread = 0). It sleeps when idle, as
      // tc-serve does: on this 2-core machine a busy-polling target would
      // leave its compiles no CPU but the one its progress loop spins on
      // (docs/benchmarks.md).
      for (bool Sync : {false, true}) {
        std::vector<std::string> Args = {"--exec", "bitcode", "--max-loaded",
                                         "2"};
        if (!StallSpin)
          Args.push_back("--blocking");
        if (Sync)
          Args.push_back("--sync-compile");
        Child S = Serve(Args, "stall server");
        stallMode(R, Sync ? "stall-sync" : "stall", S,
                  static_cast<double>(PaceUs), static_cast<double>(ChurnMs));
        stopServer(S);
      }
    }
    if (Want("ucx_am")) {
      note("tsi ucx_am: latency and rate");
      PingPongStamps Stamps(R);
      Stamps.unlink();
      UcxAmFigures F = ucxAmTsi(R.N.Warmup, R.N.LatencyIters, R.N.RateMsgs,
                                Stamps.get());
      R.add("ucx_am", "latency_us", F.LatencyUs, "us");
      Stamps.report(R, "ucx_am", F.LatencyUs);
      R.add("ucx_am", "rate_msgs", F.Rate, "msgs/s");
      R.add("ucx_am", "frame_bytes", 5, "bytes"); // Function id + payload.
    }
    if (Want("ucx_put") && ConnectByAddress) {
      // The bytes a mailbox message puts: the slot header and the frame
      // (the cached frame, when the mailbox mode did not run).
      double Frame = 4;
      for (size_t I = First; I < R.Out.size(); ++I)
        if (R.Out[I].Mode == "mailbox" && R.Out[I].Metric == "frame_bytes")
          Frame = R.Out[I].Value;
      size_t Size = 16 + static_cast<size_t>(Frame + 0.5);
      note("tsi ucx_put: latency of " + std::to_string(Size) + "-byte puts");
      PingPongStamps Stamps(R);
      Stamps.unlink();
      double Lat =
          ucxPutLatency(R.N.Warmup, R.N.LatencyIters, Size, Stamps.get());
      R.add("ucx_put", "latency_us", Lat, "us");
      R.add("ucx_put", "frame_bytes", double(Size), "bytes");
      Stamps.report(R, "ucx_put", Lat);
    }
    if (Want("mpi")) {
      // The same increments with MPI one-sided operations, no tc server
      // running: a short probe of each osc component in the first round.
      auto Arg = [](uint64_t W, uint64_t I, uint64_t M) {
        return std::vector<std::string>{"--warmup", std::to_string(W),
                                        "--iters", std::to_string(I),
                                        "--msgs", std::to_string(M)};
      };
      for (Record &X : Mpi.run(
               "tsi", 2, Arg(R.N.Warmup, R.N.LatencyIters, R.N.RateMsgs),
               Arg(std::min<uint64_t>(R.N.Warmup, 50),
                   std::min<uint64_t>(R.N.LatencyIters, 300),
                   std::min<uint64_t>(R.N.RateMsgs, 2000)),
               "tsi"))
        R.Out.push_back(X);
    }
    // UCX's messages are the size of a cached frame (which is the same for
    // every steady mode but uncached; see docs/wire-format.md).
    double CachedBytes = 4;
    for (size_t I = First; I < R.Out.size(); ++I)
      if (R.Out[I].Mode == "cached" && R.Out[I].Metric == "frame_bytes")
        CachedBytes = R.Out[I].Value;
    if (Perftest && Round == 0 && !havePerftest()) {
      note("ucx_perftest not found (package ucx-utils); no UCX reference");
      Perftest = false;
    }
    if (Perftest)
      perftest(R, CachedBytes);
  }
  // Ratios of figures taken in the same round, before the rounds merge.
  const char *const References[] = {"am", "ucx_am", "ucx_perftest"};
  constexpr size_t NumReferences = std::size(References);
  // Rates as well as latencies: the machine's speed can move between the
  // modes of one run (on a VM, ucx_am's rate has moved 3x within minutes),
  // and #18's targets are paired ratios.
  double Paired[NumReferences], PairedRate[NumReferences],
      PairedUnbatched[NumReferences];
  for (size_t I = 0; I < NumReferences; ++I) {
    Paired[I] =
        pairedRatio(R.Out, First, "cached", References[I], "latency_us");
    PairedRate[I] =
        pairedRatio(R.Out, First, "cached", References[I], "rate_msgs");
    PairedUnbatched[I] = pairedRatio(R.Out, First, "cached-unbatched",
                                     References[I], "rate_msgs");
  }
  double MailboxPut =
      pairedRatio(R.Out, First, "mailbox", "ucx_put", "latency_us");
  double MailboxAm =
      pairedRatio(R.Out, First, "mailbox", "ucx_am", "latency_us");
  double MailboxAmRate =
      pairedRatio(R.Out, First, "mailbox", "ucx_am", "rate_msgs");
  double SandboxLat =
      pairedRatio(R.Out, First, "sandbox", "cached", "latency_us");
  double SandboxRate =
      pairedRatio(R.Out, First, "cached", "sandbox", "rate_msgs");
  // tc's cached and mailbox modes over each MPI row (mpi_OP:OSC).
  struct MpiPair {
    std::string Tc, Mpi, Metric;
    double Paired;
  };
  std::vector<MpiPair> MpiPairs;
  for (size_t I = First; I < R.Out.size(); ++I) {
    const Record &X = R.Out[I];
    if (!isMpiMode(X.Mode) ||
        (X.Metric != "latency_us" && X.Metric != "rate_msgs"))
      continue;
    for (const char *Tc : {"cached", "mailbox"}) {
      bool Seen = false;
      for (const MpiPair &Q : MpiPairs)
        Seen |= Q.Tc == Tc && Q.Mpi == X.Mode && Q.Metric == X.Metric;
      if (!Seen)
        MpiPairs.push_back(
            {Tc, X.Mode, X.Metric,
             pairedRatio(R.Out, First, Tc, X.Mode, X.Metric)});
    }
  }
  medianOfRounds(R.Out, First);
  // --json and --csv carry the paired ratios as records of their own, mode
  // NUM/DEN, unit "x" (scripts/bench-tables.py renders them); the table
  // prints them as lines below.
  if (O.Fmt != Format::Table) {
    auto Ratio = [&](const std::string &Num, const std::string &Den,
                     const char *Metric, double V) {
      if (V > 0)
        R.add(Num + "/" + Den, Metric, V, "x");
    };
    for (size_t I = 0; I < NumReferences; ++I) {
      Ratio("cached", References[I], "latency_ratio", Paired[I]);
      Ratio("cached", References[I], "rate_ratio", PairedRate[I]);
      Ratio("cached-unbatched", References[I], "rate_ratio",
            PairedUnbatched[I]);
    }
    Ratio("mailbox", "ucx_put", "latency_ratio", MailboxPut);
    Ratio("mailbox", "ucx_am", "latency_ratio", MailboxAm);
    Ratio("mailbox", "ucx_am", "rate_ratio", MailboxAmRate);
    Ratio("sandbox", "cached", "latency_ratio", SandboxLat);
    Ratio("cached", "sandbox", "rate_ratio", SandboxRate);
    // tc over MPI RMA: cached/mpi_acc:sm, mailbox/mpi_fop:ucx, ...
    for (const MpiPair &Q : MpiPairs)
      Ratio(Q.Tc, Q.Mpi,
            Q.Metric == "latency_us" ? "latency_ratio" : "rate_ratio",
            Q.Paired);
  }

  if (Want("first-contact")) {
    char Tmpl[] = "/tmp/tc-bench-cache-XXXXXX";
    if (!mkdtemp(Tmpl))
      die("cannot create a temporary cache directory");
    std::string CacheDir = Tmpl;
    auto Probe = [&](const std::string &Mode, std::vector<std::string> Args) {
      if (SyncCompile)
        Args.push_back("--sync-compile");
      Child S = Serve(Args, "first-contact server");
      firstContact(R, Mode, S);
      stopServer(S);
    };
    Probe("jit", {"--exec", "bitcode", "--prewarm"});
    Probe("object", {"--exec", "object", "--prewarm"});
    Probe("disk-cache", {"--exec", "bitcode", "--cache-dir", CacheDir,
                          "--prewarm"});
    std::system(("rm -rf '" + CacheDir + "'").c_str());
  }

  // Ratios against the baselines measured above, for the reader.
  auto Find = [&](const std::string &Mode, const std::string &Metric) {
    for (const Record &X : R.Out)
      if (X.Mode == Mode && X.Metric == Metric)
        return X.Value;
    return 0.0;
  };
  printRecords(R.Out, O.Fmt);
  if (O.Fmt == Format::Table) {
    // "paired": the median over rounds of each round's own ratio.
    double Ca = Find("cached", "latency_us");
    for (size_t I = 0; I < NumReferences && Ca; ++I) {
      double Lat = Find(References[I], "latency_us");
      double Rate = Find(References[I], "rate_msgs");
      if (!Lat)
        continue;
      std::printf("\ncached/%s latency %.3f (paired %.3f)", References[I],
                  Ca / Lat, Paired[I]);
      if (!Rate)
        continue;
      std::printf(", rate %.3f (paired %.3f)",
                  Find("cached", "rate_msgs") / Rate, PairedRate[I]);
      if (double Unbatched = Find("cached-unbatched", "rate_msgs"))
        std::printf(", unbatched rate %.3f (paired %.3f)", Unbatched / Rate,
                    PairedUnbatched[I]);
    }
    if (double U = Find("uncached", "latency_us"); U && Ca)
      std::printf("\nuncached/cached latency %.3f", U / Ca);
    if (double Mb = Find("mailbox", "latency_us")) {
      if (double Put = Find("ucx_put", "latency_us"))
        std::printf("\nmailbox/ucx_put latency %.3f (paired %.3f)",
                    Mb / Put, MailboxPut);
      if (double Am = Find("ucx_am", "latency_us"))
        std::printf("\nmailbox/ucx_am latency %.3f (paired %.3f), rate "
                    "%.3f (paired %.3f)",
                    Mb / Am, MailboxAm,
                    Find("mailbox", "rate_msgs") / Find("ucx_am", "rate_msgs"),
                    MailboxAmRate);
    }
    if (Find("sandbox", "latency_us"))
      std::printf("\nsandbox/cached latency %.3f (paired), cached/sandbox "
                  "rate %.3f (paired)",
                  SandboxLat, SandboxRate);
    // Against MPI RMA: tc/MPI for latencies (below 1: tc is faster), rates
    // likewise (above 1: tc is faster).
    for (const MpiPair &Q : MpiPairs)
      if (double Tc = Find(Q.Tc, Q.Metric))
        std::printf("\n%s/%s %s %.3f (paired %.3f)", Q.Tc.c_str(),
                    Q.Mpi.c_str(),
                    Q.Metric == "latency_us" ? "latency" : "rate",
                    Tc / Find(Q.Mpi, Q.Metric), Q.Paired);
    std::printf("\n");
  }
  if (O.Fmt == Format::Table && Want("stall"))
    std::printf("\ncached stream p99 with another client's first contacts / "
                "without: %.3f compiling off the progress thread, %.3f on it "
                "(stall, stall-sync: medians of the rounds' ratios)\n",
                Find("stall", "p99_ratio"), Find("stall-sync", "p99_ratio"));
  // Which osc components mode mpi tried, and what each measured.
  if (O.Fmt == Format::Table)
    std::fputs(Mpi.summary().c_str(), stdout);
  return 0;
}

} // namespace bench
