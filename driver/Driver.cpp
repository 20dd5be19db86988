//===- Driver.cpp - tc-cc: compile an ifunc once per target triple --------===//
//
// Clang runs in this process: clang::driver::Driver turns the usual flags
// into one cc1 job per target (so header search, cross layouts and defaults
// are exactly clang's), and a CompilerInstance runs that job to an
// llvm::Module. Nothing is executed as a subprocess.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include "tc/Passes.h"
#include "tc/Version.h"

#include "clang/Basic/Diagnostic.h"
#include "clang/Basic/DiagnosticIDs.h"
#include "clang/Basic/DiagnosticOptions.h"
#include "clang/CodeGen/CodeGenAction.h"
#include "clang/Driver/Compilation.h"
#include "clang/Driver/Driver.h"
#include "clang/Driver/Job.h"
#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/CompilerInvocation.h"
#include "clang/Frontend/TextDiagnosticPrinter.h"
#include "clang/Frontend/Utils.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IRReader/IRReader.h"
#include "llvm/Linker/Linker.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"
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

static const char *const Usage = R"(OVERVIEW: tc-cc: compile an injected function (ifunc) into a fat archive

USAGE: tc-cc [options] SRC... -o OUT.tcfb

Each source (.c, .cpp, .ll, .bc) is compiled once per target triple with
Clang, checked against the ifunc ABI, cut down to what each role needs and
packed with a source member for this host.

OPTIONS:
  -o FILE                 Output archive (or .ll/.bc with -emit-llvm)
  --name=NAME             The ifunc name (default: the first source's stem)
  --target=TRIPLE         Compile for TRIPLE (repeatable; default:
                          x86_64-unknown-linux-gnu and aarch64-unknown-linux-gnu)
  -mcpu=CPU               CPU of the preceding --target (before any --target:
                          of every target); the member is then CPU-specific
  --sysroot=[TRIPLE=]DIR  Sysroot for one target or for all
  --deps FILE             Shared libraries the target must load, one per line
  -lNAME                  Add libNAME's shared object (its soname) to the deps
  --emit-objects          Also pack a native relocatable object per triple
  --compress=none|zstd    Compress members
  -emit-llvm -S | -c      Write one target's prepared module (.ll or .bc)
  -MD -MF FILE -MT TARGET Write a make depfile listing every header used
  -I -D -U -std= -O0..3 -Os -Oz -W... -g -isystem -include -f...
                          As for clang (default -O2); -g keeps debug info
  -###                    Print the cc1 command per target; compile nothing
  -v                      Print the version and the cc1 commands, then run
  --help, --version
)";

static const char *const DefaultTargets[] = {"x86_64-unknown-linux-gnu",
                                             "aarch64-unknown-linux-gnu"};

/// A failure whose diagnostics clang has printed already.
static Error silentFailure() {
  return createStringError(std::errc::invalid_argument, "");
}

//===----------------------------------------------------------------------===//
// Command line
//===----------------------------------------------------------------------===//

/// Finds the soname a target should load for -lNAME, as the host names it.
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
      StringRef Rest = File.drop_front(Prefix.size());
      unsigned Major;
      // Only lib<name>.so.<major>: the soname, not the full version.
      if (Rest.getAsInteger(10, Major))
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

