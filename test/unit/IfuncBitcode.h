//===- IfuncBitcode.h - Ifunc archives from LLVM IR text, without gtest ---===//
//
// What IfuncIR.h's test helpers build on, for programs that are not
// GoogleTest tests (the sender fuzzer): IR text for this host assembled
// into archive members, and the IR of the small ifuncs the tests use.
//
//===----------------------------------------------------------------------===//
#ifndef TC_TEST_IFUNCBITCODE_H
#define TC_TEST_IFUNCBITCODE_H

#include "tc/Archive.h"

#include "llvm/AsmParser/Parser.h"
#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Host.h"

#include <string>

namespace tc::test {

/// Assembles \p IR for this host into a bitcode member of role \p R.
inline llvm::Expected<Member> assembleMember(const std::string &IR,
                                             Role R = Role::Target) {
  llvm::LLVMContext Ctx;
  llvm::SMDiagnostic Diag;
  std::string Text = "target triple = \"" + llvm::sys::getProcessTriple() +
                     "\"\n" + IR;
  std::unique_ptr<llvm::Module> M = llvm::parseAssemblyString(Text, Diag, Ctx);
  if (!M)
    return llvm::createStringError(Diag.getMessage().str());
  Member Mem;
  Mem.TheRole = R;
  Mem.Triple = llvm::Triple::normalize(llvm::sys::getProcessTriple());
  llvm::raw_string_ostream OS(Mem.Image);
  llvm::WriteBitcodeToFile(*M, OS);
  OS.flush();
  auto Syms = externalSymbols(ImageKind::Bitcode, Mem.Image);
  if (!Syms)
    return Syms.takeError();
  Mem.Symbols = *Syms;
  return std::move(Mem);
}

/// payload_bound/payload_init that copy the source args into the payload.
inline std::string copyingSourceIR(const std::string &Name) {
  return "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)\n"
         "define i64 @" + Name + "_payload_bound(ptr %a, i64 %n) {\n"
         "  ret i64 %n\n}\n"
         "define i32 @" + Name + "_payload_init(ptr %a, i64 %n, ptr %p, ptr %s) {\n"
         "  call void @llvm.memcpy.p0.p0.i64(ptr %p, ptr %a, i64 %n, i1 false)\n"
         "  store i64 %n, ptr %s\n  ret i32 0\n}\n";
}

/// An archive for this host: a target member from \p TargetIR and a source
/// member with copying payload functions.
inline llvm::Expected<std::string>
assembleArchive(const std::string &Name, const std::string &TargetIR,
                std::vector<std::string> Deps = {}) {
  Archive A;
  A.Name = Name;
  A.Deps = std::move(Deps);
  for (auto [IR, R] : {std::pair(TargetIR, Role::Target),
                       std::pair(copyingSourceIR(Name), Role::Source)}) {
    llvm::Expected<Member> M = assembleMember(IR, R);
    if (!M)
      return M.takeError();
    A.Members.push_back(std::move(*M));
  }
  auto Bytes = writeArchive(A);
  if (!Bytes)
    return Bytes.takeError();
  return Bytes->str().str();
}

/// NAME_main adding the payload's first 8 bytes (or \p Step) to *target_args.
inline std::string adderIR(const std::string &Name, int Step = 0) {
  std::string Add = Step ? "  %d = add i64 %v, " + std::to_string(Step) + "\n"
                         : "  %x = load i64, ptr %p\n  %d = add i64 %v, %x\n";
  return "define void @" + Name + "_main(ptr %p, i64 %n, ptr %t) {\n"
         "  %v = load i64, ptr %t\n" + Add +
         "  store i64 %d, ptr %t\n  ret void\n}\n";
}

} // namespace tc::test

#endif
