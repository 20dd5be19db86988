; A math intrinsic NVPTX cannot lower and libclc does not cover (half
; precision) is refused.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=g>' -disable-output %s 2>&1 | FileCheck %s

target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

define void @g_main(ptr %p, i64 %n, ptr %t) {
  %x = load half, ptr %p
  %y = call half @llvm.sin.f16(half %x)
  store half %y, ptr %t
  ret void
}
declare half @llvm.sin.f16(half)
; CHECK: error: ifunc 'g': function 'g_main' uses 'llvm.sin.f16', which has no GPU lowering (libclc covers float and double only)
