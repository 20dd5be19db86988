//===- GpuTest.cpp - GPU targets without a GPU: driver loading, PTX
//--------===//
//
// What of runtime/gpu runs on a machine without a GPU: loading the driver
// (a missing library, one without the entry points, a stand-in that
// answers device discovery: CudaModel.c) and lowering nvptx64 members to
// PTX. What needs a device is tested by test/lit/gpu (REQUIRES: cuda).
//
//===----------------------------------------------------------------------===//

#include "gpu/GpuTarget.h"
#include "gpu/Ptx.h"

#include "llvm/AsmParser/Parser.h"
#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <chrono>
#include <cstdlib>
#include <thread>

using namespace tc;

namespace {

/// Bitcode from LLVM assembly (an nvptx64 member as tc-cc writes one).
std::string bitcode(llvm::StringRef IR) {
  llvm::LLVMContext Ctx;
  llvm::SMDiagnostic Diag;
  std::unique_ptr<llvm::Module> M = llvm::parseAssemblyString(IR, Diag, Ctx);
  if (!M) {
    ADD_FAILURE() << Diag.getMessage().str();
    return "";
  }
  std::string Out;
  llvm::raw_string_ostream OS(Out);
  llvm::WriteBitcodeToFile(*M, OS);
  return Out;
}

/// A member for ifunc \p Name: a kernel that adds one to target_args[0]
/// and the payload's size to target_args[1], with \p Extra IR after it.
std::string member(llvm::StringRef Name, llvm::StringRef Extra = "") {
  std::string IR = R"(
target triple = "nvptx64-nvidia-cuda"
define void @NAME_main(ptr %p, i64 %n, ptr %t) #0 {
  %c = atomicrmw add ptr %t, i64 1 monotonic
  %s = getelementptr i64, ptr %t, i64 1
  %d = atomicrmw add ptr %s, i64 %n monotonic
  ret void
}
define ptx_kernel void @__tc_kernel_NAME(ptr %p, i64 %n, ptr %t) #0 {
  call void @NAME_main(ptr %p, i64 %n, ptr %t)
  ret void
}
attributes #0 = { "target-cpu"="sm_70" "target-features"="+ptx64,+sm_70" }
)";
  IR += Extra.str();
  std::string Out;
  for (size_t I = 0; I < IR.size();) {
    if (IR.compare(I, 4, "NAME") == 0) {
      Out += Name.str();
      I += 4;
    } else {
      Out += IR[I++];
    }
  }
  return bitcode(Out);
}

std::unique_ptr<PtxCompiler> compiler(llvm::StringRef Arch,
                                      unsigned Version = 0) {
  llvm::Expected<std::unique_ptr<PtxCompiler>> C =
      PtxCompiler::create(Arch, Version);
  if (!C) {
    ADD_FAILURE() << llvm::toString(C.takeError());
    return nullptr;
  }
  return std::move(*C);
}

std::string err(llvm::Error E) { return llvm::toString(std::move(E)); }

TEST(Ptx, DriverVersionsMapToThePtxVersionsTheyRead) {
  EXPECT_EQ(ptxVersionForDriver(13000), 90u);
  EXPECT_EQ(ptxVersionForDriver(13020), 91u);
  EXPECT_EQ(ptxVersionForDriver(12090), 88u);
  EXPECT_EQ(ptxVersionForDriver(12080), 87u);
  EXPECT_EQ(ptxVersionForDriver(12060), 85u); // 12.6 brought no new PTX
  EXPECT_EQ(ptxVersionForDriver(12000), 80u);
  EXPECT_EQ(ptxVersionForDriver(11080), 78u);
  EXPECT_EQ(ptxVersionForDriver(11000), 70u);
  EXPECT_EQ(ptxVersionForDriver(10020), 0u);
}