Expected<DriverOptions> parseDriverArgs(ArrayRef<const char *> Args) {
  DriverOptions O;
  std::string PendingCPU;        // -mcpu before any --target
  std::vector<std::pair<std::string, std::string>> Sysroots; // triple, dir
  bool HaveOpt = false;
  for (size_t I = 0; I < Args.size(); ++I) {
    StringRef A = Args[I];
    auto Value = [&](StringRef Flag) -> Expected<std::string> {
      if (A.size() > Flag.size()) {
        StringRef V = A.drop_front(Flag.size());
        V.consume_front("=");
        return V.str();
      }
      if (I + 1 >= Args.size())
        return createStringError("option '%s' needs a value",
                                 Flag.str().c_str());
      return std::string(Args[++I]);
    };
    auto Take = [&](StringRef Flag, std::string &Out) -> Error {
      Expected<std::string> V = Value(Flag);
      if (!V)
        return V.takeError();
      Out = *V;
      return Error::success();
    };
    std::string V;
    if (A == "-o" || (A.starts_with("-o") && A.size() > 2 && A[2] != '-')) {
      if (Error E = Take("-o", O.Output))
        return std::move(E);
    } else if (A == "--name" || A.starts_with("--name=")) {
      if (Error E = Take("--name", O.Name))
        return std::move(E);
    } else if (A == "--target" || A.starts_with("--target=") ||
               A == "-target") {
      if (Error E = Take(A == "-target" ? "-target" : "--target", V))
        return std::move(E);
      O.Targets.push_back({Triple::normalize(V), PendingCPU, ""});
    } else if (A.starts_with("-mcpu=")) {
      std::string CPU = A.drop_front(6).str();
      if (O.Targets.empty())
        PendingCPU = CPU;
      else
        O.Targets.back().CPU = CPU;
    } else if (A == "--sysroot" || A.starts_with("--sysroot=")) {
      if (Error E = Take("--sysroot", V))
        return std::move(E);
      auto [T, Dir] = StringRef(V).split('=');
      if (Dir.empty())
        Sysroots.push_back({"", V});
      else
        Sysroots.push_back({Triple::normalize(T), Dir.str()});
    } else if (A == "--deps" || A.starts_with("--deps=")) {
      if (Error E = Take("--deps", V))
        return std::move(E);
      ErrorOr<std::unique_ptr<MemoryBuffer>> B = MemoryBuffer::getFile(V);
      if (!B)
        return createStringError("'%s': %s", V.c_str(),
                                 B.getError().message().c_str());
      Expected<std::vector<std::string>> D = parseDepsList((*B)->getBuffer());
      if (!D)
        return createStringError("'%s': %s", V.c_str(),
                                 toString(D.takeError()).c_str());
      O.Deps.insert(O.Deps.end(), D->begin(), D->end());
    } else if (A.starts_with("-l")) {
      if (Error E = Take("-l", V))
        return std::move(E);
      Expected<std::string> Lib = resolveLibrary(V);
      if (!Lib)
        return Lib.takeError();
      O.Deps.push_back(*Lib);
    } else if (A == "--emit-objects") {
      O.EmitObjects = true;
    } else if (A.starts_with("--compress=")) {
      Expected<Compression> C = parseCompression(A.drop_front(11));
      if (!C)
        return C.takeError();
      O.Compress = *C;
    } else if (A == "-emit-llvm") {
      O.EmitLLVM = true;
    } else if (A == "-S") {
      O.EmitAssembly = true;
    } else if (A == "-c") {
      // The default for -emit-llvm output; nothing else to do.
    } else if (A == "-MD" || A == "-MMD") {
      O.WriteDepfile = true;
    } else if (A == "-MF" || A.starts_with("-MF")) {
      if (Error E = Take("-MF", O.DepfilePath))
        return std::move(E);
    } else if (A == "-MT" || A.starts_with("-MT")) {
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
    } else if (A.starts_with("-")) {
      if (A.starts_with("-g") && A != "-g0")
        O.KeepDebugInfo = true;
      if (A.starts_with("-O"))
        HaveOpt = true;
      // Everything else is clang's to accept or reject.
      O.ClangArgs.push_back(A.str());
    } else {
      O.Inputs.push_back(A.str());
    }
  }
  if (!HaveOpt)
    O.ClangArgs.insert(O.ClangArgs.begin(), "-O2");
  if (O.Targets.empty()) {
    // .ll/.bc inputs name their own triple: default to theirs.
    bool AllIR = !O.Inputs.empty();
    for (const std::string &In : O.Inputs)
      AllIR &= StringRef(In).ends_with(".ll") || StringRef(In).ends_with(".bc");
    if (!AllIR)
      for (const char *T : DefaultTargets)
        O.Targets.push_back({T, PendingCPU, ""});
  }
  for (auto &[T, Dir] : Sysroots) {
    bool Matched = false;
    for (CompileTarget &CT : O.Targets)
      if (T.empty() || CT.Triple == T) {
        CT.Sysroot = Dir;
        Matched = true;
      }
    if (!Matched && !T.empty())
      return createStringError("--sysroot for %s, which is not a target",
                               T.c_str());
  }
  if (O.Inputs.empty())
    return createStringError("no input files");
  if (O.Name.empty()) {
    O.Name = sys::path::stem(O.Inputs.front()).str();
    for (char &C : O.Name)
      if (!isAlnum(C))
        C = '_';
  }
  if (O.Output.empty() && !O.PrintCommands)
    return createStringError("no output file (use -o)");
  if (O.EmitLLVM && O.Targets.size() > 1)
    return createStringError("-emit-llvm writes one triple's module: give "
                             "exactly one --target");
  return O;
}

