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
#include "clang/Basic/DiagnosticLex.h"
#include "clang/Basic/DiagnosticOptions.h"
#include "clang/Basic/MacroBuilder.h"
#include "clang/Basic/TargetInfo.h"
#include "clang/Basic/TargetOptions.h"
#include "clang/Basic/Version.h"
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
#include "clang/Lex/PreprocessorOptions.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
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

/// Debian's name for the architecture of triple \p TT (arm64, amd64, ...).
static StringRef debianArch(const Triple &TT) {
  switch (TT.getArch()) {
  case Triple::aarch64:
    return "arm64";
  case Triple::x86_64:
    return "amd64";
  case Triple::ppc64le:
    return "ppc64el";
  case Triple::arm:
    return "armhf";
  default:
    return TT.getArchName();
  }
}

std::string headerPackage(StringRef T, bool CXX) {
  Triple TT(T);
  bool Native = TT.getArch() == Triple(sys::getProcessTriple()).getArch();
  std::string Pkg = CXX ? "libstdc++-12-dev" : "libc6-dev";
  return Native ? Pkg : (Pkg + "-" + debianArch(TT) + "-cross").str();
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

  bool finds(StringRef Header) const { return !path(Header).empty(); }

  /// Where `#include <Header>` would find it, or "".
  std::string path(StringRef Header) const {
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
        return std::string(Path);
    }
    return "";
  }

private:
  const clang::HeaderSearchOptions &HS;
  bool CXX;
};

/// Clang's diagnostic printer, noting the first header clang could not
/// find (for the per-target message compileSource adds).
class MissingHeaderNoter : public clang::DiagnosticConsumer {
public:
  explicit MissingHeaderNoter(clang::DiagnosticOptions &Opts)
      : Printer(errs(), Opts) {}
  void BeginSourceFile(const clang::LangOptions &LO,
                       const clang::Preprocessor *PP) override {
    Printer.BeginSourceFile(LO, PP);
  }
  void EndSourceFile() override { Printer.EndSourceFile(); }
  void finish() override { Printer.finish(); }
  void HandleDiagnostic(clang::DiagnosticsEngine::Level L,
                        const clang::Diagnostic &Info) override {
    clang::DiagnosticConsumer::HandleDiagnostic(L, Info);
    unsigned ID = Info.getID();
    if (Missing.empty() &&
        (ID == clang::diag::err_pp_file_not_found ||
         ID == clang::diag::err_pp_file_not_found_angled_include_not_fatal ||
         ID == clang::diag::err_pp_file_not_found_typo_not_fatal))
      Missing = Info.getArgStdStr(0);
    Printer.HandleDiagnostic(L, Info);
  }
  std::string Missing; ///< The header, as the #include names it.

private:
  clang::TextDiagnosticPrinter Printer;
};

} // namespace

/// The installed Debian package that holds \p Path, as `dpkg -S` finds it
/// (the file lists in /var/lib/dpkg/info): "NAME" or "NAME:ARCH"; "" when
/// none does. Read only on the error path.
static std::string owningPackage(StringRef Path) {
  std::error_code EC;
  std::string Needle = ("\n" + Path + "\n").str();
  for (sys::fs::directory_iterator It("/var/lib/dpkg/info", EC), End;
       It != End && !EC; It.increment(EC)) {
    StringRef File = It->path();
    if (!File.ends_with(".list"))
      continue;
    ErrorOr<std::unique_ptr<MemoryBuffer>> B = MemoryBuffer::getFile(File);
    if (!B)
      continue;
    std::string Text = "\n" + (*B)->getBuffer().str();
    if (Text.find(Needle) != std::string::npos)
      return sys::path::stem(File).str();
  }
  return "";
}

/// Whether dpkg installs packages of Debian architecture \p Arch here (the
/// native one, or a foreign one `dpkg --add-architecture` added).
static bool dpkgHasArch(StringRef Arch, const Triple &Host) {
  if (Arch == debianArch(Host))
    return true;
  ErrorOr<std::unique_ptr<MemoryBuffer>> B =
      MemoryBuffer::getFile("/var/lib/dpkg/arch");
  if (!B)
    return false;
  SmallVector<StringRef, 8> Lines;
  (*B)->getBuffer().split(Lines, '\n', -1, false);
  return llvm::is_contained(Lines, Arch);
}

