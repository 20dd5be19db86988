//===- tc-cc.cpp - The tc compiler driver ---------------------------------===//
//
// All logic lives in the driver library (Driver.h); see `tc-cc --help`.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

int main(int Argc, const char **Argv) { return tc::ccMain(Argc, Argv); }
