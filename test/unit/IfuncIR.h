//===- IfuncIR.h - Build ifunc archives from LLVM IR text in tests --------===//
#ifndef TC_TEST_IFUNCIR_H
#define TC_TEST_IFUNCIR_H

#include "IfuncBitcode.h"

#include "gtest/gtest.h"

#include <string>

namespace tc::test {

/// Assembles \p IR for this host into a member of role \p R (a failure is
/// the test's).
inline Member hostMember(const std::string &IR, Role R = Role::Target) {
  llvm::Expected<Member> M = assembleMember(IR, R);
  if (!M) {
    ADD_FAILURE() << llvm::toString(M.takeError());
    return Member();
  }
  return std::move(*M);
}

/// An archive for this host: a target member from \p TargetIR and a source
/// member with copying payload functions. Returns its bytes.
inline std::string ifuncArchive(const std::string &Name,
                                const std::string &TargetIR,
                                std::vector<std::string> Deps = {}) {
  llvm::Expected<std::string> Bytes =
      assembleArchive(Name, TargetIR, std::move(Deps));
  if (!Bytes) {
    ADD_FAILURE() << llvm::toString(Bytes.takeError());
    return std::string();
  }
  return std::move(*Bytes);
}

} // namespace tc::test

#endif
