//===- Bench.h - Shared pieces of tc-bench -----------------------*- C++ -*-===//
//
// tc-bench is one binary with a client per scenario (tsi, dapc, sss, iput)
// and a server role (`tc-bench serve`) the clients start as processes. This
// header holds what both sides and the scenario files share: results,
// process control, waiting with deadlines, the control messages a client
// sends its servers, and the server statistics they answer with.
//
// Everything is written against libtc's public C API, as a user would.
//
//===----------------------------------------------------------------------===//

#ifndef TC_EXAMPLES_BENCH_BENCH_H
#define TC_EXAMPLES_BENCH_BENCH_H

#include "tc/tc.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace bench {

//--- Results -----------------------------------------------------------===//

/// One figure: the JSON/CSV record the plotting script reads.
struct Record {
  std::string Bench, Mode, Metric;
  double Value = 0;
  std::string Unit;
  std::string Transport; ///< shm | tcp | "" (not applicable)
  long Servers = -1, Depth = -1, PayloadBytes = -1; ///< -1: not applicable
  long Ranks = -1;  ///< kv: the job's ranks (-1: not applicable)
  std::string Osc;  ///< kv's MPI modes: the component measured ("": none)
};

/// BENCH's MODE measured METRIC = VALUE UNIT (over TRANSPORT); the callers
/// set the points (Servers, Depth, PayloadBytes) that apply.
inline Record record(std::string Bench, std::string Mode, std::string Metric,
                     double Value, std::string Unit,
                     std::string Transport = "") {
  Record R;
  R.Bench = std::move(Bench);
  R.Mode = std::move(Mode);
  R.Metric = std::move(Metric);
  R.Value = Value;
  R.Unit = std::move(Unit);
  R.Transport = std::move(Transport);
  return R;
}

enum class Format { Table, Json, Csv };

void printRecords(const std::vector<Record> &Rs, Format F);

//--- Errors, signals, time ---------------------------------------------===//

/// Prints `tc-bench: error: MSG`, stops every server this process started,
/// and exits 1.
[[noreturn]] void die(const std::string &Msg);
/// A line on stderr when progress is worth showing (not with --quiet).
void note(const std::string &Msg);
extern bool Quiet;

/// Set by SIGINT/SIGTERM; every wait loop checks it and dies cleanly.
extern std::atomic<bool> Interrupted;
/// Set with Interrupted, and when a child process ends: the one load
/// checkInterruptsAndServers() makes when nothing happened.
extern std::atomic<bool> Attention;
void installSignalHandlers();
/// Dies if interrupted, or if a server this process started has ended
/// (reaping it). Clears Attention.
void attend();
/// An ended, unreaped server keeps its UCX peers waiting (UCX's keepalive
/// still finds a zombie's /proc entry): every wait loop and the rate loop
/// call this, which dies if tc-bench was interrupted or a server ended.
inline void checkInterruptsAndServers() {
  if (Attention.load(std::memory_order_relaxed))
    attend();
}

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point T0);

/// A timeout for wait loops that starts at the first check, not at entry:
/// a wait that ends before it checks reads no clock (a clock read costs
/// ~30 ns here, a tenth of a one-way message, and ping-pong waits begin on
/// every message).
class Deadline {
public:
  /// True once \p Seconds have passed since the first call.
  bool passed(double Seconds) {
    if (!Started) {
      Started = true;
      T0 = Clock::now();
      return false;
    }
    return secondsSince(T0) > Seconds;
  }

private:
  bool Started = false;
  Clock::time_point T0;
};

/// Progresses \p W until \p Done() or \p TimeoutS seconds pass (then dies
/// saying \p What). Busy-polls, as latency measurements need.
void waitFor(tc_worker_h W, const std::function<bool()> &Done,
             const std::string &What, double TimeoutS = 60);

//--- Processes ---------------------------------------------------------===//

/// A server process this process started (ended by PID when we exit).
struct Child {
  pid_t Pid = -1;
  std::string Host;
  uint16_t Port = 0;
  std::string Address; ///< Its UCX worker address, hex (tc-bench serve).
  int Rank = -1; ///< A rank of our PMIx job instead (tc-bench dapc --pmix).
  std::string Name; ///< For messages.
  int Out = -1;     ///< Its stdout, read until "listening on".
};

/// Starts \p Argv (inside network namespace \p Netns when not empty) and
/// waits up to 60 s for a line containing `listening on HOST:PORT`.
Child startServer(const std::vector<std::string> &Argv,
                  const std::string &Netns, const std::string &Name);
/// In a forked child: runs \p Argv (PATH searched); if that fails, says so
/// on stderr and exits 127.
[[noreturn]] void execArgv(const std::vector<std::string> &Argv);
/// fork(), dying on failure; the child gets SIGTERM when this process ends
/// (even if it is killed without a chance to clean up), and exits at once
/// if this process has ended already.
pid_t forkTied();
/// SIGTERM, wait (SIGKILL after 5 s), forget.
void stopServer(Child &C);
/// stopServer(), returning what \p C printed after its last read (at
/// most \p TimeoutS seconds for it to end and say it).
std::string stopServerCollect(Child &C, double TimeoutS = 10);
void stopAllServers();

