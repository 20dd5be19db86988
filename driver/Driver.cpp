//===- Driver.cpp - tc-cc: compile an ifunc once per target triple --------===//
//
// The pipeline: for each target, compile (ClangCompile.cpp) or read every
// input and link them into one module; check the ifunc ABI; prepare the
// target member (and, for the first target this host can run, the source
// member) with the tc passes; optionally emit a native object; then write
// the archive and the depfile. Any error leaves no output file behind.
//
//===----------------------------------------------------------------------===//

#include "ClangCompile.h"
#include "Driver.h"
#include "KindTable.h"

#include "tc/Passes.h"
#include "tc/Version.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/IRReader/IRReader.h"
#include "llvm/Linker/Linker.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"
#include "llvm/Transforms/Utils/Cloning.h"

#include <set>

using namespace llvm;

namespace tc {

namespace {

class Pipeline {
public:
  Pipeline(const DriverOptions &O, std::string TCIncludeDir)
      : O(O), S(O, Ctx, std::move(TCIncludeDir)) {}
  Error run();

private:
  Expected<std::vector<CompileTarget>> resolveTargets();
  Expected<std::unique_ptr<Module>> readIR(StringRef Input);
  Expected<std::unique_ptr<Module>> loadIR(const CompileTarget &T,
                                           StringRef Input);
  Expected<std::unique_ptr<Module>> buildModule(const CompileTarget &T);
  bool haveIRForHost(StringRef Host);
  Expected<std::unique_ptr<TargetMachine>>
  createTargetMachine(const CompileTarget &T);
  Expected<std::string> emitObject(Module &M, const CompileTarget &T);
  Error writeDepfile();

