//===- Kv.cpp - `tc-bench kv`: a distributed hash table on real text -------===//
//
// The word count's table (docs/kv.md) three ways, each a job under mpirun:
//  - tc: tc-kv --bench (examples/kv): upserts as batched kv_upsert ifuncs
//    run at the owner, gets as kv_get ifuncs answered with kv_result;
//  - mpi: tc-mpi-kv --mode rma --bench (examples/mpi-rma): the table in MPI
//    windows, one-sided operations (compare-and-swap, fetch-and-op, gets);
//    each figure from the fastest osc component of a short probe, as the
//    other scenarios' mode mpi (Mpi.cpp);
//  - alltoall: tc-mpi-kv --mode alltoall --bench: the MPI_Alltoallv
//    shuffle, then local counting.
// Every job checks its own results (the counts add up, get answers are the
// counts) and prints rows; this file runs them, names the records (bench
// kv, modes tc/mpi/alltoall, ranks, osc) and adds the ratios of tc to each.
//
//===----------------------------------------------------------------------===//

#include "Bench.h"
#include "Mpi.h"

#include <algorithm>
#include <cstdio>
#include <dirent.h>
#include <sched.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace bench {
namespace {

struct Params {
  std::vector<uint64_t> Ranks;
  std::vector<std::string> Files;
  uint64_t Repeat = 100, MpiRepeat = 0, MpiWords = 0, Gets = 2000,
           Batch = 32000;
  bool Tc = true, Mpi = true, Alltoall = true;
};

/// The regular files of /usr/share/common-licenses (Debian's base-files:
/// on every Debian system), by name: the default text.
std::vector<std::string> defaultFiles() {
  const std::string Dir = "/usr/share/common-licenses";
  std::vector<std::string> Out;
  if (DIR *D = opendir(Dir.c_str())) {
    while (dirent *E = readdir(D)) {
      std::string Path = Dir + "/" + E->d_name;
      struct stat St;
      if (E->d_name[0] != '.' && lstat(Path.c_str(), &St) == 0 &&
          S_ISREG(St.st_mode))
        Out.push_back(Path);
    }
    closedir(D);
  }
  std::sort(Out.begin(), Out.end());
  return Out;
}

std::vector<std::string> splitList(const std::string &V) {
  std::vector<std::string> Out;
  std::stringstream SS(V);
  for (std::string X; std::getline(SS, X, ',');)
    if (!X.empty())
      Out.push_back(X);
  return Out;
}

/// The 'netns NAME ADDR' lines of a hosts file (scripts/netns.sh writes
/// them); 'client' lines are skipped.
std::vector<std::pair<std::string, std::string>>
readNetnsHosts(const std::string &Path) {
  std::ifstream In(Path);
  if (!In)
    die("cannot read hosts file '" + Path + "'");
  std::vector<std::pair<std::string, std::string>> Out;
  unsigned N = 0;
  for (std::string Line; std::getline(In, Line);) {
    ++N;
    std::istringstream S(Line);
    std::string Kind, Name, Addr;
    if (!(S >> Kind) || Kind[0] == '#' || Kind == "client")
      continue;
    if (Kind != "netns" || !(S >> Name >> Addr))
      die(Path + ":" + std::to_string(N) +
          ": kv runs its ranks in namespaces: expected 'netns NAME ADDR'");
    Out.push_back({Name, Addr});
  }
  if (Out.empty())
    die("hosts file '" + Path + "' lists no namespaces");
  return Out;
}

const char *const KvUsage = R"(USAGE: tc-bench kv [options]

A distributed hash table on real text (docs/kv.md): every rank of an mpirun
job owns a shard and sends the words of its slice of the files to their
owners; then rank 0 times gets of one key (round trip, p50) and every rank
gets all its words again. Three versions: tc (tc-kv: batched kv_upsert and
kv_get ifuncs run at the owner), mpi (tc-mpi-kv --mode rma: the table in MPI
windows, updated with compare-and-swap, fetch-and-op and gets, as BCL's
HashMap; each figure from the fastest osc component) and alltoall
(tc-mpi-kv --mode alltoall: the MPI_Alltoallv shuffle). Every job checks
its results. Rows: upsert_rate, get_latency_us (not alltoall), get_rate,
table_ratio (a rank's table bytes over its keys' and values' bytes, the
largest), table_bytes, words, distinct; ratios tc/mpi and tc/alltoall.

OPTIONS:
  --modes LIST     Any of tc,mpi,alltoall (default all three)
  --ranks LIST     Rank counts (default 2,4; --quick 2)
  --files LIST     The text, comma-separated (default the regular files of
                   /usr/share/common-licenses)
  --repeat K       Upsert and get the words K times over (default 100;
                   --quick 2)
  --mpi-repeat K   The same for mode mpi (default: --repeat over shared
                   memory, 1 over TCP, where it is slower by 100x or more)
  --mpi-words N    Mode mpi: each rank's first N words only (default: all
                   over shared memory, 4000 over TCP, where MPI RMA
                   upserts run at some 10^4-10^5 per second)
  --gets G         Timed single-key gets (default 2000; --quick 200)
  --batch BYTES    tc: records per message (default 32000)
  --hosts FILE     Ranks in network namespaces ('netns NAME ADDR' lines, as
                   scripts/netns.sh writes them), rank I in the I-th modulo
                   their number; with --transport tcp
)";

} // namespace