/// Two-process scenarios (tsi, sss, iput) pin the server to one CPU and
/// this process to another, as ucx_perftest pins its two sides (-c): the
/// reference and tc are measured under the same placement. Returns false
/// (and pins nothing) when fewer than two CPUs are allowed or \p Enable is
/// false. startServer() applies ServerCpu to the servers it starts.
bool pinClientAndServer(bool Enable);
/// CPU for servers started from now on, or -1; and the one we run on.
extern int ServerCpu, ClientCpu;
/// A second CPU servers started from now on may use beside ServerCpu, or
/// -1 (a GPU target's worker process, which inherits the server's).
extern int ServerCpu2;

/// This executable's path (to start `tc-bench serve`).
std::string selfPath();
/// The directory of the example archives: --ifunc-path, $TC_IFUNC_PATH,
/// else build/ifuncs next to this binary's bin/.
std::string defaultIfuncPath();

//--- Control messages (local functions on the servers) -----------------===//

/// bench.pong: after each benchmark message, answer the sender with one TSI
/// (mode 1: a local invoke, mode 2: the TSI ifunc) or not (0).
enum PongMode : uint32_t { PongOff = 0, PongLocal = 1, PongIfunc = 2 };

/// What bench.stats answers (as a bench.stats local invoke).
struct ServerStats {
  tc_worker_stats_t Worker;
  uint64_t Tsi;          ///< TSI counter (tsi, fca, fcb ifuncs and local)
  uint64_t Probes;       ///< fsa, fsb runs (not in Tsi: they send no pong)
  uint64_t SssCount, SssSum;
  uint64_t IputCount, IputRejected, IputHash; ///< hash of the buffer
  uint64_t DapcHops;
};

/// bench.dapc: the shard to build and the peers to connect to. Followed by
/// the ':'-free, ','-separated list of every server's HOST:PORT.
struct DapcSetup {
  uint64_t Entries, Seed;
  uint32_t Servers, Self;
};

/// FNV-1a over a buffer (the iput check).
uint64_t fnv1a(const void *P, size_t N);

//--- Options shared by the scenarios -----------------------------------===//

struct CommonOptions {
  std::string Transport = "shm";
  bool Quick = false;
  Format Fmt = Format::Table;
  std::string IfuncPath;
  std::string HostsFile;
  bool Pin = true; ///< --no-pin clears it.
  std::string MpiOsc;        ///< --mpi-osc: mode mpi's candidates
  double MpiTimeoutS = 0;    ///< --mpi-timeout (set in main)
};

/// Sets UCX_TLS (and UCX_NET_DEVICES for loopback TCP) for \p Transport
/// in this process and the servers it starts, unless the user set them.
/// Over shared memory, tc-bench connects by worker address (exchanged
/// through the servers' stdout, as ucx_perftest exchanges them through its
/// own socket), so UCX needs no TCP transport: with tcp in UCX_TLS every
/// progress call also polls the TCP interface, which costs microseconds
/// (ucx_perftest's own AM latency here: 0.6 us without, 3.4 us with).
void selectTransport(const std::string &Transport, bool Loopback);
/// True when clients and servers connect by worker address.
extern bool ConnectByAddress;
/// How a `tc-bench serve` started on \p Host is reached: by its worker
/// address when ConnectByAddress (no listener: over shared memory UCX has
/// no transport a HOST:PORT listener could use, and libtc refuses one),
/// else a listener on \p Host, any port.
std::vector<std::string> serveReach(const std::string &Host);
/// False with --no-mailbox: clients and the tc-bench servers started keep
/// to active messages (tc_worker_params_t::mailbox = 0).
extern bool Mailboxes;
/// UCX_TLS for programs that connect by HOST:PORT (tc-gbpc) when it differs
/// from ours; empty otherwise.
extern std::string ClientServerTls;
/// How a server is named in a bench.dapc setup: HOST:PORT, @HEXADDRESS or
/// #RANK (a rank of the PMIx job both belong to).
std::string connectString(const Child &S);
/// Connects \p W to a connectString().
tc_status_t connectString(tc_worker_h W, const std::string &To, tc_ep_h *Ep);

/// A client's worker: connects, receives pongs/results/stats.
struct ClientWorker {
  tc_context_h Ctx = nullptr;
  tc_worker_h W = nullptr;
  uint64_t Counter = 0; ///< Pongs received (TSI target_args).
  ServerStats Stats{};
  bool HaveStats = false;
  ~ClientWorker();
};

/// Creates a client worker; \p ShipAlways attaches the archive to every
/// message (the "uncached" mode); \p Coalesce false sends every message as
/// its own UCX active message (tc_worker_params_t::coalesce); \p Mailbox
/// false keeps the client's messages and the answers to them on active
/// messages (tc_worker_params_t::mailbox).
void makeClient(ClientWorker &C, const std::string &IfuncPath,
                bool ShipAlways, bool Coalesce = true, bool Pmix = false,
                bool Mailbox = Mailboxes);
