//===- Mpi.cpp - The MPI RMA reference: tc-mpi-rma under mpirun ----------===//
//
// Mode `mpi` of tsi, dapc, sss and iput: the same work written with MPI
// one-sided operations (examples/mpi-rma/tc-mpi-rma.c), launched by mpirun
// beside the tc modes. Open MPI picks its one-sided component (osc) per
// window, so each candidate runs as a job of its own, forced with --mca
// osc: first a short probe of every candidate the transport allows, then
// the full measurement with the one that was fastest for each figure. The
// rows are named OP:OSC (mpi_acc:sm, mpi_get:ucx, ...). Every job is
// bounded in time (tc-mpi-rma --timeout, and mpirun's process group is
// ended after that plus a grace period); any failure is one line.
//
//===----------------------------------------------------------------------===//

#include "Mpi.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <poll.h>
#include <sched.h>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace bench {

namespace {

/// A candidate: an osc component and the MCA settings it runs with.
struct Osc {
  std::string Name;
  std::vector<std::string> Mca; ///< mpirun arguments
  bool Ucx = false;             ///< UCX's components: UCX_TLS applies
};

std::vector<Osc> candidates(const MpiPlace &P, const std::string &List,
                            const std::vector<std::string> &Default) {
  bool Shm = P.Transport == "shm";
  std::string Btl = Shm ? "self,vader" : "self,tcp";
  auto Ob1 = [&](const std::string &Name) {
    Osc O{Name,
          {"--mca", "osc", Name, "--mca", "pml", "ob1", "--mca", "btl", Btl},
          false};
    if (!Shm) // TCP between the ranks on the interface tc uses.
      O.Mca.insert(O.Mca.end(), {"--mca", "btl_tcp_if_include",
                                 P.Netns.empty() ? "lo" : P.Subnet});
    return O;
  };
  // Open MPI's UCX components accept only InfiniBand-class devices unless
  // told otherwise; with these they take what UCX_TLS allows.
  Osc Ucx{"ucx",
          {"--mca", "osc", "ucx", "--mca", "pml", "ucx", "--mca",
           "pml_ucx_tls", "any", "--mca", "pml_ucx_devices", "any"},
          true};
  std::vector<std::string> Names;
  if (List.empty() && !Default.empty()) {
    Names = Default;
  } else if (List.empty()) {
    // What works where (Open MPI 4.1): sm needs every rank on one node,
    // rdma a BTL with RDMA (vader here; not tcp).
    Names = Shm ? std::vector<std::string>{"sm", "rdma", "ucx", "pt2pt"}
                : std::vector<std::string>{"ucx", "pt2pt"};
  } else {
    std::stringstream SS(List);
    for (std::string N; std::getline(SS, N, ',');)
      Names.push_back(N);
  }
  std::vector<Osc> Out;
  for (const std::string &N : Names) {
    if (N == "ucx")
      Out.push_back(Ucx);
    else if (N == "sm" || N == "rdma" || N == "pt2pt")
      Out.push_back(Ob1(N));
    else
      die("bad osc component '" + N +
          "' in --mpi-osc (expected sm, rdma, ucx, pt2pt)");
  }
  if (Out.empty())
    die("--mpi-osc needs at least one component");
  return Out;
}

/// Lower is better for latencies, costs (operations, bytes) and kv's
/// table ratio, higher for rates.
bool better(const std::string &Metric, double A, double B) {
  for (const char *Low : {"latency", "ops", "bytes", "ratio"})
    if (Metric.find(Low) != std::string::npos)
      return A < B;
  return A > B;
}

/// Which figure a row is, without the osc: OP METRIC and its parameters.
std::string figureKey(const Record &R) {
  std::string K = R.Mode + " " + R.Metric;
  if (R.Depth >= 0)
    K += " depth " + std::to_string(R.Depth);
  if (R.PayloadBytes >= 0)
    K += " payload " + std::to_string(R.PayloadBytes);
  return K;
}

bool onPath(const std::string &Tool) {
  const char *Path = std::getenv("PATH");
  std::stringstream SS(Path ? Path : "");
  for (std::string Dir; std::getline(SS, Dir, ':');)
    if (!Dir.empty() && access((Dir + "/" + Tool).c_str(), X_OK) == 0)
      return true;
  return false;
}

/// The first line worth showing of a failed job's stderr: the program's
/// own error (a line that starts with \p Name), else mpirun's first line
/// of text.
std::string firstError(const std::string &Err, const std::string &Name) {
  std::string First;
  std::stringstream SS(Err);
  for (std::string L; std::getline(SS, L);) {
    if (L.rfind(Name + ":", 0) == 0)
      return L;
    bool Text = L.find_first_not_of("- \t") != std::string::npos;
    if (First.empty() && Text)
      First = L;
  }
  return First.empty() ? "no error output" : First;
}

/// mpirun's launch agent for network-namespace hosts, in place of ssh: it
/// runs the daemon's command inside the namespace named as the host, with
/// that name as its hostname (a UTS namespace of its own), so that Open
/// MPI sees separate nodes and keeps separate session directories.
const char *const NetnsAgent =
    "#!/bin/sh\n"
    "# tc-bench: mpirun's launch agent for network-namespace hosts\n"
    "host=$1; shift\n"
    "exec ip netns exec \"$host\" unshare --uts sh -c "
    "'hostname \"$0\" && exec sh -c \"$1\"' \"$host\" \"$*\"\n";

} // namespace

