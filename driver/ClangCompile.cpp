//===- ClangCompile.cpp - One source, one target, Clang in-process --------===//
//
// clang::driver::Driver turns the usual flags into one cc1 job per target, so
// defaults, header search and Debian's cross layouts are exactly clang's;
// a CompilerInstance runs that job to an llvm::Module. Nothing is executed
// as a subprocess: the clang path given to the driver only locates clang's
// resource headers (stddef.h, ...).
//
//===----------------------------------------------------------------------===//

#include "ClangCompile.h"

#include "clang/Basic/Diagnostic.h"
#include "clang/Basic/DiagnosticIDs.h"
#include "clang/Basic/DiagnosticOptions.h"
#include "clang/CodeGen/CodeGenAction.h"
#include "clang/Driver/Compilation.h"
#include "clang/Driver/Driver.h"
#include "clang/Driver/Job.h"
#include "clang/Driver/Types.h"
#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/CompilerInvocation.h"
#include "clang/Frontend/TextDiagnosticPrinter.h"
#include "clang/Frontend/Utils.h"
#include "clang/Lex/HeaderSearchOptions.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

using namespace llvm;

namespace tc {

char DiagnosedError::ID;

void DiagnosedError::log(raw_ostream &OS) const {
  OS << "compilation failed (diagnostics printed above)";
}

std::error_code DiagnosedError::convertToErrorCode() const {
  return inconvertibleErrorCode();
}

std::string headerPackage(StringRef T, bool CXX) {
  Triple TT(T);
  bool Native = TT.getArch() == Triple(sys::getProcessTriple()).getArch();
  StringRef Deb;
  switch (TT.getArch()) {
  case Triple::aarch64:
    Deb = "arm64";
    break;
  case Triple::x86_64:
    Deb = "amd64";
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
  std::string Pkg = CXX ? "libstdc++-12-dev" : "libc6-dev";
  return Native ? Pkg : (Pkg + "-" + Deb + "-cross").str();
}

namespace {

/// Lists system headers for -MD and leaves them out for -MMD.
class HeaderCollector : public clang::DependencyCollector {
public:
  explicit HeaderCollector(bool System) : System(System) {}
  bool needSystemDependencies() override { return System; }

private:
  bool System;
};

/// Answers "would `#include <Header>` find a file" from the cc1 job's own
/// search list, sysroot included.
class HeaderProbe {
public:
  explicit HeaderProbe(const clang::CompilerInvocation &CI)
      : HS(CI.getHeaderSearchOpts()), CXX(CI.getLangOpts().CPlusPlus) {}

  bool finds(StringRef Header) const {
    using namespace clang::frontend;
    for (const clang::HeaderSearchOptions::Entry &E : HS.UserEntries) {
      if (E.IsFramework || E.Group == Quoted || E.Group == ObjCSystem ||
          E.Group == ObjCXXSystem || (E.Group == CXXSystem && !CXX) ||
          (E.Group == CSystem && CXX))
        continue;
      SmallString<256> Path;
      if (!E.IgnoreSysRoot && sys::path::is_absolute(E.Path))
        Path = HS.Sysroot;
      sys::path::append(Path, E.Path, Header);
      if (sys::fs::exists(Path))
        return true;
    }
    return false;
  }

private:
  const clang::HeaderSearchOptions &HS;
  bool CXX;
};

} // namespace

/// Fails, naming the Debian package, when the target's C library (or C++
/// library) headers are not on the job's search path. clang's Linux
/// toolchain always searches the sysroot's /usr/include, which on a Debian
/// host holds the host's generic glibc headers: stdio.h alone proves
/// nothing, the architecture-specific gnu/stubs.h does.
static Error checkLibraryHeaders(const clang::CompilerInvocation &CI,
                                 const CompileTarget &T) {
  Triple TT(T.Triple);
  const clang::HeaderSearchOptions &HS = CI.getHeaderSearchOpts();
  if (!TT.isOSLinux() || !HS.UseStandardSystemIncludes ||
      CI.getLangOpts().Freestanding)
    return Error::success();
  HeaderProbe Probe(CI);
  std::string Where =
      T.Sysroot.empty() ? "" : " under sysroot '" + T.Sysroot + "'";
  bool C = Probe.finds("stdio.h") &&
           (!TT.isGNUEnvironment() || Probe.finds("gnu/stubs.h"));
  if (!C)
    return createStringError("no C library headers for %s%s (install %s)",
                             T.Triple.c_str(), Where.c_str(),
                             headerPackage(T.Triple, false).c_str());
  if (CI.getLangOpts().CPlusPlus && HS.UseStandardCXXIncludes &&
      !(Probe.finds("cstddef") &&
        (Probe.finds("bits/c++config.h") || Probe.finds("__config"))))
    return createStringError(
        "no C++ standard library headers for %s%s (install %s)",
        T.Triple.c_str(), Where.c_str(),
        headerPackage(T.Triple, true).c_str());
  return Error::success();
}

/// Whether clang would compile \p Input to LLVM IR by its extension alone:
/// C-family sources do; objects, archives and unknown extensions are linker
/// inputs to clang's driver (which then makes no compile job), assembly goes
/// to the assembler.
static bool compilesToIR(StringRef Input) {
  namespace types = clang::driver::types;
  StringRef Ext = sys::path::extension(Input);
  types::ID Ty = types::lookupTypeForExtension(Ext.drop_front());
  return Ty != types::TY_INVALID && types::isAcceptedByClang(Ty) &&
         Ty != types::TY_Asm && Ty != types::TY_PP_Asm;
}

Error checkSourceInput(const DriverOptions &O, StringRef Input) {
  bool HaveLanguage = llvm::any_of(
      O.ClangArgs, [](StringRef A) { return A.starts_with("-x"); });
  // clang would add "no input files" to this: one line is enough.
  if (Input != "-" && !sys::fs::exists(Input))
    return createStringError("'%s': no such file or directory",
                             Input.str().c_str());
  if (Input == "-" && !HaveLanguage)
    return createStringError("reading standard input needs -x LANGUAGE");
  if (!HaveLanguage && !compilesToIR(Input))
    return createStringError("'%s': not a C, C++ or Objective-C source, nor "
                             "LLVM IR (.ll, .bc); name its language with -x",
                             Input.str().c_str());
  return Error::success();
}

Expected<std::unique_ptr<Module>>
compileSource(ClangSession &S, const CompileTarget &T, StringRef Input) {
  const DriverOptions &O = S.Opts;
  // Driver-level problems (unknown flags, missing inputs) print as
  // `tc-cc: error: ...`, like the tool's own errors.
  clang::DiagnosticOptions DiagOpts;
  auto *Printer = new clang::TextDiagnosticPrinter(errs(), DiagOpts);
  Printer->setPrefix("tc-cc");
  clang::DiagnosticsEngine Diags(
      IntrusiveRefCntPtr<clang::DiagnosticIDs>(new clang::DiagnosticIDs()),
      DiagOpts, Printer);

  std::string ClangPath = TC_CLANG_EXECUTABLE;
  clang::driver::Driver D(ClangPath, T.Triple, Diags, "tc-cc");
  D.setCheckInputsExist(true);
  std::vector<std::string> Storage = {ClangPath, "--target=" + T.Triple};
  // tc-cc's -mcpu is per target; clang's x86 driver takes the CPU as
  // -march (it rejects -mcpu there), the others as -mcpu.
  if (!T.CPU.empty())
    Storage.push_back((Triple(T.Triple).isX86() ? "-march=" : "-mcpu=") +
                      T.CPU);
  if (!T.Sysroot.empty())
    Storage.push_back("--sysroot=" + T.Sysroot);
  Storage.push_back("-I" + S.TCIncludeDir);
  // Line tables let ABI diagnostics name file:line; the passes strip them
  // again unless -g.
  if (!O.KeepDebugInfo)
    Storage.push_back("-gline-tables-only");
  Storage.insert(Storage.end(), O.ClangArgs.begin(), O.ClangArgs.end());
  // -v reaches cc1, which then prints its header search list.
  if (O.Verbose)
    Storage.push_back("-v");
  Storage.insert(Storage.end(), {"-c", "-emit-llvm", "-o", "-", Input.str()});
  std::vector<const char *> Argv;
  for (const std::string &Arg : Storage)
    Argv.push_back(Arg.c_str());

  std::unique_ptr<clang::driver::Compilation> C(D.BuildCompilation(Argv));
  // Some driver errors (a missing input, an unknown -x language) leave the
  // compilation without an error mark: they are in the engine.
  if (!C || C->containsError() || Diags.hasErrorOccurred())
    return make_error<DiagnosedError>();
  const clang::driver::JobList &Jobs = C->getJobs();
  if (Jobs.size() != 1 || !isa<clang::driver::Command>(*Jobs.begin()))
    return createStringError("'%s': expected one compile job, the driver "
                             "made %zu",
                             Input.str().c_str(), Jobs.size());
  const auto &Cmd = cast<clang::driver::Command>(*Jobs.begin());
  // -x assembler (or a language whose job is not cc1) gives no LLVM IR.
  if (Cmd.getArguments().empty() ||
      StringRef(Cmd.getArguments().front()) != "-cc1")
    return createStringError(
        "'%s': clang's job for it is '%s', not a "
        "compile to LLVM IR",
        Input.str().c_str(),
        Cmd.getArguments().empty() ? "empty" : Cmd.getArguments().front());
  if (O.PrintCommands || O.Verbose) {
    Cmd.Print(errs(), "\n", /*Quote=*/true);
    if (O.PrintCommands)
      return nullptr;
  }

  // The job's arguments start with -cc1, which CreateFromArgs must not see.
  const opt::ArgStringList &CC1 = Cmd.getArguments();
  auto CI = std::make_shared<clang::CompilerInvocation>();
  if (!clang::CompilerInvocation::CreateFromArgs(
          *CI, ArrayRef<const char *>(CC1).drop_front(), Diags, Argv[0]))
    return make_error<DiagnosedError>();
  if (Error E = checkLibraryHeaders(*CI, T))
    return std::move(E);
  // Every target compiles the same standard input: read it once, and give
  // each compile the buffer.
  if (Input == "-") {
    if (!S.Stdin) {
      ErrorOr<std::unique_ptr<MemoryBuffer>> B = MemoryBuffer::getSTDIN();
      if (!B)
        return createStringError("reading standard input: %s",
                                 B.getError().message().c_str());
      S.Stdin = std::move(*B);
    }
    clang::FrontendInputFile &In = CI->getFrontendOpts().Inputs.front();
    In = clang::FrontendInputFile(S.Stdin->getMemBufferRef(), In.getKind());
  }
  // cc1 leaks its AST at exit for speed; in-process it must not.
  CI->getFrontendOpts().DisableFree = false;
  clang::CompilerInstance Clang(std::move(CI));
  Clang.createVirtualFileSystem();
  // Source diagnostics print exactly as clang's: file:line:col: error: ...
  Clang.createDiagnostics(
      new clang::TextDiagnosticPrinter(errs(), Clang.getDiagnosticOpts()),
      /*ShouldOwnClient=*/true);
  auto Headers = std::make_shared<HeaderCollector>(O.DepfileSystemHeaders);
  Clang.addDependencyCollector(Headers);
  clang::EmitLLVMOnlyAction Act(&S.Ctx);
  if (!Clang.ExecuteAction(Act))
    return make_error<DiagnosedError>();
  for (const std::string &Dep : Headers->getDependencies())
    S.Dependencies.insert(Dep);
  std::unique_ptr<Module> M = Act.takeModule();
  if (!M)
    return make_error<DiagnosedError>();
  return std::move(M);
}

} // namespace tc
