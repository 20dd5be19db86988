//===- tc-ar.cpp - Create, inspect and verify tc fat archives -------------===//
//
// A thin command-line front end to the archive library (tc/Archive.h): it
// parses arguments, reads and writes files and prints; every rule about the
// format lives in the library. Errors are printed once, here, as
// `tc-ar: error: '<file>': <what>`.
//
//===----------------------------------------------------------------------===//

#include "tc/Archive.h"
#include "tc/Version.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

#include <optional>

using namespace llvm;

static const char *const Usage = R"(OVERVIEW: tc fat-archive tool

USAGE: tc-ar <command> [options] <args>

COMMANDS:
  create OUT --name NAME [--deps FILE]
         [--compress=none|zstd|zstd-dict|auto]
         [--role=target|source] [--cpu=CPU] [--features=F] [--target=T]
         INPUT...
      Pack bitcode (.bc), LLVM assembly (.ll) or relocatable objects (.o)
      into OUT. Each input's triple is read from the input; --target may
      complete it (an ELF object names no OS) but not contradict it.
      --role, --cpu, --features and --target apply to the inputs after them.
      zstd-dict compresses with the built-in dictionary (tc-ar --version
      names it); auto does so where that makes a member smaller.
  list A
      One line per member: triple, cpu, kind, role, size.
  extract A [--target=TRIPLE] [--cpu=CPU] [--role=R] [-o OUT]
      With --target, write the member that host would run; otherwise write
      every member to NAME.TRIPLE[.CPU][.source].bc|.o. -o needs one member.
  thin A --target=TRIPLE [--cpu=CPU] [--kind=bitcode|object] -o OUT
      Write what a sender ships to that host: the member it would run, the
      others listed by digest only; the hash is unchanged.
  dump A
      Every header field and string, with offsets, and the format version.
  verify A [--trust KEY.pub]...
      Check structure, hash and that each image matches its triple and
      symbol list, and that every signature verifies; with --trust, that
      one is by a listed key. Exit status 1 on any defect.
  keygen KEY
      Write a new Ed25519 secret key to KEY (mode 0600) and its public key
      to KEY.pub. Neither may exist yet.
  sign A --key KEY [-o OUT]
      Add KEY's signature over A's content hash (replacing an older one by
      the same key); A is rewritten unless -o is given.

OPTIONS:
  --help       Print this help
  --version    Print the version
)";

namespace {
/// An error to report: the file it concerns (may be empty) and the message.
struct ToolError {
  std::string File;
  std::string Message;
};

/// Command-line arguments after the command word, consumed in order.
class Args {
  std::vector<StringRef> Items;
  size_t Next = 0;

public:
  explicit Args(std::vector<StringRef> Items) : Items(std::move(Items)) {}
  bool done() const { return Next == Items.size(); }
  StringRef peek() const { return Items[Next]; }
  StringRef take() { return Items[Next++]; }

  /// Set when an option lacked its value; the caller reports it.
  std::string Failure;

  /// Consumes `--opt=V` or `--opt V` (also `-o V`) and returns V, or returns
  /// std::nullopt and consumes nothing if the next argument is not \p Opt.
  std::optional<StringRef> option(StringRef Opt) {
    if (done())
      return std::nullopt;
    StringRef A = peek();
    if (!A.consume_front(Opt))
      return std::nullopt;
    if (A.consume_front("=")) {
      ++Next;
      return A;
    }
    if (!A.empty())
      return std::nullopt;
    ++Next;
    if (done()) {
      Failure = "option '" + Opt.str() + "' needs a value";
      return std::nullopt;
    }
    return take();
  }
};

int report(const ToolError &E) {
  WithColor::error(errs(), "tc-ar");
  if (!E.File.empty())
    errs() << "'" << E.File << "': ";
  errs() << E.Message << "\n";
  return 1;
}

ToolError fileError(StringRef File, Error E) {
  return {File.str(), toString(std::move(E))};
}

Expected<std::unique_ptr<MemoryBuffer>> readFile(StringRef Path) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> B =
      MemoryBuffer::getFileOrSTDIN(Path, /*IsText=*/false,
                                   /*RequiresNullTerminator=*/false);
  if (!B)
    return createStringError(B.getError(), B.getError().message());
  return std::move(*B);
}

