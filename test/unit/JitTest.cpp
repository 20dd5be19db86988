//===- JitTest.cpp - Loading and running ifunc code with ORC --------------===//

#include "IfuncIR.h"
#include "jit/Jit.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Host.h"

#include "gtest/gtest.h"

#include <thread>
#include <unistd.h>

using namespace tc;
using tc::test::hostMember;

namespace {

Archive makeArchive(const std::string &Name, const std::string &IR,
                    std::vector<std::string> Deps = {}) {
  Archive A;
  A.Name = Name;
  A.Deps = std::move(Deps);
  A.Members.push_back(hostMember(IR));
  auto Bytes = writeArchive(A); // sets A.Hash
  EXPECT_TRUE(!!Bytes);
  return A;
}

const char *const TsiIR = R"(
define void @tsi_main(ptr %p, i64 %n, ptr %t) {
  %v = load i64, ptr %t
  %w = add i64 %v, 1
  store i64 %w, ptr %t
  ret void
})";

std::unique_ptr<JitEngine> engine() {
  auto E = JitEngine::create();
  if (!E) {
    ADD_FAILURE() << llvm::toString(E.takeError());
    return nullptr;
  }
  return std::move(*E);
}

TEST(Jit, CompilesAndRunsBitcodeForThisHost) {
  auto E = engine();
  ASSERT_TRUE(E);
  Archive A = makeArchive("tsi", TsiIR);
  auto L = E->load(A);
  ASSERT_TRUE(!!L) << llvm::toString(L.takeError());
  size_t Counter = 41;
  callJitted(L->Main, nullptr, 0, &Counter);
  EXPECT_EQ(Counter, 42u);
  EXPECT_EQ(E->size(), 1u);
  // A second load of the same identity is the cached one.
  auto Again = E->load(A);
  ASSERT_TRUE(!!Again);
  EXPECT_EQ(&*Again, &*L);
}

TEST(Jit, SameHelperNameInTwoIfuncsDoesNotCollide) {
  auto E = engine();
  ASSERT_TRUE(E);
  const char *Fmt = R"(
define i64 @step(i64 %%x) { %%y = add i64 %%x, %d
  ret i64 %%y }
define void @%s_main(ptr %%p, i64 %%n, ptr %%t) {
  %%v = load i64, ptr %%t
  %%w = call i64 @step(i64 %%v)
  store i64 %%w, ptr %%t
  ret void
})";
  char IR1[512], IR2[512];
  snprintf(IR1, sizeof(IR1), Fmt, 1, "one");
  snprintf(IR2, sizeof(IR2), Fmt, 100, "two");
  auto L1 = E->load(makeArchive("one", IR1));
  ASSERT_TRUE(!!L1) << llvm::toString(L1.takeError());
  auto L2 = E->load(makeArchive("two", IR2));
  ASSERT_TRUE(!!L2) << llvm::toString(L2.takeError());
  size_t C = 0;
  callJitted(L1->Main, nullptr, 0, &C);
  callJitted(L2->Main, nullptr, 0, &C);
  EXPECT_EQ(C, 101u);
}

TEST(Jit, OneCodegenPipelineCompilesManyModulesFromTwoThreads) {
  // The engine builds its codegen pipeline once and runs it on every
  // module: nothing of one compile may leak into the next. The modules
  // differ in a global, a loop's trip count and their symbols; they are
  // parsed into the engine's shared LLVMContext; two threads compile at
  // once, and every other identity is unloaded again.
  auto E = engine();
  ASSERT_TRUE(E);
  const char *Fmt = R"(
@k = internal global i64 %d
define void @m%d_main(ptr %%p, i64 %%n, ptr %%t) {
entry:
  %%k = load i64, ptr @k
  br label %%loop
loop:
  %%i = phi i64 [0, %%entry], [%%i1, %%loop]
  %%v = load i64, ptr %%t
  %%w = add i64 %%v, %%k
  store i64 %%w, ptr %%t
  %%i1 = add i64 %%i, 1
  %%c = icmp ult i64 %%i1, %d
  br i1 %%c, label %%loop, label %%done
done:
  ret void
})";
  // Every third module is straight-line code, which the -O0 pipeline
  // compiles (isSmallStraightLine): the two pipelines take turns.
  const char *Straight = R"(
