//===- NoBootstrap.cpp - createPmixBootstrap() without PMIx ---------------===//
//
// Compiled instead of PmixBootstrap.cpp when libpmix was not found (or
// TC_WITH_PMIX=OFF): the bootstrap entry points exist and say why not.
//
//===----------------------------------------------------------------------===//

#include "bootstrap/Bootstrap.h"

using namespace tc;

Bootstrap::~Bootstrap() = default;

bool tc::havePmix() { return false; }

llvm::Expected<std::unique_ptr<Bootstrap>> tc::createPmixBootstrap() {
  return llvm::createStringError(
      "this tc was built without PMIx (install libpmix-dev and rebuild with "
      "-DTC_WITH_PMIX=ON)");
}