/// Reads and parses archive \p Path; on failure fills \p Err.
std::optional<tc::Archive> openArchive(StringRef Path, ToolError &Err,
                                       bool VerifyHash = true) {
  Expected<std::unique_ptr<MemoryBuffer>> B = readFile(Path);
  if (!B) {
    Err = fileError(Path, B.takeError());
    return std::nullopt;
  }
  tc::ReadOptions Opts;
  Opts.VerifyHash = VerifyHash;
  Expected<tc::Archive> A = tc::readArchive(**B, Opts);
  if (!A) {
    Err = fileError(Path, A.takeError());
    return std::nullopt;
  }
  return std::move(*A);
}

/// The archive argument of list, dump and verify: one path, no options.
std::optional<ToolError> oneArchive(Args &A, StringRef Cmd, std::string &Path) {
  if (A.done())
    return ToolError{"", (Cmd + ": missing archive").str()};
  StringRef First = A.take();
  if (First.starts_with("-") && First != "-")
    return ToolError{"", (Cmd + ": unknown option '" + First + "'").str()};
  if (!A.done())
    return ToolError{"",
                     (Cmd + ": unexpected argument '" + A.peek() + "'").str()};
  Path = First.str();
  return std::nullopt;
}

/// Writes \p Bytes to \p Path (atomically, through a temporary file); the
/// error names the path.
Error writeFile(StringRef Path, StringRef Bytes) {
  return writeToOutput(Path, [&](raw_ostream &OS) {
    OS << Bytes;
    return Error::success();
  });
}

int cmdCreate(Args &A) {
  if (A.done() || A.peek().starts_with("-"))
    return report({"", "create: missing output file"});
  std::string Out = A.take().str();
  tc::Archive Ar;
  std::optional<std::string> DepsFile;
  std::optional<tc::Compression> Compress = tc::Compression::None;
  tc::Role CurRole = tc::Role::Target;
  std::string CurCPU, CurFeatures, CurTarget;
  std::vector<std::string> Inputs;
  bool HaveName = false;

  while (!A.done()) {
    StringRef Arg = A.peek();
    if (!Arg.starts_with("-") || Arg == "-") {
      std::string Path = A.take().str();
      Expected<std::unique_ptr<MemoryBuffer>> B = readFile(Path);
      if (!B)
        return report(fileError(Path, B.takeError()));
      Expected<tc::InputImage> In = tc::loadInputImage(**B);
      if (!In)
        return report(fileError(Path, In.takeError()));
      if (!CurTarget.empty()) {
        if (!tc::triplesCompatible(In->Triple, CurTarget))
          return report({Path, "input is for " + In->Triple + ", not " +
                                   CurTarget});
        In->Triple = CurTarget;
      }
      tc::Member M;
      M.Triple = In->Triple;
      M.Kind = In->Kind;
      M.Image = std::move(In->Image);
      M.Symbols = std::move(In->Symbols);
      M.TheRole = CurRole;
      M.CPU = CurCPU;
      M.Features = CurFeatures;
      Ar.Members.push_back(std::move(M));
      Inputs.push_back(Path);
      continue;
    }
    std::optional<StringRef> V;
    if ((V = A.option("--name"))) {
      Ar.Name = V->str();
      HaveName = true;
    } else if ((V = A.option("--deps"))) {
      DepsFile = V->str();
    } else if ((V = A.option("--compress"))) {
      if (*V == "auto") {
        Compress.reset();
      } else {
        Expected<tc::Compression> C = tc::parseCompression(*V);
        if (!C) {
          consumeError(C.takeError());
          return report({"", "unknown compression '" + V->str() +
                                 "' (expected auto, none, zstd or zstd-dict)"});
        }
        Compress = *C;
      }
    } else if ((V = A.option("--role"))) {
      Expected<tc::Role> R = tc::parseRole(*V);
      if (!R)
        return report({"", toString(R.takeError())});
      CurRole = *R;
    } else if ((V = A.option("--cpu"))) {
      CurCPU = V->str();
    } else if ((V = A.option("--features"))) {
      CurFeatures = V->str();
    } else if ((V = A.option("--target"))) {
      CurTarget = llvm::Triple::normalize(*V);
    } else if (!A.Failure.empty()) {
      return report({"", A.Failure});
    } else {
      return report({"", "create: unknown option '" + Arg.str() + "'"});
    }
  }
  // Compression applies to every member, wherever the flag stood.
  for (tc::Member &M : Ar.Members)
    M.Compress = Compress ? *Compress : tc::cheapestCompression(M.Image);
  if (!HaveName)
    return report({"", "create: missing --name NAME"});
  if (Inputs.empty())
    return report({"", "create: no input files"});
  if (DepsFile) {
    Expected<std::unique_ptr<MemoryBuffer>> B = readFile(*DepsFile);
    if (!B)
      return report(fileError(*DepsFile, B.takeError()));
    Expected<std::vector<std::string>> D =
        tc::parseDepsList((*B)->getBuffer());
    if (!D)
      return report(fileError(*DepsFile, D.takeError()));
    Ar.Deps = std::move(*D);
  }
  Expected<SmallString<0>> Bytes = tc::writeArchive(Ar);
  if (!Bytes)
    return report(fileError(Out, Bytes.takeError()));
  if (Error E = writeFile(Out, *Bytes))
    return report({"", toString(std::move(E))});
  return 0;
}

