//===- Driver.h - tc-cc: compile an ifunc once per target triple -*- C++ -*-===//
//
// tc-cc runs Clang in-process (the clang driver builds one cc1 job per
// target; a CompilerInstance runs it to an llvm::Module), links the sources
// of each triple, checks the ifunc ABI, prepares a target member per triple
// and a source member for the host, and writes the fat archive.
//
//===----------------------------------------------------------------------===//

#ifndef TC_DRIVER_DRIVER_H
#define TC_DRIVER_DRIVER_H

#include "tc/Archive.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace tc {

/// One triple tc-cc compiles for.
struct CompileTarget {
  std::string Triple; ///< Normalized.
  std::string CPU;    ///< -mcpu= for this target; empty: generic.
  std::string Sysroot;
};

/// Everything the command line says.
struct DriverOptions {
  std::vector<std::string> Inputs;
  std::string Output;
  std::string Name;
  std::vector<CompileTarget> Targets;
  std::vector<std::string> ClangArgs; ///< -I, -D, -O2, -W..., forwarded.
  std::vector<std::string> Deps;      ///< From --deps and -l.
  bool KeepDebugInfo = false;         ///< -g
  bool EmitObjects = false;
  Compression Compress = Compression::None;
  // Single-triple output for inspection: -emit-llvm with -S or -c.
  bool EmitLLVM = false;
  bool EmitAssembly = false; ///< -S
  // Dependency files.
  bool WriteDepfile = false; ///< -MD / -MMD
  std::string DepfilePath;   ///< -MF
  std::string DepTarget;     ///< -MT
  bool PrintCommands = false; ///< -###
  bool Verbose = false;       ///< -v
};

/// Parses tc-cc's command line (without argv[0]).
llvm::Expected<DriverOptions> parseDriverArgs(llvm::ArrayRef<const char *> Args);

/// Runs tc-cc; returns the process exit status. Errors are printed once as
/// `tc-cc: error: ...`; compiler diagnostics as clang prints them.
int ccMain(int Argc, const char **Argv);

/// The Debian package that provides C (or, with \p CXX, C++) headers for
/// \p Triple on a host of another architecture.
std::string crossHeaderPackage(llvm::StringRef Triple, bool CXX);

} // namespace tc

#endif // TC_DRIVER_DRIVER_H
