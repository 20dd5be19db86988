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
#include "tc/Passes.h"

#include "llvm/ExecutionEngine/ObjectCache.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/Support/BLAKE3.h"
#include "llvm/Support/Error.h"

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>

namespace tc {

class ReusedPipelineCompiler;

/// Why a load failed, for callers that report it on the wire.
enum class LoadFailure : uint8_t {
  NoMember,      ///< No member this host can run.
  DepLoadFailed, ///< A dependency did not load or is not allowed.
  MissingSymbol, ///< An external symbol does not resolve.
  CompileFailed, ///< Bad bitcode, codegen or link failure.
  PolicyRefused, ///< A dependency outside the allowed directories, or
                 ///< code the sandbox refuses.
};

/// The error JitEngine::load returns: a kind plus a one-line message.
class LoadError : public llvm::ErrorInfo<LoadError> {
public:
  static char ID;
  LoadError(LoadFailure Kind, std::string Msg)
      : Kind(Kind), Msg(std::move(Msg)) {}
  void log(llvm::raw_ostream &OS) const override { OS << Msg; }
  std::error_code convertToErrorCode() const override {
    return llvm::inconvertibleErrorCode();
  }
  LoadFailure kind() const { return Kind; }

private:
  LoadFailure Kind;
  std::string Msg;
};

/// The target entry point: void NAME_main(void *, size_t, void *).
using IfuncMainFn = void (*)(void *Payload, size_t PayloadSize,
                             void *TargetArgs);

/// How a member should be run.
enum class LoadMode : uint8_t {
  Auto,    ///< Bitcode (tuned at JIT time) if present, else an object.
  Bitcode, ///< Only a bitcode member.
  Object,  ///< Only an object member: link, no code generation.
  Sandbox, ///< Only a bitcode member, instrumented by sandboxModule()
           ///< (target role; source code runs unsandboxed in its sender).
};

/// The source entry points.
using IfuncBoundFn = size_t (*)(void *SourceArgs, size_t SourceArgsSize);
using IfuncInitFn = int (*)(void *SourceArgs, size_t SourceArgsSize,
                            void *Payload, size_t *PayloadSize);

/// Calls JIT-compiled code (or a registered local function) through its
/// pointer: every call into a LoadedIfunc goes through here. Not
/// instrumented by -fsanitize=function (part of the sanitizer build's
/// -fsanitize=undefined): that check reads the 8 bytes before the callee
/// for a prologue only code compiled with it has, and JIT-compiled code
/// neither has one nor need have anything mapped before it (a module with
/// no read-only data starts its allocation with its first function).
template <typename Ret, typename... Params, typename... Args>
#if defined(__clang__)
__attribute__((no_sanitize("function")))
#endif
inline Ret
callJitted(Ret (*Fn)(Params...), Args &&...A) {
  return Fn(std::forward<Args>(A)...);
}

/// The key of a disk-cache entry (JIT objects, GPU cubins): BLAKE3 over
/// fields, each behind its length, so that no two lists of fields hash
/// alike; hex() gives the key as lower-case hex.
class CacheKey {
public:
  CacheKey &field(llvm::StringRef S);
  std::string hex();

private:
  llvm::BLAKE3 H;
};

/// One loaded code identity.
struct LoadedIfunc {
  ArchiveHash Hash{};
  std::string Name;
  IfuncMainFn Main = nullptr;   ///< Role::Target.
  IfuncBoundFn Bound = nullptr; ///< Role::Source.
  IfuncInitFn Init = nullptr;   ///< Role::Source.
  ImageKind Kind = ImageKind::Bitcode;
  std::string MemberTriple, MemberCPU; ///< The member chosen (CPU: "" generic).
  double LoadMillis = 0;   ///< Parse + compile/link + lookup, wall clock.
  bool FromDiskCache = false; ///< The object came from JitOptions::CacheDir.
  bool Sandboxed = false;     ///< Instrumented: run it with runSandboxed().
  /// Set for code a DeviceTarget loaded (jit/Device.h), which owns this
  /// LoadedIfunc and knows what this points to: launch it there; Main is
  /// null.
  const void *Device = nullptr;
};

/// What a JitEngine may load and run.
struct JitOptions {
  /// Empty: this process's triple and CPU (sys::getProcessTriple, host CPU).
  std::string Triple;
  std::string CPU;
  /// Directories deps may be loaded from; empty allows any (dlopen's search).
  std::vector<std::string> DepDirs;
  /// Persistent cache of compiled objects; empty: none. Several processes
  /// may share one directory.
  std::string CacheDir;
  /// What sandboxed code may call (LoadMode::Sandbox).
  SandboxOptions Sandbox;
  /// Set: create() takes the path of a first contact once, with a built-in
  /// ifunc it then unloads, so that the first real load finds libLLVM's
  /// code paged in and LLVM's one-time set-up done. The value is the mode
  /// loads will use: Sandbox instruments the built-in module as those loads
  /// would; every other mode compiles it from bitcode (which also warms the
  /// link that Object loads take).
  std::optional<LoadMode> Prewarm;
};

class JitEngine {
public:
  static llvm::Expected<std::unique_ptr<JitEngine>>
  create(const JitOptions &Opts = JitOptions());
  ~JitEngine();

  /// Loads the member of \p A for role \p R (keyed by A.Hash and R) if it
  /// is not loaded yet and returns it. For Role::Target the entry point is
  /// NAME_main; for Role::Source it is NAME_payload_init (and
  /// LoadedIfunc::Bound is NAME_payload_bound).
  llvm::Expected<const LoadedIfunc &> load(const Archive &A,
                                           LoadMode Mode = LoadMode::Auto,
                                           Role R = Role::Target);