int cmdList(Args &A) {
  std::string Path;
  if (std::optional<ToolError> E = oneArchive(A, "list", Path))
    return report(*E);
  ToolError Err;
  std::optional<tc::Archive> Ar = openArchive(Path, Err);
  if (!Ar)
    return report(Err);
  for (const tc::Member &M : Ar->Members) {
    outs() << M.Triple << " " << (M.CPU.empty() ? "generic" : M.CPU) << " "
           << tc::imageKindName(M.Kind) << " " << tc::roleName(M.TheRole)
           << " " << M.Image.size();
    if (M.Compress != tc::Compression::None)
      outs() << " (" << tc::compressionName(M.Compress) << " "
             << M.Layout.ImageSize << ")";
    outs() << "\n";
  }
  for (const tc::MemberDigest &D : Ar->Omitted)
    outs() << "omitted " << tc::toHex(D) << "\n";
  return 0;
}

std::string memberFileName(const tc::Archive &Ar, const tc::Member &M) {
  std::string N = Ar.Name + "." + M.Triple;
  if (!M.CPU.empty())
    N += "." + M.CPU;
  if (M.TheRole == tc::Role::Source)
    N += ".source";
  return N + (M.Kind == tc::ImageKind::Bitcode ? ".bc" : ".o");
}

int cmdExtract(Args &A) {
  if (A.done())
    return report({"", "extract: missing archive"});
  std::string Path = A.take().str();
  std::optional<std::string> Target, Output;
  std::string CPU;
  tc::Role R = tc::Role::Target;
  bool RoleGiven = false;
  while (!A.done()) {
    StringRef Arg = A.peek();
    std::optional<StringRef> V;
    if ((V = A.option("--target"))) {
      Target = V->str();
    } else if ((V = A.option("--cpu"))) {
      CPU = V->str();
    } else if ((V = A.option("--role"))) {
      Expected<tc::Role> RR = tc::parseRole(*V);
      if (!RR)
        return report({"", toString(RR.takeError())});
      R = *RR;
      RoleGiven = true;
    } else if ((V = A.option("-o"))) {
      Output = V->str();
    } else if (!A.Failure.empty()) {
      return report({"", A.Failure});
    } else {
      return report({"", "extract: unexpected argument '" + Arg.str() + "'"});
    }
  }
  ToolError Err;
  std::optional<tc::Archive> Ar = openArchive(Path, Err);
  if (!Ar)
    return report(Err);

  std::vector<const tc::Member *> Chosen;
  if (Target) {
    Expected<const tc::Member *> M = tc::selectMember(*Ar, *Target, CPU, R);
    if (!M)
      return report(fileError(Path, M.takeError()));
    Chosen.push_back(*M);
  } else {
    for (const tc::Member &M : Ar->Members)
      if (!RoleGiven || M.TheRole == R)
        Chosen.push_back(&M);
  }
  if (Output && Chosen.size() != 1)
    return report(fileError(
        Path, createStringError(formatv("-o needs exactly one member, {0} "
                                        "selected (use --target)",
                                        Chosen.size())
                                    .str())));
  for (const tc::Member *M : Chosen) {
    std::string Out = Output ? *Output : memberFileName(*Ar, *M);
    if (Error E = writeFile(Out, M->Image))
      return report({"", toString(std::move(E))});
  }
  return 0;
}

