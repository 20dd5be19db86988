//===- Dapc.cpp - `tc-bench dapc`: distributed pointer chasing ------------===//
//
// Three-Chains §V (Figs. 9-12): chase rate over depth and server count for
//  - dapc: the chaser ifunc walks the server's shard and forwards itself to
//    the owner of the next entry; the last server injects dapc_result into
//    the client;
//  - am: the same walk linked into the servers, forwarded as local invokes
//    (UCX active messages carrying an id and the payload);
//  - gbpc: the client chases with one UCX GET per hop (tc-gbpc, raw UCX);
//  - mpi: the same with one MPI_Get + MPI_Win_flush per hop (tc-mpi-rma
//    under mpirun, Mpi.cpp), the table on server ranks.
// Chases run one at a time; every end value is checked against the
// closed-form reference (examples/dapc/dapc_table.h) and the servers' hop
// counters must add up, before a rate is reported.
//
//===----------------------------------------------------------------------===//

#include "Bench.h"
#include "Mpi.h"

#include "dapc_chase.h"
#include "dapc_table.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <ifaddrs.h>
#include <regex>
#include <sched.h>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace bench {
namespace {

struct Host {
  std::string Netns, Addr; ///< start a server in Netns at Addr:0
  std::string Running;     ///< or: a tc-bench serve already at HOST:PORT
  std::string Gbpc;        ///< a tc-gbpc serve already at HOST:PORT
};

std::vector<Host> readHosts(const std::string &Path, std::string &Client) {
  std::ifstream In(Path);
  if (!In)
    die("cannot read hosts file '" + Path + "'");
  std::vector<Host> Out;
  std::string Line;
  unsigned N = 0;
  std::vector<std::string> Gbpc;
  while (std::getline(In, Line)) {
    ++N;
    std::istringstream S(Line);
    std::string Kind, A, B;
    if (!(S >> Kind) || Kind[0] == '#')
      continue;
    S >> A >> B;
    std::string Where = Path + ":" + std::to_string(N) + ": ";
    if (Kind == "client") {
      if (A.empty())
        die(Where + "'client' needs an address");
      Client = A;
    } else if (Kind == "netns") {
      if (A.empty() || B.empty())
        die(Where + "expected 'netns NAME ADDR'");
      Out.push_back({A, B, "", ""});
    } else if (Kind == "server") {
      if (A.find(':') == std::string::npos)
        die(Where + "expected 'server HOST:PORT'");
      Out.push_back({"", "", A, ""});
    } else if (Kind == "gbpc") {
      if (A.find(':') == std::string::npos)
        die(Where + "expected 'gbpc HOST:PORT'");
      Gbpc.push_back(A);
    } else {
      die(Where + "unknown line kind '" + Kind +
          "' (expected client, netns, server or gbpc)");
    }
  }
  for (size_t I = 0; I < Gbpc.size() && I < Out.size(); ++I)
    Out[I].Gbpc = Gbpc[I];
  if (Out.empty())
    die("hosts file '" + Path + "' lists no servers");
  return Out;
}

Child parseAddress(const std::string &HostPort, const std::string &Name) {
  Child C;
  size_t Colon = HostPort.rfind(':');
  C.Host = HostPort.substr(0, Colon);
  C.Port = static_cast<uint16_t>(
      parseCount("server address", HostPort.substr(Colon + 1)));
  C.Name = Name;
  return C;
}

/// While it lives, UCX_NET_DEVICES names the device that holds the hosts
/// file's client address (when the environment sets none): what this
/// process and the root-namespace children it starts meanwhile (tc-gbpc's
/// client) may use. UCX 1.13 counts every TCP device as reaching every
/// address, so a client on a host with other bridges (another test's
/// namespaces) or NICs may wire its lanes up over one that does not reach
/// the servers; their connection is then reset. Servers started before
/// and the MPI ranks after choose their devices themselves.
class ClientDevice {
public:
  explicit ClientDevice(const std::string &Addr) {
    if (Addr.empty() || std::getenv("UCX_NET_DEVICES"))
      return;
    ifaddrs *List = nullptr;
    if (getifaddrs(&List) != 0)
      return;
    for (ifaddrs *I = List; I && Name.empty(); I = I->ifa_next) {
      if (!I->ifa_addr)
        continue;
      char Buf[INET6_ADDRSTRLEN] = "";
      const void *A = nullptr;
      if (I->ifa_addr->sa_family == AF_INET)
        A = &reinterpret_cast<sockaddr_in *>(I->ifa_addr)->sin_addr;
      else if (I->ifa_addr->sa_family == AF_INET6)
        A = &reinterpret_cast<sockaddr_in6 *>(I->ifa_addr)->sin6_addr;
      if (A && inet_ntop(I->ifa_addr->sa_family, A, Buf, sizeof Buf) &&
          Addr == Buf)
        Name = I->ifa_name;
    }
    freeifaddrs(List);
    if (Name.empty())
      die("the hosts file's client address " + Addr +
          " is on no device of this host");
    setenv("UCX_NET_DEVICES", Name.c_str(), 1);
    note("dapc: the client uses device " + Name + " (" + Addr + ")");
  }
  ~ClientDevice() {
    if (!Name.empty())
      unsetenv("UCX_NET_DEVICES");
  }
  ClientDevice(const ClientDevice &) = delete;
  ClientDevice &operator=(const ClientDevice &) = delete;

private:
  std::string Name;
};

struct Params {
  std::vector<uint64_t> Servers, Depths;
  uint64_t Entries, Count, Seed = DAPC_DEFAULT_SEED;
  bool Dapc = true, Am = true, Gbpc = true, Mpi = false;
  bool Sandbox = false; ///< Also dapc on servers run with --exec sandbox.
  bool Pmix = false, ModesGiven = false, ServersGiven = false;
};

extern "C" void dapcBarrierDone(void *Arg, tc_status_t S) {
  *static_cast<int *>(Arg) = S == TC_OK ? 1 : 2;
}

std::string gbpcPath() {
  std::string Self = selfPath();
  return Self.substr(0, Self.rfind('/')) + "/tc-gbpc";
}

/// The command line that starts a tc-gbpc server.
std::vector<std::string> gbpcServe(const std::string &Addr, const Params &P,
                                   uint32_t S, uint32_t I) {
  std::vector<std::string> A;
  if (!ClientServerTls.empty())
    A = {"env", "UCX_TLS=" + ClientServerTls};
  std::vector<std::string> Rest = {
      gbpcPath(), "serve",  "--listen",  Addr + ":0",
      "--entries", std::to_string(P.Entries), "--servers", std::to_string(S),
      "--id",      std::to_string(I),         "--seed",    std::to_string(P.Seed)};
  A.insert(A.end(), Rest.begin(), Rest.end());
  return A;
}

/// The CPUs in \p Set, in order.
std::vector<int> cpusOf(const cpu_set_t &Set) {
  std::vector<int> Out;
  for (int Cpu = 0; Cpu < CPU_SETSIZE; ++Cpu)
    if (CPU_ISSET(Cpu, &Set))
      Out.push_back(Cpu);
  return Out;
}

/// Where the busy-polling client and servers of one server count run.
///
/// With no more processes than CPUs the servers busy-poll, as the client
/// does. Left to the kernel, two of them may land on one CPU; while the
/// other CPUs are busy (other work, another spinner) the load balancer has
/// no reason to move either, and as neither ever sleeps, a message waits
/// until its sender is preempted at a scheduler tick: every chase then takes
/// two to four ticks (8-16 ms on the 2-vCPU VM), whatever its depth. So the
/// client and each server it starts get a CPU of their own, from those this
/// process may use (as tsi pins its client and server; --no-pin: not).
struct Placement {
  bool Pinned = false;
  cpu_set_t Saved;      ///< The client's CPUs before, restored by undo().
  std::vector<int> Cpu; ///< Server I's CPU; the client's is Cpu[S].

