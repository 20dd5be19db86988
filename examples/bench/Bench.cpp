//===- Bench.cpp - tc-bench's entry point and shared helpers --------------===//

#include "Bench.h"
#include "Stamps.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <regex>
#include <sstream>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace bench {

bool Quiet = false;
bool ConnectByAddress = false;
bool Mailboxes = true;
std::string ClientServerTls;
std::atomic<bool> Interrupted{false};
/// Set by SIGCHLD: some child process ended (maybe a server).
static std::atomic<bool> ChildEnded{false};
std::atomic<bool> Attention{false};
static std::vector<Child *> Running;
static std::vector<pid_t> RunningPids;

//--- Output ------------------------------------------------------------===//

static std::string jsonString(const std::string &S) {
  std::string Out = "\"";
  for (char C : S) {
    if (C == '"' || C == '\\')
      Out += '\\';
    Out += C;
  }
  return Out + "\"";
}

static std::string number(double V) {
  char Buf[64];
  std::snprintf(Buf, sizeof Buf, "%.6g", V);
  return Buf;
}

void printRecords(const std::vector<Record> &Rs, Format F) {
  if (F == Format::Json) {
    std::printf("[");
    for (size_t I = 0; I < Rs.size(); ++I) {
      const Record &R = Rs[I];
      std::printf("%s\n {\"bench\":%s,\"mode\":%s,\"metric\":%s,\"value\":%s,"
                  "\"unit\":%s",
                  I ? "," : "", jsonString(R.Bench).c_str(),
                  jsonString(R.Mode).c_str(), jsonString(R.Metric).c_str(),
                  number(R.Value).c_str(), jsonString(R.Unit).c_str());
      if (!R.Transport.empty())
        std::printf(",\"transport\":%s", jsonString(R.Transport).c_str());
      if (R.Servers >= 0)
        std::printf(",\"servers\":%ld", R.Servers);
      if (R.Depth >= 0)
        std::printf(",\"depth\":%ld", R.Depth);
      if (R.PayloadBytes >= 0)
        std::printf(",\"payload_bytes\":%ld", R.PayloadBytes);
      if (R.Ranks >= 0)
        std::printf(",\"ranks\":%ld", R.Ranks);
      if (!R.Osc.empty())
        std::printf(",\"osc\":%s", jsonString(R.Osc).c_str());
      std::printf("}");
    }
    std::printf("\n]\n");
    return;
  }
  auto Opt = [](long V) { return V < 0 ? std::string() : std::to_string(V); };
  // The kv columns (ranks, osc) only when some record has them.
  bool Kv = std::any_of(Rs.begin(), Rs.end(), [](const Record &R) {
    return R.Ranks >= 0 || !R.Osc.empty();
  });
  if (F == Format::Csv) {
    std::printf("bench,mode,metric,value,unit,transport,servers,depth,"
                "payload_bytes%s\n",
                Kv ? ",ranks,osc" : "");
    for (const Record &R : Rs) {
      std::printf("%s,%s,%s,%s,%s,%s,%s,%s,%s", R.Bench.c_str(),
                  R.Mode.c_str(), R.Metric.c_str(), number(R.Value).c_str(),
                  R.Unit.c_str(), R.Transport.c_str(), Opt(R.Servers).c_str(),
                  Opt(R.Depth).c_str(), Opt(R.PayloadBytes).c_str());
      if (Kv)
        std::printf(",%s,%s", Opt(R.Ranks).c_str(), R.Osc.c_str());
      std::printf("\n");
    }
    return;
  }
  std::printf("%-6s %-12s %-17s %14s %-9s %-5s %7s %6s %8s", "bench", "mode",
              "metric", "value", "unit", "tr", "servers", "depth", "payload");
  std::printf("%s\n", Kv ? " ranks osc" : "");
  for (const Record &R : Rs) {
    std::printf("%-6s %-12s %-17s %14s %-9s %-5s %7s %6s %8s",
                R.Bench.c_str(), R.Mode.c_str(), R.Metric.c_str(),
                number(R.Value).c_str(), R.Unit.c_str(), R.Transport.c_str(),
                Opt(R.Servers).c_str(), Opt(R.Depth).c_str(),
                Opt(R.PayloadBytes).c_str());
    if (Kv)
      std::printf(" %5s %s", Opt(R.Ranks).c_str(), R.Osc.c_str());
    std::printf("\n");
  }
}