@k = internal global i64 %d
define void @m%d_main(ptr %%p, i64 %%n, ptr %%t) {
  %%k = load i64, ptr @k
  %%m = mul i64 %%k, %d
  %%v = load i64, ptr %%t
  %%w = add i64 %%v, %%m
  store i64 %%w, ptr %%t
  ret void
})";
  auto Run = [&](int First) {
    for (int I = First; I < First + 24; ++I) {
      char IR[1024];
      snprintf(IR, sizeof IR, I % 3 ? Fmt : Straight, I + 1, I, I % 5 + 1);
      Archive A = makeArchive("m" + std::to_string(I), IR);
      auto L = E->load(A);
      ASSERT_TRUE(!!L) << llvm::toString(L.takeError());
      size_t C = 0;
      callJitted(L->Main, nullptr, 0, &C);
      EXPECT_EQ(C, size_t(I + 1) * (I % 5 + 1)) << "module " << I;
      if (I % 2)
        ASSERT_FALSE(!!E->unload(A.Hash));
    }
  };
  std::thread Other(Run, 100);
  Run(0);
  Other.join();
  EXPECT_EQ(E->size(), 24u);
}

TEST(Jit, ModulesShareAContextThatIsReplacedInTime) {
  // More modules than one context takes: the engine replaces its context
  // twice, while code compiled in the older ones stays loaded and runs.
  auto E = engine();
  ASSERT_TRUE(E);
  std::vector<Archive> Kept;
  for (unsigned I = 0; I < 2 * JitEngine::MaxModulesPerContext + 2; ++I) {
    std::string IR = "define void @c" + std::to_string(I) +
                     "_main(ptr %p, i64 %n, ptr %t) {\n"
                     "  store i64 " + std::to_string(I) + ", ptr %t\n"
                     "  ret void\n}\n";
    Archive A = makeArchive("c" + std::to_string(I), IR);
    auto L = E->load(A);
    ASSERT_TRUE(!!L) << llvm::toString(L.takeError());
    if (I % 100 == 0)
      Kept.push_back(A);
    else
      ASSERT_FALSE(!!E->unload(A.Hash));
  }
  for (const Archive &A : Kept) {
    const LoadedIfunc *L = E->find(A.Hash);
    ASSERT_TRUE(L);
    size_t C = 0;
    callJitted(L->Main, nullptr, 0, &C);
    EXPECT_EQ("c" + std::to_string(C), A.Name);
  }
}

TEST(Jit, OnlySmallStraightLineCodeIsCompiledAtO0) {
  auto Parse = [](const std::string &IR) {
    static llvm::LLVMContext Ctx;
    llvm::SMDiagnostic Diag;
    std::unique_ptr<llvm::Module> M = llvm::parseAssemblyString(IR, Diag, Ctx);
    EXPECT_TRUE(M) << Diag.getMessage().str();
    return M;
  };
  std::string Adds;
  for (int I = 0; I < 29; ++I)
    Adds += "  %a" + std::to_string(I + 1) + " = add i64 %a" +
            std::to_string(I) + ", 1\n";
  auto Body = [](const std::string &Insts) {
    return "declare void @f()\n"
           "declare void @llvm.assume(i1)\n"
           "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)\n"
           "define void @x_main(ptr %p, i64 %n, ptr %t) {\n"
           "  %a0 = load i64, ptr %t\n" + Insts + "  ret void\n}\n";
  };
  // TSI; an intrinsic that lowers to nothing; 32 instructions in all.
  EXPECT_TRUE(isSmallStraightLine(*Parse(TsiIR)));
  EXPECT_TRUE(isSmallStraightLine(
      *Parse(Body("  %c = icmp ne i64 %n, 0\n"
                  "  call void @llvm.assume(i1 %c)\n"))));
  EXPECT_TRUE(isSmallStraightLine(
      *Parse(Body(Adds + "  store i64 %a29, ptr %t\n"))));
  // One more instruction; a call; a memcpy (may become one); a branch.
  EXPECT_FALSE(isSmallStraightLine(
      *Parse(Body(Adds + "  %a30 = add i64 %a29, 1\n"
                         "  store i64 %a30, ptr %t\n"))));
  EXPECT_FALSE(isSmallStraightLine(*Parse(Body("  call void @f()\n"))));
  EXPECT_FALSE(isSmallStraightLine(*Parse(
      Body("  call void @llvm.memcpy.p0.p0.i64(ptr %t, ptr %p, i64 8, "
           "i1 false)\n"))));
  EXPECT_FALSE(isSmallStraightLine(*Parse(
      "define void @x_main(ptr %p, i64 %n, ptr %t) {\n"
      "  %c = icmp eq i64 %n, 0\n"
      "  br i1 %c, label %a, label %b\n"
      "a:\n  ret void\n"
      "b:\n  store i64 %n, ptr %t\n  ret void\n}\n")));
}