tc_ep_h connectTo(ClientWorker &C, const Child &S);
tc_ifunc_h registerIfunc(ClientWorker &C, const char *Name);
/// Sends a control message and waits until the server processed it.
void control(ClientWorker &C, tc_ep_h Ep, const char *Name, const void *P,
             size_t N);
ServerStats queryStats(ClientWorker &C, tc_ep_h Ep);
void flush(ClientWorker &C, tc_ep_h Ep);

/// Walks a scenario's own arguments: `--help` prints \p Usage and returns
/// false (the caller then exits 0); every other flag goes to \p Take with a
/// function that fetches the flag's value (dying when there is none). A flag
/// \p Take does not know (it returns false) is an error naming \p Scenario.
bool walkArgs(
    const std::string &Scenario, const std::vector<std::string> &Args,
    const char *Usage,
    const std::function<bool(const std::string &Flag,
                             const std::function<std::string()> &)> &Take);

struct HopStamps;
/// Ping-pong with the server answering each message (bench.pong \p Pong):
/// returns the one-way latency in microseconds over \p Iters round trips
/// after \p Warmup untimed ones. With \p Stamps, the client stamps every
/// round trip into it (Stamps.h).
double pingPong(ClientWorker &C, tc_ep_h Ep, uint32_t Pong,
                const std::function<void()> &Send, uint64_t Warmup,
                uint64_t Iters, HopStamps *Stamps = nullptr);
/// \p Msgs back-to-back sends ended by a flush: messages per second.
double rate(ClientWorker &C, tc_ep_h Ep, const std::function<void()> &Send,
            uint64_t Msgs);

//--- Scenarios ---------------------------------------------------------===//

int runServer(int Argc, char **Argv);
int runTsi(const CommonOptions &O, const std::vector<std::string> &Args);
int runDapc(const CommonOptions &O, const std::vector<std::string> &Args);
int runKv(const CommonOptions &O, const std::vector<std::string> &Args);
int runSweep(const std::string &Which, const CommonOptions &O,
             const std::vector<std::string> &Args);
/// tsi --gpu and sss --gpu (Gpu.cpp): GPU targets against the CUDA driver.
bool wantsGpu(const std::vector<std::string> &Args);
int runGpu(const std::string &Scenario, const CommonOptions &O,
           const std::vector<std::string> &Args);

/// Median of \p V (sorted in place).
double median(std::vector<double> &V);
/// The spread of \p V: (max - min) / median, in percent (0 for fewer than
/// two figures or a zero median).
double spreadPercent(std::vector<double> V);
/// TSI over UCX's own active messages, in this process and a forked one
/// (UcxAm.cpp): one-way latency over \p Iters ping-pongs after \p Warmup,
/// and the rate of \p Msgs back-to-back messages. Dies on any failure.
struct UcxAmFigures {
  double LatencyUs = 0, Rate = 0;
};
/// With \p Stamps, both processes stamp every ping-pong round trip into it.
UcxAmFigures ucxAmTsi(uint64_t Warmup, uint64_t Iters, uint64_t Msgs,
                      HopStamps *Stamps = nullptr);
/// A one-sided put ping-pong on raw UCX (UcxPut.cpp): the one-way latency
/// of a put of \p Size bytes, as ucx_perftest's put latency test measures;
/// \p Stamps as for ucxAmTsi().
double ucxPutLatency(uint64_t Warmup, uint64_t Iters, size_t Size,
                     HopStamps *Stamps = nullptr);
/// sss (\p Sum) or iput over UCX's own active messages (UcxAmSweep.cpp):
/// \p Size bytes of \p Payload per message, latency and rate as for
/// ucxAmTsi. \p Stats gets the server's sss or iput fields (counters, sum,
/// buffer hash) for the caller to check. Dies on any failure.
UcxAmFigures ucxAmSweep(bool Sum, const void *Payload, size_t Size,
                        uint64_t Warmup, uint64_t Iters, uint64_t Msgs,
                        ServerStats &Stats);

/// Parses a non-negative integer, or dies naming \p Flag.
uint64_t parseCount(const std::string &Flag, const std::string &V);
std::vector<uint64_t> parseList(const std::string &Flag, const std::string &V);

} // namespace bench

extern "C" {
// The example ifuncs, compiled natively into tc-bench: the "local" (active
// message) baseline runs exactly the code the ifuncs ship.
void tsi_main(void *payload, size_t payload_size, void *target_args);
void sss_main(void *payload, size_t payload_size, void *target_args);
void iput_main(void *payload, size_t payload_size, void *target_args);
void dapc_result_main(void *payload, size_t payload_size, void *target_args);
// Their target_args (examples/sss/sss.c, examples/iput/iput.c): the counter
// every benchmark target keeps first, then the function's state.
typedef struct sss_target {
  uint64_t count;
  uint64_t sum;
} sss_target_t;
typedef struct iput_target {
  uint64_t count;
  unsigned char *base;
  uint64_t size;
  uint64_t rejected;
} iput_target_t;
}

#endif // TC_EXAMPLES_BENCH_BENCH_H