/// The error for a compile of member \p T that failed because clang found
/// no \p Header: names the member and, when this host has the header for
/// its own triple from a Debian package, the same package for T's
/// architecture. \p HostProbe searches the host's headers (null when T is
/// the host's own architecture).
static Error missingHeader(const CompileTarget &T, StringRef Header,
                           const HeaderProbe *HostProbe) {
  std::string Where =
      T.Sysroot.empty() ? "" : " under sysroot '" + T.Sysroot + "'";
  std::string Msg = "the " + T.Triple + " member: '" + Header.str() +
                    "' not found" + Where;
  Triple Host(sys::getProcessTriple());
  std::string HostPath = HostProbe ? HostProbe->path(Header) : "";
  if (HostPath.empty())
    return createStringError("%s", Msg.c_str());
  std::string Own = owningPackage(HostPath);
  if (Own.empty())
    return createStringError("%s (this host has it, at %s, from no Debian "
                             "package)",
                             Msg.c_str(), HostPath.c_str());
  StringRef Arch = debianArch(Triple(T.Triple));
  std::string Pkg = (StringRef(Own).split(':').first + ":" + Arch).str();
  std::string How = dpkgHasArch(Arch, Host)
                        ? ""
                        : ", after `dpkg --add-architecture " + Arch.str() +
                              "`";
  return createStringError("%s (install %s%s; this host's is %s, from %s)",
                           Msg.c_str(), Pkg.c_str(), How.c_str(),
                           HostPath.c_str(), Own.c_str());
}

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

/// The clang path given to clang's driver, which takes the resource headers
/// from <its dir>/../lib/clang/N/include. A relocated tc-cc (the bundle,
/// scripts/bundle.sh) carries them in <prefix>/lib/clang/N beside the
/// <prefix>/include holding tc/ifunc.h: then <prefix>/bin/clang, a path that
/// need not exist; else the clang of the LLVM tc was built with.
static std::string clangPath(StringRef TCIncludeDir) {
  SmallString<256> Prefix(sys::path::parent_path(TCIncludeDir));
  SmallString<256> Probe(Prefix);
  sys::path::append(Probe, "lib", "clang", CLANG_VERSION_MAJOR_STRING);
  sys::path::append(Probe, "include", "stddef.h");
  if (!sys::fs::exists(Probe))
    return TC_CLANG_EXECUTABLE;
  sys::path::append(Prefix, "bin", "clang");
  return std::string(Prefix);
}

ClangSession::ClangSession(const DriverOptions &Opts, llvm::LLVMContext &Ctx,
                           std::string TCIncludeDir)
    : Opts(Opts), Ctx(Ctx), TCIncludeDir(std::move(TCIncludeDir)),
      ClangPath(clangPath(this->TCIncludeDir)) {}

namespace {

/// What one compile's driver run produced: the cc1 job and the invocation
/// made from it. The compilation owns the job's argument strings.
struct Job {
  std::unique_ptr<clang::driver::Compilation> C;
  const clang::driver::Command *Cmd = nullptr;
  std::shared_ptr<clang::CompilerInvocation> CI;
};

} // namespace

/// A GPU compile gets the target's architecture as -march (clang's nvptx
/// driver rejects -mcpu) and none of the CPU flags meant for the CPU
/// targets.
static bool isCPUFlag(StringRef A) {
  return A.starts_with("-march=") || A.starts_with("-mcpu=") ||
         A.starts_with("-mtune=");
}

