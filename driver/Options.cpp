//===- Options.cpp - tc-cc's command line ---------------------------------===//
//
// tc-cc takes the flags it owns (targets, sysroots, deps, archive options,
// depfiles, -emit-llvm) and passes every other flag to Clang's driver, which
// accepts or rejects it exactly as clang would.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include "clang/Basic/OffloadArch.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

using namespace llvm;

namespace tc {

const char *const DriverUsage = R"(OVERVIEW: tc-cc: compile an injected function (ifunc) into a fat archive

USAGE: tc-cc [options] SRC... -o OUT.tcfb

Each source (.c, .cpp, .ll, .bc) is compiled once per target triple with
Clang, checked against the ifunc ABI, cut down to what each role needs and
packed with a source member for this host.

OPTIONS:
  -o FILE                 Output archive (or .ll/.bc with -emit-llvm)
  --name=NAME             The ifunc name (default: the first source's stem)
  --target=TRIPLE         Compile for TRIPLE (repeatable; default:
                          x86_64-unknown-linux-gnu and aarch64-unknown-linux-gnu);
                          nvptx64-nvidia-cuda is a GPU member (default sm_70)
  --offload-arch=sm_XX[,sm_YY]
                          Also build an nvptx64-nvidia-cuda member for each
                          NVIDIA GPU architecture (repeatable)
  -mcpu=CPU               CPU of the preceding --target (before any --target:
                          of every target); the member is then CPU-specific
  -march=sm_XX            After --target=nvptx64-nvidia-cuda: its GPU
                          architecture (as clang); otherwise passed to clang
  --sysroot=[TRIPLE=]DIR  Sysroot for one target or for all
  --deps FILE             Shared libraries the target must load, one per line
  -lNAME                  Add libNAME's shared object (its soname) to the deps
  --emit-objects          Also pack a native relocatable object per triple
  --all-sources           Pack a source member for every target triple, not
                          only this host's, so processes of every ISA can
                          send the ifunc (targets that forward it: DAPC)
  --compress=auto|none|zstd|zstd-dict
                          How members are stored (default auto: zstd with
                          the built-in dictionary where that is smaller)
  -emit-llvm -S | -c      Write one target's prepared module (.ll or .bc)
  --sign KEY              Sign the archive with KEY (from tc-ar keygen)
  -MD | -MMD              Write a make depfile for the output (-MMD: without
                          system headers)
  -MF FILE, -MT TARGET    Its path (default: OUT with .d) and target name
  -I -D -U -std= -O0..3 -Os -Oz -W... -g -isystem -include -f...
                          As for clang (default -O2); -g keeps debug info
  -###                    Print the cc1 command per target; compile nothing
  -v                      Print the cc1 commands and header search, then run
  --help, --version
)";

static const char *const DefaultTargets[] = {"x86_64-unknown-linux-gnu",
                                             "aarch64-unknown-linux-gnu"};

bool isIRInput(StringRef Path) {
  StringRef Ext = sys::path::extension(Path);
  return Ext == ".ll" || Ext == ".bc";
}

/// Finds the soname a target should load for -lNAME, as this host names it:
/// lib<NAME>.so.<major> in the multiarch and plain library directories.
static Expected<std::string> resolveLibrary(StringRef Name) {
  std::string Multiarch = Triple(sys::getProcessTriple()).getArchName().str() +
                          "-linux-gnu";
  std::vector<std::string> Dirs = {"/lib/" + Multiarch, "/usr/lib/" + Multiarch,
                                   "/lib", "/usr/lib", "/usr/local/lib"};
  std::string Prefix = ("lib" + Name + ".so.").str();
  std::string Best;
  for (const std::string &D : Dirs) {
    std::error_code EC;
    for (sys::fs::directory_iterator It(D, EC), End; It != End && !EC;
         It.increment(EC)) {
      StringRef File = sys::path::filename(It->path());
      if (!File.starts_with(Prefix))
        continue;
      unsigned Major;
      // Only lib<name>.so.<major>: the soname, not the full version.
      if (File.drop_front(Prefix.size()).getAsInteger(10, Major))
        continue;
      if (Best.empty() || File.size() < Best.size())
        Best = File.str();
    }
    if (!Best.empty())
      return Best;
  }
  return createStringError("cannot find a shared library for -l%s (looked for "
                           "lib%s.so.N in %s)",
                           Name.str().c_str(), Name.str().c_str(),
                           join(Dirs, ", ").c_str());
}

static Error readSigningKey(StringRef Path, std::optional<SecretKey> &Key) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> B = MemoryBuffer::getFile(Path);
  if (!B)
    return createStringError("'%s': %s", Path.str().c_str(),
                             B.getError().message().c_str());
  Expected<SecretKey> K = parseSecretKey((*B)->getBuffer());
  if (!K)
    return createStringError("'%s': %s", Path.str().c_str(),
                             toString(K.takeError()).c_str());
  Key = *K;
  return Error::success();
}