std::string besideSelf(const std::string &Name) {
  std::string Self = selfPath();
  return Self.substr(0, Self.rfind('/')) + "/" + Name;
}

MpiReference::MpiReference(MpiPlace Place, const std::string &OscList,
                           double TimeoutS, MpiProgram Program)
    : P(std::move(Place)), OscList(OscList), TimeoutS(TimeoutS),
      Program(std::move(Program)) {}

void MpiReference::check() {
  if (!onPath("mpirun"))
    die("mode mpi needs Open MPI's mpirun on the PATH (apt-get install "
        "openmpi-bin)");
  std::string Path = besideSelf(Program.Name);
  if (access(Path.c_str(), X_OK) != 0)
    die("mode mpi needs " + Program.Name + " next to tc-bench (" + Path +
        "; it is built when MPI is found: apt-get install libopenmpi-dev)");
  candidates(P, OscList, DefaultOscs); // Dies on a bad --mpi-osc.
}

std::vector<Record> MpiReference::plain(const MpiProgram &Prog,
                                        const std::string &Bench, int Ranks,
                                        const std::vector<std::string> &Args,
                                        const std::vector<std::string> &Env) {
  return job(Prog, Bench, Ranks, Args, "", Env);
}

std::vector<Record> MpiReference::job(const MpiProgram &Prog,
                                      const std::string &Bench, int Ranks,
                                      const std::vector<std::string> &Args,
                                      const std::string &OscName,
                                      const std::vector<std::string> &Env0) {
  Osc O; // None for a plain job: no MCA settings.
  for (const Osc &C : candidates(P, OscList, DefaultOscs))
    if (!OscName.empty() && C.Name == OscName)
      O = C;
  char Tmpl[] = "/tmp/tc-bench-mpi.XXXXXX";
  if (!mkdtemp(Tmpl))
    die(std::string("cannot create a directory for mpirun: ") +
        std::strerror(errno));
  std::string Dir = Tmpl;
  std::vector<std::string> A = {"mpirun"};
  if (geteuid() == 0)
    A.push_back("--allow-run-as-root");
  A.insert(A.end(), {"--oversubscribe", "-n", std::to_string(Ranks)});
  bool Pin = P.Pin || (P.Netns.empty() && Ranks <= P.PinUpTo);
  A.insert(A.end(), {"--bind-to", Pin ? "core" : "none"});
  // Waiting ranks yield their CPU. A target that must progress for the
  // origin (pt2pt, UCX over TCP) spins in MPI_Barrier; on this 2-core VM a
  // spinning target that does not yield loses whole scheduler slices when
  // the CPUs are shared: a pt2pt chase over loopback TCP, depth 64, ran
  // 5 chases/s without and 350-540 with on 3 ranks, 1-5 against 26-45 on 2
  // ranks under load, and the same either way on 2 ranks on an idle VM
  // (docs/benchmarks.md). Open MPI sets this by itself only when it sees
  // more ranks than cores on a node, which it never does across namespace
  // hosts.
  A.insert(A.end(), {"--mca", "mpi_yield_when_idle", "1"});
  if (P.Netns.empty()) {
    A.insert(A.end(), {"--mca", "oob_tcp_if_include", "lo"});
  } else {
    std::string Agent = Dir + "/netns-agent.sh";
    FILE *F = std::fopen(Agent.c_str(), "w");
    if (!F || std::fputs(NetnsAgent, F) < 0 || std::fclose(F) != 0 ||
        chmod(Agent.c_str(), 0700) != 0)
      die("cannot write " + Agent);
    std::string Hosts;
    if (P.AllInNetns) {
      // Rank I in Netns[I % N]: as many slots on each as it gets ranks.
      size_t N = std::min(P.Netns.size(), static_cast<size_t>(Ranks));
      for (size_t I = 0; I < N; ++I)
        Hosts += (I ? "," : "") + P.Netns[I] + ":" +
                 std::to_string((static_cast<size_t>(Ranks) - I + N - 1) / N);
      // By slot, mpirun fills a host before the next: round-robin instead.
      A.insert(A.end(), {"--map-by", "node"});
    } else {
      Hosts = "localhost:1";
      for (int I = 1; I < Ranks; ++I)
        Hosts += "," + P.Netns[static_cast<size_t>(I - 1)] + ":1";
    }
    // rtc_hwloc_vmhole none: an orted started in a namespace sometimes
    // crashes writing hwloc's topology into a shared segment at the address
    // it picked (hwloc_shmem_topology_write); without that segment the ranks
    // read the topology themselves.
    A.insert(A.end(), {"--mca", "oob_tcp_if_include", P.Subnet, "--mca",
                       "plm_rsh_agent", Agent, "--mca",
                       "plm_rsh_no_tree_spawn", "1", "--mca",
                       "rtc_hwloc_vmhole", "none", "--host", Hosts});
  }
  A.insert(A.end(), O.Mca.begin(), O.Mca.end());
  // Environment the ranks need, also on other nodes.
  std::vector<std::string> Env = Env0;
  if (O.Ucx) {
    // tc's UCX_TLS, with self for a rank's own window.
    std::string Tls = std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "";
    if (!Tls.empty() && Tls.find("self") == std::string::npos)
      Tls += ",self";
    if (!Tls.empty())
      Env.push_back("UCX_TLS=" + Tls);
    if (const char *D = std::getenv("UCX_NET_DEVICES"))
      Env.push_back(std::string("UCX_NET_DEVICES=") + D);
  }
  if (const char *F = std::getenv("TC_MPI_RMA_FAULT"))
    Env.push_back(std::string("TC_MPI_RMA_FAULT=") + F);
  for (const std::string &E : Env)
    A.insert(A.end(), {"-x", E});
  A.push_back(besideSelf(Prog.Name));
  if (Prog.BenchArg)
    A.push_back(Bench);
  A.insert(A.end(), Args.begin(), Args.end());
  A.insert(A.end(), {"--timeout", std::to_string(static_cast<long>(TimeoutS) *
                                                  Prog.TimeoutScale)});

  int Out[2], Err[2];
  if (pipe2(Out, O_CLOEXEC) != 0 || pipe2(Err, O_CLOEXEC) != 0)
    die(std::string("pipe: ") + std::strerror(errno));
  pid_t Pid = forkTied();
  if (Pid == 0) {
    setpgid(0, 0); // mpirun and what it starts: one group to end.
    // tc-bench may be pinned to one CPU: mpirun places its ranks itself.
    cpu_set_t All;
    CPU_ZERO(&All);
    for (int C = 0; C < CPU_SETSIZE; ++C)
      CPU_SET(C, &All);
    sched_setaffinity(0, sizeof All, &All);
    // A job directory of its own (two mpiruns sharing one race).
    setenv("TMPDIR", Dir.c_str(), 1);
    dup2(Out[1], STDOUT_FILENO);
    dup2(Err[1], STDERR_FILENO);
    execArgv(A);
  }
  setpgid(Pid, Pid);
  close(Out[1]);
  close(Err[1]);
  std::string Stdout, Stderr;
  auto T0 = Clock::now();
  double Limit = TimeoutS + 30; // tc-mpi-rma stops itself first.
  bool TimedOut = false;
  for (int Open = 2; Open > 0;) {
    pollfd Fds[2] = {{Out[0], POLLIN, 0}, {Err[0], POLLIN, 0}};
    double Left = Limit - secondsSince(T0);
    if (Left <= 0 || Interrupted) {
      TimedOut = !Interrupted;
      break;
    }
    int RC = poll(Fds, 2, static_cast<int>(std::min(Left, 0.5) * 1000) + 1);
    if (RC < 0 && errno != EINTR)
      die(std::string("poll: ") + std::strerror(errno));
    for (int I = 0; I < 2 && RC > 0; ++I) {
      if (!(Fds[I].revents & (POLLIN | POLLHUP | POLLERR)) || Fds[I].fd < 0)
        continue;
      char Buf[4096];
      ssize_t N = read(Fds[I].fd, Buf, sizeof Buf);
      if (N > 0) {
        (I ? Stderr : Stdout).append(Buf, static_cast<size_t>(N));
      } else if (N == 0 || errno != EINTR) {
        close(I ? Err[0] : Out[0]);
        (I ? Err[0] : Out[0]) = -1;
        --Open;
      }
    }
  }
  if (Out[0] >= 0)
    close(Out[0]);
  if (Err[0] >= 0)
    close(Err[0]);
  int Status = 0;
  if (TimedOut || Interrupted) {
    // mpirun passes the TERM on to its ranks; KILL what is left.
    kill(-Pid, SIGTERM);
    auto T1 = Clock::now();
    while (waitpid(Pid, &Status, WNOHANG) == 0 && secondsSince(T1) < 10)
      usleep(10000); // Polling for an exit; not a synchronisation point.
    kill(-Pid, SIGKILL);
    waitpid(Pid, &Status, 0);
  } else {
    waitpid(Pid, &Status, 0);
  }
  std::system(("rm -rf '" + Dir + "'").c_str());
  std::string What =
      (O.Name.empty() ? Prog.Name + " (" : "mpi (osc " + O.Name + ", ") +
      Bench + " over " + std::to_string(Ranks) + " ranks)";
  if (Interrupted)
    die("interrupted");
  if (TimedOut)
    die(What + ": mpirun did not end within " +
        std::to_string(static_cast<long>(Limit)) + " s");
  if (!WIFEXITED(Status) || WEXITSTATUS(Status) != 0)
    die(What + ": " + firstError(Stderr, Prog.Name));
  size_t Ok = Stdout.find(Prog.Name + ": " + Bench + " over ");
  size_t OkEnd = Ok == std::string::npos ? Ok : Stdout.find('\n', Ok);
  if (OkEnd == std::string::npos ||
      Stdout.compare(OkEnd - 4, 4, ": ok") != 0)
    die(What + ": " + Prog.Name + " did not say ok: " +
        firstError(Stderr, Prog.Name));
  std::string OkLine = Stdout.substr(Ok, OkEnd - Ok);
  if (std::find(OkLines.begin(), OkLines.end(), OkLine) == OkLines.end())
    OkLines.push_back(OkLine);

  std::vector<Record> Rows;
  std::stringstream SS(Stdout);
  for (std::string L; std::getline(SS, L);) {
    std::stringstream W(L);
    std::string Tag, Op, Metric, Unit, Param;
    double V;
    if (!(W >> Tag) || Tag != "row")
      continue;
    if (!(W >> Op >> Metric >> V >> Unit))
      die(What + ": cannot read " + Prog.Name + "'s line '" + L + "'");
    Record R = record(Bench, Op, Metric, V, Unit, P.Transport);
    while (W >> Param) {
      size_t Eq = Param.find('=');
      long X = Eq == std::string::npos ? -1 : std::atol(Param.c_str() + Eq + 1);
      std::string K = Param.substr(0, Eq);
      if (K == "servers")
        R.Servers = X;
      else if (K == "depth")
        R.Depth = X;
      else if (K == "payload")
        R.PayloadBytes = X;
    }
    Rows.push_back(R);
  }
  if (Rows.empty())
    die(What + ": " + Prog.Name + " printed no figures");
  return Rows;
}

