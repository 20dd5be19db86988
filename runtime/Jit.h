//===- Jit.h - Load ifunc code into this process with LLVM ORC --*- C++ -*-===//
//
// The target side of tc: given an archive, pick the member this process can
// run, load its dependencies, check that every external symbol it needs
// resolves, and make NAME_main callable, by JIT-compiling bitcode tuned for
// this CPU or by linking a native object member. Each code identity (the
// archive hash) gets its own JITDylib, so two ifuncs that both define `step`
// never collide, and unloading one frees exactly its code.
//
// Thread safety: JitEngine is safe to call from several threads; load() of
// different identities may run concurrently (ORC serializes what it must).
//
//===----------------------------------------------------------------------===//

#ifndef TC_RUNTIME_JIT_H
#define TC_RUNTIME_JIT_H

#include "tc/Archive.h"

#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/Support/Error.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace tc {

/// The target entry point: void NAME_main(void *, size_t, void *).
using IfuncMainFn = void (*)(void *Payload, size_t PayloadSize,
                             void *TargetArgs);

/// How a member should be run.
enum class LoadMode : uint8_t {
  Auto,    ///< Bitcode (tuned at JIT time) if present, else an object.
  Bitcode, ///< Only a bitcode member.
  Object,  ///< Only an object member: link, no code generation.
};

/// One loaded code identity.
struct LoadedIfunc {
  ArchiveHash Hash{};
  std::string Name;
  IfuncMainFn Main = nullptr;
  ImageKind Kind = ImageKind::Bitcode;
  double LoadMillis = 0; ///< Parse + compile/link + lookup, wall clock.
};

/// What a JitEngine may load and run.
struct JitOptions {
  /// Empty: this process's triple and CPU (sys::getProcessTriple, host CPU).
  std::string Triple;
  std::string CPU;
  /// Directories deps may be loaded from; empty allows any (dlopen's search).
  std::vector<std::string> DepDirs;
};

class JitEngine {
public:
  static llvm::Expected<std::unique_ptr<JitEngine>>
  create(const JitOptions &Opts = JitOptions());
  ~JitEngine();

  /// Loads \p A (keyed by A.Hash) if it is not loaded yet and returns it.
  llvm::Expected<const LoadedIfunc &> load(const Archive &A,
                                           LoadMode Mode = LoadMode::Auto);

  /// Returns the loaded code for \p Hash, or nullptr.
  const LoadedIfunc *find(const ArchiveHash &Hash) const;

  /// Frees the code of \p Hash. Not an error if it was not loaded.
  llvm::Error unload(const ArchiveHash &Hash);

  size_t size() const;
  const std::string &triple() const { return Triple; }
  const std::string &cpu() const { return CPU; }

private:
  JitEngine() = default;
  llvm::Expected<LoadedIfunc> compile(const Archive &A, const Member &M,
                                      llvm::orc::JITDylib &JD);
  llvm::Error addDeps(const Archive &A, llvm::orc::JITDylib &JD);

  std::unique_ptr<llvm::orc::LLJIT> J;
  std::string Triple, CPU;
  JitOptions Opts;
  mutable std::mutex Mutex;
  struct Entry {
    LoadedIfunc Info;
    llvm::orc::JITDylib *JD = nullptr;
  };
  std::map<ArchiveHash, Entry> Loaded;
};

/// Checks that each of \p Symbols resolves in this process or in one of the
/// already-loaded libraries \p Deps; names the first that does not.
llvm::Error checkSymbolsResolve(llvm::ArrayRef<std::string> Symbols,
                                llvm::ArrayRef<std::string> Deps,
                                llvm::StringRef IfuncName);

} // namespace tc

#endif // TC_RUNTIME_JIT_H