static Error readDepsFile(StringRef Path, std::vector<std::string> &Deps) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> B = MemoryBuffer::getFile(Path);
  if (!B)
    return createStringError("'%s': %s", Path.str().c_str(),
                             B.getError().message().c_str());
  Expected<std::vector<std::string>> D = parseDepsList((*B)->getBuffer());
  if (!D)
    return createStringError("'%s': %s", Path.str().c_str(),
                             toString(D.takeError()).c_str());
  Deps.insert(Deps.end(), D->begin(), D->end());
  return Error::success();
}

bool isGPUTriple(StringRef Triple) {
  return llvm::Triple(Triple).isNVPTX();
}

/// Checks an NVIDIA GPU architecture as clang names them (sm_70, sm_90a).
static Error checkGPUArch(StringRef Arch, StringRef Flag) {
  if (Arch.empty())
    return createStringError("%s needs a GPU architecture (sm_XX)",
                             Flag.str().c_str());
  if (Arch == "native")
    return createStringError("%s=native: tc-cc does not probe this host's "
                             "GPU; name the target's architecture (sm_XX)",
                             Flag.str().c_str());
  clang::OffloadArch A = clang::StringToOffloadArch(Arch);
  if (A == clang::OffloadArch::UNKNOWN || !clang::IsNVIDIAOffloadArch(A))
    return createStringError("%s: '%s' is not an NVIDIA GPU architecture "
                             "clang knows (sm_70, sm_80, sm_90, sm_90a, ...)",
                             Flag.str().c_str(), Arch.str().c_str());
  return Error::success();
}

/// A GPU target as tc-cc builds it: the triple must be nvptx64-nvidia-cuda,
/// and its CPU an sm_XX (default DefaultGPUArch).
Error finishGPUTarget(CompileTarget &T) {
  if (T.Triple != GPUTriple)
    return createStringError("GPU members are %s; '%s' is not supported",
                             GPUTriple, T.Triple.c_str());
  if (T.CPU.empty())
    T.CPU = DefaultGPUArch;
  return checkGPUArch(T.CPU, "the GPU target's -march");
}