TEST(Jit, ChangedCodeUnderTheSameNameIsADifferentIdentity) {
  auto E = engine();
  ASSERT_TRUE(E);
  Archive V1 = makeArchive("tsi", TsiIR);
  std::string IR2 = TsiIR;
  IR2.replace(IR2.find("add i64 %v, 1"), 13, "add i64 %v, 7");
  Archive V2 = makeArchive("tsi", IR2);
  ASSERT_NE(V1.Hash, V2.Hash);
  auto L1 = E->load(V1);
  ASSERT_TRUE(!!L1);
  auto L2 = E->load(V2);
  ASSERT_TRUE(!!L2);
  size_t C = 0;
  callJitted(L2->Main, nullptr, 0, &C);
  EXPECT_EQ(C, 7u);
  EXPECT_EQ(E->size(), 2u);
}

TEST(Jit, UnloadFreesAndAllowsReload) {
  auto E = engine();
  ASSERT_TRUE(E);
  Archive A = makeArchive("tsi", TsiIR);
  ASSERT_TRUE(!!E->load(A));
  ASSERT_FALSE(!!E->unload(A.Hash));
  EXPECT_EQ(E->find(A.Hash), nullptr);
  EXPECT_EQ(E->size(), 0u);
  auto L = E->load(A);
  ASSERT_TRUE(!!L) << llvm::toString(L.takeError());
  size_t C = 0;
  callJitted(L->Main, nullptr, 0, &C);
  EXPECT_EQ(C, 1u);
}

/// Executable anonymous mappings of this process (where JIT'd code lives):
/// how many, and their total size in bytes. Only executable ones: sanitizer
/// runtimes map and keep growing non-executable anonymous memory.
struct AnonMaps {
  size_t Executable = 0;
  uint64_t Bytes = 0;
};

AnonMaps anonMaps() {
  AnonMaps M;
  auto B = llvm::MemoryBuffer::getFileAsStream("/proc/self/maps");
  if (!B) {
    ADD_FAILURE() << "cannot read /proc/self/maps";
    return M;
  }
  llvm::SmallVector<llvm::StringRef, 0> Lines;
  (*B)->getBuffer().split(Lines, '\n', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef Line : Lines) {
    llvm::SmallVector<llvm::StringRef, 6> F;
    Line.split(F, ' ', 5, /*KeepEmpty=*/false);
    if (F.size() < 5 || (F.size() == 6 && !F[5].trim().empty()))
      continue; // Named: a file, [heap], [stack], ...
    auto [Lo, Hi] = F[0].split('-');
    uint64_t L = 0, H = 0;
    if (Lo.getAsInteger(16, L) || Hi.getAsInteger(16, H))
      continue;
    if (!F[1].contains('x'))
      continue;
    M.Bytes += H - L;
    ++M.Executable;
  }
  return M;
}

TEST(Jit, UnloadReturnsCodeMemoryUnderChurn) {
  // Code memory comes from reservations that unloaded code returns to; a
  // leak of one link's code (at least a page) per identity would show here
  // as 300 new executable pages or mappings.
  auto E = engine();
  ASSERT_TRUE(E);
  Archive A = makeArchive("tsi", TsiIR);
  auto Cycle = [&] {
    auto L = E->load(A);
    ASSERT_TRUE(!!L) << llvm::toString(L.takeError());
    size_t C = 0;
    callJitted(L->Main, nullptr, 0, &C);
    EXPECT_EQ(C, 1u);
    ASSERT_FALSE(!!E->unload(A.Hash));
  };
  for (int I = 0; I < 20; ++I)
    Cycle();
  AnonMaps Before = anonMaps();
  for (int I = 0; I < 300; ++I)
    Cycle();
  AnonMaps After = anonMaps();
  EXPECT_LE(After.Executable, Before.Executable + 1);
  EXPECT_LT(After.Bytes, Before.Bytes + 300 * 4096)
      << "before " << Before.Bytes << ", after " << After.Bytes;
}