  void pin(uint32_t S) {
    if (sched_getaffinity(0, sizeof Saved, &Saved) != 0)
      return;
    std::vector<int> Mine = cpusOf(Saved);
    if (Mine.size() < size_t(S) + 1)
      return;
    cpu_set_t Client;
    CPU_ZERO(&Client);
    CPU_SET(Mine[S], &Client);
    if (sched_setaffinity(0, sizeof Client, &Client) != 0)
      return;
    Cpu.assign(Mine.begin(), Mine.begin() + S + 1);
    Pinned = true;
  }
  /// The CPU for server \p I (-1: unpinned) for startServer().
  int server(uint32_t I) const { return Pinned ? Cpu[I] : -1; }
  void undo() {
    if (Pinned)
      sched_setaffinity(0, sizeof Saved, &Saved);
    Pinned = false;
    Cpu.clear();
  }
};

/// On how many CPUs two or more of the busy-polling processes (this client
/// and the servers \p Spinners) may run: 0 when each has CPUs of its own.
/// -1 when a server's CPUs cannot be read.
long sharedCpus(const std::vector<pid_t> &Spinners) {
  std::vector<int> Users(CPU_SETSIZE, 0);
  cpu_set_t Set;
  if (sched_getaffinity(0, sizeof Set, &Set) != 0)
    return -1;
  for (int Cpu : cpusOf(Set))
    ++Users[Cpu];
  for (pid_t P : Spinners) {
    if (sched_getaffinity(P, sizeof Set, &Set) != 0)
      return -1;
    for (int Cpu : cpusOf(Set))
      ++Users[Cpu];
  }
  return std::count_if(Users.begin(), Users.end(),
                       [](int N) { return N > 1; });
}

/// One (mode, depth) point over tc: returns chases per second.
double chaseTc(ClientWorker &C, dapc_client_t &DC,
               const std::vector<tc_ep_h> &Eps, tc_msg_h Msg, bool Local,
               const Params &P, uint64_t Depth, const std::string &What) {
  dapc_perm_t Perm;
  dapc_perm_init(&Perm, P.Entries, P.Seed);
  uint32_t S = static_cast<uint32_t>(Eps.size());
  auto One = [&](uint64_t K, uint64_t Start) {
    dapc_args_t A{Start, Depth, K};
    tc_ep_h To = Eps[dapc_owner(P.Entries, S, A.addr)];
    uint64_t Want = DC.done + 1;
    tc_status_t St;
    if (Local) {
      St = tc_ep_send_local(To, "dapc", &A, sizeof A, nullptr, nullptr);
    } else {
      std::memcpy(tc_msg_payload(Msg, nullptr), &A, sizeof A);
      St = tc_msg_send(To, Msg, nullptr, nullptr);
    }
    if (St != TC_INPROGRESS)
      die(What + ": send failed: " + tc_status_string(St));
    waitFor(C.W, [&] { return DC.done >= Want; }, What + " to end", 120);
    uint64_t Ref = dapc_chase_ref(&Perm, Start, Depth);
    if (DC.ends[K] != Ref)
      die(What + ": chase " + std::to_string(K) + " ended at " +
          std::to_string(DC.ends[K]) + ", expected " + std::to_string(Ref));
  };
  // Warm-up, untimed: one chase starting on each server, so every server
  // has loaded the chaser and answered the client once (first contact).
  for (uint32_t I = 0; I < S; ++I)
    One(0, dapc_shard_lo(P.Entries, S, I));
  Clock::time_point T0 = Clock::now();
  for (uint64_t K = 1; K <= P.Count; ++K)
    One(K, dapc_mix64(K + 1) % P.Entries);
  return static_cast<double>(P.Count) / secondsSince(T0);
}

/// One GBPC point by running tc-gbpc chase; returns chases per second.
double chaseGbpc(const std::vector<Child> &Servers, const Params &P,
                 uint64_t Depth) {
  std::string List;
  for (const Child &C : Servers)
    List += (List.empty() ? "" : ",") + C.Host + ":" + std::to_string(C.Port);
  std::string Env = ClientServerTls.empty()
                        ? std::string()
                        : "env UCX_TLS=" + ClientServerTls + " ";
  std::string Cmd = Env + "'" + gbpcPath() + "' chase --servers " + List +
                    " --entries " + std::to_string(P.Entries) + " --seed " +
                    std::to_string(P.Seed) + " --depth " +
                    std::to_string(Depth) + " --count " +
                    std::to_string(P.Count) + " --json";
  FILE *F = popen(Cmd.c_str(), "r");
  if (!F)
    die("cannot run tc-gbpc");
  std::string Out;
  char Buf[4096];
  size_t N;
  while ((N = std::fread(Buf, 1, sizeof Buf, F)) > 0)
    Out.append(Buf, N);
  int RC = pclose(F);
  if (RC != 0)
    die("tc-gbpc chase failed (it verifies every chase; see its error)");
  static const std::regex Rate(
      "\"metric\"\\s*:\\s*\"rate_chases\"\\s*,\\s*\"value\"\\s*:\\s*"
      "([0-9.eE+-]+)");
  std::smatch M;
  if (!std::regex_search(Out, M, Rate))
    die("cannot read tc-gbpc's output: " + Out);
  return std::stod(M[1]);
}

void parseModes(const std::string &List, Params &P) {
  P.Dapc = P.Am = P.Gbpc = false;
  std::stringstream SS(List);
  std::string M;
  while (std::getline(SS, M, ',')) {
    if (M == "dapc")
      P.Dapc = true;
    else if (M == "am")
      P.Am = true;
    else if (M == "gbpc")
      P.Gbpc = true;
    else if (M == "sandbox")
      P.Sandbox = true;
    else if (M == "mpi")
      P.Mpi = true;
    else
      die("bad mode '" + M +
          "' in --modes (expected dapc, am, gbpc, sandbox, mpi)");
  }
}

const char *const DapcUsage = R"(USAGE: tc-bench dapc [options]

Distributed pointer chasing (Three-Chains Figs. 9-12): chases per second for
dapc (ifunc), am (linked-in function) and gbpc (UCX GET per hop), over chase
depth and server count. Every chase end is verified. With no more
processes than the CPUs it may use the servers busy-poll, and the client
and each server get a CPU of their own (--no-pin: not); the placement row
counts the CPUs two of them may share.

OPTIONS:
  --servers LIST   Server counts, e.g. 1,2,4 (default 1,2,3,4; --quick 2)
  --depths LIST    Chase depths (default 1,4,16,...,4096; --quick 1,64,4096)
  --entries N      Table entries (default 16777216; --quick 65536; the
                   paper used 67108864)
  --count N        Timed chases per point (default 100; --quick 10)
  --seed N         Table seed
  --modes LIST     Any of dapc,am,gbpc,sandbox,mpi (default the first
                   three; sandbox: dapc again on servers run with --exec
                   sandbox, rows 'dapc-sandbox', and the ratio to dapc;
                   mpi: tc-mpi-rma under mpirun, rank 0 chasing with one
                   MPI_Get + flush per hop over server ranks holding the
                   same table, rows 'mpi_get:OSC', and dapc's ratio to
                   them; with --hosts, server rank I runs in the I-th
                   namespace, launched by mpirun through a launch agent
                   that enters it)
  --hosts FILE     Servers elsewhere: lines 'netns NAME ADDR' (started by
                   tc-bench inside that network namespace, see
                   scripts/netns.sh), 'server HOST:PORT' (a running
                   tc-bench serve), 'gbpc HOST:PORT' (a running tc-gbpc
                   serve), 'client ADDR' (this host's address toward
                   the servers: unless UCX_NET_DEVICES is set, the client
                   uses only the device that holds it)
  --pmix           No hosts file: this is rank 0 of an mpirun / srun job
                   whose other ranks run `tc-bench serve --pmix`; they are
                   the servers (--servers: one count, default all of
                   them). Modes dapc and am.
)";

} // namespace