TEST(Ptx, ArchitecturesParse) {
  char S = 'x';
  EXPECT_EQ(parseSmArch("sm_90", &S), 90u);
  EXPECT_EQ(S, 0);
  EXPECT_EQ(parseSmArch("sm_90a", &S), 90u);
  EXPECT_EQ(S, 'a');
  EXPECT_EQ(parseSmArch("sm_100f", &S), 100u);
  EXPECT_EQ(S, 'f');
  EXPECT_FALSE(parseSmArch("sm_9"));
  EXPECT_FALSE(parseSmArch("sm_"));
  EXPECT_FALSE(parseSmArch("compute_90"));
  EXPECT_FALSE(parseSmArch("sm_9x"));
  EXPECT_FALSE(parseSmArch("sm_90b"));
}

TEST(Ptx, AMemberBecomesAnEntryWithThreeParametersForTheDevice) {
  auto C = compiler("sm_90");
  ASSERT_TRUE(C);
  EXPECT_EQ(C->arch(), "sm_90");
  EXPECT_EQ(C->ptxVersion(), 78u); // LLVM's oldest for sm_90
  llvm::Expected<PtxModule> P = C->compile(member("tsi"), "tsi", "sm_70");
  ASSERT_TRUE(!!P) << err(P.takeError());
  EXPECT_EQ(P->Kernel, "__tc_kernel_tsi");
  EXPECT_EQ(P->Arch, "sm_90"); // lowered for the device, not the member
  EXPECT_EQ(P->PtxVersion, 78u);
  EXPECT_FALSE(P->Threads.has_value());
  const std::string &T = P->Ptx;
  EXPECT_NE(T.find(".version 7.8\n"), std::string::npos) << T;
  EXPECT_NE(T.find(".target sm_90\n"), std::string::npos) << T;
  size_t Entry = T.find(".entry __tc_kernel_tsi(");
  ASSERT_NE(Entry, std::string::npos) << T;
  // Two pointers (64-bit, generic) and the size.
  EXPECT_NE(T.find(".param .u64 .ptr .align 1 __tc_kernel_tsi_param_0,", Entry),
            std::string::npos)
      << T;
  EXPECT_NE(T.find(".param .u64 __tc_kernel_tsi_param_1,", Entry),
            std::string::npos)
      << T;
  EXPECT_NE(
      T.find(".param .u64 .ptr .align 1 __tc_kernel_tsi_param_2\n", Entry),
      std::string::npos)
      << T;
  EXPECT_NE(T.find("atom"), std::string::npos) << T;
}

TEST(Ptx, TheDriversPtxVersionIsWrittenUpToWhatLLVMKnows) {
  auto C = compiler("sm_90", ptxVersionForDriver(12080));
  ASSERT_TRUE(C);
  EXPECT_EQ(C->ptxVersion(), 87u);
  llvm::Expected<PtxModule> P = C->compile(member("tsi"), "tsi");
  ASSERT_TRUE(!!P) << err(P.takeError());
  EXPECT_NE(P->Ptx.find(".version 8.7\n"), std::string::npos);
  // A driver newer than LLVM: LLVM's newest (9.0 in LLVM 22).
  auto N = compiler("sm_90", 99);
  ASSERT_TRUE(N);
  EXPECT_EQ(N->ptxVersion(), 90u);
  // A driver too old for the device's sm.
  llvm::Expected<std::unique_ptr<PtxCompiler>> Old =
      PtxCompiler::create("sm_90", 70);
  ASSERT_FALSE(!!Old);
  EXPECT_EQ(err(Old.takeError()),
            "sm_90 needs PTX 7.8; the driver reads up to 7.0");
}

TEST(Ptx, ADeviceNewerThanLLVMGetsTheNewestSmBelowIt) {
  auto C = compiler("sm_990");
  ASSERT_TRUE(C);
  std::optional<unsigned> V = parseSmArch(C->arch());
  ASSERT_TRUE(V.has_value()) << C->arch();
  EXPECT_GE(*V, 120u);
  EXPECT_LT(*V, 990u);
  llvm::Expected<std::unique_ptr<PtxCompiler>> Bad =
      PtxCompiler::create("sm_90a");
  ASSERT_FALSE(!!Bad);
  EXPECT_NE(err(Bad.takeError()).find("not a device architecture"),
            std::string::npos);
}