TEST(Jit, MissingSymbolIsNamedBeforeAnythingRuns) {
  auto E = engine();
  ASSERT_TRUE(E);
  Archive A = makeArchive("miss", R"(
declare i64 @tc_no_such_function_anywhere(i64)
define void @miss_main(ptr %p, i64 %n, ptr %t) {
  %v = call i64 @tc_no_such_function_anywhere(i64 1)
  store i64 %v, ptr %t
  ret void
})");
  auto L = E->load(A);
  ASSERT_FALSE(!!L);
  EXPECT_EQ(llvm::toString(L.takeError()),
            "ifunc 'miss': symbol 'tc_no_such_function_anywhere' is not "
            "defined in this process or its deps (none)");
  EXPECT_EQ(E->size(), 0u);
}

TEST(Jit, DepsAreLoadedAndResolved) {
  auto E = engine();
  ASSERT_TRUE(E);
  Archive A = makeArchive("dep", R"(
declare i32 @tc_test_dep_answer()
define void @dep_main(ptr %p, i64 %n, ptr %t) {
  %v = call i32 @tc_test_dep_answer()
  %w = sext i32 %v to i64
  store i64 %w, ptr %t
  ret void
})",
                          {TC_TEST_DEP_PATH});
  auto L = E->load(A);
  ASSERT_TRUE(!!L) << llvm::toString(L.takeError());
  size_t C = 0;
  callJitted(L->Main, nullptr, 0, &C);
  EXPECT_EQ(C, 42u);
}

TEST(Jit, DepThatWillNotLoadIsAnError) {
  auto E = engine();
  ASSERT_TRUE(E);
  Archive A = makeArchive("tsi", TsiIR, {"libtc-does-not-exist.so.9"});
  auto L = E->load(A);
  ASSERT_FALSE(!!L);
  std::string Msg = llvm::toString(L.takeError());
  EXPECT_NE(Msg.find("ifunc 'tsi': cannot load dependency "
                     "'libtc-does-not-exist.so.9'"),
            std::string::npos)
      << Msg;
}

TEST(Jit, DepOutsideAllowedDirectoriesIsRefused) {
  JitOptions O;
  O.DepDirs = {"/nonexistent-tc-dir"};
  auto E = JitEngine::create(O);
  ASSERT_TRUE(!!E);
  Archive A = makeArchive("tsi", TsiIR, {TC_TEST_DEP_PATH});
  auto L = (*E)->load(A);
  ASSERT_FALSE(!!L);
  EXPECT_NE(llvm::toString(L.takeError()).find("outside the allowed"),
            std::string::npos);
}

std::vector<std::string> filesIn(llvm::StringRef Dir) {
  std::error_code EC;
  std::vector<std::string> Files;
  for (llvm::sys::fs::directory_iterator It(Dir, EC), End; It != End && !EC;
       It.increment(EC))
    Files.push_back(It->path());
  return Files;
}