int runKv(const CommonOptions &O, const std::vector<std::string> &Args) {
  Params P;
  P.Ranks = O.Quick ? std::vector<uint64_t>{2} : std::vector<uint64_t>{2, 4};
  if (O.Quick)
    P.Repeat = 2, P.Gets = 200;
  if (!walkArgs(
          "kv", Args, KvUsage,
          [&](const std::string &A, const std::function<std::string()> &Value) {
            if (A == "--modes") {
              P.Tc = P.Mpi = P.Alltoall = false;
              for (const std::string &M : splitList(Value())) {
                if (M == "tc")
                  P.Tc = true;
                else if (M == "mpi")
                  P.Mpi = true;
                else if (M == "alltoall")
                  P.Alltoall = true;
                else
                  die("bad mode '" + M +
                      "' in --modes (expected tc, mpi, alltoall)");
              }
            } else if (A == "--ranks") {
              P.Ranks = parseList(A, Value());
            } else if (A == "--files") {
              P.Files = splitList(Value());
            } else if (A == "--repeat") {
              P.Repeat = parseCount(A, Value());
            } else if (A == "--mpi-repeat") {
              P.MpiRepeat = parseCount(A, Value());
            } else if (A == "--mpi-words") {
              P.MpiWords = parseCount(A, Value());
            } else if (A == "--gets") {
              P.Gets = parseCount(A, Value());
            } else if (A == "--batch") {
              P.Batch = parseCount(A, Value());
            } else {
              return false;
            }
            return true;
          }))
    return 0;
  if (!P.Tc && !P.Mpi && !P.Alltoall)
    die("--modes names no mode");
  for (uint64_t R : P.Ranks)
    if (R < 2 || R > 64)
      die("bad rank count " + std::to_string(R) + " (2 to 64)");
  if (!P.Repeat || !P.Gets || !P.Batch)
    die("--repeat, --gets and --batch must be at least 1");
  if (P.Files.empty())
    P.Files = defaultFiles();
  if (P.Files.empty())
    die("no text: /usr/share/common-licenses has no files (pass --files)");
  for (const std::string &F : P.Files)
    if (access(F.c_str(), R_OK) != 0)
      die("cannot read '" + F + "'");

  // The CPUs this process may use (taskset, cgroups): the namespace hosts
  // share them too.
  long Cores = sysconf(_SC_NPROCESSORS_ONLN);
  {
    cpu_set_t Set;
    if (sched_getaffinity(0, sizeof Set, &Set) == 0)
      Cores = CPU_COUNT(&Set);
  }
  MpiPlace Place;
  Place.Transport = O.Transport;
  // A CPU each when there are enough (mpirun --bind-to core, every
  // version): two busy ranks left to the kernel may share one CPU while
  // other work has the other, and a get then waits for a scheduler tick
  // (4-8 ms against 11 us here). Across namespace hosts each is a node of
  // its own to Open MPI, which would bind every rank to its node's first
  // core: not there.
  Place.Pin = false;
  Place.PinUpTo = Cores;
  Place.AllInNetns = true;
  if (!O.HostsFile.empty()) {
    if (O.Transport != "tcp")
      die("--hosts runs the ranks over TCP: add --transport tcp");
    for (const auto &[Name, Addr] : readNetnsHosts(O.HostsFile)) {
      Place.Netns.push_back(Name);
      Place.Subnet = Addr.substr(0, Addr.rfind('.')) + ".0/24";
    }
  }
  bool Netns = !Place.Netns.empty();
  // tc-kv's UCX: shared memory, or TCP on loopback or the namespaces' eth0.
  std::vector<std::string> TcEnv =
      O.Transport == "shm"
          ? std::vector<std::string>{"UCX_TLS=posix,self"}
          : std::vector<std::string>{"UCX_TLS=tcp", Netns
                                                        ? "UCX_NET_DEVICES=eth0"
                                                        : "UCX_NET_DEVICES=lo"};
  // UCX_TLS as tc-kv's for the MPI jobs' osc ucx (Mpi.cpp passes it on).
  setenv("UCX_TLS", O.Transport == "shm" ? "posix,self" : "tcp", 1);
  if (O.Transport == "tcp")
    setenv("UCX_NET_DEVICES", Netns ? "eth0" : "lo", 1);

  // The MPI references (--mpi-osc names others): over shared memory osc
  // sm (rdma's MPI_Compare_and_swap crashes in Open MPI 4.1.4's vader BTL;
  // ucx and pt2pt upsert 100x slower than sm there and win no figure by
  // more than noise), over TCP pt2pt (ucx's atomics, emulated over TCP,
  // upsert some 10^4 per second at 2 ranks and crawl at 4 with UCX
  // endpoint timeouts; its get latency is within a fifth of pt2pt's).
  MpiProgram TcKv{"tc-kv", false, 1000}, MpiKv{"tc-mpi-kv", false, 1};
  MpiReference Tc(Place, O.MpiOsc, O.MpiTimeoutS, TcKv);
  MpiReference Rma(Place, O.MpiOsc, O.MpiTimeoutS, MpiKv);
  MpiReference A2a(Place, O.MpiOsc, O.MpiTimeoutS, MpiKv);
  std::vector<std::string> Oscs =
      O.Transport == "shm" ? std::vector<std::string>{"sm"}
                           : std::vector<std::string>{"pt2pt"};
  for (MpiReference *M : {&Rma, &A2a}) {
    M->setDefaultOscs(Oscs);
    M->setOscField(true);
  }
  if (P.Mpi)
    Rma.check();
  if (P.Alltoall)
    A2a.check();
  if (P.Tc && access(besideSelf("tc-kv").c_str(), X_OK) != 0)
    die("mode tc needs tc-kv next to tc-bench (" + besideSelf("tc-kv") +
        "; it is built with PMIx)");

  bool Shm = O.Transport == "shm";
  uint64_t MpiRepeat = P.MpiRepeat ? P.MpiRepeat : Shm ? P.Repeat : 1;
  uint64_t MpiWords = P.MpiWords ? P.MpiWords : Shm ? 0 : 4000;
  // The probes: the two smallest files, once.
  std::vector<std::string> Small = P.Files;
  std::sort(Small.begin(), Small.end(),
            [](const std::string &A, const std::string &B) {
              struct stat X {}, Y {};
              stat(A.c_str(), &X);
              stat(B.c_str(), &Y);
              return X.st_size < Y.st_size;
            });
  Small.resize(std::min<size_t>(Small.size(), 2));
  // A job's arguments: tc-kv's (mode null) or tc-mpi-kv's; Mpi.cpp adds
  // --timeout.
  auto JobArgs = [&](const char *Mode, uint64_t Repeat, uint64_t Gets,
                     const std::vector<std::string> &Files) {
    std::vector<std::string> A;
    if (Mode)
      A = {"--mode", Mode};
    else
      A = {"--batch", std::to_string(P.Batch), "--ifunc-path", O.IfuncPath};
    A.insert(A.end(), {"--bench", "--repeat", std::to_string(Repeat),
                       "--gets", std::to_string(Gets)});
    A.insert(A.end(), Files.begin(), Files.end());
    return A;
  };

  std::vector<Record> Out;
  auto Keep = [&](std::vector<Record> Rs, const char *Mode, uint64_t R) {
    for (Record &X : Rs) {
      X.Bench = "kv";
      X.Mode = Mode;
      X.Ranks = static_cast<long>(R);
      X.Transport = O.Transport;
      note("kv: " + std::to_string(R) + " ranks " + X.Mode +
           (X.Osc.empty() ? "" : " (osc " + X.Osc + ")") + " " + X.Metric +
           " " + std::to_string(X.Value) + " " + X.Unit);
      Out.push_back(X);
    }
  };
  for (uint64_t R : P.Ranks) {
    int N = static_cast<int>(R);
    if (P.Tc) {
      // More ranks than CPUs: waiting ranks sleep until a message comes
      // (woken by the kernel), rather than poll and yield and wait for
      // their turn on a CPU that the polling ranks share (as tc-bench
      // dapc's servers block then).
      std::vector<std::string> A = JobArgs(nullptr, P.Repeat, P.Gets, P.Files);
      if (static_cast<long>(R) > Cores)
        A.insert(A.begin(), {"--idle", "wait"});
      Keep(Tc.plain(TcKv, "kv", N, A, TcEnv), "tc", R);
    }
    std::string Key = std::to_string(R) + " ranks";
    std::vector<std::string> RmaArgs =
        JobArgs("rma", MpiRepeat, P.Gets, P.Files);
    if (MpiWords)
      RmaArgs.insert(RmaArgs.begin(),
                     {"--max-words", std::to_string(MpiWords)});
    if (P.Mpi)
      Keep(Rma.run("kv", N, RmaArgs,
                   JobArgs("rma", 1, std::min<uint64_t>(P.Gets, 100), Small),
                   "kv rma, " + Key),
           "mpi", R);
    if (P.Alltoall)
      Keep(A2a.run("kv", N, JobArgs("alltoall", P.Repeat, P.Gets, P.Files),
                   JobArgs("alltoall", 1, 1, Small), "kv alltoall, " + Key),
           "alltoall", R);
  }
  // tc over each MPI version, per rank count: rates tc/MPI (above 1: tc
  // faster), the latency tc/MPI (below 1: tc faster).
  std::vector<Record> Ratios;
  for (uint64_t R : P.Ranks)
    for (const char *Other : {"mpi", "alltoall"})
      for (const char *Metric : {"upsert_rate", "get_rate", "get_latency_us"}) {
        const Record *A = nullptr, *B = nullptr;
        for (const Record &X : Out)
          if (X.Ranks == static_cast<long>(R) && X.Metric == Metric) {
            if (X.Mode == "tc")
              A = &X;
            else if (X.Mode == Other)
              B = &X;
          }
        if (!A || !B || B->Value == 0)
          continue;
        std::string M = Metric;
        M = M == "get_latency_us" ? "get_latency_ratio" : M + "_ratio";
        Record X = record("kv", std::string("tc/") + Other, M,
                          A->Value / B->Value, "ratio", O.Transport);
        X.Ranks = static_cast<long>(R);
        X.Osc = B->Osc;
        Ratios.push_back(X);
      }
  Out.insert(Out.end(), Ratios.begin(), Ratios.end());
  printRecords(Out, O.Fmt);
  if (O.Fmt == Format::Table) {
    for (const Record &X : Ratios)
      std::printf("ranks %ld: %s %s %.3g\n", X.Ranks, X.Mode.c_str(),
                  X.Metric.c_str(), X.Value);
    std::fputs(Tc.summary("tc").c_str(), stdout);
    std::fputs(Rma.summary().c_str(), stdout);
    std::fputs(A2a.summary().c_str(), stdout);
  }
  return 0;
}

} // namespace bench