int cmdThin(Args &A) {
  if (A.done())
    return report({"", "thin: missing archive"});
  std::string Path = A.take().str();
  std::optional<std::string> Target, Output;
  std::optional<tc::ImageKind> Kind;
  std::string CPU;
  while (!A.done()) {
    StringRef Arg = A.peek();
    std::optional<StringRef> V;
    if ((V = A.option("--target"))) {
      Target = V->str();
    } else if ((V = A.option("--cpu"))) {
      CPU = V->str();
    } else if ((V = A.option("--kind"))) {
      if (*V == "bitcode")
        Kind = tc::ImageKind::Bitcode;
      else if (*V == "object")
        Kind = tc::ImageKind::Object;
      else
        return report({"", "thin: unknown kind '" + V->str() +
                               "' (expected bitcode or object)"});
    } else if ((V = A.option("-o"))) {
      Output = V->str();
    } else if (!A.Failure.empty()) {
      return report({"", A.Failure});
    } else {
      return report({"", "thin: unexpected argument '" + Arg.str() + "'"});
    }
  }
  if (!Target || !Output)
    return report({"", "thin: needs --target=TRIPLE and -o OUT"});
  ToolError Err;
  std::optional<tc::Archive> Ar = openArchive(Path, Err);
  if (!Ar)
    return report(Err);
  Expected<tc::Archive> Thin = tc::archiveForHost(*Ar, *Target, CPU, Kind);
  if (!Thin)
    return report(fileError(Path, Thin.takeError()));
  Expected<SmallString<0>> Bytes = tc::writeArchive(*Thin);
  if (!Bytes)
    return report(fileError(Path, Bytes.takeError()));
  if (Error E = writeFile(*Output, *Bytes))
    return report({"", toString(std::move(E))});
  return 0;
}

void dumpLayout(raw_ostream &OS, const tc::BinaryLayout &L) {
  OS << formatv("  header: offset {0} size {1} version {2}\n", L.Offset,
                L.Size, L.Version);
  OS << formatv("  entry: offset {0} size {1} image-kind {2} offload-kind {3} "
                "flags {4:x}\n",
                L.EntryOffset, L.EntrySize, L.ImageKind, L.OffloadKind,
                L.Flags);
  OS << formatv("  strings: offset {0} count {1}\n", L.StringOffset,
                L.NumStrings);
  OS << formatv("  image: offset {0} size {1}\n", L.ImageOffset, L.ImageSize);
  for (const auto &KV : L.Strings) {
    OS << "  string " << KV.first << " = \"";
    printEscapedString(KV.second, OS);
    OS << "\"\n";
  }
}

int cmdDump(Args &A) {
  std::string Path;
  if (std::optional<ToolError> E = oneArchive(A, "dump", Path))
    return report(*E);
  ToolError Err;
  std::optional<tc::Archive> Ar = openArchive(Path, Err, /*VerifyHash=*/false);
  if (!Ar)
    return report(Err);
  raw_ostream &OS = outs();
  uint64_t Total = Ar->Members.empty() ? Ar->ManifestLayout.Size
                                       : Ar->Members.back().Layout.Offset +
                                             Ar->Members.back().Layout.Size;
  OS << "archive: " << Path << " (" << Total << " bytes, "
     << Ar->Members.size() << " members, format " << Ar->FormatVersion
     << ")\n";
  OS << "name: " << Ar->Name << "\n";
  tc::ArchiveHash Actual = tc::computeHash(*Ar);
  OS << "hash: " << tc::toHex(Ar->Hash)
     << (Actual == Ar->Hash ? " (matches contents)"
                            : " (MISMATCH: contents hash to " +
                                  tc::toHex(Actual) + ")")
     << "\n";
  for (const tc::ArchiveSignature &S : Ar->Signatures)
    OS << "signature: ed25519 key " << tc::keyId(S.Key)
       << (tc::signatureVerifies(S, tc::signedHash(*Ar)) ? " (verifies)"
                                                         : " (DOES NOT VERIFY)")
       << "\n";
  OS << "deps: " << Ar->Deps.size() << "\n";
  for (const std::string &D : Ar->Deps)
    OS << "  dep " << D << "\n";
  OS << "omitted: " << Ar->Omitted.size() << "\n";
  for (const tc::MemberDigest &D : Ar->Omitted)
    OS << "  digest " << tc::toHex(D) << "\n";
  OS << "manifest:\n";
  dumpLayout(OS, Ar->ManifestLayout);
  for (size_t I = 0; I < Ar->Members.size(); ++I) {
    const tc::Member &M = Ar->Members[I];
    OS << "member " << I << ": " << M.Triple << " cpu="
       << (M.CPU.empty() ? "generic" : M.CPU) << " features="
       << (M.Features.empty() ? "none" : M.Features) << " kind="
       << tc::imageKindName(M.Kind) << " role=" << tc::roleName(M.TheRole)
       << " compression=" << tc::compressionName(M.Compress);
    if (M.Compress == tc::Compression::ZstdDict)
      OS << " dict=" << M.DictId;
    OS << " size=" << M.Image.size();
    if (M.Compress != tc::Compression::None)
      OS << " stored=" << M.Layout.ImageSize;
    OS << "\n";
    OS << "  digest: " << tc::toHex(tc::memberDigest(M)) << "\n";
    dumpLayout(OS, M.Layout);
    OS << "  symbols: " << M.Symbols.size() << "\n";
    for (const std::string &S : M.Symbols)
      OS << "    symbol " << S << "\n";
  }
  return 0;
}