TEST(Ptx, ArchitectureSpecificMembersAreLoweredForTheirOwnSm) {
  auto C = compiler("sm_90");
  ASSERT_TRUE(C);
  llvm::Expected<PtxModule> P = C->compile(member("w"), "w", "sm_90a");
  ASSERT_TRUE(!!P) << err(P.takeError());
  EXPECT_EQ(P->Arch, "sm_90a");
  EXPECT_NE(P->Ptx.find(".target sm_90a\n"), std::string::npos);
  // A driver whose PTX is too old for the member's own sm.
  auto Old = compiler("sm_90", 78);
  ASSERT_TRUE(Old);
  llvm::Expected<PtxModule> TooNew = Old->compile(member("w"), "w", "sm_90a");
  ASSERT_FALSE(!!TooNew);
  EXPECT_EQ(err(TooNew.takeError()),
            "sm_90a needs PTX 8.0; the driver reads up to 7.8");
  llvm::Expected<PtxModule> Bad = C->compile(member("w"), "w", "volta");
  ASSERT_FALSE(!!Bad);
  EXPECT_EQ(err(Bad.takeError()), "ifunc 'w': its nvptx64 member's CPU "
                                  "'volta' is not an sm_XY architecture");
}

TEST(Ptx, ThreadsAreReadFromTheMember) {
  auto C = compiler("sm_80");
  ASSERT_TRUE(C);
  llvm::Expected<PtxModule> Fixed =
      C->compile(member("s", "@s_threads = constant i32 1000\n"), "s");
  ASSERT_TRUE(!!Fixed) << err(Fixed.takeError());
  EXPECT_EQ(Fixed->Threads, std::optional<uint32_t>(1000));
  llvm::Expected<PtxModule> Fill =
      C->compile(member("s", "@s_threads = constant i32 -1\n"), "s");
  ASSERT_TRUE(!!Fill) << err(Fill.takeError());
  EXPECT_EQ(Fill->Threads, std::optional<uint32_t>(FillDeviceThreads));
}

TEST(Ptx, MembersThatBreakTheContractAreRefusedWithTheReason) {
  auto C = compiler("sm_80");
  ASSERT_TRUE(C);
  auto Refused = [&](const std::string &Bitcode, llvm::StringRef Want) {
    llvm::Expected<PtxModule> P = C->compile(Bitcode, "k");
    if (P)
      return testing::AssertionFailure() << "accepted";
    std::string Msg = err(P.takeError());
    if (Msg != Want)
      return testing::AssertionFailure() << Msg;
    return testing::AssertionSuccess();
  };
  EXPECT_TRUE(Refused(member("other"),
                      "ifunc 'k': its nvptx64 member defines no kernel "
                      "__tc_kernel_k"));
  EXPECT_TRUE(Refused(bitcode(R"(
target triple = "nvptx64-nvidia-cuda"
define void @__tc_kernel_k(ptr %p, i64 %n, ptr %t) { ret void }
)"),
                      "ifunc 'k': its nvptx64 member has __tc_kernel_k but "
                      "it is not a kernel (ptx_kernel)"));
  EXPECT_TRUE(Refused(bitcode(R"(
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @__tc_kernel_k(ptr %p, i32 %n, ptr %t) { ret void }
)"),
                      "ifunc 'k': its nvptx64 member has __tc_kernel_k with "
                      "the wrong signature (expected void(ptr, i64, ptr))"));
  EXPECT_TRUE(Refused(member("k", "@k_threads = global i32 4\n"),
                      "ifunc 'k': its nvptx64 member has k_threads but not "
                      "as a const uint32_t with a value"));
  EXPECT_TRUE(Refused(member("k", "@k_threads = constant i64 4\n"),
                      "ifunc 'k': its nvptx64 member has k_threads but not "
                      "as a const uint32_t with a value"));
  EXPECT_TRUE(Refused(member("k", "@k_threads = constant i32 0\n"),
                      "ifunc 'k': its nvptx64 member asks for 0 threads "
                      "(k_threads)"));
  llvm::Expected<PtxModule> Bad = C->compile("BC\xc0\xde garbage", "k");
  ASSERT_FALSE(!!Bad);
  EXPECT_NE(err(Bad.takeError()).find("ifunc 'k': bad nvptx64 bitcode"),
            std::string::npos);
}

