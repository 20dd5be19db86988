//===- PmixBootstrap.cpp - Bootstrap over the PMIx client API -------------===//
//
// The only file that includes pmix.h. PMIx_Init connects to the launcher's
// PMIx server (mpirun or slurmstepd), which told us where it is through
// PMIX_* environment variables; PMIx_Put with PMIX_GLOBAL scope + Commit +
// a Fence with PMIX_COLLECT_DATA is the "modex": after it every rank holds
// every other rank's published values, so get() is a local lookup (or,
// where that lookup misses, one bounded request to our PMIx server).
//
//===----------------------------------------------------------------------===//

#include "bootstrap/Bootstrap.h"

#include <pmix.h>

#include <cstdlib>
#include <cstring>

using namespace tc;
using llvm::createStringError;
using llvm::Error;
using llvm::Expected;
using llvm::StringRef;

Bootstrap::~Bootstrap() = default;

bool tc::havePmix() { return true; }

namespace {

Error pmixError(const char *What, pmix_status_t S) {
  return createStringError("PMIx: %s failed: %s", What, PMIx_Error_string(S));
}

class PmixBootstrap final : public Bootstrap {
public:
  PmixBootstrap(const pmix_proc_t &Self, uint32_t Size)
      : Self(Self), Size(Size) {}
  ~PmixBootstrap() override { PMIx_Finalize(nullptr, 0); }

  uint32_t rank() const override { return Self.rank; }
  uint32_t size() const override { return Size; }

  Error put(StringRef Key, StringRef Value) override {
    pmix_value_t V;
    std::memset(&V, 0, sizeof V);
    V.type = PMIX_BYTE_OBJECT;
    V.data.bo.bytes = const_cast<char *>(Value.data());
    V.data.bo.size = Value.size();
    // PMIx_Put copies the value; V is not destructed (it borrows Value).
    pmix_status_t S = PMIx_Put(PMIX_GLOBAL, Key.str().c_str(), &V);
    if (S != PMIX_SUCCESS)
      return pmixError("Put", S);
    return Error::success();
  }

  Error fence() override {
    pmix_status_t S = PMIx_Commit();
    if (S != PMIX_SUCCESS)
      return pmixError("Commit", S);
    pmix_info_t Info;
    PMIX_INFO_CONSTRUCT(&Info);
    bool Collect = true;
    PMIx_Info_load(&Info, PMIX_COLLECT_DATA, &Collect, PMIX_BOOL);
    // No procs: every process of our namespace (the whole job).
    S = PMIx_Fence(nullptr, 0, &Info, 1);
    PMIX_INFO_DESTRUCT(&Info);
    if (S != PMIX_SUCCESS)
      return pmixError("Fence", S);
    return Error::success();
  }

  /// How long get() waits for a value the local lookup did not have.
  static constexpr int GetTimeoutSec = 5;

  /// PMIx_Get of \p Key published by \p P: only in this process's store
  /// (\p Local), or through our PMIx server, at most GetTimeoutSec.
  static pmix_status_t lookup(const pmix_proc_t &P, StringRef Key,
                              bool Local, pmix_value_t *&V) {
    pmix_info_t Info;
    PMIX_INFO_CONSTRUCT(&Info);
    bool Optional = true;
    int Timeout = GetTimeoutSec;
    if (Local)
      PMIx_Info_load(&Info, PMIX_OPTIONAL, &Optional, PMIX_BOOL);
    else
      PMIx_Info_load(&Info, PMIX_TIMEOUT, &Timeout, PMIX_INT);
    V = nullptr;
    pmix_status_t S = PMIx_Get(&P, Key.str().c_str(), &Info, 1, &V);
    PMIX_INFO_DESTRUCT(&Info);
    if (S != PMIX_SUCCESS && V) {
      PMIX_VALUE_RELEASE(V);
      V = nullptr;
    }
    return S;
  }