  /// Returns the loaded code for \p Hash and \p R, or nullptr.
  const LoadedIfunc *find(const ArchiveHash &Hash,
                          Role R = Role::Target) const;

  /// Frees the code of \p Hash for \p R. Not an error if it was not
  /// loaded. References returned by load()/find() for it become invalid.
  llvm::Error unload(const ArchiveHash &Hash, Role R = Role::Target);

  size_t size() const;
  /// Modules parsed into one LLVMContext before a fresh one replaces it.
  static constexpr unsigned MaxModulesPerContext = 256;
  const std::string &triple() const { return Triple; }
  const std::string &cpu() const { return CPU; }
  /// The target features code is generated with (+a,-b,...).
  const std::string &features() const { return HostFeatures; }
  /// How long create() spent prewarming (JitOptions::Prewarm); empty when
  /// it did not.
  std::optional<double> prewarmMillis() const { return PrewarmMillis; }
  /// The thread prewarm() ran on (a default id when it did not run).
  std::thread::id prewarmThread() const { return PrewarmThread; }

  /// What JitOptions::Prewarm makes create() do, on the calling thread:
  /// call it on the thread that will compile, before any other use of the
  /// engine. A thread's first compile also faults in that thread's stack
  /// and malloc arena page by page, which on some VMs (PVM) costs tens of
  /// microseconds a page: prewarming on another thread leaves that to the
  /// first real compile. Sets prewarmMillis().
  llvm::Error prewarm(LoadMode Mode);

private:
  JitEngine() = default;
  llvm::Expected<LoadedIfunc> compile(const Archive &A, const Member &M,
                                      llvm::orc::JITDylib &JD, bool Sandbox);
  using Key = std::pair<ArchiveHash, Role>;
  std::string cacheKey(const Archive &A, const Member &M, bool Sandbox) const;
  std::string HostFeatures;
  llvm::Error addDeps(llvm::ArrayRef<std::string> Deps, llvm::StringRef Name,
                      llvm::orc::JITDylib &JD);

  /// The context modules are parsed into, shared by successive compiles:
  /// making and tearing down an LLVMContext per module was a twelfth of a
  /// small ifunc's JIT. What LLVM uniques in a context (types, constants,
  /// metadata) outlives the modules, so a fresh one replaces it after
  /// MaxModulesPerContext modules; a module keeps its own alive until it is
  /// compiled.
  llvm::orc::ThreadSafeContext context();
  llvm::orc::ThreadSafeContext Context; ///< Guarded by Mutex.
  unsigned ContextModules = 0;          ///< Guarded by Mutex.
  /// Parses \p Bitcode into \p TSCtx, retargets it to this host and runs
  /// \p Prepare on it, all under the context's lock.
  llvm::Expected<std::unique_ptr<llvm::Module>>
  parse(llvm::StringRef Bitcode, llvm::StringRef Name,
        llvm::orc::ThreadSafeContext &TSCtx,
        llvm::function_ref<llvm::Error(llvm::Module &)> Prepare);
  ReusedPipelineCompiler *Compiler = nullptr; ///< Owned by J.

  std::unique_ptr<llvm::ObjectCache> Cache; ///< Before J: J uses it.
  std::unique_ptr<llvm::orc::LLJIT> J;
  std::string Triple, CPU;
  JitOptions Opts;
  std::optional<double> PrewarmMillis;
  std::thread::id PrewarmThread;
  /// Set only while create() prewarms, before anyone else has the engine:
  /// the built-in ifunc neither reads nor fills the disk cache.
  bool Prewarming = false;
  mutable std::mutex Mutex;
  struct Entry {
    LoadedIfunc Info;
    llvm::orc::JITDylib *JD = nullptr;
  };
  std::map<Key, Entry> Loaded;
};

/// The persistent object cache: one file per compiled module, named by a
/// key that covers the code identity, role, member, host CPU and features
/// and the LLVM version. A file holds the object's BLAKE3 hash then the
/// object; it is written to a unique temporary name and renamed into place,
/// so concurrent writers and readers never see half a file, and a damaged
/// file is ignored (and recompiled over).
class DiskObjectCache : public llvm::ObjectCache {
public:
  explicit DiskObjectCache(std::string Dir) : Dir(std::move(Dir)) {}
  void notifyObjectCompiled(const llvm::Module *M,
                            llvm::MemoryBufferRef Obj) override;
  /// Always null: JitEngine::compile() looks up the cache by key before
  /// any module exists, so a module the compiler sees is a miss.
  std::unique_ptr<llvm::MemoryBuffer> getObject(const llvm::Module *M) override;
  /// The object cached under \p Key (its BLAKE3 checked), or null.
  std::unique_ptr<llvm::MemoryBuffer> getObject(llvm::StringRef Key);
  std::string pathFor(llvm::StringRef Key) const;

private:
  std::string Dir;
};

/// True when \p M is compiled at -O0 rather than -O2: every function it
/// defines is one basic block, calls only intrinsics that do not become
/// library calls, and they have at most 32 instructions in all. For such
/// code -O0 is as fast to run (TSI: a load, an add and a store instead of
/// an add to memory) and a third cheaper to compile.
bool isSmallStraightLine(const llvm::Module &M);

/// Checks that each of \p Symbols resolves in this process or in one of the
/// already-loaded libraries \p Deps; names the first that does not.
llvm::Error checkSymbolsResolve(llvm::ArrayRef<std::string> Symbols,
                                llvm::ArrayRef<std::string> Deps,
                                llvm::StringRef IfuncName);

} // namespace tc

#endif // TC_RUNTIME_JIT_H