/// Reads a key file; the error names it.
template <typename T>
std::optional<T> readKey(StringRef Path,
                         Expected<T> (*Parse)(StringRef), ToolError &Err) {
  Expected<std::unique_ptr<MemoryBuffer>> B = readFile(Path);
  if (!B) {
    Err = fileError(Path, B.takeError());
    return std::nullopt;
  }
  Expected<T> K = Parse((*B)->getBuffer());
  if (!K) {
    Err = fileError(Path, K.takeError());
    return std::nullopt;
  }
  return std::move(*K);
}

int cmdVerify(Args &A) {
  if (A.done())
    return report({"", "verify: missing archive"});
  std::string Path;
  std::vector<tc::PublicKey> Trusted;
  while (!A.done()) {
    StringRef Arg = A.peek();
    std::optional<StringRef> V;
    if ((V = A.option("--trust"))) {
      ToolError Err;
      std::optional<tc::PublicKey> K =
          readKey<tc::PublicKey>(*V, tc::parsePublicKey, Err);
      if (!K)
        return report(Err);
      Trusted.push_back(*K);
    } else if (!A.Failure.empty()) {
      return report({"", A.Failure});
    } else if (Arg.starts_with("-") && Arg != "-") {
      return report({"", "verify: unknown option '" + Arg.str() + "'"});
    } else if (!Path.empty()) {
      return report({"", "verify: unexpected argument '" + Arg.str() + "'"});
    } else {
      Path = A.take().str();
    }
  }
  if (Path.empty())
    return report({"", "verify: missing archive"});
  ToolError Err;
  std::optional<tc::Archive> Ar = openArchive(Path, Err);
  if (!Ar)
    return report(Err);
  if (Error E = tc::verifyImages(*Ar))
    return report(fileError(Path, std::move(E)));
  // Every signature must verify; with --trust, one must be by a listed key.
  if (!Ar->Signatures.empty())
    if (Error E = tc::checkSignatures(*Ar, {}))
      return report(fileError(Path, std::move(E)));
  if (!Trusted.empty())
    if (Error E = tc::checkSignatures(*Ar, Trusted))
      return report(fileError(Path, std::move(E)));
  outs() << Path << ": OK: " << Ar->Members.size() << " members, hash "
         << tc::toHex(Ar->Hash);
  for (const tc::ArchiveSignature &S : Ar->Signatures)
    outs() << ", signed by " << tc::keyId(S.Key);
  outs() << "\n";
  return 0;
}