/// Runs clang's driver for \p Input on \p T and makes the invocation of its
/// one cc1 job (not run). With \p Print, prints the job as clang -### does.
/// \p ForHeaders: the job only gives a GPU compile the host's headers,
/// so the CPU flags meant for the CPU targets stay out of it too.
static Expected<Job> makeJob(ClangSession &S, const CompileTarget &T,
                             StringRef Input, clang::DiagnosticsEngine &Diags,
                             bool Print, bool ForHeaders = false) {
  const DriverOptions &O = S.Opts;
  bool GPU = Triple(T.Triple).isNVPTX();
  const std::string &ClangPath = S.ClangPath;
  clang::driver::Driver D(ClangPath, T.Triple, Diags, "tc-cc");
  D.setCheckInputsExist(true);
  std::vector<std::string> Storage = {ClangPath, "--target=" + T.Triple};
  // tc-cc's -mcpu is per target; clang's x86 and nvptx drivers take the CPU
  // as -march (they reject -mcpu there), the others as -mcpu.
  if (!T.CPU.empty())
    Storage.push_back(
        (Triple(T.Triple).isX86() || GPU ? "-march=" : "-mcpu=") + T.CPU);
  // No CUDA installation: nothing from it is linked (docs/tc-cc.md, libm).
  if (GPU)
    Storage.push_back("-nogpulib");
  if (!T.Sysroot.empty())
    Storage.push_back("--sysroot=" + T.Sysroot);
  Storage.push_back("-I" + S.TCIncludeDir);
  // Line tables let ABI diagnostics name file:line; the passes strip them
  // again unless -g.
  if (!O.KeepDebugInfo)
    Storage.push_back("-gline-tables-only");
  for (const std::string &A : O.ClangArgs)
    if (!(GPU || ForHeaders) || !isCPUFlag(A))
      Storage.push_back(A);
  // -v reaches cc1, which then prints its header search list.
  if (O.Verbose)
    Storage.push_back("-v");
  Storage.insert(Storage.end(), {"-c", "-emit-llvm", "-o", "-", Input.str()});
  std::vector<const char *> Argv;
  for (const std::string &Arg : Storage)
    Argv.push_back(Arg.c_str());

  Job J;
  J.C.reset(D.BuildCompilation(Argv));
  // Some driver errors (a missing input, an unknown -x language) leave the
  // compilation without an error mark: they are in the engine.
  if (!J.C || J.C->containsError() || Diags.hasErrorOccurred())
    return make_error<DiagnosedError>();
  const clang::driver::JobList &Jobs = J.C->getJobs();
  if (Jobs.size() != 1 || !isa<clang::driver::Command>(*Jobs.begin()))
    return createStringError("'%s': expected one compile job, the driver "
                             "made %zu",
                             Input.str().c_str(), Jobs.size());
  J.Cmd = &cast<clang::driver::Command>(*Jobs.begin());
  // -x assembler (or a language whose job is not cc1) gives no LLVM IR.
  if (J.Cmd->getArguments().empty() ||
      StringRef(J.Cmd->getArguments().front()) != "-cc1")
    return createStringError(
        "'%s': clang's job for it is '%s', not a "
        "compile to LLVM IR",
        Input.str().c_str(),
        J.Cmd->getArguments().empty() ? "empty"
                                      : J.Cmd->getArguments().front());
  if (Print)
    J.Cmd->Print(errs(), "\n", /*Quote=*/true);
  if (Print && O.PrintCommands)
    return std::move(J);

  // The job's arguments start with -cc1, which CreateFromArgs must not see.
  const opt::ArgStringList &CC1 = J.Cmd->getArguments();
  J.CI = std::make_shared<clang::CompilerInvocation>();
  if (!clang::CompilerInvocation::CreateFromArgs(
          *J.CI, ArrayRef<const char *>(CC1).drop_front(), Diags,
          S.ClangPath.c_str()))
    return make_error<DiagnosedError>();
  return std::move(J);
}

