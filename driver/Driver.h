//===- Driver.h - tc-cc: compile an ifunc once per target triple -*- C++ -*-===//
//
// tc-cc runs Clang in-process (the clang driver builds one cc1 job per
// target; a CompilerInstance runs it to an llvm::Module), links the sources
// of each triple, checks the ifunc ABI, prepares a target member per triple
// and a source member for the host, and writes the fat archive.
//
// Options.cpp parses the command line, ClangCompile.cpp turns one source into
// a module for one target, Driver.cpp runs the pipeline and writes outputs.
//
//===----------------------------------------------------------------------===//

#ifndef TC_DRIVER_DRIVER_H
#define TC_DRIVER_DRIVER_H

#include "tc/Archive.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace tc {

/// One triple tc-cc compiles for.
struct CompileTarget {
  std::string Triple;  ///< Normalized.
  std::string CPU;     ///< -mcpu= for this target; empty: generic.
  std::string Sysroot; ///< --sysroot for this target; empty: clang's default.
};

/// Everything the command line says.
struct DriverOptions {
  std::vector<std::string> Inputs;
  std::string Output;
  std::string Name;
  /// Empty only when every input is LLVM IR and no --target was given: the
  /// inputs' own triples are the targets then.
  std::vector<CompileTarget> Targets;
  /// From --offload-arch: GPU members built in addition to Targets (or to
  /// the IR inputs' triples), one per architecture.
  std::vector<CompileTarget> GPUTargets;
  std::string DefaultCPU;             ///< -mcpu before any --target.
  std::string DefaultSysroot;         ///< --sysroot=DIR without a triple.
  std::vector<std::string> ClangArgs; ///< -I, -D, -O2, -W..., forwarded.
  std::vector<std::string> Deps;      ///< From --deps and -l.
  bool KeepDebugInfo = false;         ///< -g
  /// -f[asynchronous-]unwind-tables last (IfuncOptions::KeepUnwindTables).
  bool KeepUnwindTables = false;
  bool EmitObjects = false;           ///< --emit-objects
  bool AllSources = false;            ///< --all-sources
  /// How members are stored; unset (--compress=auto, the default): per
  /// member, cheapestCompression().
  std::optional<Compression> Compress;
  /// --sign KEY: the archive is signed with it (signArchive).
  std::optional<SecretKey> SignKey;
  // Single-triple output for inspection: -emit-llvm with -S or -c.
  bool EmitLLVM = false;
  bool EmitAssembly = false; ///< -S
  // Dependency files.
  bool WriteDepfile = false;        ///< -MD / -MMD
  bool DepfileSystemHeaders = true; ///< -MD lists system headers, -MMD not.
  std::string DepfilePath;          ///< -MF
  std::string DepTarget;            ///< -MT
  bool PrintCommands = false;       ///< -###
  bool Verbose = false;             ///< -v
};

/// The triple of GPU members, and the architecture of one whose --target
/// names none: sm_70 (Volta) is the oldest GPU with independent thread
/// scheduling, which the *_sync warp intrinsics and scoped atomics assume,
/// and PTX for it is JIT-compiled by the driver for any newer GPU.
constexpr const char *GPUTriple = "nvptx64-nvidia-cuda";
constexpr const char *DefaultGPUArch = "sm_70";

/// True for a GPU (nvptx) triple.
bool isGPUTriple(llvm::StringRef Triple);

/// Completes a GPU target: checks its triple is GPUTriple and its CPU an
/// NVIDIA architecture clang knows, DefaultGPUArch when it names none.
llvm::Error finishGPUTarget(CompileTarget &T);

/// tc-cc --help.
extern const char *const DriverUsage;

/// True for inputs tc-cc reads as LLVM IR (.ll, .bc) rather than compiles.
bool isIRInput(llvm::StringRef Path);

/// Parses tc-cc's command line (without argv[0]).
llvm::Expected<DriverOptions> parseDriverArgs(llvm::ArrayRef<const char *> Args);

/// Runs tc-cc; returns the process exit status. Errors are printed once as
/// `tc-cc: error: ...`; compiler diagnostics as clang prints them.
int ccMain(int Argc, const char **Argv);

/// The Debian package that provides C (or, with \p CXX, C++) headers for
/// \p Triple: the native one on a host of the same architecture, the -cross
/// one otherwise (Debian 12 names: libc6-dev-arm64-cross,
/// libstdc++-12-dev-arm64-cross).
std::string headerPackage(llvm::StringRef Triple, bool CXX);

} // namespace tc

#endif // TC_DRIVER_DRIVER_H
