//===- Select.cpp - Pick the archive member a host runs -------------------===//
//
// The prototype matched members with strncmp against LLVM's default triple,
// so x86_64-pc-linux-gnu and x86_64-unknown-linux-gnu never met. Here triples
// are compared field by field after normalization and the vendor is ignored:
// it names who built the toolchain, not what the code needs.
//
//===----------------------------------------------------------------------===//

#include "tc/Archive.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/TargetParser/Triple.h"

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
  for (const Member &M : A.Members) {
    if (M.TheRole != R || (Kind && M.Kind != *Kind))
      continue;
    // The common case, the host's own triple, needs no parsing.
    bool Fits = M.Triple == Host
                    ? HostT.getArch() != Triple::UnknownArch
                    : compatible(Triple(Triple::normalize(M.Triple)), HostT);
    if (!Fits)
      continue;
    // Lower is better: CPU match before generic, exact triple before a
    // vendor variant, bitcode (tuned at JIT time) before an object.
    int Rank;
    if (!M.CPU.empty() && M.CPU == HostCPU)
      Rank = 0;
    else if (M.CPU.empty())
      Rank = 4;
    else
      continue; // Built for another CPU: may use instructions we lack.
    if (M.Triple != Host)
      Rank += 2;
    if (M.Kind != ImageKind::Bitcode)
      Rank += 1;
    if (!Best || Rank < BestRank) {
      Best = &M;
      BestRank = Rank;
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

} // namespace tc