TEST(Ptx, OnePipelineLowersManyModulesAsFreshOnesDo) {
  // The compiler keeps one codegen pipeline and one context: what it
  // writes for a module must not depend on what it lowered before.
  auto Reused = compiler("sm_80");
  ASSERT_TRUE(Reused);
  std::string A = member("a"), B = member("b", "@b_threads = constant i32 7\n");
  llvm::Expected<PtxModule> A1 = Reused->compile(A, "a");
  llvm::Expected<PtxModule> B1 = Reused->compile(B, "b");
  llvm::Expected<PtxModule> A2 = Reused->compile(A, "a");
  ASSERT_TRUE(A1 && B1 && A2);
  auto FreshB = compiler("sm_80");
  ASSERT_TRUE(FreshB);
  llvm::Expected<PtxModule> B0 = FreshB->compile(B, "b");
  ASSERT_TRUE(!!B0) << err(B0.takeError());
  // NVPTX numbers call sequences across the modules one target machine
  // lowers; the numbers only appear in comments ("{ // callseq 3, 0").
  auto Plain = [](std::string S) {
    std::string Out;
    for (size_t I = 0; I < S.size();) {
      if (S.compare(I, 8, "callseq ") == 0) {
        I += 8;
        while (I < S.size() && isdigit(static_cast<unsigned char>(S[I])))
          ++I;
        Out += "callseq N";
        continue;
      }
      Out += S[I++];
    }
    return Out;
  };
  EXPECT_EQ(Plain(A1->Ptx), Plain(A2->Ptx));
  EXPECT_EQ(Plain(B1->Ptx), Plain(B0->Ptx));
  EXPECT_EQ(B1->Ptx.find("__tc_kernel_a"), std::string::npos);
  EXPECT_EQ(A2->Ptx.find("__tc_kernel_b"), std::string::npos);
  // The prewarm module goes through the same pipeline.
  llvm::Expected<std::string> W = Reused->prewarm();
  ASSERT_TRUE(!!W) << err(W.takeError());
  EXPECT_NE(W->find(".entry __tc_kernel_tc_prewarm("), std::string::npos);
  llvm::Expected<PtxModule> A3 = Reused->compile(A, "a");
  ASSERT_TRUE(!!A3);
  EXPECT_EQ(Plain(A3->Ptx), Plain(A1->Ptx));
}

//===----------------------------------------------------------------------===//
// The driver
//===----------------------------------------------------------------------===//

/// Sets an environment variable for one test and restores it after.
class ScopedEnv {
public:
  ScopedEnv(const char *Name, const char *Value) : Name(Name) {
    if (const char *Old = std::getenv(Name))
      Saved = Old;
    setenv(Name, Value, 1);
  }
  ~ScopedEnv() {
    if (Saved)
      setenv(Name, Saved->c_str(), 1);
    else
      unsetenv(Name);
  }

private:
  const char *Name;
  std::optional<std::string> Saved;
};

TEST(CudaDriver, AMissingLibraryIsOneLineThatSaysWhatIsNeeded) {
  llvm::Expected<std::unique_ptr<cuda::Driver>> D =
      cuda::Driver::load("/nonexistent/libcuda.so.1");
  ASSERT_FALSE(!!D);
  EXPECT_EQ(err(D.takeError()),
            "no CUDA driver: cannot load /nonexistent/libcuda.so.1 "
            "(/nonexistent/libcuda.so.1: cannot open shared object file: No "
            "such file or directory); a GPU target needs the NVIDIA driver's "
            "libcuda.so.1");
  // The environment variable names the library when the caller does not.
  ScopedEnv E(cuda::DriverLibraryEnv, "/nonexistent/other.so");
  D = cuda::Driver::load();
  ASSERT_FALSE(!!D);
  EXPECT_NE(err(D.takeError()).find("cannot load /nonexistent/other.so"),
            std::string::npos);
}

