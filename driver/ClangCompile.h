//===- ClangCompile.h - One source, one target, Clang in-process -*- C++ -*-===//
//
// The only place tc-cc talks to Clang. A session holds what every compile
// shares: the options, the LLVMContext the modules live in and the files
// read (for depfiles).
//
//===----------------------------------------------------------------------===//

#ifndef TC_DRIVER_CLANGCOMPILE_H
#define TC_DRIVER_CLANGCOMPILE_H

#include "Driver.h"

#include "llvm/Support/Error.h"

#include <memory>
#include <set>
#include <string>

namespace llvm {
class LLVMContext;
class MemoryBuffer;
class Module;
} // namespace llvm

namespace tc {

/// A failure whose diagnostics have been printed already (by Clang's
/// diagnostic printer); the tool adds nothing and exits 1.
class DiagnosedError : public llvm::ErrorInfo<DiagnosedError> {
public:
  static char ID;
  void log(llvm::raw_ostream &OS) const override;
  std::error_code convertToErrorCode() const override;
};

/// What the compiles of one tc-cc run share.
struct ClangSession {
  ClangSession(const DriverOptions &Opts, llvm::LLVMContext &Ctx,
               std::string TCIncludeDir);

  const DriverOptions &Opts;
  llvm::LLVMContext &Ctx;
  std::string TCIncludeDir; ///< Holds tc/ifunc.h; added as -I.
  /// The clang path given to clang's driver (it finds the resource headers
  /// from it). Every compile's invocation keeps a pointer to it (its
  /// CodeGenOptions::Argv0), so it lives as long as the session.
  std::string ClangPath;
  /// Every source and header read, for every target (the depfile).
  std::set<std::string> Dependencies;
  /// Standard input (the input `-`), read once for all targets.
  std::unique_ptr<llvm::MemoryBuffer> Stdin;
};

/// Checks, once before any compile, that clang can compile the source
/// \p Input to LLVM IR: it exists (or is `-`, standard input, with -x), and
/// its extension names a C-family language or -x names one.
llvm::Error checkSourceInput(const DriverOptions &O, llvm::StringRef Input);

/// Compiles the C or C++ source \p Input for \p T: clang's driver builds the
/// cc1 job (with -###: prints it and returns nullptr), a CompilerInstance
/// runs it to a module in \p S.Ctx. Before compiling, checks that the C (and
/// C++) library headers for the target can be found, and otherwise names the
/// Debian package to install.
llvm::Expected<std::unique_ptr<llvm::Module>>
compileSource(ClangSession &S, const CompileTarget &T, llvm::StringRef Input);

} // namespace tc

#endif // TC_DRIVER_CLANGCOMPILE_H