  Expected<std::string> get(uint32_t Rank, StringRef Key) override {
    if (Rank >= Size)
      return createStringError("rank %u out of range (the job has %u)", Rank,
                               Size);
    pmix_proc_t P;
    std::memset(&P, 0, sizeof P);
    std::memcpy(P.nspace, Self.nspace, sizeof P.nspace);
    P.rank = Rank;
    // The fence collected everything, so look locally first (optional: it
    // never waits). A collected value is not always visible to that local
    // lookup yet when the fence returns across several daemons (one rank's
    // lookup of another's address failed in about 1 of 10 two-host jobs
    // between network namespaces): then ask our PMIx server, which has it
    // or fetches it from the rank's node, bounded by GetTimeoutSec.
    pmix_value_t *V = nullptr;
    pmix_status_t S = lookup(P, Key, /*Local=*/true, V);
    if (S == PMIX_ERR_NOT_FOUND)
      S = lookup(P, Key, /*Local=*/false, V);
    if (S == PMIX_ERR_TIMEOUT)
      S = PMIX_ERR_NOT_FOUND;
    if (S == PMIX_ERR_NOT_FOUND)
      return createStringError("rank %u published no '%s' (is it a tc "
                               "process of this job?)",
                               Rank, Key.str().c_str());
    if (S != PMIX_SUCCESS)
      return pmixError("Get", S);
    std::string Out;
    bool Ok = V && V->type == PMIX_BYTE_OBJECT;
    if (Ok)
      Out.assign(V->data.bo.bytes, V->data.bo.size);
    if (V)
      PMIX_VALUE_RELEASE(V);
    if (!Ok)
      return createStringError("rank %u's '%s' is not a byte string", Rank,
                               Key.str().c_str());
    return Out;
  }

  Error barrierAsync(llvm::unique_function<void(bool)> Done) override {
    auto *CB = new llvm::unique_function<void(bool)>(std::move(Done));
    pmix_status_t S = PMIx_Fence_nb(
        nullptr, 0, nullptr, 0,
        [](pmix_status_t St, void *Arg) {
          auto *F = static_cast<llvm::unique_function<void(bool)> *>(Arg);
          (*F)(St == PMIX_SUCCESS);
          delete F;
        },
        CB);
    if (S == PMIX_OPERATION_SUCCEEDED) { // Done at once; no callback.
      (*CB)(true);
      delete CB;
      return Error::success();
    }
    if (S != PMIX_SUCCESS) {
      delete CB;
      return pmixError("Fence_nb", S);
    }
    return Error::success();
  }

private:
  pmix_proc_t Self;
  uint32_t Size;
};

} // namespace

Expected<std::unique_ptr<Bootstrap>> tc::createPmixBootstrap() {
  // Every PMIx server (mpirun's, slurmstepd's) gives its clients a
  // namespace; without one PMIx_Init would make a job of one, silently.
  if (!std::getenv("PMIX_NAMESPACE"))
    return createStringError(
        "no PMIx server: start this under a PMIx launcher (mpirun -n N ..., "
        "srun --mpi=pmix ...)");
  pmix_proc_t Self;
  std::memset(&Self, 0, sizeof Self);
  pmix_status_t S = PMIx_Init(&Self, nullptr, 0);
  if (S != PMIX_SUCCESS)
    return pmixError("Init (connecting to the launcher's server)", S);
  pmix_proc_t Job = Self;
  Job.rank = PMIX_RANK_WILDCARD;
  pmix_value_t *V = nullptr;
  S = PMIx_Get(&Job, PMIX_JOB_SIZE, nullptr, 0, &V);
  if (S != PMIX_SUCCESS || !V || V->type != PMIX_UINT32) {
    if (V)
      PMIX_VALUE_RELEASE(V);
    PMIx_Finalize(nullptr, 0);
    return S != PMIX_SUCCESS ? pmixError("Get(job size)", S)
                             : createStringError("PMIx: job size is not a "
                                                 "uint32");
  }
  uint32_t Size = V->data.uint32;
  PMIX_VALUE_RELEASE(V);
  return std::make_unique<PmixBootstrap>(Self, Size);
}