std::vector<Record> MpiReference::run(const std::string &Bench, int Ranks,
                                      const std::vector<std::string> &Args,
                                      const std::vector<std::string> &Probe,
                                      const std::string &Key) {
  std::vector<Osc> Cands = candidates(P, OscList, DefaultOscs);
  auto &Win = Winners[Key];
  std::vector<std::string> &Order = FigureOrder[Key];
  if (Win.empty()) {
    // The probe: every candidate, short; per figure the fastest.
    std::map<std::string, double> Best;
    for (const Osc &O : Cands) {
      note("mpi: probe of osc " + O.Name + " (" + Key + ")");
      for (const Record &R : job(Program, Bench, Ranks, Probe, O.Name)) {
        std::string F = figureKey(R);
        char Buf[96];
        std::snprintf(Buf, sizeof Buf, "%s %.4g", O.Name.c_str(), R.Value);
        if (std::find(Order.begin(), Order.end(), F) == Order.end())
          Order.push_back(F);
        std::string &Line = Probes[Key][F];
        Line += (Line.empty() ? "" : ", ") + std::string(Buf);
        if (!Best.count(F) || better(R.Metric, R.Value, Best[F])) {
          Best[F] = R.Value;
          Win[F] = O.Name;
        }
      }
    }
  }
  // The measurement: each winner once; every figure from its winner.
  std::vector<std::string> Run;
  for (const auto &[F, Name] : Win)
    if (std::find(Run.begin(), Run.end(), Name) == Run.end())
      Run.push_back(Name);
  std::vector<Record> Out;
  for (const Osc &O : Cands) {
    if (std::find(Run.begin(), Run.end(), O.Name) == Run.end())
      continue;
    note("mpi: osc " + O.Name + " (" + Key + ")");
    for (const Record &R : job(Program, Bench, Ranks, Args, O.Name)) {
      auto It = Win.find(figureKey(R));
      if (It != Win.end() && It->second == O.Name)
        Out.push_back(R);
    }
  }
  // In the order tc-mpi-rma prints them, whichever component won.
  std::vector<Record> Sorted;
  for (const std::string &F : Order)
    for (const Record &R : Out)
      if (figureKey(R) == F) {
        Sorted.push_back(R);
        if (OscField)
          Sorted.back().Osc = Win[F];
        else
          Sorted.back().Mode += ":" + Win[F];
      }
  return Sorted;
}

std::string MpiReference::summary(const std::string &Tag) const {
  std::string S;
  for (const std::string &L : OkLines)
    S += Tag + " checked: " + L + "\n";
  for (const auto &[Key, Figures] : Probes)
    for (const std::string &F : FigureOrder.at(Key))
      S += "mpi probe (" + Key + ") " + F + ": " + Figures.at(F) + " -> " +
           Winners.at(Key).at(F) + "\n";
  return S;
}

bool isMpiMode(const std::string &Mode) { return Mode.rfind("mpi_", 0) == 0; }

std::string mpiOp(const std::string &Mode) {
  return Mode.substr(0, Mode.find(':'));
}

} // namespace bench