//--- Errors, signals, time ---------------------------------------------===//

void die(const std::string &Msg) {
  std::fflush(stdout);
  std::fprintf(stderr, "tc-bench: error: %s\n", Msg.c_str());
  stopAllServers();
  std::exit(1);
}

void note(const std::string &Msg) {
  if (!Quiet)
    std::fprintf(stderr, "tc-bench: %s\n", Msg.c_str());
}

extern "C" void benchOnSignal(int) {
  Interrupted = true;
  Attention = true;
}
extern "C" void benchOnChild(int) {
  ChildEnded = true;
  Attention = true;
}

void installSignalHandlers() {
  struct sigaction SA {};
  SA.sa_handler = benchOnSignal;
  sigemptyset(&SA.sa_mask);
  sigaction(SIGINT, &SA, nullptr);
  sigaction(SIGTERM, &SA, nullptr);
  struct sigaction Child {};
  Child.sa_handler = benchOnChild;
  sigemptyset(&Child.sa_mask);
  Child.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &Child, nullptr);
  // A server that dies must not kill us through a broken pipe.
  signal(SIGPIPE, SIG_IGN);
}

double secondsSince(Clock::time_point T0) {
  return std::chrono::duration<double>(Clock::now() - T0).count();
}

void attend() {
  // Cleared first: a signal during the checks sets it again.
  Attention = false;
  if (Interrupted)
    die("interrupted");
  if (!ChildEnded)
    return;
  ChildEnded = false;
  for (pid_t P : RunningPids) {
    int Status;
    if (waitpid(P, &Status, WNOHANG) != P)
      continue; // Running, or some other child (ucx_perftest, a pair).
    RunningPids.erase(std::remove(RunningPids.begin(), RunningPids.end(), P),
                      RunningPids.end());
    die("server process " + std::to_string(P) +
        (WIFSIGNALED(Status)
             ? " was killed by signal " + std::to_string(WTERMSIG(Status))
             : " exited with status " + std::to_string(WEXITSTATUS(Status))) +
        " while the client was running");
  }
}

void waitFor(tc_worker_h W, const std::function<bool()> &Done,
             const std::string &What, double TimeoutS) {
  Deadline D;
  for (unsigned I = 0; !Done(); ++I) {
    tc_worker_progress(W);
    if ((I & 1023) == 1023) {
      checkInterruptsAndServers();
      if (D.passed(TimeoutS))
        die("timed out after " + number(TimeoutS) + " s waiting for " + What);
    }
  }
}

double median(std::vector<double> &V) {
  if (V.empty())
    return 0;
  std::sort(V.begin(), V.end());
  size_t M = V.size() / 2;
  return V.size() % 2 ? V[M] : (V[M - 1] + V[M]) / 2;
}

double spreadPercent(std::vector<double> V) {
  double Mid = median(V); // Sorts V.
  if (V.size() < 2 || Mid <= 0)
    return 0;
  return (V.back() - V.front()) / Mid * 100;
}

uint64_t parseCount(const std::string &Flag, const std::string &V) {
  if (V.empty() || V.find_first_not_of("0123456789") != std::string::npos ||
      V.size() > 19)
    die("bad value '" + V + "' for " + Flag + " (expected a number)");
  return std::strtoull(V.c_str(), nullptr, 10);
}

std::vector<uint64_t> parseList(const std::string &Flag,
                                const std::string &V) {
  std::vector<uint64_t> Out;
  size_t Pos = 0;
  while (Pos <= V.size()) {
    size_t Comma = V.find(',', Pos);
    if (Comma == std::string::npos)
      Comma = V.size();
    Out.push_back(parseCount(Flag, V.substr(Pos, Comma - Pos)));
    Pos = Comma + 1;
  }
  return Out;
}