int runDapc(const CommonOptions &O, const std::vector<std::string> &Args) {
  Params P;
  P.Servers = O.Quick ? std::vector<uint64_t>{2}
                      : std::vector<uint64_t>{1, 2, 3, 4};
  P.Depths = O.Quick ? std::vector<uint64_t>{1, 64, 4096}
                     : std::vector<uint64_t>{1, 4, 16, 64, 256, 1024, 4096};
  P.Entries = O.Quick ? 65536 : 16777216;
  P.Count = O.Quick ? 10 : 100;
  if (!walkArgs(
          "dapc", Args, DapcUsage,
          [&](const std::string &A, const std::function<std::string()> &Value) {
            if (A == "--servers")
              P.Servers = parseList(A, Value()), P.ServersGiven = true;
            else if (A == "--depths")
              P.Depths = parseList(A, Value());
            else if (A == "--entries")
              P.Entries = parseCount(A, Value());
            else if (A == "--count")
              P.Count = parseCount(A, Value());
            else if (A == "--seed")
              P.Seed = parseCount(A, Value());
            else if (A == "--modes")
              parseModes(Value(), P), P.ModesGiven = true;
            else if (A == "--pmix")
              P.Pmix = true;
            else
              return false;
            return true;
          }))
    return 0;
  if (P.Entries < 2)
    die("--entries must be at least 2");
  if (!P.Count)
    die("--count must be at least 1");
  for (uint64_t S : P.Servers)
    if (S == 0 || S > 64 || S > P.Entries)
      die("bad server count " + std::to_string(S));
  for (uint64_t D : P.Depths)
    if (D == 0)
      die("chase depths must be at least 1");

  std::vector<Host> Hosts;
  std::string ClientAddr;
  if (!O.HostsFile.empty())
    Hosts = readHosts(O.HostsFile, ClientAddr);
  if (P.Pmix) {
    if (!Hosts.empty())
      die("--pmix and --hosts exclude each other");
    if (P.ModesGiven && P.Gbpc)
      die("--pmix runs modes dapc and am (tc-gbpc has no PMIx wire-up)");
    if (P.Mpi)
      die("--pmix runs modes dapc and am (mode mpi starts its own mpirun)");
    P.Gbpc = false;
    if (P.ServersGiven && P.Servers.size() != 1)
      die("--pmix takes one --servers count (the job is wired up once)");
    if (!P.ServersGiven)
      P.Servers = {0}; // Every other rank, known after the wire-up.
  }
  selectTransport(O.Transport, /*Loopback=*/Hosts.empty());
  if (P.Gbpc && access(gbpcPath().c_str(), X_OK) != 0)
    die("tc-gbpc not found next to tc-bench (" + gbpcPath() +
        "); build it, or leave gbpc out of --modes");
  // The CPUs this process may use (taskset, cgroups), not all the online
  // ones: those are what its servers may get.
  long Cores = sysconf(_SC_NPROCESSORS_ONLN);
  {
    cpu_set_t Set;
    if (sched_getaffinity(0, sizeof Set, &Set) == 0)
      Cores = CPU_COUNT(&Set);
  }
  std::string Self = selfPath();
  std::vector<Record> Out;
  // Mode mpi: server rank I + 1 where tc's server I runs.
  MpiPlace Place;
  Place.Transport = O.Transport;
  Place.Pin = false; // As the tc servers: not pinned.
  for (const Host &H : Hosts) {
    if (!P.Mpi)
      break;
    if (H.Netns.empty())
      die("mode mpi runs its ranks in the namespaces of 'netns' lines only "
          "(the hosts file names a running server)");
    Place.Netns.push_back(H.Netns);
    // scripts/netns.sh's hosts share one /24.
    Place.Subnet = H.Addr.substr(0, H.Addr.rfind('.')) + ".0/24";
  }
  MpiReference Mpi(Place, O.MpiOsc, O.MpiTimeoutS);
  if (P.Mpi)
    Mpi.check();

  // --pmix: the client wires up first (the job size tells the servers).
  ClientWorker PmixClient;
  if (P.Pmix) {
    makeClient(PmixClient, O.IfuncPath, false, true, /*Pmix=*/true);
    uint32_t Rank, Size;
    tc_worker_query_rank(PmixClient.W, &Rank, &Size);
    if (Rank != 0)
      die("tc-bench dapc --pmix must be rank 0 of its job (it is rank " +
          std::to_string(Rank) + ")");
    if (Size < 2)
      die("tc-bench dapc --pmix: the job has no server ranks");
    if (P.Servers[0] == 0)
      P.Servers[0] = Size - 1;
    if (P.Servers[0] > Size - 1)
      die("--servers " + std::to_string(P.Servers[0]) + " but the job has " +
          std::to_string(Size - 1) + " server ranks");
  }

  for (uint64_t NS : P.Servers) {
    uint32_t S = static_cast<uint32_t>(NS);
    if (!Hosts.empty() && S > Hosts.size())
      die("--servers " + std::to_string(S) + " but the hosts file lists " +
          std::to_string(Hosts.size()));
    // More processes than cores: servers sleep when idle instead of
    // spinning, or they would starve each other and the client.
    bool Blocking = static_cast<long>(S) + 1 > Cores;
    for (int Sb = 0; Sb <= int(P.Sandbox); ++Sb) {
    if (Sb && (!Hosts.empty()))
      die("--modes sandbox runs local servers only (no --hosts)");
    bool Gbpc = P.Gbpc && !Sb, Am = P.Am && !Sb, Dapc = P.Dapc || Sb;
    std::vector<Child> Tc, Gb;
    Placement Place;
    if (!Blocking && O.Pin && !P.Pmix)
      Place.pin(S);
    for (uint32_t I = 0; I < S; ++I) {
      const Host *H = Hosts.empty() ? nullptr : &Hosts[I];
      std::string Name = "dapc server " + std::to_string(I);
      if (P.Pmix) { // Rank I + 1, already running and wired up.
        Child R;
        R.Rank = static_cast<int>(I + 1);
        R.Name = Name + " (rank " + std::to_string(I + 1) + ")";
        Tc.push_back(R);
        continue;
      }
      if (H && !H->Running.empty()) {
        Tc.push_back(parseAddress(H->Running, Name));
      } else {
        std::vector<std::string> A = {Self, "serve", "--ifunc-path",
                                      O.IfuncPath};
        if (H) // A test host: reached over TCP.
          A.insert(A.end(), {"--listen", H->Addr + ":0"});
        else
          for (std::string &R : serveReach("127.0.0.1"))
            A.push_back(std::move(R));
        if (Blocking)
          A.push_back("--blocking");
        if (Sb) {
          A.push_back("--exec");
          A.push_back("sandbox");
        }
        ServerCpu = Place.server(I);
        Tc.push_back(startServer(A, H ? H->Netns : "", Name));
        ServerCpu = -1; // The gbpc servers sleep between requests.
      }
      if (!Gbpc)
        continue;
      if (H && !H->Gbpc.empty()) {
        Gb.push_back(parseAddress(H->Gbpc, "gbpc server"));
      } else if (H && H->Running.empty()) {
        Gb.push_back(startServer(gbpcServe(H->Addr, P, S, I), H->Netns,
                                 "gbpc server " + std::to_string(I)));
      } else if (!H) {
        Gb.push_back(startServer(gbpcServe("127.0.0.1", P, S, I), "",
                                 "gbpc server " + std::to_string(I)));
      }
    }
    if (Gbpc && Gb.size() != S)
      die("the hosts file has no 'gbpc HOST:PORT' line for every server");
    // The servers are up: what starts from here runs in this namespace.
    ClientDevice Device(ClientAddr);

    ClientWorker Own;
    ClientWorker &C = P.Pmix ? PmixClient : Own;
    if (!P.Pmix)
      makeClient(C, O.IfuncPath, false);
    std::vector<uint64_t> Ends(P.Count + 1);
    dapc_client_t DC{0, Ends.data(), Ends.size()};
    tc_worker_register_local(C.W, "dapc_result", dapc_result_main);
    tc_worker_set_target_args(C.W, "dapc_result", &DC);
    std::vector<tc_ep_h> Eps;
    std::string List;
    for (const Child &T : Tc) {
      Eps.push_back(connectTo(C, T));
      List += (List.empty() ? "" : ",") + connectString(T);
    }
    note("dapc: " + std::to_string(S) + " server(s), building " +
         std::to_string(P.Entries) + " entries");
    // Busy-polling servers, all started here: on how many CPUs two of them
    // or one and the client may run (0: each has its own; see Placement).
    std::vector<pid_t> Spinners;
    for (const Child &T : Tc)
      if (T.Pid >= 0)
        Spinners.push_back(T.Pid);
    if (!Blocking && !P.Pmix && Spinners.size() == S) {
      Record R = record("dapc", "placement", "shared_cpus",
                        static_cast<double>(sharedCpus(Spinners)), "cpus",
                        O.Transport);
      R.Servers = S;
      Out.push_back(R);
      std::string Where;
      for (size_t I = 0; I < Place.Cpu.size(); ++I)
        Where += (I + 1 < Place.Cpu.size() ? " server " + std::to_string(I)
                                           : " client") +
                 " on CPU " + std::to_string(Place.Cpu[I]) + ",";
      note("dapc: busy-polling, " +
           (Place.Pinned ? "pinned:" + Where.substr(0, Where.size() - 1)
                         : std::string("not pinned")) +
           "; CPUs they share: " + std::to_string(static_cast<long>(R.Value)));
    }
    for (uint32_t I = 0; I < S; ++I) {
      std::string Setup(sizeof(DapcSetup), '\0');
      DapcSetup D{P.Entries, P.Seed, S, I};
      std::memcpy(&Setup[0], &D, sizeof D);
      Setup += List;
      control(C, Eps[I], "bench.dapc", Setup.data(), Setup.size());
    }
    tc_ifunc_h Chaser = registerIfunc(C, "dapc");
    dapc_args_t Zero{0, 1, 0};
    tc_msg_h Msg;
    if (tc_msg_create(Chaser, &Zero, sizeof Zero, &Msg) != TC_OK)
      die("cannot create a dapc message");

    for (uint64_t Depth : P.Depths) {
      auto Add = [&](const std::string &Mode, double Rate) {
        Record R =
            record("dapc", Mode, "rate_chases", Rate, "chases/s", O.Transport);
        R.Servers = S;
        R.Depth = static_cast<long>(Depth);
        Out.push_back(R);
        note("dapc: servers " + std::to_string(S) + " depth " +
             std::to_string(Depth) + " " + Mode + ": " +
             std::to_string(static_cast<long>(Rate)) + " chases/s");
      };
      for (int Local = 0; Local < 2; ++Local) {
        if (Local ? !Am : !Dapc)
          continue;
        std::string Mode = Local ? "am" : Sb ? "dapc-sandbox" : "dapc";
        uint64_t Hops0 = 0, Hops1 = 0, In0 = 0, In1 = 0, Mb0 = 0, Mb1 = 0;
        for (tc_ep_h E : Eps) {
          ServerStats St = queryStats(C, E);
          Hops0 += St.DapcHops;
          In0 += St.Worker.received;
          Mb0 += St.Worker.mailbox_received;
        }
        DC.done = 0;
        double Rate = chaseTc(C, DC, Eps, Msg, Local, P, Depth,
                              "dapc " + Mode);
        for (tc_ep_h E : Eps) {
          ServerStats St = queryStats(C, E);
          Hops1 += St.DapcHops;
          In1 += St.Worker.received;
          Mb1 += St.Worker.mailbox_received;
        }
        if (Hops1 - Hops0 != (P.Count + S) * Depth)
          die("dapc " + Mode + ": the servers read " +
              std::to_string(Hops1 - Hops0) + " entries, expected " +
              std::to_string((P.Count + S) * Depth));
        Add(Mode, Rate);
        // How many of the chase messages the servers got came through
        // their mailboxes (shared memory only; the stats queries are AMs).
        if (ConnectByAddress && In1 > In0) {
          Record M = Out.back();
          M.Metric = "mailbox_share";
          M.Value = double(Mb1 - Mb0) / double(In1 - In0);
          M.Unit = "ratio";
          Out.push_back(M);
        }
      }
      if (Gbpc) {
        // GBPC needs no tc server: busy-polling ones would take the CPUs
        // that its client and its woken server need.
        for (tc_ep_h E : Eps)
          control(C, E, "bench.idle", nullptr, 0);
        Add("gbpc", chaseGbpc(Gb, P, Depth));
        for (tc_ep_h E : Eps)
          control(C, E, "bench.reset", nullptr, 0);
      }
    }
    tc_msg_free(Msg);
    tc_ifunc_deregister(Chaser);
    for (tc_ep_h E : Eps)
      tc_ep_destroy(E);
    for (Child &X : Tc)
      stopServer(X);
    for (Child &X : Gb)
      stopServer(X);
    Place.undo();
      }
    if (P.Mpi) {
      // The same chases with MPI_Get, once tc's servers and client are
      // gone (a UCX worker left unprogressed meanwhile, its peers gone,
      // can trip over its TCP connections when it is destroyed).
      auto Arg = [&](uint64_t Count) {
        std::string Depths;
        for (uint64_t D : P.Depths)
          Depths += (Depths.empty() ? "" : ",") + std::to_string(D);
        return std::vector<std::string>{
            "--entries", std::to_string(P.Entries), "--seed",
            std::to_string(P.Seed), "--depths", Depths, "--count",
            std::to_string(Count)};
      };
      for (const Record &X :
           Mpi.run("dapc", static_cast<int>(S) + 1, Arg(P.Count),
                   Arg(std::min<uint64_t>(P.Count, 2)),
                   "dapc " + std::to_string(S) + " servers")) {
        Out.push_back(X);
        note("dapc: servers " + std::to_string(S) + " depth " +
             std::to_string(X.Depth) + " " + X.Mode + ": " +
             std::to_string(static_cast<long>(X.Value)) + " chases/s");
      }
    }
  }
  if (P.Pmix) {
    // The job's closing barrier: the server ranks exit after it.
    int Met = 0;
    if (tc_worker_barrier_nb(PmixClient.W, dapcBarrierDone, &Met) !=
        TC_INPROGRESS)
      die("cannot enter the job's closing barrier");
    waitFor(PmixClient.W, [&] { return Met != 0; }, "the closing barrier");
    if (Met != 1)
      die("the job's closing barrier failed (a rank died?)");
  }
  printRecords(Out, O.Fmt);
  if (O.Fmt == Format::Table) {
    // Ratios of one metric between two modes at the same server count and
    // depth, measured in this run; each line names the metric (the rows
    // also hold other metrics, such as mailbox_share, for the same modes).
    auto Ratio = [&](const char *Num, const char *Den, long Depth,
                     const char *Fmt) {
      for (const Record &N : Out)
        if (N.Mode == Num && N.Metric == "rate_chases" &&
            (Depth < 0 || N.Depth == Depth))
          for (const Record &D : Out)
            if (D.Mode == Den && D.Metric == "rate_chases" &&
                D.Servers == N.Servers && D.Depth == N.Depth)
              std::printf(Fmt, N.Servers, N.Depth, N.Value / D.Value);
    };
    // The paper's headline: DAPC over GBPC at the deepest chase.
    Ratio("dapc", "gbpc", static_cast<long>(P.Depths.back()),
          "servers %ld depth %ld: dapc/gbpc rate %.3f\n");
    // What the sandbox costs: how many times faster the plain chaser runs.
    Ratio("dapc", "dapc-sandbox", -1,
          "servers %ld depth %ld: dapc/dapc-sandbox rate %.3f\n");
    // DAPC over the MPI user's chase (an MPI_Get per hop, rows
    // mpi_get:OSC), every depth.
    for (const Record &N : Out)
      if (N.Mode == "dapc" && N.Metric == "rate_chases")
        for (const Record &D : Out)
          if (isMpiMode(D.Mode) && D.Metric == N.Metric &&
              D.Servers == N.Servers && D.Depth == N.Depth)
            std::printf("servers %ld depth %ld: dapc/%s rate %.3g\n",
                        N.Servers, N.Depth, D.Mode.c_str(), N.Value / D.Value);
  }
  // Which osc components mode mpi tried, and what each measured.
  if (O.Fmt == Format::Table)
    std::fputs(Mpi.summary().c_str(), stdout);
  return 0;
}

} // namespace bench
