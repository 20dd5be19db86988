//===- GPUMember.h - The nvptx64 member: kernel, libm, checks ---*- C++ -*-===//
//
// Internal to the passes library: the steps tc-prepare-target adds for a
// module whose triple is nvptx64 (IfuncPasses.cpp runs them in order).
//
//===----------------------------------------------------------------------===//

#ifndef TC_LLVM_PASSES_GPUMEMBER_H
#define TC_LLVM_PASSES_GPUMEMBER_H

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <string>

namespace llvm {
class Function;
class GlobalValue;
class Module;
} // namespace llvm

namespace tc {
namespace gpu {

/// Reports one problem at a symbol (may be null), as Diagnostics::error.
using ReportFn =
    llvm::function_ref<void(const llvm::GlobalValue *, const llvm::Twine &)>;

/// The kernel entry of ifunc \p Name: `__tc_kernel_NAME`.
std::string kernelName(llvm::StringRef Name);

/// Adds `ptx_kernel void __tc_kernel_NAME(ptr payload, i64 payload_size,
/// ptr target_args)`, which calls NAME_main with its three arguments.
llvm::Expected<llvm::Function *> addKernel(llvm::Module &M,
                                           llvm::StringRef Name);

/// Makes the library calls a GPU can run resolvable inside the member:
/// calls to memcpy/memmove/memset become LLVM's intrinsics, lround and
/// friends a rounding intrinsic and a conversion, and the C libm functions
/// and math intrinsics the NVPTX backend cannot lower become calls to
/// libclc's OpenCL builtins of the same meaning, whose definitions are
/// linked in from \p Library (nvptx64 bitcode; read only when needed).
/// Fails only when the library is needed and cannot be read.
llvm::Error resolveDeviceCalls(llvm::Module &M, llvm::StringRef Library);

/// Reports what a GPU member cannot run: calls to functions it does not
/// define (libc, libm outside libclc's list, libtc), variadic functions
/// and calls, recursion (any call-graph cycle), thread-locals, references
/// to external variables, math intrinsics without a GPU lowering, atomics
/// wider than 64 bits, inline assembly.
void checkDeviceCode(llvm::Module &M, ReportFn Report);

} // namespace gpu
} // namespace tc

#endif