uint64_t fnv1a(const void *P, size_t N) {
  uint64_t H = 0xcbf29ce484222325ULL;
  for (size_t I = 0; I < N; ++I) {
    H ^= static_cast<const unsigned char *>(P)[I];
    H *= 0x100000001b3ULL;
  }
  return H;
}

//--- Processes ---------------------------------------------------------===//

std::string selfPath() {
  char Buf[PATH_MAX];
  ssize_t N = readlink("/proc/self/exe", Buf, sizeof Buf - 1);
  if (N <= 0)
    die("cannot find this executable: readlink /proc/self/exe failed");
  return std::string(Buf, N);
}

std::string defaultIfuncPath() {
  if (const char *E = std::getenv("TC_IFUNC_PATH"))
    return E;
  std::string Self = selfPath();
  std::string Dir = Self.substr(0, Self.rfind('/')); // .../bin
  return Dir.substr(0, Dir.rfind('/')) + "/ifuncs";
}

int ServerCpu = -1, ClientCpu = -1, ServerCpu2 = -1;

bool pinClientAndServer(bool Enable) {
  ServerCpu = ClientCpu = -1;
  cpu_set_t Set;
  if (!Enable || sched_getaffinity(0, sizeof Set, &Set) != 0 ||
      CPU_COUNT(&Set) < 2)
    return false;
  int Found[2], N = 0;
  for (int Cpu = 0; Cpu < CPU_SETSIZE && N < 2; ++Cpu)
    if (CPU_ISSET(Cpu, &Set))
      Found[N++] = Cpu;
  cpu_set_t Mine;
  CPU_ZERO(&Mine);
  CPU_SET(Found[1], &Mine);
  if (sched_setaffinity(0, sizeof Mine, &Mine) != 0)
    return false;
  ServerCpu = Found[0];
  ClientCpu = Found[1];
  return true;
}

void execArgv(const std::vector<std::string> &Argv) {
  std::vector<char *> A;
  for (const std::string &S : Argv)
    A.push_back(const_cast<char *>(S.c_str()));
  A.push_back(nullptr);
  execvp(A[0], A.data());
  std::fprintf(stderr, "tc-bench: error: cannot run %s: %s\n", A[0],
               std::strerror(errno));
  _exit(127);
}

pid_t forkTied() {
  pid_t Parent = getpid();
  pid_t Pid = fork();
  if (Pid < 0)
    die(std::string("fork: ") + std::strerror(errno));
  if (Pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != Parent)
      _exit(1);
  }
  return Pid;
}

