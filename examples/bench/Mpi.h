//===- Mpi.h - The MPI RMA reference (mode mpi) ------------------*- C++ -*-===//
//
// tc-bench's mode `mpi`: each benchmark's work done with MPI one-sided
// operations by examples/mpi-rma/tc-mpi-rma under mpirun (Mpi.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef TC_EXAMPLES_BENCH_MPI_H
#define TC_EXAMPLES_BENCH_MPI_H

#include "Bench.h"

#include <map>
#include <string>
#include <vector>

namespace bench {

/// Where the ranks run. Rank 0 (the origin, tc-bench's client) runs here;
/// the target ranks here too, or one in each of \p Netns (dapc --hosts).
struct MpiPlace {
  std::string Transport = "shm"; ///< shm | tcp, as the tc modes'
  bool Pin = true;               ///< mpirun --bind-to core (else none)
  std::vector<std::string> Netns; ///< target rank I + 1 in Netns[I]
  std::string Subnet; ///< with Netns: the hosts' subnet, CIDR (mpirun's
                      ///< wire-up and the TCP between ranks)
  /// With Netns: every rank in a namespace, rank I in Netns[I % N] (kv's
  /// symmetric jobs), none here.
  bool AllInNetns = false;
  /// Without Netns: --bind-to core also when the job has at most this many
  /// ranks (a CPU each), though Pin is false.
  long PinUpTo = 0;
};

/// The program a job runs, next to tc-bench: tc-mpi-rma (its first
/// argument is the benchmark), tc-mpi-kv, or tc-kv (a tc program, run under
/// mpirun as the MPI ones are). Each prints `row OP METRIC VALUE UNIT
/// [PARAMS]` lines and an ok line that starts `NAME: BENCH over `.
struct MpiProgram {
  std::string Name = "tc-mpi-rma";
  bool BenchArg = true; ///< BENCH is its first argument
  /// Its --timeout counts these parts of a second (tc-kv: milliseconds).
  long TimeoutScale = 1;
};

/// Runs tc-mpi-rma jobs and keeps, per figure, the fastest osc component.
class MpiReference {
public:
  /// \p OscList: --mpi-osc (comma-separated sm, rdma, ucx, pt2pt), or empty
  /// for every component that works on the transport. \p TimeoutS bounds
  /// each job (tc-mpi-rma --timeout; mpirun is ended 30 s later).
  MpiReference(MpiPlace Place, const std::string &OscList, double TimeoutS,
               MpiProgram Program = MpiProgram());
  /// The components tried when --mpi-osc names none, instead of those
  /// that work on the transport for every benchmark.
  void setDefaultOscs(const std::vector<std::string> &Names) {
    DefaultOscs = Names;
  }
  /// Records keep their mode and name the component in Record::Osc,
  /// instead of a mode OP:OSC.
  void setOscField(bool On) { OscField = On; }
  /// Dies (one line) without mpirun, tc-mpi-rma or a valid --mpi-osc.
  void check();
  /// `tc-mpi-rma Bench Args` on \p Ranks ranks. The first call with \p Key
  /// runs every candidate with \p Probe (the same figures, fewer
  /// operations) and picks the fastest per figure; every call then runs
  /// the picked components with \p Args. Records named OP:OSC.
  std::vector<Record> run(const std::string &Bench, int Ranks,
                          const std::vector<std::string> &Args,
                          const std::vector<std::string> &Probe,
                          const std::string &Key);
  /// One job of \p Prog with no osc component forced and \p Env in every
  /// rank's environment (tc-kv under mpirun): its records.
  std::vector<Record> plain(const MpiProgram &Prog, const std::string &Bench,
                            int Ranks, const std::vector<std::string> &Args,
                            const std::vector<std::string> &Env);
  /// Lines for the table's end: the programs' ok lines (every result
  /// checked, which osc) and what every candidate measured in the probes.
  std::string summary(const std::string &Tag = "mpi") const;

private:
  std::vector<Record> job(const MpiProgram &Prog, const std::string &Bench,
                          int Ranks, const std::vector<std::string> &Args,
                          const std::string &Osc,
                          const std::vector<std::string> &Env = {});
  MpiPlace P;
  std::string OscList;
  double TimeoutS;
  MpiProgram Program;
  std::vector<std::string> DefaultOscs;
  bool OscField = false;
  /// Per key: figure -> the component that won its probe.
  std::map<std::string, std::map<std::string, std::string>> Winners;
  /// Per key: the figures in the order tc-mpi-rma prints them.
  std::map<std::string, std::vector<std::string>> FigureOrder;
  std::vector<std::string> OkLines;
  /// Per key and figure: what each candidate measured in the probe.
  std::map<std::string, std::map<std::string, std::string>> Probes;
};

/// The path of program \p Name next to tc-bench.
std::string besideSelf(const std::string &Name);

/// Rows of the MPI reference: mode mpi_OP:OSC.
bool isMpiMode(const std::string &Mode);
/// mpi_acc:sm -> mpi_acc.
std::string mpiOp(const std::string &Mode);

} // namespace bench

#endif // TC_EXAMPLES_BENCH_MPI_H
