//===- Inputs.cpp - Turn tool inputs into archive members -----------------===//
//
// tc-ar reads each input's triple from the input itself, never from its file
// name: bitcode and assembly carry `target triple`, objects their ELF/Mach-O
// header. The external symbols an image needs are listed here too, so the
// runtime can check them before it runs anything.
//
//===----------------------------------------------------------------------===//

#include "tc/Archive.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/AsmParser/Parser.h"
#include "llvm/BinaryFormat/Magic.h"
#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Object/ObjectFile.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Triple.h"

#include <algorithm>

using namespace llvm;

namespace tc {

static std::vector<std::string> sortedUnique(std::vector<std::string> V) {
  std::sort(V.begin(), V.end());
  V.erase(std::unique(V.begin(), V.end()), V.end());
  return V;
}

static std::vector<std::string> moduleExternals(const Module &M) {
  std::vector<std::string> Out;
  for (const GlobalValue &GV : M.global_values()) {
    if (!GV.isDeclaration() || GV.hasLocalLinkage())
      continue;
    if (const auto *F = dyn_cast<Function>(&GV); F && F->isIntrinsic())
      continue;
    Out.push_back(GV.getName().str());
  }
  return sortedUnique(std::move(Out));
}

Expected<std::vector<std::string>> externalSymbols(ImageKind Kind,
                                                   StringRef Image) {
  MemoryBufferRef Ref(Image, "image");
  if (Kind == ImageKind::Bitcode) {
    LLVMContext Ctx;
    Expected<std::unique_ptr<Module>> M = parseBitcodeFile(Ref, Ctx);
    if (!M)
      return M.takeError();
    return moduleExternals(**M);
  }
  Expected<std::unique_ptr<object::ObjectFile>> Obj =
      object::ObjectFile::createObjectFile(Ref);
  if (!Obj)
    return Obj.takeError();
  std::vector<std::string> Out;
  for (const object::SymbolRef &S : (*Obj)->symbols()) {
    Expected<uint32_t> Flags = S.getFlags();
    if (!Flags)
      return Flags.takeError();
    if (!(*Flags & object::SymbolRef::SF_Undefined))
      continue;
    Expected<StringRef> Name = S.getName();
    if (!Name)
      return Name.takeError();
    if (!Name->empty())
      Out.push_back(Name->str());
  }
  return sortedUnique(std::move(Out));
}

static Expected<InputImage> fromBitcode(MemoryBufferRef Buffer) {
  InputImage In;
  In.Kind = ImageKind::Bitcode;
  Expected<std::string> T = getBitcodeTargetTriple(Buffer);
  if (!T)
    return T.takeError();
  In.Triple = *T;
  In.Image = Buffer.getBuffer().str();
  Expected<std::vector<std::string>> Syms =
      externalSymbols(ImageKind::Bitcode, In.Image);
  if (!Syms)
    return Syms.takeError();
  In.Symbols = std::move(*Syms);
  return std::move(In);
}

static Expected<InputImage> fromObject(MemoryBufferRef Buffer) {
  Expected<std::unique_ptr<object::ObjectFile>> Obj =
      object::ObjectFile::createObjectFile(Buffer);
  if (!Obj)
    return Obj.takeError();
  if (!(*Obj)->isRelocatableObject())
    return createStringError("not a relocatable object file (link inputs "
                             "with -c, not into an executable or library)");
  InputImage In;
  In.Kind = ImageKind::Object;
  In.Triple = (*Obj)->makeTriple().str();
  In.Image = Buffer.getBuffer().str();
  Expected<std::vector<std::string>> Syms =
      externalSymbols(ImageKind::Object, In.Image);
  if (!Syms)
    return Syms.takeError();
  In.Symbols = std::move(*Syms);
  return std::move(In);
}

static Expected<InputImage> fromAssembly(MemoryBufferRef Buffer) {
  LLVMContext Ctx;
  SMDiagnostic Diag;
  std::unique_ptr<Module> M = parseAssembly(Buffer, Diag, Ctx);
  if (!M)
    return createStringError("%d:%d: %s", Diag.getLineNo(),
                             Diag.getColumnNo() + 1,
                             Diag.getMessage().str().c_str());
  InputImage In;
  In.Kind = ImageKind::Bitcode;
  In.Triple = M->getTargetTriple().str();
  raw_string_ostream OS(In.Image);
  WriteBitcodeToFile(*M, OS);
  OS.flush();
  In.Symbols = moduleExternals(*M);
  return std::move(In);
}

Expected<InputImage> loadInputImage(MemoryBufferRef Buffer) {
  Expected<InputImage> In = [&]() -> Expected<InputImage> {
    switch (identify_magic(Buffer.getBuffer())) {
    case file_magic::bitcode:
      return fromBitcode(Buffer);
    case file_magic::elf_relocatable:
    case file_magic::elf_executable:
    case file_magic::elf_shared_object:
    case file_magic::macho_object:
    case file_magic::coff_object:
      return fromObject(Buffer);
    default:
      return fromAssembly(Buffer);
    }
  }();
  if (!In)
    return In.takeError();
  if (In->Triple.empty())
    return createStringError("input has no target triple");
  In->Triple = Triple::normalize(In->Triple);
  if (Triple(In->Triple).getArch() == Triple::UnknownArch)
    return createStringError("input's triple '%s' has an unknown architecture",
                             In->Triple.c_str());
  return In;
}

static Expected<std::string> imageTriple(const Member &M) {
  MemoryBufferRef Ref(M.Image, "image");
  if (M.Kind == ImageKind::Bitcode)
    return getBitcodeTargetTriple(Ref);
  Expected<std::unique_ptr<object::ObjectFile>> Obj =
      object::ObjectFile::createObjectFile(Ref);
  if (!Obj)
    return Obj.takeError();
  return (*Obj)->makeTriple().str();
}

Error verifyImages(const Archive &A) {
  for (size_t I = 0; I < A.Members.size(); ++I) {
    const Member &M = A.Members[I];
    auto Fail = [&](const Twine &Msg) {
      return createStringError("member " + Twine(I) + " (" + M.Triple +
                               "): " + Msg);
    };
    Expected<std::string> T = imageTriple(M);
    if (!T)
      return Fail("image does not parse: " + toString(T.takeError()));
    // An object's header may name less than its member (ELF has no OS).
    bool Matches = M.Kind == ImageKind::Bitcode
                       ? Triple::normalize(*T) == M.Triple
                       : triplesCompatible(*T, M.Triple);
    if (!Matches)
      return Fail("image is for '" + *T + "'");
    Expected<std::vector<std::string>> Syms = externalSymbols(M.Kind, M.Image);
    if (!Syms)
      return Fail("image does not parse: " + toString(Syms.takeError()));
    if (*Syms != M.Symbols)
      return Fail("symbol list does not match the image's undefined symbols (" +
                  join(*Syms, ", ") + ")");
  }
  return Error::success();
}

} // namespace tc
