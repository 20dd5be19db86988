; The GPU member: tc-prepare-target on an nvptx64 module adds the kernel
; entry __tc_kernel_NAME (ptx_kernel, the three parameters of NAME_main),
; which calls NAME_main, now internal; NAME_threads stays external with its
; value; the sender's payload functions and what only they reach go, and
; so do the translation unit's CPU attributes.
; RUN: opt -load-pass-plugin=%tc_passes_plugin -passes='tc-abi-check<name=k>,tc-prepare-target<name=k>' -S %s | FileCheck %s --implicit-check-not=payload --implicit-check-not=helper --implicit-check-not=target-cpu
; The PTX the NVPTX backend makes of it: one .entry with three 64-bit
; parameters.
; RUN: opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=k>' %s -o %t.bc
; RUN: llc -march=nvptx64 -mcpu=sm_90 %t.bc -o - | FileCheck %s --check-prefix=PTX

target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

@k_threads = constant i32 256, align 4

define void @k_main(ptr %p, i64 %n, ptr %t) #0 {
  %v = load i64, ptr %p, align 8
  %i = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %w = zext i32 %i to i64
  %a = getelementptr i64, ptr %t, i64 %w
  %old = atomicrmw add ptr %a, i64 %v monotonic, align 8
  ret void
}
define i64 @k_payload_bound(ptr %a, i64 %n) #0 {
  ret i64 8
}
define i32 @k_payload_init(ptr %a, i64 %n, ptr %p, ptr %s) #0 {
  call void @helper(ptr %s)
  ret i32 0
}
define void @helper(ptr %s) #0 {
  store i64 8, ptr %s, align 8
  ret void
}
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()

attributes #0 = { "target-cpu"="sm_90" "target-features"="+ptx88,+sm_90" }

; CHECK: @k_threads = constant i32 256, align 4
; CHECK-LABEL: define internal void @k_main(ptr %p, i64 %n, ptr %t)
; CHECK:         atomicrmw add ptr %a, i64 %v monotonic
; CHECK-LABEL: define ptx_kernel void @__tc_kernel_k(ptr %payload, i64 %payload_size, ptr %target_args)
; CHECK-NEXT:  entry:
; CHECK-NEXT:    call void @k_main(ptr %payload, i64 %payload_size, ptr %target_args)
; CHECK-NEXT:    ret void

; PTX: .target sm_90
; PTX: .visible .global .align 4 .u32 k_threads = 256;
; PTX: .func k_main(
; PTX: atom.add.u64
; PTX: .visible .entry __tc_kernel_k(
; PTX-NEXT: .param .u64 .ptr .align 1 __tc_kernel_k_param_0,
; PTX-NEXT: .param .u64 __tc_kernel_k_param_1,
; PTX-NEXT: .param .u64 .ptr .align 1 __tc_kernel_k_param_2
; PTX-NEXT: )
; PTX: call.uni k_main, (param0, param1, param2);