//===----------------------------------------------------------------------===//
// Compiling
//===----------------------------------------------------------------------===//

std::string crossHeaderPackage(StringRef T, bool CXX) {
  Triple TT(T);
  StringRef Deb;
  switch (TT.getArch()) {
  case Triple::aarch64:
    Deb = "arm64";
    break;
  case Triple::x86_64:
    Deb = "amd64";
    break;
  case Triple::riscv64:
    Deb = "riscv64";
    break;
  case Triple::ppc64le:
    Deb = "ppc64el";
    break;
  case Triple::arm:
    Deb = "armhf";
    break;
  default:
    Deb = TT.getArchName();
    break;
  }
  return CXX ? ("libstdc++-12-dev-" + Deb + "-cross").str()
             : ("libc6-dev-" + Deb + "-cross").str();
}

namespace {

class Compiler {
public:
  Compiler(const DriverOptions &O, const char *Argv0) : O(O), Argv0(Argv0) {}
  int run();

private:
  Expected<std::unique_ptr<Module>> compileSource(const CompileTarget &T,
                                                  StringRef Input);
  Expected<std::unique_ptr<Module>> loadIR(const CompileTarget &T,
                                           StringRef Input, bool &Skip);
  Expected<std::unique_ptr<Module>> compileAll(const CompileTarget &T);
  Error checkCrossHeaders(const CompileTarget &T);
  Expected<std::string> emitObject(Module &M, const CompileTarget &T);
  Error writeDepfile();
  std::string tcIncludeDir() const;