  const DriverOptions &O;
  LLVMContext Ctx;
  ClangSession S;
};

/// Bitcode without the irsymtab block: that index serves LTO linkers, not a
/// JIT, and costs ~150 bytes per member.
std::string bitcodeOf(const Module &M) {
  SmallVector<char, 0> Buf;
  {
    BitcodeWriter W(Buf);
    W.writeModule(M);
    W.writeStrtab();
  }
  return std::string(Buf.begin(), Buf.end());
}

/// A member's bitcode: bitcodeOf, with the metadata kind table cut to the
/// kinds the module uses (KindTable.h), which the target then does not
/// parse at each load.
std::string memberBitcodeOf(const Module &M) {
  return cutMetadataKinds(bitcodeOf(M), usedMetadataKinds(M));
}

Error writeFile(StringRef Path, StringRef Bytes) {
  // Through a temporary file and a rename: a failed run leaves no half file.
  return writeToOutput(Path, [&](raw_ostream &OS) {
    OS << Bytes;
    return Error::success();
  });
}

/// The code generator's level for the -O flag clang got.
CodeGenOptLevel codeGenLevel(ArrayRef<std::string> ClangArgs) {
  CodeGenOptLevel L = CodeGenOptLevel::Default;
  for (StringRef A : ClangArgs) {
    if (A == "-O0")
      L = CodeGenOptLevel::None;
    else if (A == "-O1")
      L = CodeGenOptLevel::Less;
    else if (A == "-O3" || A == "-Ofast")
      L = CodeGenOptLevel::Aggressive;
    else if (A.starts_with("-O"))
      L = CodeGenOptLevel::Default;
  }
  return L;
}

} // namespace

static const char *const DefaultTriples[] = {"x86_64-unknown-linux-gnu",
                                             "aarch64-unknown-linux-gnu"};

Expected<std::unique_ptr<Module>> Pipeline::readIR(StringRef Input) {
  SMDiagnostic Diag;
  std::unique_ptr<Module> M = parseIRFile(Input, Diag, Ctx);
  if (!M) {
    std::string Msg;
    raw_string_ostream OS(Msg);
    Diag.print("tc-cc", OS, /*ShowColors=*/false);
    errs() << Msg;
    return make_error<DiagnosedError>();
  }
  std::string Problems;
  raw_string_ostream OS(Problems);
  if (verifyModule(*M, &OS))
    return createStringError("'%s': invalid module: %s", Input.str().c_str(),
                             StringRef(Problems).trim().str().c_str());
  S.Dependencies.insert(Input.str());
  return std::move(M);
}

/// IR inputs name their triple; one for another target is left out of that
/// target's module. IR with neither a triple nor a data layout is target
/// independent and is given each target's.
Expected<std::unique_ptr<Module>> Pipeline::loadIR(const CompileTarget &T,
                                                   StringRef Input) {
  Expected<std::unique_ptr<Module>> M = readIR(Input);
  if (!M)
    return M.takeError();
  std::string Own = (*M)->getTargetTriple().str();
  if (!Own.empty())
    return triplesCompatible(Own, T.Triple) ? std::move(*M) : nullptr;
  if (!(*M)->getDataLayoutStr().empty())
    return createStringError("'%s': module has a data layout but no target "
                             "triple",
                             Input.str().c_str());
  Expected<std::unique_ptr<TargetMachine>> TM = createTargetMachine(T);
  if (!TM)
    return TM.takeError();
  (*M)->setTargetTriple(Triple(T.Triple));
  (*M)->setDataLayout((*TM)->createDataLayout());
  return std::move(*M);
}

/// Whether an IR input can give this host's module: one for its triple,
/// or target independent. (A front end that compiles for every triple
/// itself, as python3 -m tc.cc does, passes one for the host beside the
/// targets'.)
bool Pipeline::haveIRForHost(StringRef Host) {
  for (const std::string &In : O.Inputs) {
    Expected<std::unique_ptr<Module>> M = readIR(In);
    if (!M) {
      consumeError(M.takeError());
      continue;
    }
    std::string Own = (*M)->getTargetTriple().str();
    if (Own.empty() || triplesCompatible(Own, Host))
      return true;
  }
  return false;
}

Expected<std::vector<CompileTarget>> Pipeline::resolveTargets() {
  std::vector<CompileTarget> Targets = O.Targets;
  if (Targets.empty()) {
    // Only IR inputs and no --target: the inputs' own triples.
    std::set<std::string> Seen;
    bool GPUArch = StringRef(O.DefaultCPU).starts_with("sm_");
    for (const std::string &In : O.Inputs) {
      Expected<std::unique_ptr<Module>> M = readIR(In);
      if (!M)
        return M.takeError();
      std::string Own = (*M)->getTargetTriple().str();
      if (Own.empty())
        continue;
      std::string T = Triple::normalize(Own);
      if (!Seen.insert(T).second)
        continue;
      CompileTarget CT{T, O.DefaultCPU, O.DefaultSysroot};
      if (isGPUTriple(T) != GPUArch)
        CT.CPU.clear();
      if (isGPUTriple(T))
        if (Error E = finishGPUTarget(CT))
          return std::move(E);
      Targets.push_back(std::move(CT));
    }
    if (Targets.empty())
      for (const char *T : DefaultTriples)
        Targets.push_back({T, GPUArch ? "" : O.DefaultCPU, O.DefaultSysroot});
  }
  // --offload-arch adds GPU members; one a --target already asked for is
  // built once.
  for (const CompileTarget &G : O.GPUTargets)
    if (llvm::none_of(Targets, [&](const CompileTarget &T) {
          return T.Triple == G.Triple && T.CPU == G.CPU;
        }))
      Targets.push_back(G);
  return Targets;
}

Expected<std::unique_ptr<Module>>
Pipeline::buildModule(const CompileTarget &T) {
  std::unique_ptr<Module> Linked;
  for (const std::string &In : O.Inputs) {
    Expected<std::unique_ptr<Module>> M =
        isIRInput(In) ? loadIR(T, In) : compileSource(S, T, In);
    if (!M)
      return M.takeError();
    if (!*M) // IR for another triple, or -###.
      continue;
    if (!Linked) {
      Linked = std::move(*M);
      continue;
    }
    if (Linker::linkModules(*Linked, std::move(*M)))
      return createStringError("cannot link '%s' into the %s module",
                               In.c_str(), T.Triple.c_str());
  }
  if (!Linked && !O.PrintCommands)
    return createStringError("no input for %s (the IR inputs are for other "
                             "triples)",
                             T.Triple.c_str());
  return std::move(Linked);
}

Expected<std::unique_ptr<TargetMachine>>
Pipeline::createTargetMachine(const CompileTarget &T) {
  std::string Err;
  Triple TT(T.Triple);
  const Target *Tgt = TargetRegistry::lookupTarget(TT, Err);
  if (!Tgt)
    return createStringError("%s: %s", T.Triple.c_str(), Err.c_str());
  std::unique_ptr<TargetMachine> TM(Tgt->createTargetMachine(
      TT, T.CPU.empty() ? "generic" : T.CPU, "", TargetOptions(), Reloc::PIC_,
      std::nullopt, codeGenLevel(O.ClangArgs)));
  if (!TM)
    return createStringError("%s: cannot create a target machine",
                             T.Triple.c_str());
  return std::move(TM);
}

Expected<std::string> Pipeline::emitObject(Module &M, const CompileTarget &T) {
  Expected<std::unique_ptr<TargetMachine>> TM = createTargetMachine(T);
  if (!TM)
    return TM.takeError();
  if (M.getDataLayout() != (*TM)->createDataLayout())
    return createStringError("%s: the module's data layout is not the "
                             "target's",
                             T.Triple.c_str());
  SmallString<0> Obj;
  raw_svector_ostream OS(Obj);
  legacy::PassManager PM;
  if ((*TM)->addPassesToEmitFile(PM, OS, nullptr, CodeGenFileType::ObjectFile))
    return createStringError("%s: cannot emit an object file",
                             T.Triple.c_str());
  PM.run(M);
  return Obj.str().str();
}

Error Pipeline::writeDepfile() {
  SmallString<256> Path(O.DepfilePath);
  if (Path.empty()) {
    Path = O.Output;
    sys::path::replace_extension(Path, "d");
  }
  auto Escape = [](StringRef In) {
    std::string Out;
    for (char C : In) {
      if (C == ' ' || C == '#')
        Out += '\\';
      if (C == '$')
        Out += '$';
      Out += C;
    }
    return Out;
  };
  std::string Text =
      Escape(O.DepTarget.empty() ? StringRef(O.Output) : StringRef(O.DepTarget)) +
      ":";
  std::set<std::string> Files = S.Dependencies;
  Files.insert(O.Inputs.begin(), O.Inputs.end());
  for (const std::string &F : Files)
    Text += " \\\n  " + Escape(F);
  Text += "\n";
  return writeFile(Path, Text);
}

/// libclc's nvptx64 bitcode, which GPU members' libm calls are linked from:
/// <prefix>/lib/clc/nvptx64--.bc in a relocated tc (the bundle,
/// scripts/bundle.sh) whose <prefix>/include holds tc/ifunc.h; else empty,
/// the passes' default (the build's, TC_LIBCLC_NVPTX).
static std::string deviceMathLibrary(StringRef TCIncludeDir) {
  SmallString<256> Path(sys::path::parent_path(TCIncludeDir));
  sys::path::append(Path, "lib", "clc", "nvptx64--.bc");
  return sys::fs::exists(Path) ? std::string(Path) : std::string();
}

Error Pipeline::run() {
  for (const std::string &In : O.Inputs)
    if (!isIRInput(In))
      if (Error E = checkSourceInput(O, In))
        return E;
  IfuncOptions IO;
  IO.Name = O.Name;
  IO.KeepDebugInfo = O.KeepDebugInfo;
  IO.KeepUnwindTables = O.KeepUnwindTables;
  IO.DeviceMathLibrary = deviceMathLibrary(S.TCIncludeDir);
  Expected<std::vector<CompileTarget>> Targets = resolveTargets();
  if (!Targets)
    return Targets.takeError();

  Archive A;
  A.Name = O.Name;
  A.Deps = O.Deps;
  std::string Host = Triple::normalize(sys::getProcessTriple());
  bool HaveSource = false; ///< A source member this host can run.
  StringSet<> SourceTriples;
  auto AddSource = [&](Module &M, StringRef Triple) -> Error {
    if (Error E = prepareSourceModule(M, IO))
      return E;
    Member Src;
    Src.Triple = Triple.str();
    Src.TheRole = Role::Source;
    Src.Image = memberBitcodeOf(M);
    A.Members.push_back(std::move(Src));
    SourceTriples.insert(Triple);
    HaveSource |= triplesCompatible(Triple, Host);
    return Error::success();
  };

  for (const CompileTarget &T : *Targets) {
    Expected<std::unique_ptr<Module>> M = buildModule(T);
    if (!M)
      return M.takeError();
    if (O.PrintCommands)
      continue;
    if (Error E = checkIfuncABI(**M, IO))
      return E;
    // The first target this host can run also gives the source member;
    // with --all-sources, the first target of every triple gives one.
    // A GPU member never gives one: senders are CPU processes.
    bool GPU = isGPUTriple(T.Triple);
    bool WantSource =
        !GPU && (O.AllSources ? !SourceTriples.contains(T.Triple)
                              : !HaveSource && triplesCompatible(T.Triple, Host));
    if (WantSource && !O.EmitLLVM) {
      std::unique_ptr<Module> Src = CloneModule(**M);
      if (Error E = AddSource(*Src, T.Triple))
        return E;
    }
    if (Error E = prepareTargetModule(**M, IO))
      return E;
    if (O.EmitLLVM) {
      std::string Out;
      if (O.EmitAssembly) {
        raw_string_ostream OS(Out);
        (*M)->print(OS, nullptr);
      } else {
        Out = bitcodeOf(**M);
      }
      if (Error E = writeFile(O.Output, Out))
        return E;
      return O.WriteDepfile ? writeDepfile() : Error::success();
    }
    Member Tgt;
    Tgt.Triple = T.Triple;
    Tgt.CPU = T.CPU;
    Tgt.Image = memberBitcodeOf(**M);
    A.Members.push_back(std::move(Tgt));
    // A GPU member is bitcode only: the target lowers it to PTX for its own
    // GPU, so --emit-objects adds objects for the CPU triples alone.
    if (O.EmitObjects && !GPU) {
      Expected<std::string> Obj = emitObject(**M, T);
      if (!Obj)
        return Obj.takeError();
      Member Object;
      Object.Triple = T.Triple;
      Object.CPU = T.CPU;
      Object.Kind = ImageKind::Object;
      Object.Image = std::move(*Obj);
      A.Members.push_back(std::move(Object));
    }
  }

  if (!HaveSource && llvm::all_of(O.Inputs, isIRInput) &&
      !haveIRForHost(Host)) {
    // IR for other triples cannot be recompiled for this host.
    if (!O.PrintCommands)
      WithColor::warning(errs(), "tc-cc")
          << "no source member: no input is for this host (" << Host
          << "); a sender on this host cannot create messages\n";
  } else if (!HaveSource) {
    // No target runs here: compile once more (or take the IR inputs for
    // this host), for the source member only.
    CompileTarget HostT{Host, "", O.DefaultSysroot};
    Expected<std::unique_ptr<Module>> M = buildModule(HostT);
    if (!M)
      return M.takeError();
    if (O.PrintCommands)
      return Error::success();
    if (Error E = checkIfuncABI(**M, IO))
      return E;
    if (Error E = AddSource(**M, Host))
      return E;
  }
  if (O.PrintCommands)
    return Error::success();

  for (Member &M : A.Members) {
    M.Compress = O.Compress ? *O.Compress : cheapestCompression(M.Image);
    Expected<std::vector<std::string>> Syms = externalSymbols(M.Kind, M.Image);
    if (!Syms)
      return Syms.takeError();
    M.Symbols = std::move(*Syms);
  }
  Expected<SmallString<0>> Bytes = writeArchive(A);
  if (Bytes && O.SignKey) {
    // The signature covers the hash writeArchive() set: write again with it.
    if (Error E = signArchive(A, *O.SignKey))
      return E;
    Bytes = writeArchive(A);
  }
  if (!Bytes)
    return createStringError("'%s': %s", O.Output.c_str(),
                             toString(Bytes.takeError()).c_str());
  if (Error E = writeFile(O.Output, *Bytes))
    return E;
  return O.WriteDepfile ? writeDepfile() : Error::success();
}

/// The directory holding tc/ifunc.h: <prefix>/include next to an installed
/// <prefix>/bin/tc-cc, else the source tree's include/.
static std::string tcIncludeDir(const char *Argv0) {
  std::string Exe = sys::fs::getMainExecutable(Argv0, (void *)&ccMain);
  SmallString<256> Inc(sys::path::parent_path(sys::path::parent_path(Exe)));
  sys::path::append(Inc, "include");
  SmallString<256> Probe(Inc);
  sys::path::append(Probe, "tc", "ifunc.h");
  if (sys::fs::exists(Probe))
    return std::string(Inc);
  return TC_SOURCE_INCLUDE_DIR;
}

/// Prints \p E once: ABI and IR diagnostics are whole `...: error: ...`
/// lines already, Clang's were printed as they came.
static int report(Error E) {
  handleAllErrors(
      std::move(E), [](const DiagnosedError &) {},
      [](const ErrorInfoBase &EI) {
        std::string Msg = EI.message();
        if (StringRef(Msg).contains("error: "))
          errs() << Msg << "\n";
        else
          WithColor::error(errs(), "tc-cc") << Msg << "\n";
      });
  return 1;
}

int ccMain(int Argc, const char **Argv) {
  ArrayRef<const char *> Args(Argv + 1, Argv + Argc);
  for (StringRef A : Args) {
    if (A == "--help" || A == "-help") {
      outs() << DriverUsage;
      return 0;
    }
    if (A == "--version") {
      outs() << "tc-cc (tc) " << TC_VERSION_STRING << " (clang/LLVM "
             << LLVM_VERSION_STRING << ")\n";
      return 0;
    }
  }
  Expected<DriverOptions> O = parseDriverArgs(Args);
  if (!O)
    return report(O.takeError());
  if (O->Verbose)
    errs() << "tc-cc (tc) " << TC_VERSION_STRING << " with clang "
           << LLVM_VERSION_STRING << "\n";
  InitializeAllTargetInfos();
  InitializeAllTargets();
  InitializeAllTargetMCs();
  InitializeAllAsmPrinters();
  InitializeAllAsmParsers();
  if (Error E = Pipeline(*O, tcIncludeDir(Argv[0])).run()) {
    // Like clang: a failed run does not leave an older output behind that
    // make would take as up to date.
    if (!O->PrintCommands && O->Output != "-")
      sys::fs::remove(O->Output);
    return report(std::move(E));
  }
  return 0;
}

} // namespace tc
