; Atomics wider than 64 bits have no GPU lowering (LLVM 22's NVPTX backend
; stops at "unsupported cmpxchg"): refused, once per function. 8- and
; 16-bit ones are fine (a 32-bit compare-and-swap loop).
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=g>' -disable-output %s 2>&1 | FileCheck %s --implicit-check-not="-bit atomic"

target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

define void @g_main(ptr %p, i64 %n, ptr %t) {
  %a = atomicrmw add ptr %t, i128 1 monotonic, align 16
  %b = cmpxchg ptr %t, i128 0, i128 1 seq_cst seq_cst, align 16
  %c = atomicrmw add ptr %p, i8 1 monotonic, align 1
  %d = atomicrmw add ptr %p, i16 1 monotonic, align 2
  ret void
}
; CHECK: error: ifunc 'g': function 'g_main' uses a 128-bit atomic operation: GPU atomics are 32 and 64 bits (8 and 16 through a 32-bit compare-and-swap)