/// Gives the GPU compile \p CI the host compile's headers, as CUDA and
/// OpenMP offloading compile device code: the host job's whole header
/// search (the user's -I, clang's resource headers, the host C library's
/// directories, sysroot), the host's type layout and, as clang's
/// -aux-triple does, the host target's own macros (__x86_64__ or
/// __aarch64__, __linux__, ...), which the C library's headers test to pick
/// their layout. The GPU target's predefined macros (__NVPTX__, __PTX__)
/// stay; an aux macro the GPU target also defines is left out, and so are
/// the host's __float128 macros.
static void adoptHostHeaders(clang::CompilerInvocation &CI,
                             clang::CompilerInvocation &Host,
                             clang::DiagnosticsEngine &Diags) {
  CI.getHeaderSearchOpts() = Host.getHeaderSearchOpts();
  auto Defines = [&](clang::TargetOptions &TO) {
    std::string Text;
    raw_string_ostream OS(Text);
    clang::MacroBuilder B(OS);
    IntrusiveRefCntPtr<clang::TargetInfo> TI(
        clang::TargetInfo::CreateTargetInfo(Diags, TO));
    if (TI)
      TI->getTargetDefines(CI.getLangOpts(), B);
    // "#define NAME VALUE" lines, as -D takes them: NAME=VALUE.
    std::vector<std::pair<std::string, std::string>> Out;
    SmallVector<StringRef, 64> Lines;
    StringRef(Text).split(Lines, '\n', -1, false);
    for (StringRef L : Lines) {
      if (!L.consume_front("#define "))
        continue;
      auto [Name, Value] = L.split(' ');
      Out.push_back({Name.str(), Value.str()});
    }
    return Out;
  };
  // As -aux-triple does: clang's nvptx target then takes the host's type
  // sizes, alignments and atomic widths (wchar_t, int64_t's type,
  // __GCC_ATOMIC_*_LOCK_FREE), so host and GPU agree on every layout.
  CI.getTargetOpts().HostTriple = Host.getTargetOpts().Triple;
  clang::TargetOptions GPUTO = CI.getTargetOpts();
  clang::TargetOptions HostTO = Host.getTargetOpts();
  std::set<std::string> Own;
  for (auto &[Name, Value] : Defines(GPUTO))
    Own.insert(Name);
  // The GPU has no __float128: headers must not think it does.
  Own.insert("__FLOAT128__");
  Own.insert("__SIZEOF_FLOAT128__");
  clang::PreprocessorOptions &PP = CI.getPreprocessorOpts();
  for (auto &[Name, Value] : Defines(HostTO))
    if (!Own.count(Name))
      PP.addMacroDef(Name + "=" + Value);
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

  bool GPU = Triple(T.Triple).isNVPTX();
  bool Print = O.PrintCommands || O.Verbose;
  // A GPU job is printed once it has the host's headers, below.
  Expected<Job> J = makeJob(S, T, Input, Diags, Print && !GPU);
  if (!J)
    return J.takeError();
  if (!J->CI) // -###
    return nullptr;
  std::shared_ptr<clang::CompilerInvocation> CI = J->CI;
  // The host this tc-cc runs on, with the sysroot that applies to every
  // target: its job's header search gives a GPU compile its headers, and
  // finds a header another member's compile lacked. Its driver warnings
  // would repeat this job's.
  CompileTarget HostT{Triple::normalize(sys::getProcessTriple()), "",
                      O.DefaultSysroot};
  auto HostJob = [&]() {
    clang::DiagnosticsEngine HostDiags(Diags.getDiagnosticIDs(), DiagOpts,
                                       Printer, /*ShouldOwnClient=*/false);
    HostDiags.setIgnoreAllWarnings(true);
    return makeJob(S, HostT, Input, HostDiags, /*Print=*/false,
                   /*ForHeaders=*/true);
  };
  if (GPU) {
    Expected<Job> H = HostJob();
    if (!H)
      return H.takeError();
    if (Error E = checkLibraryHeaders(*H->CI, HostT))
      return std::move(E);
    adoptHostHeaders(*CI, *H->CI, Diags);
    if (Print) {
      // The cc1 command this compile runs, host headers and macros included.
      errs() << " \"" << S.ClangPath << "\"";
      for (const std::string &A : CI->getCC1CommandLine()) {
        errs() << " ";
        sys::printArg(errs(), A, /*Quote=*/true);
      }
      errs() << "\n";
      if (O.PrintCommands)
        return nullptr;
    }
  } else if (Error E = checkLibraryHeaders(*CI, T)) {
    return std::move(E);
  }
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
  auto *Noter = new MissingHeaderNoter(Clang.getDiagnosticOpts());
  Clang.createDiagnostics(Noter, /*ShouldOwnClient=*/true);
  auto Headers = std::make_shared<HeaderCollector>(O.DepfileSystemHeaders);
  Clang.addDependencyCollector(Headers);
  clang::EmitLLVMOnlyAction Act(&S.Ctx);
  if (!Clang.ExecuteAction(Act)) {
    if (Noter->Missing.empty())
      return make_error<DiagnosedError>();
    // Clang's "file not found" names no target: say which member failed,
    // and, when the host has that header from a package, which package
    // would give this member's architecture its own (a header such as
    // openssl/opensslconf.h is per architecture).
    Triple TT(T.Triple);
    if (GPU || TT.getArch() == Triple(sys::getProcessTriple()).getArch())
      return missingHeader(T, Noter->Missing, nullptr);
    Expected<Job> H = HostJob();
    if (!H) {
      consumeError(H.takeError());
      return missingHeader(T, Noter->Missing, nullptr);
    }
    HeaderProbe HostProbe(*H->CI);
    return missingHeader(T, Noter->Missing, &HostProbe);
  }
  for (const std::string &Dep : Headers->getDependencies())
    S.Dependencies.insert(Dep);
  std::unique_ptr<Module> M = Act.takeModule();
  if (!M)
    return make_error<DiagnosedError>();
  return std::move(M);
}

} // namespace tc
