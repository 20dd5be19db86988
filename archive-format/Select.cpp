//===- Select.cpp - Pick the archive member a host runs -------------------===//
//
// The prototype matched members with strncmp against LLVM's default triple,
// so x86_64-pc-linux-gnu and x86_64-unknown-linux-gnu never met. Here triples
// are compared field by field after normalization and the vendor is ignored:
// it names who built the toolchain, not what the code needs.
//
//===----------------------------------------------------------------------===//

#include "tc/Archive.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/TargetParser/AArch64TargetParser.h"
#include "llvm/TargetParser/Triple.h"
#include "llvm/TargetParser/X86TargetParser.h"

using namespace llvm;

namespace tc {

static bool compatible(const Triple &M, const Triple &H) {
  if (M.getArch() == Triple::UnknownArch || M.getArch() != H.getArch() ||
      M.getSubArch() != H.getSubArch())
    return false;
  // A member that names no OS or environment makes no assumption about it.
  if (M.getOS() != Triple::UnknownOS && M.getOS() != H.getOS())
    return false;
  if (M.getEnvironment() != Triple::UnknownEnvironment &&
      M.getEnvironment() != H.getEnvironment())
    return false;
  return M.getObjectFormat() == H.getObjectFormat();
}

/// What LLVM's x86 CPU table says \p CPU has, implied features included
/// (the table lists avx2 for x86-64-v3, not the avx and sse4.2 it implies).
static StringMap<bool> x86Features(StringRef CPU) {
  SmallVector<StringRef, 64> Listed;
  X86::getFeaturesForCPU(CPU, Listed);
  StringMap<bool> All;
  for (StringRef F : Listed) {
    All[F] = true; // updateImpliedFeatures sets only what F implies.
    X86::updateImpliedFeatures(F, /*Enabled=*/true, All);
  }
  return All;
}

/// An NVIDIA GPU architecture as clang names it: sm_<major><minor> with an
/// optional suffix, 'a' (architecture-specific: sm_90a code runs only on
/// sm_90) or 'f' (family-specific: sm_100f runs on sm_10x at or above it).
struct GPUArch {
  unsigned Number = 0; ///< 90 for sm_90a.
  char Suffix = 0;     ///< 0, 'a' or 'f'.
};
static std::optional<GPUArch> parseGPUArch(StringRef CPU) {
  if (!CPU.consume_front("sm_"))
    return std::nullopt;
  GPUArch A;
  if (CPU.ends_with("a") || CPU.ends_with("f")) {
    A.Suffix = CPU.back();
    CPU = CPU.drop_back();
  }
  if (CPU.empty() || CPU.getAsInteger(10, A.Number) || A.Number < 10)
    return std::nullopt;
  return A;
}

/// How many features code for \p MemberCPU may use when it runs on
/// \p HostCPU (see cpuRunsOn), or -1 when it may not run there. More is
/// more specific: x86-64-v4 code before x86-64-v3 code.
static int cpuFeaturesUsable(StringRef TripleName, StringRef MemberCPU,
                             StringRef HostCPU) {
  if (HostCPU.empty())
    return -1;
  Triple T(Triple::normalize(TripleName));
  if (T.isX86()) {
    if (X86::parseArchX86(MemberCPU) == X86::CK_None ||
        X86::parseArchX86(HostCPU) == X86::CK_None)
      return -1;
    StringMap<bool> Need = x86Features(MemberCPU);
    StringMap<bool> Have = x86Features(HostCPU);
    // Every 64-bit CPU has the x86-64 baseline, though the table's AMD
    // entries omit its cmov.
    if (X86::parseArchX86(HostCPU, /*Only64Bit=*/true) != X86::CK_None)
      for (const StringMapEntry<bool> &F : x86Features("x86-64"))
        Have[F.first()] = true;
    int N = 0;
    for (const StringMapEntry<bool> &F : Need) {
      if (!F.second)
        continue;
      if (!Have.lookup(F.first()))
        return -1;
      ++N;
    }
    return N;
  }
  if (T.isAArch64()) {
    std::optional<AArch64::CpuInfo> Need = AArch64::parseCpu(MemberCPU);
    std::optional<AArch64::CpuInfo> Have = AArch64::parseCpu(HostCPU);
    if (!Need || !Have || !Have->Arch.is_superset(Need->Arch) ||
        (Need->getImpliedExtensions() & ~Have->getImpliedExtensions()).any())
      return -1;
    return static_cast<int>(Need->getImpliedExtensions().count());
  }
  if (T.isNVPTX()) {
    // PTX for sm_XX is JIT-compiled by the driver for any GPU of that
    // architecture or a later one; 'a' and 'f' code only as above. The
    // higher architecture a member targets, the more it may use.
    std::optional<GPUArch> Need = parseGPUArch(MemberCPU);
    std::optional<GPUArch> Have = parseGPUArch(HostCPU);
    if (!Need || !Have)
      return MemberCPU == HostCPU ? 0 : -1;
    bool Runs = Need->Suffix == 'a'   ? Have->Number == Need->Number
                : Need->Suffix == 'f' ? Have->Number / 10 == Need->Number / 10 &&
                                            Have->Number >= Need->Number
                                      : Have->Number >= Need->Number;
    if (!Runs)
      return -1;
    return static_cast<int>(Need->Number) * 2 + (Need->Suffix ? 1 : 0);
  }
  return MemberCPU == HostCPU ? 0 : -1;
}

bool cpuRunsOn(StringRef TripleName, StringRef MemberCPU, StringRef HostCPU) {
  return MemberCPU.empty() || MemberCPU == HostCPU ||
         cpuFeaturesUsable(TripleName, MemberCPU, HostCPU) >= 0;
}

bool triplesCompatible(StringRef MemberTriple, StringRef HostTriple) {
  return compatible(Triple(Triple::normalize(MemberTriple)),
                    Triple(Triple::normalize(HostTriple)));
}

Expected<const Member *> selectMember(const Archive &A, StringRef HostTriple,
                                      StringRef HostCPU, Role R,
                                      std::optional<ImageKind> Kind) {
  std::string Host = Triple::normalize(HostTriple);
  const Triple HostT(Host);
  const Member *Best = nullptr;
  int BestRank = 0;
  int BestUsable = 0;
  for (const Member &M : A.Members) {
    if (M.TheRole != R || (Kind && M.Kind != *Kind))
      continue;
    // The common case, the host's own triple, needs no parsing.
    bool Fits = M.Triple == Host
                    ? HostT.getArch() != Triple::UnknownArch
                    : compatible(Triple(Triple::normalize(M.Triple)), HostT);
    if (!Fits)
      continue;
    // Lower is better: the host's CPU, then a CPU whose features the host
    // has (x86-64-v3 on a znver4; of several, the one using the most
    // features), then generic; the exact triple before a vendor variant;
    // bitcode (tuned at JIT time) before an object.
    int Rank;
    int Usable = 0;
    if (!M.CPU.empty() && M.CPU == HostCPU)
      Rank = 0;
    else if (M.CPU.empty())
      Rank = 8;
    else if ((Usable = cpuFeaturesUsable(M.Triple, M.CPU, HostCPU)) >= 0)
      Rank = 4;
    else
      continue; // Built for a CPU with instructions this one lacks.
    if (M.Triple != Host)
      Rank += 2;
    if (M.Kind != ImageKind::Bitcode)
      Rank += 1;
    if (!Best || Rank < BestRank || (Rank == BestRank && Usable > BestUsable)) {
      Best = &M;
      BestRank = Rank;
      BestUsable = Usable;
    }
  }
  if (Best)
    return Best;

  std::string Have;
  for (const Member &M : A.Members) {
    if (!Have.empty())
      Have += ", ";
    Have += M.Triple;
    if (!M.CPU.empty())
      Have += " cpu=" + M.CPU;
    if (M.TheRole != R)
      Have += " (" + roleName(M.TheRole).str() + ")";
  }
  std::string Want = Host;
  if (!HostCPU.empty())
    Want += " cpu=" + HostCPU.str();
  if (R != Role::Target)
    Want += " (" + roleName(R).str() + ")";
  if (Kind)
    Want += " of kind " + imageKindName(*Kind).str();
  return createStringError(
      formatv("no member for {0} (have: {1})", Want, Have).str());
}

Expected<Archive> archiveForHost(const Archive &A, StringRef HostTriple,
                                 StringRef HostCPU,
                                 std::optional<ImageKind> Kind) {
  Expected<const Member *> Pick =
      selectMember(A, HostTriple, HostCPU, Role::Target, Kind);
  if (!Pick)
    return Pick.takeError();
  return thinArchive(A, [&](const Member &M) { return &M == *Pick; });
}

} // namespace tc