Child startServer(const std::vector<std::string> &Argv,
                  const std::string &Netns, const std::string &Name) {
  std::vector<std::string> Full;
  if (!Netns.empty())
    Full = {"ip", "netns", "exec", Netns};
  // TC_BENCH_SERVER_WRAPPER="valgrind --tool=callgrind ..." runs every
  // server under a tool (docs/benchmarks.md, "Counting instructions").
  if (const char *Wrap = std::getenv("TC_BENCH_SERVER_WRAPPER")) {
    std::istringstream Words(Wrap);
    for (std::string W; Words >> W;)
      Full.push_back(W);
  }
  Full.insert(Full.end(), Argv.begin(), Argv.end());
  if (!Mailboxes && Argv.size() > 1 && Argv[1] == "serve")
    Full.push_back("--no-mailbox");
  int Pipe[2];
  if (pipe2(Pipe, O_CLOEXEC) != 0)
    die(std::string("pipe: ") + std::strerror(errno));
  pid_t Pid = forkTied();
  if (Pid == 0) {
    if (ServerCpu >= 0) {
      cpu_set_t Set;
      CPU_ZERO(&Set);
      CPU_SET(ServerCpu, &Set);
      if (ServerCpu2 >= 0)
        CPU_SET(ServerCpu2, &Set);
      sched_setaffinity(0, sizeof Set, &Set);
    }
    dup2(Pipe[1], STDOUT_FILENO);
    execArgv(Full);
  }
  close(Pipe[1]);
  RunningPids.push_back(Pid);
  Child C;
  C.Pid = Pid;
  C.Out = Pipe[0];
  C.Name = Name;
  static const std::regex Ready("listening on (\\S+):(\\d+)");
  static const std::regex ReadyByAddress("ready, by worker address only");
  static const std::regex Address("worker address ([0-9a-f]+)");
  std::string Buf;
  auto T0 = Clock::now();
  while (true) {
    size_t NL;
    while ((NL = Buf.find('\n')) != std::string::npos) {
      std::string Line = Buf.substr(0, NL);
      Buf.erase(0, NL + 1);
      std::smatch M;
      if (std::regex_search(Line, M, Address))
        C.Address = M[1];
      if (std::regex_search(Line, M, Ready)) {
        C.Host = M[1];
        C.Port = static_cast<uint16_t>(std::stoul(M[2]));
        return C;
      }
      if (std::regex_search(Line, ReadyByAddress) && !C.Address.empty())
        return C;
    }
    if (Interrupted)
      die("interrupted");
    double Left = 60 - secondsSince(T0);
    if (Left <= 0)
      die(Name + " did not say 'listening on' within 60 s");
    pollfd P{C.Out, POLLIN, 0};
    int RC = poll(&P, 1, static_cast<int>(std::min(Left, 0.5) * 1000) + 1);
    if (RC < 0 && errno != EINTR)
      die(std::string("poll: ") + std::strerror(errno));
    if (RC <= 0)
      continue;
    char Chunk[4096];
    ssize_t N = read(C.Out, Chunk, sizeof Chunk);
    if (N <= 0) {
      int Status = 0;
      waitpid(Pid, &Status, 0);
      RunningPids.erase(
          std::remove(RunningPids.begin(), RunningPids.end(), Pid),
          RunningPids.end());
      die(Name + " exited before it was ready (status " +
          std::to_string(WIFEXITED(Status) ? WEXITSTATUS(Status)
                                           : 128 + WTERMSIG(Status)) +
          ")" + (Buf.empty() ? "" : ": " + Buf));
    }
    Buf.append(Chunk, N);
  }
}

static void endPid(pid_t Pid) {
  kill(Pid, SIGTERM);
  kill(Pid, SIGCONT); // A stopped server takes the SIGTERM only once it runs.
  auto T0 = Clock::now();
  int Status;
  while (waitpid(Pid, &Status, WNOHANG) == 0) {
    if (secondsSince(T0) > 5) {
      kill(Pid, SIGKILL);
      waitpid(Pid, &Status, 0);
      break;
    }
    usleep(1000); // Polling for an exit; not a synchronisation point.
  }
}

void stopServer(Child &C) {
  if (C.Pid <= 0)
    return;
  endPid(C.Pid);
  RunningPids.erase(std::remove(RunningPids.begin(), RunningPids.end(), C.Pid),
                    RunningPids.end());
  if (C.Out >= 0)
    close(C.Out);
  C.Pid = -1;
  C.Out = -1;
}

std::string stopServerCollect(Child &C, double TimeoutS) {
  std::string Out;
  if (C.Pid <= 0)
    return Out;
  kill(C.Pid, SIGTERM);
  auto T0 = Clock::now();
  while (C.Out >= 0 && secondsSince(T0) < TimeoutS) {
    pollfd P{C.Out, POLLIN, 0};
    if (poll(&P, 1, 100) <= 0)
      continue;
    char Chunk[4096];
    ssize_t N = read(C.Out, Chunk, sizeof Chunk);
    if (N <= 0)
      break; // It ended: everything it said is here.
    Out.append(Chunk, size_t(N));
  }
  stopServer(C);
  return Out;
}

void stopAllServers() {
  std::vector<pid_t> Pids;
  Pids.swap(RunningPids);
  for (pid_t P : Pids)
    endPid(P);
}

//--- Transport and client workers --------------------------------------===//

