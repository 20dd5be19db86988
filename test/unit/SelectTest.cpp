//===- SelectTest.cpp - Member selection by normalized triple and CPU -----===//

#include "TestArchives.h"

#include "gtest/gtest.h"

using namespace tc;
using namespace tc::test;

namespace {

Archive twoTriples() {
  Archive A;
  A.Name = "sel";
  A.Members = {makeMember("x86_64-unknown-linux-gnu", ""),
               makeMember("aarch64-unknown-linux-gnu", "")};
  return A;
}

const Member *pick(const Archive &A, llvm::StringRef T, llvm::StringRef CPU = "",
                   Role R = Role::Target) {
  llvm::Expected<const Member *> M = selectMember(A, T, CPU, R);
  if (!M) {
    llvm::consumeError(M.takeError());
    return nullptr;
  }
  return *M;
}

TEST(TriplesCompatible, VendorIsIgnoredArchAndOSAreNot) {
  EXPECT_TRUE(triplesCompatible("x86_64-unknown-linux-gnu",
                                "x86_64-pc-linux-gnu"));
  EXPECT_TRUE(triplesCompatible("x86_64-unknown-linux-gnu", "x86_64-linux-gnu"));
  EXPECT_TRUE(triplesCompatible("aarch64-unknown-linux-gnu",
                                "arm64-unknown-linux-gnu"));
  EXPECT_FALSE(triplesCompatible("x86_64-unknown-linux-gnu",
                                 "aarch64-unknown-linux-gnu"));
  EXPECT_FALSE(triplesCompatible("x86_64-unknown-linux-gnu",
                                 "x86_64-apple-darwin"));
  EXPECT_FALSE(triplesCompatible("x86_64-unknown-linux-gnu",
                                 "x86_64-unknown-linux-musl"));
  // A member that names no OS assumes none.
  EXPECT_TRUE(triplesCompatible("x86_64-unknown-unknown",
                                "x86_64-pc-linux-gnu"));
}

TEST(SelectMember, PicksByNormalizedTriple) {
  Archive A = twoTriples();
  const Member *M = pick(A, "x86_64-pc-linux-gnu");
  ASSERT_NE(M, nullptr);
  EXPECT_EQ(M->Triple, "x86_64-unknown-linux-gnu");
  M = pick(A, "aarch64-linux-gnu");
  ASSERT_NE(M, nullptr);
  EXPECT_EQ(M->Triple, "aarch64-unknown-linux-gnu");
}

TEST(SelectMember, PrefersHostCPUThenGenericNeverACPUWithMoreFeatures) {
  Archive A = twoTriples();
  A.Members.push_back(makeMember("x86_64-unknown-linux-gnu", "znver3"));
  EXPECT_EQ(pick(A, "x86_64-pc-linux-gnu", "znver3")->CPU, "znver3");
  EXPECT_EQ(pick(A, "x86_64-pc-linux-gnu", "skylake")->CPU, "");
  A.Members.erase(A.Members.begin()); // drop the generic x86_64 member
  EXPECT_EQ(pick(A, "x86_64-pc-linux-gnu", "skylake"), nullptr);
}

TEST(CpuRunsOn, NeedsEveryFeatureOfTheMemberCPU) {
  const char *X86 = "x86_64-unknown-linux-gnu";
  EXPECT_TRUE(cpuRunsOn(X86, "", "skylake")); // generic runs anywhere
  EXPECT_TRUE(cpuRunsOn(X86, "x86-64-v3", "znver4"));
  EXPECT_TRUE(cpuRunsOn(X86, "x86-64-v3", "skylake"));
  EXPECT_FALSE(cpuRunsOn(X86, "x86-64-v4", "skylake")); // no AVX-512
  EXPECT_TRUE(cpuRunsOn(X86, "x86-64-v4", "znver4"));
  EXPECT_TRUE(cpuRunsOn(X86, "x86-64-v2", "x86-64-v3"));
  EXPECT_FALSE(cpuRunsOn(X86, "x86-64-v3", "x86-64-v2"));
  EXPECT_FALSE(cpuRunsOn(X86, "znver3", "skylake")); // sse4a, clzero
  EXPECT_FALSE(cpuRunsOn(X86, "x86-64-v3", "no-such-cpu"));
  EXPECT_FALSE(cpuRunsOn(X86, "no-such-cpu", "znver4"));
  EXPECT_TRUE(cpuRunsOn(X86, "no-such-cpu", "no-such-cpu"));
  const char *A64 = "aarch64-unknown-linux-gnu";
  EXPECT_TRUE(cpuRunsOn(A64, "neoverse-n1", "neoverse-v1"));
  EXPECT_FALSE(cpuRunsOn(A64, "neoverse-v1", "neoverse-n1")); // SVE, v8.4
  EXPECT_TRUE(cpuRunsOn(A64, "cortex-a72", "neoverse-n1"));
  EXPECT_FALSE(cpuRunsOn(A64, "neoverse-n1", "cortex-a72"));
  // Other architectures: a CPU runs only its own code.
  EXPECT_FALSE(
      cpuRunsOn("riscv64-unknown-linux-gnu", "sifive-u74", "sifive-x280"));
  EXPECT_TRUE(
      cpuRunsOn("riscv64-unknown-linux-gnu", "sifive-u74", "sifive-u74"));
}

TEST(CpuRunsOn, GPUArchitectureAtOrAboveTheMembers) {
  const char *GPU = "nvptx64-nvidia-cuda";
  EXPECT_TRUE(cpuRunsOn(GPU, "sm_70", "sm_90"));
  EXPECT_TRUE(cpuRunsOn(GPU, "sm_90", "sm_90"));
  EXPECT_TRUE(cpuRunsOn(GPU, "sm_90", "sm_100"));
  EXPECT_FALSE(cpuRunsOn(GPU, "sm_90", "sm_80"));
  EXPECT_TRUE(cpuRunsOn(GPU, "sm_90a", "sm_90"));
  EXPECT_FALSE(cpuRunsOn(GPU, "sm_90a", "sm_100")); // arch-specific
  EXPECT_TRUE(cpuRunsOn(GPU, "sm_100f", "sm_103"));
  EXPECT_FALSE(cpuRunsOn(GPU, "sm_100f", "sm_120")); // another family
  EXPECT_FALSE(cpuRunsOn(GPU, "sm_90", "gfx90a"));
  EXPECT_FALSE(cpuRunsOn(GPU, "sm_x", "sm_90"));
}

TEST(SelectMember, GPUPrefersTheHighestArchitectureItRuns) {
  Archive A;
  A.Name = "g";
  A.Members = {makeMember("x86_64-unknown-linux-gnu", ""),
               makeMember("nvptx64-nvidia-cuda", "sm_70"),
               makeMember("nvptx64-nvidia-cuda", "sm_80"),
               makeMember("nvptx64-nvidia-cuda", "sm_90a")};
  EXPECT_EQ(pick(A, "nvptx64-nvidia-cuda", "sm_90")->CPU, "sm_90a");
  EXPECT_EQ(pick(A, "nvptx64-nvidia-cuda", "sm_100")->CPU, "sm_80");
  EXPECT_EQ(pick(A, "nvptx64-nvidia-cuda", "sm_75")->CPU, "sm_70");
  EXPECT_EQ(pick(A, "nvptx64-nvidia-cuda", "sm_60"), nullptr);
  // A CPU target never runs a GPU member.
  EXPECT_EQ(pick(A, "x86_64-pc-linux-gnu", "znver4")->Triple,
            "x86_64-unknown-linux-gnu");
}

TEST(SelectMember, HostCPUThenTheRichestCPUItCanRunThenGeneric) {
  Archive A;
  A.Name = "cpus";
  A.Members = {makeMember("x86_64-unknown-linux-gnu", ""),
               makeMember("x86_64-unknown-linux-gnu", "x86-64-v3"),
               makeMember("x86_64-unknown-linux-gnu", "x86-64-v4"),
               makeMember("x86_64-unknown-linux-gnu", "znver4")};
  EXPECT_EQ(pick(A, "x86_64-pc-linux-gnu", "znver4")->CPU, "znver4");
  // znver4's features are a subset of znver5's, and more than x86-64-v4's.
  EXPECT_EQ(pick(A, "x86_64-pc-linux-gnu", "znver5")->CPU, "znver4");
  EXPECT_EQ(pick(A, "x86_64-pc-linux-gnu", "sapphirerapids")->CPU, "x86-64-v4");
  EXPECT_EQ(pick(A, "x86_64-pc-linux-gnu", "skylake")->CPU, "x86-64-v3");
  EXPECT_EQ(pick(A, "x86_64-pc-linux-gnu", "x86-64-v2")->CPU, "");
  EXPECT_EQ(pick(A, "x86_64-pc-linux-gnu", "")->CPU, "");
}

TEST(SelectMember, PrefersBitcodeToObjectAndHonoursRole) {
  Archive A;
  A.Name = "k";
  A.Members = {makeMember("x86_64-unknown-linux-gnu", "", ImageKind::Object),
               makeMember("x86_64-unknown-linux-gnu", "", ImageKind::Bitcode),
               makeMember("x86_64-unknown-linux-gnu", "", ImageKind::Bitcode,
                          Role::Source)};
  const Member *T = pick(A, "x86_64-unknown-linux-gnu");
  ASSERT_NE(T, nullptr);
  EXPECT_EQ(T->Kind, ImageKind::Bitcode);
  EXPECT_EQ(T->TheRole, Role::Target);
  const Member *S = pick(A, "x86_64-unknown-linux-gnu", "", Role::Source);
  ASSERT_NE(S, nullptr);
  EXPECT_EQ(S->TheRole, Role::Source);
}

TEST(SelectMember, KindFilterPicksOnlyThatKind) {
  Archive A;
  A.Name = "k";
  A.Members = {makeMember("x86_64-unknown-linux-gnu", "", ImageKind::Bitcode),
               makeMember("x86_64-unknown-unknown", "", ImageKind::Object)};
  llvm::Expected<const Member *> O = selectMember(
      A, "x86_64-pc-linux-gnu", "", Role::Target, ImageKind::Object);
  ASSERT_TRUE(!!O);
  EXPECT_EQ((*O)->Kind, ImageKind::Object);
  A.Members.pop_back();
  llvm::Expected<const Member *> None = selectMember(
      A, "x86_64-pc-linux-gnu", "", Role::Target, ImageKind::Object);
  ASSERT_FALSE(!!None);
  EXPECT_EQ(llvm::toString(None.takeError()),
            "no member for x86_64-pc-linux-gnu of kind object (have: "
            "x86_64-unknown-linux-gnu)");
}

TEST(SelectMember, ErrorListsWhatTheArchiveHas) {
  Archive A = twoTriples();
  llvm::Expected<const Member *> M =
      selectMember(A, "riscv64-unknown-linux-gnu");
  ASSERT_FALSE(!!M);
  EXPECT_EQ(llvm::toString(M.takeError()),
            "no member for riscv64-unknown-linux-gnu (have: "
            "x86_64-unknown-linux-gnu, aarch64-unknown-linux-gnu)");
}

} // namespace