  const DriverOptions &O;
  const char *Argv0;
  LLVMContext Ctx;
  std::set<std::string> Dependencies;
};

std::string Compiler::tcIncludeDir() const {
  // Installed: <prefix>/bin/tc-cc next to <prefix>/include/tc/ifunc.h.
  std::string Exe = sys::fs::getMainExecutable(Argv0, (void *)&ccMain);
  SmallString<256> Inc(sys::path::parent_path(sys::path::parent_path(Exe)));
  sys::path::append(Inc, "include");
  SmallString<256> Probe(Inc);
  sys::path::append(Probe, "tc", "ifunc.h");
  if (sys::fs::exists(Probe))
    return std::string(Inc);
  return TC_SOURCE_INCLUDE_DIR; // The build tree.
}

Error Compiler::checkCrossHeaders(const CompileTarget &T) {
  Triple TT(T.Triple), Host(sys::getProcessTriple());
  if (!T.Sysroot.empty() || TT.getArch() == Host.getArch() || !TT.isOSLinux())
    return Error::success();
  std::string Dir = ("/usr/" + TT.getArchName() + "-linux-gnu/include").str();
  bool CXX = llvm::any_of(O.Inputs, [](const std::string &I) {
    StringRef E = sys::path::extension(I);
    return E == ".cpp" || E == ".cc" || E == ".cxx" || E == ".C";
  });
  if (!sys::fs::exists(Dir + "/stdio.h"))
    return createStringError("no C library headers for %s in %s (install %s, "
                             "or give --sysroot)",
                             T.Triple.c_str(), Dir.c_str(),
                             crossHeaderPackage(T.Triple, false).c_str());
  if (CXX && !sys::fs::exists(Dir + "/c++"))
    return createStringError("no C++ headers for %s in %s/c++ (install %s, "
                             "or give --sysroot)",
                             T.Triple.c_str(), Dir.c_str(),
                             crossHeaderPackage(T.Triple, true).c_str());
  return Error::success();
}

Expected<std::unique_ptr<Module>>
Compiler::compileSource(const CompileTarget &T, StringRef Input) {
  clang::DiagnosticOptions DiagOpts;
  auto *Printer = new clang::TextDiagnosticPrinter(errs(), DiagOpts);
  Printer->setPrefix("tc-cc");
  clang::DiagnosticsEngine Diags(
      IntrusiveRefCntPtr<clang::DiagnosticIDs>(new clang::DiagnosticIDs()),
      DiagOpts, Printer);

  // The driver only computes the cc1 job; its path locates clang's
  // resource headers (stddef.h, ...). It is never executed.
  std::string ClangPath = TC_CLANG_EXECUTABLE;
  clang::driver::Driver D(ClangPath, T.Triple, Diags, "tc-cc");
  D.setCheckInputsExist(true);
  std::vector<std::string> Storage = {ClangPath, "--target=" + T.Triple};
  if (!T.CPU.empty())
    Storage.push_back("-mcpu=" + T.CPU);
  if (!T.Sysroot.empty())
    Storage.push_back("--sysroot=" + T.Sysroot);
  Storage.push_back("-I" + tcIncludeDir());
  // Line tables let ABI diagnostics name file:line; the passes strip them
  // again unless -g.
  if (!O.KeepDebugInfo)
    Storage.push_back("-gline-tables-only");
  Storage.insert(Storage.end(), O.ClangArgs.begin(), O.ClangArgs.end());
  Storage.insert(Storage.end(), {"-c", "-emit-llvm", "-o", "-", Input.str()});
  std::vector<const char *> Argv;
  for (const std::string &S : Storage)
    Argv.push_back(S.c_str());

  std::unique_ptr<clang::driver::Compilation> C(D.BuildCompilation(Argv));
  if (!C || C->containsError())
    return silentFailure();
  const clang::driver::JobList &Jobs = C->getJobs();
  if (Jobs.size() != 1 || !isa<clang::driver::Command>(*Jobs.begin()))
    return createStringError("'%s': expected one compile job, the driver "
                             "made %zu",
                             Input.str().c_str(), Jobs.size());
  const auto &Cmd = cast<clang::driver::Command>(*Jobs.begin());
  if (O.PrintCommands || O.Verbose) {
    Cmd.Print(errs(), "\n", /*Quote=*/true);
    if (O.PrintCommands)
      return nullptr;
  }

  const llvm::opt::ArgStringList &CC1 = Cmd.getArguments();
  auto CI = std::make_shared<clang::CompilerInvocation>();
  if (!clang::CompilerInvocation::CreateFromArgs(
          *CI, ArrayRef<const char *>(CC1).drop_front(), Diags, Argv[0]))
    return silentFailure();
  // cc1 normally leaks its AST at exit for speed; in-process it must not.
  CI->getFrontendOpts().DisableFree = false;
  clang::CompilerInstance Clang(std::move(CI));
  Clang.createVirtualFileSystem();
  // Source diagnostics print exactly as clang's: file:line:col: error: ...
  Clang.createDiagnostics(
      new clang::TextDiagnosticPrinter(errs(), Clang.getDiagnosticOpts()),
      /*ShouldOwnClient=*/true);
  auto Deps = std::make_shared<clang::DependencyCollector>();
  Clang.addDependencyCollector(Deps);
  clang::EmitLLVMOnlyAction Act(&Ctx);
  if (!Clang.ExecuteAction(Act))
    return silentFailure();
  for (const std::string &Dep : Deps->getDependencies())
    Dependencies.insert(Dep);
  std::unique_ptr<Module> M = Act.takeModule();
  if (!M)
    return silentFailure();
  return std::move(M);
}

Expected<std::unique_ptr<Module>> Compiler::loadIR(const CompileTarget &T,
                                                   StringRef Input,
                                                   bool &Skip) {
  SMDiagnostic Diag;
  std::unique_ptr<Module> M = parseIRFile(Input, Diag, Ctx);
  if (!M) {
    std::string Msg;
    raw_string_ostream OS(Msg);
    Diag.print("tc-cc", OS, /*ShowColors=*/false);
    return createStringError(StringRef(OS.str()).rtrim());
  }
  Dependencies.insert(Input.str());
  std::string Own = M->getTargetTriple().str();
  if (Own.empty())
    return createStringError("'%s': module has no target triple",
                             Input.str().c_str());
  Skip = !triplesCompatible(Own, T.Triple);
  return std::move(M);
}

Expected<std::unique_ptr<Module>>
Compiler::compileAll(const CompileTarget &T) {
  std::unique_ptr<Module> Linked;
  bool AnySource = false;
  for (const std::string &In : O.Inputs) {
    StringRef Ext = sys::path::extension(In);
    std::unique_ptr<Module> M;
    if (Ext == ".ll" || Ext == ".bc") {
      bool Skip = false;
      Expected<std::unique_ptr<Module>> IR = loadIR(T, In, Skip);
      if (!IR)
        return IR.takeError();
      if (Skip)
        continue;
      M = std::move(*IR);
    } else {
      if (!AnySource)
        if (Error E = checkCrossHeaders(T))
          return std::move(E);
      AnySource = true;
      Expected<std::unique_ptr<Module>> Src = compileSource(T, In);
      if (!Src)
        return Src.takeError();
      M = std::move(*Src);
      if (!M) // -###
        continue;
    }
    if (!Linked) {
      Linked = std::move(M);
      continue;
    }
    if (Linker::linkModules(*Linked, std::move(M)))
      return createStringError("cannot link '%s' into the %s module",
                               In.c_str(), T.Triple.c_str());
  }
  if (!Linked && !O.PrintCommands)
    return createStringError("no input for %s (IR inputs are for other "
                             "triples)",
                             T.Triple.c_str());
  return std::move(Linked);
}

Expected<std::string> Compiler::emitObject(Module &M, const CompileTarget &T) {
  std::string Err;
  const Target *Tgt = TargetRegistry::lookupTarget(Triple(T.Triple), Err);
  if (!Tgt)
    return createStringError("%s: %s", T.Triple.c_str(), Err.c_str());
  std::unique_ptr<TargetMachine> TM(Tgt->createTargetMachine(
      Triple(T.Triple), T.CPU.empty() ? "generic" : T.CPU, "",
      TargetOptions(), Reloc::PIC_));
  if (!TM)
    return createStringError("%s: cannot create a target machine",
                             T.Triple.c_str());
  M.setDataLayout(TM->createDataLayout());
  SmallString<0> Obj;
  raw_svector_ostream OS(Obj);
  legacy::PassManager PM;
  if (TM->addPassesToEmitFile(PM, OS, nullptr, CodeGenFileType::ObjectFile))
    return createStringError("%s: cannot emit an object file",
                             T.Triple.c_str());
  PM.run(M);
  return Obj.str().str();
}

/// Bitcode without the irsymtab block: that index serves LTO linkers, not a
/// JIT, and costs ~150 bytes per member.
static std::string bitcodeOf(const Module &M) {
  SmallVector<char, 0> Buf;
  {
    BitcodeWriter W(Buf);
    W.writeModule(M);
    W.writeStrtab();
  }
  return std::string(Buf.begin(), Buf.end());
}

static Error writeFile(StringRef Path, StringRef Bytes) {
  return writeToOutput(Path, [&](raw_ostream &OS) {
    OS << Bytes;
    return Error::success();
  });
}

Error Compiler::writeDepfile() {
  std::string Path = O.DepfilePath;
  if (Path.empty())
    Path = (sys::path::parent_path(O.Output).empty()
                ? std::string()
                : (sys::path::parent_path(O.Output) + "/").str()) +
           sys::path::stem(O.Output).str() + ".d";
  std::string Target = O.DepTarget.empty() ? O.Output : O.DepTarget;
  auto Escape = [](StringRef S) {
    std::string E;
    for (char C : S) {
      if (C == ' ' || C == '#')
        E += '\\';
      if (C == '$')
        E += '$';
      E += C;
    }
    return E;
  };
  std::string Text = Escape(Target) + ":";
  for (const std::string &In : O.Inputs)
    Dependencies.insert(In);
  for (const std::string &D : Dependencies)
    Text += " \\\n  " + Escape(D);
  Text += "\n";
  return writeFile(Path, Text);
}

int Compiler::run() {
  auto Fail = [](Error E) {
    std::string Msg = toString(std::move(E));
    if (!Msg.empty()) {
      // Pass diagnostics are already "file:line: error: ..." lines.
      if (StringRef(Msg).contains("error: "))
        errs() << Msg << "\n";
      else
        WithColor::error(errs(), "tc-cc") << Msg << "\n";
    }
    return 1;
  };
  if (O.Verbose)
    errs() << "tc-cc (tc) " << TC_VERSION_STRING << " with clang "
           << LLVM_VERSION_STRING << "\n";

  IfuncOptions IO;
  IO.Name = O.Name;
  IO.KeepDebugInfo = O.KeepDebugInfo;
  std::vector<CompileTarget> Targets = O.Targets;
  if (Targets.empty()) { // IR inputs only: their own triples.
    std::set<std::string> Seen;
    for (const std::string &In : O.Inputs) {
      SMDiagnostic Diag;
      std::unique_ptr<Module> M = parseIRFile(In, Diag, Ctx);
      if (!M) {
        std::string Msg;
        raw_string_ostream OS(Msg);
        Diag.print("tc-cc", OS, false);
        errs() << OS.str();
        return 1;
      }
      std::string T = Triple::normalize(M->getTargetTriple().str());
      if (T.empty())
        return Fail(createStringError("'%s': module has no target triple",
                                      In.c_str()));
      if (Seen.insert(T).second)
        Targets.push_back({T, "", ""});
    }
  }

  Archive A;
  A.Name = O.Name;
  A.Deps = O.Deps;
  Triple Host(sys::getProcessTriple());
  bool HaveSource = false;
  for (const CompileTarget &T : Targets) {
    Expected<std::unique_ptr<Module>> M = compileAll(T);
    if (!M)
      return Fail(M.takeError());
    if (O.PrintCommands)
      continue;
    if (Error E = checkIfuncABI(**M, IO))
      return Fail(std::move(E));
    // The first target this host can run also gives the source member.
    if (!HaveSource && triplesCompatible(T.Triple, Host.str())) {
      std::unique_ptr<Module> Src = CloneModule(**M);
      if (Error E = prepareSourceModule(*Src, IO))
        return Fail(std::move(E));
      Member S;
      S.Triple = T.Triple;
      S.TheRole = Role::Source;
      S.Image = bitcodeOf(*Src);
      HaveSource = true;
      A.Members.push_back(std::move(S));
    }
    if (Error E = prepareTargetModule(**M, IO))
      return Fail(std::move(E));
    if (O.EmitLLVM) {
      std::string Out;
      if (O.EmitAssembly) {
        raw_string_ostream OS(Out);
        (*M)->print(OS, nullptr);
      } else {
        Out = bitcodeOf(**M);
      }
      if (Error E = writeFile(O.Output, Out))
        return Fail(std::move(E));
      if (O.WriteDepfile)
        if (Error E = writeDepfile())
          return Fail(std::move(E));
      return 0;
    }
    Member Tgt;
    Tgt.Triple = T.Triple;
    Tgt.CPU = T.CPU;
    Tgt.Image = bitcodeOf(**M);
    A.Members.push_back(std::move(Tgt));
    if (O.EmitObjects) {
      Expected<std::string> Obj = emitObject(**M, T);
      if (!Obj)
        return Fail(Obj.takeError());
      Member OM;
      OM.Triple = T.Triple;
      OM.CPU = T.CPU;
      OM.Kind = ImageKind::Object;
      OM.Image = std::move(*Obj);
      A.Members.push_back(std::move(OM));
    }
  }
  if (O.PrintCommands)
    return 0;
  bool AllIR = llvm::all_of(O.Inputs, [](const std::string &In) {
    StringRef E = sys::path::extension(In);
    return E == ".ll" || E == ".bc";
  });
  if (!HaveSource && AllIR) {
    // IR for other triples cannot be recompiled for this host.
    WithColor::warning(errs(), "tc-cc")
        << "no source member: no input is for this host ("
        << Host.str() << "); a sender on this host cannot create messages\n";
  } else if (!HaveSource) {
    // No target runs here: compile once more for this host, for the
    // source member only.
    CompileTarget HostT{Triple::normalize(Host.str()), "", ""};
    Expected<std::unique_ptr<Module>> M = compileAll(HostT);
    if (!M)
      return Fail(M.takeError());
    if (Error E = prepareSourceModule(**M, IO))
      return Fail(std::move(E));
    Member S;
    S.Triple = HostT.Triple;
    S.TheRole = Role::Source;
    S.Image = bitcodeOf(**M);
    A.Members.push_back(std::move(S));
  }
  for (Member &M : A.Members) {
    M.Compress = O.Compress;
    Expected<std::vector<std::string>> Syms = externalSymbols(M.Kind, M.Image);
    if (!Syms)
      return Fail(Syms.takeError());
    M.Symbols = std::move(*Syms);
  }
  Expected<SmallString<0>> Bytes = writeArchive(A);
  if (!Bytes)
    return Fail(createStringError("'%s': %s", O.Output.c_str(),
                                  toString(Bytes.takeError()).c_str()));
  if (Error E = writeFile(O.Output, *Bytes))
    return Fail(std::move(E));
  if (O.WriteDepfile)
    if (Error E = writeDepfile())
      return Fail(std::move(E));
  return 0;
}

} // namespace

int ccMain(int Argc, const char **Argv) {
  ArrayRef<const char *> Args(Argv + 1, Argv + Argc);
  for (StringRef A : Args) {
    if (A == "--help" || A == "-help") {
      outs() << Usage;
      return 0;
    }
    if (A == "--version") {
      outs() << "tc-cc (tc) " << TC_VERSION_STRING << " (clang/LLVM "
             << LLVM_VERSION_STRING << ")\n";
      return 0;
    }
  }
  Expected<DriverOptions> O = parseDriverArgs(Args);
  if (!O) {
    WithColor::error(errs(), "tc-cc") << toString(O.takeError()) << "\n";
    return 1;
  }
  InitializeAllTargetInfos();
  InitializeAllTargets();
  InitializeAllTargetMCs();
  InitializeAllAsmPrinters();
  InitializeAllAsmParsers();
  return Compiler(*O, Argv[0]).run();
}

} // namespace tc
