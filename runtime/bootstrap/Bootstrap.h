//===- Bootstrap.h - Wire-up through the job launcher (PMIx) ----*- C++ -*-===//
//
// A process started by a PMIx launcher (Open MPI's mpirun, Slurm's
// `srun --mpi=pmix`) learns its rank and the job size from the launcher,
// publishes key/value pairs under its rank, meets every other rank in a
// fence, and then reads what any rank published. libtc publishes its UCX
// worker address this way, so endpoints connect by rank with no hosts file.
//
// PMIx lives in PmixBootstrap.cpp, compiled only when libpmix is found
// (CMake option TC_WITH_PMIX); without it createPmixBootstrap() fails with
// one line and everything else builds and runs without it.
//
// Threading: create, put, fence and get belong to the thread that drives
// the worker. barrierAsync()'s callback runs on PMIx's own thread.
//
//===----------------------------------------------------------------------===//

#ifndef TC_RUNTIME_BOOTSTRAP_H
#define TC_RUNTIME_BOOTSTRAP_H

#include "llvm/ADT/FunctionExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <string>

namespace tc {

class Bootstrap {
public:
  virtual ~Bootstrap();
  /// This process's rank in [0, size()).
  virtual uint32_t rank() const = 0;
  /// Processes in the job.
  virtual uint32_t size() const = 0;
  /// Publishes \p Key = \p Value under this rank; other ranks see it after
  /// the next fence().
  virtual llvm::Error put(llvm::StringRef Key, llvm::StringRef Value) = 0;
  /// Commits what was put and blocks until every rank of the job has done
  /// the same; the published data travels with it (one collective).
  virtual llvm::Error fence() = 0;
  /// \p Key as rank \p Rank published it before the last fence().
  virtual llvm::Expected<std::string> get(uint32_t Rank,
                                          llvm::StringRef Key) = 0;
  /// Enters a job-wide barrier without data and returns at once. \p Done
  /// runs once, on PMIx's thread, when every rank has entered it (true) or
  /// the barrier failed, e.g. because a rank died (false).
  virtual llvm::Error
  barrierAsync(llvm::unique_function<void(bool)> Done) = 0;
};

/// True when libtc was built with PMIx.
bool havePmix();

/// Connects to the PMIx server of the launcher that started this process.
/// Fails with one line when tc was built without PMIx or the process was
/// not started by a PMIx launcher. One per process.
llvm::Expected<std::unique_ptr<Bootstrap>> createPmixBootstrap();

/// The keys libtc publishes under each rank.
inline constexpr const char *BootstrapAddressKey = "tc.worker.address";
inline constexpr const char *BootstrapListenKey = "tc.listen";

/// What the tools do at start under a launcher: connect to it, publish this
/// process's transport address (and \p Listen, HOST:PORT, when not empty)
/// under its rank, and meet every rank (fence).
inline llvm::Expected<std::unique_ptr<Bootstrap>>
joinJob(llvm::Expected<std::string> Address, llvm::StringRef Listen = "") {
  if (!Address)
    return Address.takeError();
  llvm::Expected<std::unique_ptr<Bootstrap>> B = createPmixBootstrap();
  if (!B)
    return B.takeError();
  if (llvm::Error E = (*B)->put(BootstrapAddressKey, *Address))
    return std::move(E);
  if (!Listen.empty())
    if (llvm::Error E = (*B)->put(BootstrapListenKey, Listen))
      return std::move(E);
  if (llvm::Error E = (*B)->fence())
    return std::move(E);
  return B;
}

} // namespace tc

#endif // TC_RUNTIME_BOOTSTRAP_H