int cmdKeygen(Args &A) {
  if (A.done())
    return report({"", "keygen: missing key file name"});
  std::string Path = A.take().str();
  if (StringRef(Path).starts_with("-"))
    return report({"", "keygen: unknown option '" + Path + "'"});
  if (!A.done())
    return report({"", "keygen: unexpected argument '" + A.peek().str() + "'"});
  std::string PubPath = Path + ".pub";
  for (const std::string &P : {Path, PubPath})
    if (sys::fs::exists(P))
      return report({P, "already exists (keygen never overwrites a key)"});
  Expected<tc::SecretKey> K = tc::generateKey();
  if (!K)
    return report({"", toString(K.takeError())});
  // The secret key is created 0600 and only if absent.
  int FD;
  if (std::error_code EC = sys::fs::openFileForWrite(
          Path, FD, sys::fs::CD_CreateNew, sys::fs::OF_None, 0600))
    return report({Path, EC.message()});
  {
    raw_fd_ostream OS(FD, /*shouldClose=*/true);
    OS << tc::formatSecretKey(*K);
    OS.close();
    if (OS.has_error()) {
      std::string Msg = OS.error().message();
      OS.clear_error();
      sys::fs::remove(Path);
      return report({Path, Msg});
    }
  }
  if (Error E = writeFile(PubPath, tc::formatPublicKey(K->Public))) {
    sys::fs::remove(Path);
    return report({"", toString(std::move(E))});
  }
  outs() << "key " << tc::keyId(K->Public) << ": secret key " << Path
         << ", public key " << PubPath << "\n";
  return 0;
}

int cmdSign(Args &A) {
  if (A.done() || A.peek().starts_with("-"))
    return report({"", "sign: missing archive"});
  std::string Path = A.take().str();
  std::optional<std::string> KeyPath, Output;
  while (!A.done()) {
    StringRef Arg = A.peek();
    std::optional<StringRef> V;
    if ((V = A.option("--key")))
      KeyPath = V->str();
    else if ((V = A.option("-o")))
      Output = V->str();
    else if (!A.Failure.empty())
      return report({"", A.Failure});
    else
      return report({"", "sign: unexpected argument '" + Arg.str() + "'"});
  }
  if (!KeyPath)
    return report({"", "sign: missing --key KEY"});
  ToolError Err;
  std::optional<tc::SecretKey> K =
      readKey<tc::SecretKey>(*KeyPath, tc::parseSecretKey, Err);
  if (!K)
    return report(Err);
  std::optional<tc::Archive> Ar = openArchive(Path, Err);
  if (!Ar)
    return report(Err);
  if (Error E = tc::signArchive(*Ar, *K))
    return report(fileError(*KeyPath, std::move(E)));
  Expected<SmallString<0>> Bytes = tc::writeArchive(*Ar);
  if (!Bytes)
    return report(fileError(Path, Bytes.takeError()));
  if (Error E = writeFile(Output ? *Output : Path, *Bytes))
    return report({"", toString(std::move(E))});
  return 0;
}
} // namespace

int main(int argc, char **argv) {
  std::vector<StringRef> Items(argv + 1, argv + argc);
  if (Items.empty()) {
    report({"", "no command given (try --help)"});
    return 1;
  }
  StringRef Cmd = Items.front();
  if (Cmd == "--help" || Cmd == "-h" || Cmd == "help") {
    outs() << Usage;
    return 0;
  }
  if (Cmd == "--version") {
    outs() << "tc-ar (tc) " << TC_VERSION_STRING << " (LLVM "
           << LLVM_VERSION_STRING << ", archive format " << tc::ArchiveVersion
           << ", reads " << tc::OldestArchiveVersion << "-" << tc::ArchiveVersion
           << ")\nzstd dictionary " << tc::builtinDictionaryId() << " ("
           << tc::builtinDictionarySize() << " bytes)\n";
    return 0;
  }
  Args A(std::vector<StringRef>(Items.begin() + 1, Items.end()));
  for (StringRef I : Items)
    if (I == "--help") {
      outs() << Usage;
      return 0;
    }
  if (Cmd == "create" || Cmd == "c")
    return cmdCreate(A);
  if (Cmd == "list" || Cmd == "t")
    return cmdList(A);
  if (Cmd == "extract" || Cmd == "x")
    return cmdExtract(A);
  if (Cmd == "thin")
    return cmdThin(A);
  if (Cmd == "dump")
    return cmdDump(A);
  if (Cmd == "verify")
    return cmdVerify(A);
  if (Cmd == "keygen")
    return cmdKeygen(A);
  if (Cmd == "sign")
    return cmdSign(A);
  return report({"", "unknown command '" + Cmd.str() + "' (try --help)"});
}