Expected<DriverOptions> parseDriverArgs(ArrayRef<const char *> Args) {
  DriverOptions O;
  std::string PendingCPU; // -mcpu before any --target: for all of them.
  std::vector<std::pair<std::string, std::string>> Sysroots; // triple, dir
  bool HaveOpt = false;
  bool CompileOnly = false;
  for (size_t I = 0; I < Args.size(); ++I) {
    StringRef A = Args[I];
    // `-F V`, `-FV` or `-F=V` (the last only for long options).
    auto Take = [&](StringRef Flag, std::string &Out) -> Error {
      if (A.size() > Flag.size()) {
        StringRef V = A.drop_front(Flag.size());
        if (Flag.starts_with("--"))
          V.consume_front("=");
        Out = V.str();
        return Error::success();
      }
      if (I + 1 >= Args.size())
        return createStringError("option '%s' needs a value",
                                 Flag.str().c_str());
      Out = Args[++I];
      return Error::success();
    };
    auto IsOpt = [&](StringRef Flag) {
      return A == Flag || (A.starts_with(Flag) &&
                           (!Flag.starts_with("--") || A[Flag.size()] == '='));
    };
    std::string V;
    if (IsOpt("-o")) {
      if (Error E = Take("-o", O.Output))
        return std::move(E);
    } else if (IsOpt("--name")) {
      if (Error E = Take("--name", O.Name))
        return std::move(E);
    } else if (IsOpt("--target") || A == "-target") {
      if (Error E = Take(A == "-target" ? "-target" : "--target", V))
        return std::move(E);
      std::string T = Triple::normalize(V);
      // A CPU given before any --target is for the CPU targets, or for the
      // GPU targets when it names a GPU architecture.
      bool GPU = isGPUTriple(T);
      bool GPUArch = StringRef(PendingCPU).starts_with("sm_");
      O.Targets.push_back({T, GPU == GPUArch ? PendingCPU : "", ""});
    } else if (IsOpt("--offload-arch")) {
      if (Error E = Take("--offload-arch", V))
        return std::move(E);
      SmallVector<StringRef, 4> Archs;
      StringRef(V).split(Archs, ',');
      for (StringRef Arch : Archs) {
        if (Error E = checkGPUArch(Arch, "--offload-arch"))
          return std::move(E);
        if (llvm::none_of(O.GPUTargets, [&](const CompileTarget &T) {
              return T.CPU == Arch;
            }))
          O.GPUTargets.push_back({GPUTriple, Arch.str(), ""});
      }
    } else if (A.starts_with("-march=") && !O.Targets.empty() &&
               isGPUTriple(O.Targets.back().Triple)) {
      // clang's way of naming the GPU of an nvptx target.
      O.Targets.back().CPU = A.drop_front(7).str();
    } else if (A.starts_with("-mcpu=")) {
      std::string CPU = A.drop_front(6).str();
      if (O.Targets.empty())
        PendingCPU = CPU;
      else
        O.Targets.back().CPU = CPU;
    } else if (IsOpt("--sysroot")) {
      if (Error E = Take("--sysroot", V))
        return std::move(E);
      // A triple has no '/': `T=DIR` is per target, `DIR` is for all.
      auto [T, Dir] = StringRef(V).split('=');
      if (Dir.empty() || T.contains('/'))
        Sysroots.push_back({"", V});
      else
        Sysroots.push_back({Triple::normalize(T), Dir.str()});
    } else if (IsOpt("--deps")) {
      if (Error E = Take("--deps", V))
        return std::move(E);
      if (Error E = readDepsFile(V, O.Deps))
        return std::move(E);
    } else if (IsOpt("-l")) {
      if (Error E = Take("-l", V))
        return std::move(E);
      Expected<std::string> Lib = resolveLibrary(V);
      if (!Lib)
        return Lib.takeError();
      O.Deps.push_back(*Lib);
    } else if (IsOpt("--sign")) {
      if (Error E = Take("--sign", V))
        return std::move(E);
      if (Error E = readSigningKey(V, O.SignKey))
        return std::move(E);
    } else if (A == "--emit-objects") {
      O.EmitObjects = true;
    } else if (A == "--all-sources") {
      O.AllSources = true;
    } else if (IsOpt("--compress")) {
      if (Error E = Take("--compress", V))
        return std::move(E);
      if (V == "auto") {
        O.Compress.reset();
      } else {
        Expected<Compression> C = parseCompression(V);
        if (!C) {
          consumeError(C.takeError());
          return createStringError("unknown compression '%s' (expected auto, "
                                   "none, zstd or zstd-dict)",
                                   V.c_str());
        }
        O.Compress = *C;
      }
    } else if (A == "-emit-llvm") {
      O.EmitLLVM = true;
    } else if (A == "-S") {
      O.EmitAssembly = true;
    } else if (A == "-c") {
      CompileOnly = true;
    } else if (A == "-MD" || A == "-MMD") {
      O.WriteDepfile = true;
      O.DepfileSystemHeaders = A == "-MD";
    } else if (IsOpt("-MF")) {
      if (Error E = Take("-MF", O.DepfilePath))
        return std::move(E);
    } else if (IsOpt("-MT")) {
      if (Error E = Take("-MT", O.DepTarget))
        return std::move(E);
    } else if (A == "-###") {
      O.PrintCommands = true;
    } else if (A == "-v") {
      O.Verbose = true;
    } else if (A == "-I" || A == "-D" || A == "-U" || A == "-isystem" ||
               A == "-include" || A == "-iquote" || A == "-idirafter" ||
               A == "-x") {
      if (I + 1 >= Args.size())
        return createStringError("option '%s' needs a value", Args[I]);
      O.ClangArgs.push_back(A.str());
      O.ClangArgs.push_back(Args[++I]);
    } else if (A.starts_with("-") && A != "-") {
      if (A.starts_with("-g"))
        O.KeepDebugInfo = A != "-g0";
      if (A.starts_with("-O"))
        HaveOpt = true;
      // The last of these decides, as in clang; clang gets them too.
      if (A == "-fasynchronous-unwind-tables" || A == "-funwind-tables")
        O.KeepUnwindTables = true;
      if (A == "-fno-asynchronous-unwind-tables" || A == "-fno-unwind-tables")
        O.KeepUnwindTables = false;
      // Everything else is clang's to accept or reject.
      O.ClangArgs.push_back(A.str());
    } else {
      O.Inputs.push_back(A.str());
    }
  }
  if (!HaveOpt)
    O.ClangArgs.insert(O.ClangArgs.begin(), "-O2");
  if (O.Inputs.empty())
    return createStringError("no input files");
  bool PendingGPUArch = StringRef(PendingCPU).starts_with("sm_");
  bool AllIR = llvm::all_of(O.Inputs, isIRInput);
  if (O.Targets.empty() && !AllIR)
    for (const char *T : DefaultTargets)
      O.Targets.push_back({T, PendingGPUArch ? "" : PendingCPU, ""});
  // A GPU architecture for no GPU target would be dropped without a word.
  if (PendingGPUArch && !AllIR &&
      llvm::none_of(O.Targets, [](const CompileTarget &T) {
        return isGPUTriple(T.Triple);
      }))
    return createStringError("-mcpu=%s names a GPU architecture, but no "
                             "--target is a GPU (use --offload-arch=%s)",
                             PendingCPU.c_str(), PendingCPU.c_str());
  // Otherwise IR inputs name the targets; see resolveIRTargets().
  O.DefaultCPU = PendingCPU;
  for (CompileTarget &T : O.Targets)
    if (isGPUTriple(T.Triple))
      if (Error E = finishGPUTarget(T))
        return std::move(E);
  // A GPU a --target already builds is built once.
  llvm::erase_if(O.GPUTargets, [&](const CompileTarget &G) {
    return llvm::any_of(O.Targets, [&](const CompileTarget &T) {
      return T.Triple == G.Triple && T.CPU == G.CPU;
    });
  });
  for (auto &[T, Dir] : Sysroots) {
    if (T.empty()) {
      O.DefaultSysroot = Dir;
      for (CompileTarget &CT : O.Targets)
        CT.Sysroot = Dir;
      continue;
    }
    auto It = llvm::find_if(O.Targets, [&, &T = T](const CompileTarget &CT) {
      return CT.Triple == T;
    });
    if (It == O.Targets.end())
      return createStringError("--sysroot for %s, which is not a target",
                               T.c_str());
    It->Sysroot = Dir;
  }
  if (O.Name.empty() && O.Inputs.front() == "-")
    return createStringError("an ifunc read from standard input needs "
                             "--name=NAME");
  if (O.Name.empty()) {
    O.Name = sys::path::stem(O.Inputs.front()).str();
    for (char &C : O.Name)
      if (!isAlnum(C))
        C = '_';
  }
  if (O.Output.empty() && !O.PrintCommands)
    return createStringError("no output file (use -o)");
  if ((O.EmitAssembly || CompileOnly) && !O.EmitLLVM)
    return createStringError("-S and -c need -emit-llvm (tc-cc writes "
                             "archives, or one triple's LLVM module)");
  if (O.EmitLLVM && O.Targets.size() + O.GPUTargets.size() != 1)
    return createStringError("-emit-llvm writes one triple's module: give "
                             "exactly one --target or --offload-arch");
  return O;
}

} // namespace tc