TEST(Jit, DiskCacheLetsAnotherEngineSkipTheJit) {
  llvm::SmallString<128> Dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("tc-jit-cache", Dir));
  JitOptions O;
  O.CacheDir = std::string(Dir);
  Archive A = makeArchive("tsi", TsiIR);
  {
    auto E = JitEngine::create(O);
    ASSERT_TRUE(!!E);
    auto L = (*E)->load(A);
    ASSERT_TRUE(!!L) << llvm::toString(L.takeError());
    EXPECT_FALSE(L->FromDiskCache);
  }
  std::vector<std::string> Files = filesIn(Dir);
  ASSERT_EQ(Files.size(), 1u); // One object, no temporary left behind.
  {
    auto E = JitEngine::create(O); // As a restarted process would.
    ASSERT_TRUE(!!E);
    auto L = (*E)->load(A);
    ASSERT_TRUE(!!L) << llvm::toString(L.takeError());
    EXPECT_TRUE(L->FromDiskCache);
    size_t C = 1;
    callJitted(L->Main, nullptr, 0, &C);
    EXPECT_EQ(C, 2u);
  }
  {
    // A damaged file is ignored: compiled again, and still correct.
    std::string Path = Files[0];
    auto B = llvm::MemoryBuffer::getFile(Path);
    ASSERT_TRUE(!!B);
    std::string Bytes = (*B)->getBuffer().str();
    Bytes[Bytes.size() / 2] ^= 0x55;
    {
      std::error_code WEC;
      llvm::raw_fd_ostream OS(Path, WEC);
      ASSERT_FALSE(WEC);
      OS << Bytes;
    }
    auto E = JitEngine::create(O);
    ASSERT_TRUE(!!E);
    auto L = (*E)->load(A);
    ASSERT_TRUE(!!L) << llvm::toString(L.takeError());
    EXPECT_FALSE(L->FromDiskCache);
    size_t C = 1;
    callJitted(L->Main, nullptr, 0, &C);
    EXPECT_EQ(C, 2u);
  }
  // A truncated file (a checksum and no object; or less than a checksum)
  // is ignored too.
  for (size_t Keep : {32, 20, 0}) {
    ASSERT_EQ(::truncate(Files[0].c_str(), off_t(Keep)), 0);
    auto E = JitEngine::create(O);
    ASSERT_TRUE(!!E);
    auto L = (*E)->load(A);
    ASSERT_TRUE(!!L) << llvm::toString(L.takeError());
    EXPECT_FALSE(L->FromDiskCache) << "kept " << Keep << " bytes";
    size_t C = 1;
    callJitted(L->Main, nullptr, 0, &C);
    EXPECT_EQ(C, 2u);
  }
  llvm::sys::fs::remove_directories(Dir);
}

TEST(Jit, PrewarmTakesTheLoadPathAndLeavesNothingBehind) {
  {
    auto E = engine();
    ASSERT_TRUE(E);
    EXPECT_FALSE(E->prewarmMillis()); // Only when asked.
  }
  for (LoadMode Mode : {LoadMode::Auto, LoadMode::Bitcode, LoadMode::Object,
                        LoadMode::Sandbox}) {
    SCOPED_TRACE(int(Mode));
    llvm::SmallString<128> Dir;
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("tc-jit-prewarm", Dir));
    JitOptions O;
    O.CacheDir = std::string(Dir);
    O.Prewarm = Mode;
    auto E = JitEngine::create(O);
    ASSERT_TRUE(!!E) << llvm::toString(E.takeError());
    ASSERT_TRUE((*E)->prewarmMillis());
    EXPECT_GT(*(*E)->prewarmMillis(), 0.0);
    // No code stays loaded, and the disk cache got nothing.
    EXPECT_EQ((*E)->size(), 0u);
    EXPECT_TRUE(filesIn(Dir).empty());
    // Loads are as without it.
    if (Mode != LoadMode::Object) {
      Archive A = makeArchive("tsi", TsiIR);
      auto L = (*E)->load(A, Mode);
      ASSERT_TRUE(!!L) << llvm::toString(L.takeError());
      EXPECT_EQ(L->Sandboxed, Mode == LoadMode::Sandbox);
      if (Mode != LoadMode::Sandbox) { // Sandboxed code runs in runSandboxed.
        size_t C = 1;
        callJitted(L->Main, nullptr, 0, &C);
        EXPECT_EQ(C, 2u);
      }
      EXPECT_EQ((*E)->size(), 1u);
      EXPECT_EQ(filesIn(Dir).size(), 1u);
    }
    E->reset();
    llvm::sys::fs::remove_directories(Dir);
  }
}

TEST(Jit, NoMemberForThisHostListsWhatThereIs) {
  auto E = engine();
  ASSERT_TRUE(E);
  Archive A = makeArchive("tsi", TsiIR);
  A.Members[0].Triple = "riscv64-unknown-linux-gnu";
  auto L = E->load(A);
  ASSERT_FALSE(!!L);
  EXPECT_NE(llvm::toString(L.takeError())
                .find("no member for " +
                      llvm::Triple::normalize(llvm::sys::getProcessTriple())),
            std::string::npos);
}

} // namespace