TEST(CudaDriver, ALibraryWithoutTheEntryPointsIsRefused) {
  llvm::Expected<std::unique_ptr<cuda::Driver>> D =
      cuda::Driver::load("libm.so.6");
  ASSERT_FALSE(!!D);
  EXPECT_EQ(err(D.takeError()),
            "the CUDA driver libm.so.6 lacks cuGetErrorName: tc needs a "
            "driver of CUDA 11.2 or later");
}

TEST(CudaDriver, CallsFailWithTheCallAndTheDriversNameForTheError) {
  llvm::Expected<std::unique_ptr<cuda::Driver>> D =
      cuda::Driver::load(TC_CUDA_MODEL_PATH);
  ASSERT_TRUE(!!D) << err(D.takeError());
  cuda::Driver &Cu = **D;
  EXPECT_EQ(Cu.library(), TC_CUDA_MODEL_PATH);
  // Before cuInit, as the real driver: not initialised.
  cuda::CUcontext Ctx = nullptr;
  llvm::Error E = TC_CU(Cu, cuDevicePrimaryCtxRetain, &Ctx, 0);
  EXPECT_EQ(cuda::errorCode(E), cuda::CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(err(std::move(E)), "cuDevicePrimaryCtxRetain: "
                               "CUDA_ERROR_NOT_INITIALIZED (initialization "
                               "error)");
  EXPECT_TRUE(cuda::isContextLost(cuda::CUDA_ERROR_ILLEGAL_ADDRESS));
  EXPECT_TRUE(cuda::isContextLost(cuda::CUDA_ERROR_LAUNCH_FAILED));
  EXPECT_FALSE(cuda::isContextLost(cuda::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES));
  EXPECT_FALSE(cuda::isContextLost(cuda::CUDA_ERROR_NOT_READY));
  EXPECT_EQ(cuda::driverVersionText(12080), "12.8");
}

std::string createError(const char *Mode, int Device = 0) {
  ScopedEnv E("TC_FAKE_CUDA", Mode);
  GpuOptions O;
  O.Library = TC_CUDA_MODEL_PATH;
  O.WorkerPath = TC_SERVE_PATH;
  O.Device = Device;
  llvm::Expected<std::unique_ptr<GpuTarget>> G = GpuTarget::create(O);
  if (G)
    return "created";
  return err(G.takeError());
}

TEST(GpuTarget, WhatTheDriverFindsIsReportedInOneLine) {
  EXPECT_EQ(createError("nodevice"),
            std::string("no CUDA device: the driver (") + TC_CUDA_MODEL_PATH +
                ") found none (cuInit: CUDA_ERROR_NO_DEVICE (no CUDA-capable "
                "device is detected))");
  EXPECT_EQ(createError("zero"), std::string("no CUDA device: the driver (") +
                                     TC_CUDA_MODEL_PATH + ") found none");
  EXPECT_EQ(createError("nomap", 3),
            "no CUDA device 3: this machine has 1 (0 to 0)");
  EXPECT_EQ(createError("old"), "the CUDA driver is version 10.2; a GPU "
                                "target needs 11.2 or later");
  EXPECT_EQ(createError("nomap"), "CUDA device 0 (tc CUDA driver model) "
                                  "cannot map host memory, which a GPU "
                                  "target hands payloads to kernels in");
}

/// The driver model (CudaModel.cpp) in this process, initialised, with its
/// context current and one stream; PTX that declares \p Entry loaded.
struct ModelDevice {
  std::unique_ptr<cuda::Driver> D;
  cuda::CUstream S = nullptr;
  cuda::CUfunction F = nullptr;
  cuda::CUdeviceptr Region = 0;

  void open(const char *Entry) {
    llvm::Expected<std::unique_ptr<cuda::Driver>> L =
        cuda::Driver::load(TC_CUDA_MODEL_PATH);
    ASSERT_TRUE(!!L) << err(L.takeError());
    D = std::move(*L);
    cuda::Driver &Cu = *D;
    cuda::CUcontext Ctx = nullptr;
    cuda::CUmodule M = nullptr;
    std::string Ptx = std::string(".version 9.0\n.target sm_90\n"
                                  ".visible .entry ") +
                      Entry + "(\n)\n";
    ASSERT_FALSE(!!TC_CU(Cu, cuInit, 0));
    ASSERT_FALSE(!!TC_CU(Cu, cuDevicePrimaryCtxRetain, &Ctx, 0));
    ASSERT_FALSE(!!TC_CU(Cu, cuCtxSetCurrent, Ctx));
    ASSERT_FALSE(!!TC_CU(Cu, cuStreamCreate, &S, cuda::CU_STREAM_NON_BLOCKING));
    ASSERT_FALSE(!!TC_CU(Cu, cuMemAlloc, &Region, 64));
    ASSERT_FALSE(!!TC_CU(Cu, cuMemsetD8, Region, 0, 64));
    ASSERT_FALSE(!!TC_CU(Cu, cuModuleLoadData, &M, Ptx.c_str()));
    ASSERT_FALSE(!!TC_CU(Cu, cuModuleGetFunction, &F, M, Entry));
  }
  cuda::CUresult launch(unsigned char Byte) {
    static unsigned char Payload[8];
    Payload[0] = Byte;
    cuda::CUdeviceptr P = cuda::CUdeviceptr(uintptr_t(Payload));
    uint64_t N = 1;
    cuda::CUdeviceptr T = Region;
    void *Params[] = {&P, &N, &T};
    return D->cuLaunchKernel(F, 1, 1, 1, 1, 1, 1, 0, S, Params, nullptr);
  }
};

// The model must behave as a device does where tc depends on it: these
// run in a child process each (the model's state is the process's, as a
// driver's is), and exit 0 when every expectation held.
TEST(CudaModel, AFaultIsStickyForTheProcessAResetAndRetainIncluded) {
  EXPECT_EXIT(
      {
        ModelDevice M;
        M.open("__tc_kernel_gfault");
        bool Ok = M.launch(1) == cuda::CUDA_SUCCESS;
        // The fault is found by the next call that waits for the device,
        // and then by every call.
        Ok &= M.D->cuStreamSynchronize(M.S) == cuda::CUDA_ERROR_ILLEGAL_ADDRESS;
        cuda::CUdeviceptr P = 0;
        Ok &= M.D->cuMemAlloc(&P, 64) == cuda::CUDA_ERROR_ILLEGAL_ADDRESS;
        Ok &= M.D->cuDevicePrimaryCtxReset(0) ==
              cuda::CUDA_ERROR_ILLEGAL_ADDRESS;
        cuda::CUcontext Ctx = nullptr;
        Ok &= M.D->cuDevicePrimaryCtxRetain(&Ctx, 0) ==
              cuda::CUDA_ERROR_ILLEGAL_ADDRESS;
        Ok &= M.launch(0) == cuda::CUDA_ERROR_ILLEGAL_ADDRESS;
        std::exit(Ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(CudaModel, AKernelThatNeverEndsKeepsItsStreamAndEventsNotReady) {
  EXPECT_EXIT(
      {
        ModelDevice M;
        M.open("__tc_kernel_gspin");
        bool Ok = M.launch(1) == cuda::CUDA_SUCCESS;
        cuda::CUevent E = nullptr;
        Ok &= M.D->cuEventCreate(&E, 0) == cuda::CUDA_SUCCESS;
        Ok &= M.D->cuEventRecord(E, M.S) == cuda::CUDA_SUCCESS;
        for (int I = 0; I < 100; ++I) {
          Ok &= M.D->cuStreamQuery(M.S) == cuda::CUDA_ERROR_NOT_READY;
          Ok &= M.D->cuEventQuery(E) == cuda::CUDA_ERROR_NOT_READY;
        }
        // A synchronizing call blocks while it runs: the word it waits for
        // ends it, and then the call returns.
        uint64_t One = 1;
        std::thread Release([&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          (void)M.D->cuMemcpyHtoD(M.Region + 16, &One, 8);
        });
        Ok &= M.D->cuStreamSynchronize(M.S) == cuda::CUDA_SUCCESS;
        Release.join();
        Ok &= M.D->cuEventQuery(E) == cuda::CUDA_SUCCESS;
        std::exit(Ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

} // namespace