void selectTransport(const std::string &Transport, bool Loopback) {
  // Client-server connections in UCX 1.13 need a sockaddr-capable transport
  // (tcp) for the wire-up even when the data moves over shared memory.
  if (Transport == "shm") {
    // Client-server (HOST:PORT) connections, which tc-gbpc makes, need tcp
    // for their wire-up.
    ClientServerTls = std::getenv("UCX_TLS") ? "" : "posix,self,tcp";
    ConnectByAddress = true;
    setenv("UCX_TLS", "posix,self", 0);
  } else if (Transport == "tcp") {
    setenv("UCX_TLS", "tcp", 0);
    if (Loopback)
      setenv("UCX_NET_DEVICES", "lo", 0);
  } else {
    die("bad --transport '" + Transport + "' (expected shm or tcp)");
  }
}

extern "C" void benchClientStats(void *Payload, size_t Size, void *Args) {
  auto *C = static_cast<ClientWorker *>(Args);
  if (Size != sizeof(ServerStats))
    return;
  std::memcpy(&C->Stats, Payload, sizeof(ServerStats));
  C->HaveStats = true;
}

ClientWorker::~ClientWorker() {
  if (W)
    tc_worker_destroy(W);
  if (Ctx)
    tc_context_destroy(Ctx);
}

void makeClient(ClientWorker &C, const std::string &IfuncPath,
                bool ShipAlways, bool Coalesce, bool Pmix, bool Mailbox) {
  tc_context_params_t CP{};
  CP.field_mask = TC_CONTEXT_PARAM_FIELD_IFUNC_PATH |
                  TC_CONTEXT_PARAM_FIELD_SHIP_CODE;
  CP.ifunc_path = IfuncPath.c_str();
  CP.ship_code = ShipAlways ? TC_SHIP_CODE_ALWAYS : TC_SHIP_CODE_ONCE;
  if (tc_context_create(&CP, &C.Ctx) != TC_OK)
    die("cannot create a tc context");
  tc_worker_params_t WP{};
  WP.field_mask = TC_WORKER_PARAM_FIELD_TARGET_ARGS |
                  TC_WORKER_PARAM_FIELD_COALESCE |
                  TC_WORKER_PARAM_FIELD_MAILBOX;
  WP.target_args = &C.Counter;
  WP.coalesce = Coalesce;
  WP.mailbox = Mailbox;
  if (Pmix) { // Wire up through mpirun / srun (tc-bench dapc --pmix).
    WP.field_mask |= TC_WORKER_PARAM_FIELD_BOOTSTRAP;
    WP.bootstrap = TC_BOOTSTRAP_PMIX;
  }
  if (tc_worker_create(C.Ctx, &WP, &C.W) != TC_OK)
    die(Pmix ? "cannot wire up through PMIx (started by mpirun or srun "
               "--mpi=pmix?)"
             : "cannot create a tc worker");
  if (tc_worker_register_local(C.W, "tsi", tsi_main) != TC_OK ||
      tc_worker_register_local(C.W, "bench.stats", benchClientStats) !=
          TC_OK ||
      tc_worker_set_target_args(C.W, "bench.stats", &C) != TC_OK)
    die("cannot register the client's local functions");
}

std::vector<std::string> serveReach(const std::string &Host) {
  if (ConnectByAddress)
    return {"--by-address"};
  return {"--listen", Host + ":0"};
}

std::string connectString(const Child &S) {
  if (S.Rank >= 0)
    return "#" + std::to_string(S.Rank);
  if (ConnectByAddress && !S.Address.empty())
    return "@" + S.Address;
  return S.Host + ":" + std::to_string(S.Port);
}

tc_status_t connectString(tc_worker_h W, const std::string &To,
                          tc_ep_h *Ep) {
  if (!To.empty() && To[0] == '#')
    return tc_ep_connect_rank(W, static_cast<uint32_t>(std::stoul(To.substr(1))),
                              Ep);
  if (!To.empty() && To[0] == '@') {
    std::string Bytes;
    for (size_t I = 1; I + 1 < To.size(); I += 2)
      Bytes += static_cast<char>(std::stoi(To.substr(I, 2), nullptr, 16));
    return tc_ep_connect_address(W, Bytes.data(), Bytes.size(), Ep);
  }
  size_t Colon = To.rfind(':');
  if (Colon == std::string::npos)
    return TC_ERR_INVALID_PARAM;
  return tc_ep_connect(W, To.substr(0, Colon).c_str(),
                       static_cast<uint16_t>(std::stoul(To.substr(Colon + 1))),
                       Ep);
}

