//===- Ptx.h - nvptx64 bitcode members to PTX, in-process -------*- C++ -*-===//
//
// A GPU target lowers an archive's nvptx64 member itself, for its own
// device, with LLVM's NVPTX backend: the member's sm_XX (if any) says the
// oldest device it runs on, and the PTX is generated for the device's sm
// (an sm_80 member runs on an sm_90 device as sm_90 code), in the newest
// PTX ISA version both LLVM and the device's driver know. The driver then
// turns the PTX into the device's machine code (GpuTarget).
//
// What a member must hold (the contract with tc-cc, docs/ifunc-abi.md):
//  - a kernel `__tc_kernel_NAME(ptr payload, i64 payload_size,
//    ptr target_args)`, ptx_kernel calling convention;
//  - optionally `const uint32_t NAME_threads`: the threads the kernel is
//    launched with (0xFFFFFFFF: as many as fill the device); absent: 1.
//
// One codegen pipeline per compiler, built once and run on every module
// (as the CPU JIT's ReusedPipelineCompiler), one LLVMContext shared by
// successive modules and replaced after 256; compiles are serialised.
//
//===----------------------------------------------------------------------===//

#ifndef TC_RUNTIME_GPU_PTX_H
#define TC_RUNTIME_GPU_PTX_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace tc {

/// The triple of GPU members and of a GPU target's capability record.
constexpr const char *NvptxTriple = "nvptx64-nvidia-cuda";

/// NAME_threads's value that asks for as many threads as fill the device.
constexpr uint32_t FillDeviceThreads = 0xFFFFFFFFu;

/// A PTX ISA version as LLVM's feature names it: 78 is 7.8 (`+ptx78`).
/// The newest one a driver of CUDA \p DriverVersion (cuDriverGetVersion:
/// 1000 x major + 10 x minor) loads, from NVIDIA's PTX release history
/// (PTX 7.0 came with CUDA 11.0 ... 9.0 with 13.0); 0 before CUDA 11.0.
unsigned ptxVersionForDriver(int DriverVersion);

/// Parses "sm_XY", "sm_XYa", "sm_XYf" (the part after sm_ as a number of
/// at least two digits and an optional suffix). Compute capability X.Y is
/// returned as 10 x X + Y; \p Suffix gets 0, 'a' or 'f'.
std::optional<unsigned> parseSmArch(llvm::StringRef Arch,
                                    char *Suffix = nullptr);

/// What lowering one member produced.
struct PtxModule {
  std::string Ptx;     ///< The text, NUL-free, without a trailing NUL.
  std::string Kernel;  ///< "__tc_kernel_NAME".
  std::string Arch;    ///< The sm the PTX is for ("sm_90").
  unsigned PtxVersion; ///< As in .version: 78 is 7.8.
  /// NAME_threads, when the member defines it.
  std::optional<uint32_t> Threads;
};

/// Lowers nvptx64 bitcode to PTX for one device architecture.
class PtxCompiler {
public:
  /// A compiler for devices of \p DeviceArch ("sm_90"), writing PTX of
  /// version \p PtxVersion, the newest the driver reads (capped at the
  /// newest LLVM writes; 0: LLVM's default for the architecture, the
  /// oldest that has it). Fails when LLVM lacks the NVPTX target, or the
  /// driver's PTX version is older than the architecture needs. An architecture
  /// newer than LLVM knows is lowered as the newest plain sm LLVM knows below
  /// it (the driver compiles PTX for an older sm for a newer device).
  static llvm::Expected<std::unique_ptr<PtxCompiler>>
  create(llvm::StringRef DeviceArch, unsigned PtxVersion = 0);
  ~PtxCompiler();

  /// Lowers \p Bitcode, the nvptx64 member of ifunc \p Name built for
  /// \p MemberArch (empty: generic), to PTX. Checks the kernel entry and
  /// NAME_threads first; the error names the ifunc and what is wrong.
  /// Safe to call from several threads (compiles run one at a time).
  llvm::Expected<PtxModule> compile(llvm::StringRef Bitcode,
                                    llvm::StringRef Name,
                                    llvm::StringRef MemberArch = "");

  /// The sm code is generated for (may differ from the device's, above).
  const std::string &arch() const;
  unsigned ptxVersion() const;
  /// Compiles a built-in module once, so the first real compile finds
  /// LLVM's NVPTX tables set up and its code paged in. Returns its PTX
  /// (kernel __tc_kernel_tc_prewarm), which GpuTarget links once to warm
  /// the driver's JIT the same way.
  llvm::Expected<std::string> prewarm();

private:
  PtxCompiler();
  struct Impl;
  std::unique_ptr<Impl> I;
};

/// The entry point's name for ifunc \p Name.
std::string ptxKernelName(llvm::StringRef Name);

} // namespace tc

#endif // TC_RUNTIME_GPU_PTX_H
