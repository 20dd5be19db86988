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
};

/// Runs tc-mpi-rma jobs and keeps, per figure, the fastest osc component.
class MpiReference {
public:
  /// \p OscList: --mpi-osc (comma-separated sm, rdma, ucx, pt2pt), or empty
  /// for every component that works on the transport. \p TimeoutS bounds
  /// each job (tc-mpi-rma --timeout; mpirun is ended 30 s later).
  MpiReference(MpiPlace Place, const std::string &OscList, double TimeoutS);
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
  /// Lines for the table's end: tc-mpi-rma's ok lines (every result
  /// checked, which osc) and what every candidate measured in the probes.
  std::string summary() const;

private:
  std::vector<Record> job(const std::string &Bench, int Ranks,
                          const std::vector<std::string> &Args,
                          const std::string &Osc);
  MpiPlace P;
  std::string OscList;
  double TimeoutS;
  /// Per key: figure -> the component that won its probe.
  std::map<std::string, std::map<std::string, std::string>> Winners;
  /// Per key: the figures in the order tc-mpi-rma prints them.
  std::map<std::string, std::vector<std::string>> FigureOrder;
  std::vector<std::string> OkLines;
  /// Per key and figure: what each candidate measured in the probe.
  std::map<std::string, std::map<std::string, std::string>> Probes;
};

/// Rows of the MPI reference: mode mpi_OP:OSC.
bool isMpiMode(const std::string &Mode);
/// mpi_acc:sm -> mpi_acc.
std::string mpiOp(const std::string &Mode);

} // namespace bench

#endif // TC_EXAMPLES_BENCH_MPI_H