tc_ep_h connectTo(ClientWorker &C, const Child &S) {
  tc_ep_h Ep = nullptr;
  if (connectString(C.W, connectString(S), &Ep) != TC_OK)
    die("cannot connect to " + S.Name + " at " + S.Host + ":" +
        std::to_string(S.Port));
  flush(C, Ep);
  return Ep;
}

tc_ifunc_h registerIfunc(ClientWorker &C, const char *Name) {
  tc_ifunc_h F = nullptr;
  if (tc_ifunc_register(C.W, Name, &F) != TC_OK)
    die(std::string("cannot register ifunc '") + Name +
        "' (build the examples, or set --ifunc-path)");
  return F;
}

void flush(ClientWorker &C, tc_ep_h Ep) {
  struct Done {
    bool Yes = false;
    tc_status_t S = TC_OK;
  } D;
  tc_status_t S = tc_ep_flush_nb(
      Ep,
      [](void *A, tc_status_t S) {
        static_cast<Done *>(A)->Yes = true;
        static_cast<Done *>(A)->S = S;
      },
      &D);
  if (S != TC_INPROGRESS)
    die(std::string("flush failed: ") + tc_status_string(S));
  waitFor(C.W, [&] { return D.Yes; }, "a server to finish its messages");
  if (D.S != TC_OK)
    die(std::string("flush failed: ") + tc_status_string(D.S));
}

void control(ClientWorker &C, tc_ep_h Ep, const char *Name, const void *P,
             size_t N) {
  tc_status_t S = tc_ep_send_local(Ep, Name, P, N, nullptr, nullptr);
  if (S != TC_INPROGRESS)
    die(std::string("cannot send ") + Name + ": " + tc_status_string(S));
  flush(C, Ep);
}

ServerStats queryStats(ClientWorker &C, tc_ep_h Ep) {
  C.HaveStats = false;
  control(C, Ep, "bench.stats", nullptr, 0);
  waitFor(C.W, [&] { return C.HaveStats; }, "server statistics");
  return C.Stats;
}

bool walkArgs(
    const std::string &Scenario, const std::vector<std::string> &Args,
    const char *Usage,
    const std::function<bool(const std::string &Flag,
                             const std::function<std::string()> &)> &Take) {
  for (size_t I = 0; I < Args.size(); ++I) {
    const std::string &A = Args[I];
    if (A == "--help") {
      std::fputs(Usage, stdout);
      return false;
    }
    auto Value = [&]() {
      if (I + 1 >= Args.size())
        die("missing value after " + A);
      return Args[++I];
    };
    if (!Take(A, Value))
      die(Scenario + ": unknown argument '" + A + "' (try tc-bench " +
          Scenario + " --help)");
  }
  return true;
}

/// Ping-pong: returns the one-way latency in microseconds.
double pingPong(ClientWorker &C, tc_ep_h Ep, uint32_t Pong,
                const std::function<void()> &Send, uint64_t Warmup,
                uint64_t Iters, HopStamps *Stamps) {
  control(C, Ep, "bench.pong", &Pong, sizeof Pong);
  Clock::time_point T0 = Clock::now();
  for (uint64_t I = 0; I < Warmup + Iters; ++I) {
    if (I == Warmup)
      T0 = Clock::now();
    uint64_t Want = C.Counter + 1;
    uint64_t Before = Stamps ? stampNow() : 0;
    Send();
    uint64_t After = Stamps ? stampNow() : 0;
    // The wait is inline, as ucx_am's is (UcxAm.cpp): the reference and tc
    // poll with the same loop, a counter test beside the progress call.
    Deadline D;
    for (unsigned Polls = 0; C.Counter < Want; ++Polls) {
      tc_worker_progress(C.W);
      if ((Polls & 1023) == 1023) {
        checkInterruptsAndServers();
        if (D.passed(60))
          die("timed out after 60 s waiting for a pong");
      }
    }
    if (Stamps)
      Stamps->client(I, Before, After, stampNow());
  }
  double Secs = secondsSince(T0);
  uint32_t Off = PongOff;
  control(C, Ep, "bench.pong", &Off, sizeof Off);
  return Secs / static_cast<double>(Iters) / 2 * 1e6;
}

/// Back-to-back sends ended by a flush; returns messages per second.
double rate(ClientWorker &C, tc_ep_h Ep, const std::function<void()> &Send,
            uint64_t Msgs) {
  Clock::time_point T0 = Clock::now();
  for (uint64_t I = 0; I < Msgs; ++I) {
    Send();
    // A send may wait (for room) while its server takes nothing: then
    // every send waits, so this is checked after each one.
    checkInterruptsAndServers();
    if ((I & 15) == 15)
      tc_worker_progress(C.W);
  }
  flush(C, Ep);
  return static_cast<double>(Msgs) / secondsSince(T0);
}

} // namespace bench

using namespace bench;

static const char *const Usage =
    R"(USAGE: tc-bench SCENARIO [options]

Reproduces the Three-Chains and Two-Chains evaluations on this machine,
side by side with UCX active messages and, in every scenario's mode mpi
(--modes ...,mpi), the same work with MPI one-sided operations (tc-mpi-rma
under mpirun). Starts (and stops) its own server processes, verifies every
result, then prints a table, JSON or CSV.

SCENARIOS:
  tsi     target-side increment: latency and message rate for the modes
          am (local function, only an id travels), cached (ifunc, code
          already at the target), cached-unbatched (the same, one UCX AM
          per message: coalescing off), uncached (every message carries
          the archive), object (native member), ucx_am (TSI on UCX's
          own AM, no tc), ucx_perftest (UCX's own benchmark), first
          contact (jit, object, disk-cache), stall (a cached stream's
          p50/p99 alone and while another client ships new code), mpi
          (MPI_Accumulate + flush, MPI_Fetch_and_op)
  dapc    distributed pointer chase: dapc (ifunc forwards itself), am
          (the same walk linked into the servers), gbpc (client does one
          UCX GET per hop, tc-gbpc), mpi (one MPI_Get + flush per hop);
          rate over depth and server count
  sss     server-side sum over payload sizes: injected vs local (mpi:
          MPI_Get of the numbers, summed at the client)
  iput    indirect put over payload sizes: injected vs local (mpi:
          MPI_Put)
  kv      a distributed hash table on real text, under mpirun: tc
          (tc-kv: batched upsert and get ifuncs run at the owner) next to
          mpi (tc-mpi-kv: the table in MPI windows, one-sided operations)
          and alltoall (the MPI_Alltoallv shuffle); upsert rate, get
          latency and rate, table memory
  tsi --gpu[=N], sss --gpu[=N]
          a GPU target (tc-serve --gpu N) against the CUDA driver doing
          the same work: gtsi latency and rate next to cuda_raw (UCX AM +
          cuLaunchKernel), first contact (cold, driver JIT, disk cache);
          gsss over 1 GiB of device memory next to cuMemcpyDtoD
  serve   a benchmark server (tc-bench starts these itself)

COMMON OPTIONS:
  --transport shm|tcp  UCX shared memory (default) or TCP
  --quick              Small sizes: every scenario in under 30 s
  --json | --csv       Machine-readable output (for scripts/plot.py)
  --ifunc-path DIR     Where the example archives are (default: ../ifuncs
                       next to this binary, or $TC_IFUNC_PATH)
  --quiet              No progress lines on stderr
  --no-pin             tsi/sss/iput: do not pin server and client to two
                       CPUs (by default they are, as ucx_perftest -c is);
                       dapc: do not give the client and each busy-polling
                       server a CPU of their own
  --no-mailbox         dapc/sss/iput: clients and servers send active
                       messages only (by default small messages between
                       processes on shared memory go through mailboxes)
  --mpi-osc LIST       Mode mpi: the Open MPI one-sided components to try
                       (sm, rdma, ucx, pt2pt; default: those that work on
                       the transport: all four on shm, ucx and pt2pt on
                       tcp). Each runs a short probe; each figure is then
                       measured with the fastest, and its row is named
                       OP:OSC (mpi_get:ucx)
  --mpi-timeout S      Mode mpi: every mpirun job ends with an error after
                       S seconds (default 600; --quick 120)
  --help, --version

Run `tc-bench SCENARIO --help` for a scenario's own options.
)";

int main(int Argc, char **Argv) {
  installSignalHandlers();
  if (Argc < 2) {
    std::fprintf(stderr, "tc-bench: error: missing scenario (try --help)\n");
    return 1;
  }
  std::string Scenario = Argv[1];
  if (Scenario == "--help" || Scenario == "-h") {
    std::fputs(Usage, stdout);
    return 0;
  }
  if (Scenario == "--version") {
    std::printf("tc-bench (tc) 0.1.0\n");
    return 0;
  }
  if (Scenario == "serve")
    return runServer(Argc - 1, Argv + 1);
  if (Scenario != "tsi" && Scenario != "dapc" && Scenario != "sss" &&
      Scenario != "iput" && Scenario != "kv")
    die("unknown scenario '" + Scenario + "' (try --help)");

  CommonOptions O;
  std::vector<std::string> Rest;
  for (int I = 2; I < Argc; ++I) {
    std::string A = Argv[I];
    auto Value = [&](const std::string &Flag) {
      if (I + 1 >= Argc)
        die("missing value after " + Flag);
      return std::string(Argv[++I]);
    };
    if (A == "--transport")
      O.Transport = Value(A);
    else if (A.rfind("--transport=", 0) == 0)
      O.Transport = A.substr(12);
    else if (A == "--quick")
      O.Quick = true;
    else if (A == "--json")
      O.Fmt = Format::Json;
    else if (A == "--csv")
      O.Fmt = Format::Csv;
    else if (A == "--quiet")
      Quiet = true;
    else if (A == "--ifunc-path")
      O.IfuncPath = Value(A);
    else if (A == "--hosts")
      O.HostsFile = Value(A);
    else if (A == "--no-pin")
      O.Pin = false;
    else if (A == "--no-mailbox")
      Mailboxes = false;
    else if (A == "--mpi-osc")
      O.MpiOsc = Value(A);
    else if (A == "--mpi-timeout")
      O.MpiTimeoutS = static_cast<double>(parseCount(A, Value(A)));
    else
      Rest.push_back(A);
  }
  if (O.Transport != "shm" && O.Transport != "tcp")
    die("bad --transport '" + O.Transport + "' (expected shm or tcp)");
  if (!O.MpiTimeoutS)
    O.MpiTimeoutS = O.Quick ? 120 : 600;
  if (O.IfuncPath.empty())
    O.IfuncPath = defaultIfuncPath();
  // Every scenario's servers need the examples: say so once, here, rather
  // than through each server's failure.
  bool Found = false;
  for (size_t Pos = 0; Pos <= O.IfuncPath.size() && !Found;) {
    size_t End = O.IfuncPath.find(':', Pos);
    if (End == std::string::npos)
      End = O.IfuncPath.size();
    Found = access((O.IfuncPath.substr(Pos, End - Pos) + "/tsi.tcfb").c_str(),
                   R_OK) == 0;
    Pos = End + 1;
  }
  if (!Found)
    die("no tsi.tcfb in the ifunc path '" + O.IfuncPath +
        "' (build the examples, or pass --ifunc-path)");
  int RC;
  if ((Scenario == "tsi" || Scenario == "sss") && wantsGpu(Rest))
    RC = runGpu(Scenario, O, Rest);
  else if (Scenario == "tsi")
    RC = runTsi(O, Rest);
  else if (Scenario == "dapc")
    RC = runDapc(O, Rest);
  else if (Scenario == "kv")
    RC = runKv(O, Rest);
  else
    RC = runSweep(Scenario, O, Rest);
  stopAllServers();
  return RC;
}
